"""The end-of-run checks, as pure functions of the model and the run's statistics.

:func:`run_diagnostics` computes, from a :class:`RunSummary` (the model, the clients'
counts and sums of the final evaluation, the history, the absent clients), what
:mod:`flwr_clustering.diagnostics` turns into warnings (collapsed, empty or non-finite
centres, the round cap, clients withheld or dropped, a cluster that looks like two groups);
:func:`diagnosis_warnings` turns them into sentences, each naming the run-config option
that addresses it. Nothing here reads or writes a strategy: the strategy base builds the
summary, adds its algorithm's own numbers (``diagnostic_extras``) and logs the warnings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import diagnostics as _diagnostics
from ..data.schema import FeatureTransform

__all__ = ["RunSummary", "diagnosis_warnings", "run_diagnostics"]


@dataclass(frozen=True)
class RunSummary:
    """What the end-of-run checks read of a finished run.

    Attributes
    ----------
    name : str
        The strategy's class name (the warnings start with it).
    model : numpy.ndarray or None
        The model's centres.
    k : int
        The run's ``k``.
    evaluation_stats : list of dict
        The clients' statistics of the final evaluation (counts and sums).
    sse : float or None
        The final evaluation's SSE.
    history : list of dict
        The per-round history.
    iterative : bool
        Whether the protocol is iterative (no fixed round count).
    converged : bool or None
        Whether the last round met the tolerance (``None``: no tolerance applies).
    tol : float
        The tolerance.
    num_rounds : int
        The run's round count.
    early_stop : bool
        Whether the run stops when converged.
    last_shift : float
        How far the last round moved the model.
    absent : dict
        ``{client: reason}`` of every client without a valid reply in the run.
    split_result : dict or None
        What the split check found.
    transform : FeatureTransform or None
        The federation's features (for the categorical columns' warnings).
    categorical_weight : str
        ``categorical-weight`` of a standard scaling, else ``""``.
    """

    name: str
    model: np.ndarray | None
    k: int
    evaluation_stats: list[dict[str, Any]] = field(default_factory=list)
    sse: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    iterative: bool = False
    converged: bool | None = None
    tol: float = -1.0
    num_rounds: int = 0
    early_stop: bool = True
    last_shift: float = float("inf")
    absent: dict[str, str] = field(default_factory=dict)
    split_result: dict[str, Any] | None = None
    transform: FeatureTransform | None = None
    categorical_weight: str = ""


def run_diagnostics(run: RunSummary) -> dict[str, Any]:
    """The algorithm-independent diagnostics of a finished run.

    Returns
    -------
    dict
        ``k``; ``centroids`` (rows of the model); ``non-finite-entries``;
        ``distinct-centres`` and ``distinct-tolerance``; ``data-scale`` (RMS distance of
        the rows to their mean); ``cluster-counts`` and ``non-empty-clusters`` (``None``
        without a final evaluation), ``largest-cluster-share``; ``sse``, ``sst`` (total
        sum of squares) and ``sse-ratio``; ``lloyd-gain`` and ``lloyd-gain-clusters``
        (:func:`~flwr_clustering.diagnostics.lloyd_gain`); ``rounds``, ``num-rounds``,
        ``iterative``, ``converged``, ``round-cap-hit``, ``last-shift``, ``tol``;
        ``absent`` (``{client: reason}``), ``withheld`` and ``dropped`` (client counts),
        ``withheld-centroids``, ``empty-uploads``; and the split check's findings.
    """
    C = run.model
    k = int(run.k or 0)
    stats = list(run.evaluation_stats or [])
    n = int(sum(int(s["num-examples"]) for s in stats)) if stats else None
    sst = _diagnostics.total_sum_of_squares(stats)
    scale = _diagnostics.data_scale(sst, n, C)
    counts = _diagnostics.pooled_counts(stats, k)
    sse = run.sse if stats else None
    last = int(run.history[-1]["round"]) if run.history else 0
    absent = dict(run.absent)
    withheld = sum("privacy" in why for why in absent.values())
    gain, gain_clusters = _diagnostics.lloyd_gain(stats)
    return {
        "lloyd-gain": gain,
        "lloyd-gain-clusters": gain_clusters,
        "k": k,
        "centroids": 0 if C is None else int(len(C)),
        "non-finite-entries": _diagnostics.non_finite_entries(C),
        "distinct-centres": _diagnostics.distinct_centres(C, scale),
        "distinct-tolerance": _diagnostics.DISTINCT_RTOL * (scale or 0.0),
        "data-scale": scale,
        "cluster-counts": None if counts is None else [int(c) for c in counts],
        "non-empty-clusters": _diagnostics.nonempty_clusters(counts),
        "largest-cluster-share": (float(counts.max() / counts.sum())
                                  if counts is not None and counts.sum() else None),
        "sse": None if sse is None else float(sse),
        "sst": sst,
        "sse-ratio": (float(sse) / sst if sse is not None and sst else None),
        "rounds": last,
        "num-rounds": int(run.num_rounds),
        "iterative": run.iterative,
        "converged": run.converged,
        "round-cap-hit": bool(run.converged is False and run.early_stop
                              and last >= int(run.num_rounds)),
        "last-shift": (float(run.last_shift) if run.iterative and np.isfinite(run.last_shift)
                       else None),
        "tol": run.tol,
        "absent": absent,
        "withheld": int(withheld),
        "dropped": int(len(absent) - withheld),
        "withheld-centroids": int(sum(int(h.get("withheld-centroids", 0))
                                      for h in run.history)),
        "empty-uploads": int(run.history[-1].get("empty-uploads", 0) if run.history else 0),
        **(run.split_result or {"split-check": "off"}),
    }


def diagnosis_warnings(diag: dict[str, Any], run: RunSummary,
                       advice: dict[str, tuple[str, ...]]) -> list[str]:
    """The warnings of ``diag``, each naming the options of ``advice`` (run-config keys).

    Adds ``categorical-dominance`` to ``diag`` where a categorical column's levels
    decide the clusters (:func:`categorical_warnings`).
    """
    warnings = _diagnostics.warnings_from(diag, advice, run.name)
    return warnings + categorical_warnings(diag, run)


def categorical_warnings(diag: dict[str, Any], run: RunSummary) -> list[str]:
    """A warning per categorical column whose levels the clusters follow.

    From the final evaluation's per-cluster sums (each cluster's share of each level is
    the mean of its one-hot feature); sets ``diag["categorical-dominance"]``.
    """
    transform = run.transform
    counts = diag.get("cluster-counts")
    if transform is None or not transform.categories or counts is None:
        return []
    means = _diagnostics.pooled_cluster_means(list(run.evaluation_stats or []), run.model)
    if means is None or means.shape[1] != len(transform.features):
        return []
    d = len(transform.numeric_features)
    found = _diagnostics.dominant_categories(
        transform.categories, transform.inverse(means)[:, d:], counts[:len(means)])
    diag["categorical-dominance"] = found
    return [f"{run.name}: " + _diagnostics.categorical_warning(column, shares,
                                                                 run.categorical_weight)
            for column, shares in found.items()]
