"""An in-process Flower grid: runs a ClientApp synchronously, with no Ray and no network.

Meant for unit tests and quick experiments: a strategy's ``start(grid=...)`` runs against
``InProcessGrid(client_app, num_nodes)`` exactly as against a simulation or deployment
grid, with ``partition-id``/``num-partitions`` in every node's ``node_config``.

The two ways the library's own tests build a run, for testing your strategies and clients
the same way:

* :func:`client_app_for`: a ClientApp whose node ``i`` runs a client on ``data[i]``;
  ``strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, parts), len(parts)))``
  runs a strategy against it.
* :func:`run_app`: the library's Flower App (its ServerApp's
  :func:`~flwr_clustering.app.server_app.run_server` and its ClientApp) on an in-process
  grid, from a run config, as ``flwr run`` runs it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from uuid import uuid4

import numpy as np
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from .app.server_app import run_server
from .clients import client_app
from .protocol import client_id_of

__all__ = ["InProcessGrid", "client_app_for", "run_app"]


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


def client_app_for(
    client: Callable[..., Any],
    data: Sequence[Any] | Mapping[int, Any],
    *,
    by_node: Mapping[int, Callable[..., Any]] | None = None,
    **options: Any,
) -> ClientApp:
    """A ClientApp whose node ``i`` runs ``client(*data[i], client_id=i, **options)``.

    Parameters
    ----------
    client : callable
        The client class (e.g. :class:`~flwr_clustering.clients.FedKMeansClient`), or any
        callable that builds a client from the node's data and ``client_id=``.
    data : sequence or mapping
        One entry per node, indexed by its ``partition-id``: a tuple is the client's
        positional arguments (``(X, y)`` or ``(X,)``); anything else (an array, a data
        frame) is its one positional argument.
    by_node : mapping of int to callable, optional
        Another client class (or factory) for some nodes, by ``partition-id``: a hostile,
        failing or lying client among honest ones.
    **options
        Keyword arguments every node's client receives (e.g. ``dtype='float32'``).

    Returns
    -------
    flwr.clientapp.ClientApp
        :func:`flwr_clustering.clients.client_app` of a ``client_fn`` that builds node
        ``i``'s client on every message.
    """
    by_node = dict(by_node or {})

    def client_fn(context: Context):
        i = client_id_of(context)
        args = data[i] if isinstance(data[i], tuple) else (data[i],)
        return by_node.get(i, client)(*args, client_id=i, **options)

    return client_app(client_fn)


def run_app(
    run_config: dict,
    num_nodes: int,
    *,
    node_configs: list[dict] | None = None,
    app: ClientApp | None = None,
    shuffle_seed: int | None = None,
) -> tuple[dict, InProcessGrid]:
    """Run the library's Flower App on an in-process grid of ``num_nodes`` nodes.

    The ServerApp's :func:`~flwr_clustering.app.server_app.run_server` drives the run,
    every node runs the App's ClientApp (or ``app``) with ``run_config`` in its context,
    as ``flwr run`` would run it; results go to the run config's ``out-dir``.

    Parameters
    ----------
    run_config : dict
        The run config (missing keys take the App's defaults).
    num_nodes : int
        The number of nodes.
    node_configs : list of dict, optional
        Each node's extra ``node_config`` (``data-path``, ``allow-raw-rows``, ...).
    app : flwr.clientapp.ClientApp, optional
        Another ClientApp than the library's (e.g. one made by :func:`client_app_for`).
    shuffle_seed : int, optional
        Replies come back in a random order drawn from this seed.

    Returns
    -------
    tuple of (dict, InProcessGrid)
        What ``run_server`` returned (``{"centroids", "federated", "centralized",
        "out_dir", "strategy"}``), and the grid (its ``sent``/``received`` messages, its
        nodes' ``contexts``).
    """
    if app is None:
        # imported here: the App's ClientApp module sets up the console on import (for
        # applications only; the estimator, which imports this module, stays silent)
        from .app.client_app import app
    grid = InProcessGrid(app, num_nodes,
                         run_config=run_config, node_configs=node_configs,
                         shuffle_seed=shuffle_seed)
    return run_server(grid, run_config), grid
