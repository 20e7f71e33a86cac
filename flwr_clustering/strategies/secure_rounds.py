"""Secure aggregation's rounds (a part of the strategy base).

:meth:`SecureRounds.secure_exchange` runs one exchange whose replies reach the server
only as their sum (Flower's SecAgg+ through :func:`flwr_clustering.secure.secure_sum`),
logs and records the clients that failed, and writes the ledger's entries;
:meth:`~SecureRounds.secure_train` is a training round made of it (an algorithm's
:meth:`~SecureRounds.aggregate_sums` turns the totals into the model) and
:meth:`~SecureRounds.secure_evaluation` the federated evaluation from totals. An algorithm
that runs securely overrides :meth:`~SecureRounds.aggregate_sums` and says what it cannot
do (:meth:`~SecureRounds.secure_aggregation_problem`, :meth:`~SecureRounds.secure_round`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    MetricRecord,
)
from flwr.serverapp import Grid

from ..evaluation import aggregate_evaluation_stats
from ..log import format_metrics, logger
from ..protocol import (
    SECURE_EVALUATE_PHASE,
)
from ..secure import secure_sum
from ..secure_session import SecureSession
from .features import with_features


class SecureRounds:
    """Rounds and the evaluation under secure aggregation (the server sees sums only)."""

    #: Whether the secure evaluation's row sums and residual sums give the pooled total
    #: sum of squares and the Lloyd-step check (not for rows with unobserved features).
    secure_row_moments = True

    def secure_round(self, server_round: int) -> bool:
        """Whether round ``server_round`` runs under secure aggregation (with the option).

        Every round by default; a protocol whose first round needs individual uploads
        (the masked Algorithm 1's grouping) runs that one in the clear and says so.
        """
        return True

    def secure_aggregation_problem(self) -> str | None:
        """Why this configuration cannot run under secure aggregation (``None``: it can).

        Secure aggregation gives the server only the sum of the clients' replies; a
        server step that needs each client's own upload cannot use it.
        """
        return (f"{self.name}'s server step needs each client's own upload, which secure "
                "aggregation hides from it; secure modes: fkm with server-update='lloyd', "
                "ffcm with ffcm-version=1, masked-federated")

    def aggregate_sums(self, server_round: int, totals) -> np.ndarray:
        """The new model from a secure round's totals.

        ``totals`` is a :class:`~flwr_clustering.secure.SecureSum` (its ``sums``).
        """
        raise NotImplementedError(f"{self.name} has no secure aggregation")

    def secure_round_info(self, server_round: int, totals) -> dict[str, Any]:
        """Extra per-round numbers of a secure round for the history (override to add)."""
        return {}

    def secure_exchange(self, grid: Grid, server_round: int, phase: str,
                        arrays: list[np.ndarray] | tuple = (),
                        config: dict[str, Any] | None = None, *,
                        timeout: float | None = None):
        """One exchange whose replies reach the server only as their sum (SecAgg+).

        The sampled nodes answer ``phase`` as usual; :func:`flwr_clustering.secure.secure_sum`
        masks and sums their reply arrays. Failed clients are logged (WARNING) and left in
        ``last_absent``; fewer than ``min_nodes`` contributors end the run.

        Returns
        -------
        flwr_clustering.secure.SecureSum
        """
        nodes = self.sample_nodes(grid)
        cfg = with_features(self, {**dict(config or {}), "phase": phase, "seed": self.seed})
        timeout = getattr(self, "_run_timeout", self.round_timeout) if timeout is None \
            else timeout
        if self.secagg_keys == "run":
            if getattr(self, "_secure_session", None) is None:
                self._secure_session = SecureSession(self.secagg_threshold, seed=self.seed)
            totals = self._secure_session.secure_sum(grid, nodes, list(arrays), cfg,
                                                     server_round=server_round,
                                                     timeout=timeout)
        else:
            totals = secure_sum(grid, nodes, list(arrays), cfg, server_round=server_round,
                                threshold=self.secagg_threshold, timeout=timeout)
        self.last_absent = {}
        for node, why in sorted(totals.failed.items()):
            self.last_absent[node] = f"failed: {why}"
            logger.warning("round %d %s (secure aggregation): %s failed: %s", server_round,
                           phase, self.who(node), why)
        if not hasattr(self, "run_absent"):
            self.run_absent = {}
        for node, why in self.last_absent.items():
            self.run_absent[self.who(node)] = f"round {server_round} {phase}: {why}"
        for node in totals.nodes:
            self.ledger.append({
                "round": int(server_round), "phase": f"{phase} (secure)",
                "client": int(self.client_of.get(node, node)), "floats": 0, "integers": 0,
                "scalars": 0, "raw-rows": 0, "min-count": None,
                "masked-bytes": int(totals.received.get(node, 0))})
        self.secure_totals.append({
            "round": int(server_round), "phase": phase, "clients": len(totals.nodes),
            "floats": int(sum(a.size for a in totals.sums)),
            "error-bound": totals.error_bound})
        if len(totals.nodes) < self.min_nodes:
            raise RuntimeError(
                f"round {server_round} {phase}: only {len(totals.nodes)} clients completed "
                f"secure aggregation, fewer than min_nodes={self.min_nodes}; failed: "
                + "; ".join(f"{self.who(n)} {why}" for n, why in self.last_absent.items()))
        logger.info("round %d %s: secure aggregation of %d clients (%d arrays summed; "
                    "each total within %.3g of the exact sum)", server_round, phase,
                    len(totals.nodes), len(totals.sums), totals.error_bound)
        return totals

    def secure_train(self, server_round: int, grid: Grid, config: ConfigRecord | None,
                     timeout: float) -> tuple[ArrayRecord, MetricRecord]:
        """A training round under secure aggregation: one secure exchange, the new model."""
        cfg = {**dict(config or {}), **self.train_config(server_round), "evaluate": False}
        phase = str(cfg.pop("phase"))
        totals = self.secure_exchange(grid, server_round, phase,
                                      self.train_arrays(server_round), cfg, timeout=timeout)
        new = self.adopt_model(self.aggregate_sums(server_round, totals))
        record = {
            "round": server_round, "clients": len(totals.nodes),
            "dropped": len(totals.failed), "num-centroids": int(len(new)),
            "shift": self.last_shift, "secure-aggregation": True,
            "sum-error-bound": totals.error_bound,
            **self.secure_round_info(server_round, totals),
        }
        if self.last_absent:
            record["absent"] = [
                {"client": self.client_of.get(node), "node": node, "reason": why}
                for node, why in self.last_absent.items()]
        self.history.append(record)
        logger.info("round %d: %d clients (secure aggregation), %d centroids, shift %.3g",
                    server_round, len(totals.nodes), len(new), self.last_shift)
        metrics = {k: v for k, v in record.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        return self.model_record(), MetricRecord(
            {k: (v if np.isfinite(v) else -1.0) for k, v in metrics.items()})

    def secure_evaluation(self, grid: Grid, server_round: int,
                          config: ConfigRecord | None, timeout: float) -> dict[str, float]:
        """The federated evaluation's statistics, summed under secure aggregation.

        One secure exchange (:func:`~flwr_clustering.clients.base.secure_evaluation_arrays`):
        the server learns the federation's rows, SSE, silhouette sum, cluster counts, sum
        and sum of squares of the rows, per-cluster residual sums and (with ``n-classes``
        in ``config`` and labels on every client) the contingency table, never one
        client's. The metrics are :func:`~flwr_clustering.evaluation.aggregate_evaluation_stats`
        of the totals, without ``ari-client-weighted`` (it needs each client's ARI).
        """
        cfg = {k: v for k, v in dict(config or {}).items() if k not in ("phase", "seed")}
        totals = self.secure_exchange(grid, server_round, SECURE_EVALUATE_PHASE,
                                      [self.centroids], cfg, timeout=timeout)
        head, counts, sum_x, residuals, *table = totals.sums
        squares = table.pop() if cfg.get("profile") else None
        n = int(np.rint(head[0]))
        stats: dict[str, Any] = {
            "num-examples": n, "sse": float(head[1]), "silhouette-sum": float(head[2]),
            "cluster-counts": np.rint(counts).astype(np.int64)}
        if self.secure_row_moments:  # (a masked federation's rows miss features)
            stats.update({"sum-x": sum_x, "cluster-residuals": residuals,
                          "sst-local": float(head[4] - sum_x @ sum_x / n) if n else 0.0})
            if squares is not None:
                stats["cluster-sq-residuals"] = squares
        labelled = int(np.rint(head[3]))
        if table and labelled == len(totals.nodes):
            stats["contingency"] = np.rint(table[0]).astype(np.int64)
        elif table:
            logger.info("round %d secure evaluation: %d of %d clients have labels; no "
                        "contingency metrics", server_round, labelled, len(totals.nodes))
        metrics = aggregate_evaluation_stats([stats])
        metrics.pop("ari-client-weighted", None)
        self._secure_stats = stats
        logger.info("round %d evaluation (secure aggregation): %s", server_round,
                    format_metrics(metrics))
        return metrics
