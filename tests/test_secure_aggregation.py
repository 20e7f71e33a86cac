"""Secure aggregation (Flower's SecAgg+): the server holds only the federation's totals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.secure_aggregation.secaggplus_constants import Key

from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.clients import FedKMeansClient
from flwr_clustering.data.synthetic import garst_beta_split
from flwr_clustering.legacy import as_legacy
from flwr_clustering.secure import (
    FRACTION_BITS,
    VALUE_LIMIT,
    decode_fixed,
    digit_base,
    encode_fixed,
    secure_aggregation_mod,
    secure_sum,
    sum_error_bound,
)
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app
from simulations.privacy import differencing_attack, recovered_rows

#: What a SecAgg+ reply may hold: Flower's stage configuration and the (emptied) legacy
#: fit result its mod builds, never our arrays, statistics or metrics.
SECAGG_RECORDS = {"secaggplus_configs", "fitres.parameters", "fitres.metrics",
                  "fitres.num_examples", "fitres.status"}
LLOYD = {"server_update": "lloyd", "tol": -1.0}
#: What a secure session's reply may hold: public keys, encrypted shares, the masked
#: integers and their shapes, seeds, shares of a lost client's root; nothing else.
SESSION_KEYS = {"c-pk", "s-pk", "to", "ciphertexts", "ndims", "dims", "dropped", "seeds",
                "seed", "nodes", "shares"}


def is_masked_reply(msg) -> bool:
    """Whether a reply is one of a secure protocol's, holding no plain value of the client."""
    keys = set(msg.content.keys())
    if keys <= SECAGG_RECORDS:
        return not any(len(r) for r in msg.content.array_records.values())
    if keys and keys <= {"secure-session", "masked"}:
        if not set(msg.content["secure-session"].keys()) <= SESSION_KEYS:
            return False
        if "masked" in keys:
            arrays = msg.content["masked"].to_numpy_ndarrays()
            return len(arrays) == 1 and arrays[0].dtype == np.uint64
        return True
    return False


# ------------------------------------------------------------------ the encoding
@pytest.mark.parametrize("clients", [2, 5, 100, 1000, 10_000])
def test_the_digits_sum_exactly_within_the_modulus(clients):
    base = digit_base(clients)
    assert base & (base - 1) == 0 and clients * base < 2**32 and base <= 2**30
    rng = np.random.default_rng(clients)
    values = rng.normal(scale=1e4, size=(min(clients, 50), 7))
    values[0, 0], values[0, 1] = VALUE_LIMIT, -VALUE_LIMIT
    digits = np.stack([encode_fixed(v, base) for v in values])
    assert digits.min() >= -base // 2 and digits.max() < base // 2
    total = decode_fixed(digits.sum(axis=0), base)
    exact = np.rint(values * 2.0**FRACTION_BITS).sum(axis=0) / 2.0**FRACTION_BITS
    np.testing.assert_allclose(total, exact, rtol=1e-15, atol=0)
    assert np.abs(total - values.sum(axis=0)).max() <= sum_error_bound(len(values)) + \
        1e-15 * np.abs(values).sum(axis=0).max()
    counts = rng.integers(0, 10**6, size=(len(values), 5)).astype(np.float64)
    summed = decode_fixed(np.stack([encode_fixed(c, base) for c in counts]).sum(axis=0), base)
    np.testing.assert_array_equal(summed, counts.sum(axis=0))  # integers: exact


# ------------------------------------------------------------------ the exchange
def _sum_app(values, fail=None):
    app = ClientApp(mods=[secure_aggregation_mod])

    @app.train()
    def train(msg, ctx):
        i = int(ctx.node_config["partition-id"])
        if fail is not None and i in fail:
            raise RuntimeError(f"client {i} died")
        arrays = ArrayRecord([np.asarray(v) for v in values[i]])
        metrics = MetricRecord({"num-examples": 7, "client-id": i})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return app


def _values(n):
    rng = np.random.default_rng(n)
    return [[rng.normal(scale=50, size=(3, 2)), rng.integers(0, 100, 3).astype(float)]
            for _ in range(n)]


