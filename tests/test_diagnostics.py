"""Diagnostics of every run (issue 21, item 1): each degenerate result is detected, logged as
one WARNING naming the cause and the option to change, and kept in ``warnings_`` /
``result.json["warnings"]``; a healthy run has none."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, load_wine, make_blobs
from sklearn.preprocessing import StandardScaler

from flwr_clustering.diagnostics import (
    CONSENSUS_RTOL,
    data_scale,
    distinct_centres,
    non_finite_entries,
    nonempty_clusters,
    pooled_counts,
    total_sum_of_squares,
    warnings_from,
)
from flwr_clustering.estimator import FederatedClustering
from flwr_clustering.evaluation import local_evaluation_stats


def _iid(X, n_clients, seed=0):
    return np.array_split(X[np.random.default_rng(seed).permutation(len(X))], n_clients)


def _fit(caplog, algorithm, k, parts, **options):
    """Fit, and return the estimator and the library's WARNING lines of the fit."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flwr_clustering"):
        est = FederatedClustering(algorithm, k, **options).fit(parts)
    lines = [r.getMessage() for r in caplog.records
             if r.name.startswith("flwr_clustering") and r.levelno == logging.WARNING]
    return est, lines


def _warned_once(est, lines, *needles):
    """Exactly one of the estimator's warnings holds every needle, logged exactly once."""
    hits = [w for w in est.warnings_ if all(n in w for n in needles)]
    assert len(hits) == 1, (needles, est.warnings_)
    assert lines.count(hits[0]) == 1, (hits[0], lines)
    return hits[0]


# ------------------------------------------------------------------ pure functions
def test_total_sum_of_squares_is_exact_from_client_sums():
    rng = np.random.default_rng(0)
    X = rng.normal(1e4, 3.0, size=(301, 5))  # far from the origin: no cancellation
    C = X[:4]
    parts = [X[:100], X[100:100], X[100:250], X[250:]]  # one empty client
    stats = [local_evaluation_stats(p, C) for p in parts]
    sst = total_sum_of_squares(stats)
    assert sst == pytest.approx(float(np.sum((X - X.mean(axis=0)) ** 2)), rel=1e-10)
    assert data_scale(sst, len(X)) == pytest.approx(np.sqrt(sst / len(X)))
    counts = pooled_counts(stats, 4)
    assert counts.sum() == len(X) and nonempty_clusters(counts) == np.count_nonzero(counts)
    assert total_sum_of_squares([{k: v for k, v in s.items() if k != "sum-x"}
                                 for s in stats]) is None


def test_distinct_centres_merge_below_the_relative_tolerance():
    C = np.array([[0.0, 0.0], [1e-9, 0.0], [2e-9, 0.0], [5.0, 5.0]])
    assert distinct_centres(C, scale=1.0) == 2  # transitive: 0 ~ 1e-9 ~ 2e-9
    assert distinct_centres(C, scale=None) == 4  # without a scale only equal centres merge
    assert distinct_centres(np.array([[0.0, np.nan], [0.0, np.nan]]), 1.0) == 2
    assert non_finite_entries(np.array([[0.0, np.nan], [np.inf, 1.0]])) == 2


def test_warnings_name_the_cause_and_the_option():
    diag = {"k": 4, "centroids": 4, "non-finite-entries": 2, "distinct-centres": 1,
            "distinct-tolerance": 1e-6, "non-empty-clusters": 3, "round-cap-hit": True,
            "rounds": 20, "last-shift": 0.5, "tol": 1e-6,
            "absent": {"client 1 (node 101)": "failed: below the privacy threshold 2",
                       "client 2 (node 102)": "did not reply within round-timeout=5 s"},
            "consensus-distance": 3.0, "consensus-relative": 2 * CONSENSUS_RTOL}
    advice = {"non-finite": ("k-local",), "collapse": ("fuzzifier",), "empty": ("k",),
              "round-cap": ("max-rounds", "tol"), "withheld": ("privacy-threshold",),
              "consensus": ("rho", "iterations")}
    out = warnings_from(diag, advice, "X")
    assert len(out) == 7 and all(w.startswith("X: ") for w in out)
    text = "\n".join(out)
    for needle in ("2 NaN/inf", "'k-local'", "1 distinct centres of 4", "'fuzzifier'",
                   "3 of 4 clusters", "round cap (20 rounds)", "'max-rounds' or 'tol'",
                   "withheld", "'privacy-threshold'", "round-timeout", "consensus", "'rho'"):
        assert needle in text, needle
    assert warnings_from({"k": 4, "centroids": 4, "distinct-centres": 4,
                          "non-empty-clusters": 4, "absent": {}}, advice) == []


