"""Differentially private federated Lloyd (the core, no Flower): accounting, exactness, attack."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flwr_clustering.algorithms.dp_lloyd import (
    clip_rows,
    dp_epsilon,
    dp_initial_centroids,
    dp_server_step,
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
    res = run_dp_lloyd(parts, 16, epsilon=2.0, delta=1e-5, bound=15.0, rounds=7, seed=0)
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier=res.noise_multiplier), 7))
    assert res.epsilon == acc.get_epsilon(1e-5)
    assert 2.0 * (1 - 1e-3) <= res.epsilon <= 2.0  # calibrated to the target from below
    assert res.sigma == res.noise_multiplier * math.sqrt(15.0**2 + 1)
    # the server sees each upload with 1/sqrt(5) of the noise: a weaker guarantee
    assert res.server_epsilon == dp_epsilon(res.noise_multiplier / math.sqrt(5), 7, 1e-5)
    assert res.server_epsilon > res.epsilon
    assert server_epsilon(res.noise_multiplier, 7, 1e-5, 5, "central") == math.inf


def test_more_rounds_or_a_smaller_epsilon_need_more_noise():
    z = [noise_multiplier_for(eps, 1e-5, 10) for eps in (8.0, 4.0, 2.0, 1.0, 0.5)]
    assert z == sorted(z) and z[0] > 0
    assert noise_multiplier_for(2.0, 1e-5, 20) > noise_multiplier_for(2.0, 1e-5, 10)
    assert noise_multiplier_for(math.inf, 1e-5, 10) == 0.0
    with pytest.raises(ValueError, match="delta"):
        noise_multiplier_for(1.0, 0.0, 10)


def test_without_noise_it_is_exactly_lloyd_on_the_clipped_pooled_rows():
    parts = _clients()
    bound = 6.0  # clips part of the grid: the clipped rows are what is clustered
    res = run_dp_lloyd(parts, 16, epsilon=math.inf, delta=1e-5, bound=bound, rounds=5, seed=3)
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
