"""Flower's conventions, kept: ``Strategy.start``'s contract next to Flower's own ``FedAvg``,
the final model on every client (labels kept on the node), users' own handlers and replies,
node waiting, and the App's defaults on Flower's default federation of 2 nodes.

All in-process (no Ray): :class:`~flwr_clustering.testing.InProcessGrid`.
"""

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg

from flwr_clustering.algorithms.fkm import run_fkm
from flwr_clustering.algorithms.lloyd import assign_to_nearest
from flwr_clustering.clients import (
    FedKMeansClient,
    handle_evaluate,
    handle_query,
    handle_train,
    stored_labels,
)
from flwr_clustering.data import load_partition
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app

N = 4


def _data(n=N):
    return [load_partition(i, n, dataset="garst-grid", partitioner="iid") for i in range(n)]


class _Recorder:
    """An ``evaluate_fn`` that records its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, server_round, arrays):
        self.calls.append((server_round, sorted(arrays)))
        return MetricRecord({"round": float(server_round)})


def _fedavg_app():
    """A plain Flower ClientApp, as Flower's quick start writes one."""
    app = ClientApp()

    @app.train()
    def train(msg, context):
        arrays = msg.content["arrays"]
        return Message(RecordDict({"arrays": arrays,
                                   "metrics": MetricRecord({"num-examples": 10})}),
                       reply_to=msg)

    @app.evaluate()
    def evaluate(msg, context):
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 10, "loss": 1.0})}),
                       reply_to=msg)

    return app


def test_start_keeps_flowers_contract_next_to_fedavg():
    """Same ``start`` arguments: the same evaluate_fn calls and the same Result keys."""
    C0 = _data()[0][0][:16].copy()
    kwargs = dict(num_rounds=3, timeout=60.0)

    theirs = _Recorder()
    fedavg = FedAvg(min_available_nodes=N, min_train_nodes=N, min_evaluate_nodes=N)
    ref = fedavg.start(grid=InProcessGrid(_fedavg_app(), N), initial_arrays=ArrayRecord([C0]),
                       evaluate_fn=theirs, **kwargs)

    ours = _Recorder()
    grid = InProcessGrid(client_app_for(FedKMeansClient, _data()), N)
    strategy = FedKMeans(16, min_nodes=N, early_stop=False, evaluate_every_round=True)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord([C0]), evaluate_fn=ours,
                            **kwargs)

    assert [r for r, _ in ours.calls] == [r for r, _ in theirs.calls] == [0, 1, 2, 3]
    assert ours.calls[0][1] == ["0"]  # round 0 sees the initial arrays as given
    assert sorted(result.evaluate_metrics_serverapp) == sorted(ref.evaluate_metrics_serverapp)
    assert sorted(result.train_metrics_clientapp) == sorted(ref.train_metrics_clientapp)
    assert sorted(result.evaluate_metrics_clientapp) == sorted(ref.evaluate_metrics_clientapp)
    assert len(strategy.history) == 3
    kinds = [m.metadata.message_type for m in grid.sent]
    # FedAvg's order: train, evaluate; the last evaluation carries the split check's first
    # sums, its second exchange (a query) follows
    assert kinds == ((["train"] * N + ["evaluate"] * N) * 2
                     + ["train"] * N + ["evaluate"] * N + ["query"] * N)


def test_should_stop_ends_the_run_as_flowers_1_43_start_does():
    """Flower 1.43's ``start(..., should_stop=...)``: called after each round's evaluations;
    ``True`` makes that round the last, and the final model is delivered as after it."""
    import inspect

    from flwr.serverapp.strategy import Strategy

    assert set(inspect.signature(Strategy.start).parameters) <= set(
        inspect.signature(FedKMeans.start).parameters) | {"should_stop"}
    assert "should_stop" in inspect.signature(FedKMeans.start).parameters
    data = _data()
    seen = []

    def should_stop(server_round, result):
        # the round's own evaluations are in the result already
        seen.append((server_round, sorted(result.evaluate_metrics_serverapp)))
        return server_round == 3

    ours = _Recorder()
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), N)
    strategy = FedKMeans(16, min_nodes=N, early_stop=False)
    result = strategy.start(grid=grid, num_rounds=10, evaluate_fn=ours, should_stop=should_stop)
    assert seen == [(1, [0, 1]), (2, [0, 1, 2]), (3, [0, 1, 2, 3])]
    assert [h["round"] for h in strategy.history] == [1, 2, 3]
    assert [r for r, _ in ours.calls] == [0, 1, 2, 3]  # once per round: the model is kept
    # the three rounds are the pure loop's, and every node got the final model
    ref = run_fkm([x for x, _ in data], 16, max_rounds=3, tol=-1.0, seed=0)
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)
    final = [m for m in grid.sent if m.metadata.message_type == "evaluate"
             and m.content["config"]["final"]]
    assert sorted(m.metadata.dst_node_id for m in final) == sorted(grid.get_node_ids())
    assert strategy.stopped and strategy.final_metrics  # the final evaluation ran
    assert sorted(result.evaluate_metrics_serverapp) == [0, 1, 2, 3]


