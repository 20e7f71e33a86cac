"""The exchange: messages, node identity and reply collection (a part of the strategy base).

:class:`Exchange` sends one phase of a protocol to the sampled nodes and gives back the
valid replies, in client-id order (:meth:`Exchange.exchange`, :meth:`Exchange.collect`):

* **nodes**: waiting for ``min_nodes`` (:meth:`~Exchange.wait_for_nodes`) and the seeded
  sampling of a round's nodes (:meth:`~Exchange.sample_nodes`);
* **messages**: one per node, with the federation's features in the config
  (:meth:`~Exchange.records`, :meth:`~Exchange.message`, :meth:`~Exchange.sent`);
* **node identity**: ``{node id: client id}`` learned from the replies
  (:attr:`~Exchange.client_of`, :meth:`~Exchange.who`, :meth:`~Exchange.identify_clients`);
* **collection**: error replies (their reasons cut), replies that break their phase's
  contract (:mod:`~flwr_clustering.strategies.contracts`, checked before any use),
  malformed payloads and invalid replies dropped with a logged reason, a node claiming
  another's client id dropped (both claims if undecidable), the feature dimension agreed
  by majority, ``k`` checked against the rows, too few valid replies an error naming the
  absent nodes.

What a reply must satisfy is :meth:`check_reply`'s (here: nothing; the strategy base uses
:class:`~flwr_clustering.strategies.validation.ReplyValidation`'s rules); every reply goes
into ``ledger`` (:mod:`~flwr_clustering.strategies.ledger`).

The host class provides ``min_nodes``, ``fraction``, ``seed``, ``round_timeout``,
``node_wait_timeout``, ``n_features``, ``_sample_rng`` (a NumPy generator), ``ledger``
(a list) and ``feature_transform`` (``None``: rows as the clients hold them); the tests
use it on its own (tests/test_strategy_parts.py).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from ..log import logger
from ..protocol import (
    CATEGORIES_PHASE,
    COLUMNS_RECORD,
    DATA_SOURCE_PHASE,
    FEATURE_MOMENTS_PHASE,
)
from .contracts import Bounds, ContractBreach, Sent, check_contract, short_reason
from .features import with_features
from .ledger import ledger_entry, min_count

#: How our clients' error replies start (:func:`flwr_clustering.clients.base._handle`).
_CLIENT_PREFIX = re.compile(r"client (\d+)\b")
#: The same error wrapped by Flower's legacy client runtime: "... RuntimeError('client 3: ...".
_CLIENT_WRAPPED = re.compile(r"\(['\"]client (\d+): ")


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
        columns, :func:`~flwr_clustering.clients.base.columns_record`), else ``None``.
    """

    client_id: int
    node_id: int
    payload: Any
    metrics: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Any] | None = None


def _reply_origins(sent: list[Message], replies: list[Message]) -> dict[int, int]:
    """``{id(reply): node id}``: the node each reply stands for.

    A reply normally comes from its node. An error the SuperLink makes for a node that
    stopped sending heartbeats ("Node Unavailable") comes from the SuperLink's own node id
    instead; it is traced back, through ``reply_to_message_id``, to the node its message
    was sent to, so that the lost node (and its client id) is the one named.
    """
    dst = {m.metadata.message_id: int(m.metadata.dst_node_id) for m in sent
           if m.metadata.message_id}
    destinations = set(dst.values())
    out = {}
    for msg in replies:
        node = int(msg.metadata.src_node_id)
        if msg.has_error() and node not in destinations:
            node = dst.get(msg.metadata.reply_to_message_id, node)
        out[id(msg)] = node
    return out


