"""FKM's robust server step: a coordinate-wise trimmed mean of the clients' means.

The per-client bound (``check_means_within_rows``) catches a mean that no subset of a
client's rows can have; a liar inside that bound (every mean shifted, counts inflated)
passes it. ``robust-trim`` bounds what such clients can do: with at most
``floor(trim * n_j)`` of the ``n_j`` clients at a global centroid lying, each coordinate
of the new centroid stays between the smallest and the largest honest value.
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_clustering import registry
from flwr_clustering.algorithms.fkm import (
    FKMOptions,
    fkm_server_aggregate,
    run_fkm,
    trimmed_lloyd,
)
from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.testing import InProcessGrid, client_app_for


def _uploads(rng, clients=7, k=3, d=2):
    return [LocalCentroids(rng.normal(size=(k, d)) + 10 * np.arange(k)[:, None],
                           rng.integers(2, 50, size=k), np.arange(k)) for _ in range(clients)]


def test_trim_zero_is_federated_lloyd_and_half_is_the_median():
    rng = np.random.default_rng(0)
    ups = _uploads(rng)
    previous = np.zeros((3, 2))
    exact = fkm_server_aggregate(ups, 3, rng, update="lloyd", previous=previous)
    np.testing.assert_array_equal(
        fkm_server_aggregate(ups, 3, rng, update="lloyd", previous=previous, trim=0.0), exact)
    median = trimmed_lloyd(ups, previous, 0.5)
    stacked = np.stack([u.means for u in ups])  # (clients, k, d): 7 clients, an odd count
    np.testing.assert_array_equal(median, np.median(stacked, axis=0))
    # two clients: nothing to set aside, their count-weighted mean
    two = trimmed_lloyd(ups[:2], previous, 0.5)
    w = np.stack([u.counts for u in ups[:2]]).astype(float)
    np.testing.assert_allclose(two, (w[..., None] * stacked[:2]).sum(0) / w.sum(0)[:, None],
                               rtol=1e-14)


def test_empty_clusters_have_no_vote_and_an_unfed_centroid_stays():
    """privacy-threshold 0 sends empty local clusters (count 0): set aside, as federated
    Lloyd does; a centroid only they would feed keeps its place (no NaN)."""
    rng = np.random.default_rng(4)
    ups = _uploads(rng, clients=5)
    for u in ups[:3]:
        u.counts[2] = 0
        u.means[2] = 1e9  # what an empty cluster's mean would be is not looked at
    previous = np.full((3, 2), 7.0)
    for u in ups[3:]:
        u.counts[2] = 0
    new = trimmed_lloyd(ups, previous, 0.4)
    np.testing.assert_array_equal(new[2], previous[2])
    exact = fkm_server_aggregate(ups, 3, rng, update="lloyd", previous=previous)
    np.testing.assert_array_equal(exact[2], previous[2])
    kept = [LocalCentroids(u.means[:2], u.counts[:2], u.index[:2]) for u in ups]
    np.testing.assert_array_equal(new[:2], trimmed_lloyd(kept, previous, 0.4)[:2])


@pytest.mark.parametrize("trim, liars", [(0.2, 1), (0.3, 2), (0.5, 4)])
@pytest.mark.parametrize("lie", [1e12, -3.0])
def test_up_to_trim_times_n_liars_cannot_move_a_centroid_past_the_honest_values(
        trim, liars, lie):
    """Liars with 1000x counts and any means: the result stays within the honest range."""
    rng = np.random.default_rng(1)
    honest = _uploads(rng, clients=10 - liars)
    bad = [LocalCentroids(np.full((3, 2), lie), np.full(3, 10**6), np.arange(3))
           for _ in range(liars)]
    assert liars <= int(np.floor(trim * 10))
    new = trimmed_lloyd(honest + bad, np.zeros((3, 2)), trim)
    H = np.stack([u.means for u in honest])
    assert ((new >= H.min(0)) & (new <= H.max(0))).all(), (new, H.min(0), H.max(0))
    plain = fkm_server_aggregate(honest + bad, 3, rng, update="lloyd", previous=np.zeros((3, 2)))
    assert not ((plain >= H.min(0)) & (plain <= H.max(0))).all()  # the plain mean is taken


def test_the_option_needs_lloyd_and_refuses_dp():
    with pytest.raises(ValueError, match="needs server-update='lloyd'"):
        FKMOptions(robust_trim=0.2).validate()
    with pytest.raises(ValueError, match="robust-trim needs each client's means"):
        FKMOptions(robust_trim=0.2, server_update="lloyd", dp_epsilon=1.0,
                   data_bound=1.0).validate()
    with pytest.raises(ValueError):
        FKMOptions.from_config({"robust-trim": 0.6})
    strategy = registry.get("fkm").build_strategy(
        {**FKMOptions().run_config_defaults(), "server-update": "lloyd", "robust-trim": 0.2},
        min_nodes=2, seed=0)
    assert "secure aggregation hides" in strategy.secure_aggregation_problem()


def _shrunk(cls, factor, centre=(2.0, 2.0)):
    """A consistent liar within its rows' bound: every mean pulled towards the centre of
    its data (a mean past the bound is dropped: ``test_reply_validation``)."""
    class Shrunk(cls):
        def fit(self, parameters, config):
            arrays, n, metrics = super().fit(parameters, config)
            if config.get("phase") != "update":
                return arrays, n, metrics
            c = np.asarray(centre)
            return [c + factor * (arrays[0] - c), *arrays[1:]], n, metrics
    return Shrunk


def _sites(rng, n_sites=6):
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    out = []
    for _ in range(n_sites):
        y = rng.integers(0, 3, 400)
        out.append((centers[y] + rng.normal(size=(400, 2)), y))
    return out


def _run(data, bad, trim, caplog=None):
    spec = registry.get("fkm")
    cfg = {**spec.options.run_config_defaults(), "k": 3, "server-update": "lloyd",
           "robust-trim": trim, "max-rounds": 6, "tol": -1.0}
    strategy = spec.build_strategy(cfg, min_nodes=len(data), seed=0, scaling="none")
    strategy.start(grid=InProcessGrid(client_app_for(spec.client, data, by_node=bad),
                                      len(data)))
    return strategy


def test_a_consistent_liar_moves_the_plain_model_and_not_the_trimmed_one():
    rng = np.random.default_rng(2)
    data = _sites(rng)
    liar = {0: _shrunk(registry.get("fkm").client, 0.2)}
    honest_plain = _run(data, {}, 0.0).centroids
    honest_trim = _run(data, {}, 0.2).centroids
    lied_plain = _run(data, liar, 0.0).centroids
    lied_trim = _run(data, liar, 0.2).centroids

    def moved(C):  # the largest distance of a centroid from its honest position
        return float(np.max(np.linalg.norm(np.sort(C, 0) - np.sort(honest_plain, 0), axis=1)))

    # one site in six, its means 3 to 4 from the truth, carries the plain mean about 0.6
    # away; trimmed it stays
    assert moved(lied_plain) > 0.5
    assert moved(lied_trim) < 0.2
    assert moved(honest_trim) < 0.2  # and the honest run hardly moves with the option


def test_the_strategy_equals_its_loop_with_the_option():
    rng = np.random.default_rng(3)
    data = _sites(rng, 5)
    strategy = _run(data, {}, 0.3)
    loop = run_fkm([X for X, _ in data], 3, seed=0, max_rounds=6, tol=-1.0, update="lloyd",
                   trim=0.3)
    np.testing.assert_array_equal(strategy.centroids, loop.centroids)
