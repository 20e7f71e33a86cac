"""Two groups inside one cluster (issue 38 item 4, the core): additive statistics, the rule."""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from flwr_clustering.algorithms.cluster_split import (
    axis_histograms,
    check_splits,
    client_histograms,
    client_scatter,
    main_axes,
    pure_check,
    pure_step,
    refine,
    refine_model,
    refine_stats,
    scatter_sse,
    scatter_stats,
    split_and_merge,
    split_clusters,
    withholds,
)


def _check(X, labels, k, parts=4):
    """The split check as a federation of ``parts`` clients computes it (sums of parts)."""
    chunks = np.array_split(np.arange(len(X)), parts)
    stats = [scatter_stats(X[c], labels[c], k) for c in chunks]
    counts, sums, outer = (sum(s[i] for s in stats) for i in range(3))
    bins = main_axes(counts, sums, outer)
    hist = sum(axis_histograms(X[c], labels[c], bins) for c in chunks)
    return split_clusters(hist), hist, bins


def test_the_statistics_are_additive_and_equal_the_pooled_ones():
    X, _ = make_blobs(500, n_features=3, centers=4, random_state=0)
    labels = np.random.default_rng(0).integers(0, 4, len(X))
    pooled = scatter_stats(X, labels, 4)
    _, hist, bins = _check(X, labels, 4, parts=5)
    whole = main_axes(*pooled)
    np.testing.assert_allclose(bins.means, whole.means, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pooled[0], np.bincount(labels, minlength=4))
    np.testing.assert_array_equal(hist, axis_histograms(X, labels, whole))
    assert hist.sum() == len(X)
    # the main axis is the covariance's leading eigenvector
    for j in range(4):
        rows = X[labels == j]
        vector = np.linalg.eigh(np.cov(rows.T, bias=True))[1][:, -1]
        assert abs(vector @ bins.axes[j]) == pytest.approx(1.0, abs=1e-9)


def test_a_centre_between_two_groups_is_found_and_a_good_model_is_not():
    X, y = make_blobs(900, n_features=2, centers=[[0, 0], [8, 0], [0, 8]], cluster_std=1.0,
                      random_state=1)
    # the true clusters: no split
    assert _check(X, y, 3)[0] == []
    # a fixed point of k-means' kind: groups 0 and 1 under one centre, group 2 under two
    bad = np.where(y == 1, 0, y)
    rows2 = np.flatnonzero(y == 2)
    bad[rows2[X[rows2, 0] > 0]] = 1
    found, hist, _ = _check(X, bad, 3)
    assert found == [0], hist
    # one Gaussian, a uniform square: one group each
    rng = np.random.default_rng(2)
    assert _check(rng.normal(size=(800, 2)), np.zeros(800, dtype=np.int64), 1)[0] == []
    assert _check(rng.uniform(size=(800, 2)), np.zeros(800, dtype=np.int64), 1)[0] == []


def test_bad_input_is_refused():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match="complete rows"):
        scatter_stats(np.full((4, 2), np.nan), np.zeros(4, dtype=np.int64), 1)
    with pytest.raises(ValueError, match="labels must lie"):
        scatter_stats(X, np.array([0, 1, 2, 3]), 2)
    with pytest.raises(ValueError, match="n labels"):
        scatter_stats(X, np.zeros(3, dtype=np.int64), 2)


def test_small_or_flat_clusters_are_never_split():
    X = np.array([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])
    labels = np.array([0, 1, 1])
    found, hist, bins = _check(X, labels, 3, parts=1)
    assert found == [] and not bins.axes[0].any() and not bins.axes[2].any()
    assert hist[0].sum() == 0 and hist[2].sum() == 0
    # a minority side below MIN_SIDE_SHARE is an outlier group, not a split
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(size=(950, 2)), rng.normal(size=(50, 2)) + [12, 0]])
    assert _check(X, np.zeros(len(X), dtype=np.int64), 1)[0] == []


# ---------------------------------------------------------------- what clients send, the repair


def _bad_model():
    """Three groups; one centre between groups 0 and 1, two centres in group 2."""
    X, y = make_blobs(900, n_features=2, centers=[[0, 0], [8, 0], [0, 8]], cluster_std=1.0,
                      random_state=1)
    C = np.array([[4.0, 0.0], [-0.7, 8.0], [0.7, 8.0]])
    return X, y, C


