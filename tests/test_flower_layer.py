"""The Flower layer through an in-process grid: exact equality with the pure loops,
order invariance, bad input, privacy of the payloads, result files."""

import json
import logging
import tomllib
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from flwr_clustering.algorithms.fkm import run_fkm
from flwr_clustering.algorithms.kfed import run_kfed
from flwr_clustering.app.config import DEFAULTS, merged_config
from flwr_clustering.app.results import save_results
from flwr_clustering.clients import FedKMeansClient, KFedClient, client_app
from flwr_clustering.data.synthetic import garst_beta_split, garst_clusterwise
from flwr_clustering.metrics import centralized_metrics
from flwr_clustering.strategies import FedKMeans, KFed
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app

ROOT = Path(__file__).resolve().parents[1]


def _clients(beta=0.1):
    X, y, c = garst_beta_split(beta)
    return [(X[c == i], y[c == i]) for i in range(5)]


@pytest.mark.parametrize("shuffle", [None, 1, 2])
def test_fkm_through_flower_equals_pure_loop_whatever_the_reply_order(shuffle):
    data = _clients(0.1)
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5, shuffle_seed=shuffle)
    strategy = FedKMeans(16, min_nodes=5, seed=7, max_rounds=8, tol=-1.0)
    result = strategy.start(grid=grid)
    ref = run_fkm([x for x, _ in data], 16, seed=7, max_rounds=8, tol=-1.0)
    assert len(strategy.centroid_history) == len(ref.history) == 8
    for ours, theirs in zip(strategy.centroid_history, ref.history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref.centroids)


def test_fkm_options_through_flower_equal_pure_loop():
    X, y, c = garst_clusterwise()
    data = [(X[c == i], y[c == i]) for i in range(5)]
    opts = dict(seeding="unweighted", init="paper", local_iters=2, recount=True)
    strategy = FedKMeans(16, min_nodes=5, seed=3, max_rounds=4, tol=-1.0, server_seeding="unweighted",
                         init="paper", local_iterations=2, recount=True)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5, shuffle_seed=5))
    ref = run_fkm([x for x, _ in data], 16, seed=3, max_rounds=4, tol=-1.0, **opts)
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)


def test_federated_lloyd_through_flower_equals_sklearn():
    from sklearn.cluster import KMeans

    data = _clients(1.0)
    X = np.vstack([x for x, _ in data])
    C0 = X[[0, 100, 200, 300, 400, 500, 600, 700]]
    strategy = FedKMeans(8, min_nodes=5, privacy_threshold=0, server_update="lloyd", max_rounds=6,
                         tol=-1.0)
    result = strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5,
                                               shuffle_seed=0),
                            initial_arrays=ArrayRecord({"centroids": Array(C0)}))
    km = KMeans(8, init=C0, n_init=1, max_iter=6, tol=0.0).fit(X)
    np.testing.assert_allclose(result.arrays["centroids"].numpy(), km.cluster_centers_, atol=1e-9)


def test_kfed_through_flower_is_one_round_and_equals_pure_loop():
    data = _clients(10.0)
    grid = InProcessGrid(client_app_for(KFedClient, data), 5, shuffle_seed=3)
    strategy = KFed(16, min_nodes=5, seed=4)
    result = strategy.start(grid=grid)
    ref = run_kfed([x for x, _ in data], 16, seed=4)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref)
    train = [m for m in grid.sent if m.metadata.message_type == "train"]
    assert len(train) == 5 and len(strategy.history) == 1


def test_federated_metrics_equal_centralized_on_pooled_data():
    data = _clients(1.0)
    strategy = FedKMeans(16, min_nodes=5, max_rounds=5)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    X = np.vstack([x for x, _ in data])
    y = np.concatenate([lab for _, lab in data])
    central = centralized_metrics(X, strategy.centroids, y)
    for key in ("ari", "nmi", "purity"):
        assert strategy.final_metrics[key] == central[key]
    assert strategy.final_metrics["sse"] == pytest.approx(central["sse"], rel=1e-12)


def test_per_round_metrics_are_the_paper_scoring_of_each_round():
    """Round r's metrics (from round r+1's train replies) score C_g of round r."""
    data = _clients(0.1)
    strategy = FedKMeans(16, min_nodes=5, max_rounds=4, tol=-1.0)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    X = np.vstack([x for x, _ in data])
    y = np.concatenate([lab for _, lab in data])
    for record, C in zip(strategy.history, strategy.centroid_history, strict=True):
        assert record["metrics"]["ari"] == centralized_metrics(X, C, y)["ari"]


