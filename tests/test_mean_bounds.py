"""A local mean is bounded by the sums of the rows behind it (Cauchy-Schwarz).

``check_means_within_rows`` holds each mean a client sends to what any ``m`` of its ``n``
declared rows allow: within ``sd * sqrt((n - m) / m)`` of their mean, per feature. Every
true subset passes (the extreme subsets at the bound included); a mean past it is refused
naming the mean, the feature and both distances.
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_clustering.algorithms.local_centroids import RowMoments, check_means_within_rows


def _moments(X, center=None, scale=None):
    return RowMoments.from_sums(np.full(X.shape[1], len(X)), X.sum(0), np.square(X).sum(0),
                                center, scale)


def test_every_subset_mean_passes_the_extreme_ones_at_the_bound():
    rng = np.random.default_rng(0)
    X = rng.lognormal(size=(500, 3)) * [1.0, 100.0, 1e-3]
    rows = _moments(X)
    for m in (1, 2, 7, 100, 499, 500):
        idx = [rng.choice(500, m, replace=False) for _ in range(20)]
        # the largest and smallest m values of each feature: the farthest means possible
        top = np.sort(X, axis=0)[-m:].mean(0)
        low = np.sort(X, axis=0)[:m].mean(0)
        means = np.vstack([X[i].mean(0) for i in idx] + [top, low])
        check_means_within_rows(means, np.full(len(means), m), rows)
    # the bound is tight: one value far out as its own cluster sits exactly on it
    Y = np.r_[np.zeros((99, 1)), [[10.0]]]
    check_means_within_rows(np.array([[10.0]]), np.array([1]), _moments(Y))


@pytest.mark.parametrize("lie", [1e30, 50.0, -3.0])
def test_a_mean_past_the_bound_is_refused_naming_it(lie):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 2))
    rows = _moments(X)
    means = np.array([X[:100].mean(0), [X[100:].mean(0)[0], lie]])
    with pytest.raises(ValueError) as err:
        check_means_within_rows(means, np.array([100, 100]), rows, names=["age", "income"])
    message = str(err.value)
    assert "its local mean 1 (100 rows)" in message and "'income'" in message, message
    assert "cannot come from its rows" in message


def test_the_bound_holds_in_the_scaled_space_and_skips_unobserved_features():
    rng = np.random.default_rng(2)
    X = rng.normal(50.0, 10.0, size=(300, 2))
    center, scale = np.array([40.0, 60.0]), np.array([5.0, 20.0])
    rows = _moments(X, center, scale)
    Z = (X - center) / scale
    check_means_within_rows(np.vstack([Z[:10].mean(0), Z[10:].mean(0)]),
                            np.array([10, 290]), rows)
    with pytest.raises(ValueError):  # the raw mean is no mean of the scaled rows
        check_means_within_rows(X[:10].mean(0, keepdims=True), np.array([10]), rows)
    check_means_within_rows(np.array([[np.nan, Z[:5, 1].mean()]]), np.array([5]), rows)
