"""The strategy base's objects, each on its own (issue 51, item 1).

Each object has one job and explicit inputs: the exchange (given a node book, a ledger,
the rules and a view of the run), the reply rules, the ledger, the run record and the
diagnosis (a pure function). These tests use each without a strategy.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import Strategy

import flwr_clustering
from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.clients import FedKMeansClient, client_app
from flwr_clustering.protocol import DATA_SOURCE_PHASE
from flwr_clustering.replies import Collected, NodeBook, Reply
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.strategies.base import ClusteringStrategy
from flwr_clustering.strategies.diagnosis import RunSummary, run_diagnostics
from flwr_clustering.strategies.exchange import Exchange, RunView
from flwr_clustering.strategies.ledger import Ledger, ledger_entry, min_count
from flwr_clustering.strategies.state import RunRecord
from flwr_clustering.strategies.validation import ReplyRules
from flwr_clustering.testing import InProcessGrid


def _exchange(min_nodes: int = 2, ledger: Ledger | None = None,
              nodes: NodeBook | None = None) -> Exchange:
    """The exchange alone: its inputs given, nothing of a strategy."""
    rules = ReplyRules()
    return Exchange(seed=0, min_nodes=min_nodes, fraction=1.0, node_wait_timeout=5.0,
                    timeout=30.0, sample_rng=np.random.default_rng(0),
                    nodes=NodeBook() if nodes is None else nodes,
                    ledger=Ledger() if ledger is None else ledger, view=RunView,
                    check=lambda kind, cid, metrics, payload, stats: rules.check(
                        kind, cid, metrics, stats),
                    rows_of=rules.rows_of, counts_of=lambda p: None,
                    features_of=lambda p: None)


def _clients(n: int, fail: int | None = None):
    rng = np.random.default_rng(1)
    data = [rng.normal(size=(20 + 5 * i, 3)) for i in range(n)]

    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        if i == fail:
            raise RuntimeError("this site is down")
        return FedKMeansClient(data[i], client_id=i)

    return InProcessGrid(client_app(client_fn), n, shuffle_seed=3), data


def test_the_exchange_alone_orders_replies_by_client_and_learns_who_is_who():
    grid, data = _clients(4)
    ledger, nodes = Ledger(), NodeBook()
    exchange = _exchange(ledger=ledger, nodes=nodes)
    replies = exchange.send(grid, 0, DATA_SOURCE_PHASE)
    assert isinstance(replies, Collected) and replies.absent == {}
    assert replies.received == 4
    assert [r.client_id for r in replies] == [0, 1, 2, 3]
    assert [r.metrics["num-examples"] for r in replies] == [len(X) for X in data]
    assert sorted(nodes.client_of.values()) == [0, 1, 2, 3]
    assert nodes.who(replies[2].node_id) == f"client 2 (node {replies[2].node_id})"
    # identify_clients is the same exchange, per node; it draws from no generator
    state = exchange.sample_rng.bit_generator.state
    found = exchange.identify_clients(grid, 0)
    assert {r.client_id: r.node_id for r in found} == {r.client_id: r.node_id
                                                        for r in replies}
    assert exchange.sample_rng.bit_generator.state == state
    # every reply is in the ledger it was given
    assert [e["client"] for e in ledger] == [0, 1, 2, 3] * 2


def test_the_exchange_alone_names_a_failed_client_and_keeps_the_others():
    grid, _ = _clients(4, fail=2)
    nodes = NodeBook()
    replies = _exchange(min_nodes=3, nodes=nodes).send(grid, 0, DATA_SOURCE_PHASE)
    assert [r.client_id for r in replies] == [0, 1, 3]
    (why,) = replies.absent.values()
    # a client's own exception text stays in the site's log (it may quote a cell)
    assert why.startswith("failed: client 2: RuntimeError while answering round 0 query")
    assert "this site is down" not in why
    assert list(nodes.run_absent) == [nodes.who(next(iter(replies.absent)))]
    with pytest.raises(RuntimeError, match="only 3 valid replies, fewer than min_nodes=4"):
        _exchange(min_nodes=4).send(grid, 0, DATA_SOURCE_PHASE)


def test_the_validation_rules_alone():
    rules = ReplyRules()
    upload = LocalCentroids(np.zeros((2, 2)), np.array([4.0, 5.0]), np.arange(2))
    rules.check("train", 1, {"num-examples": 10}, {}, counts=upload.counts)
    with pytest.raises(ValueError, match="its row count changed"):
        rules.check("train", 1, {"num-examples": 11}, {}, counts=upload.counts)
    # evaluation replies are tracked apart (a client may evaluate on other rows)
    rules.check("evaluate", 1, {"num-examples": 11}, {})
    assert rules.rows_of("train", 1) == 10
    with pytest.raises(ValueError, match="sum to 9, more than the 8 rows"):
        rules.check("train", 2, {"num-examples": 8}, {}, counts=upload.counts)
    with pytest.raises(ValueError, match="finite and non-negative"):
        rules.check("train", 3, {"num-examples": 8}, {}, counts=np.array([-1.0]))
    with pytest.raises(ValueError, match="non-negative integer"):
        rules.check("train", 4, {"num-examples": 2.5}, {})
    # the declared sums round-trip through the rules' own state dict
    rules.set_sums({7: (np.array([3.0]), np.array([6.0]), np.array([14.0]))}, None)
    again = ReplyRules()
    again.load_state_dict(rules.state_dict(), None)
    assert sorted(again.client_moments) == [7]
    np.testing.assert_array_equal(again.client_sums[7][1], [6.0])


def _reply(arrays, stats, metrics) -> Message:
    content = RecordDict({"arrays": ArrayRecord(arrays), "stats": ArrayRecord(stats),
                          "metrics": MetricRecord(metrics)})
    return Message(content, dst_node_id=1, message_type="train")


def test_the_ledger_alone_counts_what_each_reply_carried_and_totals_per_client():
    msg = _reply([np.zeros((2, 3)), np.array([3, 4])], [np.zeros(4)],
                 {"num-examples": 7, "raw-rows": 0})
    entry = ledger_entry(2, "train", 5, msg, {"num-examples": 7, "raw-rows": 0})
    assert (entry["floats"], entry["integers"], entry["scalars"]) == (10, 2, 2)
    assert min_count(np.array([3.0, 0.0, 4.0]), {}) == 3  # an empty cluster stands for none
    assert min_count(None, {"sse": 1.0, "num-examples": 7}) == 7
    assert min_count(None, {}) is None
    entry["min-count"] = 3
    ledger = Ledger()
    ledger.add(entry)
    ledger.add({**entry, "client": 6, "floats": 1, "min-count": None})
    ledger.add_secure(3, "train", {5: 64, 6: 64}, floats=12, error_bound=1e-9)
    report = ledger.report(secure_aggregation=False, privacy_threshold=5,
                           raw_rows_setting=None)
    assert report["totals"]["floats"] == 11 and report["totals"]["replies"] == 4
    assert report["totals"]["min-count"] == 3
    assert report["clients"]["6"]["min-count"] is None
    assert report["privacy-threshold"] == 5 and report["raw-rows-setting"] is None
    assert report["secure-totals"] == [{"round": 3, "phase": "train", "clients": 2,
                                        "floats": 12, "error-bound": 1e-9}]
    # its own state dict (as an accountant's): a checkpoint restores it whole
    again = Ledger()
    again.load_state_dict(ledger.state_dict())
    assert list(again) == list(ledger) and again.secure_totals == ledger.secure_totals


def test_the_run_record_alone_round_trips_through_its_checkpoint_form():
    run = RunRecord.new(4)
    run.num_rounds = 7
    run.rng.random(3)
    run.adopt_model(np.arange(6.0).reshape(3, 2), shift=0.5)
    run.history = [{"round": 1, "shift": 0.5}]
    state = run.state_dict()
    again = RunRecord.new(4)
    again.load_state_dict(state)
    assert state["round"] == 1 and again.num_rounds == 7 and again.last_shift == 0.5
    np.testing.assert_array_equal(again.centroids, run.centroids)
    assert again.rng.random() == run.rng.random()  # the generator continues where it was


def test_the_diagnosis_is_a_function_of_the_model_and_the_statistics():
    model = np.array([[0.0, 0.0], [0.0, 0.0], [5.0, 5.0]])
    run = RunSummary(name="X", model=model, k=3, history=[{"round": 4}], iterative=True,
                     converged=False, tol=1e-4, num_rounds=4, last_shift=0.2,
                     absent={"client 2 (node 9)": "round 3 train: failed: down"})
    diag = run_diagnostics(run)
    assert run_diagnostics(run) == diag  # no state: the same inputs, the same answer
    assert diag["distinct-centres"] == 2 and diag["round-cap-hit"] is True
    assert (diag["dropped"], diag["withheld"]) == (1, 0)
    assert diag["cluster-counts"] is None  # no evaluation statistics, no counts


def test_the_base_is_a_flower_strategy_composed_of_objects():
    assert ClusteringStrategy.__bases__ == (Strategy,)
    strategy = FedKMeans(k=2)
    assert isinstance(strategy.record, RunRecord) and isinstance(strategy.ledger, Ledger)
    assert isinstance(strategy.exchanger, Exchange) and strategy.summer is strategy.exchanger
    assert not strategy.summer.sums_only
    assert isinstance(strategy.rules, ReplyRules) and isinstance(strategy.nodes, NodeBook)
    # the model is the record's: no second copy on the strategy
    strategy.centroids = np.ones((2, 2))
    assert strategy.record.centroids is strategy.centroids
    secure = FedKMeans(k=2, secure_aggregation=True, server_update="lloyd").summer
    assert secure.sums_only and secure.phase("update") == "secure-update"
    assert secure.phase("init") is None and secure.phase("data-source") == "data-source"


def test_the_exchange_and_the_rules_set_no_attribute_of_a_strategy():
    """The objects write only their own attributes (``self.x = ...`` in their methods)."""
    for cls in (Exchange, ReplyRules, Ledger, NodeBook, RunRecord):
        tree = ast.parse(inspect.getsource(cls))
        owners = {node.value.id for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name)}
        assert owners <= {"self"}, (cls.__name__, owners)


#: Where the secure-aggregation option is read: the base's constructor (which chooses the
#: run's summing exchange, ``summer``) and the search, which passes it to its candidates.
FLAG_READERS = {"strategies/base.py": 6, "strategies/choose_k.py": 1, "run_options.py": 1}


def test_no_strategy_part_or_algorithm_tests_the_secure_flag():
    """Secure aggregation is one wing: the exchange chosen once per run, not a flag."""
    root = Path(flwr_clustering.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("clients/", "secure/")):  # the node side; the wing itself
            continue
        reads = [node for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Attribute) and node.attr == "secure_aggregation"]
        if reads:
            found[rel] = len(reads)
    assert found == FLAG_READERS


def test_the_plain_exchange_sums_what_the_secure_one_would():
    """``send(..., parts=...)``: the replies' parts in client-id order, a bad one left out."""
    book = NodeBook()
    book.client_of.update({10: 0, 11: 1, 12: 2})
    ex = _exchange(min_nodes=1, nodes=book)
    rng = np.random.default_rng(1)
    parts = [[rng.normal(size=3), rng.normal(size=(2, 3))] for _ in range(3)]
    replies = [Reply(c, 10 + c, p, {}) for c, p in enumerate(parts)]
    replies.append(Reply(3, 13, [np.array([np.nan, 0, 0]), np.zeros((2, 3))], {}))
    totals = ex.sum_parts(1, "refine", replies[:4], lambda r: r.payload)
    assert totals.nodes == [10, 11, 12] and list(totals.failed) == [13]
    assert "non-finite" in totals.failed[13]
    for j in range(2):  # summed as the clients' replies in client-id order, bit for bit
        assert np.array_equal(totals.sums[j], parts[0][j] + parts[1][j] + parts[2][j])
    assert ex.phase("update") == "update" and not ex.sums_only
    assert ex.feature_moments(None, ("a",), {}, {}, 1.0) is None  # the step reads each site
    assert ex.unit_check(None, ("a",), ("a",), 1.0) == ([], None)
