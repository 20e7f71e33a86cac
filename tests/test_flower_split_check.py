"""The split check and the refinement through Flower (issue 38, item 4): the same sums and
results as the pure loop bit for bit, a warning naming `refine-rounds` where a cluster
holds two groups and none where it does not, the privacy threshold and the ledger, secure
aggregation, and the configurations that refuse it."""

import logging

import numpy as np
import pytest
from flwr.app import ArrayRecord
from sklearn.datasets import make_blobs

from flwr_clustering.algorithms.cluster_split import (
    pure_check,
    pure_step,
    refine_model,
    withholds,
)
from flwr_clustering.algorithms.kfed import run_kfed
from flwr_clustering.clients import FedKMeansClient as FKMClient
from flwr_clustering.clients import KFedClient
from flwr_clustering.strategies import DGC, KDC, FedKMeans, KFed, MaskedFederated
from flwr_clustering.testing import InProcessGrid, client_app_for


def _data(m=5, seed=0):
    X, y = make_blobs(1500, n_features=2, centers=10, center_box=(-20, 20), random_state=seed)
    perm = np.random.default_rng(seed).permutation(len(X))
    return [(X[i], y[i]) for i in np.array_split(perm, m)]


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("flwr_clustering") and r.levelno == logging.WARNING]


def test_a_poor_one_shot_model_is_flagged_and_the_warning_names_refine_rounds(caplog):
    data = _data()
    strategy = KFed(10, min_nodes=5, seed=0)
    with caplog.at_level(logging.WARNING, logger="flwr_clustering"):
        strategy.start(grid=InProcessGrid(client_app_for(KFedClient, data), 5))
    ref = run_kfed([x for x, _ in data], 10, seed=0)
    np.testing.assert_array_equal(strategy.centroids, ref)  # the model unchanged
    expected = pure_check([x for x, _ in data], 2)(ref)
    diag = strategy.diagnostics
    assert diag["split-clusters"] == sorted(expected.flagged) != []
    assert diag["split-counts"] == [int(expected.counts[j]) for j in sorted(expected.flagged)]
    # a client with a one-row cluster of this model sent zeros (the privacy threshold)
    parts = [x for x, _ in data]
    assert diag["split-clients"] == 5 - sum(withholds(x, ref, 2) for x in parts) == 4
    hits = [w for w in strategy.warnings if "look like two groups" in w]
    assert len(hits) == 1 and "'refine-rounds'" in hits[0] and hits[0] in _warnings(caplog)


def test_refine_rounds_equal_the_pure_loop_bit_for_bit_and_repair_the_model():
    data = _data()
    parts = [x for x, _ in data]
    strategy = KFed(10, min_nodes=5, seed=0, refine_rounds=10)
    grid = InProcessGrid(client_app_for(KFedClient, data), 5, shuffle_seed=3)
    seen = []
    result = strategy.start(grid=grid, evaluate_fn=lambda r, a: seen.append(
        a["centroids"].numpy() if r else None))
    # evaluate_fn and the result see the refined model
    np.testing.assert_array_equal(seen[-1], strategy.centroids)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), strategy.centroids)
    start = run_kfed(parts, 10, seed=0)
    C, result, info = refine_model(pure_step(parts, 2), pure_check(parts, 2), start, 10)
    np.testing.assert_array_equal(strategy.centroids, C)
    assert strategy.diagnostics["refine"] == info and info["repairs"] >= 1
    assert strategy.diagnostics["split-clusters"] == sorted(result.flagged) == []
    assert not any("two groups" in w for w in strategy.warnings)
    # the repaired model's SSE (the federated evaluation's) is the check's, and lower
    assert strategy.final_metrics["sse"] == pytest.approx(info["sse-after"], rel=1e-9)
    assert info["sse-after"] < info["sse-before"]
    assert strategy.final_metrics["sse"] < 0.6 * pure_check(parts, 0)(start).sse
    # the refinement's Lloyd rounds went as QUERY messages, to every node
    phases = [m.content["config"]["phase"] for m in grid.sent
              if m.metadata.message_type == "query" and "phase" in m.content["config"]]
    assert phases.count("refine") == 5 * info["lloyd-rounds"]
    assert phases.count("split-scatter") == 5 * (1 + info["attempts"])


