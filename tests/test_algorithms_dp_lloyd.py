"""Differentially private federated Lloyd (the core, no Flower): accounting, exactness, attack."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flwr_clustering.algorithms.dp_lloyd import (
    clip_rows,
    dp_candidate_stats,
    dp_epsilon,
    dp_epsilon_of,
    dp_init_candidates,
    dp_init_from_candidates,
    dp_initial_centroids,
    dp_moment_stats,
    dp_noise_plan,
    dp_server_step,
    moments_sensitivity,
    noise_multiplier_for,
    run_dp_lloyd,
    sensitivity,
    server_epsilon,
)
from flwr_clustering.algorithms.lloyd import assign_to_nearest, cluster_sums
from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.data.synthetic import garst_beta_split
from simulations.privacy import differencing_attack, recovered_rows

dp_accounting = pytest.importorskip("dp_accounting")


def _clients(beta=1.0):
    X, _, c = garst_beta_split(beta)
    X = X - X.mean(axis=0)
    return [X[c == i] for i in range(5)]


def test_the_reported_epsilon_is_the_accountants_for_the_rounds_run():
    parts = _clients()
    res = run_dp_lloyd(parts, 16, epsilon=2.0, delta=1e-5, bound=15.0, rounds=7, seed=0,
                       init="random")
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier=res.noise_multiplier), 7)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    rdp = dp_accounting.rdp.RdpAccountant()
    assert res.accountant == "pld"
    assert res.epsilon == res.epsilons["pld"] == pld.compose(event).get_epsilon(1e-5)
    # the RDP figure of the same noise beside it, larger
    assert res.epsilons["rdp"] == rdp.compose(event).get_epsilon(1e-5) > res.epsilon
    assert 2.0 * (1 - 1e-3) <= res.epsilon <= 2.0  # calibrated to the target from below
    assert res.sigma == res.noise_multiplier * math.sqrt(15.0**2 + 1)
    # the server sees each upload with 1/sqrt(5) of the noise: a weaker guarantee
    assert res.server_epsilon == dp_epsilon(res.noise_multiplier / math.sqrt(5), 7, 1e-5)
    assert res.server_epsilon > res.epsilon
    assert server_epsilon(res.noise_multiplier, 7, 1e-5, 5, "central") == math.inf


def test_more_rounds_or_a_smaller_epsilon_need_more_noise():
    for method in ("pld", "rdp"):
        z = [noise_multiplier_for(eps, 1e-5, 10, accountant=method)
             for eps in (8.0, 4.0, 2.0, 1.0, 0.5)]
        assert z == sorted(z) and z[0] > 0
        assert (noise_multiplier_for(2.0, 1e-5, 20, accountant=method)
                > noise_multiplier_for(2.0, 1e-5, 10, accountant=method))
        assert noise_multiplier_for(math.inf, 1e-5, 10, accountant=method) == 0.0
        with pytest.raises(ValueError, match="delta"):
            noise_multiplier_for(1.0, 0.0, 10, accountant=method)
    with pytest.raises(ValueError, match="accountant must be one of"):
        noise_multiplier_for(1.0, 1e-5, 10, accountant="moments")


def test_without_noise_it_is_exactly_lloyd_on_the_clipped_pooled_rows():
    parts = _clients()
    bound = 6.0  # clips part of the grid: the clipped rows are what is clustered
    res = run_dp_lloyd(parts, 16, epsilon=math.inf, delta=1e-5, bound=bound, rounds=5, seed=3,
                       init="random")
    X = clip_rows(np.vstack(parts), bound)
    C = dp_initial_centroids(16, 2, bound, np.random.default_rng(3))
    for _ in range(5):
        sums, counts = cluster_sums(X, assign_to_nearest(X, C)[0], 16)
        C = dp_server_step(sums, counts.astype(float), C, bound=bound)
    np.testing.assert_allclose(res.centroids, C, rtol=0, atol=1e-12)
    assert res.epsilon == math.inf and res.noise_multiplier == 0.0


def test_clipping_the_server_step_and_the_sensitivity():
    X = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    np.testing.assert_allclose(clip_rows(X, 1.0), [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]])
    assert sensitivity(3.0) == math.sqrt(10.0)
    prev = np.array([[0.1, 0.1], [0.2, 0.2]])
    new = dp_server_step(np.array([[10.0, 0.0], [5.0, 5.0]]), np.array([0.5, 2.0]), prev,
                         bound=2.0)
    np.testing.assert_allclose(new[0], prev[0])  # noisy count below 1: stays
    np.testing.assert_allclose(new[1], [math.sqrt(2), math.sqrt(2)])  # (2.5, 2.5) clipped
    with pytest.raises(ValueError, match="placement"):
        run_dp_lloyd(_clients(), 4, epsilon=1.0, delta=1e-5, bound=1.0, rounds=1,
                     placement="local")


def _as_uploads(per_round):
    """A client's (sums, counts) per round as the aligned uploads the attack reads."""
    out = []
    for sums, counts in per_round:
        n = np.rint(counts).astype(np.int64)
        means = np.divide(sums, np.maximum(counts, 1e-12)[:, None])
        out.append(LocalCentroids(means, n, np.arange(len(n), dtype=np.int64)))
    return out