def test_the_server_receives_the_sum_and_nothing_of_any_single_client():
    values = _values(5)
    grid = InProcessGrid(_sum_app(values), 5)
    out = secure_sum(grid, grid.get_node_ids(), [np.zeros(2)], {"phase": "x"},
                     server_round=1)
    assert out.nodes == [100, 101, 102, 103, 104] and out.failed == {}
    exact = [sum(v[j] for v in values) for j in range(2)]
    assert np.abs(out.sums[0] - exact[0]).max() <= out.error_bound == 5 * 2.0**-33
    np.testing.assert_array_equal(out.sums[1], exact[1])
    # every reply is SecAgg+'s: public keys, encrypted shares, masked integers, shares
    for msg in grid.received:
        assert set(msg.content.keys()) <= SECAGG_RECORDS, msg.content.keys()
        assert not any(len(r) for name, r in msg.content.array_records.items())
        assert all(len(msg.content[k]) == 0 for k in ("fitres.metrics",) if k in msg.content)
    masked = [m for m in grid.received if Key.MASKED_PARAMETERS in
              m.content["secaggplus_configs"]]
    assert len(masked) == 5  # one masked vector per client, no plain value anywhere
    assert min(out.received.values()) > 0


def test_a_client_that_dies_mid_protocol_is_left_out_of_the_sum():
    values = _values(5)
    # client 3 answers the key setup and share exchange, then dies at the masked upload
    grid = InProcessGrid(_sum_app(values, fail={3}), 5)
    out = secure_sum(grid, grid.get_node_ids(), [], {"phase": "x"}, server_round=2)
    assert out.nodes == [100, 101, 102, 104] and "client 3 died" in out.failed[103]
    exact = [sum(values[i][j] for i in (0, 1, 2, 4)) for j in range(2)]
    assert np.abs(out.sums[0] - exact[0]).max() <= out.error_bound
    np.testing.assert_array_equal(out.sums[1], exact[1])


def test_fewer_clients_than_the_threshold_halt_with_the_reasons():
    grid = InProcessGrid(_sum_app(_values(3), fail={1, 2}), 3)
    with pytest.raises(RuntimeError, match=r"secure aggregation halted.*client 1 died"):
        secure_sum(grid, grid.get_node_ids(), [], {"phase": "x"}, server_round=1)


def test_a_value_beyond_the_fixed_point_range_is_refused_by_the_client():
    values = _values(3)
    values[1][0] = values[1][0] * 1e9
    grid = InProcessGrid(_sum_app(values), 3)
    out = secure_sum(grid, grid.get_node_ids(), [], {"phase": "x"}, server_round=1)
    assert out.nodes == [100, 102]
    assert "exceeds 1073741824 in magnitude" in out.failed[101]


# ------------------------------------------------------------------ FKM
def _clients():
    X, y, c = garst_beta_split(1.0)
    return [(X[c == i], y[c == i]) for i in range(5)]


def _dying_in(fail_round):
    """A FedKMeansClient factory whose client dies inside round ``fail_round``'s secure
    exchange.

    Under secure aggregation the client step runs in SecAgg+'s third stage, after the key
    setup and the share exchange: the failure is mid-protocol.
    """
    def build(*args, **kwargs):
        client = FedKMeansClient(*args, **kwargs)
        fit = client.fit

        def dying(parameters, config):
            if int(config.get("round", 0)) == fail_round:
                raise RuntimeError("client 2: node lost")
            return fit(parameters, config)
        client.fit = dying
        return client
    return build


class Counting(FedKMeans):
    """FKM whose train messages carry the round (for the dying client above)."""

    def train_config(self, server_round):
        return {**super().train_config(server_round), "round": server_round}


def _start(data, k=16, **kw):
    C0 = np.concatenate([x for x, _ in data])[::50][:k]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    strategy = FedKMeans(k, min_nodes=4, seed=1, max_rounds=8, **LLOYD, **kw)
    strategy.start(grid=grid, initial_arrays=ArrayRecord({"centroids": Array(C0)}))
    return strategy, grid


