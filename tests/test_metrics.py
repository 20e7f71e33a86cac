"""Tests for flwr_clustering.metrics: federated (additive) == centralized, by-hand values."""

import math

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, silhouette_score
from sklearn.metrics.cluster import contingency_matrix

from flwr_clustering.evaluation import (
    aggregate_evaluation_stats,
    label_evaluation_stats,
    local_evaluation_stats,
)
from flwr_clustering.metrics import (
    ari_from_contingency,
    assign_to_nearest,
    centralized_metrics,
    contingency,
    hungarian_accuracy,
    matched_centroid_error,
    matched_centroid_mse,
    model_contingencies,
    nmi_from_contingency,
    per_model_metrics,
    pooled_silhouette,
    purity_from_contingency,
    purity_per_cluster_from_contingency,
    simplified_silhouette,
    simplified_silhouette_sum,
    sse,
    sum_contingencies,
)


def _blobs(seed=0, n=600, k=5, d=3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(k, d))
    y = rng.integers(0, k, size=n)
    X = centers[y] + rng.normal(size=(n, d))
    C = centers + rng.normal(scale=0.5, size=(k, d))
    return X, y, C


def _split(X, y, seed=0):
    """Uneven split with an empty client and a client that lacks most classes."""
    rng = np.random.default_rng(seed)
    few = np.flatnonzero(y <= 1)[:40]  # only classes 0 and 1
    rest = np.setdiff1d(np.arange(len(X)), few)
    rng.shuffle(rest)
    parts = [few, np.array([], dtype=int), *np.array_split(rest, [50, 260, 300])]
    return [(X[p].reshape(-1, X.shape[1]), y[p]) for p in parts]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_federated_equals_centralized(seed):
    X, y, C = _blobs(seed)
    clients = _split(X, y, seed)
    # n_classes left to default on purpose: widths differ per client and get padded
    stats = [local_evaluation_stats(Xi, C, yi) for Xi, yi in clients]
    assert stats[1]["num-examples"] == 0
    assert stats[1]["contingency"].shape == (len(C), 0)
    assert stats[0]["contingency"].shape == (len(C), 2)
    fed = aggregate_evaluation_stats(stats)
    cen = centralized_metrics(X, C, y)

    assert set(fed) == set(cen) | {"ari-client-weighted"}
    assert fed["num-examples"] == cen["num-examples"] == len(X)
    for key in ("ari", "nmi", "purity", "purity-per-cluster", "accuracy"):
        assert fed[key] == cen[key], key
    for key in ("sse", "inertia", "mean-sq-distance", "simplified-silhouette"):
        assert fed[key] == pytest.approx(cen[key], rel=1e-12, abs=1e-12), key

    labels, d2 = assign_to_nearest(X, C)
    assert fed["ari"] == adjusted_rand_score(y, labels)
    assert fed["nmi"] == normalized_mutual_info_score(y, labels)
    assert fed["purity"] == contingency_matrix(y, labels).max(axis=0).sum() / len(X)
    assert cen["sse"] == pytest.approx(d2.sum(), rel=1e-12)
    assert cen["simplified-silhouette"] == pytest.approx(simplified_silhouette(X, C), rel=1e-12)


def test_federated_assignment_is_row_independent():
    X, y, C = _blobs(3)
    labels, d2 = assign_to_nearest(X, C)
    for Xi, idx in ((X[:7], slice(0, 7)), (X[100:101], slice(100, 101))):
        li, di = assign_to_nearest(Xi, C)
        np.testing.assert_array_equal(li, labels[idx])
        np.testing.assert_array_equal(di, d2[idx])
    assert (d2 >= 0).all() and labels.dtype == np.int64


def test_assign_ties_lowest_index_and_empty():
    C = np.array([[0.0], [2.0], [2.0]])
    labels, d2 = assign_to_nearest(np.array([[1.0], [2.0], [5.0]]), C)
    np.testing.assert_array_equal(labels, [0, 1, 1])
    np.testing.assert_array_equal(d2, [1.0, 0.0, 9.0])
    labels, d2 = assign_to_nearest(np.zeros((0, 1)), C)
    assert labels.shape == d2.shape == (0,)


