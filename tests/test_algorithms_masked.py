"""Masked-feature clustering core (spec 000 §11): merge exactness, rescaled distances,
Method A and Method B."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from flwr_clustering.algorithms.lloyd import client_rng
from flwr_clustering.algorithms.masked import (
    MaskedStats,
    assumption8_rate,
    bounding_box,
    client_mask,
    cluster_stats,
    local_kmeans_masked,
    mask_aware_means,
    rescaled_distances,
)
from flwr_clustering.algorithms.masked_federated import (
    masked_client_update,
    masked_server_update,
    method_a,
    method_b,
    run_masked_federated,
)
from flwr_clustering.algorithms.masked_oneshot import (
    force_agglomeration,
    force_sums,
    run_masked_oneshot,
)
from flwr_clustering.metrics import matched_centroid_error


def _masked(X, mask):
    out = np.array(X, dtype=float, copy=True)
    out[:, ~mask] = np.nan
    return out


@pytest.mark.parametrize("seed", range(4))
def test_merge_equals_eq1_on_pooled_data_and_is_order_independent(seed):
    rng = np.random.default_rng(seed)
    d, k = 6, 3
    clients, labels, uploads = [], [], []
    for _ in range(5):
        X = rng.normal(size=(int(rng.integers(5, 30)), d)) * 10
        mask = rng.random(d) < 0.6
        mask[rng.integers(d)] = True
        y = rng.integers(0, k, size=len(X))
        Xm = _masked(X, mask)
        clients.append(Xm)
        labels.append(y)
        uploads.append(cluster_stats(Xm, y, k))  # pure local clusters: local label = class
    expected = mask_aware_means(clients, labels, k)
    for order in (range(5), [4, 2, 0, 3, 1]):
        total = MaskedStats.concatenate([uploads[i] for i in order])
        merged = np.vstack([total.take(np.arange(a, len(total), k)).merged().means
                            for a in range(k)])
        np.testing.assert_allclose(merged, expected, atol=1e-10, equal_nan=True)
    # grouping does not matter either: merge two halves, then merge the halves
    left = MaskedStats.concatenate(uploads[:2]).take([0, 3]).merged()
    right = MaskedStats.concatenate(uploads[2:]).take([0, 3, 6]).merged()
    both = MaskedStats.concatenate([left, right]).merged().means[0]
    np.testing.assert_allclose(both, expected[0], atol=1e-10, equal_nan=True)


def test_rescaled_distance_by_hand_and_disjoint_masks_are_invalid():
    A = np.array([[0.0, 0.0, np.nan], [np.nan, np.nan, 5.0]])
    mA = ~np.isnan(A)
    B = np.array([[3.0, 4.0, 1.0]])
    mB = np.ones((1, 3), bool)
    lo, hi = np.array([0.0, 0.0, 0.0]), np.array([6.0, 8.0, 10.0])
    D = rescaled_distances(A, mA, B, mB, lo, hi)
    assert D[0, 0] == pytest.approx(5.0 / 10.0)  # shared {0,1}: ||(3,4)|| / ||(6,8)||
    assert D[1, 0] == pytest.approx(4.0 / 10.0)  # shared {2}: |5-1| / 10
    C = np.array([[np.nan, np.nan, 2.0]])
    D2 = rescaled_distances(A[:1], mA[:1], C, ~np.isnan(C), lo, hi)
    assert np.isnan(D2[0, 0])  # disjoint: invalid, never 0


def test_rescaled_distance_is_invariant_to_scaling_and_translation():
    rng = np.random.default_rng(3)
    P = rng.normal(size=(12, 5))
    masks = rng.random((12, 5)) < 0.7
    masks[:, 0] = True
    P = np.where(masks, P, np.nan)
    lo, hi = bounding_box(P)
    D = rescaled_distances(P, masks, P, masks, lo, hi)
    Q = 37.0 * P + 1e4
    lo2, hi2 = bounding_box(Q)
    np.testing.assert_allclose(rescaled_distances(Q, masks, Q, masks, lo2, hi2), D,
                               atol=1e-9, equal_nan=True)


def test_client_mask_and_its_errors():
    X = np.array([[1.0, np.nan, 2.0], [3.0, np.nan, 4.0]])
    assert client_mask(X).tolist() == [True, False, True]
    with pytest.raises(ValueError, match="row 1 has NaN in observed feature 2"):
        client_mask(np.array([[1.0, np.nan, 2.0], [3.0, np.nan, np.nan]]))
    with pytest.raises(ValueError, match="observes no feature"):
        client_mask(np.full((2, 2), np.nan))


def _blobs(d=10, k=4, n=400, seed=0):
    X, y = make_blobs(n, n_features=d, centers=k, cluster_std=0.5, center_box=(-40, 40),
                      random_state=seed)
    return X, y


def _iid(X, y, m, seed=0):
    perm = np.random.default_rng(seed).permutation(len(X))
    return [(X[i], y[i]) for i in np.array_split(perm, m)]


@pytest.mark.parametrize("method", ["A", "B"])
def test_full_masks_equal_centralized_kmeans(method):
    X, y = _blobs()
    parts = _iid(X, y, 5)
    uploads, owners = [], []
    for i, (Xi, _) in enumerate(parts):
        _, stats = local_kmeans_masked(Xi, 4, np.random.default_rng(i), n_init=10)
        uploads.append(stats)
        owners += [i] * len(stats)
    stats = MaskedStats.concatenate(uploads)
    if method == "A":
        out, groups = method_a(stats, np.array(owners), 4)
    else:
        out, groups = method_b(stats, 4)
    central = KMeans(4, n_init=10, random_state=0).fit(X).cluster_centers_
    err, _ = matched_centroid_error(out.means, central)
    assert err < 1e-8
    assert sorted(len(g) for g in groups) == [5, 5, 5, 5]


def _chain_masks(d, n, overlap):
    width = int(round(d / (n - (n - 1) * overlap)))
    step = int(round(width * (1 - overlap)))
    masks = np.zeros((n, d), bool)
    for i in range(n):
        masks[i, i * step: min(d, i * step + width)] = True
    masks[-1, (n - 1) * step:] = True
    return masks


def test_chain_masks_with_pure_local_clusters_give_eq1_exactly():
    X, y = _blobs(d=20, k=4, n=800, seed=1)
    masks = _chain_masks(20, 4, 0.3)
    assert masks.any(axis=0).all() and not (masks[0] & masks[3]).any()
    parts = _iid(X, y, 4, seed=2)
    clients = [_masked(Xi, masks[i]) for i, (Xi, _) in enumerate(parts)]
    labels = [yi for _, yi in parts]
    uploads, owners = [], []
    for i, Xi in enumerate(clients):
        lab, stats = local_kmeans_masked(Xi, 4, np.random.default_rng(i), n_init=10)
        # well separated: every local cluster is pure
        assert all(len(set(labels[i][lab == a])) == 1 for a in range(4))
        uploads.append(stats)
        owners += [i] * len(stats)
    # Method A (Assumption 1); Method B needs overlapping spaces (shared-block test below).
    out, groups = method_a(MaskedStats.concatenate(uploads), np.array(owners), 4, seed_owner=0)
    o = mask_aware_means(clients, labels, 4)
    err, _ = matched_centroid_error(np.nan_to_num(out.means), np.nan_to_num(o))
    assert err < 1e-10
    # Method A never puts two centroids of one participant in one group
    owners = np.array(owners)
    for g in groups:
        assert len(set(owners[g])) == len(g)


def test_method_b_on_shared_block_masks_gives_eq1_exactly():
    X, y = _blobs(d=20, k=4, n=800, seed=4)
    masks = np.zeros((4, 20), bool)
    masks[:, :2] = True  # a 10 % shared block
    for i in range(4):
        masks[i, 2 + 4 * i: 2 + 4 * (i + 1) + (2 if i == 3 else 0)] = True
    parts = _iid(X, y, 4, seed=5)
    clients = [_masked(Xi, masks[i]) for i, (Xi, _) in enumerate(parts)]
    labels = [yi for _, yi in parts]
    uploads = [local_kmeans_masked(Xi, 4, np.random.default_rng(i), n_init=10)[1]
               for i, Xi in enumerate(clients)]
    out, groups = method_b(MaskedStats.concatenate(uploads), 4)
    o = mask_aware_means(clients, labels, 4)
    err, _ = matched_centroid_error(np.nan_to_num(out.means), np.nan_to_num(o))
    assert err < 1e-10
    assert sorted(len(g) for g in groups) == [4, 4, 4, 4]


def test_method_a_respects_the_participant_constraint_for_close_clusters():
    # Two true clusters almost on top of each other: distances alone would put both of a
    # client's centroids in one group.
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [0.3, 0.0], [50.0, 50.0]])
    uploads, owners = [], []
    for i in range(4):
        C = centres + rng.normal(scale=0.2, size=centres.shape)
        uploads.append(MaskedStats(C * 10, np.full(C.shape, 10.0)))
        owners += [i] * 3
    owners = np.array(owners)
    _, groups = method_a(MaskedStats.concatenate(uploads), owners, 3)
    for g in groups:
        assert len(set(owners[g])) == len(g) == 4


def test_method_a_through_a_chain_of_masks():
    # masks {0..3}, {2..5}, {4..7}: client 2 shares nothing with client 0 (the seed) and can
    # only join through client 1's features.
    masks = np.zeros((3, 8), bool)
    masks[0, 0:4] = masks[1, 2:6] = masks[2, 4:8] = True
    centres = np.array([[0.0] * 8, [20.0] * 8])
    uploads, owners = [], []
    for i in range(3):
        C = np.where(masks[i], centres, 0.0)
        uploads.append(MaskedStats(C * 5, np.where(masks[i], 5.0, 0.0) * np.ones((2, 1))))
        owners += [i] * 2
    stats = MaskedStats.concatenate(uploads)
    out, groups = method_a(stats, np.array(owners), 2, seed_owner=0)
    assert sorted(sorted(g) for g in groups) == [[0, 2, 4], [1, 3, 5]]
    assert not np.isnan(out.means).any()  # the union masks cover all 8 features
    np.testing.assert_allclose(np.sort(out.means[:, 0]), [0.0, 20.0])


def test_method_b_seeding_by_hand():
    # 1-D points 0, 1, 10, 4 (all observed): farthest pair (0, 10), then max-min picks 4.
    P = np.array([[0.0], [1.0], [10.0], [4.0]])
    stats = MaskedStats(P, np.ones_like(P))
    out, groups = method_b(stats, 3, max_iter=1)
    np.testing.assert_allclose(np.sort(out.means[:, 0]), [0.5, 4.0, 10.0])
    assert sorted(sorted(g) for g in groups) == [[0, 1], [2], [3]]


def test_method_a_without_a_full_participant_agglomerates_under_the_constraint():
    # Nobody holds all 3 clusters: closest pairs of groups from different clients merge.
    C = np.array([[0.0, 0.0], [10.0, 0.0], [0.2, 0.0], [5.0, 9.0], [10.1, 0.0], [5.0, 9.1]])
    stats = MaskedStats(C, np.ones_like(C))
    owners = np.array([0, 0, 1, 1, 2, 2])
    out, groups = method_a(stats, owners, 3)
    assert sorted(sorted(g) for g in groups) == [[0, 2], [1, 4], [3, 5]]
    with pytest.raises(ValueError, match="not k=1"):
        method_a(stats, owners, 1, seed_owner=0)
    # groups sharing a participant can never merge: k=1 stalls with a clear message
    with pytest.raises(ValueError, match="stalled at 3 groups"):
        method_a(stats, owners, 1)


# ------------------------------------------------------------------------ Algorithm 1

def _chain_clients(seed=1):
    X, y = _blobs(d=20, k=4, n=800, seed=seed)
    masks = _chain_masks(20, 4, 0.3)
    parts = _iid(X, y, 4, seed=2)
    return [_masked(Xi, masks[i]) for i, (Xi, _) in enumerate(parts)], [yi for _, yi in parts]


@pytest.mark.parametrize("alpha", [0.3, 0.8, 1.0])
def test_a_federated_round_leaves_the_optimal_centroids_unchanged(alpha):
    clients, labels = _chain_clients()
    o = mask_aware_means(clients, labels, 4)
    aligned = [masked_client_update(X, o) for X in clients]
    new = masked_server_update(o, aligned, alpha)
    np.testing.assert_allclose(new, o, rtol=0, atol=1e-10 * np.nanmax(np.abs(o)))


def test_alignment_follows_the_global_order_and_marks_missing_clusters():
    clients, labels = _chain_clients()
    o = mask_aware_means(clients, labels, 4)
    X, y = clients[0], labels[0]
    only = np.isin(y, [0, 2, 3])  # this client lacks true cluster 1
    out = masked_client_update(X[only], o[[3, 1, 0, 2]])
    assert (out.counts[1] == 0).all() and (out.sums[1] == 0).all()
    mask = client_mask(X)
    expected = mask_aware_means([X[only]], [y[only]], 4)[[3, 1, 0, 2]]
    for row in (0, 2, 3):
        np.testing.assert_allclose(out.means[row, mask], expected[row, mask], atol=1e-9)
    assert np.isnan(out.means[0, ~mask]).all()


def test_server_keeps_a_centroid_no_client_updates():
    G = np.array([[0.0, 0.0], [5.0, 5.0]])
    up = MaskedStats(np.array([[2.0, 2.0], [0.0, 0.0]]), np.array([[2.0, 2.0], [0.0, 0.0]]))
    new = masked_server_update(G, [up], alpha=0.5)
    np.testing.assert_allclose(new, [[0.5, 0.5], [5.0, 5.0]])
    with pytest.raises(ValueError, match="alpha"):
        masked_server_update(G, [up], alpha=0.0)


@pytest.mark.parametrize("method", ["A", "B"])
def test_full_masks_federated_run_equals_centralized_kmeans(method):
    X, y = _blobs()
    parts = [Xi for Xi, _ in _iid(X, y, 5)]
    res = run_masked_federated(parts, 4, method=method, rounds=3)
    central = KMeans(4, n_init=10, random_state=0).fit(X).cluster_centers_
    for G in res.history:
        assert matched_centroid_error(G, central)[0] < 1e-8


def test_chain_masks_federated_run_recovers_eq1():
    clients, labels = _chain_clients()
    res = run_masked_federated(clients, 4, method="A", rounds=3)
    o = mask_aware_means(clients, labels, 4)
    err, _ = matched_centroid_error(np.nan_to_num(res.centroids), np.nan_to_num(o))
    assert err < 1e-8 * np.nanmax(np.abs(o))


# ------------------------------------------------------------------------ Algorithm 2


def test_force_incremental_update_equals_brute_force_and_is_symmetric():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(60, 3))
    masks = np.ones_like(points, bool)
    masks[40:, 0] = False
    points[40:, 0] = np.nan
    owner = np.repeat(np.arange(6), 10)
    F = force_sums(points, owner, masks)
    np.testing.assert_array_equal(F, F.T)
    # brute force f' for one pair
    lo, hi = bounding_box(points)
    D = rescaled_distances(points[:10], masks[:10], points[40:50], masks[40:50], lo, hi)
    assert F[0, 4] == pytest.approx(np.sum(1.0 / (D + 1e-12) ** 2), rel=1e-12)
    # incremental agglomeration == recomputing the group forces from scratch each step
    groups = force_agglomeration(F, np.bincount(owner), 3)
    assert sorted(groups) == _brute_agglomeration(
        F, 6, 3, lambda gx, gy: 10 * len(gx) * 10 * len(gy))


def _brute_agglomeration(F, n, k, pairs):
    """Merge by the largest sum f' / pairs(gx, gy), recomputed from scratch every step."""
    alive = [[i] for i in range(n)]
    while len(alive) > k:
        best, pair = -np.inf, None
        for x in range(len(alive)):
            for y in range(x + 1, len(alive)):
                p = pairs(alive[x], alive[y])
                f = F[np.ix_(alive[x], alive[y])].sum() / p if p else -1.0
                if f > best:
                    best, pair = f, (x, y)
        x, y = pair
        alive[x] = sorted(alive[x] + alive[y])
        del alive[y]
    return sorted(alive)