@pytest.mark.parametrize("keys", ["run", "exchange"])
def test_secure_fkm_equals_federated_lloyd_and_the_server_sees_only_totals(keys):
    data = _clients()
    plain, _ = _start(data)
    secure, grid = _start(data, secure_aggregation=True, secagg_keys=keys)
    assert len(secure.history) == len(plain.history) == 8
    # the same rounds within the stated error (counts are exact)
    np.testing.assert_allclose(secure.centroids, plain.centroids, rtol=0, atol=1e-9)
    for record in secure.history:
        assert record["secure-aggregation"] and record["clients"] == 5
        assert record["sum-error-bound"] == 5 * 2.0**-33
    # every message the server received: the secure protocol's in the rounds; before them
    # the data-source counts, after them the final labelling's row count; no plain array
    for msg in grid.received:
        if is_masked_reply(msg):
            continue
        keys = set(msg.content.keys())
        # the data-source reply also names the columns and their kinds (no value)
        assert keys in ({"metrics"}, {"metrics", "columns"}), keys
        if "columns" in keys:
            assert set(msg.content["columns"]) == {"names", "kinds", "unique", "rows"}
        metrics = dict(msg.content["metrics"])
        assert all(isinstance(v, int) for v in metrics.values()), metrics
    ledger = secure.privacy_ledger()
    assert ledger["secure-aggregation"] is True
    assert {e["phase"] for e in ledger["messages"]} == {
        "data-source", "secure-update (secure)", "split-scatter (secure)",
        "split-histograms (secure)", "secure-evaluate (secure)"}  # (it delivered the model)
    assert all(e["floats"] == e["integers"] == 0 for e in ledger["messages"])
    # 8 rounds, the split check's two exchanges, the evaluation
    assert [t["clients"] for t in ledger["secure-totals"]] == [5] * 11


def test_the_secure_evaluation_gives_the_plain_metrics_from_totals_only():
    data = _clients()
    C0 = np.concatenate([x for x, _ in data])[::50][:16]
    runs = {}
    for secure in (False, True):
        grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
        strategy = FedKMeans(16, min_nodes=5, seed=1, max_rounds=4, secure_aggregation=secure,
                             **LLOYD)
        strategy.start(grid=grid, initial_arrays=ArrayRecord({"centroids": Array(C0)}),
                       evaluate_config=ConfigRecord({"n-classes": 16}))
        runs[secure] = (strategy, grid)
    plain, secure = runs[False][0], runs[True][0]
    m_plain, m_secure = dict(plain.final_metrics), dict(secure.final_metrics)
    assert m_plain.pop("ari-client-weighted") > 0  # needs each client's ARI: not secure
    assert set(m_secure) == set(m_plain)
    for key in ("num-examples", "ari", "nmi", "purity", "accuracy"):  # from exact counts
        assert m_secure[key] == m_plain[key], key
    for key in ("sse", "simplified-silhouette"):
        assert m_secure[key] == pytest.approx(m_plain[key], rel=1e-12, abs=1e-9), key
    assert secure.diagnostics["cluster-counts"] == plain.diagnostics["cluster-counts"]
    assert secure.diagnostics["sst"] == pytest.approx(plain.diagnostics["sst"], rel=1e-12)
    # the plain run's residuals withhold clusters under the threshold; the totals do not
    assert secure.diagnostics["lloyd-gain"] >= plain.diagnostics["lloyd-gain"]
    # no evaluation statistic left a client on its own
    for msg in runs[True][1].received:
        assert "stats" not in msg.content
        if "metrics" in msg.content:
            assert set(msg.content["metrics"].keys()) <= {"num-examples", "client-id",
                                                          "data-local", "allow-raw-rows",
                                                          "partition-id", "num-partitions",
                                                          "num-features", "data-hash"}


