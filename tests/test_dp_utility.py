"""The dp-utility command: a table whose no-noise column is exact federated Lloyd."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("dp_accounting")


def test_dp_utility_writes_a_table_that_improves_with_epsilon(tmp_path, capsys):
    from simulations.cli import main

    assert main(["dp-utility", "--runs", "2", "--rounds", "2", "--gaussian-runs", "1",
                 "--out", str(tmp_path)]) == 0
    every = json.loads((tmp_path / "dp-utility.json").read_text())
    rows = [r for r in every if r["data"] != "FedDP-KMeans gaussians"]
    assert {r["data"] for r in rows} == {"garst grid (any beta)", "iris", "wine",
                                         "breast cancer"}
    for name in {r["data"] for r in rows}:
        mine = [r for r in rows if r["data"] == name]
        assert [r["epsilon"] for r in mine] == [0.5, 1.0, 2.0, 4.0, 8.0, "inf"]
        # noise costs: the SSE ratio at the smallest epsilon is above the no-noise one
        assert mine[0]["sse-ratio"] > mine[-1]["sse-ratio"] >= 1.0 - 1e-9
        assert mine[-1]["sigma"] == 0.0 and math.isfinite(mine[0]["sigma"])
    assert "| wine (3," in (tmp_path / "dp-utility.md").read_text()

    # FedDP-KMeans' Gaussian mixture: within the accountant's epsilon, the DP start is
    # within 5 % of k-means' cost at every epsilon, and at 1 as good a partition
    gauss = [r for r in every if r["data"] == "FedDP-KMeans gaussians"]
    ours = {r["epsilon"]: r for r in gauss if r["init"] == "moments"}
    former = {r["epsilon"]: r for r in gauss if r["init"] == "random (former)"}
    assert sorted(ours) == sorted(former) == [0.25, 0.5, 1.0]
    for eps, r in ours.items():
        assert r["accountant-epsilon"] <= eps and former[eps]["accountant-epsilon"] <= eps
        assert r["cost-ratio"] < 1.05 and r["rounds"] == 2 and former[eps]["rounds"] == 10
    assert ours[1.0]["ari"] >= ours[1.0]["kmeans-ari"] - 0.01
    assert "FedDP-KMeans gaussians" in (tmp_path / "dp-utility.md").read_text()
