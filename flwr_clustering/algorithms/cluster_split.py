"""Two groups inside one cluster: a check from counts and sums, and a repair (issue 38).

A k-means fixed point can put one centre between two groups and give a third group two
centres. Every cluster is then well formed and the Lloyd gain is small, so the run's other
diagnostics do not see it. Along the cluster's main axis (the direction of its largest
spread) the rows of such a cluster fall into two modes with a gap between them.

Everything here is additive over clients, so a federation computes it exactly without a
row (:mod:`flwr_clustering.strategies.split_check` runs it after the last round):

1. :func:`scatter_stats`: per cluster the row count, the sum of the rows and the sum of
   their outer products (``k``, ``k x d``, ``k x d x d``);
2. :func:`main_axes`: from their totals, every cluster's mean, main axis (the covariance's
   leading eigenvector) and spread along it, and the histogram bins along the axis;
3. :func:`axis_histograms`: per cluster the counts of its rows in those bins (``k x B``);
4. :func:`split_clusters`: from the summed counts, the clusters whose histogram has two
   modes separated by a valley (:data:`VALLEY_DEPTH`), each side holding at least
   :data:`MIN_SIDE_SHARE` of the cluster's rows.

Measured (2026-11-28, scikit-learn's ``make_blobs``, 8-16 centres in 2-10 dimensions,
seeds 0-9): of 188 single-start k-means runs (``n_init=1``, random init) that ended with
an SSE above 1.10x the best of 10 starts, 184 had a cluster flagged; of the 550 clusters
of the best-of-10 solutions (six blob settings, spreads 1-4), none; on standardised iris,
wine and breast cancer, none of the best k-means clusters; on digits 1 of 10 (k-means
joins two digit classes there).

The repair (:func:`split_and_merge`, then :func:`refine`): each flagged cluster's centre is
replaced by the means of its two sides (along its main axis, from the histogram), the pair
of other centres whose merge costs least (Ward's criterion) is merged, and federated Lloyd
rounds (:func:`refine_stats`, :func:`~flwr_clustering.algorithms.fkm.lloyd_from_totals`)
settle the model; the caller keeps it only where its SSE is lower.

Privacy: the scatter tells the server each cluster's covariance (more than the per-feature
moments of the evaluation) and the histograms where a cluster's rows lie along one
direction; both are sums over a client's rows, so a client with a cluster of fewer rows
than the privacy threshold sends zeros only (:func:`client_scatter`; withholding only that
cluster would not do: the evaluation's sum of all its rows minus the other clusters' sums
is that cluster's sum), secure aggregation sums them when it is on, and the ledger records
them.

No Flower import (layer 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .fkm import lloyd_from_totals
from .lloyd import assign_to_nearest, cluster_sums, nearest_labels

__all__ = [
    "BINS",
    "MIN_ROWS",
    "MIN_SIDE_SHARE",
    "REPAIR_ATTEMPTS",
    "VALLEY_DEPTH",
    "AxisBins",
    "SplitCheck",
    "axis_histograms",
    "check_splits",
    "client_histograms",
    "client_scatter",
    "main_axes",
    "refine",
    "refine_model",
    "refine_stats",
    "pure_check",
    "pure_step",
    "scatter_sse",
    "scatter_stats",
    "split_and_merge",
    "split_clusters",
    "valleys",
    "withholds",
]

#: Histogram bins along a cluster's main axis, spanning its mean +- 3 spreads.
BINS = 24
#: The valley between the two modes is at most this share of the lower mode (after a
#: 3-bin moving average): a clear gap, not the dip of sampling noise.
VALLEY_DEPTH = 0.5
#: Each side of the valley holds at least this share of the cluster's rows.
MIN_SIDE_SHARE = 0.1
#: A cluster with fewer rows is never split: too few for a histogram of :data:`BINS` bins.
MIN_ROWS = 50
#: Split-and-merge attempts of :func:`refine_model`.
REPAIR_ATTEMPTS = 3


def scatter_stats(X: np.ndarray, labels: np.ndarray, k: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One client's per-cluster count, sum and sum of outer products of its rows.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's rows.
    labels : numpy.ndarray of shape (n,)
        Each row's cluster, in ``0..k-1``.
    k : int
        The number of clusters.

    Returns
    -------
    counts : numpy.ndarray of shape (k,), int64
    sums : numpy.ndarray of shape (k, d)
    outer : numpy.ndarray of shape (k, d, d)
        ``sum x x^T`` over each cluster's rows.
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if X.ndim != 2 or labels.shape != (len(X),):
        raise ValueError(f"need rows (n, d) and n labels, got {X.shape} and {labels.shape}")
    if not np.isfinite(X).all():
        raise ValueError("the split check needs complete rows (no NaN or inf)")
    if len(labels) and (labels.min() < 0 or labels.max() >= k):
        raise ValueError(f"labels must lie in 0..{k - 1}")
    d = X.shape[1]
    sums, counts = cluster_sums(X, labels, k)
    outer = np.zeros((k, d, d))
    for j in np.flatnonzero(counts):
        rows = X[labels == j]
        outer[j] = rows.T @ rows
    return counts, sums, outer


@dataclass(frozen=True)
class AxisBins:
    """Every cluster's mean, main axis and histogram bin edges along it.

    Attributes
    ----------
    means : numpy.ndarray of shape (k, d)
    axes : numpy.ndarray of shape (k, d)
        Unit vectors (zero for a cluster with fewer than two rows).
    edges : numpy.ndarray of shape (k, BINS + 1)
        Bin edges of the projection ``(x - mean) . axis``: ``BINS`` equal bins over
        ``+- 3`` spreads (the square root of the covariance's largest eigenvalue).
    """

    means: np.ndarray
    axes: np.ndarray
    edges: np.ndarray


def main_axes(counts: np.ndarray, sums: np.ndarray, outer: np.ndarray, *,
              bins: int = BINS) -> AxisBins:
    """The bins of :func:`axis_histograms` from the summed :func:`scatter_stats`."""
    counts = np.asarray(counts, dtype=np.float64)
    sums = np.asarray(sums, dtype=np.float64)
    outer = np.asarray(outer, dtype=np.float64)
    k, d = sums.shape
    means = np.zeros((k, d))
    axes = np.zeros((k, d))
    edges = np.zeros((k, bins + 1))
    for j in range(k):
        n = counts[j]
        if n < 2:
            continue
        means[j] = sums[j] / n
        cov = outer[j] / n - np.outer(means[j], means[j])
        values, vectors = np.linalg.eigh((cov + cov.T) / 2)
        spread = float(np.sqrt(max(values[-1], 0.0)))
        if spread == 0.0:
            continue
        axes[j] = vectors[:, -1]
        edges[j] = np.linspace(-3 * spread, 3 * spread, bins + 1)
    return AxisBins(means, axes, edges)


def axis_histograms(X: np.ndarray, labels: np.ndarray, bins: AxisBins) -> np.ndarray:
    """One client's counts of its rows per cluster and bin along the cluster's main axis.

    Rows beyond the outer edges count in the outer bins. A cluster without an axis counts
    nothing.

    Returns
    -------
    numpy.ndarray of shape (k, B), int64
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    k, width = len(bins.axes), bins.edges.shape[1] - 1
    out = np.zeros((k, width), dtype=np.int64)
    for j in range(k):
        if not bins.axes[j].any():
            continue
        proj = (X[labels == j] - bins.means[j]) @ bins.axes[j]
        index = np.clip(np.searchsorted(bins.edges[j], proj, side="right") - 1, 0, width - 1)
        out[j] = np.bincount(index, minlength=width)
    return out


def valleys(histograms: np.ndarray | Sequence[np.ndarray], *,
            depth: float = VALLEY_DEPTH, min_share: float = MIN_SIDE_SHARE,
            min_rows: int = MIN_ROWS) -> dict[int, int]:
    """``{cluster: valley bin}`` of the clusters whose summed histogram shows two groups.

    After a 3-bin moving average, a cluster shows two groups when some bin ``v`` has, on
    each side, a higher bin (the modes ``a`` left and ``b`` right), the valley is at most
    ``depth * min(a, b)``, and each side of ``v`` holds at least ``min_share`` of the
    cluster's rows. A cluster of fewer than ``min_rows`` rows is never split. The valley
    is the deepest such bin (the first of equals).

    Parameters
    ----------
    histograms : array_like of shape (k, B)
        The federation's counts (the sum of the clients' :func:`axis_histograms`).
    """
    H = np.asarray(histograms, dtype=np.float64)
    found: dict[int, int] = {}
    for j, h in enumerate(H):
        total = h.sum()
        if total < max(min_rows, 1):
            continue
        smooth = np.convolve(np.pad(h, 1, mode="edge"), np.ones(3) / 3, mode="valid")
        left_peak = np.maximum.accumulate(smooth)
        right_peak = np.maximum.accumulate(smooth[::-1])[::-1]
        below = np.cumsum(h)
        best = None
        for v in range(1, len(h) - 1):
            low = min(left_peak[v - 1], right_peak[v + 1])
            if low <= 0 or smooth[v] > depth * low:
                continue
            left, right = below[v - 1], total - below[v]
            if min(left, right) >= min_share * total:
                ratio = smooth[v] / low
                if best is None or ratio < best[0]:
                    best = (ratio, v)
        if best is not None:
            found[j] = best[1]
    return found


def split_clusters(histograms: np.ndarray | Sequence[np.ndarray], *,
                   depth: float = VALLEY_DEPTH, min_share: float = MIN_SIDE_SHARE,
                   min_rows: int = MIN_ROWS) -> list[int]:
    """The clusters whose summed histogram shows two groups (:func:`valleys`), in order.

    Returns
    -------
    list of int
        The clusters that look like two groups, in order.
    """
    return sorted(valleys(histograms, depth=depth, min_share=min_share, min_rows=min_rows))


def _complete(X: np.ndarray) -> np.ndarray:
    """The rows without a NaN (a masked client's incomplete rows take no part)."""
    X = np.asarray(X, dtype=np.float64)
    return X if not X.size or np.isfinite(X).all() else X[np.isfinite(X).all(axis=1)]


def _withheld(counts: np.ndarray, threshold: int) -> bool:
    """Whether a client holds its whole reply back: a cluster with too few rows.

    A cluster with rows, but fewer than ``threshold``; not only that cluster: the
    evaluation's ``sum-x`` (the sum of all the client's rows) minus the other clusters'
    sums would be its sum, one row for a cluster of one.
    """
    return bool(np.any((counts > 0) & (counts < threshold)))


def withholds(X: np.ndarray, C: np.ndarray, threshold: int) -> bool:
    """Whether a client with rows ``X`` sends zeros for the model ``C`` (:func:`_withheld`)."""
    X = _complete(X)
    if not len(X):
        return False
    return _withheld(np.bincount(nearest_labels(X, np.asarray(C, dtype=np.float64)),
                                 minlength=len(C)), threshold)


def client_scatter(X: np.ndarray, C: np.ndarray, threshold: int = 0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A client's reply to the first exchange: :func:`scatter_stats` of its rows.

    Each complete row goes to its nearest centre of ``C``; when a cluster has fewer than
    ``threshold`` rows (but some), the whole reply is zeros (:func:`_withheld`). Counts as
    float64 (the form a secure sum takes).
    """
    C = np.asarray(C, dtype=np.float64)
    X = _complete(X)
    k, d = C.shape
    zeros = np.zeros(k), np.zeros((k, d)), np.zeros((k, d, d))
    if not len(X):
        return zeros
    counts, sums, outer = scatter_stats(X, nearest_labels(X, C), k)
    if _withheld(counts, threshold):
        return zeros
    return counts.astype(np.float64), sums, outer


def client_histograms(X: np.ndarray, C: np.ndarray, bins: AxisBins, threshold: int = 0
                      ) -> np.ndarray:
    """A client's reply to the second exchange: :func:`axis_histograms` of its rows.

    The same rows and labels as :func:`client_scatter`, zeros where it sends zeros.
    float64.
    """
    C = np.asarray(C, dtype=np.float64)
    X = _complete(X)
    labels = nearest_labels(X, C) if len(X) else np.zeros(0, dtype=np.int64)
    if not len(X) or _withheld(np.bincount(labels, minlength=len(C)), threshold):
        return np.zeros((len(C), bins.edges.shape[1] - 1))
    return axis_histograms(X, labels, bins).astype(np.float64)


def scatter_sse(C: np.ndarray, counts: np.ndarray, sums: np.ndarray, outer: np.ndarray
                ) -> float:
    """The SSE of ``C`` on the rows behind the scatter: ``tr S_j - 2 c_j.s_j + n_j |c_j|^2``."""
    C = np.asarray(C, dtype=np.float64)
    trace = np.trace(np.asarray(outer, dtype=np.float64), axis1=1, axis2=2)
    return float(np.sum(trace - 2 * np.einsum("kd,kd->k", C, sums)
                        + np.asarray(counts, dtype=np.float64) * np.einsum("kd,kd->k", C, C)))


@dataclass(frozen=True)
class SplitCheck:
    """The result of the check on one model.

    Attributes
    ----------
    flagged : dict
        ``{cluster: valley bin}`` (:func:`valleys`).
    counts : numpy.ndarray of shape (k,)
        Rows per cluster that took part (held-back clusters and incomplete rows not).
    sse : float
        The model's SSE on those rows (:func:`scatter_sse`).
    bins : AxisBins
    histograms : numpy.ndarray of shape (k, B)
    """

    flagged: dict[int, int]
    counts: np.ndarray
    sse: float
    bins: AxisBins
    histograms: np.ndarray


def check_splits(parts: Sequence[np.ndarray], C: np.ndarray, threshold: int = 0
                 ) -> SplitCheck:
    """The check as a federation runs it: the clients' sums, in order, then the rule.

    The pure loop of :mod:`flwr_clustering.strategies.split_check` (same sums in the
    same order, so the same result bit for bit).
    """
    C = np.asarray(C, dtype=np.float64)
    replies = [client_scatter(X, C, threshold) for X in parts]
    counts, sums, outer = (sum(r[i] for r in replies) for i in range(3))
    bins = main_axes(counts, sums, outer)
    hist = sum(client_histograms(X, C, bins, threshold) for X in parts)
    return SplitCheck(valleys(hist), counts, scatter_sse(C, counts, sums, outer), bins, hist)


def split_and_merge(C: np.ndarray, check: SplitCheck) -> np.ndarray:
    """Centres that split each flagged cluster in two and merge a cheap pair instead.

    For each flagged cluster (the most populous first) its centre becomes the means of
    the two sides of its valley (the cluster mean plus the axis times the mean projection
    of each side, from the histogram's bin centres); to keep ``k`` centres the pair of
    the other centres whose merge adds least SSE (Ward: ``n_a n_b / (n_a + n_b)
    |c_a - c_b|^2``; the new centres and a pair without rows are never merged) becomes
    their count-weighted mean. Lloyd rounds (:func:`refine`) then settle the model.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        ``C`` itself when nothing is flagged or no pair can merge.
    """
    C = np.array(C, dtype=np.float64)
    counts = np.asarray(check.counts, dtype=np.float64).copy()
    k = len(C)
    order = sorted(check.flagged, key=lambda j: (-counts[j], j))
    fixed: set[int] = set()
    for j in order:
        others = [a for a in range(k) if a != j and a not in fixed and counts[a] > 0]
        best = None
        for i, a in enumerate(others):
            for b in others[i + 1:]:
                cost = (counts[a] * counts[b] / (counts[a] + counts[b])
                        * float(np.sum((C[a] - C[b]) ** 2)))
                if best is None or cost < best[0]:
                    best = (cost, a, b)
        if best is None:
            break
        _, a, b = best
        h = np.asarray(check.histograms[j], dtype=np.float64)
        edges = check.bins.edges[j]
        centres = (edges[:-1] + edges[1:]) / 2
        v = check.flagged[j]
        left, right = h[:v], h[v + 1:]
        if left.sum() <= 0 or right.sum() <= 0:
            continue
        mean, axis = check.bins.means[j], check.bins.axes[j]
        merged = (counts[a] * C[a] + counts[b] * C[b]) / (counts[a] + counts[b])
        C[a] = merged
        C[b] = mean + axis * float(right @ centres[v + 1:] / right.sum())
        C[j] = mean + axis * float(left @ centres[:v] / left.sum())
        counts[a] += counts[b]
        counts[j], counts[b] = left.sum(), right.sum()
        fixed.update((a, b, j))
    return C


def refine_stats(X: np.ndarray, C: np.ndarray, threshold: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, float]:
    """A client's reply to one refinement round: per-cluster sums, counts, SSE of ``C``.

    Complete rows only; when a cluster has fewer than ``threshold`` rows (but some), the
    sums and counts are zeros (:func:`_withheld`). The SSE is over every complete row
    (a total over the client, as the evaluation's ``sse``), zero with fewer rows than
    ``threshold``.
    """
    C = np.asarray(C, dtype=np.float64)
    X = _complete(X)
    k, d = C.shape
    if not len(X):
        return np.zeros((k, d)), np.zeros(k), 0.0
    labels, d2 = assign_to_nearest(X, C)
    sums, counts = cluster_sums(X, labels, k)
    sse = float(np.sum(d2)) if len(X) >= threshold else 0.0
    if _withheld(counts, threshold):
        return np.zeros((k, d)), np.zeros(k), sse
    return sums, counts.astype(np.float64), sse


def refine(step, C: np.ndarray, rounds: int
           ) -> tuple[np.ndarray, float | None, list[float]]:
    """Federated Lloyd rounds from ``C``: at most ``rounds``, fewer at a fixed point.

    Parameters
    ----------
    step : callable
        ``step(C) -> (sums, counts, sse)``, the federation's totals of
        :func:`refine_stats` (a pure loop sums the clients' replies; a strategy exchanges).
    C : numpy.ndarray of shape (k, d)
    rounds : int

    Returns
    -------
    C : numpy.ndarray
        Of the centres sent, those of the lowest SSE (the first of equals): Lloyd's steps
        lower the SSE of the rows behind the sums, and the clients that sent zeros under
        the privacy threshold are not behind them, so a step can raise the SSE of all rows.
    sse : float or None
        Its SSE on every client's complete rows (``None``: no round).
    history : list of float
        The SSE of the centres each round was sent.
    """
    C = np.asarray(C, dtype=np.float64)
    best, best_sse = C, None
    history: list[float] = []
    for _ in range(int(rounds)):
        sums, counts, sse = step(C)
        history.append(float(sse))
        if best_sse is None or sse < best_sse:
            best, best_sse = C, float(sse)
        new = lloyd_from_totals(sums, np.rint(counts), C)
        if np.array_equal(new, C):
            break
        C = new
    return best, best_sse, history


def refine_model(step, check, C: np.ndarray, rounds: int, attempts: int = REPAIR_ATTEMPTS
                 ) -> tuple[np.ndarray, SplitCheck, dict]:
    """Refine a model: Lloyd rounds, the split check, split-and-merge repairs.

    1. :func:`refine` from ``C`` (``rounds`` at most);
    2. ``check`` on the result; while it flags clusters (at most ``attempts`` times):
       :func:`split_and_merge` and Lloyd rounds again; the repaired model is kept (and
       checked again) only when its SSE on every client's rows is lower, else the
       repairs stop.

    Parameters
    ----------
    step : callable
        ``step(C) -> (sums, counts, sse)`` (see :func:`refine`).
    check : callable
        ``check(C) -> SplitCheck`` (:func:`check_splits` in a pure loop).
    C : numpy.ndarray of shape (k, d)
    rounds : int
        Lloyd rounds per stage (at least 1).
    attempts : int, default :data:`REPAIR_ATTEMPTS`
        Split-and-merge attempts.

    Returns
    -------
    C : numpy.ndarray
        The refined model.
    result : SplitCheck
        The split check of the returned model.
    info : dict
        ``lloyd-rounds`` (all stages), ``sse-before`` (of the model as given),
        ``sse-after`` (of the returned model; both on every client's complete rows),
        ``split`` (the clusters split by the kept repairs, in order), ``repairs``
        (kept), ``attempts`` (tried).
    """
    if int(rounds) < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    C, sse, history = refine(step, C, rounds)
    result = check(C)
    info = {"lloyd-rounds": len(history), "sse-before": history[0], "split": [],
            "repairs": 0, "attempts": 0, "sse-after": sse}
    while result.flagged and info["attempts"] < attempts:
        info["attempts"] += 1
        repaired, repaired_sse, more = refine(step, split_and_merge(C, result), rounds)
        info["lloyd-rounds"] += len(more)
        if not repaired_sse < sse:
            break
        info["split"] += sorted(result.flagged)
        info["repairs"] += 1
        C, sse, result = repaired, repaired_sse, check(repaired)
        info["sse-after"] = sse
    return C, result, info


def pure_step(parts: Sequence[np.ndarray], threshold: int = 0):
    """``step(C)`` of :func:`refine` over local arrays (the clients' sums, in order)."""
    def step(C: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        replies = [refine_stats(X, C, threshold) for X in parts]
        return (sum(r[0] for r in replies), sum(r[1] for r in replies),
                float(sum(r[2] for r in replies)))
    return step


def pure_check(parts: Sequence[np.ndarray], threshold: int = 0):
    """``check(C)`` of :func:`refine_model` over local arrays (:func:`check_splits`)."""
    return lambda C: check_splits(parts, C, threshold)
