"""A site's parsed file kept across messages (issue 52, item 3): data.site_cache.

The copy (in memory, and on disk for a deployment's fresh process per message) gives what
a fresh parse gives, in every field; a changed file is read again; a refused file is never
kept; a corrupt copy is ignored and written again; the copy is its owner's only.
"""

from __future__ import annotations

import logging
import os
import stat

import numpy as np
import pandas as pd
import pytest
from flwr.app import ConfigRecord, Context, RecordDict

from flwr_clustering.app import client_app as app_module
from flwr_clustering.clients.integrity import DECLARED_ROWS_KEY, data_hash
from flwr_clustering.data.local_file import read_local_file, save_local_file
from flwr_clustering.data.schema import SiteDataError
from flwr_clustering.data.site_cache import (
    CACHE_DIR_ENV,
    clear_memory_cache,
    default_cache_dir,
    read_cached,
)


@pytest.fixture(autouse=True)
def _fresh_memory():
    clear_memory_cache()
    yield
    clear_memory_cache()


def _same(a, b) -> None:
    """Every field of two LocalFile equal: values, types, NaN positions, bytes."""
    assert a.path == b.path
    assert a.X.dtype == b.X.dtype and a.X.shape == b.X.shape and a.X.tobytes() == b.X.tobytes()
    assert (a.y is None) == (b.y is None)
    if a.y is not None:
        assert a.y.dtype == b.y.dtype and a.y.tobytes() == b.y.tobytes()
    assert [(type(f), f) for f in a.features] == [(type(f), f) for f in b.features]
    for field in ("label_column", "index_column", "header", "notes"):
        assert (type(getattr(a, field)), getattr(a, field)) == (type(getattr(b, field)),
                                                                 getattr(b, field)), field
    assert list(a.text) == list(b.text) and list(a.dates) == list(b.dates)
    for name in a.text:
        assert a.text[name].dtype == b.text[name].dtype == object
        got = [(type(v), v if isinstance(v, str) else "nan") for v in b.text[name]]
        assert [(type(v), v if isinstance(v, str) else "nan") for v in a.text[name]] == got
        assert all(isinstance(v, str) or v != v for v in b.text[name])
    for name in a.dates:
        assert a.dates[name].dtype == b.dates[name].dtype
        assert a.dates[name].tobytes() == b.dates[name].tobytes()
    assert a.describe() == b.describe()
    assert a.table().names == b.table().names


def _csv(tmp_path, name="site.csv", sep=","):
    frame = pd.DataFrame({"age": [31.5, 40.25, np.nan, 58.0, 23.125],
                          "ward": ["a", "b", None, "c", "a"],
                          "bmi": [22.1, 0.1 + 0.2, 30.0, 27.75, 1e-300],
                          "label": [0, 1, 1, 0, 2]})
    path = tmp_path / name
    frame.to_csv(path, index=False, sep=sep)
    return path


