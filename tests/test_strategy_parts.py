"""The strategy base's parts, each on its own (issue 35, item 1).

Each part is a class of one job in its own module; these tests use a part without the
others (and without :class:`~flwr_clustering.strategies.base.ClusteringStrategy`), on a
small host class that gives it the attributes its module docstring names.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.clients import FedKMeansClient, client_app
from flwr_clustering.protocol import DATA_SOURCE_PHASE
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.strategies.base import ClusteringStrategy
from flwr_clustering.strategies.exchange import Exchange
from flwr_clustering.strategies.ledger import PrivacyLedger, ledger_entry, min_count
from flwr_clustering.strategies.state import RunState
from flwr_clustering.strategies.validation import ReplyValidation
from flwr_clustering.testing import InProcessGrid


class _ExchangeHost(Exchange):
    """The exchange alone: the attributes its module docstring names, nothing else."""

    def __init__(self, min_nodes: int = 2) -> None:
        self.min_nodes, self.fraction, self.seed = min_nodes, 1.0, 0
        self.round_timeout, self.node_wait_timeout = 30.0, 5.0
        self.n_features = None
        self._sample_rng = np.random.default_rng(0)
        self.ledger: list = []
        self.feature_transform = None


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
    host = _ExchangeHost()
    replies = host.exchange(grid, 0, DATA_SOURCE_PHASE)
    assert [r.client_id for r in replies] == [0, 1, 2, 3]
    assert [r.metrics["num-examples"] for r in replies] == [len(X) for X in data]
    assert sorted(host.client_of.values()) == [0, 1, 2, 3]
    assert host.who(replies[2].node_id) == f"client 2 (node {replies[2].node_id})"
    # identify_clients is the same exchange, per node; it draws from no generator
    state = host._sample_rng.bit_generator.state
    assert host.identify_clients(grid, 0) == {r.client_id: r.node_id for r in replies}
    assert host._sample_rng.bit_generator.state == state
    # every reply is in the ledger list the host gave it
    assert [e["client"] for e in host.ledger] == [0, 1, 2, 3] * 2


def test_the_exchange_alone_names_a_failed_client_and_keeps_the_others():
    grid, _ = _clients(4, fail=2)
    host = _ExchangeHost(min_nodes=3)
    replies = host.exchange(grid, 0, DATA_SOURCE_PHASE)
    assert [r.client_id for r in replies] == [0, 1, 3]
    (why,) = host.last_absent.values()
    # a client's own exception text stays in the site's log (it may quote a cell)
    assert why.startswith("failed: client 2: RuntimeError while answering round 0 query")
    assert "this site is down" not in why
    with pytest.raises(RuntimeError, match="only 3 valid replies, fewer than min_nodes=4"):
        _ExchangeHost(min_nodes=4).exchange(grid, 0, DATA_SOURCE_PHASE)


class _RulesHost(ReplyValidation):
    def __init__(self) -> None:
        self.client_rows: dict = {}
        self.client_moments: dict = {}
        self.feature_transform = None
        self.centroids = None
        self.k = 3

    def payload_counts(self, payload):  # what the algorithm says its upload claims
        return payload.counts


def test_the_validation_rules_alone():
    rules = _RulesHost()
    upload = LocalCentroids(np.zeros((2, 2)), np.array([4.0, 5.0]), np.arange(2))
    rules.check_reply("train", 1, {"num-examples": 10}, upload, {})
    with pytest.raises(ValueError, match="its row count changed"):
        rules.check_reply("train", 1, {"num-examples": 11}, upload, {})
    # evaluation replies are tracked apart (a client may evaluate on other rows)
    rules.check_reply("evaluate", 1, {"num-examples": 11}, None, {})
    with pytest.raises(ValueError, match="sum to 9, more than the 8 rows"):
        rules.check_reply("train", 2, {"num-examples": 8}, upload, {})
    with pytest.raises(ValueError, match="finite and non-negative"):
        rules.check_reply("train", 3, {"num-examples": 8},
                          LocalCentroids(np.zeros((1, 2)), np.array([-1.0]), np.arange(1)), {})
    with pytest.raises(ValueError, match="non-negative integer"):
        rules.check_reply("train", 4, {"num-examples": 2.5}, None, {})


def _reply(arrays, stats, metrics) -> Message:
    content = RecordDict({"arrays": ArrayRecord(arrays), "stats": ArrayRecord(stats),
                          "metrics": MetricRecord(metrics)})
    return Message(content, dst_node_id=1, message_type="train")


class _LedgerHost(PrivacyLedger):
    secure_aggregation = False
    privacy_threshold = 5

    def __init__(self, entries):
        self.ledger, self.secure_totals = entries, []


def test_the_ledger_alone_counts_what_each_reply_carried_and_totals_per_client():
    msg = _reply([np.zeros((2, 3)), np.array([3, 4])], [np.zeros(4)],
                 {"num-examples": 7, "raw-rows": 0})
    entry = ledger_entry(2, "train", 5, msg, {"num-examples": 7, "raw-rows": 0})
    assert (entry["floats"], entry["integers"], entry["scalars"]) == (10, 2, 2)
    assert min_count(np.array([3.0, 0.0, 4.0]), {}) == 3  # an empty cluster stands for none
    assert min_count(None, {"sse": 1.0, "num-examples": 7}) == 7
    assert min_count(None, {}) is None
    entry["min-count"] = 3
    other = {**entry, "client": 6, "floats": 1, "min-count": None}
    report = _LedgerHost([entry, other]).privacy_ledger()
    assert report["totals"]["floats"] == 11 and report["totals"]["replies"] == 2
    assert report["totals"]["min-count"] == 3
    assert report["clients"]["6"]["min-count"] is None
    assert report["privacy-threshold"] == 5 and report["raw-rows-setting"] is None


class _StateHost(RunState):
    seed, max_rounds = 4, 7


def test_the_run_state_alone_round_trips_through_its_checkpoint_form():
    run = _StateHost()
    run.reset()
    run.rng.random(3)
    run.centroids = np.arange(6.0).reshape(3, 2)
    run.history = [{"round": 1, "shift": 0.5}]
    state = run.state_dict()
    again = _StateHost()
    again.reset()
    again.load_state_dict(state)
    assert state["round"] == 1 and again.num_rounds == 7
    np.testing.assert_array_equal(again.centroids, run.centroids)
    assert again.rng.random() == run.rng.random()  # the generator continues where it was


def test_the_base_composes_the_parts_with_the_rules_before_the_exchange_defaults():
    strategy = FedKMeans(k=2)
    assert type(strategy).check_reply is ReplyValidation.check_reply
    assert ClusteringStrategy.payload_means is ReplyValidation.payload_means
    assert ClusteringStrategy.payload_counts is ReplyValidation.payload_counts
    for part in (Exchange, ReplyValidation, PrivacyLedger, RunState):
        assert issubclass(ClusteringStrategy, part)