def _all_rows(data):
    return {tuple(r) for x, _ in data for r in x}


def _uploaded_arrays(grid):
    for msg in grid.received:
        if msg.has_error():
            continue
        for name in ("arrays", "stats"):
            if name in msg.content:
                yield from msg.content[name].to_numpy_ndarrays()


def test_private_mode_sends_no_data_row():
    data = _clients(0.1)
    rows = _all_rows(data)
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    FedKMeans(16, min_nodes=5, max_rounds=6, tol=-1.0).start(grid=grid)
    float_arrays = [a for a in _uploaded_arrays(grid) if a.dtype.kind == "f" and a.ndim == 2]
    assert float_arrays, "the test must inspect some centroid payloads"
    for a in float_arrays:
        if a.shape[1] == 2:
            assert not any(tuple(r) in rows for r in a)
    # ... while the paper's initialisation does upload raw rows (documented behaviour)
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    FedKMeans(16, min_nodes=5, max_rounds=1, init="paper").start(grid=grid)
    leaked = [a for a in _uploaded_arrays(grid) if a.ndim == 2 and a.shape[1] == 2 and a.dtype.kind == "f"]
    assert any(tuple(r) in rows for a in leaked for r in a)


class _WrongShapeClient(FedKMeansClient):
    def fit(self, parameters, config):
        arrays, n, metrics = super().fit(parameters, config)
        return [arrays[0][:, :1], arrays[1], arrays[2]], n, metrics


class _RaisingClient(FedKMeansClient):
    def fit(self, parameters, config):
        raise RuntimeError("disk on fire")


def _bad_client_app(data, bad):
    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        x, y = data[i]
        if i == 2:
            return bad(x, y, i)
        return FedKMeansClient(x, y, client_id=i)

    return client_app(client_fn)


@pytest.mark.parametrize(
    "bad, reason, evaluates",
    [
        (lambda x, y, i: FedKMeansClient(np.where(np.arange(len(x))[:, None] == 3, np.nan, x), y,
                                         client_id=i), "client 2 data contains NaN or inf", False),
        (lambda x, y, i: FedKMeansClient(np.hstack([x, x[:, :1]]), y, client_id=i),
         "client 2: it sent 3 features, the federation has 2", False),
        (lambda x, y, i: _RaisingClient(x, y, client_id=i), "client 2: disk on fire", True),
        (lambda x, y, i: _WrongShapeClient(x, y, client_id=i), "malformed payload", True),
        (lambda x, y, i: FedKMeansClient(x[:0], y[:0], client_id=i), "client 2 data is empty", False),
    ],
)
def test_bad_client_is_dropped_with_a_logged_reason(bad, reason, evaluates, caplog):
    data = _clients(10.0)
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy = FedKMeans(16, min_nodes=4, max_rounds=3, tol=-1.0)
        strategy.start(grid=InProcessGrid(_bad_client_app(data, bad), 5))
    finally:
        logger.removeHandler(caplog.handler)
    assert reason in caplog.text
    assert all(h["clients"] == 4 for h in strategy.history)
    assert strategy.centroids.shape == (16, 2)
    # the bad client is left out of the evaluation too, unless only its fit fails
    expected = sum(len(x) for i, (x, _) in enumerate(data) if i != 2 or evaluates)
    assert strategy.final_metrics["num-examples"] == expected


def test_run_stops_with_a_clear_error_below_min_nodes():
    data = _clients(10.0)
    app = _bad_client_app(data, lambda x, y, i: _RaisingClient(x, y, client_id=i))
    with pytest.raises(RuntimeError, match="only 4 valid replies, fewer than min_nodes=5"):
        FedKMeans(16, min_nodes=5).start(grid=InProcessGrid(app, 5))


def test_kfed_client_with_too_few_points_is_refused_and_dropped(caplog):
    data = _clients(10.0)
    data[1] = (data[1][0][:10], data[1][1][:10])
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy = KFed(16, min_nodes=4)
        strategy.start(grid=InProcessGrid(client_app_for(KFedClient, data), 5))
    finally:
        logger.removeHandler(caplog.handler)
    assert "client 1 has 10 rows, not more than k'=16" in caplog.text
    assert strategy.history[0]["clients"] == 4