def _files(tmp_path):
    """(path, options) of every kind of file the loader reads."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 3)), rng.integers(0, 3, size=30)
    save_local_file(tmp_path / "a.npz", X, y)
    save_local_file(tmp_path / "b.npy", X)
    np.savetxt(tmp_path / "noheader.csv", X, delimiter=",")
    cases = [(tmp_path / "a.npz", {}), (tmp_path / "b.npy", {"feature_columns": "2,0"}),
             (_csv(tmp_path), {}), (_csv(tmp_path, "semi.csv", sep=";"), {}),
             (tmp_path / "noheader.csv", {"label_column": "none"}),
             (_csv(tmp_path, "declared.csv"), {"feature_columns": "bmi",
                                               "allow_nan": False, "index_column": "none"})]
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # pragma: no cover - pyarrow is a test dependency
        return cases
    frame = pd.DataFrame({"x": [1.5, 2.5, 3.5], "when": pd.to_datetime(
        ["2024-01-01 00:00", None, "2024-03-01 12:00"]).tz_localize("Europe/Amsterdam"),
        "n": pd.array([1, None, 3], dtype="Int64"), "flag": [True, False, True]})
    frame.to_parquet(tmp_path / "c.parquet", index=False)
    return [*cases, (tmp_path / "c.parquet", {})]


def test_the_copy_on_disk_equals_a_fresh_parse_in_every_field(tmp_path, caplog):
    cache = tmp_path / "cache"
    for path, options in _files(tmp_path):
        fresh = read_local_file(path, **options)
        first, origin = read_cached(path, options, cache_dir=cache)
        assert origin == "file"
        _same(fresh, first)
        clear_memory_cache()  # a fresh process: the copy on disk
        with caplog.at_level(logging.INFO, logger="flwr_clustering"):
            caplog.clear()
            again, origin = read_cached(path, options, cache_dir=cache)
        assert origin == "disk", path.name
        _same(fresh, again)
        # the notes the parse logged (a separator, no header) are logged again
        assert [r.getMessage() for r in caplog.records
                if r.name == "flwr_clustering.data.local_file"] == list(fresh.notes)
        _same(fresh, read_cached(path, options, cache_dir=cache)[0])  # memory
    notes = {p.name: read_local_file(p, **o).notes for p, o in _files(tmp_path)}
    assert "separated by ';'" in notes["semi.csv"][0]
    assert "the first line holds numbers only" in notes["noheader.csv"][0]


def test_float32_rows_come_from_the_same_copy(tmp_path):
    path, cache = tmp_path / "a.npy", tmp_path / "cache"
    np.save(path, np.random.default_rng(1).normal(size=(20, 2)))
    loaded, _ = read_cached(path, {}, dtype="float32", cache_dir=cache)
    clear_memory_cache()
    again, origin = read_cached(path, {}, dtype="float32", cache_dir=cache)
    assert origin == "disk" and again.X.dtype == np.float32
    assert again.X.tobytes() == loaded.X.tobytes() == np.load(path).astype(np.float32).tobytes()


def test_a_changed_file_is_read_again_and_its_old_copy_removed(tmp_path):
    path, cache = tmp_path / "a.npy", tmp_path / "cache"
    X = np.arange(12.0).reshape(6, 2) + 0.5
    np.save(path, X)
    read_cached(path, {}, cache_dir=cache)
    assert len(list(cache.glob("*.npz"))) == 1
    np.save(path, X + 50.0)  # the same size: the times, the inode state tell
    os.utime(path, ns=(1, 1))  # even with its times set back, its change time differs
    for keep_memory in (True, False):
        if not keep_memory:
            clear_memory_cache()
        loaded, origin = read_cached(path, {}, cache_dir=cache)
        assert np.array_equal(loaded.X, X + 50.0)
    assert len(list(cache.glob("*.npz"))) == 1  # one copy per file and options
    read_cached(path, {"allow_nan": False}, cache_dir=cache)
    assert len(list(cache.glob("*.npz"))) == 2


def test_a_refused_file_is_never_kept_and_refused_alike(tmp_path):
    path, cache = tmp_path / "bad.csv", tmp_path / "cache"
    path.write_text("a,b\n1,2\n3,x\n")
    refusals = []
    for _ in range(2):
        clear_memory_cache()
        with pytest.raises(SiteDataError) as err:
            read_cached(path, {"feature_columns": "a,b"}, cache_dir=cache)
        refusals.append((err.value.public, str(err.value)))
    with pytest.raises(SiteDataError) as err:
        read_local_file(path, feature_columns="a,b")
    assert refusals == [(err.value.public, str(err.value))] * 2
    assert "column 'b' (data row 2, 1-based)" in refusals[0][0]
    assert not cache.exists() or not list(cache.iterdir())


@pytest.mark.parametrize("damage", ["cut", "garbage", "empty", "another-file"])
def test_a_damaged_copy_is_ignored_and_written_again(tmp_path, damage, caplog):
    path, other, cache = tmp_path / "a.npz", tmp_path / "b.npz", tmp_path / "cache"
    rng = np.random.default_rng(2)
    save_local_file(path, rng.normal(size=(40, 3)), rng.integers(0, 2, size=40))
    save_local_file(other, rng.normal(size=(40, 3)))
    fresh = read_local_file(path)
    read_cached(path, {}, cache_dir=cache)
    read_cached(other, {}, cache_dir=tmp_path / "other")
    (entry,) = cache.glob("*.npz")
    data = entry.read_bytes()
    if damage == "cut":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(data[:200] + bytes(len(data) - 400) + data[-200:])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:  # another file's copy under this name: its key inside says so
        entry.write_bytes(next((tmp_path / "other").glob("*.npz")).read_bytes())
    clear_memory_cache()
    with caplog.at_level(logging.INFO, logger="flwr_clustering"):
        loaded, origin = read_cached(path, {}, cache_dir=cache)
    assert origin == "file"
    _same(fresh, loaded)
    assert any("is not usable" in r.getMessage() and "reading the file again" in r.getMessage()
               for r in caplog.records)
    clear_memory_cache()
    again, origin = read_cached(path, {}, cache_dir=cache)  # written again
    assert origin == "disk"
    _same(fresh, again)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_the_copy_is_its_owners_only_and_written_atomically(tmp_path):
    path, cache = tmp_path / "a.npy", tmp_path / "cache"
    np.save(path, np.ones((4, 2)))
    for mode, expected in ((0o644, 0o600), (0o400, 0o400)):
        os.chmod(path, mode)
        clear_memory_cache()
        read_cached(path, {}, cache_dir=cache)
        (entry,) = cache.glob("*.npz")
        assert stat.S_IMODE(entry.stat().st_mode) == expected
        assert stat.S_IMODE(cache.stat().st_mode) == 0o700
        entry.unlink()
    assert not list(cache.glob(".partial-*"))  # no temporary file left


def test_a_copy_the_run_does_not_accept_is_dropped_and_the_file_read(tmp_path):
    path, cache = tmp_path / "a.npy", tmp_path / "cache"
    np.save(path, np.ones((4, 2)))
    read_cached(path, {}, cache_dir=cache)
    seen = []
    for memory in (True, False):
        if not memory:
            clear_memory_cache()
        loaded, origin = read_cached(path, {}, cache_dir=cache,
                                     accept=lambda f: seen.append(f) or False)
        assert origin == "file" and np.array_equal(loaded.X, np.ones((4, 2)))
    assert len(seen) == 2  # the memory copy, then the disk copy, were offered and refused
    assert read_cached(path, {}, cache_dir=cache, accept=lambda f: True)[1] == "memory"


def test_the_default_folder_is_under_flower_home_and_the_env_names_another(monkeypatch,
                                                                         tmp_path):
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "sn0"))
    assert default_cache_dir() == tmp_path / "sn0" / "flwr-clustering" / "data-cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"


# ------------------------------------------------------------------------------- the App
def test_the_node_config_names_the_folder_or_none(tmp_path):
    path = tmp_path / "a.npz"
    save_local_file(path, np.ones((5, 2)))
    for value, folder in (("none", None), (False, None), ("off", None),
                          (str(tmp_path / "mine"), tmp_path / "mine")):
        node = {"data-path": str(path), "data-cache": value}
        assert app_module.data_cache_dir(node) == folder
        clear_memory_cache()
        app_module.load_node_file(node, 0)
        assert (tmp_path / "mine").exists() == (folder is not None)
    assert app_module.data_cache_dir({"data-path": str(path)}) == default_cache_dir()


def test_the_app_uses_a_copy_only_of_the_rows_the_run_declared(tmp_path, monkeypatch):
    path, cache = tmp_path / "a.npy", tmp_path / "cache"
    X = np.random.default_rng(5).normal(size=(8, 2))
    np.save(path, X)
    node = {"data-path": str(path), "data-cache": str(cache)}
    app_module.load_node_file(node, 0)
    reads = []
    monkeypatch.setattr(app_module, "read_local_file",
                        lambda *a, **k: reads.append(1) or read_local_file(*a, **k))
    for declared, parsed in (((8, data_hash(X)), 0), ((8, data_hash(X) ^ 1), 1),
                             (None, 1)):
        clear_memory_cache()
        app_module.load_node_file(node, 0, declared=declared)
        assert len(reads) == parsed, declared
    # in a run: the state's declaration decides
    ctx = Context(run_id=1, node_id=5, node_config={**node, "partition-id": 0},
                  state=RecordDict({DECLARED_ROWS_KEY: ConfigRecord({"rows": 8,
                                                                      "hash": data_hash(X)})}),
                  run_config={"algorithm": "fkm", "dataset": "local", "k": 2})
    clear_memory_cache()
    client = app_module.client_fn(ctx)
    assert len(reads) == 1 and client.X.tobytes() == X.tobytes()