def test_a_good_model_gives_no_warning_and_fkm_refined_moves_at_most_a_little():
    data = _data()
    plain = FedKMeans(10, min_nodes=5, seed=0)
    plain.start(grid=InProcessGrid(client_app_for(FKMClient, data), 5))
    strategy = FedKMeans(10, min_nodes=5, seed=0, refine_rounds=5)
    strategy.start(grid=InProcessGrid(client_app_for(FKMClient, data), 5))
    diag = strategy.diagnostics
    assert plain.diagnostics["split-clusters"] == diag["split-clusters"] == []
    assert diag["refine"]["repairs"] == 0
    assert not any("two groups" in w for w in strategy.warnings + plain.warnings)
    # FKM's converged model is near a Lloyd fixed point: the Lloyd rounds move each centre
    # by far less than the data's spread, and never raise the SSE
    scale = np.sqrt(np.vstack([x for x, _ in data]).var(axis=0).sum())
    assert np.abs(strategy.centroids - plain.centroids).max() < 0.01 * scale
    assert strategy.final_metrics["sse"] <= plain.final_metrics["sse"]


def test_the_privacy_threshold_withholds_whole_replies_and_the_ledger_lists_every_reply():
    data = _data(m=10)  # about 15 rows per cluster and client
    strategy = FedKMeans(10, min_nodes=10, seed=0, privacy_threshold=10)
    grid = InProcessGrid(client_app_for(FKMClient, data), 10)
    strategy.start(grid=grid)
    entries = [e for e in strategy.privacy_ledger()["messages"]
               if e["phase"] in ("evaluate+split-scatter", "split-histograms")]
    assert len(entries) == 20
    # the check's first sums rode in the final evaluation (one exchange less), which
    # carries the evaluation's statistics (k cluster counts, k x d residuals, the
    # profile's k x d spreads, d row sums) and the scatter's
    scatter = [e for e in entries if e["phase"] == "evaluate+split-scatter"]
    assert not any(e["phase"] == "split-scatter" for e in strategy.privacy_ledger()["messages"])
    split_floats = 10 + 10 * 2 + 10 * 4
    evaluation_floats = [e["floats"] for e in strategy.privacy_ledger()["messages"]
                         if e["phase"] == "evaluate" and e["round"] < 4]
    assert all(e["floats"] >= split_floats for e in scatter)
    assert not evaluation_floats  # (no evaluation before the last round)
    # a reply with counts has none under the threshold; the others are zeros, and say so
    parts = [x for x, _ in data]
    C = strategy.centroids
    held = [withholds(x, C, 10) for x in parts]
    assert 0 < sum(held) < 10
    by_client = {e["client"]: e["min-count"] for e in scatter}
    for cid in range(10):
        assert by_client[cid] is None or by_client[cid] >= 10
    replies = [m for m in grid.received if "metrics" in m.content
               and m.content["metrics"].get("client-id") is not None]
    flags = {int(m.content["metrics"]["client-id"]): int(m.content["metrics"]["split-withheld"])
             for m in replies if "split-withheld" in m.content["metrics"]}
    assert flags == {cid: int(h) for cid, h in enumerate(held)}
    withheld = [int(m.content["metrics"]["withheld"]) for m in replies
                if "withheld" in m.content["metrics"]]  # the histograms' replies
    assert withheld == [int(h) for h in held]
    expected = pure_check(parts, 10)(C)
    assert strategy.diagnostics["split-clusters"] == sorted(expected.flagged)
    assert strategy.diagnostics["split-clients"] == 10 - sum(held)
    assert expected.counts.sum() == sum(len(x) for x, h in zip(parts, held, strict=True) if not h)


def test_secure_aggregation_sums_the_check_and_the_refinement():
    data = _data()
    runs = {}
    start = ArrayRecord([np.vstack([x[:2] for x, _ in data])])  # 10 rows as the start
    for secure in (False, True):
        s = FedKMeans(10, min_nodes=5, seed=1, server_update="lloyd", max_rounds=3,
                      secure_aggregation=secure, refine_rounds=3)
        s.start(grid=InProcessGrid(client_app_for(FKMClient, data), 5), initial_arrays=start)
        runs[secure] = s
    plain, secure = runs[False], runs[True]
    np.testing.assert_allclose(secure.centroids, plain.centroids, rtol=0, atol=1e-8)
    assert secure.diagnostics["split-clusters"] == plain.diagnostics["split-clusters"]
    phases = {t["phase"] for t in secure.secure_totals}
    assert {"refine", "split-scatter", "split-histograms"} <= phases
    assert all(e["floats"] == 0 for e in secure.privacy_ledger()["messages"])