def test_initial_arrays_under_any_key_are_the_initial_model():
    data = _data()
    C0 = data[0][0][:16].copy()
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), N)
    strategy = FedKMeans(16, min_nodes=N, tol=-1.0)
    strategy.start(grid=grid, initial_arrays=ArrayRecord([C0]), num_rounds=2)
    first = grid.sent[0]
    assert first.content["config"]["phase"] == "update"
    np.testing.assert_array_equal(first.content["arrays"].to_numpy_ndarrays()[0], C0)
    # the same run with the key "centroids"
    again = FedKMeans(16, min_nodes=N, tol=-1.0)
    again.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N),
                initial_arrays=ArrayRecord({"centroids": Array(C0)}), num_rounds=2)
    np.testing.assert_array_equal(strategy.centroids, again.centroids)
    # several arrays, none named "centroids": which one is meant?
    with pytest.raises(ValueError, match="none named 'centroids'"):
        FedKMeans(16, min_nodes=N).start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N),
                                         initial_arrays=ArrayRecord([C0, C0]))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_num_rounds_below_one_or_not_an_integer_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="num_rounds must be"):
        FedKMeans(16, min_nodes=N).start(
            grid=InProcessGrid(client_app_for(FedKMeansClient, _data()), N), num_rounds=bad)


def test_num_rounds_runs_exactly_that_many_rounds_unless_early_stop(caplog):
    data = _data()
    exact = FedKMeans(16, min_nodes=N, early_stop=False)
    exact.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N), num_rounds=12)
    assert [h["round"] for h in exact.history] == list(range(1, 13))
    with caplog.at_level(logging.INFO, logger="flwr_clustering"):
        early = FedKMeans(16, min_nodes=N)  # early_stop=True, tol=1e-6: the default
        early.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N), num_rounds=12)
    stopped = len(early.history)
    assert stopped < 12, "the IID grid converges well before 12 rounds"
    assert f"[ROUND {stopped}/12] converged: stopping early" in caplog.text
    assert f"fkm finished: {stopped} of 12 rounds" in caplog.text
    before = caplog.text.split("[ROUND 1/12]")[0]
    assert "'num_rounds': 12" in before and "max_rounds" not in before  # the run's count
    # the first rounds are the same computation either way
    np.testing.assert_array_equal(exact.centroid_history[stopped - 1], early.centroids)
    # and the pure loop stops at the same round
    ref = run_fkm([x for x, _ in data], 16, max_rounds=12, seed=0)
    np.testing.assert_array_equal(early.centroids, ref.centroids)


def test_every_client_receives_the_final_model_and_keeps_its_labels(tmp_path):
    """Also with evaluate=False: no statistics come back, the labels stay on the node."""
    data = _data()
    paths = [tmp_path / f"node{i}" / "labels.npy" for i in range(N)]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), N,
                         node_configs=[{"labels-path": str(p)} for p in paths])
    strategy = FedKMeans(16, min_nodes=N, evaluate=False, max_rounds=3)
    strategy.start(grid=grid)
    final = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    assert len(final) == N and all(m.content["config"]["final"] for m in final)
    assert not any(m.content["config"]["evaluate"] for m in final)
    replies = [m for m in grid.received if m.metadata.reply_to_message_id in
               {f.metadata.message_id for f in final}]
    assert len(replies) == N
    for m in replies:  # no evaluation statistics: only the split check's sums (default on)
        assert "arrays" not in m.content
        assert set(m.content["stats"].keys()) == {"split-counts", "split-sums",
                                                  "split-scatter"}
    assert strategy.final_metrics == {}
    for i in range(N):
        expected = assign_to_nearest(data[i][0], strategy.centroids)[0]
        np.testing.assert_array_equal(stored_labels(grid.contexts[100 + i]), expected)
        np.testing.assert_array_equal(np.load(paths[i]), expected)