def test_a_near_empty_cluster_is_warned_about_as_an_empty_one():
    # the FeCA case on breast cancer: clusters of 566 and 3 rows
    base = {"k": 2, "centroids": 2, "distinct-centres": 2, "non-empty-clusters": 2,
            "absent": {}}
    out = warnings_from({**base, "cluster-counts": [566, 3]}, {"empty": ("k-local", "k")},
                        "FeCA")
    assert out == ["FeCA: 1 cluster(s) hold almost no row (3 of 569 rows; below 5% of the "
                   "average cluster of 284): a centre that won next to nothing, as an empty "
                   "one; options to change: 'k-local' or 'k'"]
    # an unequal but real split is not flagged (15 rows = 5.3 % of the average of 284)
    assert warnings_from({**base, "cluster-counts": [554, 15]}, {}) == []


# ------------------------------------------------------------- runs that warn
def test_ffcm_collapse_on_digits_is_reported(caplog):
    X = load_digits().data
    est, lines = _fit(caplog, "ffcm", 10, _iid(X, 10), fuzzifier=2.0)  # the paper's m
    d = est.diagnostics_
    assert d["distinct-centres"] == 1 and d["centroids"] == 10
    assert d["sse-ratio"] == pytest.approx(1.0, abs=1e-6)  # one centre at the grand mean
    _warned_once(est, lines, "collapsed", "'fuzzifier'")


def test_ffcm_default_fuzzifier_does_not_collapse_on_digits(caplog):
    """The default m is chosen from the dimension (1.05 for 64 features): no collapse."""
    X = load_digits().data
    est, lines = _fit(caplog, "ffcm", 10, _iid(X, 10))
    d = est.diagnostics_
    assert d["distinct-centres"] == 10 and d["non-empty-clusters"] == 10
    assert 1.04 < est.strategy_.fuzzifier < 1.06
    km = KMeans(10, n_init=10, random_state=0).fit(X)
    sse = float(np.min(((X[:, None, :] - est.cluster_centers_[None]) ** 2).sum(-1), axis=1).sum())
    assert sse <= 1.10 * km.inertia_
    assert est.warnings_ == [] and lines == []


def test_kfed_empty_centre_is_reported(caplog):
    X, _ = make_blobs(4000, centers=16, n_features=10, random_state=2)
    est, lines = _fit(caplog, "kfed", 16, _iid(X, 10, seed=2), random_state=2,
                      scaling="none")
    d = est.diagnostics_
    assert d["non-empty-clusters"] == 15 and sum(d["cluster-counts"]) == 4000
    assert d["cluster-counts"].count(0) == 1
    _warned_once(est, lines, "15 of 16 clusters are non-empty", "'k-local'")


def test_dgc_without_consensus_is_reported(caplog):
    X = StandardScaler().fit_transform(load_wine().data)
    est, lines = _fit(caplog, "dgc", 3, _iid(X, 5), rho=1.0, iterations=5)
    d = est.diagnostics_
    assert d["consensus-relative"] > CONSENSUS_RTOL
    assert d["consensus-distance"] == pytest.approx(d["consensus-relative"] * d["data-scale"])
    _warned_once(est, lines, "did not reach consensus", "'rho' or 'iterations'")


def test_masked_nan_entry_is_reported(caplog):
    X, _ = make_blobs(400, centers=3, n_features=4, cluster_std=0.3, random_state=0)
    parts = [p.copy() for p in np.array_split(X, 4)]
    for p in parts:
        p[:, 3] = np.nan  # no client observes feature 3
    est, lines = _fit(caplog, "masked-federated", 3, parts)
    assert est.diagnostics_["non-finite-entries"] == 3 == np.isnan(est.cluster_centers_).sum()
    _warned_once(est, lines, "3 NaN/inf entries", "'k'")


def test_mavg_client_withheld_under_the_privacy_threshold_is_reported(caplog):
    X, _ = make_blobs(400, centers=3, n_features=2, cluster_std=0.3, random_state=0)
    parts = np.array_split(X, 4)
    parts[3] = np.vstack([parts[3], [[100.0, 100.0]]])  # a one-point cluster on client 3
    est, lines = _fit(caplog, "mavg", 3, parts, min_nodes=2)
    d = est.diagnostics_
    assert d["withheld"] == 1 and d["dropped"] == 0
    assert list(d["absent"]) == ["client 3 (node 103)"]
    assert "privacy threshold" in d["absent"]["client 3 (node 103)"]
    assert est.history_[0]["withheld"] == 1 and est.history_[0]["dropped"] == 1
    _warned_once(est, lines, "1 client(s) withheld", "'privacy-threshold'")


