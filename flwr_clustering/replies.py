"""What an exchange returns: :class:`Reply`, :class:`Collected`, and the :class:`NodeBook`.

Shared by the plain exchange (:mod:`flwr_clustering.strategies.exchange`) and the secure
one (:mod:`flwr_clustering.secure.exchange`), which have the same call and return the same
type; this module imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Asked", "Collected", "NodeBook", "Reply", "Totals"]


@dataclass
class Reply:
    """A valid client reply, decoded.

    Attributes
    ----------
    client_id : int
        The client's stable id (partition id, else node id).
    node_id : int
        The Flower node that sent it.
    payload : Any
        What :meth:`ClusteringStrategy.parse_payload` made of the arrays.
    metrics : dict
        Scalar metrics of the reply.
    stats : dict
        Scalars and arrays together: the evaluation statistics, if any.
    columns : dict or None
        The ``columns`` record of a ``data-source`` reply (names and kinds of the client's
        columns, :func:`~flwr_clustering.clients.statistics.columns_record`), else ``None``.
    """

    client_id: int
    node_id: int
    payload: Any
    metrics: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Any] | None = None


class Collected(list):
    """What an exchange collected: the valid replies (a list of :class:`Reply`, by client id).

    Attributes
    ----------
    absent : dict
        ``{node id: reason}`` of the nodes asked that sent no valid reply.
    received : int
        Replies received (valid or not).
    n_features : int or None
        The feature dimension the replies agreed on (by majority) when the run had none
        yet; ``None`` otherwise.
    totals : Totals, SecureSum or None
        The federation's sums of the phase: a secure exchange's
        (:class:`~flwr_clustering.secure.sums.SecureSum`, and no reply of its own), or
        the plain exchange's sum of its replies' parts in client-id order
        (:class:`Totals`, when it was asked for them); ``None`` otherwise.
    asked : Asked or None
        The plain exchange's messages and the replies as received, which
        :meth:`~flwr_clustering.strategies.exchange.Exchange.collect_again` collects
        again under a later state of the run; ``None`` for a secure exchange.
    """

    def __init__(self, replies=(), *, absent: dict[int, str] | None = None, received: int = 0,
                 n_features: int | None = None, totals: Any = None,
                 asked: Asked | None = None) -> None:
        super().__init__(replies)
        self.absent = dict(absent or {})
        self.received = int(received)
        self.n_features = n_features
        self.totals = totals
        self.asked = asked


@dataclass(frozen=True)
class Asked:
    """One plain exchange as it happened: what was sent, and every reply received.

    Attributes
    ----------
    server_round : int
        The round of the exchange.
    phase : str
        Its phase.
    messages : list of flwr.app.Message
        The messages sent (one per node asked).
    replies : list of flwr.app.Message
        The replies received, valid or not.
    timeout : float
        The seconds the exchange waited for them.
    """

    server_round: int
    phase: str
    messages: list[Any]
    replies: list[Any]
    timeout: float


@dataclass
class Totals:
    """The plain exchange's sums of a phase: each reply's parts, summed in client-id order.

    The same fields as a secure exchange's
    :class:`~flwr_clustering.secure.sums.SecureSum`, so that a caller reads either alike.

    Attributes
    ----------
    sums : list of numpy.ndarray
        Element-wise sums of the parts of the replies in :attr:`nodes`.
    nodes : list of int
        The node ids whose parts are in the sums (client-id order).
    failed : dict
        ``{node id: reason}`` of the replies left out of the sums (parts unreadable or
        not finite).
    error_bound : float
        0: the sums are the exact float64 sums of what the clients sent.
    received : dict
        Unused (the ledger has each reply's entry).
    """

    sums: list[Any]
    nodes: list[int]
    failed: dict[int, str] = field(default_factory=dict)
    error_bound: float = 0.0
    received: dict[int, int] = field(default_factory=dict)


class NodeBook:
    """Which client each node holds, and every client without a valid reply in the run.

    Attributes
    ----------
    client_of : dict
        ``{node id: client id}``, learned from the replies of the run so far.
    run_absent : dict
        ``{client: reason}`` of every client without a valid reply in the run (latest).
    """

    def __init__(self) -> None:
        self.client_of: dict[int, int] = {}
        self.run_absent: dict[str, str] = {}

    def who(self, node: int) -> str:
        """``"client 3 (node 123)"``, or ``"node 123"`` while its client id is unknown."""
        cid = self.client_of.get(int(node))
        return f"node {node}" if cid is None else f"client {cid} (node {node})"

    def note_absent(self, server_round: int, kind: str, absent: dict[int, str]) -> None:
        """Remember the absent nodes of an exchange in :attr:`run_absent`."""
        for node, why in absent.items():
            self.run_absent[self.who(node)] = f"round {server_round} {kind}: {why}"
