"""DeepFeCA's core (spec 001 §2.6): FedAvg, weights, network specs, labellers, training."""

import numpy as np
import pytest

pytest.importorskip("torch")

from sklearn.datasets import load_digits  # noqa: E402

from flwr_clustering.algorithms.deepfeca import (  # noqa: E402
    NetworkSpec,
    TrainOptions,
    build_model,
    check_weights,
    cluster_step,
    embed,
    fedavg,
    initial_weights,
    labeller_client,
    labeller_server,
    linear_probe,
    model_weights,
    parse_labeller_upload,
    round_rng,
    run_deepfeca,
    train_step,
    weight_names,
)
from flwr_clustering.algorithms.feca import run_feca  # noqa: E402

CNN = NetworkSpec.for_data("cnn", 64)


def _digits(n=240, clients=3, seed=0):
    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(seed).permutation(len(X))[:n]
    return [X[i] for i in np.array_split(idx, clients)], [y[i] for i in np.array_split(idx, clients)]


def _mixed_weights(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(5),
            np.array(7, dtype=np.int64), rng.integers(0, 9, (2, 2)).astype(np.int32)]


# ----------------------------------------------------------------------------- FedAvg
def test_fedavg_of_identical_updates_returns_those_weights_exactly():
    w = _mixed_weights(0)
    out = fedavg([w, [a.copy() for a in w], [a.copy() for a in w]], [10, 1, 300])
    for a, b in zip(out, w, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    # the same for a real network's state_dict (BatchNorm's 0-d int64 counter included)
    net = initial_weights(NetworkSpec.for_data("resnet18", 64), seed=3)
    out = fedavg([net, net], [5, 7])
    assert [(a.dtype, a.shape) for a in out] == [(a.dtype, a.shape) for a in net]
    assert all(np.array_equal(a, b) for a, b in zip(out, net, strict=True))


def test_fedavg_weights_by_client_size():
    a, b = _mixed_weights(1), _mixed_weights(2)
    out = fedavg([a, b], [1, 3])
    np.testing.assert_allclose(out[0], (0.25 * a[0].astype(float) + 0.75 * b[0]).astype(np.float32))
    np.testing.assert_allclose(out[1], 0.25 * a[1] + 0.75 * b[1], rtol=0, atol=1e-15)
    assert out[2].dtype == np.int64 and out[2].shape == () and int(out[2]) == 7
    np.testing.assert_array_equal(out[3], np.rint(0.25 * a[3] + 0.75 * b[3]).astype(np.int32))


@pytest.mark.parametrize("sizes", [[1], [1, 0], [1, -2]])
def test_fedavg_rejects_bad_sizes(sizes):
    with pytest.raises(ValueError, match="positive size"):
        fedavg([_mixed_weights(0), _mixed_weights(1)], sizes)


def test_check_weights_names_the_bad_array():
    ref = _mixed_weights(0)
    assert len(check_weights(ref, ref)) == 4
    with pytest.raises(ValueError, match="expected 4 weight arrays, got 3"):
        check_weights(ref[:3], ref)
    bad = [a.copy() for a in ref]
    bad[2] = np.array([7], dtype=np.int64)
    with pytest.raises(ValueError, match=r"weight array 2 is int64\[1\], expected int64\[\]"):
        check_weights(bad, ref)
    bad = [a.copy() for a in ref]
    bad[0] = bad[0].astype(np.float64)
    with pytest.raises(ValueError, match="weight array 0 is float64"):
        check_weights(bad, ref)
    bad = [a.copy() for a in ref]
    bad[1][2] = np.nan
    with pytest.raises(ValueError, match="weight array 1 contains NaN"):
        check_weights(bad, ref)


# ------------------------------------------------------------------- networks and specs
def test_network_spec_inference_and_config_round_trip():
    assert CNN.input_shape == (1, 8, 8) and CNN.n_inputs == 64
    assert NetworkSpec.for_data("mlp", 5).input_shape == (5,)
    assert NetworkSpec.for_data("cnn", 48, "3x4x4").input_shape == (3, 4, 4)
    for spec in (CNN, NetworkSpec.for_data("mlp", 7, proj_dim=5)):
        assert NetworkSpec.from_config(spec.to_config()) == spec
    with pytest.raises(ValueError, match="not a square single-channel image"):
        NetworkSpec.for_data("cnn", 10)
    with pytest.raises(ValueError, match="has 48 values, the rows have 64"):
        NetworkSpec.for_data("cnn", 64, "3x4x4")
    with pytest.raises(ValueError, match="network must be one of"):
        NetworkSpec("vgg", (1, 8, 8))
    with pytest.raises(ValueError, match="malformed input shape"):
        NetworkSpec.for_data("cnn", 64, "1xeight")
    opts = TrainOptions(epochs=2, lr=0.1, augment=False)
    assert TrainOptions.from_config(opts.to_config()) == opts
    with pytest.raises(ValueError, match="epochs must be a positive integer"):
        TrainOptions(epochs=0)
    with pytest.raises(ValueError, match="temperature > 0"):
        TrainOptions(temperature=0.0)


def test_initial_weights_are_seeded_and_leave_global_torch_state_alone():
    import torch

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b, c = initial_weights(CNN, 0), initial_weights(CNN, 0), initial_weights(CNN, 1)
    assert torch.rand(1) == before  # build_model forks the global generator
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    # weights load back unchanged, in state_dict order
    assert all(np.array_equal(x, y) for x, y in
               zip(model_weights(build_model(CNN, c)), c, strict=True))
    assert len(weight_names(CNN)) == len(a)


def test_resnet18_is_the_papers_size_and_embeds_8x8_images():
    spec = NetworkSpec.for_data("resnet18", 64)
    weights = initial_weights(spec)
    assert 11_000_000 < sum(w.size for w in weights if w.dtype.kind == "f") < 11_600_000
    X = load_digits().data[:5]
    model = build_model(spec, weights)
    assert embed(model, X, spec, projected=False).shape == (5, 512)
    F = embed(model, X, spec)
    assert F.shape == (5, 32) and F.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(F, axis=1), 1.0, rtol=1e-5)


