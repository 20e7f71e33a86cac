"""Partial FKM (missing='partial'): the partial-distance Lloyd step on rows with NaN.

Against FKM's own federated Lloyd on complete rows (bit for bit), against a centralized
partial-distance Lloyd written from the definition on the pooled rows, and the privacy
filter of the per-feature statistics.
"""

import numpy as np
import pytest

from flwr_clustering.algorithms.ffcm import feature_moments
from flwr_clustering.algorithms.fkm import moment_init, run_fkm
from flwr_clustering.algorithms.fkm_partial import (
    PartialCentroids,
    check_partial_data,
    check_partial_upload,
    fkm_partial_client_update,
    observed_squared_distances,
    partial_dense_totals,
    partial_distance_blocks,
    partial_labels,
    partial_lloyd_from_totals,
    partial_moment_init,
    partial_moments,
    partial_server_step,
    run_fkm_partial,
    sum_moments,
)
from flwr_clustering.algorithms.masked import pooled_masked_squared_distances


def _blobs(seed=0, n=(120, 90, 150), d=5, k=4, share=0.0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 4, size=(k, d))
    clients = []
    for m in n:
        X = centres[rng.integers(k, size=m)] + rng.normal(size=(m, d))
        if share:
            holes = rng.random(X.shape) < share
            holes[holes.all(axis=1), 0] = False  # every row observes a feature
            X[holes] = np.nan
        clients.append(X)
    return clients


def _start(clients, k=4, seed=1):
    X = np.vstack(clients)
    X = X[~np.isnan(X).any(axis=1)]
    return X[np.random.default_rng(seed).choice(len(X), k, replace=False)]


