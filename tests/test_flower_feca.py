"""FeCA and M-Avg through Flower (in-process grid): equal to the pure loops bit for bit,
one round, payload shapes, bad clients dropped, the app's run-config."""

import json
import logging

import numpy as np
import pytest

from flwr_clustering.algorithms.feca import run_feca
from flwr_clustering.algorithms.mavg import run_mavg
from flwr_clustering.clients import FeCAClient, MAvgClient
from flwr_clustering.strategies import FeCA, MAvg
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app

CENTRES = np.array([[i * 12.0 + (j % 2) * 5, j * 11.0] for i in range(5) for j in range(3)])


def _data(m=6, seed=0, n_per=80):
    rng = np.random.default_rng(seed)
    X = np.concatenate([c + 2.0 * rng.standard_normal((n_per, 2)) for c in CENTRES])
    y = np.repeat(np.arange(len(CENTRES)), n_per)
    perm = rng.permutation(len(X))
    return [(X[i], y[i]) for i in np.array_split(perm, m)]


@pytest.mark.parametrize("shuffle", [None, 4])
@pytest.mark.parametrize("opts", [{}, {"radius": "theoretical", "std_mode": "dist_std"},
                                  {"eliminate": False, "k_local": 18}])
def test_feca_through_flower_equals_pure_loop_in_one_round(shuffle, opts):
    data = _data()
    grid = InProcessGrid(client_app_for(FeCAClient, data), 6, shuffle_seed=shuffle)
    strategy = FeCA(15, min_nodes=6, seed=9, **opts)
    result = strategy.start(grid=grid)
    ref = run_feca([x for x, _ in data], 15, seed=9, **opts)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref.centroids)
    assert len(strategy.history) == 1
    train = [m for m in grid.sent if m.metadata.message_type == "train"]
    assert len(train) == 6
    assert all(m.content["arrays"].to_numpy_ndarrays() == [] for m in train)


def test_feca_payload_shapes():
    data = _data()
    grid = InProcessGrid(client_app_for(FeCAClient, data), 6)
    FeCA(15, min_nodes=6, evaluate=False).start(grid=grid)
    replies = [m for m in grid.received if m.metadata.message_type == "train"]
    assert len(replies) == 6
    for msg in replies:
        centroids, radii = msg.content["arrays"].to_numpy_ndarrays()
        assert centroids.ndim == 2 and centroids.shape[1] == 2
        assert 2 <= len(centroids) <= 15 and radii.shape == (len(centroids),)
        assert (radii >= 0).all()
        assert set(msg.content["metrics"]) == {"removed", "withheld", "num-examples", "client-id"}


def test_feca_evaluation_reports_purity_and_nmi():
    data = _data()
    strategy = FeCA(15, min_nodes=6)
    strategy.start(grid=InProcessGrid(client_app_for(FeCAClient, data), 6))
    assert {"purity", "purity-per-cluster", "nmi", "ari"} <= set(strategy.final_metrics)
    assert strategy.final_metrics["purity"] > 0.9
    assert strategy.history[0]["num-centroids"] == 15


class _BadRadii(FeCAClient):
    def fit(self, parameters, config):
        arrays, n, metrics = super().fit(parameters, config)
        return [arrays[0], arrays[1][:-1]], n, metrics


class _NaNClient(FeCAClient):
    def fit(self, parameters, config):
        self.X[0, 0] = np.nan
        return super().fit(parameters, config)


def test_bad_feca_clients_are_dropped_with_a_reason(caplog):
    data = _data()

    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy = FeCA(15, min_nodes=4, seed=2)
        app = client_app_for(FeCAClient, data, by_node={1: _BadRadii, 3: _NaNClient})
        strategy.start(grid=InProcessGrid(app, 6))
    finally:
        logger.removeHandler(caplog.handler)
    assert "malformed payload: radii have shape" in caplog.text
    assert "client 3" in caplog.text and "NaN" in caplog.text
    assert strategy.history[0]["clients"] == 4 and strategy.history[0]["dropped"] == 2
    good = [data[i][0] for i in (0, 2, 4, 5)]
    # The survivors' uploads are the pure loop's for the same client ids.
    from flwr_clustering.algorithms.feca import feca_client, feca_server
    from flwr_clustering.algorithms.lloyd import client_rng

    ups = [feca_client(x, 15, client_rng(2, i)).upload for x, i in zip(good, (0, 2, 4, 5), strict=True)]
    np.testing.assert_array_equal(strategy.centroids, feca_server(ups, 15).centroids)


