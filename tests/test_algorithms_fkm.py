"""FKM and k-FED cores against spec 002 (§8 test list) and the exactness properties."""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from flwr_clustering.algorithms.fkm import (
    fkm_client_init,
    fkm_client_update,
    fkm_server_aggregate,
    run_fkm,
)
from flwr_clustering.algorithms.kfed import (
    awasthi_sheffet,
    kfed_client,
    kfed_server,
    max_from_set_seeds,
    run_kfed,
)
from flwr_clustering.algorithms.lloyd import (
    assign_to_nearest,
    check_data,
    client_rng,
    cluster_sums,
    lloyd_step,
    matched_shift,
    weighted_kmeans,
)
from flwr_clustering.algorithms.local_centroids import LocalCentroids, check_local_centroids


def _blobs(n=600, k=4, d=2, seed=0):
    return make_blobs(n, centers=k, n_features=d, random_state=seed, cluster_std=0.8)


def _split(X, parts=3):
    return [X[idx] for idx in np.array_split(np.arange(len(X)), parts)]


# ------------------------------------------------------------------ primitives
def test_lloyd_step_keeps_empty_centroid_and_counts_partition():
    X = np.array([[0.0, 0.0], [0.0, 2.0], [10.0, 0.0]])
    C = np.array([[0.0, 1.0], [10.0, 0.0], [100.0, 100.0]])
    means, counts, labels = lloyd_step(X, C)
    np.testing.assert_array_equal(means, [[0.0, 1.0], [10.0, 0.0], [100.0, 100.0]])
    np.testing.assert_array_equal(counts, [2, 1, 0])
    np.testing.assert_array_equal(labels, [0, 0, 1])


def test_lloyd_step_rejects_labels_of_the_wrong_length():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match=r"labels must have shape \(5,\)"):
        lloyd_step(X, X[:2], labels=np.zeros(4, dtype=np.int64))