def test_labels_path_as_text_has_one_label_per_line(tmp_path):
    data = _data()
    path = tmp_path / "labels.csv"
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), N,
                         node_configs=[{"labels-path": str(path)}, {}, {}, {}])
    FedKMeans(16, min_nodes=N, max_rounds=2).start(grid=grid)
    np.testing.assert_array_equal(np.loadtxt(path, dtype=np.int64),
                                  stored_labels(grid.contexts[100]))
    assert len(path.read_text().splitlines()) == len(data[0][0])


def test_own_handlers_with_the_exported_ones_equal_the_ready_made_app():
    data = _data()
    app = ClientApp()

    def client(context):
        i = int(context.node_config["partition-id"])
        return FedKMeansClient(*data[i], client_id=i)

    @app.train()
    def train(msg, context):
        return handle_train(msg, context, client(context))

    @app.query()
    def query(msg, context):
        return handle_query(msg, context, client)  # a client_fn works too

    @app.evaluate()
    def evaluate(msg, context):
        return handle_evaluate(msg, context, client(context))

    own = FedKMeans(16, min_nodes=N, max_rounds=4)
    own.start(grid=InProcessGrid(app, N))
    ready = FedKMeans(16, min_nodes=N, max_rounds=4)
    ready.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N))
    np.testing.assert_array_equal(own.centroids, ready.centroids)
    assert own.final_metrics == ready.final_metrics


def test_a_plain_flower_evaluate_reply_is_left_out_with_a_warning(caplog):
    """A user's own ``@app.evaluate()`` that sends only a loss does not fail the run."""
    data = _data()

    def client(context):
        i = int(context.node_config["partition-id"])
        return FedKMeansClient(*data[i], client_id=i)

    app = ClientApp()

    @app.train()
    def train(msg, context):
        return handle_train(msg, context, client)

    @app.evaluate()
    def evaluate(msg, context: Context):
        if int(context.node_config["partition-id"]) == 0:  # Flower's usual reply
            return Message(RecordDict({"metrics": MetricRecord({"num-examples": 10,
                                                                "loss": 0.5})}),
                           reply_to=msg)
        return handle_evaluate(msg, context, client)

    strategy = FedKMeans(16, min_nodes=N, max_rounds=3)
    with caplog.at_level(logging.WARNING, logger="flwr_clustering"):
        result = strategy.start(grid=InProcessGrid(app, N))
    # a plain reply has no "client-id": it is known by its node id
    assert "client 100 sent no clustering statistics" in caplog.text
    n_rest = sum(len(x) for x, _ in data[1:])
    assert strategy.final_metrics["num-examples"] == n_rest  # clients 1..3 only
    assert result.arrays["centroids"].numpy().shape == (16, 2)


def test_waiting_for_nodes_is_logged_and_times_out_with_what_to_change(caplog):
    strategy = FedKMeans(16, min_nodes=3, node_wait_timeout=1.2)
    with caplog.at_level(logging.INFO, logger="flwr_clustering"), \
            pytest.raises(RuntimeError, match="lower min_nodes \\(run config 'min-nodes'\\)"):
        strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, _data(2)), 2))
    assert "waiting for nodes: 2 of min_nodes=3 connected" in caplog.text


def test_the_app_defaults_run_on_flowers_default_two_nodes(tmp_path):
    """An empty run config on 2 nodes: the default FKM simulation completes and writes."""

    rc = {"out-dir": str(tmp_path / "run")}
    out, _ = run_app(rc, 2)
    assert out["centroids"].shape == (16, 2)
    assert (tmp_path / "run" / "result.json").exists()
    assert out["federated"]["num-examples"] == 800
    # within 2 % of centralized k-means on the pooled grid
    assert out["federated"]["sse"] <= 1.02 * out["centralized"]["sse"]


