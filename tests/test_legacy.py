"""Legacy Flower projects (ServerApp(server_fn=...) + ServerAppComponents, NumPyClient.to_client()).

Every run goes through Flower's own legacy code: the legacy ServerApp is called with an
in-process grid, so ``start_grid``, the legacy ``Server``, its ClientManager and
``GridClientProxy`` carry the ``FitIns``/``FitRes`` to a legacy ``ClientApp(client_fn=...)``.
The result must equal the Message-API run (``strategy.start(grid=...)``) bit for bit.
"""

import re
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, RecordDict
from flwr.client import ClientApp
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from flwr_clustering.clients import (
    FeCAClient,
    FedKMeansClient,
    FFCMClient,
    KFedClient,
    MAvgClient,
    client_app,
)
from flwr_clustering.clients.masked import MaskedFederatedClient, MaskedOneShotClient
from flwr_clustering.data.masks import dim_federation, dim_lookalike, shared_block_masks
from flwr_clustering.data.synthetic import garst_beta_split
from flwr_clustering.legacy import (
    ARRAY_PREFIX,
    LegacyStrategy,
    as_legacy,
    decode_metrics,
    encode_metrics,
    legacy_problem,
)
from flwr_clustering.strategies import (
    DGC,
    FFCM,
    KDC,
    DeepFeCA,
    FeCA,
    FedKMeans,
    KFed,
    MaskedFederated,
    MaskedOneShot,
    MAvg,
)
from flwr_clustering.testing import InProcessGrid

ROOT = Path(__file__).resolve().parents[1]
CENTRES = np.array([[i * 12.0 + (j % 2) * 5, j * 11.0] for i in range(5) for j in range(3)])


def _garst(m=5):
    X, y, c = garst_beta_split(0.1)
    return [(X[c == i], y[c == i]) for i in range(m)]


def _blobs(m=4, seed=0, n_per=60):
    rng = np.random.default_rng(seed)
    X = np.concatenate([c + 2.0 * rng.standard_normal((n_per, 2)) for c in CENTRES])
    y = np.repeat(np.arange(len(CENTRES)), n_per)
    perm = rng.permutation(len(X))
    return [(X[i], y[i]) for i in np.array_split(perm, m)]


def _masked(m=5):
    X, y, _ = dim_lookalike(seed=0)
    return dim_federation(X, y, shared_block_masks(128, m, seed=0), scheme="shared",
                          split="sorted", seed=0)


def _context():
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})


def run_both(make_strategy, data, client_cls, num_rounds, *, shuffle=3, initial_arrays=None,
             broken=()):
    """The Message-API run and the legacy run of the same strategy on the same data.

    ``broken`` client ids raise in ``fit`` (in both runs).
    """

    def make_client(ctx):
        i = int(ctx.node_config["partition-id"])
        client = client_cls(*data[i], client_id=i)
        if i in broken:
            client.fit = _raise
        return client

    ref = make_strategy()
    ref.split_check = False  # the legacy API has no split check (its two extra exchanges)
    ref_grid = InProcessGrid(client_app(make_client), len(data), shuffle_seed=shuffle)
    ref_result = ref.start(grid=ref_grid, initial_arrays=initial_arrays)

    box = {}

    def server_fn(context):
        box["legacy"] = LegacyStrategy(make_strategy(), initial_arrays=initial_arrays)
        return ServerAppComponents(strategy=box["legacy"],
                                   config=ServerConfig(num_rounds=num_rounds))

    legacy_clients = ClientApp(client_fn=lambda ctx: make_client(ctx).to_client())
    grid = InProcessGrid(legacy_clients, len(data), shuffle_seed=shuffle)
    ServerApp(server_fn=server_fn)(grid, _context())
    return ref, ref_result, ref_grid, box["legacy"], grid


def _raise(parameters, config):
    raise ValueError("broken on purpose")


