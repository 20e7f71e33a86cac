"""The registry, the options dataclasses and the exchange base, through a toy algorithm.

The toy algorithm (a federated mean: one cluster whose centre is the pooled mean) is what a
new algorithm needs: an options dataclass, a client, a strategy and one registration. The
App then runs it by name, with its run-config key, without any edit to the App.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from flwr.app import ArrayRecord

from flwr_clustering import registry
from flwr_clustering.algorithms.fkm import FKMOptions
from flwr_clustering.app.client_app import app as client_app
from flwr_clustering.app.config import default_run_config, merged_config
from flwr_clustering.app.server_app import run_server
from flwr_clustering.clients.base import ClusteringClient
from flwr_clustering.data import load_partition
from flwr_clustering.options import Options, option
from flwr_clustering.strategies import DGC, KDC, FeCA, FedKMeans, KFed
from flwr_clustering.strategies.base import ClusteringStrategy
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app


# ------------------------------------------------------------ a toy algorithm, end to end
@dataclasses.dataclass(frozen=True)
class MeanOptions(Options):
    k: int = option(1, minimum=1, maximum=1, help="one cluster")
    shift_by: float = option(0.0, key="toy-shift", help="added to the mean (tests the key)")


class MeanClient(ClusteringClient):
    def query(self, parameters, config):
        return [np.array([len(self.X)])], len(self.X), {}

    def fit(self, parameters, config):
        return [self.X.sum(axis=0), np.array([len(self.X)])], len(self.X), {}


class FederatedMean(ClusteringStrategy):
    name = "toy-mean"
    Options = MeanOptions

    def protocol_rounds(self):
        return 1

    def initialize(self, grid, timeout):
        sizes = self.exchange(grid, 0, "sizes", parse=lambda a: int(a[0][0]))
        self.sizes = {r.client_id: r.payload for r in sizes}

    def train_config(self, server_round):
        return {"phase": "sum", **self.options.to_config()}

    def train_arrays(self, server_round):
        return []

    def aggregate_payloads(self, server_round, replies):
        total = sum(r.payload[0] for r in replies)
        n = sum(int(r.payload[1][0]) for r in replies)
        return (total / n)[None, :] + self.options.shift_by

    def artifacts(self):
        return {"toy.npz": {"sizes": np.array(sorted(self.sizes.values()))}}


MEAN = registry.AlgorithmSpec(name="toy-mean", strategy=FederatedMean, client=MeanClient,
                              options=MeanOptions, summary="a test")


def test_a_new_algorithm_runs_through_the_app_by_module_path(tmp_path):
    cfg = {"algorithm": "test_registry:MEAN", "toy-shift": 0.0, "min-nodes": 4,
           "dataset": "blobs", "n-samples": 200, "partitioner": "iid", "centers": 3, "k": 1,
           "out-dir": str(tmp_path), "scaling": "none"}
    grid = InProcessGrid(client_app, 4, run_config=cfg)
    out = run_server(grid, cfg)
    parts = [load_partition(i, 4, dataset="blobs", n_samples=200, partitioner="iid",
                            centers=3)[0] for i in range(4)]
    pooled = np.vstack(parts)
    np.testing.assert_allclose(out["centroids"], pooled.mean(axis=0, keepdims=True), rtol=1e-12)
    # the non-training exchange went as QUERY messages, the round as TRAIN
    kinds = [(m.metadata.message_type, m.content["config"]["phase"]) for m in grid.sent
             if "config" in m.content and "phase" in m.content["config"]]
    assert kinds == [("query", "data-source")] * 4 + [("query", "feature-moments")] * 4 + [
        ("query", "sizes")] * 4 + [("train", "sum")] * 4 + [("query", "split-histograms")] * 4
    # (the split check's first sums rode in the final evaluation)
    final = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    assert len(final) == 4 and all(m.content["config"]["split-scatter"] for m in final)
    # the App wrote the strategy's artifact beside the common files
    toy = np.load(tmp_path / "toy.npz")
    np.testing.assert_array_equal(toy["sizes"], sorted(len(p) for p in parts))
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["algorithm"] == "toy-mean" and result["config"]["shift_by"] == 0.0
    # the option key reaches the strategy
    cfg["toy-shift"] = 1.5
    cfg["out-dir"] = str(tmp_path / "shifted")  # a run of its own: out-dir is not shared
    out, _ = run_app(cfg, 4)
    np.testing.assert_allclose(out["centroids"], pooled.mean(axis=0, keepdims=True) + 1.5)


def test_a_shared_key_needs_one_default():
    @dataclasses.dataclass(frozen=True)
    class Clash(Options):
        k: int = option(16)
        privacy_threshold: int = option(5)  # every registered algorithm says 2

    spec = registry.AlgorithmSpec(name="clash", strategy=FederatedMean, client=MeanClient,
                                  options=Clash)
    with pytest.raises(ValueError, match="'privacy-threshold' has default 5"):
        registry.register(spec)
    assert "clash" not in registry.names()


def test_unknown_algorithm_and_bad_module_path_are_clear_errors():
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        registry.get("nope")
    with pytest.raises(ValueError, match="cannot load algorithm 'no_such_module:X'"):
        registry.get("no_such_module:X")
    with pytest.raises(ValueError, match="not an AlgorithmSpec"):
        registry.get("test_registry:MeanOptions")


# ---------------------------------------------------------------------------- options
def test_every_registered_algorithm_round_trips_its_message_config():
    for name in registry.names():
        spec = registry.get(name)
        opts = spec.options()
        assert spec.options.from_config(opts.to_config()) == opts, name
        # the App builds the strategy from the default run config alone
        if name != "deepfeca":  # needs torch; covered in test_flower_deepfeca
            strategy = spec.build_strategy(default_run_config())
            assert isinstance(strategy, spec.strategy) and strategy.options == opts, name


def test_options_reject_wrong_types_and_resolve_auto():
    with pytest.raises(ValueError, match="k must be an integer, got 2.5"):
        FKMOptions(k=2.5)
    with pytest.raises(ValueError, match="k must be an integer"):
        merged_config({"k": 2.5})  # the App refuses it before the run starts
    assert FKMOptions(k=4.0).k == 4 and isinstance(FKMOptions(k=4.0).k, int)
    with pytest.raises(ValueError, match=r"init must be one of \['private', 'paper'\].*'init'"):
        FKMOptions(init="rows")
    assert FKMOptions(local_iterations=0).local_iterations == 1  # 0: the algorithm's default
    assert FeCA(3).n_init == 1 and FeCA(3).k_local == 3  # k' = 0 means k
    with pytest.raises(TypeError, match="unexpected argument.*'k_locl'"):
        KFed(3, k_locl=2)
    # options= and keyword options combine; keywords win
    s = FedKMeans(options=FKMOptions(k=5, max_rounds=3), max_rounds=7)
    assert (s.k, s.max_rounds) == (5, 7)


def test_fixed_protocols_reject_a_num_rounds_that_does_not_fit():
    grid = InProcessGrid(client_app, 2)
    for strategy, rounds in ((FeCA(3), 1), (KFed(3), 1), (KDC(3), 2),
                             (DGC(3, iterations=4, inner_steps=2), 9)):
        assert strategy.protocol_rounds() == rounds
        with pytest.raises(ValueError, match=f"fixed protocol of {rounds} round"):
            strategy.start(grid=grid, num_rounds=rounds + 1)
    assert FedKMeans(3).protocol_rounds() is None
    with pytest.raises(ValueError, match="num_rounds must be at least 1"):
        FedKMeans(3).start(grid=grid, num_rounds=0)


def test_model_records_hold_what_the_algorithm_needs():
    parts = [load_partition(i, 5, dataset="garst-grid", beta=1.0)[0] for i in range(5)]
    from flwr_clustering.clients import DGCClient

    app = client_app_for(DGCClient, parts)
    dgc = DGC(16, iterations=2, min_nodes=5)
    record = dgc.start(grid=InProcessGrid(app, 5)).arrays
    assert isinstance(record, ArrayRecord)
    assert record["node-centres"].numpy().shape == (5, 16, 2)
    np.testing.assert_array_equal(record["node-centres"].numpy(), dgc.node_centres)
    np.testing.assert_array_equal(record["centroids"].numpy(), dgc.node_centres.mean(axis=0))
    assert record["adjacency"].numpy().shape == (5, 5)