def test_refine_rounds_is_refused_where_it_does_not_apply():
    for cls in (DGC, KDC, MaskedFederated):
        with pytest.raises(ValueError, match="refine-rounds=3: "):
            cls(3, refine_rounds=3)
    with pytest.raises(ValueError, match="differential privacy"):
        FedKMeans(3, server_update="lloyd", dp_epsilon=1.0, data_bound=10.0, refine_rounds=3)
    with pytest.raises(ValueError, match=r"refine_rounds must be at least 0, got -1 \(run-config "
                                         r"key 'refine-rounds'\)"):
        KFed(3, refine_rounds=-1)


def test_a_dp_run_skips_the_check_and_says_why():
    data = _data()
    s = FedKMeans(10, min_nodes=5, seed=1, server_update="lloyd", max_rounds=2,
                  dp_epsilon=4.0, data_bound=30.0)
    grid = InProcessGrid(client_app_for(FKMClient, data), 5)
    s.start(grid=grid)
    assert s.diagnostics["split-check"].startswith("not run: a differentially private run")
    assert not any(m.content["config"].get("phase") in ("split-scatter", "refine")
                   for m in grid.sent if "config" in m.content)


def test_a_failing_check_keeps_the_finished_model(monkeypatch):
    from flwr_clustering.clients import phases

    def broken(*args, **kwargs):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(phases, "split_check_arrays", broken)
    data = _data()
    s = KFed(10, min_nodes=5, seed=0, refine_rounds=4)
    s.start(grid=InProcessGrid(client_app_for(KFedClient, data), 5))
    np.testing.assert_array_equal(s.centroids, run_kfed([x for x, _ in data], 10, seed=0))
    assert s.diagnostics["split-check"].startswith("failed: RuntimeError")
    assert s.final_metrics["sse"] > 0


def test_the_estimator_and_the_app_keys_refine_and_check():
    from flwr_clustering.estimator import FederatedClustering

    parts = [x for x, _ in _data()]
    plain = FederatedClustering("kfed", 10).fit(parts)
    refined = FederatedClustering("kfed", 10, refine_rounds=10).fit(parts)
    assert plain.diagnostics_["split-clusters"] != []
    assert any("'refine-rounds'" in w for w in plain.warnings_)
    assert refined.diagnostics_["refine"]["repairs"] >= 1
    assert refined.metrics_["sse"] < 0.6 * plain.metrics_["sse"]
    off = FederatedClustering("kfed", 10, split_check=False).fit(parts)
    assert off.diagnostics_["split-check"] == "off"
    np.testing.assert_array_equal(off.cluster_centers_, plain.cluster_centers_)


