"""What an exchange returns: :class:`Reply`, :class:`Collected`, and the :class:`NodeBook`.

Shared by the plain exchange (:mod:`flwr_clustering.strategies.exchange`) and the secure
one (:mod:`flwr_clustering.secure.exchange`), which have the same call and return the same
type; this module imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Collected", "NodeBook", "Reply"]


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
    totals : SecureSum or None
        A secure exchange's sums (:mod:`flwr_clustering.secure.exchange`); its list of
        replies is empty.
    """

    def __init__(self, replies=(), *, absent: dict[int, str] | None = None, received: int = 0,
                 n_features: int | None = None, totals: Any = None) -> None:
        super().__init__(replies)
        self.absent = dict(absent or {})
        self.received = int(received)
        self.n_features = n_features
        self.totals = totals


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