@pytest.mark.parametrize("full", [True, False])
def test_oneshot_on_separated_blobs_groups_every_local_cluster_by_class(full):
    X, y = _blobs(d=20, k=4, n=800, seed=6)
    masks = np.ones((4, 20), bool)
    if not full:  # a 10 % shared block plus private blocks
        masks[:] = False
        masks[:, :2] = True
        for i in range(4):
            masks[i, 2 + 4 * i: 2 + 4 * (i + 1) + (2 if i == 3 else 0)] = True
    parts = _iid(X, y, 4, seed=7)
    clients = [_masked(Xi, masks[i]) for i, (Xi, _) in enumerate(parts)]
    res = run_masked_oneshot(clients, 4, k_local=8)  # over-clustered locally
    for i, (_, yi) in enumerate(parts):
        # the client's own local labels (same seed as in the run)
        lab, _ = local_kmeans_masked(clients[i], 8, client_rng(0, i), n_init=10)
        pred = res.assignment[i][lab]
        # each true class maps to one global cluster, different classes to different ones
        mapping = {c: set(pred[yi == c]) for c in range(4)}
        assert all(len(v) == 1 for v in mapping.values())
        assert len({next(iter(v)) for v in mapping.values()}) == 4
    o = mask_aware_means(clients, [yi for _, yi in parts], 4)
    err, _ = matched_centroid_error(res.centroids, o)
    assert err < 1e-8 * np.abs(o).max()


