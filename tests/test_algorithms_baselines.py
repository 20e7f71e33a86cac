"""M-Avg and FFCM cores (spec 001 §3.2 and §3.4): hand-checked cases and exactness properties."""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from flwr_clustering.algorithms.ffcm import (
    check_ffcm_uploads,
    fcm,
    fcm_centres,
    fcm_memberships,
    fcm_objective,
    feature_moments,
    ffcm_client,
    ffcm_random_init,
    ffcm_server_v1,
    ffcm_server_v2,
    pooled_mean_std,
    run_ffcm,
)
from flwr_clustering.algorithms.lloyd import client_rng, local_kmeans, matched_shift
from flwr_clustering.algorithms.mavg import (
    match_to,
    mavg_client,
    mavg_server,
    run_mavg,
)

TRUE_CENTRES = np.array([[0.0, 0.0], [12.0, 0.0], [0.0, 12.0], [12.0, 12.0]])


def _blobs(n=800, std=0.6, seed=0, centres=TRUE_CENTRES):
    return make_blobs(n, centers=centres, cluster_std=std, random_state=seed)


def _iid(X, parts, seed=0):
    idx = np.random.default_rng(seed).permutation(len(X))
    return [X[i] for i in np.array_split(idx, parts)]


# ================================================================== M-Avg
def test_mavg_server_averages_permuted_copies_in_reference_order():
    rng = np.random.default_rng(0)
    base = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    noisy = [base + rng.normal(scale=0.1, size=base.shape) for _ in range(4)]
    perms = [np.arange(3), np.array([2, 0, 1]), np.array([1, 2, 0]), np.array([2, 1, 0])]
    uploads = [C[p] for C, p in zip(noisy, perms, strict=True)]
    expected = np.mean(noisy, axis=0)  # un-permuted by hand: slot j of every client is base[j]
    for reference in ("first", "running"):
        out = mavg_server(uploads, reference=reference)
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)
    # the reference's own order is the output order
    out = mavg_server([uploads[1], *uploads[2:], uploads[0]])
    np.testing.assert_allclose(out, expected[perms[1]], atol=1e-12)


def test_mavg_server_ignores_row_order_of_non_reference_clients():
    rng = np.random.default_rng(1)
    uploads = [rng.normal(size=(5, 3)) * 4 for _ in range(4)]
    for reference in ("first", "running"):
        ref = mavg_server(uploads, reference=reference)
        for i in (1, 2, 3):
            shuffled = list(uploads)
            shuffled[i] = uploads[i][rng.permutation(5)]
            np.testing.assert_array_equal(mavg_server(shuffled, reference=reference), ref)


def test_mavg_running_and_first_reference_differ_as_computed_by_hand():
    c0 = np.array([[2.0, 0.0], [8.0, 2.0]])
    c1 = np.array([[8.0, 2.0], [6.0, 6.0]])
    c2 = np.array([[5.0, 3.0], [5.0, 0.0]])
    # c1 -> c0: identity costs |(2,0)-(8,2)| + |(8,2)-(6,6)| = 6.32 + 4.47 = 10.80,
    #           swap costs |(2,0)-(6,6)| + 0 = 7.21 -> swap.  Running mean: (4,3), (8,2).
    # c2 -> c0: identity 4.24 + 3.61 = 7.85, swap |(2,0)-(5,0)| + |(8,2)-(5,3)| = 3 + 3.16 = 6.16
    #           -> swap.
    # c2 -> running mean: identity |(4,3)-(5,3)| + |(8,2)-(5,0)| = 1 + 3.61 = 4.61,
    #           swap 3.16 + 3.16 = 6.32 -> identity.
    first = mavg_server([c0, c1, c2], reference="first")
    running = mavg_server([c0, c1, c2], reference="running")
    np.testing.assert_allclose(first, [[13 / 3, 2.0], [7.0, 7 / 3]], atol=1e-12)
    np.testing.assert_allclose(running, [[13 / 3, 3.0], [7.0, 4 / 3]], atol=1e-12)
    assert not np.allclose(first, running)


