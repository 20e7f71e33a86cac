"""The secure exchange: a phase whose replies reach the server only as their sum.

:class:`SecureExchange` has the plain exchange's call
(:meth:`~flwr_clustering.strategies.exchange.Exchange.send`) and returns a
:class:`~flwr_clustering.strategies.exchange.Collected` with no reply of its own: its
``totals`` (a :class:`~flwr_clustering.secure.sums.SecureSum`) are the federation's sums
(Flower's SecAgg+ through :func:`~flwr_clustering.secure.mod.secure_sum`, or the run's
session, :mod:`~flwr_clustering.secure.session`), its ``absent`` the clients that failed.
It logs them, records every contributor and the exchange's totals in the
:class:`~flwr_clustering.strategies.ledger.Ledger`, and ends the run below ``min_nodes``
contributors. The strategy base's ``start`` builds one per run when secure aggregation is
on. :func:`evaluation_stats` turns a secure evaluation's totals into the evaluation
statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.serverapp import Grid

from ..log import logger
from ..protocol import with_features
from ..replies import Collected
from . import features as secure_features
from .mod import secure_sum
from .session import SecureSession
from .sums import SecureSum

if TYPE_CHECKING:  # (the plain exchange sits on the strategies' floor, above this wing)
    from ..strategies.exchange import Exchange

__all__ = ["SecureExchange", "evaluation_stats"]


class SecureExchange:
    """One exchange whose replies the server sees only as their sum (SecAgg+).

    Parameters
    ----------
    plain : Exchange
        The run's plain exchange: its node sampling, node book, ledger, features and
        timeout are this one's.
    threshold : float
        SecAgg+'s reconstruction threshold (a share of the contributors).
    keys : {"run", "exchange"}
        ``run``: keys agreed once per run (:class:`~flwr_clustering.secure.session.
        SecureSession`); ``exchange``: Flower's SecAgg+ as shipped, every exchange.
    phases : dict, optional
        The algorithm's phases under secure aggregation, as its spec declares them
        (``Capabilities.secure_phases``): ``{plain name: secure name}``, ``None`` for a
        phase that cannot go through this exchange. Other phases keep their name.
    """

    #: The server sees only the federation's totals of a phase (the plain exchange: each
    #: client's reply).
    sums_only = True

    def __init__(self, plain: Exchange, *, threshold: float, keys: str,
                 phases: dict[str, str | None] | None = None) -> None:
        self.plain = plain
        self.threshold = float(threshold)
        self.keys = str(keys)
        self.phases = dict(phases or {})
        self._session: SecureSession | None = None

    def phase(self, name: str) -> str | None:
        """The name under which the phase ``name`` is sent securely (``None``: never)."""
        return self.phases.get(name, name)

    # -- the features step of round 0, from totals (:mod:`.features`) -------------------
    #: Why declared categorical columns cannot run through this exchange.
    categories_problem = secure_features.CATEGORIES_PROBLEM

    def feature_config(self, scaling: str, datetime_columns: tuple[str, ...]
                       ) -> dict[str, Any]:
        """The ``data-source`` query's extra config (:func:`.features.data_source_config`)."""
        return secure_features.data_source_config(scaling, datetime_columns)

    def feature_moments(self, grid: Grid, features: tuple[str, ...], records: dict[int, Any],
                        config: dict[str, Any], timeout: float | None
                        ) -> secure_features.FeatureTotals:
        """The federation's feature moments, one secure sum (:func:`.features.feature_moments`)."""
        return secure_features.feature_moments(self, grid, features, records, config, timeout)

    def unit_check(self, grid: Grid, features: tuple[str, ...], numeric: tuple[str, ...],
                   timeout: float | None) -> tuple[list[str], str | None]:
        """Each site flags its own units, summed securely (:func:`.features.unit_check`)."""
        return secure_features.unit_check(self, grid, features, numeric, timeout)

    def send(self, grid: Grid, server_round: int, phase: str,
             arrays: list[np.ndarray] | tuple = (), config: dict[str, Any] | None = None, *,
             timeout: float | None = None, parse=None, parts=None,
             min_replies: int | None = None, **plain_only: Any) -> Collected:
        """Send ``phase`` to the sampled nodes; return the federation's sums.

        The sampled nodes answer ``phase`` as usual; their reply arrays are masked and
        summed. Failed clients are logged (WARNING) and returned in ``absent``; fewer than
        ``min_nodes`` contributors end the run (``RuntimeError``). ``parse``, ``parts``
        and ``min_replies`` are the plain exchange's reading of each reply: here no reply
        is read (the caller checks the totals), and ``min_nodes`` contributors are needed.

        Returns
        -------
        Collected
            No replies; ``totals`` (a :class:`~flwr_clustering.secure.sums.SecureSum`) and
            ``absent`` (``{node id: reason}``).
        """
        if plain_only:  # per_node, parse, message_type...: a plain exchange's options
            raise TypeError(f"a secure exchange sums one broadcast; it takes no "
                            f"{sorted(plain_only)}")
        plain, book = self.plain, self.plain.nodes
        nodes = plain.sample_nodes(grid)
        cfg = with_features(plain.view().features_json,
                            {**dict(config or {}), "phase": phase, "seed": plain.seed})
        timeout = plain.timeout if timeout is None else float(timeout)
        if self.keys == "run":
            if self._session is None:
                self._session = SecureSession(self.threshold, seed=plain.seed)
            totals = self._session.secure_sum(grid, nodes, list(arrays), cfg,
                                              server_round=server_round, timeout=timeout)
        else:
            totals = secure_sum(grid, nodes, list(arrays), cfg, server_round=server_round,
                                threshold=self.threshold, timeout=timeout)
        absent = {}
        for node, why in sorted(totals.failed.items()):
            absent[node] = f"failed: {why}"
            logger.warning("round %d %s (secure aggregation): %s failed: %s", server_round,
                           phase, book.who(node), why)
        book.note_absent(server_round, phase, absent)
        plain.ledger.add_secure(
            server_round, phase,
            {book.client_of.get(node, node): totals.received.get(node, 0)
             for node in totals.nodes},
            floats=sum(a.size for a in totals.sums), error_bound=totals.error_bound)
        if len(totals.nodes) < plain.min_nodes:
            raise RuntimeError(
                f"round {server_round} {phase}: only {len(totals.nodes)} clients completed "
                f"secure aggregation, fewer than min_nodes={plain.min_nodes}; failed: "
                + "; ".join(f"{book.who(n)} {why}" for n, why in absent.items()))
        logger.info("round %d %s: secure aggregation of %d clients (%d arrays summed; "
                    "each total within %.3g of the exact sum)", server_round, phase,
                    len(totals.nodes), len(totals.sums), totals.error_bound)
        return Collected(absent=absent, received=len(totals.nodes), totals=totals)


