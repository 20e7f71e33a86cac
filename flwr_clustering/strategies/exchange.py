"""The exchange: messages, node identity and reply collection (an object the base holds).

:class:`Exchange` sends one phase of a protocol to the sampled nodes and returns what it
collected (:meth:`Exchange.send`, :meth:`Exchange.collect`): a :class:`Collected`, the
valid replies in client-id order with the absent nodes and why. It writes nothing on the
strategy: its inputs are given to its constructor (the run's seed, node counts and
timeouts, the sampling generator, the :class:`NodeBook` of node identities, the
:class:`~flwr_clustering.strategies.ledger.Ledger`, the reply rules and what an upload
claims) and read per exchange from a :class:`RunView` (the features agreed, ``k``, the
model's shape).

* **nodes**: waiting for ``min_nodes`` (:meth:`~Exchange.wait_for_nodes`) and the seeded
  sampling of a round's nodes (:meth:`~Exchange.sample_nodes`);
* **messages**: one per node, with the federation's features in the config
  (:meth:`~Exchange.records`, :meth:`~Exchange.message`, :meth:`~Exchange.sent`);
* **node identity**: ``{node id: client id}`` learned from the replies
  (:class:`NodeBook`);
* **collection**: error replies (their reasons cut), replies that break their phase's
  contract (:mod:`~flwr_clustering.strategies.contracts`, checked before any use),
  malformed payloads and invalid replies dropped with a logged reason, a node claiming
  another's client id dropped (both claims if undecidable), the feature dimension agreed
  by majority, ``k`` checked against the rows, too few valid replies an error naming the
  absent nodes.

A secure exchange with the same call lives in :mod:`flwr_clustering.secure.exchange`.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
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
    with_features,
)
from ..replies import Asked, Collected, NodeBook, Reply, Totals
from .contracts import Bounds, ContractBreach, Sent, check_contract, short_reason
from .ledger import Ledger, ledger_entry, min_count

#: How our clients' error replies start (:func:`flwr_clustering.clients.handlers._handle`).
_CLIENT_PREFIX = re.compile(r"client (\d+)\b")
#: The same error wrapped by Flower's legacy client runtime: "... RuntimeError('client 3: ...".
_CLIENT_WRAPPED = re.compile(r"\(['\"]client (\d+): ")


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


@dataclass(frozen=True)
class RunView:
    """What an exchange reads of the run, at the time of the exchange.

    Attributes
    ----------
    features_json : str or None
        The federation's agreed features (``None``: rows as the clients hold them).
    d : int or None
        The federation's feature count (agreed features, else the dimension seen).
    n_features : int or None
        The dimension the replies agreed on so far (``None``: not yet).
    k : int or None
        The model's ``k``.
    model : tuple or None
        The shape of the model's centres (2-D), if any.
    """

    features_json: str | None = None
    d: int | None = None
    n_features: int | None = None
    k: int | None = None
    model: tuple[int, ...] | None = None


class Exchange:
    """Send a phase to the sampled nodes; collect, validate and order the replies.

    Parameters
    ----------
    seed : int
        Sent as ``config["seed"]``.
    min_nodes : int
        Nodes to wait for, and the fewest valid replies an exchange accepts by default.
    fraction : float
        Fraction of the connected nodes a broadcast asks (at least ``min_nodes``).
    node_wait_timeout : float
        Seconds to wait for ``min_nodes`` nodes.
    timeout : float
        Seconds to wait for the replies of an exchange (the run's ``timeout``).
    sample_rng : numpy.random.Generator
        The sampling generator (the run state's: a checkpoint restores it).
    nodes : NodeBook
        Node identities and absences (written by the exchange).
    ledger : Ledger
        Every reply received gets an entry (written by the exchange).
    view : callable
        ``view() -> RunView``: the run as the exchange needs to see it.
    check : callable
        ``check(kind, client_id, metrics, payload, stats)``: raise ``ValueError`` for a
        reply that breaks the run's rules.
    rows_of : callable
        ``rows_of(kind, client_id) -> int | None``: the rows the client declared before.
    counts_of, features_of : callable
        What an upload claims: its row counts and its feature dimension (``None``: none).
    k_hint : str, optional
        Appended to the rows-for-``k`` refusal (a search names ``k-max``).
    """

    def __init__(self, *, seed: int, min_nodes: int, fraction: float,
                 node_wait_timeout: float, timeout: float, sample_rng: np.random.Generator,
                 nodes: NodeBook, ledger: Ledger, view, check, rows_of, counts_of,
                 features_of, k_hint: str = "") -> None:
        self.seed = int(seed)
        self.min_nodes = int(min_nodes)
        self.fraction = float(fraction)
        self.node_wait_timeout = float(node_wait_timeout)
        self.timeout = float(timeout)
        self.sample_rng = sample_rng
        self.nodes = nodes
        self.ledger = ledger
        self.view = view
        self.check = check
        self.rows_of = rows_of
        self.counts_of = counts_of
        self.features_of = features_of
        self.k_hint = str(k_hint)
        self._sent: tuple[list[int], list[Message], float] | None = None

    #: Whether the server sees only the federation's totals of a phase (the secure
    #: exchange) or each client's reply (this one). A strategy reads what it collected
    #: (``Collected.totals``, the replies); the privacy report reads this.
    sums_only = False

    def phase(self, name: str) -> str | None:
        """The name under which this exchange sends an algorithm's phase ``name``: itself.

        The secure exchange renames the phases its algorithm's spec declares
        (``Capabilities.secure_phases``) and has no name (``None``) for a phase that cannot
        go through it.
        """
        return name

    # -- the features step of round 0: the plain exchange lets it read each site ---------
    #: Why declared categorical columns cannot run through this exchange (they can).
    categories_problem: str | None = None

    def feature_config(self, scaling: str, datetime_columns: tuple[str, ...]
                       ) -> dict[str, Any]:
        """The ``data-source`` query's extra config: none (the sites' min and max scale)."""
        return {}

    def feature_moments(self, grid: Grid, features: tuple[str, ...], records: dict[int, Any],
                        config: dict[str, Any], timeout: float | None) -> None:
        """The federation's feature moments without each site's: ``None``.

        The features step reads each site's own sums (their units, their rows); the
        secure exchange, which has only the totals, returns them here.
        """
        return None

    def unit_check(self, grid: Grid, features: tuple[str, ...], numeric: tuple[str, ...],
                   timeout: float | None) -> tuple[list[str], str | None]:
        """No exchange: the features step compared each site's own sums already."""
        return [], None

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
        """Choose the nodes of a round with the run's seeded sampling generator."""
        ids = self.wait_for_nodes(grid)
        if self.fraction >= 1.0:
            return ids
        n = max(self.min_nodes, int(round(self.fraction * len(ids))))
        return sorted(int(i) for i in self.sample_rng.choice(ids, size=n, replace=False))

    def records(self, arrays_list, config: dict[str, Any]) -> dict[str, Any]:
        """The content of a message: ``arrays`` (list of ndarrays) and ``config``.

        Once the federation agreed on its features, the config carries them
        (``feature-transform``), so that every client holds its rows in the same features
        and units whatever message it answers.
        """
        config = with_features(self.view().features_json, config)
        return {"arrays": ArrayRecord(list(arrays_list)), "config": ConfigRecord(config)}

    @staticmethod
    def message(server_round: int, node: int, content: dict[str, Any],
                message_type: str) -> Message:
        """One message to ``node`` with :meth:`records` content.

        :meth:`broadcast` sends the same records to every sampled node; protocols that
        send each node its own content (the DGC relay) call this per node.
        """
        return Message(RecordDict(dict(content)), dst_node_id=node,
                       message_type=message_type, group_id=str(server_round))

    def broadcast(self, server_round: int, arrays_list, config: dict[str, Any], grid: Grid,
                  message_type: str) -> list[Message]:
        """The same content to every sampled node (noted by :meth:`sent`)."""
        content = self.records(arrays_list, config)
        return self.sent([self.message(server_round, node, content, message_type)
                          for node in self.sample_nodes(grid)])

    def sent(self, messages: list[Message], timeout: float | None = None) -> list[Message]:
        """Note where ``messages`` go (and the wait); return ``messages``.

        :meth:`collect` then names the nodes that do not answer. ``timeout`` defaults to
        the run's.
        """
        self._sent = (sorted({int(m.metadata.dst_node_id) for m in messages}), list(messages),
                      self.timeout if timeout is None else float(timeout))
        return messages

    def send(
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
        parts=None,
    ) -> Collected:
        """Send one phase of the protocol; return the valid replies and the absent nodes.

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
            Seconds to wait (default: the run's).
        parts : callable, optional
            ``parts(reply) -> list of arrays``: what of a valid reply the federation sums.
            With it the returned ``totals`` (:class:`~flwr_clustering.replies.Totals`) are
            those parts summed in client-id order, as the secure exchange's call returns
            its sums; a reply whose parts cannot be read (``KeyError``, ``ValueError``,
            ``TypeError``) or are not finite is left out of them (logged).

        Returns
        -------
        Collected
            Valid replies in client-id order, and the absent nodes with the reason; its
            ``asked`` holds the messages and the replies (:meth:`collect_again`).
        """
        cfg = {**dict(config or {}), "phase": phase, "seed": self.seed}
        if per_node is None:
            messages = self.broadcast(server_round, list(arrays), cfg, grid, message_type)
        else:
            messages = [self.message(server_round, node,
                                     self.records(node_arrays, {**cfg, **node_cfg}),
                                     message_type)
                        for node, (node_arrays, node_cfg) in per_node.items()]
        timeout = self.timeout if timeout is None else float(timeout)
        self.sent(messages, timeout)
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        collected = self.collect(server_round, replies, parse, kind=phase,
                                 min_replies=min_replies)
        return Collected(collected, absent=collected.absent, received=collected.received,
                         n_features=collected.n_features,
                         totals=(None if parts is None
                                 else self.sum_parts(server_round, phase, collected, parts)),
                         asked=Asked(server_round, phase, messages, replies, timeout))

    def collect_again(self, asked: Asked, *, min_replies: int | None = None) -> Collected:
        """The replies of an exchange made before, collected again; no message is sent.

        What a second exchange of the same phase would collect if every node answered
        it as before: the replies are checked against the run's state now (its contract,
        the rows each client declared, the node identities) and leave the same marks on
        it (node identities, absent nodes, declared rows), without a ledger entry (the
        ledger has each reply once, from when it was received). For a phase that reads no
        payload (``parse``), such as ``data-source``.

        Parameters
        ----------
        asked : Asked
            The exchange (``Collected.asked`` of :meth:`send`).
        min_replies : int, optional
            The fewest valid replies to accept (default ``min_nodes``).
        """
        self.sent(asked.messages, asked.timeout)
        return self.collect(asked.server_round, asked.replies, kind=asked.phase,
                            min_replies=min_replies, record=False)

    def sum_parts(self, server_round: int, phase: str, replies: list[Reply], parts) -> Totals:
        """The replies' ``parts(reply)`` summed element-wise in client-id order.

        A reply whose parts cannot be read, or hold NaN or inf, is left out of the sums
        (a WARNING names the client and the rule, never a value).
        """
        got, nodes, failed = [], [], {}
        for r in replies:
            try:
                p = list(parts(r))
                if not all(np.isfinite(np.asarray(a, dtype=np.float64)).all() for a in p):
                    raise ValueError("non-finite sums")
            except (KeyError, ValueError, TypeError) as ex:
                failed[r.node_id] = f"malformed reply: {ex}"
                logger.warning("round %d %s: %s left out: malformed reply: %s",
                               server_round, phase, self.nodes.who(r.node_id), ex)
                continue
            got.append(p)
            nodes.append(r.node_id)
        sums = [sum(p[j] for p in got) for j in range(len(got[0]))] if got else []
        return Totals(sums, nodes, failed)

    def identify_clients(self, grid: Grid, server_round: int,
                         timeout: float | None = None) -> Collected:
        """Ask every connected node which client it holds.

        Waits for ``min_nodes``, then sends one ``QUERY`` message per connected node in
        the library's ``data-source`` phase, which every client answers without the
        algorithm's code; the replies carry the ``client-id``. No generator is drawn
        from, so a run that calls it gets the same results. Nodes that claim one client
        id are dropped and named (see :meth:`collect`).

        Returns
        -------
        Collected
            The replies (``{r.client_id: r.node_id}`` says who holds which client) and the
            nodes without a valid one.
        """
        nodes = self.wait_for_nodes(grid)
        return self.send(grid, server_round, DATA_SOURCE_PHASE,
                         per_node={int(n): ([], {}) for n in nodes},
                         min_replies=0, timeout=timeout)

    def collect(
        self, server_round: int, replies, parse=None, kind: str = "train",
        min_replies: int | None = None, *, record: bool = True,
    ) -> Collected:
        """Decode replies, drop the bad ones with a logged reason, sort by client id.

        Parameters
        ----------
        server_round : int
            Current round (for logs).
        replies : iterable of flwr.app.Message
            What the grid returned for the messages last passed through :meth:`sent`.
        parse : callable, optional
            ``parse(arrays) -> payload``; a ``ValueError``/``KeyError``/``TypeError``
            drops the reply.
        kind : str
            The phase (``"train"``, ``"evaluate"``, ...; for the contract and logs).
        min_replies : int, optional
            The fewest valid replies to accept (default ``min_nodes``).
        record : bool, default True
            Give every reply its ledger entry (``False``: replies the ledger has already,
            :meth:`collect_again`).

        Returns
        -------
        Collected
            Valid replies in client-id order; ``absent``: ``{node id: reason}`` of every
            node sent a message without a valid reply.

        Raises
        ------
        RuntimeError
            If fewer than ``min_nodes`` valid replies remain (the error names the nodes
            that did not reply within the round timeout and the ones dropped, by client id
            where a reply of the run told it).
        ValueError
            If the clients that replied hold fewer rows than ``k`` (sum of num-examples;
            not checked for ``"evaluate"`` and round 0's phases).

        Notes
        -----
        Every reply is checked against its phase's contract
        (:func:`~flwr_clustering.strategies.contracts.check_contract`, bounds from
        :meth:`reply_bounds`) before anything of it is used; a node that claims a client id
        another node held earlier in the run is dropped, and when nothing tells which of
        several claims holds it, every claim is (:meth:`_drop_duplicates`).
        """
        sent, messages, timeout = self._sent or (None, [], self.timeout)
        self._sent = None
        view = self.view()
        book = self.nodes
        ledger = self.ledger if record else Ledger()  # (a scratch one: entries not kept)
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
                    book.client_of.setdefault(node, int(named.group(1)))
                problems[node] = f"failed: {reason}"
                logger.warning("round %d %s: %s failed: %s", server_round, kind,
                               book.who(node), reason)
                continue
            try:
                metrics = dict(msg.content["metrics"])
                cid = int(metrics.get("client-id", node))
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"malformed reply: {ex}"
                logger.warning("round %d %s: dropping reply of %s: malformed payload: %s",
                               server_round, kind, book.who(node), ex)
                continue
            decoded.append((cid, node, msg, metrics))
        decoded = self._drop_duplicates(server_round, kind, decoded, problems)
        sent_to = {int(m.metadata.dst_node_id): m for m in messages}
        valid: list[Reply] = []
        for cid, node, msg, metrics in sorted(decoded, key=lambda t: t[0]):
            try:  # the phase's reply contract, before anything of the reply is used
                check_contract(kind, msg.content,
                               self.reply_bounds(view, kind, cid, Sent.of(sent_to.get(node))))
            except ContractBreach as ex:
                book.client_of.setdefault(node, cid)
                problems[node] = f"broke the reply contract: {ex}"
                logger.warning("round %d %s: dropping reply of %s: it broke the reply "
                               "contract: %s", server_round, kind, book.who(node), ex)
                continue
            book.client_of[node] = cid
            entry = ledger.add(ledger_entry(server_round, kind, cid, msg, metrics))
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
                    server_round, kind, book.who(node), ex,
                )
                continue
            entry["min-count"] = min_count(
                None if payload is None else self.counts_of(payload), stats)
            try:
                self.check(kind, cid, metrics, payload, stats)
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"invalid reply: {ex}"
                logger.warning("round %d %s: dropping reply of %s: invalid reply: %s",
                               server_round, kind, book.who(node), ex)
                continue
            columns = (dict(msg.content[COLUMNS_RECORD]) if COLUMNS_RECORD in msg.content
                       else None)
            valid.append(Reply(cid, node, payload, metrics, stats, columns))
        agreed = None
        if parse is not None:
            kept, agreed = self._drop_dimension_mismatch(server_round, valid, view.n_features)
            kept_nodes = {r.node_id for r in kept}
            d = view.n_features if agreed is None else agreed
            for r in valid:
                if r.node_id not in kept_nodes:
                    problems[r.node_id] = (f"sent {self.features_of(r.payload)} features, "
                                           f"the federation has {d}")
            valid = kept
        replied = set(origin.values())
        missing: list[int] = []
        if sent is not None and replied <= set(sent):
            missing = [node for node in sent if node not in replied]
            for node in missing:
                logger.warning("round %d %s: %s did not reply within round-timeout=%g s",
                               server_round, kind, book.who(node), timeout)
        absent = {**{n: problems[n] for n in sorted(problems)},
                  **{n: f"did not reply within round-timeout={timeout:g} s"
                     for n in missing}}
        book.note_absent(server_round, kind, absent)
        floor = self.min_nodes if min_replies is None else int(min_replies)
        if len(valid) < floor:
            parts = []
            if missing:
                parts.append(f"{len(sent) - len(missing)} of {len(sent)} nodes replied within "
                             f"round-timeout={timeout:g} s; missing: "
                             + ", ".join(book.who(n) for n in missing))
            parts.append(f"only {len(valid)} valid replies, fewer than "
                         f"{'min_nodes=' if min_replies is None else ''}{floor}")
            withheld = [n for n, why in problems.items() if "privacy threshold" in why]
            if withheld:
                parts.append(f"{len(withheld)} client(s) withheld their reply under the "
                             "privacy threshold (a local cluster of fewer than "
                             "privacy-threshold points): lower privacy-threshold or k, or "
                             "min-nodes")
            if problems:
                parts.append("dropped: " + "; ".join(f"{book.who(n)} {why}"
                                                      for n, why in sorted(problems.items())))
            raise RuntimeError(f"round {server_round} {kind}: " + "; ".join(parts))
        if kind not in ("evaluate", DATA_SOURCE_PHASE, FEATURE_MOMENTS_PHASE, CATEGORIES_PHASE):
            _check_rows_for_k(server_round, kind, valid, view.k,
                              complete=not absent and sent is not None
                              and self.fraction >= 1.0, hint=self.k_hint)
        return Collected(valid, absent=absent, received=len(replies), n_features=agreed)

    def reply_bounds(self, view: RunView, kind: str, client_id: int, sent: Sent) -> Bounds:
        """What a reply of ``client_id`` is checked against (:mod:`.contracts`).

        The federation's ``d``, the model's ``k`` and the rows the client declared before
        (its first reply of the rows as read; after round 0 its rows in the rounds, which
        ``missing='drop'`` may lower).
        """
        return Bounds(d=view.d, k=view.k, rows=self.rows_of(kind, int(client_id)), sent=sent,
                      model=view.model)

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
            holders = [n for n in nodes if self.nodes.client_of.get(n) == cid]
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
                           self.nodes.who(node), why)
        return [t for t in decoded if t[1] not in liars]

    def _drop_dimension_mismatch(self, server_round: int, replies: list[Reply],
                                 n_features: int | None) -> tuple[list[Reply], int | None]:
        """Drop replies of another feature dimension; return them and the agreed one.

        Without a dimension yet (``n_features`` ``None``) the majority's is agreed (ties go
        to the lowest client id) and returned; else ``None`` is returned.
        """
        dims = {r.client_id: self.features_of(r.payload) for r in replies}
        known = [d for d in dims.values() if d is not None]
        if not known:
            return replies, None
        agreed = None
        if n_features is None:
            counts = Counter(known)
            top = max(counts.values())
            # Majority dimension; ties go to the lowest client id.
            n_features = agreed = next(d for d in known if counts[d] == top)
        kept = []
        for r in replies:
            d = dims[r.client_id]
            if d is not None and d != n_features:
                logger.warning(
                    "round %d: dropping client %d: it sent %d features, the federation has %d",
                    server_round, r.client_id, d, n_features,
                )
                continue
            kept.append(r)
        return kept, agreed


def _check_rows_for_k(server_round: int, kind: str, valid: list[Reply], k: int | None, *,
                      complete: bool, hint: str = "") -> None:
    """Refuse ``k`` above the rows the replying clients hold (sum of num-examples)."""
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
                     "not k clusters to find; lower k (run config 'k') or add data" + hint)