def test_mavg_matching_cost_is_euclidean_by_default():
    r = np.array([[5.0, 3.0], [2.0, 5.0]])
    c = np.array([[3.0, 5.0], [0.0, 2.0]])
    # Euclidean: identity sqrt(8) + sqrt(13) = 6.43 > swap sqrt(26) + 1 = 6.10 -> swap;
    # squared:   identity 8 + 13 = 21 < swap 26 + 1 = 27 -> identity.
    np.testing.assert_allclose(mavg_server([r, c]), [[2.5, 2.5], [2.5, 5.0]])
    np.testing.assert_allclose(mavg_server([r, c], metric="sqeuclidean"), [[4.0, 4.0], [1.0, 3.5]])


def test_mavg_iterated_matching_ends_at_a_fixed_point():
    rng = np.random.default_rng(2)
    uploads = [rng.uniform(0, 10, size=(4, 2)) for _ in range(6)]
    out = mavg_server(uploads, max_iter=50)
    perms = [match_to(out, C) for C in uploads]
    # re-matching every client to the result does not change it
    np.testing.assert_allclose(np.mean([C[p] for C, p in zip(uploads, perms, strict=True)], 0),
                               out, atol=1e-12)
    # and the one-shot result on this data is not that fixed point (so iterating mattered)
    one = mavg_server(uploads)
    assert not np.allclose(one, out)


def test_mavg_server_rejects_malformed_uploads():
    good = np.zeros((3, 2))
    cases = [
        ([], "at least one client"),
        ([good, np.zeros((4, 2))], r"client 1 centroids have shape \(4, 2\)"),
        ([good, np.zeros((3, 5))], "same k and d"),
        ([good, np.array([[0.0, np.nan]] * 3)], "NaN or inf"),
        ([np.zeros(3)], "2-D"),
        ([np.zeros((0, 2))], "no row"),
    ]
    for uploads, match in cases:
        with pytest.raises(ValueError, match=match):
            mavg_server(uploads)
    with pytest.raises(ValueError, match="reference"):
        mavg_server([good], reference="median")
    with pytest.raises(ValueError, match="max_iter"):
        mavg_server([good], max_iter=0)


def test_local_kmeans_small_client_and_mavg_client_needs_k_points():
    X = np.arange(6.0).reshape(3, 2)
    C, labels = local_kmeans(X, 5, np.random.default_rng(0))
    assert C.shape == (3, 2) and sorted(labels.tolist()) == [0, 1, 2]
    np.testing.assert_allclose(np.sort(C, axis=0), X)
    with pytest.raises(ValueError, match="n=3 points for k=5"):
        mavg_client(X, 5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="NaN"):
        local_kmeans(np.array([[np.nan, 1.0]]), 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="client 1 data has 3 features but the model has 2"):
        run_mavg([X, np.ones((5, 3))], 2, privacy_threshold=0)


def test_local_kmeans_labels_are_the_nearest_centroids():
    X, _ = _blobs(300)
    C, labels = local_kmeans(X, 4, np.random.default_rng(3))
    d2 = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(labels, d2.argmin(1))


def test_run_mavg_recovers_separated_blobs_and_translates():
    X, y = _blobs(1000, seed=4)
    clients = _iid(X, 5, seed=4)
    # precondition: every client's single-start k-means finds one centroid per blob
    for i, Xi in enumerate(clients):
        assert matched_shift(TRUE_CENTRES, mavg_client(Xi, 4, client_rng(7, i), privacy_threshold=0)) < 0.3
    C = run_mavg(clients, 4, seed=7, privacy_threshold=0)
    pooled_means = np.array([X[y == j].mean(0) for j in range(4)])
    assert matched_shift(TRUE_CENTRES, C) < 0.15
    assert matched_shift(pooled_means, C) < 0.05  # local means of an IID split average out
    shift = np.array([1e4, -3e3])
    C_shifted = run_mavg([Xi + shift for Xi in clients], 4, seed=7, privacy_threshold=0)
    np.testing.assert_allclose(C_shifted, C + shift, rtol=0, atol=1e-8)