class Exchange:
    """Send a phase to the sampled nodes; collect, validate and order the replies."""

    def check_reply(self, kind: str, client_id: int, metrics: dict[str, Any], payload: Any,
                    stats: dict[str, Any]) -> None:
        """Refuse an invalid reply (raise ``ValueError``); here every reply is valid."""

    def payload_counts(self, payload: Any) -> np.ndarray | None:
        """The row counts an upload claims (``None``: none; the ledger's ``min-count``)."""
        return None

    def payload_features(self, payload: Any) -> int | None:
        """The feature dimension a payload reveals (``None``: none)."""
        return None

    def wait_for_nodes(self, grid: Grid, *, settle: float = 0.0) -> list[int]:
        """Block until ``min_nodes`` nodes are connected; return their sorted ids.

        While it waits it logs how many nodes are connected, every 5 s.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid.
        settle : float, default 0
            Then also wait until the node count has not changed for ``settle`` seconds
            (a simulation registers its virtual SuperNodes while the ServerApp starts).

        Raises
        ------
        RuntimeError
            After ``node_wait_timeout`` seconds with fewer than ``min_nodes`` nodes.
        """
        start = last_log = time.monotonic()
        ids = sorted(grid.get_node_ids())
        if len(ids) < self.min_nodes:
            logger.info("waiting for nodes: %d of min_nodes=%d connected", len(ids),
                        self.min_nodes)
        while len(ids) < self.min_nodes:
            now = time.monotonic()
            if now - start > self.node_wait_timeout:
                raise RuntimeError(
                    f"only {len(ids)} node(s) connected after {self.node_wait_timeout:.0f} s, "
                    f"min_nodes={self.min_nodes}: start more SuperNodes, or lower min_nodes "
                    "(run config 'min-nodes')"
                )
            if now - last_log >= 5.0:
                logger.info("waiting for nodes: %d of min_nodes=%d connected (%.0f s of %.0f s)",
                            len(ids), self.min_nodes, now - start, self.node_wait_timeout)
                last_log = now
            time.sleep(0.5)
            ids = sorted(grid.get_node_ids())
        stable_since = time.monotonic()
        while settle > 0 and time.monotonic() - stable_since < settle:
            time.sleep(min(0.25, settle))
            now_ids = sorted(grid.get_node_ids())
            if now_ids != ids:
                ids, stable_since = now_ids, time.monotonic()
        return ids

    def sample_nodes(self, grid: Grid) -> list[int]:
        """Choose the nodes of a round with the strategy's own seeded generator."""
        ids = self.wait_for_nodes(grid)
        if self.fraction >= 1.0:
            return ids
        n = max(self.min_nodes, int(round(self.fraction * len(ids))))
        return sorted(int(i) for i in self._sample_rng.choice(ids, size=n, replace=False))

    def records(self, arrays_list, config: dict[str, Any]) -> dict[str, Any]:
        """The content of a message: ``arrays`` (list of ndarrays) and ``config``.

        Once the federation agreed on its features (:attr:`feature_transform`), the
        config carries them (``feature-transform``), so that every client holds its rows
        in the same features and units whatever message it answers.
        """
        config = with_features(self, config)
        return {"arrays": ArrayRecord(list(arrays_list)), "config": ConfigRecord(config)}

    @staticmethod
    def message(server_round: int, node: int, content: dict[str, Any],
                message_type: str) -> Message:
        """One message to ``node`` with :meth:`records` content.

        :meth:`_messages` sends the same records to every sampled node; protocols that
        send each node its own content (the DGC relay) call this per node.
        """
        return Message(RecordDict(dict(content)), dst_node_id=node,
                       message_type=message_type, group_id=str(server_round))

    def _messages(self, server_round, arrays_list, config, grid, message_type) -> list[Message]:
        content = self.records(arrays_list, config)
        return self.sent([self.message(server_round, node, content, message_type)
                          for node in self.sample_nodes(grid)])

    def sent(self, messages: list[Message], timeout: float | None = None) -> list[Message]:
        """Note where ``messages`` go (and the wait); return ``messages``.

        :meth:`collect` then names the nodes that do not answer. :meth:`_messages` and
        :meth:`exchange` call it; a strategy that builds its own messages (one per node,
        as the DGC relay) passes them through it. ``timeout``
        defaults to ``round_timeout`` (what :meth:`start` waits unless given another).
        """
        self._sent_nodes = sorted({int(m.metadata.dst_node_id) for m in messages})
        self._sent_messages = list(messages)
        if timeout is None:  # what start() waits (its ``timeout``, else round_timeout)
            timeout = getattr(self, "_run_timeout", self.round_timeout)
        self._sent_timeout = float(timeout)
        return messages

    @property
    def client_of(self) -> dict[int, int]:
        """``{node id: client id}``, learned from the replies of the run so far."""
        if not hasattr(self, "_client_of"):
            self._client_of: dict[int, int] = {}
        return self._client_of

    def who(self, node: int) -> str:
        """``"client 3 (node 123)"``, or ``"node 123"`` while its client id is unknown."""
        cid = self.client_of.get(int(node))
        return f"node {node}" if cid is None else f"client {cid} (node {node})"

    def exchange(
        self,
        grid: Grid,
        server_round: int,
        phase: str,
        arrays: list[np.ndarray] | tuple = (),
        config: dict[str, Any] | None = None,
        *,
        per_node: dict[int, tuple[list[np.ndarray], dict[str, Any]]] | None = None,
        message_type: str = MessageType.QUERY,
        parse=None,
        min_replies: int | None = None,
        timeout: float | None = None,
    ) -> list[Reply]:
        """Send one phase of the protocol and return the valid replies, by client id.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid.
        server_round : int
            Round number (``0`` for exchanges before round 1), the messages' group id.
        phase : str
            The phase name, sent as ``config["phase"]``.
        arrays : list of numpy.ndarray
            The arrays every sampled node receives.
        config : dict, optional
            The configuration every node receives (``phase`` and ``seed`` are added).
        per_node : dict, optional
            ``{node id: (arrays, extra config)}``: each node its own content, instead of
            ``arrays`` to every sampled node.
        message_type : str, default ``MessageType.QUERY``
            ``QUERY`` for phases that are not training, ``TRAIN`` for rounds.
        parse : callable, optional
            ``parse(arrays) -> payload`` (see :meth:`collect`).
        min_replies : int, optional
            The fewest valid replies to accept (default ``min_nodes``).
        timeout : float, optional
            Seconds to wait (default ``round_timeout``).

        Returns
        -------
        list of Reply
            Valid replies in client-id order.
        """
        cfg = {**dict(config or {}), "phase": phase, "seed": self.seed}
        if per_node is None:
            messages = self._messages(server_round, list(arrays), cfg, grid, message_type)
        else:
            messages = [self.message(server_round, node,
                                     self.records(node_arrays, {**cfg, **node_cfg}),
                                     message_type)
                        for node, (node_arrays, node_cfg) in per_node.items()]
        timeout = self.round_timeout if timeout is None else timeout
        self.sent(messages, timeout)
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        self.last_exchange_replies = len(replies)
        return self.collect(server_round, list(replies), parse, kind=phase,
                            min_replies=min_replies)

    def identify_clients(self, grid: Grid, server_round: int,
                         timeout: float | None = None) -> dict[int, int]:
        """Ask every connected node which client it holds: ``{client id: node id}``.

        Waits for ``min_nodes``, then sends one ``QUERY`` message per connected node in
        the library's ``data-source`` phase, which every client answers without the
        algorithm's code (:func:`~flwr_clustering.clients.base.handle_query`); the
        replies carry the ``client-id``. Nothing of the run's state changes (no generator
        is drawn from), so a run that calls it gets the same results.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid.
        server_round : int
            The round for logs and the messages' group id.
        timeout : float, optional
            Seconds to wait (default ``round_timeout``).

        Returns
        -------
        dict
            ``{client id: node id}`` of the valid replies; nodes without one are in
            ``last_absent`` (``{node id: reason}``).

        Nodes that claim one client id are dropped and named (see :meth:`collect`).
        """
        nodes = self.wait_for_nodes(grid)
        replies = self.exchange(grid, server_round, DATA_SOURCE_PHASE,
                                per_node={int(n): ([], {}) for n in nodes},
                                min_replies=0, timeout=timeout)
        return {r.client_id: r.node_id for r in replies}

    def collect(
        self, server_round: int, replies, parse=None, kind: str = "train",
        min_replies: int | None = None,
    ) -> list[Reply]:
        """Decode replies, drop the bad ones with a logged reason, sort by client id.

        Parameters
        ----------
        server_round : int
            Current round (for logs).
        replies : iterable of flwr.app.Message
            What the grid returned.
        parse : callable, optional
            ``parse(arrays) -> payload``; a ``ValueError``/``KeyError``/``TypeError``
            drops the reply.
        kind : str
            ``"train"`` or ``"evaluate"`` (for logs).
        min_replies : int, optional
            The fewest valid replies to accept (default ``min_nodes``).

        Returns
        -------
        list of Reply
            Valid replies in client-id order.

        Raises
        ------
        RuntimeError
            If fewer than ``min_nodes`` valid replies remain (the error names the nodes
            that did not reply within the round timeout and the ones dropped, by client id
            where a reply of the run told it).
        ValueError
            If the clients that replied hold fewer rows than ``k`` (sum of num-examples;
            not checked for ``"evaluate"``).

        Notes
        -----
        Every reply is checked against its phase's contract
        (:func:`~flwr_clustering.strategies.contracts.check_contract`, bounds from
        :meth:`reply_bounds`) before anything of it is used; a node that claims a client id
        another node held earlier in the run is dropped, and when nothing tells which of
        several claims holds it, every claim is (:meth:`_drop_duplicates`).
        A node sent a message (:meth:`sent`) without a reply is logged as "did not reply
        within round-timeout"; the nodes without a valid reply, with the reason, are left
        in ``last_absent`` (``{node id: reason}``) for the strategy to read.
        """
        sent, self._sent_nodes = getattr(self, "_sent_nodes", None), None
        messages, self._sent_messages = getattr(self, "_sent_messages", None) or [], None
        timeout = getattr(self, "_sent_timeout", self.round_timeout)
        replies = list(replies)
        origin = _reply_origins(messages, replies)
        problems: dict[int, str] = {}  # node -> why it sent no valid reply
        decoded = []
        for msg in replies:
            node = origin[id(msg)]
            if msg.has_error():
                # a client's reason, cut: a hostile one could send megabytes
                reason = short_reason(msg.error.reason)
                # our clients' errors start "client 3", also inside a legacy runtime's
                named = _CLIENT_PREFIX.match(reason) or _CLIENT_WRAPPED.search(reason)
                if named is not None:
                    self.client_of.setdefault(node, int(named.group(1)))
                problems[node] = f"failed: {reason}"
                logger.warning("round %d %s: %s failed: %s", server_round, kind,
                               self.who(node), reason)
                continue
            try:
                metrics = dict(msg.content["metrics"])
                cid = int(metrics.get("client-id", node))
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"malformed reply: {ex}"
                logger.warning("round %d %s: dropping reply of %s: malformed payload: %s",
                               server_round, kind, self.who(node), ex)
                continue
            decoded.append((cid, node, msg, metrics))
        decoded = self._drop_duplicates(server_round, kind, decoded, problems)
        sent_to = {int(m.metadata.dst_node_id): m for m in messages}
        valid: list[Reply] = []
        for cid, node, msg, metrics in sorted(decoded, key=lambda t: t[0]):
            try:  # the phase's reply contract, before anything of the reply is used
                check_contract(kind, msg.content,
                               self.reply_bounds(kind, cid, Sent.of(sent_to.get(node))))
            except ContractBreach as ex:
                self.client_of.setdefault(node, cid)
                problems[node] = f"broke the reply contract: {ex}"
                logger.warning("round %d %s: dropping reply of %s: it broke the reply "
                               "contract: %s", server_round, kind, self.who(node), ex)
                continue
            self.client_of[node] = cid
            entry = ledger_entry(server_round, kind, cid, msg, metrics)
            self.ledger.append(entry)
            try:
                stats = dict(metrics)
                if "stats" in msg.content:
                    stats.update({k: v.numpy() for k, v in msg.content["stats"].items()})
                payload = None
                if parse is not None:
                    payload = parse(msg.content["arrays"].to_numpy_ndarrays())
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"malformed payload: {ex}"
                logger.warning(
                    "round %d %s: dropping reply of %s: malformed payload: %s",
                    server_round, kind, self.who(node), ex,
                )
                continue
            entry["min-count"] = min_count(
                None if payload is None else self.payload_counts(payload), stats)
            try:
                self.check_reply(kind, cid, metrics, payload, stats)
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"invalid reply: {ex}"
                logger.warning("round %d %s: dropping reply of %s: invalid reply: %s",
                               server_round, kind, self.who(node), ex)
                continue
            columns = (dict(msg.content[COLUMNS_RECORD]) if COLUMNS_RECORD in msg.content
                       else None)
            valid.append(Reply(cid, node, payload, metrics, stats, columns))
        if parse is not None:
            kept = self._drop_dimension_mismatch(server_round, valid)
            kept_nodes = {r.node_id for r in kept}
            for r in valid:
                if r.node_id not in kept_nodes:
                    problems[r.node_id] = (f"sent {self.payload_features(r.payload)} features, "
                                           f"the federation has {self.n_features}")
            valid = kept
        replied = set(origin.values())
        missing: list[int] = []
        if sent is not None and replied <= set(sent):
            missing = [node for node in sent if node not in replied]
            for node in missing:
                logger.warning("round %d %s: %s did not reply within round-timeout=%g s",
                               server_round, kind, self.who(node), timeout)
        self.last_absent = {**{n: problems[n] for n in sorted(problems)},
                            **{n: f"did not reply within round-timeout={timeout:g} s"
                               for n in missing}}
        if not hasattr(self, "run_absent"):
            self.run_absent = {}
        for node, why in self.last_absent.items():
            self.run_absent[self.who(node)] = f"round {server_round} {kind}: {why}"
        floor = self.min_nodes if min_replies is None else int(min_replies)
        if len(valid) < floor:
            parts = []
            if missing:
                parts.append(f"{len(sent) - len(missing)} of {len(sent)} nodes replied within "
                             f"round-timeout={timeout:g} s; missing: "
                             + ", ".join(self.who(n) for n in missing))
            parts.append(f"only {len(valid)} valid replies, fewer than "
                         f"{'min_nodes=' if min_replies is None else ''}{floor}")
            withheld = [n for n, why in problems.items() if "privacy threshold" in why]
            if withheld:
                parts.append(f"{len(withheld)} client(s) withheld their reply under the "
                             "privacy threshold (a local cluster of fewer than "
                             "privacy-threshold points): lower privacy-threshold or k, or "
                             "min-nodes")
            if problems:
                parts.append("dropped: " + "; ".join(f"{self.who(n)} {why}"
                                                      for n, why in sorted(problems.items())))
            raise RuntimeError(f"round {server_round} {kind}: " + "; ".join(parts))
        if kind not in ("evaluate", DATA_SOURCE_PHASE, FEATURE_MOMENTS_PHASE, CATEGORIES_PHASE):
            self._check_rows_for_k(server_round, kind, valid, complete=not self.last_absent
                                   and sent is not None and self.fraction >= 1.0)
        return valid

    def reply_bounds(self, kind: str, client_id: int, sent: Sent) -> Bounds:
        """What a reply of ``client_id`` is checked against (:mod:`.contracts`).

        The federation's ``d`` (its agreed features, else :attr:`n_features`), the model's
        ``k`` and the rows the client declared before (its first reply of the rows as
        read; after round 0 its rows in the rounds, which ``missing='drop'`` may lower).
        """
        transform = getattr(self, "feature_transform", None)
        d = len(transform.features) if transform is not None else self.n_features
        k = getattr(self, "k", None)
        rows_of = getattr(self, "client_rows", {})
        cid = int(client_id)
        rows = rows_of.get((cid, "read"))
        if kind not in (DATA_SOURCE_PHASE, CATEGORIES_PHASE, FEATURE_MOMENTS_PHASE):
            rows = rows_of.get((cid, False), rows)
        C = getattr(self, "centroids", None)
        return Bounds(d=None if d is None else int(d),
                      k=int(k) if isinstance(k, int | np.integer) else None,
                      rows=None if rows is None else int(rows), sent=sent,
                      model=tuple(int(v) for v in np.shape(C)) if np.ndim(C) == 2 else None)

    def _drop_duplicates(self, server_round: int, kind: str, decoded,
                         problems: dict[int, str]) -> list:
        """Drop the replies of nodes that claim another node's client id, naming them.

        A client id claimed by several nodes of this exchange stays with the node that
        held it earlier in the run (:attr:`client_of`); the others (the later claims) are
        dropped. When none of them, or more than one, held it before, nothing tells the
        liar: every claim is dropped. A node that claims a known client id while the node
        that held it is not in this exchange is a SuperNode that reconnected under a new
        node id: it is kept.
        """
        claims: dict[int, list[int]] = {}
        for cid, node, _, _ in decoded:
            claims.setdefault(cid, []).append(node)
        liars: dict[int, str] = {}
        for cid, nodes in sorted(claims.items()):
            if len(nodes) < 2:
                continue
            nodes = sorted(nodes)
            holders = [n for n in nodes if self.client_of.get(n) == cid]
            if len(holders) == 1:
                for n in nodes:
                    if n != holders[0]:
                        liars[n] = (f"claims client id {cid}, which node {holders[0]} holds "
                                    "since an earlier reply of the run (the later claim is "
                                    "dropped)")
                continue
            for n in nodes:
                others = [str(o) for o in nodes if o != n]
                liars[n] = (f"claims client id {cid}, which node{'s' if len(others) > 1 else ''} "
                            f"{', '.join(others)} also claim{'' if len(others) > 1 else 's'} in "
                            "the same exchange, and nothing tells which holds it: every claim "
                            "is dropped; give every SuperNode its own 'partition-id' in its "
                            "node config")
        for node, why in sorted(liars.items()):
            problems[node] = why
            logger.warning("round %d %s: dropping reply of %s: it %s", server_round, kind,
                           self.who(node), why)
        return [t for t in decoded if t[1] not in liars]

    def _check_rows_for_k(self, server_round: int, kind: str, valid: list[Reply],
                          *, complete: bool) -> None:
        """Refuse ``k`` above the rows the replying clients hold (sum of num-examples)."""
        k = getattr(self, "k", None)
        sizes = [r.metrics.get("num-examples") for r in valid]
        if k is None or not valid or any(n is None for n in sizes):
            return
        total = int(sum(int(n) for n in sizes))
        if total >= int(k):
            return
        who = (f"the federation holds {total} rows (sum of num-examples of its {len(valid)} "
               "clients)" if complete else
               f"the {len(valid)} clients that replied hold {total} rows (sum of num-examples)")
        raise ValueError(f"round {server_round} {kind}: {who}, fewer than k={k}: there are "
                         "not k clusters to find; lower k (run config 'k') or add data")

    def _drop_dimension_mismatch(self, server_round: int, replies: list[Reply]) -> list[Reply]:
        dims = {r.client_id: self.payload_features(r.payload) for r in replies}
        known = [d for d in dims.values() if d is not None]
        if not known:
            return replies
        if self.n_features is None:
            counts = Counter(known)
            top = max(counts.values())
            # Majority dimension; ties go to the lowest client id.
            self.n_features = next(d for d in known if counts[d] == top)
        kept = []
        for r in replies:
            d = dims[r.client_id]
            if d is not None and d != self.n_features:
                logger.warning(
                    "round %d: dropping client %d: it sent %d features, the federation has %d",
                    server_round, r.client_id, d, self.n_features,
                )
                continue
            kept.append(r)
        return kept