@pytest.mark.parametrize("placement", ["distributed", "central"])
def test_the_differencing_attack_recovers_rows_without_noise_and_none_with_it(placement):
    parts = _clients(1.0)
    bound = 50.0  # no row is clipped: the exact rows are there to be found

    def attack(res):
        return sum(recovered_rows(differencing_attack(_as_uploads([r[i] for r in res.uploads])),
                                  parts[i]) for i in range(len(parts)))

    exact = run_dp_lloyd(parts, 16, epsilon=math.inf, delta=1e-5, bound=bound, rounds=20,
                         seed=0, placement=placement)
    assert attack(exact) >= 1  # the threat is real on these data
    for eps in (8.0, 1.0):
        noisy = run_dp_lloyd(parts, 16, epsilon=eps, delta=1e-5, bound=bound, rounds=20,
                             seed=0, placement=placement)
        if placement == "distributed":
            assert attack(noisy) == 0
        else:  # central noise: the server receives exact uploads and is trusted
            assert attack(noisy) >= 1


# ----------------------------------------------------------- the DP start ("moments")
def test_the_moments_plan_composes_to_the_target_and_the_accountant_counts_every_mechanism():
    zs = dp_noise_plan(1.0, 1e-6, 2)
    assert len(zs) == 4  # moments, candidates, two Lloyd steps
    # init_share 0.5: each init mechanism 1/4 of 1/z^2, each step 1/4
    assert zs[0] == pytest.approx(zs[2], rel=1e-12) and zs[1] == zs[0]
    # the PLD accountant fed the same events (here four equal multipliers, self-composed)
    assert len(set(zs)) == 1
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier=zs[0]), 4))
    eps = acc.get_epsilon(1e-6)
    assert eps == dp_epsilon_of(zs, 1e-6)
    assert 1.0 * (1 - 1e-3) <= eps <= 1.0
    # a larger start share: less noise on the start, more on the steps, same epsilon
    more = dp_noise_plan(1.0, 1e-6, 2, init_share=0.8)
    assert more[0] < zs[0] and more[2] > zs[2]
    assert dp_epsilon_of(more, 1e-6) == pytest.approx(eps, rel=1e-3)
    # different multipliers compose as the one Gaussian of (sum z_i^-2)^-1/2: what the
    # PLD accountant finds composing them one by one, to its discretisation
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    for z in more:
        acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=z))
    assert abs(dp_epsilon_of(more, 1e-6) - acc.get_epsilon(1e-6)) <= 5e-4
    parts = _clients()
    res = run_dp_lloyd(parts, 16, epsilon=1.0, delta=1e-6, bound=15.0, rounds=2, seed=0)
    assert res.noise_multipliers == zs and res.epsilon == eps
    assert res.server_epsilon == dp_epsilon_of([z / math.sqrt(5) for z in zs], 1e-6)
    # dp-accountant='rdp': the former plan, calibrated by Renyi DP (more noise)
    rdp = dp_noise_plan(1.0, 1e-6, 2, accountant="rdp")
    assert 1.0 * (1 - 1e-3) <= dp_epsilon_of(rdp, 1e-6, "rdp") <= 1.0
    assert all(r > z for r, z in zip(rdp, zs, strict=True))
    assert dp_noise_plan(math.inf, 1e-6, 3) == (0.0,) * 5
    for bad in (0.0, 1.0, -0.2):
        with pytest.raises(ValueError, match="dp-init-share"):
            dp_noise_plan(1.0, 1e-6, 2, init_share=bad)
    with pytest.raises(ValueError, match="init"):
        dp_noise_plan(1.0, 1e-6, 2, init="kmeans++")