# ==================================================================== FCM
def test_memberships_rows_sum_to_one_and_hand_case():
    rng = np.random.default_rng(0)
    X, V = rng.normal(size=(50, 3)) * 1e6, rng.normal(size=(4, 3)) * 1e6
    U = fcm_memberships(X, V)
    np.testing.assert_allclose(U.sum(1), 1.0, rtol=0, atol=1e-14)
    assert (U > 0).all()
    # 1-D: centres 0 and 1, point at 1/3: d1 = 1/3, d2 = 2/3, m = 2:
    # u1 = d2^2 / (d1^2 + d2^2) = (4/9) / (5/9) = 0.8
    U = fcm_memberships(np.array([[1 / 3]]), np.array([[0.0], [1.0]]))
    np.testing.assert_allclose(U, [[0.8, 0.2]], rtol=1e-15)
    # m = 3: u1 = 1 / (1 + (d1/d2)^(2/(m-1))) = 1 / (1 + 1/2) = 2/3
    U = fcm_memberships(np.array([[1 / 3]]), np.array([[0.0], [1.0]]), m=3.0)
    np.testing.assert_allclose(U, [[2 / 3, 1 / 3]], rtol=1e-15)


def test_memberships_of_points_on_centres_are_exact():
    V = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [5.0, 5.0]])
    X = np.array([[0.0, 0.0], [1.0, 1.0], [3.0, 3.0], [5.0, 5.0]])
    U = fcm_memberships(X, V)
    assert not np.isnan(U).any()
    np.testing.assert_array_equal(U[0], [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(U[1], [0.0, 0.5, 0.5, 0.0])  # coincident centres share
    np.testing.assert_array_equal(U[3], [0.0, 0.0, 0.0, 1.0])
    # far away from a tiny-scale cloud: no overflow, still rows of 1
    U = fcm_memberships(np.array([[1e-200, 0.0]]), np.array([[0.0, 0.0], [1e200, 0.0]]))
    np.testing.assert_array_equal(U, [[1.0, 0.0]])
    with pytest.raises(ValueError, match="m must be"):
        fcm_memberships(X, V, m=1.0)


def test_fcm_centre_update_is_the_weighted_mean():
    X = np.array([[0.0], [1.0], [4.0]])
    U = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    # v1 = (1*0 + 0.25*1) / 1.25 = 0.2 ; v2 = (0.25*1 + 1*4) / 1.25 = 3.4
    np.testing.assert_allclose(fcm_centres(X, U), [[0.2], [3.4]], rtol=1e-15)
    # a centre with no weight stays where it was
    U0 = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(fcm_centres(X, U0, previous=np.array([[9.0], [7.0]])),
                               [[5 / 3], [7.0]])
    with pytest.raises(ValueError, match="zero total membership"):
        fcm_centres(X, U0)
    # one iteration of fcm = one memberships -> centres step
    V0 = np.array([[0.5], [3.0]])
    V1, U1, n = fcm(X, V0, max_iter=1)
    np.testing.assert_allclose(V1, fcm_centres(X, fcm_memberships(X, V0)), rtol=1e-15)
    np.testing.assert_array_equal(U1, fcm_memberships(X, V1))
    assert n == 1


def test_fcm_objective_never_increases():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 2)) * [3.0, 1.0]
    V0 = rng.normal(size=(5, 2))
    Js = []
    for t in range(0, 25):
        V, U, _ = fcm(X, V0, max_iter=t, tol=-1.0)
        Js.append(fcm_objective(X, V, U=U))
        assert fcm_objective(X, V) == pytest.approx(Js[-1], rel=1e-12)
    assert all(b <= a * (1 + 1e-12) for a, b in zip(Js, Js[1:], strict=False))
    assert Js[-1] < Js[0] * 0.9


