"""DGC-rho over a network graph in Flower: the server is a relay (Armacki et al., Sec. 2).

Flower is client-server, so the peer-to-peer graph is simulated: the strategy owns the
graph and every node's latest centres, and each round sends node ``i`` its own centres and
the **sum** of its neighbours' (the update needs nothing else), plus, at the inner steps
``s > 0`` of an iteration, the anchor that fixes its clusters. It never averages into the
iterate. Its model (:meth:`DGC.model_record`) holds every node's centres, the graph and
the step, beside the network mean under ``centroids`` (for evaluation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MessageType

from ..algorithms.dgc import (
    DGCOptions,
    algebraic_connectivity,
    build_graph,
    consensus_cost,
    consensus_distance,
    neighbour_sums,
    resolve_rho,
    scored_users,
    step_size,
)
from ..algorithms.upload import Arrays, Claims
from ..metrics import per_model_metrics, sum_contingencies
from .base import ClusteringStrategy, Reply, logger

__all__ = ["DGC"]


class DGC(ClusteringStrategy):
    """Decentralized gradient clustering DGC-F_rho with a relay server.

    Round 1: every node sends its own initial centres and data size; the relay maps the
    clients' ids (``partition-id`` in simulation, node-config in deployment; they must be
    ``0..m-1``) to graph nodes, builds the graph and the global step. Rounds
    ``2 .. 1 + T S``: one synchronous step (U) of every node. Every node must answer every
    round (the theory has no stale nodes).

    Parameters
    ----------
    k : int
        Centres per node.
    loss : {"kmeans", "huber", "logistic", "fair"}, default "kmeans"
        Clustering loss.
    rho : float, default 0.0
        ``>= 1``; the clustering term is scaled by ``1 / rho``. ``0``: adapted to the graph
        and the largest node at the init round
        (:func:`~flwr_clustering.algorithms.dgc.adaptive_rho`, logged; kept in
        ``rho_used`` and ``nodes.npz``); the paper's runs pass 10, 100 or 1000.
    graph : str, array or path, default "ring"
        :func:`~flwr_clustering.algorithms.dgc.build_graph` (``ring``, ``complete``,
        ``star``, ``grid``, ``erdos-renyi``, an adjacency array or file).
    iterations : int, default 100
        ``T``.
    inner_steps : int, default 1
        ``S``.
    delta : float, default 1.0
        Huber / Fair parameter.
    tol : float, default -1
        Stop early once no node's centres move more than ``tol`` in a step (``< 0``: run
        all ``T S`` steps, as the paper).
    alpha : float, optional
        Step; default ``1 / (lambda_max(L) + beta N_max / rho)``.
    init : {"kmeans", "random"}, default "kmeans"
        Node initialisation; ``random`` (the paper's) sends raw rows.
    er_p : float, default 0.3
        Edge probability of ``erdos-renyi`` (drawn with the strategy's seed).
    privacy_threshold : int, default 2
        ``kmeans`` start: a local cluster of fewer points starts at the node's mean
        (:func:`~flwr_clustering.algorithms.dgc.local_init`).
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options
        (``min_nodes`` should be the number of nodes).
    """

    name = "dgc"
    Options = DGCOptions
    resumable = True
    needs_every_client = True

    def __init__(self, k: int | None = None, *, graph: Any = None, **kwargs: Any) -> None:
        # ``graph`` may also be an adjacency array (not a run-config value).
        self._graph_array = None
        if graph is not None and not isinstance(graph, str):
            self._graph_array = np.asarray(graph)
            graph = "array"
        if graph is not None:
            kwargs["graph"] = graph
        if float(kwargs.get("fraction", 1.0)) != 1.0:
            raise ValueError("DGC needs every node in every round (fraction 1)")
        super().__init__(k, **kwargs)

    def configure(self) -> None:
        """The graph argument (name, file or array) and the optional fixed step."""
        if self._graph_array is not None:
            self.graph = self._graph_array
        self.alpha = self.options.alpha or None
        if self.options.rho != 0 and self.options.rho < 1:
            raise ValueError(f"rho must be 0 (adapt to the data and the graph) or >= 1, got "
                             f"{self.options.rho}")

    def protocol_rounds(self) -> int:
        """The init round and ``T S`` steps."""
        return 1 + self.options.iterations * self.options.inner_steps

    def describe(self) -> dict[str, Any]:
        """Configuration for logs and results."""
        return {**super().describe(),
                "graph": self.graph if isinstance(self.graph, str) else "array"}

    def reset(self) -> None:
        """Forget the graph and every node's centres."""
        super().reset()
        self.node_centres: np.ndarray | None = None
        self.anchor: np.ndarray | None = None
        self.adjacency: np.ndarray | None = None
        self.node_of: dict[int, int] = {}
        self.step: float | None = None
        #: The rho of the run (:func:`~flwr_clustering.algorithms.dgc.resolve_rho`, fixed
        #: at the init round from the graph and the largest node).
        self.rho_used: float | None = None
        self.node_history: list[np.ndarray] = []
        self._cost: float | None = None

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the relay's.

        Every node's centres and their history, the anchor, the graph, the step, the
        client-to-node map and the last ``J_rho``.
        """
        return {**super().state_dict(), "node_centres": self.node_centres,
                "anchor": self.anchor, "adjacency": self.adjacency,
                "node_of": {int(c): int(n) for c, n in self.node_of.items()},
                "step": self.step, "rho": self.rho_used,
                "node_history": list(self.node_history), "cost": self._cost}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        The client-to-node map is the interrupted run's: :meth:`reconnect` (called by
        ``start`` before the first resumed round) rebuilds it from the nodes connected
        now, which may have come back under new Flower node ids.
        """
        super().load_state_dict(state)
        for name in ("node_centres", "anchor", "adjacency"):
            value = state[name]
            setattr(self, name, None if value is None else np.asarray(value))
        self.node_of = {int(c): int(n) for c, n in state["node_of"].items()}
        self.step = None if state["step"] is None else float(state["step"])
        if state.get("rho") is not None:
            self.rho_used = float(state["rho"])
        elif self.node_centres is None:  # interrupted before its init round: resolved then
            self.rho_used = None
        elif self.rho >= 1:  # a checkpoint written before rho was kept: the explicit value
            self.rho_used = float(self.rho)
        else:
            raise ValueError("this checkpoint does not record the rho its run used (written "
                             "before rho=0 adapted it): resume with that run's rho, e.g. "
                             "rho=10.0")
        self.node_history = [np.asarray(h) for h in state["node_history"]]
        self._cost = None if state["cost"] is None else float(state["cost"])

    def reconnect(self, grid, server_round: int, timeout: float) -> None:
        """Find which connected node holds which client of the graph (a resumed run).

        After a SuperLink restart the SuperNodes may come back under new Flower node ids,
        so the checkpoint's ``node_of`` could address nodes that are gone. One
        ``data-source`` ``QUERY`` per connected node
        (:meth:`~flwr_clustering.strategies.base.ClusteringStrategy.identify_clients`)
        tells every node's client id, and ``node_of`` is rebuilt by client id. Nothing
        else changes: the resumed run equals an uninterrupted one bit for bit.

        Raises
        ------
        RuntimeError
            If a client id of the graph (``0..m-1``) is not among the connected nodes
            (naming the missing clients), or two nodes claim one client id (naming both
            nodes).
        """
        if self.node_centres is None:  # resumed before the init round: it maps them
            return
        m = len(self.node_centres)
        identified = self.identify_clients(grid, server_round, timeout)
        found = {r.client_id: r.node_id for r in identified}
        missing = sorted(set(range(m)) - set(found))
        if missing:
            parts = [f"round {server_round}: DGC cannot resume: the graph's clients are "
                     f"0..{m - 1}; missing: " + ", ".join(f"client {c}" for c in missing),
                     "the connected nodes hold client ids "
                     + (", ".join(map(str, sorted(found))) or "none")]
            absent = "; ".join(f"{self.who(node)} {why}"
                               for node, why in identified.absent.items())
            if absent:
                parts.append(f"without a valid reply: {absent}")
            parts.append("every node of the graph must take part in every round: start "
                         "the missing SuperNodes (same partition-id) and resume again")
            raise RuntimeError("; ".join(parts))
        outside = sorted(set(found) - set(range(m)))
        if outside:
            logger.warning("round %d: DGC resume: client ids %s are not in the graph "
                           "(0..%d): they get no step messages", server_round, outside,
                           m - 1)
        node_of = {c: int(found[c]) for c in range(m)}
        moved = [f"client {c}: node {self.node_of.get(c)} -> {node_of[c]}"
                 for c in range(m) if self.node_of.get(c) != node_of[c]]
        if moved:
            logger.info("round %d: DGC resume: %d client(s) reconnected under new node "
                        "ids (%s)", server_round, len(moved), "; ".join(moved))
        self.node_of = node_of

    # ------------------------------------------------------------------ messages
    def configure_train(self, server_round, arrays, config, grid) -> list[Message]:
        """Init messages in round 1; afterwards one message per node with its own arrays."""
        if self.node_centres is None:
            cfg = {**dict(config or {}), **self.options.to_config(), "phase": "init",
                   "seed": self.seed}
            return self._messages(server_round, [], cfg, grid, MessageType.TRAIN)
        connected = set(self.wait_for_nodes(grid))
        lost = [f"client {c} (node {node})" for c, node in sorted(self.node_of.items())
                if node not in connected]
        if lost:
            raise RuntimeError(
                f"round {server_round}: DGC lost {', '.join(lost)}: no longer connected, so "
                "the relay cannot route its centres to its neighbours; every node of the "
                "graph must take part in every round")
        first = (server_round - 2) % self.inner_steps == 0
        if first:  # a new iteration: fix the clusters
            self.anchor = self.node_centres.copy()
        assert self.adjacency is not None and self.anchor is not None
        nbr = neighbour_sums(self.adjacency, self.node_centres)
        deg = self.adjacency.sum(axis=1)
        messages = []
        for i in range(len(self.node_centres)):
            cfg = {**dict(config or {}), **self.options.to_config(), "phase": "step",
                   "degree": float(deg[i]), "alpha": float(self.step),
                   "rho": float(self.rho_used), "seed": self.seed,
                   "evaluate": False}
            # the anchor equals x_i at an iteration's first step: then it is not sent
            arrays = [self.node_centres[i], nbr[i]] + ([] if first else [self.anchor[i]])
            content = self.records(arrays, cfg)
            messages.append(self.message(server_round, self.node_of[i], content,
                                         MessageType.TRAIN))
        return self.sent(messages)

    def collect(self, server_round, replies, parse=None, kind="train", min_replies=None):
        """The base's :meth:`collect`; in train rounds every node of the graph must answer.

        At init the graph has one node per node asked, client ids ``0..m-1``; afterwards
        every one of them must send a valid reply, each node as the client whose centres
        it was sent. Otherwise the run stops, naming the missing clients (and the nodes
        without a valid reply, with the reason).
        """
        if kind != "train":
            return super().collect(server_round, replies, parse, kind, min_replies)
        valid = super().collect(server_round, replies, parse, kind, min_replies=0)
        ids = [r.client_id for r in valid]
        absent = "; ".join(f"{self.who(node)} {why}" for node, why in valid.absent.items())
        if self.node_centres is None:
            m = len(valid) + len(valid.absent)
            missing = sorted(set(range(m)) - set(ids))
            outside = sorted(set(ids) - set(range(m)))
            if missing or outside:
                parts = [f"round {server_round} DGC init: {m} node(s) were asked, so the "
                         f"graph's client ids must be 0..{m - 1}"]
                if missing:
                    parts.append("missing: " + ", ".join(f"client {c}" for c in missing))
                if outside:
                    parts.append("client ids outside 0..m-1: "
                                 + ", ".join(map(str, outside))
                                 + " (give the SuperNodes partition-ids 0..m-1)")
                if absent:
                    parts.append(f"without a valid reply: {absent}")
                parts.append("DGC needs every node of the graph in every round")
                raise RuntimeError("; ".join(parts))
        else:
            m = len(self.node_centres)
            missing = sorted(set(range(m)) - set(ids))
            if missing:
                lost = "; ".join(
                    f"client {c} (node {self.node_of[c]}) "
                    + valid.absent.get(self.node_of[c], "sent no valid reply")
                    for c in missing)
                raise RuntimeError(
                    f"round {server_round}: DGC lost {lost}; every node of the graph must "
                    "answer every round (the relay cannot route a lost node's centres to "
                    "its neighbours)")
            # a node must answer as the client whose centres it was sent
            sent_to = {node: c for c, node in self.node_of.items()}
            swapped = [f"node {r.node_id} answered as client {r.client_id} but was sent "
                       f"client {sent_to.get(r.node_id)}'s centres" for r in valid
                       if sent_to.get(r.node_id) != r.client_id]
            if swapped:
                raise RuntimeError(f"round {server_round}: DGC: {'; '.join(swapped)} (the "
                                   "node ids no longer hold the clients the relay knows)")
        return valid

    def raw_rows_option(self) -> str | None:
        """``node-init='random'`` starts every node at its own raw rows."""
        return "node-init='random'" if self.options.init == "random" else None

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> Arrays:
        """One ``(k, d)`` finite centre matrix, claiming its dimension."""
        if len(arrays) != 1:
            raise ValueError(f"expected 1 array (centres), got {len(arrays)}")
        C = np.asarray(arrays[0], dtype=np.float64)
        if C.ndim != 2 or len(C) != self.k or not np.isfinite(C).all():
            raise ValueError(f"centres must be a finite ({self.k}, d) array, got {C.shape}")
        if self.node_centres is not None and C.shape != self.node_centres.shape[1:]:
            raise ValueError(f"centres of shape {C.shape}, expected "
                             f"{self.node_centres.shape[1:]}")
        return Arrays([C], Claims(features=int(C.shape[1])))

    # --------------------------------------------------------------- aggregation
    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Store every node's centres (the model); return their mean, the ``centroids``."""
        ids = [r.client_id for r in replies]
        if self.node_centres is None:
            if ids != list(range(len(ids))):
                raise RuntimeError(f"DGC needs client ids 0..m-1 (the graph index); got {ids}")
            self.node_of = {r.client_id: r.node_id for r in replies}
            m = len(replies)
            self.adjacency = build_graph(self.graph, m, p=self.er_p, seed=self.seed)
            n_max = max(float(r.metrics["num-examples"]) for r in replies)
            self.rho_used = resolve_rho(self.rho, self.adjacency, self.loss, n_max,
                                        delta=self.delta)
            if self.rho == 0:
                logger.info("DGC: rho = %.4g, adapted to the graph (lambda_2 = %.4g) and the "
                            "largest node (%d rows); the paper's fixed value: rho=10.0",
                            self.rho_used, algebraic_connectivity(self.adjacency), n_max)
            self.step = (float(self.alpha) if self.alpha is not None
                         else step_size(self.adjacency, self.loss, self.rho_used, n_max,
                                        delta=self.delta))
            self.node_centres = np.stack([r.payload[0] for r in replies])
        else:
            if ids != list(range(len(self.node_centres))):
                raise RuntimeError(f"round {server_round}: DGC needs every node's reply; got "
                                   f"clients {ids} of {len(self.node_centres)}")
            # J_rho at the iterate that was sent (clusters from the anchor)
            local = sum(float(r.metrics["local-cost"]) for r in replies)
            self._cost = (consensus_cost(self.adjacency, self.node_centres)
                          + local / self.rho_used)
            self.node_centres = np.stack([r.payload[0] for r in replies])
        self.node_history.append(self.node_centres.copy())
        return self.node_centres.mean(axis=0)

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Consensus distance of the new iterate and ``J_rho`` of the previous one."""
        info: dict[str, Any] = {"consensus": consensus_distance(self.node_centres)}
        if server_round > 1 and self.adjacency is not None:
            # Communication of this step: the relay's star (one message down and one up per
            # node) against what a peer-to-peer exchange of the same step would move.
            m, kd = len(self.node_centres), self.node_centres[0].size
            first = (server_round - 2) % self.inner_steps == 0
            edges = int(np.count_nonzero(self.adjacency)) // 2
            info.update({"messages": 2 * m, "floats-down": (2 if first else 3) * m * kd,
                         "floats-up": m * kd, "p2p-messages": 2 * edges,
                         "p2p-floats": 2 * edges * kd})
        if self._cost is not None:
            info["cost"] = self._cost
        return info

    def model_record(self) -> ArrayRecord:
        """The network mean (``centroids``), every node's centres, the graph and the step."""
        record = super().model_record()
        if self.node_centres is not None:
            record["node-centres"] = Array(np.ascontiguousarray(self.node_centres))
            record["adjacency"] = Array(np.ascontiguousarray(self.adjacency))
            record["alpha"] = Array(np.array([self.step], dtype=np.float64))
        return record

    def user_models(self) -> np.ndarray | None:
        """Every node's own centres ``(m, K, d)``."""
        return self.node_centres

    def scored_user_models(self) -> np.ndarray | None:
        """The own centres ``(s, K, d)`` of the users the per-user metrics score.

        Every node's when the graph has at most ``user-eval-nodes`` nodes, else that many
        evenly spaced ones (:func:`~flwr_clustering.algorithms.dgc.scored_users`).
        """
        if self.node_centres is None:
            return None
        return self.node_centres[self.scored_ids()]

    def scored_ids(self) -> np.ndarray:
        """Ids of the users scored by the per-user metrics (:meth:`scored_user_models`)."""
        assert self.node_centres is not None
        return scored_users(len(self.node_centres), self.options.user_eval_nodes)

    def artifacts(self) -> dict[str, dict[str, np.ndarray]]:
        """``nodes.npz``: every node's final centres, the graph, the step and ``rho``.

        The centres are in the data's units; with a scaling, ``scaled_centres`` keeps them
        as computed.
        """
        if self.node_centres is None:
            return {}
        arrays = {"centres": self.node_centres, "adjacency": self.adjacency,
                  "alpha": np.float64(self.step), "rho": np.float64(self.rho_used)}
        transform = self.feature_transform
        if transform is not None and transform.scaled:
            arrays["centres"] = transform.inverse(self.node_centres)
            arrays["scaled_centres"] = self.node_centres
        return {"nodes.npz": arrays}

    # ---------------------------------------------------------------- evaluation
    def configure_evaluate(self, server_round, arrays, config, grid) -> list[Message]:
        """Send each node the network mean, the scored users' centres and its own centres.

        Each client returns the usual statistics of the mean plus, per scored user's
        centres, its SSE and (with labels) contingency table on its own rows: summed, they
        score those users' own centres on the joint data exactly (the paper's per-user
        accuracy). The scored users are every node up to ``user-eval-nodes``
        (:meth:`scored_user_models`); the own centres are what the node keeps (its labels).
        """
        if self.node_centres is None:
            return []
        models = self.scored_user_models()
        content_config = dict(config or {})
        messages = []
        client_of = {node: cid for cid, node in self.node_of.items()}
        for node in self.sample_nodes(grid):
            cid = client_of.get(int(node))
            own = (self.node_centres[cid] if cid is not None
                   and 0 <= cid < len(self.node_centres) else self.centroids)
            content = self.records([self.centroids, models, own], content_config)
            messages.append(self.message(server_round, node, content, MessageType.EVALUATE))
        return self.sent(messages)

    def evaluation_extras(self, replies: list[Reply]) -> dict[str, float]:
        """Per-user metrics: each scored user's centres on the joint data and on its rows.

        ``user-*``: user ``i``'s centres label every row of the federation (Armacki et al., Sec. 5,
        footnote 12); ``user-local-*``: they label user ``i``'s own rows only. Accuracy and
        ARI come as mean, min and max over the scored users (``user-eval-nodes`` of them:
        every user up to the option's value); ``user-sse-mean`` is the mean over them of
        the joint SSE.
        """
        if self.node_centres is None:
            return {}
        ids = self.scored_ids()
        s = len(ids)
        out: dict[str, float] = {"user-eval-nodes": float(s)} if s else {}
        sse = [r.stats["model-sse"] for r in replies if "model-sse" in r.stats]
        if s and sse and all(np.shape(v) == (s,) for v in sse):
            out["user-sse-mean"] = float(np.sum(sse, axis=0).mean())
        tables = {r.client_id: r.stats["model-contingency"] for r in replies
                  if "model-contingency" in r.stats}
        if not s or len(tables) != len(replies) or not all(
                np.ndim(t) == 3 and len(t) == s for t in tables.values()):
            return out
        joint = [sum_contingencies([t[j] for t in tables.values()]) for j in range(s)]
        out.update(per_model_metrics(joint, prefix="user"))
        position = {int(cid): j for j, cid in enumerate(ids)}
        out.update(per_model_metrics([t[position[cid]] for cid, t in tables.items()
                                      if cid in position], prefix="user-local"))
        return out

    def converged(self, server_round: int) -> bool:
        """Only with ``tol >= 0``: no node's centres moved more than ``tol`` in the step.

        The paper runs a fixed ``T`` (the default, ``tol = -1``); this optional rule is ours,
        checked on every node, not only on the network mean.
        """
        if server_round < 3 or self.tol < 0 or len(self.node_history) < 2:
            return False
        return float(np.abs(self.node_history[-1] - self.node_history[-2]).max()) <= self.tol

    #: Consensus needs a stronger pull between neighbours (rho) or more iterations.
    advice = {**ClusteringStrategy.advice, "consensus": ("rho", "iterations"),
              "lloyd-gain": ("rho", "iterations")}

    def diagnostic_extras(self, diagnostics: dict[str, Any]) -> dict[str, Any]:
        """The final consensus distance, absolute and relative to the data's scale.

        ``consensus-distance`` is the paper's metric (:func:`consensus_distance`: the
        largest distance between two nodes' versions of one centre);
        ``consensus-relative`` divides it by ``data-scale`` (the RMS distance of the rows
        to their mean).
        """
        if self.node_centres is None:
            return {}
        distance = consensus_distance(self.node_centres)
        scale = diagnostics.get("data-scale")
        return {"consensus-distance": distance,
                "consensus-relative": distance / scale if scale else None}