def test_fkm_client_whose_clusters_are_all_under_the_privacy_threshold_is_reported(caplog):
    X, _ = make_blobs(600, centers=3, n_features=2, cluster_std=0.5, random_state=0)
    parts = [*_iid(X[:-1], 3), X[-1:]]  # client 3 holds one row: it can never upload it
    est, lines = _fit(caplog, "fkm", 3, parts)
    assert est.diagnostics_["empty-uploads"] == 1
    assert all(h["empty-uploads"] == 1 for h in est.history_)
    assert est.diagnostics_["absent"] == {}  # it replied, with nothing
    _warned_once(est, lines, "1 client(s) uploaded no centroid", "'privacy-threshold'")


def test_fkm_round_cap_is_reported(caplog):
    X, _ = make_blobs(1000, centers=10, n_features=5, cluster_std=2.0, random_state=0)
    est, lines = _fit(caplog, "fkm", 10, np.array_split(X, 4), max_rounds=2)
    d = est.diagnostics_
    assert d["round-cap-hit"] and d["converged"] is False and d["rounds"] == 2
    assert d["last-shift"] > d["tol"]
    _warned_once(est, lines, "round cap (2 rounds)", "'max-rounds' or 'tol'")


# ------------------------------------------------------------ runs that do not
@pytest.mark.parametrize("algorithm", ["fkm", "feca", "ffcm"])
def test_separated_blobs_match_kmeans_without_warning(caplog, algorithm):
    X, _ = make_blobs(2000, centers=8, n_features=10, random_state=0)
    est, lines = _fit(caplog, algorithm, 8, _iid(X, 4))
    km = KMeans(8, n_init=10, random_state=0).fit(X)
    d = est.diagnostics_
    assert d["sse"] <= 1.10 * km.inertia_
    assert d["sse-ratio"] == pytest.approx(km.inertia_ / np.sum((X - X.mean(0)) ** 2),
                                           rel=0.10)
    assert d["non-empty-clusters"] == d["distinct-centres"] == d["centroids"] == 8
    assert d["non-finite-entries"] == 0 and d["absent"] == {}
    assert d["largest-cluster-share"] == pytest.approx(1 / 8, abs=0.01)
    if algorithm != "feca":  # iterative, with a tol
        assert d["converged"] is True and not d["round-cap-hit"]
    assert est.warnings_ == [] and lines == []
    json.dumps(d, allow_nan=False)  # plain JSON values (Python scalars, lists, dicts)


def test_without_the_final_evaluation_nothing_is_guessed(caplog):
    X, _ = make_blobs(600, centers=3, n_features=3, cluster_std=0.5, random_state=0)
    est, lines = _fit(caplog, "fkm", 3, _iid(X, 3), evaluate=False)
    d = est.diagnostics_
    assert d["non-empty-clusters"] is None and d["cluster-counts"] is None
    assert d["sse"] is None and d["sst"] is None and d["sse-ratio"] is None
    assert d["distinct-centres"] == 3 and d["data-scale"] > 0  # from the centres
    assert est.warnings_ == [] and lines == []


def test_a_strategy_keeps_diagnostics_of_the_final_evaluation_only():
    """Per-round evaluations with statistics, a final one without: no stale counts."""
    from flwr_clustering.clients.fkm import FedKMeansClient
    from flwr_clustering.strategies.fkm import FedKMeans
    from flwr_clustering.testing import InProcessGrid, client_app_for

    X, _ = make_blobs(300, centers=3, n_features=2, cluster_std=0.5, random_state=0)
    app = client_app_for(FedKMeansClient, _iid(X, 3))
    strategy = FedKMeans(3, min_nodes=3, max_rounds=3, tol=-1.0, evaluate=False,
                         evaluate_every_round=True)
    strategy.start(grid=InProcessGrid(app, 3))
    assert strategy.diagnostics["cluster-counts"] is None
    assert strategy.diagnostics["converged"] is None  # tol < 0: no convergence test
    assert strategy.warnings == []