def evaluation_stats(totals: SecureSum, *, profile: bool, row_moments: bool
                     ) -> tuple[dict[str, Any], int]:
    """The evaluation statistics of a secure evaluation's totals, and the labelled clients.

    Parameters
    ----------
    totals : SecureSum
        The sums of :func:`~flwr_clustering.clients.statistics.secure_evaluation_arrays`.
    profile : bool
        Whether the clients added the per-cluster sums of squared residuals.
    row_moments : bool
        Whether the row sums give the pooled total sum of squares and the Lloyd-step
        check (not for rows with unobserved features).

    Returns
    -------
    stats : dict
        ``num-examples``, ``sse``, ``silhouette-sum``, ``cluster-counts`` and, with
        ``row_moments``, ``sum-x``, ``cluster-residuals``, ``sst-local`` (and
        ``cluster-sq-residuals`` with ``profile``); ``contingency`` when every client has
        labels.
    labelled : int
        The clients with labels.
    """
    head, counts, sum_x, residuals, *table = totals.sums
    squares = table.pop() if profile else None
    n = int(np.rint(head[0]))
    stats: dict[str, Any] = {
        "num-examples": n, "sse": float(head[1]), "silhouette-sum": float(head[2]),
        "cluster-counts": np.rint(counts).astype(np.int64)}
    if row_moments:  # (a masked federation's rows miss features)
        stats.update({"sum-x": sum_x, "cluster-residuals": residuals,
                      "sst-local": float(head[4] - sum_x @ sum_x / n) if n else 0.0})
        if squares is not None:
            stats["cluster-sq-residuals"] = squares
    labelled = int(np.rint(head[3]))
    if table and labelled == len(totals.nodes):
        stats["contingency"] = np.rint(table[0]).astype(np.int64)
    return stats, labelled