def assert_same_run(ref, ref_result, ref_grid, legacy, grid):
    """Same model, same history, same metrics, same number of client calls."""
    s = legacy.strategy
    np.testing.assert_array_equal(legacy.result.arrays["centroids"].numpy(),
                                  ref_result.arrays["centroids"].numpy())
    np.testing.assert_array_equal(s.centroids, ref.centroids)
    assert len(s.centroid_history) == len(ref.centroid_history)
    for ours, theirs in zip(s.centroid_history, ref.centroid_history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    def strip(history):
        # the wall times differ, and so does the text of an absent client's reason: Flower's
        # legacy runtime wraps a client's exception in its own message
        return [{k: ([{**a, "reason": a["reason"].split(":")[0]} for a in v]
                     if k == "absent" else v) for k, v in h.items() if k != "seconds"}
                for h in history]

    assert strip(s.history) == strip(ref.history)
    assert s.final_metrics == ref.final_metrics and s.final_metrics
    assert legacy.result.evaluate_metrics_clientapp == ref_result.evaluate_metrics_clientapp
    assert legacy.result.train_metrics_clientapp == ref_result.train_metrics_clientapp
    # every message went the legacy way (FitIns/EvaluateIns records), as many as the
    # Message-API run sent: exchanges before round 1 and rounds after convergence add none
    assert all(any(k.startswith(("fitins", "evaluateins")) for k in m.content.array_records)
               for m in grid.sent)
    kinds = [m.metadata.message_type for m in ref_grid.sent]
    legacy_kinds = [m.metadata.message_type for m in grid.sent]
    assert legacy_kinds.count("evaluate") == kinds.count("evaluate") > 0
    assert legacy_kinds.count("train") == kinds.count("train") + kinds.count("query")


def test_fkm_legacy_equals_message_api_and_stops_after_convergence():
    data = _garst()
    ref, *rest = run_both(lambda: FedKMeans(16, min_nodes=5, seed=7, max_rounds=12), data,
                          FedKMeansClient, num_rounds=15)
    assert 1 < len(ref.history) < 12  # converged early: the later legacy rounds sent nothing
    assert_same_run(ref, *rest)


def test_fkm_legacy_with_initial_centroids_sampling_and_a_failing_client():
    data = _garst()
    X = np.vstack([x for x, _ in data])
    C0 = ArrayRecord({"centroids": Array(X[::100][:8])})
    out = run_both(lambda: FedKMeans(8, min_nodes=3, fraction=0.8, seed=2, max_rounds=4,
                                     tol=-1.0, server_update="lloyd", privacy_threshold=0),
                   data, FedKMeansClient, num_rounds=4, initial_arrays=C0, broken=(1,))
    ref, legacy = out[0], out[3]
    assert [h["clients"] for h in ref.history] == [h["clients"] for h in legacy.strategy.history]
    assert sum(h["dropped"] for h in legacy.strategy.history) > 0  # client 1 was sampled
    assert_same_run(*out)


def test_kfed_legacy_is_one_round_and_equals_message_api():
    out = run_both(lambda: KFed(16, min_nodes=5, seed=4), _garst(), KFedClient, num_rounds=3)
    assert len(out[3].strategy.history) == 1
    assert_same_run(*out)


def test_feca_legacy_equals_message_api():
    out = run_both(lambda: FeCA(15, min_nodes=4, seed=9), _blobs(), FeCAClient, num_rounds=1)
    assert_same_run(*out)


def test_mavg_legacy_equals_message_api():
    out = run_both(lambda: MAvg(15, min_nodes=4, seed=5), _blobs(), MAvgClient, num_rounds=1)
    assert_same_run(*out)


@pytest.mark.parametrize("version", [1, 2])
def test_ffcm_legacy_runs_the_moments_exchange_before_round_1(version):
    out = run_both(lambda: FFCM(15, version=version, min_nodes=4, seed=3, max_rounds=3),
                   _blobs(), FFCMClient, num_rounds=3)
    legacy, grid = out[3], out[4]
    np.testing.assert_array_equal(legacy.strategy.initial, out[0].initial)
    phases = [m.content.config_records["fitins.config"]["phase"] for m in grid.sent
              if m.metadata.message_type == "train"]
    assert phases == ["moments"] * 4 + ["ffcm"] * 12
    assert_same_run(*out)


def test_masked_algorithm_1_legacy_equals_message_api():
    out = run_both(lambda: MaskedFederated(8, method="B", min_nodes=5, k_local=8, seed=5,
                                           n_init=2),
                   _masked(), MaskedFederatedClient, num_rounds=4)
    assert len(out[3].strategy.history) == 4  # init + F = 3
    assert_same_run(*out)


def test_masked_algorithm_2_legacy_equals_message_api():
    out = run_both(lambda: MaskedOneShot(8, min_nodes=5, k_local=8, seed=2, min_size=10,
                                         max_size=20, n_init=2),
                   _masked(), MaskedOneShotClient, num_rounds=1)
    assert_same_run(*out)


def test_dgc_kdc_deepfeca_are_refused_with_a_pointer_to_the_message_api():
    for cls in (DGC, KDC, DeepFeCA):
        reason = legacy_problem(cls)
        assert reason and "Message API" in reason and "strategy.start(grid=" in reason
    for strategy in (DGC(3, min_nodes=2), KDC(3, min_nodes=2)):
        with pytest.raises(TypeError, match="several message kinds per round.*Message API"):
            LegacyStrategy(strategy)
    pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"DeepFeCA cannot run on Flower's legacy"):
        as_legacy(DeepFeCA(4, min_nodes=2))
    for cls in (FedKMeans, KFed, FeCA, MAvg, FFCM, MaskedFederated, MaskedOneShot):
        assert legacy_problem(cls) is None