def test_payload_shapes_and_variable_k_i():
    """Spec §8.8: C_g (K_g, d) down; (k_i, d), (k_i,), (k_i,) up with k_i in [0, K_g]."""
    X, y, c = garst_clusterwise()
    data = [(X[c == i], y[c == i]) for i in range(5)]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    FedKMeans(16, min_nodes=5, max_rounds=3, tol=-1.0).start(grid=grid)
    for msg in grid.sent:
        arrays = msg.content["arrays"].to_numpy_ndarrays()
        assert arrays == [] or arrays[0].shape == (16, 2)
    sizes = []
    for msg in grid.received:
        if msg.metadata.message_type == "train":
            means, counts, index = msg.content["arrays"].to_numpy_ndarrays()
            assert means.shape == (len(counts), 2) and index.shape == counts.shape
            sizes.append(len(counts))
    assert min(sizes) == 0 and max(sizes) <= 16  # client 1 (10 points) uploads nothing at init


def test_results_are_written(tmp_path):
    data = _clients(1.0)
    strategy = FedKMeans(16, min_nodes=5, max_rounds=3)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    save_results(strategy, tmp_path)  # the strategy writes nothing; the App writes results
    saved = np.load(tmp_path / "centroids.npz")
    assert saved["centroids"].shape == (16, 2) and "round_1" in saved
    history = json.loads((tmp_path / "history.json").read_text())
    assert [h["round"] for h in history] == list(range(1, len(history) + 1))
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["algorithm"] == "fkm" and 0.9 < result["federated"]["ari"] <= 1.0
    assert (tmp_path / "clusters.png").stat().st_size > 10_000


def test_app_defaults_match_pyproject_and_reject_unknown_keys():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert cfg == DEFAULTS
    with pytest.raises(ValueError, match="unknown run-config key 'kk'"):
        merged_config({"kk": 1})
    with pytest.raises(ValueError, match="unknown algorithm"):
        merged_config({"algorithm": "nope"})


def test_merged_config_is_cached_per_run_config_but_hands_out_copies_and_still_refuses():
    first = merged_config({"k": 5, "algorithm": "fkm"})
    first["k"] = 99  # a caller changing its copy changes nothing for the next message
    again = merged_config({"algorithm": "fkm", "k": 5})
    assert again["k"] == 5 and again == {**first, "k": 5} and again is not first
    assert merged_config({"k": 6})["k"] == 6
    for _ in range(2):  # a refused config is refused every time, not cached
        with pytest.raises(ValueError, match="unknown run-config key 'kk'"):
            merged_config({"kk": 1})


def test_strategy_rejects_bad_parameters():
    with pytest.raises(ValueError, match="server_seeding"):
        FedKMeans(4, server_seeding="x")
    with pytest.raises(ValueError, match="k must be at least 1"):
        KFed(0)
    with pytest.raises(ValueError, match="min_nodes"):
        FedKMeans(4, min_nodes=0)


def test_app_with_local_data_files(tmp_path):
    """The deployment data path, in process: each node reads its own file."""
    from flwr_clustering.app.client_app import app as client
    from flwr_clustering.app.server_app import run_server
    from flwr_clustering.data.local_file import save_local_file

    data = _clients(10.0)
    paths = []
    for i, (x, y) in enumerate(data):
        path = tmp_path / (f"site{i}.csv" if i % 2 else f"site{i}.npz")
        save_local_file(path, x, y)
        paths.append({"data-path": str(path)})
    run_config = {"dataset": "local", "out-dir": str(tmp_path / "out"), "max-rounds": 5,
                  "scaling": "none"}
    grid = InProcessGrid(client, 5, run_config=run_config, node_configs=paths)
    out = run_server(grid, run_config)
    ref = run_fkm([x for x, _ in data], 16, seed=0, max_rounds=5)
    np.testing.assert_allclose(out["centroids"], ref.centroids, atol=1e-12)  # CSV round trip
    assert out["centralized"] is None and out["federated"]["ari"] > 0.9
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "centralized" not in result and result["run-config"]["dataset"] == "local"
    # the CSV sites name their columns (x0, x1), the NPZ sites do not: taken by position,
    # and the run says so
    assert result["features"]["features"] == ["x0", "x1"]
    assert any("client 0, client 2, client 4 have files without column names" in w
               for w in result["warnings"])


def test_app_simulation_config_reports_centralized_baseline(tmp_path):
    run_config = {"algorithm": "kfed", "beta": 10.0, "out-dir": str(tmp_path)}
    out, _ = run_app(run_config, 5)
    result = json.loads((tmp_path / "result.json").read_text())
    assert set(result["centralized"]) >= {"ari", "nmi", "purity", "sse"}
    assert result["federated-on-pooled"]["ari"] == out["federated"]["ari"]
    assert result["algorithm"] == "kfed" and result["rounds"] == 1