def test_kdc_reports_its_parameters_and_cores(caplog):
    from sklearn.datasets import make_moons

    X, _ = make_moons(600, noise=0.05, random_state=0)
    est, _ = _fit(caplog, "kdc", 2, _iid(X, 3), sample_size=300, t=50)
    d = est.diagnostics_
    assert d["auto"] is True and d["psi"] >= 2 and 0 < d["tau"] <= 1
    assert d["cores"] == len(d["core-sizes"]) >= 2
    assert d["non-empty-clusters"] == 2 and sum(d["cluster-counts"]) == 600


def test_result_json_carries_diagnostics_and_warnings(tmp_path):
    from flwr_clustering.testing import run_app

    rc = {"algorithm": "fkm", "dataset": "blobs", "n-samples": 600, "centers": 3, "k": 3,
          "partitioner": "iid", "min-nodes": 3, "max-rounds": 1,
          "out-dir": str(tmp_path / "run")}
    run_app(rc, 3)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["diagnostics"]["round-cap-hit"] is True
    assert len(result["warnings"]) == 1 and "'max-rounds'" in result["warnings"][0]


def test_a_client_below_the_privacy_threshold_sends_no_row_sum():
    from flwr_clustering.evaluation import local_evaluation_stats

    C = np.zeros((2, 3))
    one = local_evaluation_stats(np.array([[1.0, 2.0, 3.0]]), C)  # sum-x would be the row
    assert "sum-x" not in one and "sst-local" not in one and one["num-examples"] == 1
    assert "sum-x" not in local_evaluation_stats(np.ones((4, 3)), C, min_rows=5)
    two = local_evaluation_stats(np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]), C)
    np.testing.assert_array_equal(two["sum-x"], [4.0, 4.0, 4.0])
    # the server then has no exact SST (and guesses the scale from the centres)
    assert total_sum_of_squares([one, two]) is None


# ------------------------------------------------------------------ Lloyd gain
def _pooled_lloyd_gain(X, C):
    d2 = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    labels = d2.argmin(1)
    sse = d2.min(1).sum()
    moved = C.copy()
    for j in range(len(C)):
        if (labels == j).any():
            moved[j] = X[labels == j].mean(0)
    return (sse - ((X - moved[labels]) ** 2).sum()) / sse


def test_lloyd_gain_is_the_exact_sse_decrease_of_one_lloyd_step():
    from flwr_clustering.diagnostics import lloyd_gain

    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(c, 1.0, (60, 3)) for c in (0.0, 6.0, 12.0)])
    C = np.array([[1.0, 0.5, 0.0], [5.0, 6.5, 6.0], [13.0, 12.0, 11.0]])
    parts = np.array_split(X[rng.permutation(len(X))], 4)
    stats = [local_evaluation_stats(p, C) for p in parts]
    gain, clusters = lloyd_gain(stats)
    assert clusters == 3
    assert gain == pytest.approx(_pooled_lloyd_gain(X, C), rel=1e-10)
    # at the means of the clusters (one Lloyd step done) there is nothing left to gain
    labels = (((X[:, None, :] - C[None]) ** 2).sum(-1)).argmin(1)
    means = np.stack([X[labels == j].mean(0) for j in range(3)])
    gain0, _ = lloyd_gain([local_evaluation_stats(p, means) for p in parts])
    assert gain0 == pytest.approx(0.0, abs=1e-12)


