"""The split check and the refinement of the final model, as exchanges (issue 38, layer 3).

After the protocol's last round the strategy asks every client for the sums of
:mod:`flwr_clustering.algorithms.cluster_split` (the first in the final evaluation's
message when the check cannot change the model: :meth:`ClusteringStrategy.\
scatter_in_final_evaluation <flwr_clustering.strategies.base.ClusteringStrategy.\
scatter_in_final_evaluation>`, one exchange less; else before the final evaluation):

1. ``split-scatter``: per cluster of the model (nearest centre) the row count, the sum of
   the rows and the sum of their outer products (``k``, ``k x d``, ``k x d x d``);
2. ``split-histograms``: with each cluster's mean, main axis and bins from those totals,
   per cluster the counts of its rows in the bins along the axis (``k x B``).

A cluster whose histogram has two modes with a valley between them looks like two groups:
the model may sit at a poor local optimum (a centre between two groups while another group
has two centres), which no other diagnostic sees, or ``k`` may be too small. The finding
is a warning of :meth:`ClusteringStrategy.diagnose
<flwr_clustering.strategies.base.ClusteringStrategy.diagnose>` naming ``refine-rounds``.

With ``refine-rounds=N`` the strategy also refines the model
(:func:`~flwr_clustering.algorithms.cluster_split.refine_model`): up to N federated Lloyd
rounds (``refine`` exchanges: per-cluster sums and counts, and the SSE of the centres
sent), the check, and where it flags clusters a split-and-merge repair followed by Lloyd
rounds, kept only where the SSE falls. The same functions run in the pure loop
(:func:`~flwr_clustering.algorithms.cluster_split.pure_step`, ``pure_check``), so a
federated refinement equals it bit for bit.

Privacy: every reply is a sum over a client's rows per cluster; a client with a cluster of
fewer rows than the privacy threshold sends zeros only (and says so: ``withheld``); under
secure aggregation the server receives only the federation's totals; the ledger records
every reply. The check runs only on centre-based models of complete rows (masked clients'
incomplete rows take no part) and not in a differentially private run, whose noise does
not cover these sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.cluster_split import (
    SplitCheck,
    main_axes,
    refine_model,
    scatter_sse,
    valleys,
)
from ..log import logger
from ..protocol import (
    REFINE_PHASE,
    SPLIT_CHECK_KEYS,
    SPLIT_HISTOGRAM_PHASE,
    SPLIT_SCATTER_PHASE,
    SPLIT_WITHHELD_KEY,
)

__all__ = ["refine_problem", "run_split_check", "split_check_problem"]


def split_check_problem(strategy: Any) -> str | None:
    """Why the check cannot run on this strategy's model (``None``: it can)."""
    if strategy.labelling != "nearest-centroid" and not strategy.labelling.startswith(
            "masked"):
        return f"its model labels rows by its {strategy.labelling}, not by the nearest centre"
    if getattr(strategy, "dp", False):
        return "a differentially private run: the check's sums would carry no noise"
    if strategy.centroids is None or np.ndim(strategy.centroids) != 2:
        return "no centroid model"
    if not np.isfinite(strategy.centroids).all():
        return "the model has NaN/inf entries"
    return None


def refine_problem(strategy: Any) -> str | None:
    """Why ``refine-rounds`` cannot apply to this strategy (``None``: it can)."""
    if strategy.labelling != "nearest-centroid":
        return (f"{strategy.name}'s model labels rows by its {strategy.labelling}, not by "
                "the nearest centre")
    if strategy.needs_every_client:
        return f"{strategy.name}'s model is its nodes' own centres"
    if getattr(strategy, "dp", False):
        return "differential privacy: the refinement's sums would carry no noise"
    return None


