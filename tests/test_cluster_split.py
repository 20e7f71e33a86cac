"""Two groups inside one cluster (issue 38 item 4, the core): additive statistics, the rule."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from flwr_clustering.algorithms.cluster_split import (
    axis_histograms,
    main_axes,
    scatter_stats,
    split_clusters,
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