def test_the_moments_are_the_clipped_rows_and_the_noise_keeps_them_symmetric():
    X = np.array([[3.0, 4.0], [0.3, 0.4], [1.0, 0.0]])
    count, total, second = dp_moment_stats(X, bound=1.0, sigma=0.0,
                                           rng=np.random.default_rng(0))
    Xc = clip_rows(X, 1.0)
    assert count.tolist() == [3.0]
    np.testing.assert_allclose(total, Xc.sum(0))
    np.testing.assert_allclose(second, Xc.T @ Xc)
    _, _, noisy = dp_moment_stats(X, bound=1.0, sigma=5.0, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(noisy, noisy.T)
    assert not np.allclose(noisy, second)
    assert moments_sensitivity(2.0) == math.sqrt(1 + 4 + 16)


def test_the_candidates_lie_in_the_subspace_of_the_clusters():
    """Without noise, in 20 dimensions, the top-2 subspace holds the two clusters' means."""
    rng = np.random.default_rng(0)
    means = np.zeros((2, 20))
    means[0, 3], means[1, 3] = 4.0, -4.0
    X = means[rng.integers(0, 2, 2000)] + rng.normal(0, 0.3, (2000, 20))
    U, mean, Q = dp_init_candidates(*dp_moment_stats(X, bound=10.0, sigma=0.0, rng=rng), 2,
                                    np.random.default_rng(1))
    assert U.shape == (20, 2) and Q.shape == (16, 2)
    assert abs(U[3, 0]) > 0.99  # the leading direction is the clusters' axis
    sums, counts = dp_candidate_stats(X, U, Q, bound=10.0, sigma=0.0,
                                      rng=np.random.default_rng(2))
    assert counts.sum() == 2000
    C = dp_init_from_candidates(sums, counts, U, mean, Q, 2, bound=10.0, total_sigma=0.0,
                                rng=np.random.default_rng(3))
    assert sorted(np.round(C[:, 3]).tolist()) == [-4.0, 4.0]
    np.testing.assert_allclose(np.delete(C, 3, axis=1), 0.0, atol=0.1)


def test_the_moments_start_is_deterministic_and_better_than_the_random_one():
    from sklearn.cluster import KMeans

    parts = _clients()
    X = np.vstack(parts)
    best = KMeans(16, n_init=10, random_state=0).fit(X).inertia_
    a = run_dp_lloyd(parts, 16, epsilon=4.0, delta=1e-5, bound=12.0, rounds=2, seed=5)
    b = run_dp_lloyd(parts, 16, epsilon=4.0, delta=1e-5, bound=12.0, rounds=2, seed=5)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    np.testing.assert_array_equal(a.initial, b.initial)
    assert len(a.init_uploads) == 2 and len(a.init_uploads[0]) == 5
    # no noise: the start alone is near k-means; the random start is not
    exact = run_dp_lloyd(parts, 16, epsilon=math.inf, delta=1e-5, bound=12.0, rounds=2,
                         seed=0)
    rand = run_dp_lloyd(parts, 16, epsilon=math.inf, delta=1e-5, bound=12.0, rounds=2,
                        seed=0, init="random")
    sse = [float(assign_to_nearest(X, r.centroids)[1].sum()) for r in (exact, rand)]
    assert sse[0] < 1.1 * best < sse[1]


def test_central_noise_on_the_start_is_the_servers_and_the_uploads_are_exact():
    parts = _clients()
    res = run_dp_lloyd(parts, 16, epsilon=1.0, delta=1e-5, bound=15.0, rounds=2, seed=0,
                       placement="central")
    count, total, _ = res.init_uploads[0][0]
    assert count.tolist() == [float(len(parts[0]))]
    np.testing.assert_allclose(total, clip_rows(parts[0], 15.0).sum(0))
    assert res.server_epsilon == math.inf


# ------------------------------------------------- the accountants: PLD beside RDP
def _analytic_gaussian_delta(eps: float, sigma: float) -> float:
    """Balle & Wang (2018): the exact delta(eps) of the Gaussian mechanism, sensitivity 1."""
    from scipy.stats import norm

    return float(norm.cdf(-eps * sigma + 1 / (2 * sigma))
                 - math.exp(eps) * norm.cdf(-eps * sigma - 1 / (2 * sigma)))


@pytest.mark.parametrize("z", [2.0, 4.0456, 8.09])
def test_the_pld_epsilon_is_the_exact_gaussians_and_never_above_the_rdp_one(z):
    """T = 1 against the analytic Gaussian's closed form; T = 1, 2, 10, 20 against RDP."""
    eps = dp_epsilon(z, 1, 1e-5)
    # the PLD's rounding is pessimistic: at or above the exact epsilon, by at most its
    # discretisation (1e-4 in the privacy loss) and a hair of the root finding
    from scipy.optimize import brentq

    exact = brentq(lambda e: _analytic_gaussian_delta(e, z) - 1e-5, 1e-9, 100, xtol=1e-12)
    assert exact - 1e-9 <= eps <= exact + 2e-4
    assert _analytic_gaussian_delta(eps, z) <= 1e-5 * (1 + 1e-9)
    # dp-accounting's own analytic Gaussian agrees with the closed form
    assert dp_accounting.gaussian_mechanism.get_epsilon_gaussian(z, 1e-5) == pytest.approx(
        exact, abs=1e-6)
    for rounds in (1, 2, 10, 20):
        assert dp_epsilon(z, rounds, 1e-5) < dp_epsilon(z, rounds, 1e-5, "rdp")


def test_the_pld_calibration_meets_the_target_and_needs_less_noise_than_rdp():
    for eps, delta, rounds in [(1.0, 1e-5, 1), (2.0, 1e-5, 6), (0.5, 1e-6, 2)]:
        pld = noise_multiplier_for(eps, delta, rounds)
        rdp = noise_multiplier_for(eps, delta, rounds, accountant="rdp")
        # the smallest multiplier meeting the target, to the bisection's tolerance
        assert dp_epsilon(pld, rounds, delta) <= eps < dp_epsilon(pld * (1 - 1e-4), rounds,
                                                                  delta)
        assert (dp_epsilon(rdp, rounds, delta, "rdp") <= eps
                < dp_epsilon(rdp * (1 - 1e-4), rounds, delta, "rdp"))
        assert 0.90 < pld / rdp < 0.94  # about 7 % less noise, the same guarantee
    # dp-accountant='rdp' is the former calibration, to the bit (before: 4.04541015625)
    assert noise_multiplier_for(1.0, 1e-5, 1, accountant="rdp") == 4.04541015625
    assert dp_noise_plan(1.0, 1e-5, 2, accountant="rdp") == (8.0908203125,) * 4
    # at the App's documented example (epsilon 1, delta 1e-5): 7.8 % less
    assert noise_multiplier_for(1.0, 1e-5, 1) / noise_multiplier_for(
        1.0, 1e-5, 1, accountant="rdp") == pytest.approx(0.922, abs=1e-3)


def test_the_accountants_state_round_trips_and_resumes_to_the_same_epsilon():
    from flwr_clustering.algorithms.dp_lloyd import GaussianAccountant

    zs = dp_noise_plan(1.0, 1e-5, 4)
    whole = GaussianAccountant()
    for z in zs:
        whole.compose(z)
    half = GaussianAccountant()
    for z in zs[:3]:
        half.compose(z)
    state = half.state_dict()
    import json
    resumed = GaussianAccountant()
    resumed.load_state_dict(json.loads(json.dumps(state)))  # as a checkpoint holds it
    assert resumed.get_epsilon(1e-5) == half.get_epsilon(1e-5) > 0
    for z in zs[3:]:
        resumed.compose(z)
    assert resumed.state_dict() == whole.state_dict()
    assert resumed.get_epsilon(1e-5) == whole.get_epsilon(1e-5) == dp_epsilon_of(zs, 1e-5)
    assert resumed.num_releases == 6
    assert whole.copy("rdp").get_epsilon(1e-5) == dp_epsilon_of(zs, 1e-5, "rdp")
    assert whole.get_delta(whole.get_epsilon(1e-5)) <= 1e-5 * (1 + 1e-6)
    with pytest.raises(ValueError, match="method 'pld'"):
        GaussianAccountant("rdp").load_state_dict(state)
    assert GaussianAccountant().get_epsilon(1e-5) == 0.0
