"""Reproduction commands dgc-iris, dgc-consensus, dgc-hetero, dgc-outliers (spec 003 §4, §5.3,
§7.2): registration, the splits, the scoring, the row format through the command, and two
exact properties on reduced runs (Huber beats k-means on noisy Iris; consensus slope)."""

import json

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components
from sklearn.datasets import load_iris

from simulations.cli import main
from simulations.dgc import (
    MIN_SHARE,
    REFERENCE,
    DGCData,
    heterogeneous_federation,
    homogeneous_iris,
    noisy_iris,
    score_centres,
)
from simulations.framework import (
    EXPERIMENTS,
    ROW_KEYS,
    run_experiment,
    summarize,
)

NAMES = ("dgc-iris", "dgc-consensus", "dgc-hetero", "dgc-outliers")


def test_registered_listed_and_reference_values_labelled(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out
        assert EXPERIMENTS[name].per_run_data
    iris = EXPERIMENTS["dgc-iris"]
    assert [s.label for s in iris.settings] == ["warm start", "random"]
    assert len(iris.methods) == 16 + 4
    ref = iris.paper[("dgc-km-rho100", "warm start", "consensus")]
    assert ref.mean == 0.121 and "NOT the paper's" in ref.note
    assert iris.paper[("dgc-km-rho100", "random", "accuracy")].std == 0.002
    assert "NOT the paper's" in iris.source
    cons = EXPERIMENTS["dgc-consensus"]
    assert [s.label for s in cons.settings] == ["rho=10", "rho=100", "rho=1000"]
    assert cons.paper[("dgc-hl", "rho=1000", "consensus")].mean == REFERENCE["huber"][1000.0][1]
    assert not EXPERIMENTS["dgc-hetero"].paper and not EXPERIMENTS["dgc-outliers"].paper


def test_homogeneous_split_and_starts():
    X, y = load_iris(return_X_y=True)
    for init in ("warm", "random"):
        d = homogeneous_iris(init, seed=3)
        assert np.array_equal(np.sort(d.X, axis=0), np.sort(X, axis=0))
        assert d.adjacency.sum(axis=1).tolist() == [2.0] * 10
        assert d.init.shape == (10, 3, 4) and d.central_init.shape == (3, 4)
        for X_i, y_i, c in zip(d.clients, d.labels, d.init, strict=True):
            assert np.bincount(y_i).tolist() == [5, 5, 5]
            rows = [np.flatnonzero((X_i == r).all(axis=1)) for r in c]
            assert all(len(r) for r in rows)  # every start is a local row
            if init == "warm":  # one of every class
                assert sorted(y_i[r[0]] for r in rows) == [0, 1, 2]
        assert d.sklearn_init == (init == "random")
    # the same seed gives the same split under both starts
    assert np.array_equal(homogeneous_iris("warm", seed=3).X, homogeneous_iris("random", seed=3).X)


def test_heterogeneous_splits():
    d = heterogeneous_federation("iris", seed=1)
    assert len(d.X) == 150 and d.n_classes == 3
    assert all(len(np.unique(y_i)) == 2 for y_i in d.labels)
    assert connected_components(d.adjacency)[0] == 1
    d = heterogeneous_federation("digits", seed=1)
    assert len(d.X) == 1797 and d.X.max() == 1.0 and d.init.shape == (10, 10, 64)
    assert all(3 <= len(np.unique(y_i)) <= 5 for y_i in d.labels)
    assert all(np.bincount(y_i)[np.unique(y_i)].min() >= MIN_SHARE for y_i in d.labels)
    assert np.unique(d.y).tolist() == list(range(10))
    assert connected_components(d.adjacency)[0] == 1
    ring = heterogeneous_federation("iris", "ring", seed=1)
    assert ring.adjacency.sum() == 20


def test_score_centres_by_hand():
    d = homogeneous_iris("warm", seed=0)
    means = np.stack([d.X[d.y == c].mean(axis=0) for c in range(3)])
    s = score_centres(d, np.stack([means] * 10))
    assert s["consensus"] == 0.0 and np.isnan(s["cost-increases"])
    assert s["accuracy"] == pytest.approx(0.9266666, abs=1e-6)  # nearest class mean on Iris
    one = score_centres(d, means[None], costs=[3.0, 2.0, 2.0, 2.5])
    assert np.isnan(one["consensus"]) and one["cost-increases"] == 1.0
    assert one["ari"] == pytest.approx(s["ari"])
    n = noisy_iris(seed=0)
    assert isinstance(n, DGCData) and len(n.X) == 170 and n.outlier.sum() == 20
    assert all(X_i.shape == (17, 4) for X_i in n.clients)
    perfect = score_centres(n, np.stack([n.good_means] * 10))
    assert perfect["centre-error"] < 1e-12 and perfect["outlier-precision"] == 1.0


def test_outliers_through_the_command(tmp_path):
    # full T = 1000, one run: Huber's centres stay at the good means, k-means' and ADMM's not
    assert main(["reproduce", "dgc-outliers", "--runs", "1", "--out", str(tmp_path), "-q",
                 "--no-plot"]) == 0
    rows = json.loads((tmp_path / "dgc-outliers.json").read_text())
    assert len(rows) == 3 * 3
    for row in rows:
        assert tuple(row)[: len(ROW_KEYS)] == ROW_KEYS
        assert row["runs"] == 1 and row["paper"] is None
    err = {r["method"]: r["ours_mean"] for r in rows if r["metric"] == "centre-error"}
    assert err["dgc-hl-rho10"] < 2.0 < 5.0 < min(err["dgc-km-rho10"], err["admm-km"])
    checks = json.loads((tmp_path / "dgc-outliers.checks.json").read_text())
    assert len(checks) == 4
    assert all(c["holds"] for c in checks if "closer" in c["claim"])
    md = (tmp_path / "dgc-outliers.md").read_text()
    assert "## centre-error" in md and "| dgc-hl-rho10 |" in md


def test_consensus_slope_on_a_reduced_run():
    exp = EXPERIMENTS["dgc-consensus"]
    rows = summarize("dgc-consensus", run_experiment("dgc-consensus", runs=1,
                                                     methods=["dgc-km"]),
                     rounds=1, tol=0, seed=0)
    assert [(r["setting"], r["metric"]) for r in rows] == [
        (s, m) for s in ("rho=10", "rho=100", "rho=1000")
        for m in ("consensus", "cost-increases")]
    checks = exp.checks(rows)
    assert len(checks) == 2 and all(c["holds"] for c in checks), checks
    assert "slope" in checks[0]["detail"]


def test_checks_flag_failures():
    hetero = EXPERIMENTS["dgc-hetero"]
    rows = [{"method": m, "setting": "x", "metric": "ari", "ours_mean": v}
            for m, v in (("dgc-km-rho100", 0.70), ("skl-km", 0.75), ("lgc-km", 0.2))]
    (check,) = hetero.checks(rows)
    assert not check["holds"] and "skl-km 0.750 (-0.050)" in check["detail"]
    rows[0]["ours_mean"] = 0.74
    assert hetero.checks(rows)[0]["holds"]
