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


def _strategy(algorithm, **config):
    from flwr_clustering import registry

    spec = registry.get(algorithm)
    return spec.build_strategy({**spec.options.run_config_defaults(), "k": 2, **config},
                               min_nodes=1, seed=0)


def _seed_upload():
    """A client's 1-D rows: 195 near 0 and five at 20..24. The k-means++ seed 24 is a row
    with five rows nearest to it: honest in the paper's round 1, yet no mean of five rows."""
    from flwr_clustering.algorithms.local_centroids import LocalCentroids

    X = np.r_[np.random.default_rng(0).normal(size=(195, 1)), [[20.0], [21], [22], [23], [24]]]
    return X, LocalCentroids(np.array([[24.0]]), np.array([5]), np.array([-1]))


@pytest.mark.parametrize("init, refused", [("paper", False), ("private", True)])
def test_fkm_holds_the_papers_seeds_to_a_rows_bound_and_its_means_to_theirs(init, refused):
    X, upload = _seed_upload()
    strategy = _strategy("fkm", init=init)
    strategy.rules.client_moments = {0: _moments(X)}
    upload = strategy.parse_payload(1, upload.to_arrays())  # the parser says what it claims
    if refused:
        with pytest.raises(ValueError, match="cannot come from its rows"):
            strategy.check_reply("train", 0, {"num-examples": len(X)}, upload, {})
    else:
        strategy.check_reply("train", 0, {"num-examples": len(X)}, upload, {})


def test_a_kfed_centre_counted_after_it_moved_is_not_dropped():
    """One-hot column: the 50 rows with a 1 sit exactly on the bound of 50; k-FED counts
    the rows nearest to the centre after its last move (here 52): a row's bound holds."""
    from flwr_clustering.algorithms.local_centroids import LocalCentroids

    X = np.r_[np.ones((50, 1)), np.zeros((150, 1))]
    upload = LocalCentroids(np.array([[1.0]]), np.array([52]), np.array([-1]))
    with pytest.raises(ValueError):  # the count as if it were the partition's
        check_means_within_rows(upload.means, upload.counts, _moments(X))
    strategy = _strategy("kfed")
    strategy.rules.client_moments = {0: _moments(X)}
    strategy.check_reply("train", 0, {"num-examples": len(X)},
                         strategy.parse_payload(1, upload.to_arrays()), {})
    far = LocalCentroids(np.array([[40.0]]), np.array([52]), np.array([-1]))
    with pytest.raises(ValueError, match="cannot come from its rows"):
        strategy.check_reply("train", 0, {"num-examples": len(X)},
                             strategy.parse_payload(1, far.to_arrays()), {})


def test_masked_kmedoids_medoids_are_held_to_a_rows_bound():
    from flwr_clustering.algorithms.masked import MaskedStats

    X, _ = _seed_upload()
    medoid = MaskedStats(np.array([[24.0 * 5]]), np.array([[5.0]]))  # size x medoid
    arrays = [medoid.sums, medoid.counts]
    strategy = _strategy("masked-federated", **{"local-algorithm": "kmedoids"})
    strategy.rules.client_moments = {0: _moments(X)}
    strategy.check_reply("train", 0, {"num-examples": len(X)},
                         strategy.parse_payload(1, arrays), {})
    means = _strategy("masked-federated")
    means.rules.client_moments = {0: _moments(X)}
    with pytest.raises(ValueError, match="cannot come from its rows"):
        means.check_reply("train", 0, {"num-examples": len(X)},
                          means.parse_payload(1, arrays), {})