def test_fixed_protocols_reject_a_round_count_that_does_not_fit():
    with pytest.raises(ValueError, match="fixed protocol of 1 round"):
        LegacyStrategy(KFed(4), num_rounds=3)
    assert LegacyStrategy(MaskedFederated(4)).server_config().num_rounds == 4
    assert LegacyStrategy(FedKMeans(4, max_rounds=7)).server_config().num_rounds == 7


def test_array_metrics_travel_as_npy_bytes_exactly():
    table = np.arange(6, dtype=np.int64).reshape(2, 3)
    encoded = encode_metrics({"sse": np.float64(1.5), "ok": True, "table": table,
                              "scalar": np.array(2.0)}, client_id=3)
    assert set(encoded) == {"sse", "ok", f"{ARRAY_PREFIX}table", f"{ARRAY_PREFIX}scalar",
                            "client-id"}
    assert all(isinstance(v, bool | bytes | float | int | str) for v in encoded.values())
    scalars, arrays = decode_metrics(encoded)
    assert scalars == {"sse": 1.5, "ok": 1, "client-id": 3}
    np.testing.assert_array_equal(arrays["table"], table)
    assert arrays["table"].dtype == np.int64 and arrays["scalar"].shape == ()


def test_to_client_is_a_legacy_client_whose_errors_name_the_client():
    from flwr.common import Code, FitIns, ndarrays_to_parameters

    X, y = _garst()[2]
    client = FedKMeansClient(X, y, client_id=2).to_client()
    res = client.fit(FitIns(ndarrays_to_parameters([]), {"phase": "init", "k": 4}))
    assert res.status.code == Code.OK and res.metrics["client-id"] == 2
    with pytest.raises(RuntimeError, match="^client 2: "):
        client.fit(FitIns(ndarrays_to_parameters([]), {"phase": "nonsense", "k": 4}))


def test_docs_legacy_snippet_runs_and_equals_the_message_api(capsys):
    text = (ROOT / "docs" / "legacy.md").read_text()
    code = re.findall(r"<!-- readme-test: legacy -->\n```python\n(.*?)```", text, re.S)
    assert len(code) == 1
    ns = {}
    exec(compile(code[0], "docs/legacy.md:legacy", "exec"), ns)
    grid = InProcessGrid(ns["client"], 5)
    ns["server"](grid, _context())
    out = capsys.readouterr().out
    assert "centroids (16, 2)" in out
    ref = FedKMeans(16, min_nodes=5).start(grid=InProcessGrid(_docs_client_app(), 5))
    np.testing.assert_array_equal(ns["final"]["centroids"], ref.arrays["centroids"].numpy())


def _docs_client_app():
    from flwr_clustering.data import load_partition

    def client_fn(ctx):
        i, n = int(ctx.node_config["partition-id"]), int(ctx.node_config["num-partitions"])
        X, y = load_partition(i, n, dataset="garst-grid", beta=1.0)
        return FedKMeansClient(X, y, client_id=i)

    return client_app(client_fn)


@pytest.mark.integration
@pytest.mark.slow
def test_ffcm_legacy_in_a_ray_simulation_equals_message_api():
    """The real runtime (run_simulation, Ray, InMemoryGrid) with the moments exchange."""
    from flwr.simulation import run_simulation

    data = _blobs()

    def make_client(ctx):
        i = int(ctx.node_config["partition-id"])
        return FFCMClient(*data[i], client_id=i)

    def make_strategy():
        return FFCM(15, version=2, min_nodes=4, seed=3, max_rounds=3)

    ref = make_strategy()
    ref.start(grid=InProcessGrid(client_app(make_client), 4))
    box = {}

    def server_fn(context):
        box["legacy"] = LegacyStrategy(make_strategy(),
                                       on_finish=lambda r: box.__setitem__("result", r))
        return ServerAppComponents(strategy=box["legacy"], config=box["legacy"].server_config())

    run_simulation(ServerApp(server_fn=server_fn),
                   ClientApp(client_fn=lambda ctx: make_client(ctx).to_client()), 4,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"logging_level": "ERROR",
                                                 "log_to_driver": False}})
    s = box["legacy"].strategy
    np.testing.assert_array_equal(s.centroids, ref.centroids)
    assert s.final_metrics == ref.final_metrics
    np.testing.assert_array_equal(box["result"].arrays["centroids"].numpy(), ref.centroids)


def test_legacy_with_evaluate_false_delivers_the_model_without_statistics():
    data = _garst()
    ref, ref_result, ref_grid, legacy, grid = run_both(
        lambda: FedKMeans(16, min_nodes=5, seed=7, max_rounds=4, evaluate=False), data,
        FedKMeansClient, num_rounds=4)
    np.testing.assert_array_equal(legacy.strategy.centroids, ref.centroids)
    assert legacy.strategy.final_metrics == ref.final_metrics == {}
    final = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    assert len(final) == 5  # every client still receives the final model
    for m in grid.received:
        if m.metadata.message_type == "evaluate":
            metrics = dict(m.content["evaluateres.metrics"])
            assert set(metrics) == {"client-id"}  # no statistics came back
