"""A site's parsed data file, kept across the messages of its runs (in memory and on disk).

On a real deployment Flower starts a fresh ``flwr-clientapp`` process for every message,
which would read and parse the site's file (``data-path``) again each time (importing
pandas for a CSV). :func:`read_cached` keeps the parse:

- **in memory** (this process: a simulation's or an in-process run's later messages), the
  rows in the run's ``dtype``, a few files at most (:data:`MEMORY_ENTRIES`);
- **on disk**, in the node's cache folder (:func:`default_cache_dir`, or the node
  config's ``data-cache``): one ``.npz`` per file and load options, read with NumPy
  alone (no pandas, no pickle), written atomically (a temporary file, then
  ``os.replace``), readable by the file's owner only (``0600`` at most; the folder
  ``0700``). It holds the parsed rows: the same data as the file.

A copy is used only for the same file as it was parsed: its resolved path, size,
modification and change times (ns), inode and device, and the same load options (the
feature, label and index columns, ``header``, ``allow_nan``) form its key, so a file
that was written since is read again (and, during a run, refused by the integrity check
as before: :mod:`~flwr_clustering.clients.integrity`). ``accept`` lets a run check a copy
against the rows it declared (their fingerprint): a copy it does not accept is dropped
and the file read again. A refused file is never kept (the reader raises before
anything is stored), nor a file that changed while it was read. A copy that cannot be
read (cut, corrupt, from another version, another file's) is ignored and written again,
never trusted: NumPy checks each array's CRC-32 as it reads it, and the copy names its
key inside.

The copy gives what a fresh parse gives, bit for bit: the rows, labels, column names
(names and positions), text and date columns, the dropped index column, whether a CSV
had a header, and the notes the parse logged (logged again when a fresh process reads
the copy).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import stat
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .local_file import LocalFile, read_local_file

__all__ = [
    "CACHE_DIR_ENV",
    "MEMORY_ENTRIES",
    "clear_memory_cache",
    "default_cache_dir",
    "read_cached",
]

logger = logging.getLogger(__name__)

#: Environment variable: the folder of the on-disk copies (default
#: ``$FLWR_HOME/flwr-clustering/data-cache``, ``FLWR_HOME`` being Flower's home folder,
#: ``~/.flwr`` unless set).
CACHE_DIR_ENV = "FLWR_CLUSTERING_CACHE_DIR"

#: Parsed files kept in a process's memory (the most recently used).
MEMORY_ENTRIES = 4

#: The on-disk copy's layout version: a copy of another version is not read.
_FORMAT = 1

_MEMORY: OrderedDict[tuple, LocalFile] = OrderedDict()
_LOCK = threading.Lock()  # (clients of an in-process run may answer in threads)


def default_cache_dir() -> Path:
    """The folder of the on-disk copies when the node config names none.

    ``$FLWR_CLUSTERING_CACHE_DIR`` if set, else ``$FLWR_HOME/flwr-clustering/data-cache``
    (``FLWR_HOME`` is Flower's home folder, ``~/.flwr`` unless set: a SuperNode's own).
    """
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    home = os.environ.get("FLWR_HOME") or str(Path.home() / ".flwr")
    return Path(home).expanduser() / "flwr-clustering" / "data-cache"


def clear_memory_cache() -> None:
    """Forget the parsed files held in this process (what a fresh process starts with)."""
    with _LOCK:
        _MEMORY.clear()


def read_cached(
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
    *,
    dtype: str = "float64",
    cache_dir: Path | None = None,
    accept: Callable[[LocalFile], bool] | None = None,
    reader: Callable[..., LocalFile] = read_local_file,
) -> tuple[LocalFile, str]:
    """Read a site's file, or the copy of its parse kept in memory or on disk.

    Parameters
    ----------
    path : str or os.PathLike
        The file (as the node config names it: the result's ``path``).
    options : mapping
        :func:`~flwr_clustering.data.read_local_file`'s keyword arguments (part of the key).
    dtype : str, default "float64"
        The type of the returned rows (``"float32"``: converted from the parse's float64,
        the only copy held in memory).
    cache_dir : pathlib.Path, optional
        The folder of the on-disk copies; ``None``: none on disk.
    accept : callable, optional
        ``accept(loaded) -> bool`` for a kept copy (the rows in ``dtype``): ``False`` drops
        it and reads the file again (e.g. a copy whose rows are not those the run declared).
    reader : callable, default :func:`~flwr_clustering.data.read_local_file`
        What parses the file: ``reader(path, **options)``.

    Returns
    -------
    loaded : LocalFile
        What ``reader`` gives (its rows in ``dtype``).
    origin : str
        ``"file"`` (parsed now), ``"memory"`` or ``"disk"`` (a kept copy).

    Raises
    ------
    FileNotFoundError, ValueError
        What ``reader`` raises: a file it refuses is never kept.
    """
    key = _stat_key(path)
    if key is None:  # no such file (or not a regular one): the reader says what is wrong
        return _as_dtype(reader(path, **options), dtype), "file"
    opts = json.dumps(dict(options), sort_keys=True, default=repr)
    memory_key = (key, opts, str(dtype))
    with _LOCK:
        kept = _MEMORY.get(memory_key)
    if kept is not None:
        kept = dataclasses.replace(kept, path=Path(path))
        if accept is None or accept(kept):
            _remember(memory_key, kept)
            return kept, "memory"
        with _LOCK:
            _MEMORY.pop(memory_key, None)
    entry = None if cache_dir is None else Path(cache_dir) / _entry_name(key, opts)
    if entry is not None and kept is None:
        parsed = _load_entry(entry, key, opts, Path(path))
        if parsed is not None:
            loaded = _as_dtype(parsed, dtype)
            if accept is None or accept(loaded):
                file_logger = logging.getLogger(read_local_file.__module__)
                for note in parsed.notes:  # what the parse logged, as a fresh parse would
                    file_logger.info("%s", note)
                _remember(memory_key, loaded)
                return loaded, "disk"
    parsed = reader(path, **options)
    loaded = _as_dtype(parsed, dtype)
    if _stat_key(path) == key:  # not written to while it was read
        _remember(memory_key, loaded)
        if entry is not None:
            _write_entry(entry, key, opts, parsed)
    return loaded, "file"


# ------------------------------------------------------------------------------- helpers


def _stat_key(path: str | os.PathLike[str]) -> tuple | None:
    """``(resolved path, size, mtime_ns, ctime_ns, inode, device)``, or None."""
    try:
        resolved = Path(path).resolve(strict=True)
        st = os.stat(resolved)
    except (OSError, RuntimeError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (str(resolved), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _as_dtype(loaded: LocalFile, dtype: str) -> LocalFile:
    if str(dtype) == "float64":
        return loaded
    return dataclasses.replace(loaded, X=np.ascontiguousarray(loaded.X, dtype=str(dtype)))


def _remember(key: tuple, loaded: LocalFile) -> None:
    with _LOCK:
        _MEMORY[key] = loaded
        _MEMORY.move_to_end(key)
        while len(_MEMORY) > MEMORY_ENTRIES:
            _MEMORY.popitem(last=False)


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def _entry_name(key: tuple, opts: str) -> str:
    """``<file and options>-<its state>.npz``: one copy per file and options."""
    return f"{_digest(key[0] + chr(0) + opts, 24)}-{_digest(repr(key[1:]), 16)}.npz"


def _name_ok(name: Any) -> bool:
    return isinstance(name, str) or (isinstance(name, int) and not isinstance(name, bool))


def _text_ok(values: np.ndarray) -> bool:
    """Text values a copy holds exactly: ``str`` (no trailing NUL) or a float NaN."""
    return all((isinstance(v, str) and not v.endswith("\x00"))
               or (isinstance(v, float) and v != v) for v in values)


def _write_entry(entry: Path, key: tuple, opts: str, parsed: LocalFile) -> None:
    """Write the parse's copy atomically; a parse it cannot hold exactly is not written."""
    names = [*parsed.features, *parsed.text, *parsed.dates]
    roles = (parsed.label_column, parsed.index_column)
    if (parsed.X.dtype != np.float64 or not all(map(_name_ok, names))
            or not all(r is None or _name_ok(r) for r in roles)
            or not all(_text_ok(np.asarray(v, dtype=object)) for v in parsed.text.values())):
        return
    meta = {
        "format": _FORMAT, "key": list(key), "options": opts,
        "features": list(parsed.features), "label_column": parsed.label_column,
        "index_column": parsed.index_column, "header": parsed.header,
        "text": list(parsed.text), "dates": list(parsed.dates), "notes": list(parsed.notes),
        "y": parsed.y is not None,
    }
    arrays: dict[str, np.ndarray] = {
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), "X": parsed.X}
    if parsed.y is not None:
        arrays["y"] = parsed.y
    for i, values in enumerate(parsed.text.values()):
        values = np.asarray(values, dtype=object)
        missing = np.array([not isinstance(v, str) for v in values], dtype=bool)
        arrays[f"text{i}"] = np.array(["" if m else v for v, m in zip(values, missing,
                                                                       strict=True)],
                                      dtype=str)
        arrays[f"text{i}-missing"] = missing
    for i, values in enumerate(parsed.dates.values()):
        arrays[f"date{i}"] = np.asarray(values)
    folder = entry.parent
    tmp = None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".partial-", suffix=".npz", dir=folder)  # 0600
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        # the source file's owner bits at most (its rows are in it), readable by its owner
        os.chmod(tmp, (os.stat(key[0]).st_mode & 0o600) | 0o400)
        os.replace(tmp, entry)
        tmp = None
        stem = entry.name.split("-")[0]
        for old in folder.glob(f"{stem}-*.npz"):  # the copies of the file's earlier states
            if old.name != entry.name:
                old.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("data cache %s: cannot keep the parsed copy of the data file (%s): "
                       "every message reads the file again; node config data-cache names "
                       "another folder, or 'none' for no copy on disk", folder,
                       type(exc).__name__)
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _load_entry(entry: Path, key: tuple, opts: str, path: Path) -> LocalFile | None:
    """The copy at ``entry`` if it is the parse of ``key`` with ``opts``, else None."""
    if not entry.is_file():
        return None
    try:
        with np.load(entry, allow_pickle=False) as archive:
            meta = json.loads(archive["meta"].tobytes().decode())
            if (meta.get("format") != _FORMAT or meta.get("key") != list(key)
                    or meta.get("options") != opts):
                raise ValueError("another file's, options' or version's copy")
            X = archive["X"]
            y = archive["y"] if meta["y"] else None
            text = {}
            for i, name in enumerate(meta["text"]):
                values = archive[f"text{i}"].tolist()
                missing = archive[f"text{i}-missing"].tolist()
                column = np.empty(len(values), dtype=object)
                column[:] = [float("nan") if m else v for v, m in zip(values, missing,
                                                                       strict=True)]
                text[name] = column
            dates = {name: archive[f"date{i}"] for i, name in enumerate(meta["dates"])}
        n = len(X)
        if (X.ndim != 2 or X.dtype != np.float64 or X.shape[1] != len(meta["features"])
                or (y is not None and (y.shape != (n,) or y.dtype != np.int64))
                or any(len(v) != n for v in (*text.values(), *dates.values()))):
            raise ValueError("arrays of the wrong shape or type")
        return LocalFile(
            path=path, X=X, y=y, features=tuple(meta["features"]),
            label_column=meta["label_column"], index_column=meta["index_column"],
            header=meta["header"], text=text, dates=dates, notes=tuple(meta["notes"]))
    except Exception as exc:  # noqa: BLE001 - a copy that cannot be read is never trusted
        logger.info("data cache %s: the parsed copy of %s is not usable (%s): reading the "
                    "file again", entry.parent, path.name, type(exc).__name__)
        return None