def test_clusters_under_the_threshold_are_withheld_and_the_gain_is_a_lower_bound():
    from flwr_clustering.diagnostics import lloyd_gain

    C = np.array([[0.0, 0.0], [10.0, 10.0], [20.0, 0.0]])
    rows = np.array([[0.1, 0.0], [0.0, 0.2], [-0.1, 0.1], [9.0, 11.0], [19.0, 1.0],
                     [21.0, 0.5], [20.5, -0.5]])
    r = local_evaluation_stats(rows, C, min_rows=2)["cluster-residuals"]
    # cluster 1 has one row: withheld; alone it would be sum-x minus the others, so the
    # smallest other cluster (2 and 0 hold 3 rows each: the first, 0) is withheld with it
    assert np.isnan(r[1]).all() and np.isnan(r[0]).all() and np.isfinite(r[2]).all()
    r1 = local_evaluation_stats(rows, C, min_rows=1)["cluster-residuals"]
    assert np.isfinite(r1).all()
    # the other client's cluster-0 rows sit far off the centre: a large residual
    other = np.array([[3.0, 3.0], [3.2, 2.8], [3.1, 3.3], [10.5, 9.0], [11.0, 10.0]])
    stats = [local_evaluation_stats(rows, C), local_evaluation_stats(other, C)]
    gain, exact = lloyd_gain(stats)
    assert exact == 1  # only cluster 2 has no withheld part
    X = np.vstack([rows, other])
    labels = (((X[:, None, :] - C[None]) ** 2).sum(-1)).argmin(1)
    n = np.bincount(labels, minlength=3)
    sse = float(sum(s["sse"] for s in stats))
    # clusters 0 and 1: the sent part, less sqrt(n_i0 * sse_0) for client 0's withheld part
    expected = ((X[labels == 2] - C[2]).sum(0) ** 2).sum() / n[2]
    bounded = []
    for j, held in ((0, 3), (1, 1)):
        sent = np.linalg.norm((other[other_labels(other, C) == j] - C[j]).sum(0))
        bounded.append(max(sent - np.sqrt(held * stats[0]["sse"]), 0.0) ** 2 / n[j])
    assert bounded[0] > 0  # the far-off rows show through client 0's withheld part
    assert gain == pytest.approx((expected + sum(bounded)) / sse)
    assert 0 < gain <= _pooled_lloyd_gain(X, C)  # a lower bound, never overstated
    # a client that sends no residuals at all is bounded the same way, cluster by cluster
    bare = {k: v for k, v in stats[0].items() if k != "cluster-residuals"}
    assert lloyd_gain([bare, stats[1]])[0] <= gain


def other_labels(X, C):
    return (((X[:, None, :] - C[None]) ** 2).sum(-1)).argmin(1)


def test_a_poor_one_shot_model_is_reported_by_its_lloyd_gain(caplog):
    """FeCA on breast cancer (IID, seed 0): well-formed clusters, SSE 1.37x k-means'."""
    from sklearn.datasets import load_breast_cancer

    from flwr_clustering.diagnostics import LLOYD_GAIN_RTOL

    X = StandardScaler().fit_transform(load_breast_cancer().data)
    est, lines = _fit(caplog, "feca", 2, _iid(X, 10), random_state=0)
    d = est.diagnostics_
    assert d["non-empty-clusters"] == 2 and d["distinct-centres"] == 2
    C = est.cluster_centers_
    assert d["lloyd-gain-clusters"] == 2
    assert d["lloyd-gain"] == pytest.approx(_pooled_lloyd_gain(X, C), rel=1e-9)
    assert d["lloyd-gain"] > LLOYD_GAIN_RTOL
    sse = float(np.min(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1).sum())
    assert sse > 1.10 * KMeans(2, n_init=10, random_state=0).fit(X).inertia_
    _warned_once(est, lines, "not at the means of their clusters", "'k-local'")


def test_lloyd_gain_with_masked_clients_is_exact_feature_by_feature():
    """Masked clients: each feature's mean over the rows that observe it (masked SSE)."""
    from flwr_clustering.algorithms.masked import masked_squared_distances
    from flwr_clustering.clients.masked import MaskedFederatedClient
    from flwr_clustering.diagnostics import lloyd_gain

    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(c, 1.0, (40, 4)) for c in (0.0, 8.0)])
    C = np.array([[1.0, -0.5, 0.3, 0.0], [7.0, 8.5, 9.0, 8.0]])
    masks = [np.array([1, 1, 1, 0], bool), np.array([0, 1, 1, 1], bool),
             np.array([1, 0, 1, 1], bool)]
    parts = [np.where(m, p, np.nan) for m, p in
             zip(masks, np.array_split(X[rng.permutation(len(X))], 3), strict=True)]
    stats = [MaskedFederatedClient(p, client_id=i).local_stats(C, {})
             for i, p in enumerate(parts)]
    gain, clusters = lloyd_gain(stats)
    # by hand: masked SSE before and after moving every observed coordinate to its mean
    Xa = np.vstack(parts)
    labels = np.concatenate([masked_squared_distances(p, C).argmin(1) for p in parts])
    seen = ~np.isnan(Xa)
    before = after = 0.0
    for j in range(2):
        rows, obs = Xa[labels == j], seen[labels == j]
        for f in range(4):
            v = rows[obs[:, f], f]
            before += ((v - C[j, f]) ** 2).sum()
            after += ((v - v.mean()) ** 2).sum() if len(v) else 0.0
    assert clusters == 2
    assert float(sum(s["sse"] for s in stats)) == pytest.approx(before, rel=1e-12)
    assert gain == pytest.approx((before - after) / before, rel=1e-10)
