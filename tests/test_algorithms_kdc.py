"""KDC core (spec 004 §8): Isolation Kernel, mean maps, κBCC, exact distributed = centralized."""

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components
from sklearn.datasets import make_blobs, make_moons
from sklearn.metrics import normalized_mutual_info_score as nmi

from flwr_clustering.algorithms.kdc import (
    IsolationKernel,
    allocate_sample,
    assign_by_distribution,
    build_ik,
    coreset_kmeans,
    feature_map,
    ik_similarity,
    kbcc,
    kdc_central,
    kernel_mean_maps,
    run_kdc,
    select_parameters,
)


def _shapes(n=600, seed=0):
    """Two moons plus a dense and a sparse blob: 4 clusters of different shape and density."""
    Xm, ym = make_moons(n, noise=0.06, random_state=seed)
    Xb, yb = make_blobs(n // 2, centers=[[3.5, 2.0], [-2.5, 2.5]], cluster_std=[0.15, 0.5],
                        random_state=seed)
    return np.vstack([Xm, Xb]), np.concatenate([ym, yb + 2])


def _split(y, r, how, rng):
    idx = np.arange(len(y))
    if how == "even":
        return np.array_split(rng.permutation(idx), r)
    if how == "uneven":  # one site holds half of the rows
        p = rng.permutation(idx)
        half = len(p) // 2
        return [p[:half]] + list(np.array_split(p[half:], r - 1))
    # one or two clusters per site
    classes = np.unique(y)
    return [np.flatnonzero(np.isin(y, classes[[i % len(classes), (i + 1) % len(classes)]
                                               [: 1 + i % 2]]) & (idx % r == i))
            for i in range(r)]


# --------------------------------------------------------------------- kernel
def test_isolation_kernel_features_and_similarity_by_brute_force():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    for variant in ("anne", "inne"):
        model = build_ik(X, 8, 25, 1, variant)
        F = feature_map(model, X)
        ones = np.asarray(F.sum(axis=1)).ravel()
        if variant == "anne":
            assert (ones == 25).all()
        else:
            assert (ones <= 25).all() and ones.min() < 25
        # brute force: the cell of x in partitioning i, then the fraction of shared cells
        cells = np.full((len(X), 25), -1)
        for i in range(25):
            C = model.centres[i]
            d = np.sqrt(((X[:, None] - C[None]) ** 2).sum(-1))
            j = d.argmin(1)
            inside = model.radii is None or (d[np.arange(len(X)), j] <= model.radii[i, j])
            cells[:, i] = np.where(inside, j, -1)
        shared = ((cells[:, None] == cells[None]) & (cells[:, None] >= 0)).sum(-1) / 25
        S = ik_similarity(F, t=25)
        np.testing.assert_array_equal(S, shared)
        assert (S == S.T).all() and S.min() >= 0 and S.max() <= 1
        if variant == "anne":
            assert (np.diag(S) == 1).all()
        else:  # a centre always lies in its own ball
            Fc = feature_map(model, model.centres[3])
            assert (np.asarray(Fc[:, 3 * 8:4 * 8].sum(axis=1)).ravel() == 1).all()


def test_mean_map_inner_product_is_the_mean_similarity():
    X = np.random.default_rng(2).normal(size=(80, 2))
    model = build_ik(X, 16, 40, 0)
    F = feature_map(model, X)
    groups = [np.arange(0, 30), np.arange(30, 80)]
    M = kernel_mean_maps(F, groups)
    _, scores = assign_by_distribution(F, M)
    S = ik_similarity(F, t=40)
    for i, g in enumerate(groups):
        np.testing.assert_allclose(scores[:, i] / 40, S[:, g].mean(axis=1), rtol=0, atol=1e-12)


def test_assignment_is_the_unnormalised_inner_product_not_the_nearest_map():
    import scipy.sparse as sp

    F = sp.csr_matrix(np.array([[1.0, 0.0, 1.0, 0.0]]))
    M = np.array([[0.5, 0.5, 0.5, 0.5],    # inner product 1.0, far from Phi(x)
                  [0.45, 0.0, 0.45, 0.0]])  # inner product 0.9, nearest to Phi(x)
    assert assign_by_distribution(F, M)[0].tolist() == [0]
    # cosine similarity would pick map 1 (cos 1.0 vs 0.71); ties go to the lowest index
    assert assign_by_distribution(F, np.array([[1.0, 0, 0, 0], [0, 0, 1.0, 0]]))[0][0] == 0