def test_feca_says_when_it_returns_fewer_than_k(caplog):
    data = _data()
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy = FeCA(15, k_local=4, min_nodes=6)  # undershoot: few groups
        strategy.start(grid=InProcessGrid(client_app_for(FeCAClient, data), 6))
    finally:
        logger.removeHandler(caplog.handler)
    assert len(strategy.centroids) < 15
    assert "FeCA returns" in caplog.text and "instead of k=15" in caplog.text
    assert strategy.history[0]["num-centroids"] == len(strategy.centroids)


@pytest.mark.parametrize("shuffle", [None, 2])
def test_mavg_through_flower_equals_pure_loop(shuffle):
    data = _data()
    grid = InProcessGrid(client_app_for(MAvgClient, data), 6, shuffle_seed=shuffle)
    strategy = MAvg(15, min_nodes=6, seed=5)
    result = strategy.start(grid=grid)
    ref = run_mavg([x for x, _ in data], 15, seed=5)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref)
    assert len(strategy.history) == 1


def test_mavg_client_with_a_tiny_cluster_withholds(caplog):
    data = _data()
    X0 = np.vstack([data[0][0], [[1e4, 1e4]]])  # an outlier becomes a one-point cluster
    data[0] = (X0, np.append(data[0][1], 0))
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy = MAvg(15, min_nodes=5)
        strategy.start(grid=InProcessGrid(client_app_for(MAvgClient, data), 6))
    finally:
        logger.removeHandler(caplog.handler)
    assert "client 0: a local cluster has 1 point(s)" in caplog.text
    assert strategy.history[0]["clients"] == 5
    # the pure loop at its defaults leaves the same client out: the same centroids
    with pytest.warns(RuntimeWarning, match=r"client\(s\) 0 withheld their reply"):
        ref = run_mavg([x for x, _ in data], 15)
    np.testing.assert_array_equal(strategy.centroids, ref)


def test_mavg_client_with_fewer_than_k_rows_is_left_out_by_loop_and_strategy():
    data = _data()
    data[2] = (data[2][0][:10], data[2][1][:10])  # 10 rows for k = 15
    strategy = MAvg(15, min_nodes=5)
    strategy.start(grid=InProcessGrid(client_app_for(MAvgClient, data), 6))
    assert strategy.history[0]["clients"] == 5
    assert any("client 2" in c for c in strategy.diagnostics["absent"])
    with pytest.warns(RuntimeWarning, match=r"client\(s\) 2 have fewer than k=15 rows"):
        ref = run_mavg([x for x, _ in data], 15)
    np.testing.assert_array_equal(strategy.centroids, ref)


def test_mavg_below_min_nodes_because_of_the_privacy_threshold_says_so():
    data = _data()
    for i in range(5):  # five of six clients get an outlier: a one-point local cluster
        data[i] = (np.vstack([data[i][0], [[1e4, 1e4]]]), np.append(data[i][1], 0))
    with pytest.raises(RuntimeError, match=r"only 1 valid replies, fewer than min_nodes=2; "
                       r"5 client\(s\) withheld their reply under the privacy threshold"):
        MAvg(15, min_nodes=2).start(grid=InProcessGrid(client_app_for(MAvgClient, data), 6))
    with pytest.raises(ValueError, match=r"M-Avg: only 1 client\(s\) sent centroids, fewer "
                       r"than min-nodes=2, because 5 withheld their reply under the privacy "
                       r"threshold .*clients 0, 1, 2, 3, 4; lower privacy-threshold or k"), \
            pytest.warns(RuntimeWarning):
        run_mavg([x for x, _ in data], 15)


def test_strategies_reject_bad_parameters():
    with pytest.raises(ValueError, match="radius"):
        FeCA(3, radius="huge")
    with pytest.raises(ValueError, match="std_mode"):
        FeCA(3, std_mode="var")
    with pytest.raises(ValueError, match="k must be at least 1"):
        FeCA(0)
    with pytest.raises(ValueError, match="reference"):
        MAvg(3, reference="last")
    from flwr_clustering.strategies import FFCM

    with pytest.raises(ValueError, match="version"):
        FFCM(3, version=3)
    with pytest.raises(ValueError, match="fuzzifier"):
        FFCM(3, fuzzifier=1.0)


@pytest.mark.parametrize("algorithm", ["feca", "mavg", "ffcm"])
def test_app_runs_them_from_the_run_config(tmp_path, algorithm):
    run_config = {"algorithm": algorithm, "dataset": "blobs", "partitioner": "iid",
                  "centers": 15, "k": 15, "n-samples": 1500, "cluster-std": 0.5,
                  "min-nodes": 5, "out-dir": str(tmp_path)}
    out, _ = run_app(run_config, 5)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["algorithm"] == algorithm
    assert result["rounds"] == (1 if algorithm != "ffcm" else len(out["strategy"].history))
    assert result["federated-on-pooled"]["nmi"] == out["federated"]["nmi"]
    assert set(result["centralized"]) >= {"nmi", "purity"}
    assert (tmp_path / "clusters.png").exists()