def test_embed_rejects_rows_of_the_wrong_width_and_nan():
    model = build_model(CNN)
    with pytest.raises(ValueError, match="features"):
        embed(model, np.zeros((3, 10)), CNN)
    X = load_digits().data[:3].copy()
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        embed(model, X, CNN)


# ------------------------------------------------------------------------- labellers
def test_labeller_on_features_is_the_existing_feca_step():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, 6)) * 10
    clients = [np.concatenate([c + rng.standard_normal((30, 6)) for c in centres])
               for _ in range(3)]
    uploads = [parse_labeller_upload(
        labeller_client(F, "feca", 4, np.random.default_rng([9, i])), "feca", k=4,
        k_local=None, n_features=6) for i, F in enumerate(clients)]
    C = labeller_server(uploads, "feca", 4)
    np.testing.assert_array_equal(C, run_feca(clients, 4, seed=9).centroids)


@pytest.mark.parametrize("labeller,k_local", [("feca", None), ("mavg", None), ("kfed", 3)])
def test_labellers_round_trip_and_validate(labeller, k_local):
    rng = np.random.default_rng(1)
    F = np.repeat(rng.standard_normal((6, 5)) * 20, 10, axis=0) + rng.standard_normal((60, 5))
    arrays = labeller_client(F, labeller, 6, rng, k_local=k_local)
    payload = parse_labeller_upload(arrays, labeller, k=6, k_local=k_local, n_features=5)
    C = labeller_server([payload, payload], labeller, 6 if labeller != "kfed" else 3)
    assert C.ndim == 2 and C.shape[1] == 5
    with pytest.raises(ValueError):
        parse_labeller_upload(arrays, labeller, k=6, k_local=k_local, n_features=4)
    with pytest.raises(ValueError, match="labeller must be one of"):
        labeller_client(F, "kmeans", 6, rng)


def test_mavg_and_kfed_clients_with_too_few_rows_refuse():
    F = np.random.default_rng(0).standard_normal((4, 3))
    with pytest.raises(ValueError, match="at least k points"):
        labeller_client(F, "mavg", 6, np.random.default_rng(0))
    with pytest.raises(ValueError, match="k-FED would upload raw rows"):
        labeller_client(F, "kfed", 6, np.random.default_rng(0), k_local=5)


# -------------------------------------------------------------------------- training
def test_client_steps_are_deterministic_and_depend_on_client_and_round():
    (X, *_), _ = _digits(120, 2)
    w0 = initial_weights(CNN, 0)
    opts = TrainOptions(epochs=1)
    up = cluster_step(w0, X, CNN, "feca", 8, seed=0, client_id=0, server_round=1)
    again = cluster_step(w0, X, CNN, "feca", 8, seed=0, client_id=0, server_round=1)
    assert all(np.array_equal(a, b) for a, b in zip(up, again, strict=True))
    C = up[0]
    a, ma = train_step(w0, X, C, CNN, opts, seed=0, client_id=0, server_round=1)
    b, _ = train_step(w0, X, C, CNN, opts, seed=0, client_id=0, server_round=1)
    c, _ = train_step(w0, X, C, CNN, opts, seed=0, client_id=1, server_round=1)
    d, _ = train_step(w0, X, C, CNN, opts, seed=0, client_id=0, server_round=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, d, strict=True))
    assert [(x.dtype, x.shape) for x in a] == [(x.dtype, x.shape) for x in w0]
    assert ma["steps"] == int(np.ceil(len(X) / 32)) and 1 <= ma["clusters-used"] <= len(C)
    assert round_rng(0, 1, 2, 0).random() != round_rng(0, 1, 2, 1).random()