def test_inne_rows_outside_every_ball_get_cluster_zero():
    model = IsolationKernel(np.array([[[0.0], [1.0]]]), np.array([[1.0, 1.0]]))
    F = feature_map(model, np.array([[0.2], [5.0]]))
    assert F[1].nnz == 0
    labels, _ = assign_by_distribution(F, np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert labels.tolist() == [1, 0]


def test_duplicate_sample_points_give_inne_radius_zero():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    model = build_ik(X, 3, 1, 0, "inne")
    dup = (model.centres[0] == 0).all(axis=1)
    assert (model.radii[0][dup] == 0).all()
    F = feature_map(model, X)
    assert (np.asarray(F.sum(axis=1)).ravel() == 1).all()  # still inside (distance 0 <= 0)


# ---------------------------------------------------------------------- κBCC
def _find(parent, a):
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


def test_kbcc_equals_components_by_hand_and_is_monotone_in_tau():
    X, _ = _shapes(200)
    model = build_ik(X, 16, 50, 3)
    F = feature_map(model, X)
    S = ik_similarity(F, t=50)
    for tau in (0.3, 0.5, 0.7):
        # union-find over all pairs with IK > tau
        parent = list(range(len(X)))
        for i, j in zip(*np.nonzero(np.triu(S > tau, 1)), strict=True):
            parent[_find(parent, i)] = _find(parent, j)
        roots = np.array([_find(parent, i) for i in range(len(X))])
        comps = [np.flatnonzero(roots == r) for r in np.unique(roots)]
        comps.sort(key=lambda c: (-len(c), c[0]))
        got = kbcc(F, 3, tau, 50)
        assert [c.tolist() for c in got] == [c.tolist() for c in comps[:3]]
    # raising tau never merges: every component at 0.7 lies inside one at 0.5
    _, low = connected_components(S > 0.5, directed=False)
    _, high = connected_components(S > 0.7, directed=False)
    for c in np.unique(high):
        assert len(np.unique(low[high == c])) == 1
    # tau >= 1: strict ">" leaves singletons
    assert [len(c) for c in kbcc(F, 3, 1.0, 50)] == [1, 1, 1]
    with pytest.raises(ValueError, match="fewer than"):
        kbcc(F, 3, 0.0, 50)


def test_distribution_based_assignment_beats_centre_based_on_moons():
    # spec §8 test 6 (the paper's Fig. 3): G_i = a random 30 % of each true cluster
    X, y = make_moons(1000, noise=0.05, random_state=1)
    rng = np.random.default_rng(0)
    groups = [rng.choice(np.flatnonzero(y == c), 150, replace=False) for c in (0, 1)]
    model = build_ik(X, 32, 100, 0)
    F = feature_map(model, X)
    dist = assign_by_distribution(F, kernel_mean_maps(F, groups))[0]
    means = np.stack([X[g].mean(axis=0) for g in groups])
    centre = ((X[:, None] - means[None]) ** 2).sum(-1).argmin(1)
    assert nmi(y, dist) >= 0.95
    assert nmi(y, centre) < 0.7 < nmi(y, dist)


# ------------------------------------------------------------ the equivalence
@pytest.mark.parametrize("step2,variant", [("kbcc", "anne"), ("kernel-kmeans", "anne"),
                                           ("kbcc", "inne")])
@pytest.mark.parametrize("how", ["even", "uneven", "by-cluster"])
def test_distributed_labels_equal_centralized_labels_exactly(step2, variant, how):
    X, y = _shapes(400)
    rng = np.random.default_rng(5)
    for r in (1, 2, 5, 20):
        if how != "even" and r == 1:
            continue
        parts = _split(y, r, how, rng)
        data = [X[p] for p in parts]
        tau = 0.7 if variant == "anne" else 0.4
        res = run_kdc(data, 4, s=300, psi=16, t=50, tau=tau, step2=step2, variant=variant,
                      seed=7, auto=False)
        n = sum(len(p) for p in parts)
        assert sum(res.sample_sizes) == len(res.B) == min(300, n)
        central = kdc_central(np.vstack(data), res.B, 4, psi=16, t=50, tau=tau, step2=step2,
                              variant=variant, lo=res.lo, hi=res.hi, seed=7)
        assert np.array_equal(central.labels[0], np.concatenate(res.labels)), (r, how)


def test_labels_do_not_depend_on_which_site_holds_the_other_rows():
    X, _ = _shapes(300)
    res = run_kdc(np.array_split(X, 4), 4, s=200, t=50, seed=1, auto=False)
    perm = np.random.default_rng(0).permutation(len(X))
    again = kdc_central(X[perm], res.B, 4, t=50, lo=res.lo, hi=res.hi, seed=1)
    np.testing.assert_array_equal(again.labels[0], np.concatenate(res.labels)[perm])


def test_deterministic_under_a_seed_and_the_seed_matters():
    X, _ = _shapes(300)
    data = np.array_split(X, 3)
    a = run_kdc(data, 4, s=200, t=50, seed=3, auto=False)
    b = run_kdc(data, 4, s=200, t=50, seed=3, auto=False)
    c = run_kdc(data, 4, s=200, t=50, seed=4, auto=False)
    assert all(np.array_equal(p, q) for p, q in zip(a.labels, b.labels, strict=True))
    np.testing.assert_array_equal(a.B, b.B)
    assert not np.array_equal(a.B, c.B)


def test_sample_allocation_edge_cases_and_bad_parameters():
    assert allocate_sample([10, 20, 30, 0], 6).tolist() == [1, 2, 3, 0]
    assert allocate_sample([1, 1, 1], 2).tolist() == [1, 1, 0]  # equal remainders: lower ids
    assert allocate_sample([3, 4], 100).tolist() == [3, 4]  # s >= n: B = D
    X, _ = _shapes(100)
    res = run_kdc([X[:120], np.empty((0, 2)), X[120:]], 4, s=10_000, psi=16, t=50, seed=0, auto=False)
    assert len(res.B) == len(X) and len(res.labels[1]) == 0  # an empty site gets no label
    one = run_kdc([X], 1, s=100, t=20, seed=0, auto=False)
    assert set(one.labels[0].tolist()) == {0}  # k = 1
    with pytest.raises(ValueError, match="psi"):
        run_kdc([X[:5]], 2, psi=16, t=10, auto=False)
    with pytest.raises(ValueError, match="NaN"):
        run_kdc([np.full((5, 2), np.nan)], 2, auto=False)
    with pytest.raises(ValueError, match="step2"):
        run_kdc([X], 2, step2="dbscan", auto=False)


# ------------------------------------------------------------ quality and choice
def test_label_free_parameter_choice_finds_the_shapes():
    X, y = _shapes(600)
    data = [X[p] for p in np.array_split(np.random.default_rng(0).permutation(len(X)), 5)]
    order = np.concatenate(np.array_split(np.random.default_rng(0).permutation(len(X)), 5))
    B = run_kdc(data, 4, s=600, t=50, seed=0, auto=False).B
    choice = select_parameters(B, 4, t=100, seed=0)
    res = run_kdc(data, 4, s=600, psi=choice["psi"], tau=choice["tau"], t=100, seed=0, auto=False)
    score = nmi(y[order], np.concatenate(res.labels))
    _, labels, info = coreset_kmeans(data, 4, size=200, seed=0)
    baseline = nmi(y[order], np.concatenate(labels))
    assert score >= 0.9 > baseline + 0.1, (choice, score, baseline)
    assert len(info["points-sent"]) == 5
    assert info["total-weight"] == pytest.approx(len(X))  # Balcan et al.: weights sum to n
    assert info["used-weight"] >= info["total-weight"]  # negative centre weights left out
    with pytest.raises(ValueError, match="no \\(psi, tau\\)"):
        select_parameters(B, 40, t=20, psi_grid=(4,), tau_grid=(0.5,))


def test_parameters_ranked_on_a_subsample_hold_on_the_whole_sample():
    X, _ = _shapes(600)
    B = run_kdc([X], 4, s=900, t=50, tau=0.7, seed=0, auto=False).B
    choice = select_parameters(B, 4, t=50, max_points=150, seed=0)
    F = feature_map(build_ik(B, choice["psi"], 50, np.random.default_rng(0)), B)
    cores = kbcc(F, 4, choice["tau"], 50)
    assert min(len(c) for c in cores) >= 0.02 * len(B) and choice["tau"] in choice["run"]


def test_kernel_kmeans_starts_and_blocked_assignment():
    import flwr_clustering.algorithms.kdc as kdc

    X, _ = _shapes(300)
    one = run_kdc([X], 4, s=300, t=30, step2="kernel-kmeans", seed=1, auto=False)
    ten = run_kdc([X], 4, s=300, t=30, step2="kernel-kmeans", seed=1, n_init=10, auto=False)
    F = feature_map(one.model, one.B).toarray()

    def inertia(groups):
        return sum(((F[g] - F[g].mean(axis=0)) ** 2).sum() for g in groups)

    # the best of 10 starts (the first of which is the single start) fits at least as well
    assert inertia(ten.groups) <= inertia(one.groups) + 1e-9
    # step 3 in blocks gives the same labels as in one piece
    small = kdc_central(X, one.B, 4, t=30, step2="kernel-kmeans", lo=one.lo, hi=one.hi, seed=1)
    old = kdc._ASSIGN_BLOCK
    try:
        kdc._ASSIGN_BLOCK = 7
        blocked = kdc_central(X, one.B, 4, t=30, step2="kernel-kmeans", lo=one.lo, hi=one.hi,
                              seed=1)
    finally:
        kdc._ASSIGN_BLOCK = old
    np.testing.assert_array_equal(blocked.labels[0], small.labels[0])


def test_no_valid_parameters_falls_back_to_the_closest_and_warns():
    # 300 rows of a 20-D Gaussian, k = 10: no (psi, tau) gives 10 cores of 2 % (6 rows)
    # each. The run still clusters, with the grid point whose 10th core is largest.
    X = np.random.default_rng(0).normal(size=(300, 20))
    with pytest.warns(RuntimeWarning, match=r"KDC: no \(psi, tau\) on the grid gives 10 "
                      r"κBCC cores of at least 6 sample rows each; using the closest, "
                      r"psi=8, tau=0\.55, whose smallest core has 5 rows: a small cluster "
                      r"may be merged"):
        res = run_kdc([X[:150], X[150:]], 10, s=300, t=50, seed=0)
    sel = res.extra["selection"]
    assert sel["fallback"] is True and sel["run"] == []
    assert (sel["smallest-core"], sel["min-core-rows"]) == (5, 6)
    assert [len(r) for r in res.labels] == [150, 150]
    assert len(res.groups) == 10 and min(len(g) for g in res.groups) == 5
    # no grid point has even k components: still an error, saying what to change
    with pytest.raises(ValueError, match=r"no \(psi, tau\) on the grid gives 400 κBCC "
                       r"components on the 300-row sample: lower k"):
        select_parameters(res.B, 400, t=20, psi_grid=(4,), tau_grid=(0.5,))


def test_the_strategy_warns_on_a_fallback_choice(caplog):
    import logging

    from flwr_clustering.clients.kdc import KDCClient
    from flwr_clustering.strategies import KDC
    from flwr_clustering.testing import InProcessGrid, client_app_for

    X = np.random.default_rng(0).normal(size=(300, 20))
    app = client_app_for(KDCClient, [X[:150], X[150:]])
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="flwr_clustering"):
            strategy = KDC(10, min_nodes=2, sample_size=300, t=50)
            strategy.start(grid=InProcessGrid(app, 2))
    finally:
        logger.removeHandler(caplog.handler)
    assert strategy.selection["fallback"] is True
    assert strategy.diagnostics["selection-fallback"] is True
    logged = {r.getMessage() for r in caplog.records if "using the closest" in r.getMessage()}
    assert [w for w in strategy.warnings if "using the closest" in w] == sorted(logged)
    assert len(logged) == 1
    assert any("using the closest, psi=8, tau=0.55" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


def test_sums_cannot_tell_a_poor_kdc_result_from_a_correct_non_convex_one():
    # docs/algorithms/kdc.md: the statistics a server could gather (the partition's SSE
    # against k-means', and how well the nearest KDC-cluster mean reproduces the labels)
    # put the poor result on two overlapping Gaussians inside the range of the correct
    # results on moons and circles, so no warning rule on them separates the two.
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_circles
    from sklearn.metrics import adjusted_rand_score

    def stats(X, y):
        r = run_kdc([X[i::5] for i in range(5)], 2)
        order = np.concatenate([np.arange(i, len(X), 5) for i in range(5)])
        X, y, labels = X[order], y[order], np.concatenate(r.labels)
        groups = np.unique(labels)
        means = np.array([X[labels == c].mean(axis=0) for c in groups])
        sse = sum(((X[labels == c] - m) ** 2).sum() for c, m in zip(groups, means, strict=True))
        nearest = ((X[:, None] - means[None]) ** 2).sum(-1).argmin(1)
        return (adjusted_rand_score(y, labels),
                sse / KMeans(2, n_init=10, random_state=0).fit(X).inertia_,
                adjusted_rand_score(labels, nearest))

    correct = [stats(*make_moons(1500, noise=0.05, random_state=0)),
               stats(*make_circles(1500, noise=0.05, factor=0.5, random_state=0))]
    poor = stats(*make_blobs(1500, centers=[[0, 0], [2.5, 0]], cluster_std=1.0,
                             random_state=0))
    assert all(ari > 0.95 for ari, _, _ in correct) and poor[0] < 0.2
    assert min(s for _, s, _ in correct) > 1.3 and poor[1] < 2.0  # SSE ratios overlap
    assert poor[2] > max(a for _, _, a in correct)  # the poor one looks *more* Voronoi