def test_fcm_converges_to_kmeans_centres_on_separated_blobs():
    X, _ = _blobs(800, std=0.5, seed=1)
    km = KMeans(4, n_init=10, random_state=0).fit(X)
    V0 = km.cluster_centers_ + np.random.default_rng(0).normal(scale=2.0, size=(4, 2))
    V, U, n_iter = fcm(X, V0, tol=1e-8, max_iter=500)
    assert n_iter < 500
    assert matched_shift(km.cluster_centers_, V) < 0.05
    # converged: one more iteration moves no centre by more than the tolerance
    V2, _, _ = fcm(X, V, max_iter=1)
    assert np.abs(V2 - V).max() <= 1e-8


def test_fcm_stopping_rules_are_the_documented_quantities():
    X, _ = _blobs(400, std=1.5, seed=2)
    V0 = np.array([[5.0, 5.0], [6.0, 5.0], [5.0, 7.0], [4.0, 4.0]])
    for criterion, tol in (("centres", 1e-3), ("memberships", 1e-3)):
        V, U, n = fcm(X, V0, tol=tol, criterion=criterion, max_iter=1000)
        Vp, Up, _ = fcm(X, V0, tol=-1.0, max_iter=n - 1)
        Vpp, Upp, _ = fcm(X, V0, tol=-1.0, max_iter=n - 2)
        if criterion == "centres":
            last, before = np.linalg.norm(V - Vp, axis=1).max(), np.linalg.norm(Vp - Vpp, axis=1).max()
        else:
            last, before = np.linalg.norm(U - Up), np.linalg.norm(Up - Upp)
        assert last <= tol < before
    # the membership rule is scale-free, the centre rule is in data units
    _, _, n = fcm(X, V0, tol=1e-3, criterion="memberships")
    _, _, n_big = fcm(X * 1e6, V0 * 1e6, tol=1e-3, criterion="memberships")
    assert n_big == n
    _, _, n_c = fcm(X, V0, tol=1e-3, criterion="centres", max_iter=1000)
    _, _, n_c_big = fcm(X * 1e6, V0 * 1e6, tol=1e-3, criterion="centres", max_iter=1000)
    assert n_c_big > n_c


# =================================================================== FFCM
def test_ffcm_single_client_v1_equals_local_fcm_exactly():
    X, _ = _blobs(500, std=1.0, seed=3)
    V0 = np.array([[1.0, 1.0], [8.0, 1.0], [1.0, 8.0], [8.0, 8.0]])
    V, _, _ = fcm(X, V0)
    res = run_ffcm([X], 4, rounds=1, init=V0)
    np.testing.assert_array_equal(res.centroids, V)
    res3 = run_ffcm([X], 4, rounds=3, init=V0)
    for r in range(3):
        V0 = fcm(X, V0)[0]
        np.testing.assert_array_equal(res3.history[r], V0)


def test_ffcm_v1_duplicated_clients_equal_the_single_client():
    X, _ = _blobs(400, std=1.5, seed=5)
    V0 = np.array([[3.0, 3.0], [9.0, 2.0], [2.0, 9.0], [10.0, 10.0]])
    single = run_ffcm([X], 4, rounds=5, init=V0)
    double = run_ffcm([X, X.copy()], 4, rounds=5, init=V0)
    np.testing.assert_array_equal(double.centroids, single.centroids)  # s/(2s) = 1/2 exactly
    triple = run_ffcm([X, X, X], 4, rounds=5, init=V0)
    np.testing.assert_allclose(triple.centroids, single.centroids, rtol=1e-12, atol=0)