_BLOBS = {"dataset": "blobs", "n-samples": 300, "n-features": 6, "centers": 3, "k": 3}
_SMALL = {
    "fkm": {"max-rounds": 3},
    "kfed": {},
    "feca": {},
    "mavg": {},
    "ffcm": {"max-rounds": 3},
    "masked-federated": {**_BLOBS, "feature-mask": "shared", "mask-shared": 0.34},
    "masked-oneshot": {**_BLOBS, "feature-mask": "shared", "mask-shared": 0.34,
                       "proxy-min": 5, "proxy-max": 10},
    "dgc": {**_BLOBS, "iterations": 5, "rho": 100.0},
    "kdc": {**_BLOBS, "sample-size": 200},
    "deepfeca": {**_BLOBS, "network": "mlp", "max-rounds": 1, "local-epochs": 1,
                 "deepfeca-centralized": False, "proj-dim": 4},
}


def _expected_labels(name, strategy, X):
    if name in ("kdc", "deepfeca"):
        return strategy.label(X)
    if name.startswith("masked"):
        from flwr_clustering.algorithms.masked import pooled_masked_squared_distances

        return pooled_masked_squared_distances(X, strategy.centroids).argmin(axis=1)
    return assign_to_nearest(X, strategy.centroids)[0]


@pytest.mark.parametrize("name", sorted(_SMALL))
def test_every_algorithm_leaves_the_final_labels_on_every_node(tmp_path, name):
    """Through the App (the ``flwr run`` path), with ``evaluate=False`` where it applies."""
    from flwr_clustering import registry
    from flwr_clustering.app.client_app import app
    from flwr_clustering.app.config import dataset_kwargs, merged_config
    from flwr_clustering.app.server_app import run_server

    assert set(_SMALL) == set(registry.names()), "a new algorithm needs a row here"
    if name == "deepfeca":
        pytest.importorskip("torch")
    n = 3
    rc = {"algorithm": name, "min-nodes": n, "out-dir": str(tmp_path / "run"), **_SMALL[name]}
    grid = InProcessGrid(app, n, run_config=rc)
    strategy = run_server(grid, rc)["strategy"]
    cfg = merged_config(rc)
    for i in range(n):
        X, _ = load_partition(i, n, **dataset_kwargs(cfg))
        if strategy.feature_transform is not None:  # the App scales (scaling='standard')
            X = strategy.feature_transform.transform(X)
        labels = stored_labels(grid.contexts[100 + i])
        assert labels is not None and labels.shape == (len(X),)
        if name == "dgc":  # each DGC user labels with its own centres
            expected = assign_to_nearest(X, strategy.node_centres[i])[0]
        else:
            expected = _expected_labels(name, strategy, X)
        np.testing.assert_array_equal(labels, expected)


def test_a_natural_split_that_cannot_serve_the_federation_says_so_at_the_start(tmp_path):
    """garst-grid's paper split has 5 clients: on 2 nodes the run stops before any round."""
    from flwr_clustering.app.client_app import app
    from flwr_clustering.app.server_app import run_server

    rc = {"partitioner": "natural", "out-dir": str(tmp_path / "run")}
    grid = InProcessGrid(app, 2, run_config=rc)
    with pytest.raises(ValueError, match="natural split into 5 clients, but the federation has "
                       "2; partitioners that serve 2 clients: iid, dirichlet, cluster-wise"):
        run_server(grid, rc)
    assert grid.sent == []  # refused before the first message


def test_the_app_keys_for_per_round_evaluation_and_exact_rounds(tmp_path):
    import json

    from flwr_clustering.app.client_app import app
    from flwr_clustering.app.server_app import run_server

    rc = {"evaluate-every-round": True, "early-stop": False, "max-rounds": 4,
          "out-dir": str(tmp_path / "run")}
    grid = InProcessGrid(app, 2, run_config=rc)
    run_server(grid, rc)
    kinds = [m.metadata.message_type for m in grid.sent]
    # round 0: the library's data-source query (one per node) and its feature moments
    # (the scaling, scaling='standard' by default), then the rounds
    assert kinds == (["query"] * 4 + (["train"] * 2 + ["evaluate"] * 2) * 3
                     + ["train"] * 2 + ["evaluate"] * 2 + ["query"] * 2)  # split check
    assert all(m.content["config"]["phase"] == "data-source" for m in grid.sent[:2])
    assert all(m.content["config"]["phase"] == "feature-moments" for m in grid.sent[2:4])
    # every message after the moments carries the federation's features and scaling
    assert all("feature-transform" in m.content["config"] for m in grid.sent[4:])
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [h["round"] for h in history] == [1, 2, 3, 4]  # FKM converges earlier; no early stop
    assert all(h["metrics"]["num-examples"] == 800 for h in history)