class _Grid(InProcessGrid):
    """The in-process grid, noting each exchange's messages."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if messages:
            self.batches.append(messages)
        return super().send_and_receive(messages, timeout=timeout)


def _run(strategy_cls, client_cls, data, merge, monkeypatch, **kwargs):
    """A run with the split check's first sums in the final evaluation, or in their own
    exchange (the merge switched off): the strategy and its grid."""
    strategy = strategy_cls(10, min_nodes=kwargs.pop("min_nodes", len(data)), seed=0,
                            **kwargs)
    if not merge:
        monkeypatch.setattr(type(strategy), "scatter_in_final_evaluation", lambda self: False)
    grid = _Grid(client_app_for(client_cls, data), len(data), shuffle_seed=2)
    strategy.start(grid=grid)
    monkeypatch.undo()
    return strategy, grid


@pytest.mark.parametrize(("strategy_cls", "client_cls", "options"), [
    (KFed, KFedClient, {}),  # a flagged model
    (FedKMeans, FKMClient, {"max_rounds": 4, "early_stop": False}),
    # nodes sampled: the check restores the sampling generator, so the final evaluation
    # always asked split-scatter's nodes
    (FedKMeans, FKMClient, {"max_rounds": 3, "fraction": 0.7, "min_nodes": 3}),
])
def test_the_scatter_in_the_final_evaluation_is_the_exchange_it_replaces(
        strategy_cls, client_cls, options, monkeypatch):
    """Issue 52: one exchange less per run, and the same model, check and evaluation."""
    data = _data(m=6)
    one, grid_one = _run(strategy_cls, client_cls, data, True, monkeypatch, **options)
    two, grid_two = _run(strategy_cls, client_cls, data, False, monkeypatch, **options)
    np.testing.assert_array_equal(one.centroids, two.centroids)
    assert one.split_result == two.split_result and one.split_result["split-check"] == "run"
    assert one.diagnostics == two.diagnostics
    assert one.final_metrics == two.final_metrics and one.final_metrics
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in one.history] == [
        {k: v for k, v in h.items() if k != "seconds"} for h in two.history]
    assert one.warnings == two.warnings

    def groups(grid):  # the exchanges (round trips) by the messages' content
        return [{(m.metadata.message_type, dict(m.content["config"]).get("phase"))
                 for m in batch} for batch in grid.batches]

    assert len(groups(grid_one)) == len(groups(grid_two)) - 1
    assert {("query", "split-scatter")} in groups(grid_two)
    assert {("query", "split-scatter")} not in groups(grid_one)
    # the same nodes answered the evaluation and the check's sums, and equally often
    evaluated = [sorted(m.metadata.dst_node_id for m in b) for b in grid_one.batches
                 if b[0].metadata.message_type == "evaluate"]
    scattered = [sorted(m.metadata.dst_node_id for m in b) for b in grid_two.batches
                 if dict(b[0].content["config"]).get("phase") == "split-scatter"]
    assert evaluated == scattered
    # the ledger: the same statistics, the scatter's under the merged phase's name
    led_one = [e for e in one.privacy_ledger()["messages"] if e["phase"] != "split-scatter"]
    assert sum(e["phase"] == "evaluate+split-scatter" for e in led_one) == len(evaluated[0])


def test_clients_that_send_no_scatter_in_the_evaluation_get_the_exchange(monkeypatch):
    """A user's own evaluate handler answers without the check's sums: the check asks in its
    own exchange, after the evaluation, with the same result."""
    import flwr_clustering.clients.phases as phases

    data = _data(m=5)
    ref, _ = _run(KFed, KFedClient, data, False, monkeypatch)
    monkeypatch.setattr(phases, "_split_in_evaluation", lambda r: {})
    strategy, grid = _run(KFed, KFedClient, data, True, monkeypatch)
    assert strategy.split_result == ref.split_result and ref.split_result["split-clusters"]
    phases_sent = [dict(b[0].content["config"]).get("phase") or b[0].metadata.message_type
                   for b in grid.batches]
    assert phases_sent[-3:] == ["evaluate", "split-scatter", "split-histograms"]


def test_the_evaluation_withholds_small_clusters_at_the_runs_threshold():
    """The evaluation message carries the run's privacy-threshold: no client sends the
    residual sums of a cluster of fewer rows than it (they used the default 2 before)."""
    data = _data(m=10)  # about 15 rows per cluster and client
    strategy = FedKMeans(10, min_nodes=10, seed=0, privacy_threshold=10, split_check=False)
    grid = InProcessGrid(client_app_for(FKMClient, data), 10)
    strategy.start(grid=grid)
    final = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    assert final and all(m.content["config"]["privacy-threshold"] == 10 for m in final)
    counts = [np.bincount(np.argmin(((x[:, None] - strategy.centroids) ** 2).sum(-1), axis=1),
                          minlength=10) for x, _ in data]
    # some clients hold a cluster of 2 to 9 rows (sent at the default threshold of 2)
    assert any(((c >= 2) & (c < 10)).any() for c in counts)
    by_client = {int(s["client-id"]): s for s in strategy.evaluation_stats}
    for cid, c in enumerate(counts):
        for key in ("cluster-residuals", "cluster-sq-residuals"):
            R = np.asarray(by_client[cid][key])
            assert np.isnan(R[(c > 0) & (c < 10)]).all()
    entries = [e for e in strategy.privacy_ledger()["messages"] if e["phase"] == "evaluate"]
    assert len(entries) == 10 and all(e["min-count"] is None or e["min-count"] >= 10
                                      for e in entries)