def test_ffcm_v1_server_by_hand_and_zero_support():
    up1 = (np.array([[0.0], [10.0], [4.0]]), np.array([1.0, 3.0, 0.0]))
    up2 = (np.array([[2.0], [20.0], [6.0]]), np.array([3.0, 1.0, 0.0]))
    # V_1 = (1*0 + 3*2)/4 = 1.5 ; V_2 = (3*10 + 1*20)/4 = 12.5 ; V_3: no support
    prev = np.array([[0.0], [0.0], [-1.0]])
    np.testing.assert_allclose(ffcm_server_v1([up1, up2], previous=prev), [[1.5], [12.5], [-1.0]])
    np.testing.assert_allclose(ffcm_server_v1([up1, up2]), [[1.5], [12.5], [5.0]])
    with pytest.raises(ValueError, match="supports must be finite and >= 0"):
        ffcm_server_v1([up1, (up2[0], np.array([1.0, -1.0, 0.0]))])
    with pytest.raises(ValueError, match="same k and d"):
        ffcm_server_v1([up1, (np.zeros((3, 2)), up2[1])])
    with pytest.raises(ValueError, match=r"supports must have shape \(3,\)"):
        check_ffcm_uploads([(up1[0], np.ones(2))])


def test_ffcm_client_empty_and_supports():
    X, _ = _blobs(200, seed=6)
    V = TRUE_CENTRES + 1.0
    V_loc, s = ffcm_client(X, V)
    np.testing.assert_allclose(s.sum(), len(X), rtol=1e-12)  # memberships of each row sum to 1
    np.testing.assert_allclose(s, fcm_memberships(X, V_loc).sum(0), rtol=1e-12)
    V_e, s_e = ffcm_client(np.zeros((0, 2)), V)
    np.testing.assert_array_equal(V_e, V)
    np.testing.assert_array_equal(s_e, 0.0)
    # an empty client does not move the v1 average
    np.testing.assert_array_equal(ffcm_server_v1([(V_loc, s), (V_e, s_e)], previous=V), V_loc)
    with pytest.raises(ValueError, match="feature-count mismatch"):
        ffcm_client(np.ones((4, 3)), V)


def test_ffcm_v2_recovers_weighted_or_unweighted_group_means():
    rng = np.random.default_rng(7)
    groups = np.array([[0.0, 0.0], [50.0, 0.0], [0.0, 50.0]])
    uploads = []
    for _ in range(4):
        order = rng.permutation(3)
        uploads.append((groups[order] + rng.normal(scale=1.0, size=(3, 2)),
                        rng.uniform(1.0, 100.0, size=3)))
    pts = {g: [] for g in range(3)}
    for V, s in uploads:
        for row, w in zip(V, s, strict=True):
            pts[int(np.argmin(((groups - row) ** 2).sum(1)))].append((row, w))
    unweighted = np.array([np.mean([r for r, _ in pts[g]], 0) for g in range(3)])
    weighted = np.array([np.average([r for r, _ in pts[g]], axis=0, weights=[w for _, w in pts[g]])
                         for g in range(3)])
    assert np.abs(weighted - unweighted).max() > 0.05  # the weighting is visible
    out = ffcm_server_v2(uploads, 3, np.random.default_rng(0))
    assert out.shape == (3, 2)
    assert matched_shift(unweighted, out) < 1e-9
    out_w = ffcm_server_v2(uploads, 3, np.random.default_rng(0), weighted=True)
    assert matched_shift(weighted, out_w) < 1e-9
    # from previous centres (rounds >= 2) the output keeps their order
    prev = groups[[2, 0, 1]] + 3.0
    out_p = ffcm_server_v2(uploads, 3, np.random.default_rng(0), previous=prev, weighted=True)
    np.testing.assert_allclose(out_p, weighted[[2, 0, 1]], atol=1e-9)
    with pytest.raises(ValueError, match="expected k=4"):
        ffcm_server_v2(uploads, 4, np.random.default_rng(0))


