"""A site's own check of its file before it joins (issue 49, item 4).

``python -m flwr_clustering check <file> [--schema schema.json|model.json]`` must say what a
run would see of the file and refuse exactly what the server refuses, in the server's
words: every refusal here is compared with the message the App's server raises for the
same sites in process (the file as client 2, named ``this site`` by the check).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_wine

import flwr_clustering
from flwr_clustering import FederatedClustering
from flwr_clustering.__main__ import main
from flwr_clustering.data.schema import SchemaError
from flwr_clustering.data.site_check import (
    SCHEMA_FORMAT,
    SITE,
    FederationSchema,
    check_file,
    load_schema,
)
from flwr_clustering.testing import run_app

ROOT = Path(__file__).resolve().parents[1]


def _wine_sites(n_sites: int = 3) -> list[pd.DataFrame]:
    frame = load_wine(as_frame=True).frame.drop(columns="target")
    idx = np.array_split(np.random.default_rng(0).permutation(len(frame)), n_sites)
    sites = []
    for i, rows in enumerate(idx):
        f = frame.iloc[rows].reset_index(drop=True)
        f.insert(0, "patient_id", 10_000 + 1000 * i + np.arange(len(f)))
        sites.append(f)
    return sites


def _write(frames: list[pd.DataFrame], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, f in enumerate(frames):
        paths.append(folder / f"site{i}.csv")
        f.to_csv(paths[-1], index=False)
    return paths


def _run(paths: list[Path], out: Path, **config) -> None:
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": len(paths),
          "out-dir": str(out), **config}
    nodes = [{"data-path": str(p)} for p in paths]
    run_app(rc, len(paths), node_configs=nodes)


def _server_words(frames: list[pd.DataFrame], folder: Path, **config) -> str:
    """What the App's server raises for these sites (the last one is the file checked)."""
    with pytest.raises(SchemaError) as info:
        _run(_write(frames, folder), folder / "run", **config)
    return str(info.value).replace(f"client {len(frames) - 1}", SITE)