def test_a_client_with_a_cluster_under_the_threshold_sends_zeros_in_every_exchange():
    X, y, C = _bad_model()
    rows = np.vstack([X[y == 0][:30], [[0.7, 8.5]]])  # a cluster of one row at this client
    labels = np.argmin(((rows[:, None] - C) ** 2).sum(-1), axis=1)
    assert list(np.bincount(labels, minlength=3)) == [30, 0, 1]
    check = check_splits([X], C)
    # not only the one-row cluster: the client's total row sum (the evaluation's sum-x)
    # minus cluster 0's sum would be that row
    assert withholds(rows, C, 2) and not withholds(rows, C, 1)
    assert all(not a.any() for a in client_scatter(rows, C, threshold=2))
    assert not client_histograms(rows, C, check.bins, threshold=2).any()
    sums, counts, sse = refine_stats(rows, C, threshold=2)
    assert not sums.any() and not counts.any()
    # the SSE is a total over the client (as the evaluation's), sent from 2 rows on
    assert sse == pytest.approx(((rows[:, None] - C) ** 2).sum(-1).min(1).sum(), rel=1e-12)
    assert refine_stats(rows[:1], C, threshold=2)[2] == 0.0
    # below the threshold nothing is withheld; threshold 0 (secure aggregation) neither
    for threshold in (0, 1):
        counts, sums, _ = client_scatter(rows, C, threshold)
        assert counts.sum() == len(rows)
        np.testing.assert_allclose(sums.sum(axis=0), rows.sum(axis=0))
        assert client_histograms(rows, C, check.bins, threshold).sum() == len(rows)
        assert refine_stats(rows, C, threshold)[1].sum() == len(rows)


def test_incomplete_rows_take_no_part():
    X, _, C = _bad_model()
    holey = X.copy()
    holey[::3, 1] = np.nan
    counts, _, _ = client_scatter(holey, C)
    assert counts.sum() == len(X) - len(X[::3])
    sums, counts, sse = refine_stats(np.full((5, 2), np.nan), C)
    assert counts.sum() == 0 and sse == 0.0


def test_the_check_sums_clients_and_its_sse_is_the_models():
    X, _, C = _bad_model()
    parts = np.array_split(X, 4)
    check = check_splits(parts, C)
    assert check.flagged.keys() == {0}
    assert check.counts.sum() == len(X)
    d2 = ((X[:, None] - C) ** 2).sum(-1).min(axis=1)
    assert check.sse == pytest.approx(d2.sum(), rel=1e-10)
    assert scatter_sse(C, *client_scatter(X, C)) == pytest.approx(d2.sum(), rel=1e-10)
    _, _, sse = refine_stats(X, C)
    assert sse == pytest.approx(d2.sum(), rel=1e-12)


def test_split_and_merge_then_lloyd_finds_the_three_groups():
    X, y, C = _bad_model()
    parts = np.array_split(X, 3)
    check = check_splits(parts, C)
    C2 = split_and_merge(C, check)
    assert len(C2) == 3 and not np.array_equal(C2, C)
    # the two centres of group 2 merged into one; group 0 and 1 each got one
    truth = np.array([X[y == g].mean(axis=0) for g in range(3)])
    nearest = np.argmin(((C2[:, None] - truth) ** 2).sum(-1), axis=1)
    assert sorted(nearest) == [0, 1, 2]
    C3, sse, history = refine(pure_step(parts), C2, 20)
    assert sse == min(history)
    assert len(history) < 20  # a fixed point before the cap
    assert np.all(np.diff(history) <= 1e-9 * history[0])  # Lloyd never increases the SSE
    np.testing.assert_allclose(np.sort(C3, axis=0), np.sort(truth, axis=0), atol=1e-9)


def test_refine_model_repairs_poor_kmeans_fixed_points_and_leaves_good_ones():
    repaired = poor = 0
    for centers, d in [(8, 2), (10, 2)]:
        X, _ = make_blobs(1500, n_features=d, centers=centers, center_box=(-20, 20),
                          random_state=0)
        X = (X - X.mean(0)) / X.std(0)
        parts = np.array_split(X, 5)
        best = KMeans(centers, n_init=10, random_state=0).fit(X).inertia_
        for seed in range(6):
            km = KMeans(centers, n_init=1, init="random", random_state=seed).fit(X)
            C, result, info = refine_model(pure_step(parts, 2),
                                           pure_check(parts, 2),
                                           km.cluster_centers_, 20)
            assert result.sse <= km.inertia_ * (1 + 1e-9)
            if km.inertia_ > 1.1 * best:
                poor += 1
                repaired += result.sse <= 1.01 * best and info["repairs"] > 0
            elif km.inertia_ <= 1.001 * best:
                assert info["repairs"] == 0 and info["split"] == []
    assert poor >= 4 and repaired == poor