def test_pooled_mean_std_equals_numpy_on_the_concatenation():
    rng = np.random.default_rng(8)
    clients = [rng.normal(loc=[3.0, -7.0, 10.0], scale=[1.0, 5.0, 2.0], size=(n, 3))
               for n in (17, 250, 1, 0, 90)]
    moments = [feature_moments(X) for X in clients]
    mean, std = pooled_mean_std(moments)
    pooled = np.concatenate(clients)
    np.testing.assert_allclose(mean, pooled.mean(0), rtol=1e-12, atol=0)
    np.testing.assert_allclose(std, pooled.std(0), rtol=1e-12, atol=0)
    # additive: the element-wise sum of the clients' triples (what secure aggregation
    # would reveal) gives the same answer
    summed = tuple(sum(mom[j] for mom in moments) for j in range(3))
    for a, b in zip(pooled_mean_std([summed]), (mean, std), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-14)
    assert feature_moments(clients[3])[0] == 0
    with pytest.raises(ValueError, match="feature-count mismatch"):
        pooled_mean_std([feature_moments(clients[0]), feature_moments(np.ones((2, 2)))])
    with pytest.raises(ValueError, match="no point"):
        pooled_mean_std([feature_moments(np.zeros((0, 3)))])


def test_random_init_lies_in_the_box_and_scales_with_the_data():
    mean, std = np.array([5e5, -2e5]), np.array([2.5e5, 1e5])
    V = ffcm_random_init(mean, std, 15, np.random.default_rng(0))
    assert V.shape == (15, 2)
    assert ((V >= mean - 2 * std) & (V < mean + 2 * std)).all()
    unit = ffcm_random_init(np.zeros(2), np.ones(2), 15, np.random.default_rng(0))
    np.testing.assert_allclose(V, mean + std * unit, rtol=1e-12)
    with pytest.raises(ValueError, match="std >= 0"):
        ffcm_random_init(mean, -std, 3, np.random.default_rng(0))


def test_run_ffcm_is_deterministic_and_records_every_round():
    X, _ = _blobs(600, std=0.8, seed=9)
    clients = _iid(X * 1e5, 3, seed=9)  # S-set scale
    for version in (1, 2):
        a = run_ffcm(clients, 4, version=version, rounds=6, seed=11)
        b = run_ffcm(clients, 4, version=version, rounds=6, seed=11)
        c = run_ffcm(clients, 4, version=version, rounds=6, seed=12)
        assert len(a.history) == 6 and len(a.shifts) == 6
        np.testing.assert_array_equal(a.centroids, a.history[-1])
        np.testing.assert_array_equal(a.initial, b.initial)
        for ha, hb in zip(a.history, b.history, strict=True):
            np.testing.assert_array_equal(ha, hb)
        assert not np.array_equal(a.initial, c.initial)
        mean, std = X.mean(0) * 1e5, X.std(0) * 1e5
        assert (np.abs(a.initial - mean) <= 2 * std + 1e-6).all()
    # the explicit init is used as V0 and the early stop ends the history
    V0 = TRUE_CENTRES * 1e5 + 3e4
    res = run_ffcm(clients, 4, rounds=50, init=V0, global_tol=1.0)
    np.testing.assert_array_equal(res.initial, V0)
    assert res.converged and len(res.history) < 50 and res.shifts[-1] <= 1.0
    # on an IID split the FFCM v1 fixed point is close to centralized FCM from V0
    V_central, _, _ = fcm(np.concatenate(clients), V0, tol=1e-6, max_iter=1000)
    assert matched_shift(V_central, res.centroids) < 0.01e5
    with pytest.raises(ValueError, match="version"):
        run_ffcm(clients, 4, version=3)


def test_run_ffcm_authors_init_draws_small_integers():
    from flwr_clustering.algorithms.ffcm import run_ffcm

    rng = np.random.default_rng(0)
    clients = [1e5 + rng.normal(size=(30, 2)) for _ in range(2)]
    res = run_ffcm(clients, 3, rounds=1, seed=4, init="authors")
    np.testing.assert_array_equal(
        res.initial, np.random.default_rng(4).integers(-10, 10, size=(3, 2)).astype(float))
    with pytest.raises(ValueError, match="authors"):
        run_ffcm(clients, 3, rounds=1, init="scaled")
