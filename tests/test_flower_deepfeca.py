"""DeepFeCA through Flower (in-process grid): equal to the pure loop bit for bit, two
exchanges per round, weights unchanged in dtype and shape, bad clients dropped, the App."""

import json
import logging

import numpy as np
import pytest

pytest.importorskip("torch")

from sklearn.datasets import load_digits  # noqa: E402

from flwr_clustering.algorithms.deepfeca import (  # noqa: E402
    NetworkSpec,
    TrainOptions,
    initial_weights,
    run_deepfeca,
    weight_names,
)
from flwr_clustering.clients import DeepFeCAClient  # noqa: E402
from flwr_clustering.strategies import DeepFeCA  # noqa: E402
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app  # noqa: E402

OPTS = TrainOptions(epochs=1)


def _data(m=4, n=240, seed=0):
    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(seed).permutation(len(X))[:n]
    return [(X[i], y[i]) for i in np.array_split(idx, m)]


def _model(result):
    names = [k for k in result.arrays if k.startswith("model.")]
    return [result.arrays[k].numpy() for k in names]


def _sent(grid, phase):
    # describe and cluster are queries (not training), train is a train message
    kind = "train" if phase == "train" else "query"
    return [m for m in grid.sent
            if m.metadata.message_type == kind and m.content["config"]["phase"] == phase]


@pytest.mark.parametrize("shuffle", [None, 7])
def test_one_deepfeca_round_through_flower_equals_the_pure_loop(shuffle):
    data = _data()
    grid = InProcessGrid(client_app_for(DeepFeCAClient, data), 4, shuffle_seed=shuffle)
    strategy = DeepFeCA(8, options=OPTS, min_nodes=4, seed=3, max_rounds=1)
    result = strategy.start(grid=grid)
    ref = run_deepfeca([x for x, _ in data], 8, rounds=1, options=OPTS, seed=3)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref.centroids)
    model = _model(result)
    assert len(model) == len(ref.weights)
    for a, b in zip(model, ref.weights, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    # one describe exchange, then the round's two exchanges, then the evaluation
    assert [len(_sent(grid, p)) for p in ("describe", "cluster", "train")] == [4, 4, 4]
    assert len([m for m in grid.sent if m.metadata.message_type == "evaluate"]) == 4
    assert strategy.history[0]["k-out"] == len(ref.centroids)
    assert strategy.history[0]["loss"] == pytest.approx(ref.history[0]["loss"], rel=1e-12)


@pytest.mark.parametrize("labeller,k_local", [("mavg", None), ("kfed", 3)])
def test_baseline_labellers_through_flower_equal_the_pure_loop_over_two_rounds(labeller,
                                                                               k_local):
    data = _data()
    strategy = DeepFeCA(6, labeller=labeller, k_local=k_local, options=OPTS, min_nodes=4,
                        max_rounds=2, evaluate=False)
    result = strategy.start(grid=InProcessGrid(client_app_for(DeepFeCAClient, data), 4))
    ref = run_deepfeca([x for x, _ in data], 6, rounds=2, labeller=labeller, k_local=k_local,
                       options=OPTS)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref.centroids)
    assert all(np.array_equal(a, b) for a, b in zip(_model(result), ref.weights, strict=True))
    assert [h["round"] for h in strategy.history] == [1, 2]


def test_weights_travel_unchanged_in_dtype_and_shape():
    data = _data(m=2, n=80)
    spec = NetworkSpec.for_data("resnet18", 64)  # float32 weights plus BatchNorm's 0-d int64
    grid = InProcessGrid(client_app_for(DeepFeCAClient, data), 2)
    DeepFeCA(4, network="resnet18", options=TrainOptions(epochs=1, batch_size=40),
             min_nodes=2, max_rounds=1, evaluate=False).start(grid=grid)
    w0 = initial_weights(spec, 0)
    assert {w.dtype for w in w0} == {np.dtype(np.float32), np.dtype(np.int64)}
    assert any(w.shape == () for w in w0)
    down = _sent(grid, "cluster")[0].content["arrays"].to_numpy_ndarrays()
    assert len(down) == len(w0)
    for a, b in zip(down, w0, strict=True):  # server -> client: bit for bit
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    train = _sent(grid, "train")[0].content["arrays"].to_numpy_ndarrays()
    assert len(train) == len(w0) + 1 and train[-1].shape[1] == 32  # [*weights, C*]
    replies = [m for m in grid.received if "arrays" in m.content
               and len(m.content["arrays"]) == len(w0)]
    assert len(replies) == 2  # client -> server: the trained weights, same dtypes and shapes
    for reply in replies:
        up = reply.content["arrays"].to_numpy_ndarrays()
        assert [(a.dtype, a.shape) for a in up] == [(b.dtype, b.shape) for b in w0]


class _NaNWeights(DeepFeCAClient):
    def fit(self, parameters, config):
        arrays, n, metrics = super().fit(parameters, config)
        if config["phase"] == "train":
            arrays[0] = np.full_like(arrays[0], np.nan)
        return arrays, n, metrics