def test_cluster_sums_paths_agree_bit_for_bit():
    """cluster_sums uses bincount for d <= 8 and a sparse product above: same values."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1000, 3)) * 1e3
    labels = rng.integers(0, 7, size=1000)
    labels[labels == 4] = 5  # an empty cluster
    small, c_small = cluster_sums(X, labels, 7)
    wide, c_wide = cluster_sums(np.hstack([X, np.zeros((1000, 9))]), labels, 7)
    np.testing.assert_array_equal(small, wide[:, :3])
    np.testing.assert_array_equal(c_small, c_wide)
    assert c_small[4] == 0 and not small[4].any()
    ref = np.array([X[labels == j].sum(axis=0) if (labels == j).any() else np.zeros(3)
                    for j in range(7)])
    np.testing.assert_allclose(small, ref, rtol=1e-12)


def test_assignment_ties_go_to_lowest_index():
    labels, d2 = assign_to_nearest(np.array([[0.0, 0.0]]), np.array([[1.0, 0.0], [-1.0, 0.0]]))
    assert labels[0] == 0 and d2[0] == 1.0


def test_check_data_messages():
    with pytest.raises(ValueError, match="NaN or inf"):
        check_data(np.array([[1.0, np.nan]]), name="client 3 data")
    with pytest.raises(ValueError, match="client 3 data has 3 features but the model has 2"):
        check_data(np.zeros((2, 3)), name="client 3 data", n_features=2)
    with pytest.raises(ValueError, match="2-D"):
        check_data(np.zeros(3))


def test_matched_shift_is_permutation_invariant():
    C = np.array([[0.0, 0.0], [5.0, 5.0], [9.0, 0.0]])
    assert matched_shift(C, C[[2, 0, 1]]) == 0.0
    assert matched_shift(C, C + [0.0, 0.5]) == pytest.approx(0.5)
    assert matched_shift(None, C) == np.inf


# ---------------------------------------------------- spec §8 tests (FKM)
def test_weighted_aggregation_spec_case():
    """Spec §8.5: {(0,0) w=100, (10,0) w=1}, K=1 -> (0.099, 0); unweighted (5, 0)."""
    pts = np.array([[0.0, 0.0], [10.0, 0.0]])
    rng = np.random.default_rng(0)
    for seeding in ("weighted", "unweighted"):
        C = weighted_kmeans(pts, np.array([100.0, 1.0]), 1, rng, seeding=seeding)
        np.testing.assert_allclose(C, [[10.0 / 101.0, 0.0]], atol=1e-12)
    C = weighted_kmeans(pts, np.array([1.0, 1.0]), 1, rng)
    np.testing.assert_allclose(C, [[5.0, 0.0]])


def test_privacy_filter_small_client_uploads_nothing_at_init():
    """Spec §8.4: 10 points, K_g = 16 -> 10 singleton seeds, all withheld."""
    X = np.random.default_rng(0).normal(size=(10, 2))
    for init in ("private", "paper"):
        up = fkm_client_init(X, 16, np.random.default_rng(1), init=init)
        assert up.means.shape == (0, 2) and up.counts.shape == (0,)


def test_uploaded_counts_respect_p_and_sum_to_at_most_n():
    X, _ = _blobs(300, k=5)
    for p in (2, 5, 20):
        up = fkm_client_init(X, 16, np.random.default_rng(2), privacy_threshold=p)
        assert (up.counts >= p).all() and up.counts.sum() <= len(X)
        C = fkm_server_aggregate([up], 5, np.random.default_rng(0))
        up2 = fkm_client_update(X, C, privacy_threshold=p)
        assert (up2.counts >= p).all() and up2.counts.sum() <= len(X)


def test_recount_never_uploads_a_mean_of_fewer_than_p_points():
    X, _ = _blobs(200, k=6, seed=3)
    C = X[:16] + 0.01
    up = fkm_client_update(X, C, privacy_threshold=3, recount=True)
    labels, _ = assign_to_nearest(X, C)
    # every uploaded local centroid grew from a partition of >= p points
    part = np.bincount(labels, minlength=16)
    assert (part[up.index] >= 3).all() and (up.counts >= 3).all()


def test_empty_cluster_dropping():
    """Spec §8.3: a client near only 3 of 16 global centroids uploads <= 3 centroids."""
    centers = np.array([[x, y] for x in (-7.5, -2.5, 2.5, 7.5) for y in (-7.5, -2.5, 2.5, 7.5)])
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(centers[j], 0.3, size=(20, 2)) for j in (0, 5, 10)])
    up = fkm_client_update(X, centers, privacy_threshold=2)
    assert len(up.means) == 3
    np.testing.assert_array_equal(np.sort(up.index), [0, 5, 10])


def test_client_update_reuses_assignment_bit_for_bit():
    """The first local step reuses the assignment to C_g; it must equal recomputing it.

    Integer data on a lattice with duplicate centroids forces exact distance ties.
    """
    rng = np.random.default_rng(3)
    for trial in range(20):
        X = rng.integers(-3, 4, size=(60, 2)).astype(float)
        C = rng.integers(-3, 4, size=(8, 2)).astype(float)
        C[1] = C[0]  # a duplicate: ties between two present/absent centroids
        for iters in (1, 3):
            up = fkm_client_update(X, C, privacy_threshold=1, local_iters=iters, recount=bool(trial % 2))
            labels, _ = assign_to_nearest(X, C)
            present = np.flatnonzero(np.bincount(labels, minlength=len(C)))
            means = C[present]
            for _ in range(iters):
                means, counts, _ = lloyd_step(X, means)  # recomputes the distances
            keep = counts >= 1
            if trial % 2:
                keep &= np.bincount(assign_to_nearest(X, means)[0], minlength=len(means)) >= 1
            np.testing.assert_array_equal(up.means, means[keep])
            np.testing.assert_array_equal(up.index, present[keep])


def test_single_client_one_round_is_lloyd_then_identity():
    """Spec §8.2: N=1, p=1: the server k-means over K_g local means returns those means."""
    X, _ = _blobs(400, k=4)
    C0 = X[[0, 100, 200, 300]]
    up = fkm_client_update(X, C0, privacy_threshold=1)
    means, counts, _ = lloyd_step(X, C0)
    np.testing.assert_array_equal(up.means, means[counts > 0])
    C = fkm_server_aggregate([up], 4, np.random.default_rng(0))
    order = np.lexsort(C.T)
    np.testing.assert_allclose(C[order], up.means[np.lexsort(up.means.T)], atol=1e-12)


def test_server_with_at_most_k_local_centroids_returns_them():
    up = LocalCentroids(np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([3, 4]), np.array([-1, -1]))
    C = fkm_server_aggregate([up], 5, np.random.default_rng(0))
    np.testing.assert_array_equal(C, up.means)


def test_server_tolerates_empty_uploads_and_errors_when_all_empty():
    empty = LocalCentroids(np.zeros((0, 2)), np.zeros(0, np.int64), np.zeros(0, np.int64))
    up = LocalCentroids(np.eye(2), np.array([2, 2]), np.array([-1, -1]))
    np.testing.assert_array_equal(fkm_server_aggregate([empty, up], 2, np.random.default_rng(0)),
                                  np.eye(2))
    with pytest.raises(ValueError, match="no client uploaded"):
        fkm_server_aggregate([empty, empty], 2, np.random.default_rng(0))


def test_paper_init_uploads_raw_rows_private_init_does_not():
    X, _ = _blobs(300, k=4, seed=5)
    rows = {tuple(r) for r in X}
    paper = fkm_client_init(X, 8, np.random.default_rng(0), init="paper")
    assert all(tuple(m) in rows for m in paper.means)
    private = fkm_client_init(X, 8, np.random.default_rng(0), init="private")
    assert not any(tuple(m) in rows for m in private.means)
    assert (private.counts >= 2).all()


def test_federated_lloyd_equals_centralized_kmeans():
    """p = 0, all clients, one local step, shared init: R rounds == KMeans(max_iter=R)."""
    X, _ = _blobs(900, k=5, seed=7)
    clients = _split(X, 4)
    C0 = X[[1, 200, 400, 600, 800]]
    for R in (1, 3, 10):
        res = run_fkm(clients, 5, privacy_threshold=0, local_iters=1, update="lloyd", initial_centroids=C0,
                      max_rounds=R, tol=-1.0)
        km = KMeans(5, init=C0, n_init=1, max_iter=R, tol=0.0, algorithm="lloyd").fit(X)
        assert len(res.history) == R
        np.testing.assert_allclose(res.centroids, km.cluster_centers_, rtol=0, atol=1e-9)


def test_run_fkm_is_deterministic_and_converges():
    X, y = _blobs(800, k=4, seed=11)
    clients = _split(X, 5)
    a = run_fkm(clients, 4, seed=3, max_rounds=30)
    b = run_fkm(clients, 4, seed=3, max_rounds=30)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    assert a.converged and a.shifts[-1] <= 1e-6 and len(a.history) < 30


def test_fkm_beta10_matches_central(garst_beta10):
    """Spec §8.2: FKM at beta = 10 after 10 rounds >= 0.95 ARI, within 0.01 of central."""
    from sklearn.metrics import adjusted_rand_score

    X, y, client = garst_beta10
    clients = [X[client == i] for i in range(5)]
    labels = [y[client == i] for i in range(5)]
    res = run_fkm(clients, 16, seed=0, max_rounds=10, tol=-1.0)
    ari = sum(len(lab) * adjusted_rand_score(lab, assign_to_nearest(x, res.centroids)[0])
              for x, lab in zip(clients, labels, strict=True)) / len(y)
    central = adjusted_rand_score(y, KMeans(16, n_init=10, random_state=0).fit_predict(X))
    assert ari >= 0.95 and abs(ari - central) <= 0.01


def test_check_local_centroids_rejects_malformed():
    good = LocalCentroids(np.ones((2, 3)), np.array([2, 3]), np.array([0, 1]))
    assert check_local_centroids(good, n_features=3, privacy_threshold=2, k=2).means.shape == (2, 3)
    bad_cases = [
        (LocalCentroids(np.ones(3), np.array([2]), np.array([0])), "2-D"),
        (LocalCentroids(np.ones((2, 3)), np.array([2]), np.array([0, 1])), "must have shape"),
        (LocalCentroids(np.ones((2, 4)), np.array([2, 2]), np.array([0, 1])), "4 features"),
        (LocalCentroids(np.full((2, 3), np.inf), np.array([2, 2]), np.array([0, 1])), "NaN"),
        (LocalCentroids(np.ones((2, 3)), np.array([1, 2]), np.array([0, 1])), "privacy"),
        (LocalCentroids(np.ones((2, 3)), np.array([2, 2]), np.array([0, 7])), "index"),
    ]
    for upload, match in bad_cases:
        with pytest.raises(ValueError, match=match):
            check_local_centroids(upload, n_features=3, privacy_threshold=2, k=2)


def test_client_update_rejects_feature_mismatch():
    with pytest.raises(ValueError, match="feature-count mismatch"):
        fkm_client_update(np.ones((5, 3)), np.ones((2, 2)))


# ---------------------------------------------------------------- k-FED
def test_max_from_set_seeding():
    first = np.array([[0.0, 0.0]])
    rest = np.array([[1.0, 0.0], [10.0, 0.0], [5.0, 0.0], [10.0, 1.0]])
    seeds = max_from_set_seeds(first, rest, 3)
    np.testing.assert_array_equal(seeds, [[0.0, 0.0], [10.0, 1.0], [5.0, 0.0]])


def test_awasthi_sheffet_recovers_separated_clusters():
    X, y = _blobs(500, k=4, d=5, seed=1)
    centres, counts = awasthi_sheffet(X, 4, np.random.default_rng(0))
    km = KMeans(4, n_init=10, random_state=0).fit(X)
    assert matched_shift(km.cluster_centers_, centres) < 1e-6
    assert counts.sum() == len(X)


def test_kfed_small_client_returns_points_and_filter_withholds_them():
    X = np.random.default_rng(0).normal(size=(5, 2))
    centres, counts = awasthi_sheffet(X, 8, np.random.default_rng(0))
    np.testing.assert_array_equal(centres, X)
    assert len(kfed_client(X, 8, np.random.default_rng(0), privacy_threshold=2).means) == 0


def test_kfed_one_shot_and_needs_enough_centres():
    X, y = _blobs(900, k=6, seed=4)
    clients = _split(X, 3)
    C = run_kfed(clients, 6, seed=0)
    assert C.shape == (6, 2)
    with pytest.raises(ValueError, match="k' \\* clients >= k"):
        run_kfed(clients, 10, k_local=3)
    uploads = [kfed_client(x, 6, client_rng(0, i)) for i, x in enumerate(clients)]
    np.testing.assert_array_equal(kfed_server(uploads, 6), C)