def test_secure_fkm_survives_a_client_lost_mid_protocol():
    from flwr_clustering.algorithms.fkm import dense_totals, fkm_client_update, lloyd_from_totals

    data = _clients()
    C0 = np.concatenate([x for x, _ in data])[::50][:16]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data, by_node={2: _dying_in(3)}), 5)
    strategy = Counting(16, min_nodes=4, seed=1, max_rounds=5, secure_aggregation=True,
                        **LLOYD)
    strategy.start(grid=grid, initial_arrays=ArrayRecord({"centroids": Array(C0)}))
    assert [h["clients"] for h in strategy.history] == [5, 5, 4, 5, 5]
    absent = strategy.history[2]["absent"]
    # the client's own words stay in its site's log; the server hears the kind and phase
    assert absent[0]["client"] == 2 and "RuntimeError while answering round 3 train" in \
        absent[0]["reason"] and "node lost" not in absent[0]["reason"]
    # the same rounds from the pure loop: round 3 without client 2
    C = C0
    for rnd in range(1, 6):
        totals = [dense_totals(fkm_client_update(x, C), 16, 2)
                  for i, (x, _) in enumerate(data) if not (rnd == 3 and i == 2)]
        C = lloyd_from_totals(sum(t[0] for t in totals), sum(t[1] for t in totals), C)
    np.testing.assert_allclose(strategy.centroids, C, rtol=0, atol=1e-9)


def test_secure_fkm_starts_from_securely_summed_moments():
    from flwr_clustering.algorithms.fkm import moment_init

    data = _clients()
    starts = []

    class Start(FedKMeans):
        def initialize(self, grid, timeout):
            super().initialize(grid, timeout)
            starts.append(self.centroids.copy())

    strategy = Start(16, min_nodes=5, seed=0, server_update="lloyd", secure_aggregation=True)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    phases = [t["phase"] for t in strategy.secure_totals]
    assert phases[0] == "secure-moments"
    assert phases[-3:] == ["split-scatter", "split-histograms", "secure-evaluate"]
    assert set(phases[1:-3]) == {"secure-update"}
    # the start is drawn from the pooled mean and std (summed within 5 * 2**-33)
    X = np.concatenate([x for x, _ in data])
    ref = moment_init(len(X), X.sum(0), np.square(X).sum(0), 16, np.random.default_rng(0))
    np.testing.assert_allclose(starts[0], ref, rtol=0, atol=1e-8)
    assert strategy.history[-1]["round"] > 1 and np.isfinite(strategy.centroids).all()


def test_dp_under_secure_aggregation_is_the_distributed_dp_loop_and_the_server_sees_total_noise():
    from flwr_clustering.algorithms.dp_lloyd import run_dp_lloyd

    X, y, c = garst_beta_split(1.0)
    X = X - X.mean(axis=0)
    data = [(X[c == i], y[c == i]) for i in range(5)]
    dp = {"server_update": "lloyd", "dp_epsilon": 2.0, "dp_delta": 1e-5, "data_bound": 15.0,
          "max_rounds": 6, "dp_rounds": 6, "tol": -1.0}
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    strategy = FedKMeans(16, min_nodes=5, seed=3, secure_aggregation=True, **dp)
    strategy.start(grid=grid)
    ref = run_dp_lloyd([x for x, _ in data], 16, epsilon=2.0, delta=1e-5, bound=15.0,
                       rounds=6, seed=3, placement="distributed")
    np.testing.assert_allclose(strategy.centroids, ref.centroids, rtol=0, atol=1e-8)
    ledger = strategy.privacy_ledger()
    assert ledger["epsilon"] == ref.epsilon
    # without secure aggregation the server sees each client's share of the noise
    assert ledger["server-epsilon"] == ledger["epsilon"] < ref.server_epsilon


