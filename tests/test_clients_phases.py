"""The client adapter by job (issue 51, item 5): the library's phases are a table of
handlers (phase -> handler, then message type -> handler), each phase answered by the
library for the message types it owns and by the client's own code otherwise; the client
base keeps the client only, its old names importable for one release with a warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.client import NumPyClient
from flwr.supercore.task_identity import TaskIdentity

from flwr_clustering import protocol
from flwr_clustering.clients import (
    ClusteringClient,
    handle_evaluate,
    handle_query,
    handle_train,
    integrity,
    legacy,
    messages,
    phases,
)

HANDLERS = {"train": (handle_train, MessageType.TRAIN),
            "query": (handle_query, MessageType.QUERY),
            "evaluate": (handle_evaluate, MessageType.EVALUATE)}

#: The phases the library answers only in one message type (any other type: the client's).
OWN_TYPE = {protocol.DATA_SOURCE_PHASE: "query", protocol.UNIT_CHECK_PHASE: "train",
            protocol.SECURE_EVALUATE_PHASE: "train"}


@pytest.fixture(autouse=True)
def _task_identity():
    # what a ClientApp's runtime sets before a message is made (as InProcessGrid does)
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0


class Recording(ClusteringClient):
    """A client whose own ``fit`` and ``evaluate`` say they were called."""

    def fit(self, parameters, config):
        return [np.zeros(1)], len(self.X), {"own-fit": 1}

    def evaluate(self, parameters, config):
        return 0.0, len(self.X), {"own-evaluate": 1}


def _send(kind: str, phase: str, client: NumPyClient) -> Message:
    X = np.asarray(client.X, dtype=np.float64)
    content = RecordDict({"config": ConfigRecord({"phase": phase, "categorical-columns": "[]"}),
                          "arrays": ArrayRecord([X[:2]])})
    msg = Message(content, dst_node_id=1, message_type=HANDLERS[kind][1])
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 4},
                      state=RecordDict(), run_config={})
    return HANDLERS[kind][0](msg, context, client)


def test_the_table_holds_every_library_phase_and_every_message_type():
    library = {protocol.DATA_SOURCE_PHASE, protocol.CATEGORIES_PHASE,
               protocol.FEATURE_MOMENTS_PHASE, protocol.UNIT_CHECK_PHASE,
               *protocol.SPLIT_CHECK_KEYS, protocol.K_MOMENTS_PHASE, protocol.K_SPREADS_PHASE,
               protocol.SECURE_EVALUATE_PHASE}
    assert set(phases.PHASES) == library
    assert set(phases.MESSAGE_TYPES) == {"train", "query", "evaluate"}
    assert phases.MESSAGE_TYPES["evaluate"] is phases.evaluate


@pytest.mark.parametrize("kind", ["train", "query", "evaluate"])
@pytest.mark.parametrize("phase", sorted(phases.PHASES))
def test_a_library_phase_is_the_library_s_in_its_message_types_only(phase, kind):
    reply = _send(kind, phase, Recording(np.random.default_rng(0).normal(size=(30, 2))))
    metrics = {} if reply.has_error() else dict(reply.content["metrics"])
    library = OWN_TYPE.get(phase, kind) == kind
    # the client's own code answers the others: its fit, or its evaluate for an evaluate
    own = "own-evaluate" if kind == "evaluate" else "own-fit"
    assert (own in metrics) is (not library), (reply.error if reply.has_error() else metrics)
    if not library:
        assert not reply.has_error()
        assert metrics["client-id"] == 4


def test_a_message_without_a_library_phase_is_answered_by_its_type():
    client = Recording(np.ones((5, 2)))
    assert dict(_send("train", "update", client).content["metrics"])["own-fit"] == 1
    assert dict(_send("query", "update", client).content["metrics"])["own-fit"] == 1
    assert dict(_send("evaluate", "update", client).content["metrics"])["own-evaluate"] == 1


def test_the_old_client_base_names_warn_and_name_their_new_home():
    import flwr_clustering.clients.base as base

    with pytest.warns(DeprecationWarning,
                      match=r"clients\.base\.data_hash moved to "
                            r"flwr_clustering\.clients\.integrity\.data_hash"):
        assert base.data_hash is integrity.data_hash
    with pytest.warns(DeprecationWarning, match=r"moved to flwr_clustering\.clients\.pack_reply"):
        from flwr_clustering.clients.base import pack_reply
    assert pack_reply is messages.pack_reply
    with pytest.warns(DeprecationWarning, match="flwr_clustering.protocol"):
        assert base.DATA_SOURCE_PHASE == protocol.DATA_SOURCE_PHASE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert base.ClusteringClient is ClusteringClient  # still its home: no warning
        with pytest.raises(AttributeError, match="no attribute 'nothing'"):
            base.nothing  # noqa: B018


def test_to_client_is_the_legacy_adapter_s():
    assert ClusteringClient.to_client is legacy.to_client
    client = Recording(np.ones((5, 2)), client_id=7).to_client()
    assert isinstance(client.numpy_client, legacy.LegacyClient)
    assert client.numpy_client.client_id == 7