def _totals(strategy: Any, grid: Any, server_round: int, phase: str,
            arrays: list[np.ndarray], keys: tuple[str, ...], shapes: list[tuple],
            timeout: float, replies: list | None = None) -> tuple[list[np.ndarray], int]:
    """The federation's totals of one library phase, and the clients in them.

    The clients that sent zeros under the privacy threshold are not counted.

    One exchange through the run's summing exchange (``sum_phase``): under secure
    aggregation the server sees only the totals; else the replies' statistics (``keys``)
    are checked against ``shapes`` and summed in client-id order. A client without a
    valid reply is left out of these totals, not of the model (``run_absent`` is kept).
    With ``replies`` (the final evaluation's, which carried ``split-scatter``'s sums:
    :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.scatter_in_final_evaluation`)
    no exchange: their sums, the same way.
    """
    def parts(r):
        return [np.asarray(r.stats[key], dtype=np.float64).reshape(shape)
                for key, shape in zip(keys, shapes, strict=True)]

    withheld_key = "withheld"
    if replies is None:
        before = dict(strategy.run_absent)
        config = {"privacy-threshold": int(getattr(strategy, "privacy_threshold", 2))}
        collected = strategy.sum_phase(grid, server_round, phase, arrays, config, parts=parts,
                                       min_replies=1, timeout=timeout)
        strategy.run_absent = before
        totals = collected.totals
    else:
        collected, withheld_key = replies, SPLIT_WITHHELD_KEY
        totals = strategy.exchanger.sum_parts(server_round, phase, replies, parts)
    if not totals.nodes:
        raise RuntimeError(f"round {server_round} {phase}: no client sent valid sums")
    # (a secure exchange has no reply of its own: no client is known to have withheld)
    withheld = sum(bool(r.metrics.get(withheld_key, 0)) for r in collected
                   if r.node_id in totals.nodes)
    if withheld:
        logger.info("round %d %s: %d of %d clients sent zeros (a cluster of fewer rows than "
                    "the privacy threshold)", server_round, phase, withheld, len(totals.nodes))
    sums = [np.asarray(a, dtype=np.float64).reshape(s)
            for a, s in zip(totals.sums, shapes, strict=True)]
    return sums, len(totals.nodes) - withheld


def _check(strategy: Any, grid: Any, server_round: int, timeout: float, C: np.ndarray,
           clients: list[int], scatter: list | None = None) -> SplitCheck:
    k, d = C.shape
    (counts, sums, outer), n = _totals(
        strategy, grid, server_round, SPLIT_SCATTER_PHASE, [C],
        SPLIT_CHECK_KEYS[SPLIT_SCATTER_PHASE], [(k,), (k, d), (k, d, d)], timeout,
        replies=scatter)
    counts = np.rint(counts)
    bins = main_axes(counts, sums, outer)
    (hist,), n2 = _totals(
        strategy, grid, server_round, SPLIT_HISTOGRAM_PHASE,
        [C, bins.means, bins.axes, bins.edges], ("split-histograms",),
        [(k, bins.edges.shape[1] - 1)], timeout)
    clients.append(min(n, n2))
    hist = np.rint(hist)
    return SplitCheck(valleys(hist), counts, scatter_sse(C, counts, sums, outer), bins, hist)


def run_split_check(strategy: Any, grid: Any, server_round: int, timeout: float,
                    scatter: list | None = None) -> dict[str, Any] | None:
    """The check (and with ``refine_rounds`` the refinement) of the strategy's model.

    ``scatter``: the final evaluation's replies that carried the ``split-scatter`` sums of
    the model (then no ``split-scatter`` exchange; without ``refine_rounds`` only). Empty
    (no reply carried them, e.g. clients of a user's own evaluate handler): the exchange
    runs.

    Sets ``strategy.centroids`` to the refined model; returns what
    :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.diagnose` reports:
    ``split-clusters`` (``[]``: none), ``split-counts`` (their rows), ``split-clients``
    (clients in the sums), and with refinement ``refine`` (its info); ``None`` when the
    check is off; ``{"split-check": "not run: <why>"}`` when it cannot run (logged).
    """
    rounds = int(getattr(strategy, "refine_rounds", 0))
    if not (strategy.split_check or rounds):
        return None
    problem = split_check_problem(strategy)
    if problem is not None:
        logger.info("split check not run: %s", problem)
        return {"split-check": f"not run: {problem}"}
    C0 = np.asarray(strategy.centroids, dtype=np.float64)
    k, d = C0.shape
    clients: list[int] = []

    def check(C: np.ndarray) -> SplitCheck:
        return _check(strategy, grid, server_round, timeout, C, clients)

    def step(C: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        (sums, counts, head), _ = _totals(
            strategy, grid, server_round, REFINE_PHASE, [C],
            ("refine-sums", "refine-counts", "refine-sse"), [(k, d), (k,), (1,)], timeout)
        return sums, counts, float(head[0])

    out: dict[str, Any] = {"split-check": "run"}
    if rounds:
        C, result, info = refine_model(step, check, C0, rounds)
        strategy.centroids = C
        out["refine"] = info
        logger.info(
            "refinement: %d Lloyd round(s), %d split-and-merge repair(s) of %d tried, SSE "
            "%.6g -> %.6g", info["lloyd-rounds"], info["repairs"], info["attempts"],
            info["sse-before"], info["sse-after"])
        if strategy.history:
            strategy.history[-1]["refine"] = info
    else:
        result = _check(strategy, grid, server_round, timeout, C0, clients, scatter or None)
    flagged = sorted(result.flagged)
    out.update({"split-clusters": flagged,
                "split-counts": [int(result.counts[j]) for j in flagged],
                "split-clients": int(min(clients)) if clients else 0,
                "split-refined": bool(rounds)})
    logger.info("split check: %s", f"cluster(s) {flagged} look like two groups" if flagged
                else "no cluster looks like two groups")
    return out