@pytest.mark.parametrize("version", [1, 2])
def test_ffcm_through_flower_equals_pure_loop(version):
    from flwr_clustering.algorithms.ffcm import run_ffcm
    from flwr_clustering.clients import FFCMClient
    from flwr_clustering.strategies import FFCM

    data = _data(m=4)
    grid = InProcessGrid(client_app_for(FFCMClient, data), 4, shuffle_seed=version)
    strategy = FFCM(15, version=version, min_nodes=4, seed=3, max_rounds=3)
    strategy.start(grid=grid)
    ref = run_ffcm([x for x, _ in data], 15, version=version, rounds=3, seed=3)
    np.testing.assert_array_equal(strategy.initial, ref.initial)
    assert len(strategy.centroid_history) == 3
    for ours, theirs in zip(strategy.centroid_history, ref.history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    # One moments exchange (a query: not training), then one train message per node and
    # round, then the final evaluation carrying the split check's first sums, and the
    # check's second exchange.
    sent = [m for m in grid.sent if m.metadata.message_type in ("query", "train", "evaluate")]
    assert [(m.metadata.message_type, m.content["config"].get("phase")) for m in sent] == (
        [("query", "moments")] * 4 + [("train", "ffcm")] * 12
        + [("evaluate", None)] * 4 + [("query", "split-histograms")] * 4)
    assert all(m.content["config"]["split-scatter"] and m.content["config"]["final"]
               for m in sent if m.metadata.message_type == "evaluate")
    # Per-round metrics (rounds 1-2 from the next round's replies, 3 from the evaluation).
    assert all("nmi" in h["metrics"] for h in strategy.history)


def test_ffcm_with_initial_centres_skips_the_moments_exchange():
    from flwr.app import Array, ArrayRecord

    from flwr_clustering.algorithms.ffcm import run_ffcm
    from flwr_clustering.clients import FFCMClient
    from flwr_clustering.strategies import FFCM

    data = _data(m=3)
    V0 = CENTRES + 3.0
    grid = InProcessGrid(client_app_for(FFCMClient, data), 3)
    strategy = FFCM(15, min_nodes=3, max_rounds=2, evaluate=False, fuzzifier=2.0)
    strategy.start(grid=grid, initial_arrays=ArrayRecord({"centroids": Array(V0)}))
    ref = run_ffcm([x for x, _ in data], 15, rounds=2, init=V0, m=2.0)
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)
    # a fixed fuzzifier: no moments QUERY, only the two ffcm rounds, then the final model
    assert [m.metadata.message_type for m in grid.sent] == (
        ["train"] * 6 + ["evaluate"] * 3 + ["query"] * 3)  # (the split check's second)
    assert all(m.content["config"]["phase"] == "ffcm" for m in grid.sent[:6])
    assert all(m.content["config"]["fuzzifier"] == 2.0 for m in grid.sent[:6])


def test_ffcm_auto_fuzzifier_asks_for_the_moments_even_with_initial_centres():
    from flwr.app import Array, ArrayRecord

    from flwr_clustering.algorithms.ffcm import fuzzifier_from_dimension, run_ffcm
    from flwr_clustering.clients import FFCMClient
    from flwr_clustering.strategies import FFCM

    data = _data(m=3)
    V0 = CENTRES + 3.0
    grid = InProcessGrid(client_app_for(FFCMClient, data), 3)
    strategy = FFCM(15, min_nodes=3, max_rounds=2, evaluate=False)  # fuzzifier 0: auto
    strategy.start(grid=grid, initial_arrays=ArrayRecord({"centroids": Array(V0)}))
    ref = run_ffcm([x for x, _ in data], 15, rounds=2, init=V0)
    n = sum(len(x) for x, _ in data)
    m = fuzzifier_from_dimension(V0.shape[1], n)
    assert ref.fuzzifier == m == strategy.fuzzifier
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)
    # the moments QUERY (for n), then two ffcm rounds that carry the chosen m
    assert [m.metadata.message_type for m in grid.sent][:3] == ["query"] * 3
    assert all(m.content["config"]["phase"] == "moments" for m in grid.sent[:3])
    assert all(msg.content["config"]["fuzzifier"] == m for msg in grid.sent[3:9])
    # a second run of the same strategy chooses again (and gets the same m)
    strategy.start(grid=InProcessGrid(client_app_for(FFCMClient, data), 3),
                   initial_arrays=ArrayRecord({"centroids": Array(V0)}))
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)
    with pytest.raises(ValueError, match="expected k=15"):
        FFCM(15, min_nodes=3).start(grid=InProcessGrid(client_app_for(FFCMClient, data), 3),
                                    initial_arrays=ArrayRecord({"centroids": Array(V0[:4])}))