def test_train_step_rejects_centroids_of_the_wrong_dimension():
    (X, *_), _ = _digits(60, 1)
    with pytest.raises(ValueError, match="C\\*"):
        train_step(initial_weights(CNN), X, np.zeros((4, 7)), CNN, TrainOptions(),
                   seed=0, client_id=0, server_round=1)


def _cosine_ce(weights, X, C, labels, temperature=0.1):
    """DeepCluster-v2's loss on unaugmented rows, computed from the features in NumPy."""
    F = embed(build_model(CNN, weights), X, CNN)
    P = C / np.linalg.norm(C, axis=1, keepdims=True)
    z = F @ P.T / temperature
    z -= z.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(X)), labels]))


def test_local_training_learns_the_pseudo_labels():
    from flwr_clustering.algorithms.lloyd import assign_to_nearest

    X = load_digits().data[:300]
    w0 = initial_weights(CNN, 0)
    C = np.asarray(labeller_server([parse_labeller_upload(
        cluster_step(w0, X, CNN, "feca", 10, seed=0, client_id=0, server_round=1), "feca",
        k=10, k_local=None, n_features=32)], "feca", 10))
    labels = assign_to_nearest(embed(build_model(CNN, w0), X, CNN), C)[0]
    w1, metrics = train_step(w0, X, C, CNN, TrainOptions(epochs=5), seed=0, client_id=0,
                             server_round=1)
    before, after = _cosine_ce(w0, X, C, labels), _cosine_ce(w1, X, C, labels)
    assert after < 0.9 * before, (before, after)  # measured: 2.25 -> 1.87
    assert metrics["steps"] == 5 * 10


def test_run_deepfeca_history():
    clients, _ = _digits(300, 3)
    res = run_deepfeca(clients, 10, rounds=2, seed=0, options=TrainOptions(epochs=1))
    assert [h["round"] for h in res.history] == [1, 2]
    assert [h["labelling-clients"] for h in res.history] == [3, 3]
    assert all(np.isfinite(h["loss"]) and h["dropped"] == [] for h in res.history)
    assert res.centroids.shape[1] == 32 and len(res.centroids) <= 10
    assert all(np.array_equal(a, b) for a, b in
               zip(res.initial_weights, initial_weights(CNN, 0), strict=True))


def test_a_client_that_cannot_cluster_is_left_out_but_trains():
    clients, _ = _digits(200, 2)
    clients.append(clients[0][:5])  # 5 rows < k = 8: M-Avg's client step refuses
    res = run_deepfeca(clients, 8, rounds=1, labeller="mavg", options=TrainOptions(epochs=1))
    assert res.history[0]["dropped"] == [2] and res.history[0]["labelling-clients"] == 2
    ref = run_deepfeca(clients[:2], 8, rounds=1, labeller="mavg", options=TrainOptions(epochs=1))
    np.testing.assert_array_equal(res.centroids, ref.centroids)  # C* from the other two
    assert not all(np.array_equal(a, b) for a, b in zip(res.weights, ref.weights, strict=True))


def test_run_deepfeca_rejects_bad_input():
    clients, _ = _digits(60, 2)
    with pytest.raises(ValueError, match="labeller must be one of"):
        run_deepfeca(clients, 4, labeller="kmeans")
    with pytest.raises(ValueError, match="at least one row"):
        run_deepfeca([clients[0], clients[0][:0]], 4)
    bad = clients[0].copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="client 0 data"):
        run_deepfeca([bad], 4)


def test_linear_probe_scores_a_trained_and_a_random_network():
    X, y = load_digits(return_X_y=True)
    acc = linear_probe(initial_weights(CNN, 0), CNN, X[:1200], y[:1200], X[1200:], y[1200:])
    assert 0.8 < acc <= 1.0
    # a network whose backbone outputs constants carries no information: chance level
    zero = [np.zeros_like(w) for w in initial_weights(CNN, 0)]
    assert linear_probe(zero, CNN, X[:600], y[:600], X[600:900], y[600:900]) < 0.2