def test_the_differencing_attack_has_no_client_upload_to_difference():
    """What the attack can still do: difference the federation's totals (one row moved)."""
    data = _clients()
    X = np.concatenate([x for x, _ in data])
    seen = []

    class Watching(FedKMeans):
        def aggregate_sums(self, server_round, totals):
            sums, counts = totals.sums
            ok = np.rint(counts) > 0
            seen.append(LocalCentroids(sums[ok] / np.rint(counts[ok])[:, None],
                                       np.rint(counts[ok]).astype(np.int64),
                                       np.flatnonzero(ok).astype(np.int64)))
            return super().aggregate_sums(server_round, totals)

    C0 = X[::50][:16]
    strategy = Watching(16, min_nodes=5, seed=1, max_rounds=20, secure_aggregation=True,
                        early_stop=False, **LLOYD)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5),
                   initial_arrays=ArrayRecord({"centroids": Array(C0)}))
    on_totals = recovered_rows(differencing_attack(seen), X, atol=1e-6)
    print(f"rows recovered from the secure totals: {on_totals} of {len(X)}")
    # exactly what the same attack gets from the federation's totals of the pure loop
    # (the server of a secure run learns them, no more, no less; DP is what stops it)
    from flwr_clustering.algorithms.fkm import dense_totals, fkm_client_update, lloyd_from_totals

    C, pooled = C0, []
    for _ in range(20):
        totals = [dense_totals(fkm_client_update(x, C), 16, 2) for x, _ in data]
        sums, counts = sum(t[0] for t in totals), sum(t[1] for t in totals)
        ok = counts > 0
        pooled.append(LocalCentroids(sums[ok] / counts[ok, None], counts[ok].astype(np.int64),
                                     np.flatnonzero(ok).astype(np.int64)))
        C = lloyd_from_totals(sums, counts, C)
    assert on_totals == recovered_rows(differencing_attack(pooled), X, atol=1e-6) > 0


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("name, options", [
    ("fkm", {}), ("ffcm", {"version": 2}), ("kfed", {}), ("feca", {}), ("mavg", {}),
    ("dgc", {}), ("kdc", {}), ("masked-oneshot", {})])
def test_algorithms_that_need_individual_uploads_refuse(name, options):
    from flwr_clustering import registry

    spec = registry.get(name)
    with pytest.raises(ValueError, match="secure-aggregation=true: .*secure aggregation hides"):
        spec.strategy(k=3, secure_aggregation=True, **options)


def test_secure_ffcm_equals_plain_ffcm_version_1():
    from flwr_clustering.clients import FFCMClient
    from flwr_clustering.strategies import FFCM

    data = _clients()

    runs = {}
    for secure in (False, True):
        grid = InProcessGrid(client_app_for(FFCMClient, data), 5)
        strategy = FFCM(16, min_nodes=5, seed=2, max_rounds=6, secure_aggregation=secure)
        strategy.start(grid=grid, evaluate_config=ConfigRecord({"n-classes": 16}))
        runs[secure] = (strategy, grid)
    plain, secure = runs[False][0], runs[True][0]
    # the moments' totals give the same start, the rounds the same centres
    np.testing.assert_allclose(secure.initial, plain.initial, rtol=0, atol=1e-12)
    np.testing.assert_allclose(secure.centroids, plain.centroids, rtol=0, atol=1e-9)
    assert secure.final_metrics["ari"] == plain.final_metrics["ari"]
    assert [t["phase"] for t in secure.secure_totals] == (
        ["moments"] + ["secure-ffcm"] * 6 + ["split-scatter", "split-histograms",
                                              "secure-evaluate"])
    for msg in runs[True][1].received:  # the secure protocol's records, or integer metrics
        assert is_masked_reply(msg) or set(msg.content.keys()) == {"metrics"}


def test_the_legacy_api_refuses_a_secure_strategy():
    with pytest.raises(TypeError, match="secure aggregation"):
        as_legacy(FedKMeans(4, secure_aggregation=True, **LLOYD))


