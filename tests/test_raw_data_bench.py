"""The raw-unit data benchmark (``python -m simulations bench raw-data``): a tiny real run."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from simulations.benchmarks import raw_data
from simulations.benchmarks.bench import main as bench_main

NUMERIC = ("ari", "sse_std", "kmeans_ari", "kmeans_sse_std", "sse_ratio", "ari_minus_kmeans",
           "ari_predict", "warnings", "n_iter", "seconds")


@pytest.fixture(scope="module")
def wine_run(tmp_path_factory):
    """wine, 3 sites, both splits, fkm, scaling standard and none, through the CLI."""
    out = tmp_path_factory.mktemp("raw-data")
    argv = ["raw-data", "--datasets", "wine", "--sites", "3", "--algorithms", "fkm",
            "--out", str(out), "--quiet"]
    assert bench_main(argv) == 0
    with (out / raw_data.CSV_NAME).open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames
        rows = list(reader)
    return out, header, rows


def test_the_csv_has_every_column_and_finite_values(wine_run):
    _, header, rows = wine_run
    assert header == list(raw_data.COLUMNS)
    assert {(r["split"], r["scaling"]) for r in rows} == {
        (s, c) for s in raw_data.SPLITS for c in raw_data.SCALINGS}
    for r in rows:
        assert r["status"] == "ok" and r["error"] == "" and r["options"] == ""
        assert (r["dataset"], r["k"], r["n"], r["d"], r["sites"]) == ("wine", "3", "178", "13",
                                                                     "3")
        for column in NUMERIC:
            assert math.isfinite(float(r[column])), (column, r[column])
        sizes = [int(x) for x in r["site_rows"].split(";")]
        assert sum(sizes) == 178 and min(sizes) >= 2 * 3
        # FKM: every client holds the global model, so predict gives the same labels
        assert float(r["ari_predict"]) == pytest.approx(float(r["ari"]))
        assert float(r["sse_ratio"]) >= 1 - 1e-9  # k-means is the reference optimum here


def test_on_raw_wine_the_default_scaling_beats_none(wine_run):
    _, _, rows = wine_run
    for split in raw_data.SPLITS:
        ari = {r["scaling"]: float(r["ari"]) for r in rows if r["split"] == split}
        assert ari["standard"] > ari["none"] + 0.3, (split, ari)
        ratio = {r["scaling"]: float(r["sse_ratio"]) for r in rows if r["split"] == split}
        assert ratio["standard"] < ratio["none"]
    none = [r for r in rows if r["scaling"] == "none"]
    assert all(int(r["warnings"]) >= 1 and "proline" in r["warning_text"] for r in none)


def test_the_page_has_the_table_and_the_summary(wine_run):
    out, _, rows = wine_run
    md = (out / raw_data.MD_NAME).read_text()
    assert "## wine (k = 3)" in md and "| ARI standard | ARI none |" in md
    assert "medians per algorithm" in md and "--datasets wine" in md
    std = next(r for r in rows if r["split"] == "iid" and r["scaling"] == "standard")
    assert f"| fkm | iid | 3 | {float(std['ari']):.3f} |" in md


def test_splits_cover_the_rows_with_enough_at_every_site():
    y = np.repeat(np.arange(3), [50, 60, 40])
    for split in raw_data.SPLITS:
        parts, draws, why = raw_data.split_rows(y, 5, split, 3, seed=0)
        assert why == "" and draws >= 1
        rows = np.concatenate(parts)
        assert sorted(rows.tolist()) == list(range(len(y)))
        assert min(len(p) for p in parts) >= 6
    parts, _, why = raw_data.split_rows(y, 30, "iid", 3)
    assert parts is None and "fewer than 2k" in why


def test_a_raising_run_is_a_failed_row():
    from sklearn.preprocessing import StandardScaler

    frame, y = raw_data.load("iris")
    frames, ys = [frame.iloc[:75], frame.iloc[75:]], [y[:75], y[75:]]
    scaler = StandardScaler().fit(frame.to_numpy())
    row = raw_data.run_one(frames, ys, scaler, "fkm", 3, "standard", {"max_rounds": -1})
    assert row["status"] == "failed" and row["error"].startswith("ValueError")
    assert math.isnan(row["ari"])


def test_short_error_names_the_privacy_threshold():
    error = ("RuntimeError: the federated run failed: round 1 train: only 7 valid replies, fewer "
             "than min_nodes=10; 3 client(s) withheld their reply ...: client 1: a local "
             "cluster has 1 point(s), fewer than the privacy threshold 2; M-Avg would ...")
    assert raw_data.short_error(error).startswith("3 of 10 sites withheld their reply")
    assert len(raw_data.short_error("x" * 500)) == 160