# ------------------------------------------------ local clustering: K_i, k-medoids


def test_silhouette_chooses_the_local_cluster_count_and_one_cluster_without_structure():
    from sklearn.datasets import make_blobs

    from flwr_clustering.algorithms.masked import choose_local_clusters

    X, _ = make_blobs(300, n_features=5, centers=3, cluster_std=0.3, center_box=(-20, 20),
                      random_state=1)
    labels, stats = choose_local_clusters(X, 8, np.random.default_rng(0))
    assert len(stats) == 3 and len(np.unique(labels)) == 3
    # one Gaussian: no substantial structure (best silhouette < 0.25) -> K_i = 1
    G = np.random.default_rng(1).standard_normal((300, 5))
    labels, stats = choose_local_clusters(G, 8, np.random.default_rng(0))
    assert len(stats) == 1 and (labels == 0).all()
    np.testing.assert_allclose(stats.means[0], G.mean(axis=0), rtol=1e-12)
    # K_i never exceeds k_max
    _, stats = choose_local_clusters(X, 2, np.random.default_rng(0))
    assert len(stats) == 2


def test_no_silhouette_above_the_threshold_keeps_the_best_k_unless_one_gaussian():
    """Silhouettes are low in high dimension: K_i = 1 only where G-means sees one Gaussian."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits
    from sklearn.metrics import silhouette_score
    from sklearn.preprocessing import StandardScaler

    from flwr_clustering.algorithms.masked import (
        MIN_SILHOUETTE,
        choose_local_clusters,
        looks_like_one_cluster,
    )

    # one client's share of the 64-feature digits (10 classes), standardised
    X = StandardScaler().fit_transform(load_digits().data)[:180]
    best = max(silhouette_score(X, KMeans(k, n_init=10, random_state=0).fit_predict(X))
               for k in range(2, 11))
    assert best < MIN_SILHOUETTE  # the old rule would have kept one cluster
    assert not looks_like_one_cluster(X, np.random.default_rng(0))
    labels, stats = choose_local_clusters(X, 10, np.random.default_rng(0))
    assert len(stats) >= 2 and len(np.unique(labels)) == len(stats)
    G = np.random.default_rng(1).standard_normal((300, 50))  # one Gaussian in 50-D
    assert looks_like_one_cluster(G, np.random.default_rng(0))
    labels, stats = choose_local_clusters(G, 8, np.random.default_rng(0))
    assert len(stats) == 1


def test_kmedoids_medoids_are_rows_and_its_federation_recovers_separated_blobs():
    from sklearn.datasets import make_blobs

    from flwr_clustering.algorithms.masked import local_clustering
    from flwr_clustering.algorithms.masked_federated import run_masked_federated
    from flwr_clustering.data.masks import apply_mask, chain_masks
    from flwr_clustering.metrics import hungarian_accuracy

    X, y = make_blobs(400, n_features=12, centers=4, cluster_std=0.5, center_box=(-30, 30),
                      random_state=3)
    masks = chain_masks(12, 4, seed=0)
    parts = [(apply_mask(X[i::4], masks[i]), y[i::4]) for i in range(4)]
    labels, stats = local_clustering(parts[0][0], 4, np.random.default_rng(0),
                                     algorithm="kmedoids", n_init=3)
    obs = masks[0]
    Xo = parts[0][0][:, obs]
    for m in stats.means[:, obs]:  # medoids are real rows (up to size * x / size rounding)
        assert np.abs(Xo - m).max(axis=1).min() <= 1e-12 * np.abs(Xo).max()
    assert np.isnan(stats.means[:, ~obs]).all()
    assert hungarian_accuracy(parts[0][1], labels) == 1.0
    res = run_masked_federated([p for p, _ in parts], 4, method="A", k_local=4,
                               algorithm="kmedoids")
    from flwr_clustering.algorithms.masked import masked_squared_distances

    pred = np.concatenate([masked_squared_distances(p, res.centroids).argmin(1)
                           for p, _ in parts])
    assert hungarian_accuracy(np.concatenate([t for _, t in parts]), pred) == 1.0
    with pytest.raises(ValueError, match="local algorithm"):
        local_clustering(parts[0][0], 2, np.random.default_rng(0), algorithm="dbscan")


def test_a_centroid_without_values_on_a_clients_features_never_looks_closest():
    # A one-cluster client: filling a centroid's holes with the client's column means
    # would put an empty centroid exactly on the client's cluster (DIM seeds 2 and 6).
    from flwr_clustering.algorithms.masked import masked_squared_distances
    from flwr_clustering.algorithms.masked_federated import masked_client_update

    rng = np.random.default_rng(0)
    X = np.full((20, 4), np.nan)
    X[:, 2:] = [50.0, 60.0] + rng.standard_normal((20, 2))
    G = np.array([[0.0, 0.0, 50.5, 59.5],       # the client's cluster (plus others' features)
                  [0.0, 0.0, np.nan, np.nan],   # nothing on the client's features
                  [9.0, 9.0, 0.0, np.nan]])     # one of two features, far away
    d2 = masked_squared_distances(X, G)
    assert (d2.argmin(axis=1) == 0).all() and np.isinf(d2[:, 1]).all()
    Xo = X[:, 2:]
    np.testing.assert_allclose(d2[:, 2], (Xo[:, 0] - 0.0) ** 2 * 2, rtol=1e-12)  # rescaled
    up = masked_client_update(X, G)
    assert up.sizes.tolist() == [20, 0, 0]  # aligned to the right global centroid


def test_valid_pairs_force_equals_brute_force_on_disjoint_masks():
    from flwr_clustering.algorithms.masked_oneshot import GaussianUpload, cluster_overlap

    rng = np.random.default_rng(3)
    d = 6
    cmask = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1],
                      [1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0]], bool)
    sizes = np.array([10, 12, 8, 10, 9, 11])
    owner = np.repeat(np.arange(6), sizes)
    points = rng.normal(size=(len(owner), d))
    masks = cmask[owner]
    points[~masks] = np.nan
    F = force_sums(points, owner, masks)
    ups = [GaussianUpload(m, np.zeros((1, m.sum())), np.zeros((1, m.sum(), m.sum())),
                          np.array([1])) for m in cmask]
    V = cluster_overlap(ups, "valid_pairs")
    assert V[0, 1] and not V[0, 2] and V[2, 4] and not V[1, 2]
    groups = force_agglomeration(F, sizes, 2, overlap=V)
    # brute force: sum f' / number of point pairs with a distance
    assert sorted(groups) == _brute_agglomeration(
        F, 6, 2, lambda gx, gy: sum(sizes[a] * sizes[b] for a in gx for b in gy if V[a, b]))
    assert cluster_overlap(ups, "literal") is None
    with pytest.raises(ValueError, match="normalize"):
        cluster_overlap(ups, "mean")


def test_oneshot_force_linkage_recovers_two_moons_where_centroids_cannot():
    # spec §11 item 13 (a sanity check, not a paper claim): local over-clustering + force
    # linkage follows non-convex shapes; Algorithm 1's centroids cut the moons.
    from sklearn.datasets import make_moons
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering.algorithms.masked import masked_squared_distances

    X, y = make_moons(1200, noise=0.05, random_state=1)
    parts = np.array_split(np.random.default_rng(1).permutation(len(X)), 4)
    clients, y_all = [X[p] for p in parts], np.concatenate([y[p] for p in parts])
    one = run_masked_oneshot(clients, 2, k_local=10, seed=1)
    pred = np.concatenate([one.assignment[i][lab] for i, lab in enumerate(one.local_labels)])
    assert adjusted_rand_score(y_all, pred) > 0.98
    fed = run_masked_federated(clients, 2, k_local=2, seed=1)
    pred = np.concatenate([masked_squared_distances(c, fed.centroids).argmin(1) for c in clients])
    assert adjusted_rand_score(y_all, pred) < 0.5


def test_proxies_without_any_uploaded_cluster_fail_clearly():
    from flwr_clustering.algorithms.masked_oneshot import GaussianUpload, proxy_clusters

    empty = GaussianUpload(np.ones(3, bool), np.zeros((0, 3)), np.zeros((0, 3, 3)),
                           np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="no local cluster"):
        proxy_clusters([empty], np.random.default_rng(0))
    with pytest.raises(ValueError, match="no local cluster"):
        proxy_clusters([], np.random.default_rng(0))


def test_assumption8_rate_is_one_on_separated_blobs_and_low_when_the_overlap_is_blind():
    rng = np.random.default_rng(0)
    m0, m1 = np.array([1, 1, 0], bool), np.array([0, 1, 1], bool)

    def client(mask, centres):
        y = np.repeat([0, 1], 50)
        Xc = np.array(centres)[y] + 0.1 * rng.standard_normal((100, 3))
        X = Xc.copy()
        X[:, ~mask] = np.nan
        return X, Xc, y

    # classes differ on the shared feature 1: the masked distances keep the order
    good = [client(m0, [[0, 0, 0], [5, 5, 5]]), client(m1, [[0, 0, 0], [5, 5, 5]])]
    rate = assumption8_rate(*zip(*good, strict=True), np.random.default_rng(1))
    assert rate == 1.0
    # classes equal on the shared feature: the overlap cannot tell them apart
    blind = [client(m0, [[0, 0, 0], [5, 0, 5]]), client(m1, [[0, 0, 0], [5, 0, 5]])]
    rate = assumption8_rate(*zip(*blind, strict=True), np.random.default_rng(1))
    assert 0.2 < rate < 0.8