@pytest.mark.parametrize("local_iters", [0, 1, 3])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_complete_rows_equal_fkm_lloyd_bit_for_bit(local_iters, dtype):
    clients = _blobs()
    C0 = _start(clients)
    rounds = 1 if local_iters == 0 else 6
    ours = run_fkm_partial(clients, 4, initial_centroids=C0, max_rounds=rounds, tol=-1,
                           privacy_threshold=3, local_iters=local_iters, dtype=dtype)
    ref = run_fkm(clients, 4, initial_centroids=C0, update="lloyd", max_rounds=rounds,
                  tol=-1, privacy_threshold=3, local_iters=local_iters, dtype=dtype)
    assert len(ours.history) == len(ref.history) == rounds
    for a, b in zip(ours.history, ref.history, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert ours.uploads == ref.uploads


def test_moment_start_on_complete_rows_is_fkm_moment_init():
    clients = _blobs()
    count, total, sumsq = sum_moments([partial_moments(X, 2) for X in clients])
    # FKM's secure start: the clients' feature_moments added in client-id order
    parts = [feature_moments(X) for X in clients]
    n = sum(p[0] for p in parts)
    ours = partial_moment_init(count, total, sumsq, 4, np.random.default_rng(5))
    ref = moment_init(n, sum(p[1] for p in parts), sum(p[2] for p in parts), 4,
                      np.random.default_rng(5))
    assert (count == n).all()
    np.testing.assert_array_equal(ours, ref)


def _central_partial_lloyd(X, C, steps):
    """Partial-distance Lloyd on pooled rows, from the definition (the test's reference)."""
    n, d = X.shape
    C = np.array(C, dtype=float)
    for _ in range(steps):
        labels = np.empty(n, dtype=int)
        for i in range(n):
            seen = ~np.isnan(X[i])
            dist = [((X[i, seen] - c[seen]) ** 2).sum() * d / seen.sum() for c in C]
            labels[i] = int(np.argmin(dist))
        new = C.copy()
        for a in range(len(C)):
            for j in range(d):
                values = X[labels == a, j]
                values = values[~np.isnan(values)]
                if len(values):
                    new[a, j] = values.mean()
        C = new
    return C, labels


def test_with_missing_cells_equals_centralized_partial_lloyd():
    clients = _blobs(seed=3, share=0.25)
    X = np.vstack(clients)
    assert np.isnan(X).any(axis=1).mean() > 0.5  # most rows have a missing cell
    C0 = _start(clients)
    ours = run_fkm_partial(clients, 4, initial_centroids=C0, max_rounds=5, tol=-1,
                           privacy_threshold=0, local_iters=1)
    ref, labels = _central_partial_lloyd(X, C0, 5)
    np.testing.assert_allclose(ours.centroids, ref, rtol=1e-12, atol=1e-12)
    # the labels of the pooled rows on the last centres before the final step
    before = ours.history[-2]
    np.testing.assert_array_equal(partial_labels(X, before), labels)


def test_labels_are_the_masked_labelling_rule():
    clients = _blobs(seed=4, share=0.3)
    X = np.vstack(clients)
    C = _start(clients, seed=2)
    np.testing.assert_array_equal(observed_squared_distances(X, C),
                                  pooled_masked_squared_distances(X, C))
    np.testing.assert_array_equal(partial_labels(X, C),
                                  pooled_masked_squared_distances(X, C).argmin(axis=1))


def test_privacy_filter_of_every_per_feature_statistic():
    X = _blobs(seed=5, n=(60,), share=0.0)[0]
    X[:, 2] = np.nan
    X[:3, 2] = 1.0  # three values of feature 2 in the whole client
    C = _start([X[:, [0, 1, 3, 4]]], k=3)
    C = np.insert(C, 2, 1.0, axis=1)
    up = fkm_partial_client_update(X, C, privacy_threshold=4, local_iters=1)
    assert (up.counts >= 4).all()
    assert ((up.feature_counts == 0) | (up.feature_counts >= 4)).all()
    assert (up.feature_counts[:, 2] == 0).all()  # fewer than 4 values of feature 2 anywhere
    assert (up.means[up.feature_counts == 0] == 0).all()
    assert (up.feature_counts <= up.counts[:, None]).all()
    checked = check_partial_upload(up, n_features=5, privacy_threshold=4, k=3)
    np.testing.assert_array_equal(checked.feature_counts, up.feature_counts)


def test_check_partial_upload_refuses_malformed():
    good = PartialCentroids(np.zeros((2, 3)), np.array([5, 6]), np.array([0, 2]),
                            np.array([[5, 0, 4], [6, 6, 6]]))
    check_partial_upload(good, n_features=3, privacy_threshold=3, k=3)
    bad = [
        (PartialCentroids(good.means, good.counts, good.index, good.feature_counts[:, :2]),
         "feature counts must be integers"),
        (PartialCentroids(good.means, good.counts, good.index,
                          good.feature_counts.astype(float)), "feature counts must be integers"),
        (PartialCentroids(good.means, good.counts, good.index, np.array([[6, 0, 4],
                                                                         [6, 6, 6]])),
         "above its cluster's rows"),
        (PartialCentroids(good.means, good.counts, good.index, np.array([[5, 2, 4],
                                                                         [6, 6, 6]])),
         "below the privacy threshold"),
        (PartialCentroids(good.means, good.counts, np.array([0, 0]), good.feature_counts),
         "same global centroid"),
        (PartialCentroids(good.means, good.counts, np.array([-1, 0]), good.feature_counts),
         "indexed by global centroid"),
        (PartialCentroids(np.full((2, 3), np.nan), good.counts, good.index, good.feature_counts),
         "NaN or inf"),
    ]
    for upload, message in bad:
        with pytest.raises(ValueError, match=message):
            check_partial_upload(upload, n_features=3, privacy_threshold=3, k=3)


def test_rows_without_any_observed_feature_are_refused_without_values():
    X = np.array([[1.5, 2.5], [np.nan, np.nan], [3.25, np.nan]])
    with pytest.raises(ValueError, match=r"1 row\(s\) observe no feature .*row 1") as info:
        check_partial_data(X)
    assert "1.5" not in str(info.value) and "3.25" not in str(info.value)
    with pytest.raises(ValueError, match="inf"):
        check_partial_data(np.array([[np.inf, 1.0]]))


def test_secure_totals_give_the_server_step():
    clients = _blobs(seed=6, share=0.2)
    C0 = _start(clients)
    uploads = [fkm_partial_client_update(X, C0, privacy_threshold=2) for X in clients]
    totals = [partial_dense_totals(u, 4, 5) for u in uploads]
    sums = sum(t[0] for t in totals)
    seen = sum(t[1] for t in totals)
    np.testing.assert_allclose(partial_lloyd_from_totals(sums, seen, C0),
                               partial_server_step(uploads, C0), rtol=1e-13)


def test_moment_start_withholds_rare_features_and_refuses_unseen():
    X = np.array([[1.0, np.nan], [2.0, np.nan], [3.0, 7.0]])
    count, total, sumsq = partial_moments(X, privacy_threshold=2)
    np.testing.assert_array_equal(count, [3, 0])
    np.testing.assert_array_equal(total, [6, 0])
    with pytest.raises(ValueError, match=r"feature\(s\) \[1\]"):
        partial_moment_init(count, total, sumsq, 2, np.random.default_rng(0))


def test_run_from_the_moment_start_recovers_separated_clusters():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(8)
    centres = rng.normal(0, 5, size=(4, 8))
    y = rng.integers(4, size=600)
    X = centres[y] + rng.normal(size=(600, 8))
    holes = rng.random(X.shape) < 0.2
    holes[holes.all(axis=1), 0] = False
    X[holes] = np.nan
    clients = [X[:200], X[200:350], X[350:]]

    def sse(result):
        return sum(d2.min(axis=1).sum()
                   for _, d2 in partial_distance_blocks(X, result.centroids))

    # the moment start lacks k-means++'s spread: the lowest SSE of a few starts (n-init)
    best = min((run_fkm_partial(clients, 4, seed=s, max_rounds=30) for s in range(5)),
               key=sse)
    labels = partial_labels(X, best.centroids)
    assert adjusted_rand_score(y, labels) == 1.0  # measured: 1.0 (the other starts: 0.69)

