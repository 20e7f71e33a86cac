"""An in-process Flower grid: runs a ClientApp synchronously, with no Ray and no network.

Meant for unit tests and quick experiments: a strategy's ``start(grid=...)`` runs against
``InProcessGrid(client_app, num_nodes)`` exactly as against a simulation or deployment
grid, with ``partition-id``/``num-partitions`` in every node's ``node_config``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from uuid import uuid4

import numpy as np
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["InProcessGrid"]


class InProcessGrid(Grid):
    """A :class:`flwr.serverapp.Grid` that calls a ClientApp in the same process.

    Parameters
    ----------
    client_app : flwr.clientapp.ClientApp
        The ClientApp every node runs.
    num_nodes : int
        Number of nodes; node ``i`` has id ``100 + i`` (or ``node_ids[i]``) and
        ``partition-id = i``.
    run_config : dict, optional
        The run config every node's context sees.
    node_configs : list of dict, optional
        Extra ``node_config`` entries per node (e.g. ``data-path``).
    shuffle_seed : int, optional
        If set, replies come back in a random order (to test order invariance).
    node_ids : list of int, optional
        The Flower node id of every node instead of ``100 + i``: other ids for the same
        clients imitate SuperNodes that reconnected after a SuperLink restart.
    """

    def __init__(
        self,
        client_app: ClientApp,
        num_nodes: int,
        run_config: dict | None = None,
        node_configs: list[dict] | None = None,
        shuffle_seed: int | None = None,
        node_ids: list[int] | None = None,
    ) -> None:
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0
        self.app = client_app
        self._run = Run.create_empty(1)
        self.sent: list[Message] = []
        self.received: list[Message] = []
        self._rng = None if shuffle_seed is None else np.random.default_rng(shuffle_seed)
        if node_ids is None:
            node_ids = [100 + i for i in range(num_nodes)]
        node_ids = [int(n) for n in node_ids]
        if len(node_ids) != num_nodes or len(set(node_ids)) != num_nodes:
            raise ValueError(f"node_ids must be {num_nodes} distinct ids, got {node_ids}")
        self.contexts = {}
        for i, node in enumerate(node_ids):
            node_config = {"partition-id": i, "num-partitions": num_nodes}
            node_config.update((node_configs or [{}] * num_nodes)[i])
            self.contexts[node] = Context(
                run_id=1, node_id=node, node_config=node_config, state=RecordDict(),
                run_config=dict(run_config or {}),
            )

    def set_run(self, run_id: int) -> None:
        """Ignore (there is a single in-process run)."""

    @property
    def run(self) -> Run:
        """The (empty) run."""
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        """Create a message (deprecated Grid API, kept for completeness)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        """Return the node ids."""
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Not supported: use :meth:`send_and_receive`."""
        raise NotImplementedError

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Not supported: use :meth:`send_and_receive`."""
        raise NotImplementedError

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None) -> list[Message]:
        """Deliver every message to its node's ClientApp and return the replies."""
        out = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid4().hex
            self.sent.append(msg)
            try:
                # the node gets its own copy, as off the wire (a mod may edit the content)
                delivered = copy.deepcopy(msg)
                reply = self.app(delivered, self.contexts[msg.metadata.dst_node_id])
            except Exception as ex:  # noqa: BLE001 - the runtime turns these into error replies
                reply = Message(Error(code=0, reason=repr(ex)), reply_to=msg)
            out.append(reply)
        if self._rng is not None:
            out = [out[i] for i in self._rng.permutation(len(out))]
        self.received.extend(out)
        return out