def test_the_app_runs_secure_aggregation_and_writes_it_to_privacy_json(tmp_path):
    run_config = {"server-update": "lloyd", "secure-aggregation": True, "max-rounds": 4,
                  "tol": -1.0, "beta": 10.0, "out-dir": str(tmp_path)}
    out, _ = run_app(run_config, 5)
    ledger = json.loads((tmp_path / "privacy.json").read_text())
    assert ledger["secure-aggregation"] is True
    # the federation's feature scaling (scaling='standard'), the start's moments, 4
    # rounds, the split check, the evaluation
    assert [t["phase"] for t in ledger["secure-totals"]] == (
        ["feature-moments", "unit-check", "secure-moments"] + ["secure-update"] * 4
        + ["split-scatter", "split-histograms", "secure-evaluate"])
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["features"]["scaling"] == "standard"
    assert result["features"]["features"] == ["0", "1"]
    assert all(t["clients"] == 5 for t in ledger["secure-totals"])
    result = json.loads((tmp_path / "result.json").read_text())
    # the federated metrics come from the secure evaluation's totals
    assert result["federated"]["num-examples"] == 800 and result["federated"]["sse"] > 0
    assert "ari-client-weighted" not in result["federated"]
    assert out["centroids"].shape == (16, 2)
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "completed"


def test_secure_masked_federated_rounds_equal_the_plain_ones():
    """Algorithm 1: round 1's grouping in the clear (said), the federated rounds secure."""
    from flwr_clustering.clients import MaskedFederatedClient
    from flwr_clustering.data.registry import load_partition
    from flwr_clustering.strategies import MaskedFederated

    data = [load_partition(i, 5, dataset="wine", feature_mask="chain", partitioner="iid")
            for i in range(5)]

    runs = {}
    for secure in (False, True):
        grid = InProcessGrid(client_app_for(MaskedFederatedClient, data), 5)
        strategy = MaskedFederated(3, min_nodes=5, seed=2, secure_aggregation=secure)
        strategy.start(grid=grid, evaluate_config=ConfigRecord({"n-classes": 3}))
        runs[secure] = (strategy, grid)
    plain, secure = runs[False][0], runs[True][0]
    np.testing.assert_allclose(secure.centroids, plain.centroids, rtol=0, atol=1e-9)
    assert [h.get("secure-aggregation", False) for h in secure.history] == [
        False, True, True, True]
    assert any("round 1" in w and "without secure aggregation" in w for w in secure.warnings)
    for key in ("ari", "nmi", "purity", "num-examples"):
        assert secure.final_metrics[key] == plain.final_metrics[key]
    assert secure.final_metrics["sse"] == pytest.approx(plain.final_metrics["sse"], rel=1e-12)
    # the ledger says which replies the server saw on their own: round 1's only
    plain_train = [e for e in secure.privacy_ledger()["messages"] if e["phase"] == "train"]
    assert plain_train and all(e["round"] == 1 for e in plain_train)


@pytest.mark.parametrize("fraction", [1.0, 0.8])
def test_the_secure_evaluation_delivers_the_final_model(tmp_path, fraction):
    """Issue 52: the final model reaches every node in the secure evaluation's message (no
    plain evaluate exchange after it), and every node keeps the labels of its rows; with
    nodes sampled the plain delivery stays, as before."""
    from flwr_clustering.algorithms.lloyd import assign_to_nearest

    data = _clients()
    paths = [tmp_path / f"node{i}.npy" for i in range(5)]
    C0 = np.concatenate([x for x, _ in data])[::50][:16]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5,
                         node_configs=[{"labels-path": str(p)} for p in paths])
    strategy = FedKMeans(16, min_nodes=4, seed=1, max_rounds=3, secure_aggregation=True,
                         fraction=fraction, **LLOYD)
    strategy.start(grid=grid, initial_arrays=ArrayRecord({"centroids": Array(C0)}))
    plain = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    delivering = [m for m in grid.sent if m.metadata.message_type == "train"
                  and m.content.config_records.get("config", {}).get("final")]
    if fraction < 1.0:
        assert plain and all(m.content["config"]["final"] for m in plain) and not delivering
        return
    assert not plain and len(delivering) == 5
    assert strategy.final_metrics["num-examples"] == sum(len(x) for x, _ in data)
    for i, (x, _) in enumerate(data):
        np.testing.assert_array_equal(np.load(paths[i]),
                                      assign_to_nearest(x, strategy.centroids)[0])