class _WrongShape(DeepFeCAClient):
    def fit(self, parameters, config):
        arrays, n, metrics = super().fit(parameters, config)
        if config["phase"] == "train":
            arrays[3] = arrays[3][:1]
        return arrays, n, metrics


def test_bad_clients_are_dropped_with_a_logged_reason_and_the_rest_is_the_pure_loop(caplog):
    data = _data(m=5, n=300)
    wrong_width = (data[4][0][:, :60], data[4][1])  # 60 features: not the federation's 64
    data_with_bad = [*data[:4], wrong_width]
    app = client_app_for(DeepFeCAClient, data_with_bad, by_node={1: _NaNWeights, 2: _WrongShape})
    strategy = DeepFeCA(6, options=OPTS, min_nodes=2, max_rounds=1, evaluate=False)
    with caplog.at_level(logging.WARNING, logger="flwr_clustering"):
        result = strategy.start(grid=InProcessGrid(app, 5))
    text = caplog.text
    assert "dropping client 4: it sent 60 features, the federation has 64" in text
    assert "the network takes 64 features, this client's rows have 60" in text
    assert "weight array 0 contains NaN" in text
    assert "weight array 3 is float32[1" in text
    assert strategy.history[0]["clients"] == 2 and strategy.history[0]["dropped"] == 3
    # clients 1 and 2 clustered; only 0 and 3 trained into the average
    from flwr_clustering.algorithms.deepfeca import (
        cluster_step,
        fedavg,
        labeller_server,
        parse_labeller_upload,
        train_step,
    )

    spec, w0 = NetworkSpec.for_data("cnn", 64), initial_weights(NetworkSpec.for_data("cnn", 64))
    uploads = [parse_labeller_upload(cluster_step(w0, data[i][0], spec, "feca", 6, seed=0,
                                                  client_id=i, server_round=1),
                                     "feca", k=6, k_local=None, n_features=32)
               for i in range(4)]
    C = labeller_server(uploads, "feca", 6)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), C)
    trained = [train_step(w0, data[i][0], C, spec, OPTS, seed=0, client_id=i,
                          server_round=1)[0] for i in (0, 3)]
    expected = fedavg(trained, [len(data[0][0]), len(data[3][0])])
    assert all(np.array_equal(a, b) for a, b in zip(_model(result), expected, strict=True))


def test_too_few_valid_train_replies_stop_the_run():
    data = _data(m=3, n=120)
    app = client_app_for(DeepFeCAClient, data, by_node={0: _NaNWeights, 1: _NaNWeights})
    with pytest.raises(RuntimeError, match="only 1 valid replies, fewer than min_nodes=2"):
        DeepFeCA(4, options=OPTS, min_nodes=2, max_rounds=1).start(grid=InProcessGrid(app, 3))


def test_strategy_rejects_bad_options():
    with pytest.raises(ValueError, match="labeller must be one of"):
        DeepFeCA(4, labeller="kmeans")
    with pytest.raises(ValueError, match="network must be one of"):
        DeepFeCA(4, network="vgg")
    with pytest.raises(ValueError, match="k must be at least 1"):
        DeepFeCA(0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        TrainOptions(batch_size=0)


def test_app_runs_deepfeca_from_the_run_config_and_writes_results(tmp_path):
    from flwr_clustering.data.registry import load_partition

    cfg = {"algorithm": "deepfeca", "dataset": "digits", "partitioner": "iid", "k": 12,
           "max-rounds": 1, "min-nodes": 3, "local-epochs": 1, "out-dir": str(tmp_path)}
    out, _ = run_app(cfg, 3)
    files = {p.name for p in tmp_path.iterdir()}
    assert {"model.npz", "training.png", "clusters.png", "centroids.npz", "history.json",
            "result.json"} <= files
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["algorithm"] == "deepfeca" and res["rounds"] == 1
    probe = res["linear-probe"]
    assert set(probe) == {"federated", "random-network", "centralized", "centralized-seconds"}
    assert all(0.5 < probe[k] <= 1.0 for k in ("federated", "random-network", "centralized"))
    # the federated evaluation (additive statistics from the clients) equals the metrics of
    # the pooled rows labelled by the strategy's model
    assert out["federated"]["nmi"] == pytest.approx(res["federated-on-pooled"]["nmi"], abs=1e-12)
    assert out["federated"]["num-examples"] == 1797
    # model.npz holds the same network as the pure loop, by state_dict name
    clients = [load_partition(i, 3, dataset="digits", partitioner="iid")[0] for i in range(3)]
    ref = run_deepfeca(clients, 12, rounds=1, options=OPTS)
    spec = NetworkSpec.for_data("cnn", 64)
    with np.load(tmp_path / "model.npz") as npz:
        assert list(npz.files) == weight_names(spec)
        assert all(np.array_equal(npz[n], w) for n, w in zip(weight_names(spec), ref.weights,
                                                              strict=True))
    assert res["config"]["labeller"] == "feca" and res["network"]["spec"]["network"] == "cnn"