def test_contingency_and_purity_by_hand():
    pred = [0, 0, 0, 1, 1, 2]
    true = [0, 0, 1, 1, 1, 0]
    table = contingency(pred, true, n_clusters=4, n_classes=3)
    expected = np.array([[2, 1, 0], [0, 2, 0], [1, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(table, expected)
    assert table.dtype == np.int64
    # purity = (2 + 2 + 1) / 6
    assert purity_from_contingency(table) == 5 / 6
    assert ari_from_contingency(table) == adjusted_rand_score(true, pred)
    assert nmi_from_contingency(table) == normalized_mutual_info_score(true, pred)


def test_sum_contingencies_pads():
    a = np.array([[1, 2]])
    b = np.array([[0, 0, 3], [4, 0, 0]])
    total = sum_contingencies([a, b])
    np.testing.assert_array_equal(total, [[1, 2, 3], [4, 0, 0]])
    assert total.dtype == np.int64


def test_perfect_permuted_clustering():
    true = np.repeat([0, 1, 2], [5, 3, 4])
    pred = np.array([2, 0, 1])[true]
    table = contingency(pred, true, 3, 3)
    assert ari_from_contingency(table) == 1.0
    assert nmi_from_contingency(table) == pytest.approx(1.0, abs=1e-15)
    assert purity_from_contingency(table) == 1.0


def test_label_metric_edge_cases():
    single = np.array([[4]])  # one cluster, one class: sklearn says 1.0
    assert ari_from_contingency(single) == 1.0 == adjusted_rand_score([0] * 4, [0] * 4)
    assert nmi_from_contingency(single) == 1.0
    one_cluster = np.array([[2, 2]])
    assert ari_from_contingency(one_cluster) == adjusted_rand_score([0, 0, 1, 1], [0] * 4)
    for empty in (np.zeros((3, 2), dtype=int), np.zeros((0, 0))):
        with pytest.raises(ValueError, match="empty"):
            ari_from_contingency(empty)
        with pytest.raises(ValueError, match="empty"):
            purity_from_contingency(empty)
    with pytest.raises(ValueError, match="non-negative integer"):
        ari_from_contingency(np.array([[1, -1]]))


def test_simplified_silhouette_by_hand_1d():
    C = np.array([[0.0], [10.0]])
    X = np.array([[1.0], [4.0], [5.0], [12.0], [0.0]])
    # a, b: (1, 9) (4, 6) (5, 5) (2, 12) (0, 10)
    s = [8 / 9, 2 / 6, 0.0, 10 / 12, 1.0]
    assert simplified_silhouette_sum(X, C) == pytest.approx(sum(s), rel=1e-15)
    assert simplified_silhouette(X, C) == pytest.approx(sum(s) / 5, rel=1e-15)
    # single centroid -> 0; a point on two coincident centroids -> 0 (max(a, b) = 0)
    assert simplified_silhouette_sum(X, C[:1]) == 0.0
    assert simplified_silhouette_sum(np.array([[3.0]]), np.array([[3.0], [3.0]])) == 0.0
    assert sse(X, C) == 1 + 16 + 25 + 4 + 0


def test_matched_centroid_error():
    rng = np.random.default_rng(0)
    C_true = rng.normal(size=(6, 4))
    perm = rng.permutation(6)
    err, match = matched_centroid_error(C_true[perm], C_true)
    assert err == 0.0
    np.testing.assert_array_equal(match, perm)

    C_est = C_true + rng.normal(scale=0.01, size=C_true.shape)
    err, match = matched_centroid_error(C_est, C_true)
    assert err == pytest.approx(np.linalg.norm(C_est - C_true), rel=1e-12)
    np.testing.assert_array_equal(match, np.arange(6))
    err_p, match_p = matched_centroid_error(C_est[perm], C_true)
    assert err_p == pytest.approx(err, rel=1e-12)
    np.testing.assert_array_equal(match_p, perm)

    # more estimated rows than true rows: the extra one is unmatched (-1)
    extra = np.vstack([C_est, [100.0, 100.0, 100.0, 100.0]])
    err_x, match_x = matched_centroid_error(extra, C_true)
    assert err_x == pytest.approx(err, rel=1e-12)
    np.testing.assert_array_equal(match_x, [*range(6), -1])
    # fewer estimated rows: each is matched to its own true centroid
    err_f, match_f = matched_centroid_error(C_est[:3], C_true)
    assert err_f == pytest.approx(np.linalg.norm(C_est[:3] - C_true[:3]), rel=1e-12)
    np.testing.assert_array_equal(match_f, [0, 1, 2])
    with pytest.raises(ValueError, match="features"):
        matched_centroid_error(C_est[:, :2], C_true)


def test_weighted_client_ari_by_hand():
    C = np.array([[0.0], [10.0]])
    # client A: perfect (ARI 1), 4 points
    XA, yA = np.array([[0.0], [1.0], [9.0], [10.0]]), np.array([0, 0, 1, 1])
    # client B: labels [0, 0, 1, 1] vs pred [0, 1, 0, 1] -> ARI -0.5, 4 points
    XB, yB = np.array([[0.0], [10.0], [0.0], [10.0]]), np.array([0, 0, 1, 1])
    # client C: 2 points, both cluster 0 and class 0 -> ARI 1.0
    XC, yC = np.array([[0.0], [1.0]]), np.array([0, 0])
    stats = [local_evaluation_stats(Xi, C, yi, n_classes=2) for Xi, yi in ((XA, yA), (XB, yB))]
    stats += [local_evaluation_stats(XC, C, yC), local_evaluation_stats(np.zeros((0, 1)), C)]
    assert [s["ari-local"] for s in stats[:3]] == [1.0, -0.5, 1.0]
    # the empty client sent no labels -> no label metrics at all
    assert "ari" not in aggregate_evaluation_stats(stats)
    stats[3] = local_evaluation_stats(np.zeros((0, 1)), C, np.zeros(0, dtype=int), n_classes=2)
    assert stats[3]["ari-local"] == 0.0
    np.testing.assert_array_equal(stats[3]["cluster-counts"], [0, 0])
    fed = aggregate_evaluation_stats(stats)
    assert fed["ari-client-weighted"] == (4 * 1.0 + 4 * -0.5 + 2 * 1.0) / 10
    # without "ari-local" the server recomputes it from the client's table
    del stats[1]["ari-local"]
    assert aggregate_evaluation_stats(stats)["ari-client-weighted"] == fed["ari-client-weighted"]


def test_local_stats_keys_and_empty():
    X, y, C = _blobs(4, n=50)
    s = local_evaluation_stats(X, C, y, n_classes=7)
    assert s["num-examples"] == 50 and s["contingency"].shape == (5, 7)
    assert s["cluster-counts"].sum() == 50 and s["cluster-counts"].dtype == np.int64
    np.testing.assert_array_equal(s["contingency"].sum(axis=1), s["cluster-counts"])
    e = local_evaluation_stats(np.zeros((0, 3)), C)
    assert e == {**e, "num-examples": 0, "sse": 0.0, "silhouette-sum": 0.0}
    assert "contingency" not in e
    agg = aggregate_evaluation_stats([e])
    assert agg["num-examples"] == 0 and math.isnan(agg["mean-sq-distance"])


def test_bad_input_messages():
    with pytest.raises(ValueError, match=r"labels_true must be integers in \[0, 2\).*\[0, 5\]"):
        contingency([0, 1, 0], [0, 5, 1], n_clusters=2, n_classes=2)
    with pytest.raises(ValueError, match="labels_true must be integers in"):
        contingency([0], [-1], n_clusters=2, n_classes=2)
    with pytest.raises(ValueError, match="labels_pred must be integers in"):
        contingency([3], [0], n_clusters=2, n_classes=2)
    with pytest.raises(ValueError, match="must hold integers"):
        contingency([0], [0.5], n_clusters=1, n_classes=2)
    with pytest.raises(ValueError, match="differ in length"):
        contingency([0, 0], [0], n_clusters=1, n_classes=1)
    X, y, C = _blobs(5, n=20)
    with pytest.raises(ValueError, match="labels_true must be integers in"):
        local_evaluation_stats(X, C, y, n_classes=2)
    with pytest.raises(ValueError, match="NaN"):
        sse(np.array([[np.nan, 0.0, 0.0]]), C)
    with pytest.raises(ValueError, match="features"):
        assign_to_nearest(X[:, :2], C)
    with pytest.raises(ValueError, match="lack"):
        aggregate_evaluation_stats([{"num-examples": 3, "sse": 1.0}])
    with pytest.raises(ValueError, match="lack"):
        aggregate_evaluation_stats([{"sse": 1.0, "silhouette-sum": 0.0}])
    # label statistics alone (KDC) give the table metrics, no distance metric
    labels_only = aggregate_evaluation_stats([label_evaluation_stats([0, 1, 1], 2, [0, 1, 1])])
    assert labels_only["ari"] == 1.0 and "sse" not in labels_only


def test_pooled_silhouette():
    X, y, C = _blobs(6, n=80)
    labels, _ = assign_to_nearest(X, C)
    assert pooled_silhouette(X, labels) == silhouette_score(X, labels)
    assert math.isnan(pooled_silhouette(X, np.zeros(len(X), dtype=int)))


def test_closed_form_ari_equals_sklearn_exactly_on_random_tables():
    rng = np.random.default_rng(7)
    for _ in range(200):
        k, c = rng.integers(1, 9, size=2)
        table = rng.integers(0, 30, size=(k, c)) * (rng.random((k, c)) < 0.6)
        if table.sum() == 0:
            continue
        true, pred = [], []
        for i in range(k):
            for j in range(c):
                true += [j] * int(table[i, j])
                pred += [i] * int(table[i, j])
        assert ari_from_contingency(table) == adjusted_rand_score(true, pred)


def test_purity_per_cluster_by_hand():
    # cluster 0: 8 of class 0, 2 of class 1 (0.8); cluster 1: 1 point (1.0); cluster 2 empty.
    table = np.array([[8, 2], [0, 1], [0, 0]])
    assert purity_per_cluster_from_contingency(table) == pytest.approx(0.9)
    assert purity_from_contingency(table) == pytest.approx(9 / 11)
    with pytest.raises(ValueError, match="empty"):
        purity_per_cluster_from_contingency(np.zeros((2, 2)))


def test_matched_centroid_mse_is_l2_squared_over_matched_pairs():
    true = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    est = true[[2, 0, 1]] + np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    l2, match = matched_centroid_error(est, true)
    assert l2 == pytest.approx(np.sqrt(5.0))
    assert match.tolist() == [2, 0, 1]
    assert matched_centroid_mse(est, true) == pytest.approx(5.0 / 3)
    # Fewer estimates than true centres: only matched pairs count.
    assert matched_centroid_mse(est[:2], true) == pytest.approx(5.0 / 2)


def test_per_model_metrics_score_every_centre_set_like_sklearn():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(60, 2)), rng.integers(0, 3, 60)
    models = rng.normal(size=(4, 3, 2))
    tables = model_contingencies(X, models, y)
    assert tables.shape == (4, 3, 3) and (tables.sum(axis=(1, 2)) == 60).all()
    # additive over clients: the tables of two halves sum to the pooled ones
    halves = model_contingencies(X[:25], models, y[:25], 3) + model_contingencies(
        X[25:], models, y[25:], 3)
    np.testing.assert_array_equal(halves, tables)
    preds = [np.argmin(((X[:, None] - C[None]) ** 2).sum(-1), axis=1) for C in models]
    acc = [hungarian_accuracy(y, p) for p in preds]
    ari = [adjusted_rand_score(y, p) for p in preds]
    out = per_model_metrics(tables, prefix="user")
    assert out["user-accuracy-mean"] == pytest.approx(np.mean(acc), abs=1e-15)
    assert (out["user-accuracy-min"], out["user-accuracy-max"]) == (min(acc), max(acc))
    assert out["user-ari-mean"] == pytest.approx(np.mean(ari), abs=1e-12)
    # a model with no row scored is skipped, and nothing at all gives no metric
    empty = np.zeros((1, 3, 3), dtype=np.int64)
    assert per_model_metrics(np.concatenate([tables, empty])) == per_model_metrics(tables)
    assert per_model_metrics(empty) == {}
    with pytest.raises(ValueError, match="models"):
        model_contingencies(X, models[0], y)


def test_silhouette_with_unmeasurable_centroids_is_defined_and_finite():
    # A masked client's distances: inf for a centroid with no value on its observed features.
    from flwr_clustering.evaluation import evaluation_stats_from_distances

    inf = np.inf
    d2 = np.array([[1.0, 4.0, inf],   # both nearest measurable: (2 - 1) / 2
                   [4.0, inf, inf],   # one measurable centroid: the limit, 1
                   [inf, inf, inf],   # none measurable: 0, as with a single centroid
                   [0.0, 0.0, inf]])  # a tie at 0: 0
    stats = evaluation_stats_from_distances(d2)
    assert stats["silhouette-sum"] == 0.5 + 1.0 + 0.0 + 0.0
    # finite distances keep the plain formula bit for bit
    rng = np.random.default_rng(0)
    X, C = rng.normal(size=(50, 3)), rng.normal(size=(4, 3))
    d2 = ((X[:, None, :] - C[None]) ** 2).sum(axis=2)
    two = np.sqrt(np.sort(d2, axis=1)[:, :2])
    assert evaluation_stats_from_distances(d2)["silhouette-sum"] == math.fsum(
        (two[:, 1] - two[:, 0]) / two[:, 1])