def _table(out: str) -> dict[str, list[str]]:
    """The report's column table: per column its kind, missing cells and role."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["column", "kind"])
    end = next(i for i, line in enumerate(lines) if line.startswith("missing cells:"))
    return {line.split()[0]: line.split()[1:] for line in lines[start + 1:end]}


def _check(capsys, *args: str) -> tuple[int, str]:
    code = main(["check", *map(str, args)])
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """An App run of three wine sites with a declared index column: its out-dir and files."""
    folder = tmp_path_factory.mktemp("federation")
    frames = _wine_sites()
    paths = _write(frames, folder)
    _run(paths, folder / "run", **{"index-column": "patient_id"})
    return folder, frames, paths


def _refused(capsys, frame: pd.DataFrame, tmp_path: Path, schema: Path) -> str:
    path = tmp_path / "mine.csv"
    frame.to_csv(path, index=False)
    code, out = _check(capsys, path, "--schema", schema)
    assert code == 1, out
    assert out.rstrip().endswith("verdict: this file would be refused")
    return out


def test_an_app_run_writes_schema_json_and_its_sites_files_fit_it(federation, capsys):
    folder, frames, paths = federation
    data = json.loads((folder / "run" / "schema.json").read_text())
    features = [c for c in frames[0].columns if c != "patient_id"]
    assert data == {"format": SCHEMA_FORMAT, "features": features, "categorical-columns": {},
                    "feature-columns": False, "index-column": "patient_id",
                    "scaling": "standard", "missing": "mean", "algorithm": "fkm",
                    "library-version": flwr_clustering.__version__}
    for path in paths:
        code, out = _check(capsys, path, "--schema", folder / "run" / "schema.json")
        assert code == 0, out
        assert out.rstrip().endswith("verdict: this file would be accepted")
        assert f"features a run would take: {len(features)} [" in out
        assert "refused:" not in out


def test_a_clean_file_is_described_by_rows_columns_and_kinds(federation, capsys):
    folder, frames, paths = federation
    code, out = _check(capsys, paths[1], "--schema", folder / "run" / "schema.json")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == (f"{paths[1]}: {len(frames[1])} rows, 14 columns (header row; no "
                        "label column)")
    row = _table(out)
    assert len(row) == 14
    assert row["patient_id"] == ["integer", "0", "index,", "identifier-like"]
    assert row["alcohol"] == ["numeric", "0", "feature"]
    assert row["magnesium"] == ["integer", "0", "feature"]
    assert "missing cells: 0" in lines and "text columns: none" in lines
    assert "identifier-like columns: 'patient_id'" in lines


@pytest.mark.parametrize("case", ["renamed", "missing", "extra", "text"])
def test_a_file_that_does_not_fit_is_refused_in_the_servers_words(federation, case,
                                                                   tmp_path, capsys):
    folder, frames, _ = federation
    mine = frames[2].copy()
    if case == "renamed":
        mine = mine.rename(columns={"hue": "Hue"})
    elif case == "missing":
        mine = mine.drop(columns="ash")
    elif case == "extra":
        mine["colour"] = np.linspace(0, 1, len(mine))
    else:
        mine["hue"] = np.where(mine["hue"] > 1, "high", "low")
    server = _server_words([frames[0], frames[1], mine], tmp_path / "server",
                           **{"index-column": "patient_id"})
    expected = {"renamed": "lacks 'hue' and has 'Hue'", "missing": "lacks 'ash'",
                "extra": "has 'colour', which most sites do not have",
                "text": "text column(s) among the features: 'hue' at this site"}[case]
    assert expected in server
    out = _refused(capsys, mine, tmp_path, folder / "run" / "schema.json")
    assert f"refused: {server}\n" in out
    assert out.count("refused:") == 1


def test_an_undeclared_identifier_is_refused_as_the_server_does(tmp_path, capsys):
    frames = _wine_sites()
    server = _server_words(frames, tmp_path / "server")
    assert server.startswith("column(s) 'patient_id' look like identifiers")
    code, out = _check(capsys, tmp_path / "server" / "site2.csv")
    assert code == 1
    assert f"refused: {server}\n" in out
    # declared, the same file is accepted
    code, out = _check(capsys, tmp_path / "server" / "site2.csv", "--index-column",
                       "patient_id")
    assert code == 0, out


def test_a_text_column_alone_is_refused_as_the_server_does(tmp_path, capsys):
    frames = [f.drop(columns="patient_id").assign(city=np.where(np.arange(len(f)) % 2, "Delft",
                                                                "Leiden")) for f in _wine_sites()]
    server = _server_words(frames, tmp_path / "server")
    code, out = _check(capsys, tmp_path / "server" / "site2.csv")
    assert code == 1
    assert f"refused: {server.replace('client 0, client 1, this site', SITE)}\n" in out
    assert "text columns: 'city'" in out
    assert "Leiden" not in out and "Delft" not in out  # names, kinds and counts only
    # declared categorical, or left out with feature-columns, it is accepted
    assert _check(capsys, tmp_path / "server" / "site2.csv",
                  "--categorical-columns", "city")[0] == 0
    features = ",".join(c for c in frames[0].columns if c != "city")
    code, out = _check(capsys, tmp_path / "server" / "site2.csv", "--feature-columns", features)
    assert code == 0 and _table(out)["city"] == ["text", "0", "ignored"]


def test_missing_cells_are_counted_per_column_and_judged_by_the_federations_policy(
        federation, tmp_path, capsys):
    folder, frames, _ = federation
    mine = frames[0].copy()
    mine.loc[[1, 4, 7], "hue"] = np.nan
    mine.loc[[4], "ash"] = np.nan
    path = tmp_path / "gaps.csv"
    mine.to_csv(path, index=False)
    schema_path = folder / "run" / "schema.json"
    code, out = _check(capsys, path, "--schema", schema_path)
    rows = _table(out)
    assert rows["hue"][:2] == ["numeric", "3"] and rows["ash"][:2] == ["numeric", "1"]
    assert rows["alcohol"][:2] == ["numeric", "0"]
    assert "missing cells: 4 in 2 column(s) ('ash', 'hue')" in out
    assert code == 0 and "accepted with missing='mean'" in out  # the App's default
    schema = load_schema(schema_path)
    refusing = dataclasses.replace(schema, missing="refuse").save(tmp_path / "refuse.json")
    code, out = _check(capsys, path, "--schema", refusing)
    assert code == 1
    assert ("refused: 4 missing cell(s) in the features ('ash': 1, 'hue': 3; 3 row(s)): the "
            "federation runs with missing='refuse', so this file would be refused") in out
    for policy in ("mean", "drop", "partial"):
        other = dataclasses.replace(schema, missing=policy).save(tmp_path / f"{policy}.json")
        code, out = _check(capsys, path, "--schema", other)
        assert code == 0, out
        assert f"accepted with missing={policy!r}" in out
    # a file that does not fit is told both: its columns, and its gaps in the features
    path_renamed = tmp_path / "renamed.csv"
    mine.rename(columns={"proline": "Proline"}).to_csv(path_renamed, index=False)
    code, out = _check(capsys, path_renamed, "--schema", refusing)
    refusals = [line for line in out.splitlines() if line.startswith("refused:")]
    assert code == 1 and len(refusals) == 2
    assert "lacks 'proline'" in refusals[0] and refusals[1].startswith("refused: 4 missing")
    # every row with a gap and missing='drop': nothing left to cluster
    mine.loc[:, "ash"] = np.nan
    mine.to_csv(path, index=False)
    code, out = _check(capsys, path, "--schema", tmp_path / "drop.json")
    assert code == 1 and "with missing='drop' none would be clustered" in out


def test_a_model_json_of_an_estimator_fit_works_as_the_schema(federation, tmp_path, capsys):
    folder, frames, paths = federation
    est = FederatedClustering("fkm", n_clusters=3, random_state=0, index_column="patient_id")
    model_path = est.fit(frames).save_model(tmp_path / "model.json")
    # the same schema as the App's run on the same sites
    assert load_schema(model_path) == load_schema(folder / "run" / "schema.json")
    assert load_schema(folder / "run" / "model.json") == load_schema(model_path)
    code, out = _check(capsys, paths[0], "--schema", model_path)
    assert code == 0, out
    renamed = frames[0].rename(columns={"proline": "Proline"})
    with_model = _refused(capsys, renamed, tmp_path, model_path)
    with_schema = _refused(capsys, renamed, tmp_path, folder / "run" / "schema.json")
    refusal = [line for line in with_model.splitlines() if line.startswith("refused:")]
    assert refusal == [line for line in with_schema.splitlines() if line.startswith("refused:")]
    assert "'Proline' may be 'proline'" in refusal[0]


def test_categorical_levels_unknown_to_the_federation_are_counted_not_listed(tmp_path, capsys):
    schema = FederationSchema(("x", "y"), (("region", ("north", "south", "other")),),
                              scaling="standard").save(tmp_path / "schema.json")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=40), "y": rng.normal(size=40),
                          "region": ["north"] * 30 + ["Atlantis"] * 6 + ["El Dorado"] * 4})
    path = tmp_path / "site.csv"
    frame.to_csv(path, index=False)
    code, out = _check(capsys, path, "--schema", schema)
    assert code == 0, out
    assert ("note: categorical column 'region': 10 row(s) hold 2 value(s) the federation did "
            "not agree on (2 levels): they count as 'other'") in out
    assert "Atlantis" not in out and "Dorado" not in out
    assert _table(out)["region"] == ["text", "0", "categorical"]
    server = _server_words(  # a site without the column
        [frame, frame, frame.drop(columns="region")], tmp_path / "server",
        **{"categorical-columns": "region"})
    code, out = _check(capsys, tmp_path / "server" / "site2.csv", "--schema", schema)
    assert code == 1 and f"refused: {server}\n" in out


def test_unreadable_files_and_bad_arguments_exit_2_without_a_cells_value(tmp_path, capsys):
    assert main(["check", str(tmp_path / "absent.csv")]) == 2
    assert "data file not found" in capsys.readouterr().err
    mixed = tmp_path / "mixed.csv"
    pd.DataFrame({"a": ["1.5", "2.5", "secret-value"], "b": [1.0, 2.0, 3.0]}).to_csv(
        mixed, index=False)
    assert main(["check", str(mixed)]) == 2
    err = capsys.readouterr().err
    assert "non-numeric value in column 'a' (data row 3" in err and "secret" not in err
    assert main(["check", str(mixed), "--no-such-option"]) == 2
    assert main(["check", str(mixed), "--header", "sometimes"]) == 2
    not_schema = tmp_path / "other.json"
    not_schema.write_text('{"format": "something else"}')
    assert main(["check", str(mixed), "--schema", str(not_schema)]) == 2
    assert "neither a schema.json nor a model.json" in capsys.readouterr().err


def test_a_row_index_written_with_the_data_is_refused_in_the_loaders_words(tmp_path, capsys):
    frame = _wine_sites()[0].drop(columns="patient_id")
    path = tmp_path / "indexed.csv"
    frame.to_csv(path)  # pandas' to_csv with its index: a column 'Unnamed: 0'
    code, out = _check(capsys, path)
    assert code == 1
    # in the words the server would hear: the file by its name (issue 50)
    assert "refused: indexed.csv: column 'Unnamed: 0' looks like a row index" in out
    assert _check(capsys, path, "--index-column", "Unnamed: 0")[0] == 0


def test_the_command_runs_as_a_process(federation):
    folder, _, paths = federation
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLWR_TELEMETRY_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-m", "flwr_clustering", "check", str(paths[2]),
                           "--schema", str(folder / "run" / "schema.json")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("verdict: this file would be accepted")
    assert "federation: " in done.stdout and "missing='mean'" in done.stdout
    # nothing leaves the machine: the check loads neither Flower nor anything that talks
    script = ("import sys; from flwr_clustering.__main__ import main; "
              f"code = main(['check', {str(paths[2])!r}]); "
              "print(code, sorted({m.split('.')[0] for m in sys.modules} & "
              "{'flwr', 'ray', 'grpc', 'requests', 'urllib3', 'http'}))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert done.stdout.splitlines()[-1] == "1 []", done.stdout + done.stderr


def test_check_file_takes_the_schema_object_too(federation):
    folder, _, paths = federation
    report = check_file(paths[0], load_schema(folder / "run" / "schema.json"))
    assert report.accepted and report.rows == 60 and report.missing == "mean"
    assert report.features[0] == "alcohol" and "patient_id" not in report.features


def test_the_missing_policy_of_a_run_is_its_transforms_else_partial_for_masked_else_refuse():
    from flwr_clustering.data.schema import FeatureTransform
    from flwr_clustering.data.site_check import missing_policy

    assert missing_policy(FeatureTransform(("a",), missing="mean")) == "mean"
    assert missing_policy(FeatureTransform(("a",), missing="drop"),
                          "masked-nearest-centroid") == "drop"
    assert missing_policy(FeatureTransform(("a",)), "masked-nearest-centroid") == "partial"
    assert missing_policy(FeatureTransform(("a",)), "nearest-centroid") == "refuse"


def test_files_without_column_names_are_matched_by_position(tmp_path, capsys):
    schema = FederationSchema(tuple(str(j) for j in range(4)),
                              scaling="standard").save(tmp_path / "schema.json")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "four.npy", rng.normal(size=(40, 4)))
    np.save(tmp_path / "three.npy", rng.normal(size=(40, 3)))
    code, out = _check(capsys, tmp_path / "four.npy", "--schema", schema)
    assert code == 0 and "features a run would take: 4 [0, 1, 2, 3]" in out
    code, out = _check(capsys, tmp_path / "three.npy", "--schema", schema)
    assert code == 1
    assert ("refused: files without column names are matched by position, so every site "
            "needs the same number of columns: most have 4, this site has 3") in out
