"""Diagnostics of a finished run: degenerate results detected, named, and explained.

Pure functions (layer 2, no Flower): the strategies call them at the end of every run
(:meth:`flwr_clustering.strategies.base.ClusteringStrategy.diagnose`), on the model and on
the additive statistics of the final federated evaluation (counts and sums, never a row).

What is checked, and the rule of each check:

- **non-finite entries**: centroid entries that are NaN or inf (:func:`non_finite_entries`).
- **non-empty clusters**: clusters with at least one row nearest to them, from the summed
  per-client ``cluster-counts`` (:func:`nonempty_clusters`).
- **distinct centres**: centres closer than ``DISTINCT_RTOL`` times the data's scale count
  as one (:func:`distinct_centres`). The scale is the RMS distance of the pooled rows to
  their mean, ``sqrt(SST / n)``, computed exactly from the clients' additive sums
  (:func:`total_sum_of_squares`); when the clients sent no sums, a guess from the centres
  (:func:`data_scale`). Merging is transitive (single linkage).
- **SSE / SST**: the federated SSE over the total sum of squares about the pooled mean
  (the fraction of the variance the clustering leaves unexplained; 1 for one centre at
  the mean).
- **Lloyd gain**: how much one Lloyd step from the model (each centre moved to the mean
  of the rows nearest to it) would lower the SSE, relative to the SSE, from the clients'
  per-cluster residual sums (:func:`lloyd_gain`; exact, or a lower bound where clients
  withheld a cluster under the privacy threshold). Above ``LLOYD_GAIN_RTOL`` the
  centres are not where k-means would put them and a better clustering is known to exist
  (FKM's converged runs: below 0.001). This is what reveals a poor model whose clusters
  are all well formed.
- **round cap**: an iterative run with a tolerance that stopped at its round cap before
  its convergence test held.
- **fewer centroids than k**: the model has fewer rows than ``k`` (FeCA's groups, FKM's
  uploads).
- **clients absent**: clients without a valid reply in some exchange of the run, with the
  reason; a reason that mentions the privacy threshold counts as *withheld*. FKM also
  counts the clients of the last round that uploaded no centroid (every local cluster
  under the privacy threshold).
- **consensus** (DGC): the paper's consensus distance (the largest distance between two
  nodes' versions of one centre) relative to the data's scale; above
  ``CONSENSUS_RTOL`` the nodes disagree.
- **cores** (KDC): the kBCC cores found, with the (psi, tau) used; fewer than ``k`` warns.
- **a categorical column that decides the clusters**: from the per-cluster means of its
  one-hot features (each cluster's share of each level, :func:`pooled_cluster_means`),
  every non-empty cluster has more than ``CATEGORY_PURITY`` of its rows in one level and
  the clusters do not all share that level (:func:`dominant_categories`): the clusters
  are that column's levels, whatever the measurements say.

:func:`warnings_from` turns anomalies into one sentence each, naming the cause and the
run-config option(s) that address it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "CONSENSUS_RTOL",
    "DISTINCT_RTOL",
    "LLOYD_GAIN_RTOL",
    "data_scale",
    "CATEGORY_PURITY",
    "categorical_warning",
    "distinct_centres",
    "dominant_categories",
    "lloyd_gain",
    "non_finite_entries",
    "nonempty_clusters",
    "pooled_cluster_means",
    "pooled_counts",
    "total_sum_of_squares",
    "warnings_from",
]

#: Centres closer than this times the data's scale are one centre.
DISTINCT_RTOL = 1e-6
#: DGC: a consensus distance above this times the data's scale means the nodes disagree.
CONSENSUS_RTOL = 0.1
#: A one-step Lloyd gain (relative SSE decrease) above this means the centres are not at
#: the means of their clusters. Measured on the quality benchmark's pure loops (290 runs with
#: complete rows): above 0.05 in 99 of the 107 runs whose SSE is above 1.10x centralized
#: k-means', and in 11 of the 183 within it; FKM's largest is 0.0006.
LLOYD_GAIN_RTOL = 0.05
#: A non-empty cluster with fewer rows than this share of the average cluster (``n / k``)
#: is a near-empty one: a centre that won almost no row (FeCA on breast cancer: clusters of
#: 566 and 3 rows).
TINY_SHARE = 0.05
#: A cluster with more than this share of its rows in one level of a categorical column is
#: pure in that column; when every cluster is, and not all in the same level, the column
#: decides the clustering (:func:`dominant_categories`).
CATEGORY_PURITY = 0.9


def non_finite_entries(C: np.ndarray | None) -> int:
    """Number of NaN or inf entries of a model (0 for ``None``)."""
    if C is None:
        return 0
    return int(np.size(C) - np.count_nonzero(np.isfinite(np.asarray(C, dtype=np.float64))))


def pooled_counts(stats: Sequence[Mapping[str, Any]], k: int) -> np.ndarray | None:
    """Sum the clients' ``cluster-counts`` (length ``k``); ``None`` if a client sent none.

    Shorter arrays are zero-padded; counts beyond ``k`` are kept (the array is then longer).
    """
    if not stats or any("cluster-counts" not in s for s in stats):
        return None
    arrays = [np.asarray(s["cluster-counts"], dtype=np.int64).ravel() for s in stats]
    total = np.zeros(max([k, *[len(a) for a in arrays]]), dtype=np.int64)
    for a in arrays:
        total[: len(a)] += a
    return total


def nonempty_clusters(counts: np.ndarray | None) -> int | None:
    """Clusters with at least one row (``None`` when the counts are unknown)."""
    if counts is None:
        return None
    return int(np.count_nonzero(np.asarray(counts) > 0))


def total_sum_of_squares(stats: Sequence[Mapping[str, Any]]) -> float | None:
    """The pooled total sum of squares ``sum_x ||x - mean||^2``, exactly, from client sums.

    Every client sends ``num-examples`` ``n_i``, ``sum-x`` (the sum of its rows, ``(d,)``)
    and ``sst-local`` (its rows' sum of squares about its own mean). With
    ``mu_i = sum-x / n_i`` and ``mu`` the pooled mean,
    ``SST = sum_i sst-local_i + sum_i n_i ||mu_i - mu||^2`` (the within/between split),
    which is exact and avoids the cancellation of ``sum ||x||^2 - n ||mu||^2``.

    Returns
    -------
    float or None
        ``None`` if a client lacks one of the sums (or they disagree in length), or no row.
    """
    keys = ("num-examples", "sum-x", "sst-local")
    if not stats or any(key not in s for s in stats for key in keys):
        return None
    n = np.array([int(s["num-examples"]) for s in stats], dtype=np.float64)
    sums = [np.asarray(s["sum-x"], dtype=np.float64).ravel() for s in stats]
    if len({len(a) for a in sums}) != 1 or n.sum() <= 0:
        return None
    sums_array = np.stack(sums)
    mean = sums_array.sum(axis=0) / n.sum()
    between = 0.0
    for n_i, s_i in zip(n, sums_array, strict=True):
        if n_i > 0:
            between += float(n_i) * float(np.sum((s_i / n_i - mean) ** 2))
    return float(math.fsum(float(s["sst-local"]) for s in stats) + between)


def lloyd_gain(stats: Sequence[Mapping[str, Any]]) -> tuple[float | None, int]:
    """A lower bound of the SSE decrease of one Lloyd step from the model, over the SSE.

    With every client's ``cluster-residuals`` ``R_ij`` (the sum of ``x - c_j`` over its rows
    nearest to ``c_j``), ``cluster-counts`` ``n_ij`` and ``sse``, moving every centre to the
    mean of its rows (the assignment fixed; reassigning can only lower the SSE further)
    lowers the SSE by exactly ``sum_j ||R_j||^2 / n_j`` with ``R_j = sum_i R_ij`` and
    ``n_j = sum_i n_ij``; with masked clients, feature by feature over the rows that
    observe it (a client's NaN residual columns are the features it does not observe).

    A client withholds the residual of a cluster under the privacy threshold (a whole NaN
    row). Its part is then bounded, not guessed: by Cauchy-Schwarz
    ``||R_ij|| <= sqrt(n_ij * sse_i)``, so ``||R_j|| >= ||sum of the sent R_ij|| - sum of
    those bounds``, and the cluster contributes the square of that (0 if negative) over
    ``n_j``. With masked clients a cluster with a withheld part contributes 0 (the counts
    per feature are then unknown). The result is exact when nothing is withheld and a
    lower bound otherwise: it never overstates the gain. Divided by the federation's SSE.

    Returns
    -------
    gain : float or None
        ``None`` when no client sent residuals or the SSE is 0.
    exact : int
        The non-empty clusters whose term is exact (no part withheld).
    """
    if not stats or any("cluster-counts" not in s or "sse" not in s for s in stats):
        return None, 0
    counts = [np.asarray(s["cluster-counts"], dtype=np.float64).ravel() for s in stats]
    k = len(counts[0])
    if any(len(c) != k for c in counts):
        return None, 0
    n = np.sum(counts, axis=0)
    slack = np.zeros(k)
    masked = False
    R = N = None
    for s, c in zip(stats, counts, strict=True):
        sse_i = max(float(s["sse"]), 0.0)
        r = s.get("cluster-residuals")
        r = None if r is None else np.asarray(r, dtype=np.float64)
        if r is None or r.ndim != 2 or len(r) != k:
            slack += np.sqrt(c * sse_i)  # nothing sent: every cluster of it is bounded
            continue
        if R is not None and r.shape != R.shape:
            return None, 0
        finite = np.isfinite(r)
        held = ~finite.any(axis=1) & (c > 0)
        masked |= bool((finite.any(axis=1) & ~finite.all(axis=1)).any())
        slack += np.where(held, np.sqrt(c * sse_i), 0.0)
        part = np.where(finite, r, 0.0)
        rows = np.where(finite | held[:, None], c[:, None], 0.0)
        R = part if R is None else R + part
        N = rows if N is None else N + rows
    sse = math.fsum(float(s["sse"]) for s in stats)
    exact = (n > 0) & (slack == 0)
    if R is None or sse <= 0:
        return None, int(exact.sum())
    if masked:
        Rc, Nc = R[exact], N[exact]
        gain = float(np.sum(np.divide(Rc**2, Nc, out=np.zeros_like(Rc), where=Nc > 0)))
    else:
        norm = np.sqrt(np.sum(R**2, axis=1))
        bound = np.maximum(norm - slack, 0.0) ** 2
        gain = float(np.sum(np.divide(bound, n, out=np.zeros_like(bound), where=n > 0)))
    return gain / sse, int(exact.sum())


def data_scale(sst: float | None, n: int | None, C: np.ndarray | None = None) -> float | None:
    """The data's scale: ``sqrt(SST / n)``, else from the centres ``C``.

    Without the clients' sums (no final evaluation, or rows with missing features) the
    scale is the larger of the centres' RMS distance to their mean and their RMS norm: a
    guess, which cannot see a collapse of every centre near the origin. Returns ``None``
    when neither is available.
    """
    if sst is not None and n:
        return math.sqrt(max(sst, 0.0) / n)
    if C is None or len(C) == 0:
        return None
    C = np.asarray(C, dtype=np.float64)
    rows = C[np.isfinite(C).all(axis=1)]
    if len(rows) == 0:
        return None
    spread = float(np.sqrt(np.mean(np.sum((rows - rows.mean(axis=0)) ** 2, axis=1))))
    return max(spread, float(np.sqrt(np.mean(np.sum(rows**2, axis=1)))))


def distinct_centres(C: np.ndarray | None, scale: float | None,
                     rtol: float = DISTINCT_RTOL) -> int:
    """Number of distinct centres: closer than ``rtol * scale`` means the same centre.

    Centres are merged transitively (connected components of the "closer than the
    tolerance" graph, :func:`scipy.sparse.csgraph.connected_components`). A centre with a
    NaN or inf entry counts on its own. ``scale`` ``None`` or 0: only equal centres merge.
    """
    if C is None or len(C) == 0:
        return 0
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial.distance import pdist, squareform

    C = np.asarray(C, dtype=np.float64)
    finite = np.isfinite(C).all(axis=1)
    rows = C[finite]
    bad = int(np.count_nonzero(~finite))
    if len(rows) <= 1:
        return len(rows) + bad
    tol = rtol * scale if scale else 0.0
    close = squareform(pdist(rows)) <= tol
    n_components, _ = connected_components(close, directed=False)
    return int(n_components) + bad


def _keys(advice: Mapping[str, Sequence[str]], anomaly: str) -> str:
    keys = list(advice.get(anomaly, ()))
    if not keys:
        return ""
    return " or ".join(f"'{k}'" for k in keys)


def warnings_from(diag: Mapping[str, Any], advice: Mapping[str, Sequence[str]],
                  algorithm: str = "") -> list[str]:
    """One sentence per anomaly of ``diag``, naming its cause and the option(s) to change.

    Parameters
    ----------
    diag : mapping
        The diagnostics (see :meth:`ClusteringStrategy.diagnose
        <flwr_clustering.strategies.base.ClusteringStrategy.diagnose>`): ``k``,
        ``centroids``, ``non-finite-entries``, ``non-empty-clusters``, ``distinct-centres``,
        ``round-cap-hit``, ``last-shift``, ``tol``, ``absent``, ``empty-uploads``,
        ``consensus-relative``, ``cores``, ``split-clusters``, ``split-counts``,
        ``refine``.
    advice : mapping
        ``{anomaly: run-config keys}`` for the anomalies ``non-finite``, ``empty``,
        ``collapse``, ``fewer-centroids``, ``round-cap``, ``withheld``, ``dropped``,
        ``consensus``, ``cores``, ``split``.
    algorithm : str
        The algorithm's name, to start the sentences.

    Returns
    -------
    list of str
        Empty when nothing is wrong.
    """
    who = f"{algorithm}: " if algorithm else ""
    out: list[str] = []

    def say(text: str, anomaly: str, *, prefix: bool = True) -> None:
        keys = _keys(advice, anomaly)
        out.append(f"{who if prefix else ''}{text}"
                   + (f"; option{'s' if ' or ' in keys else ''} to change: {keys}"
                      if keys else ""))

    k = diag.get("k")
    m = diag.get("centroids")
    bad = diag.get("non-finite-entries") or 0
    if bad:
        say(f"the model has {bad} NaN/inf entr{'y' if bad == 1 else 'ies'} (a centre with a "
            "feature no client observed in its cluster cannot label a complete row)",
            "non-finite")
    if k is not None and m is not None and m < k:
        say(f"{algorithm or 'the algorithm'} returns {m} centroids instead of k={k}",
            "fewer-centroids", prefix=False)
    distinct = diag.get("distinct-centres")
    if distinct is not None and m is not None and distinct < m:
        say(f"only {distinct} distinct centres of {m} (centres closer than "
            f"{diag.get('distinct-tolerance', 0):.3g} merged: the centres collapsed)",
            "collapse")
    nonempty = diag.get("non-empty-clusters")
    if nonempty is not None and m is not None and nonempty < m:
        say(f"only {nonempty} of {m} clusters are non-empty (no row is nearest to "
            f"{m - nonempty} centre{'' if m - nonempty == 1 else 's'})", "empty")
    counts = diag.get("cluster-counts")
    if counts and m is not None and sum(counts) > 0:
        floor = TINY_SHARE * sum(counts) / len(counts)
        tiny = [c for c in counts if 0 < c < floor]
        if tiny:
            say(f"{len(tiny)} cluster(s) hold almost no row ({', '.join(map(str, sorted(tiny)))} "
                f"of {sum(counts)} rows; below {TINY_SHARE:.0%} of the average cluster of "
                f"{sum(counts) / len(counts):.0f}): a centre that won next to nothing, as an "
                "empty one", "empty")
    gain = diag.get("lloyd-gain")
    if gain is not None and gain > LLOYD_GAIN_RTOL:
        used, total = diag.get("lloyd-gain-clusters"), diag.get("non-empty-clusters")
        over = (f" (at least: {total - used} of {total} clusters were partly withheld under "
                "the privacy threshold and only bounded)"
                if used is not None and total and used < total else "")
        say(f"the centres are not at the means of their clusters: one Lloyd step would lower "
            f"the SSE by {gain:.1%}{over}, so a clustering better than this model exists "
            "(fkm reaches it)", "lloyd-gain")
    if diag.get("round-cap-hit"):
        shift = diag.get("last-shift")
        shift_text = ("unknown (no earlier model to compare)" if shift is None
                      else f"{shift:.3g}")
        say(f"stopped at the round cap ({diag.get('rounds')} rounds) without converging: the "
            f"last shift {shift_text} is above tol={diag.get('tol')}", "round-cap")
    absent = diag.get("absent") or {}
    withheld = {c: why for c, why in absent.items() if "privacy" in why}
    dropped = {c: why for c, why in absent.items() if c not in withheld}
    if withheld:
        say(f"{len(withheld)} client(s) withheld their reply under the privacy threshold "
            f"({'; '.join(f'{c}: {why}' for c, why in withheld.items())}); the model is "
            "built without them", "withheld")
    empty_uploads = diag.get("empty-uploads") or 0
    if empty_uploads:
        say(f"{empty_uploads} client(s) uploaded no centroid in the last round (every local "
            "cluster had fewer rows than the privacy threshold): their rows shaped no "
            "centroid", "withheld")
    if dropped:
        say(f"{len(dropped)} client(s) sent no valid reply "
            f"({'; '.join(f'{c}: {why}' for c, why in dropped.items())}); the model is built "
            "without them", "dropped")
    rel = diag.get("consensus-relative")
    if rel is not None and rel > CONSENSUS_RTOL:
        say(f"the nodes did not reach consensus: consensus distance "
            f"{diag.get('consensus-distance', float('nan')):.3g} is {rel:.3g} times the data's "
            f"scale (above {CONSENSUS_RTOL})", "consensus")
    cores = diag.get("cores")
    if cores is not None and k is not None and cores < k:
        say(f"kBCC found {cores} cores, fewer than k={k}", "cores")
    split = diag.get("split-clusters") or []
    if split:
        rows = diag.get("split-counts") or []
        which = ", ".join(f"{j} ({n} rows)" for j, n in zip(split, rows, strict=False))
        refined = diag.get("refine")
        if refined is not None:
            text = (f"after refinement ({refined.get('repairs', 0)} split-and-merge "
                    f"repair(s) kept of {refined.get('attempts', 0)} tried) cluster(s) "
                    f"{which} still look like two groups along their main axis; no split "
                    "and merge lowers the SSE, so the centres cannot separate them at this "
                    "k (a larger k may)")
            out.append(f"{who}{text}; option to change: 'k'")
        else:
            say(f"cluster(s) {which} look like two groups along their main axis (a valley "
                "between two modes of their rows): the model may sit at a poor local "
                "optimum (a centre between two groups while another group has two "
                "centres), or k is too small", "split")
    return out


def pooled_cluster_means(stats: Sequence[Mapping[str, Any]], centroids: Any
                         ) -> np.ndarray | None:
    """Every cluster's mean in the model's space, from the clients' per-cluster sums.

    ``c_j + R_j / n_j`` with ``R_j`` the summed ``cluster-residuals`` and ``n_j`` the
    summed ``cluster-counts`` of the clients that sent cluster ``j``'s residuals (a client
    withholds a cluster under the privacy threshold: a NaN row), as the profile computes it.

    Returns
    -------
    numpy.ndarray of shape (k, d) or None
        NaN rows for clusters no client sent; ``None`` when a client sent no residuals
        (or they do not fit the model).
    """
    if centroids is None or not stats:
        return None
    C = np.asarray(centroids, dtype=np.float64)
    if C.ndim != 2:
        return None
    k, d = C.shape
    n, R = np.zeros(k), np.zeros((k, d))
    for s in stats:
        if "cluster-counts" not in s or "cluster-residuals" not in s:
            return None
        counts = np.asarray(s["cluster-counts"], dtype=np.float64).ravel()
        r = np.asarray(s["cluster-residuals"], dtype=np.float64)
        if counts.shape != (k,) or r.shape != (k, d):
            return None
        sent = np.isfinite(r).all(axis=1)
        n[sent] += counts[sent]
        R[sent] += r[sent]
    with np.errstate(invalid="ignore", divide="ignore"):
        return C + R / np.where(n > 0, n, np.nan)[:, None]


def dominant_categories(
    categories: Sequence[tuple[str, Sequence[str]]],
    shares: Any,
    counts: Any,
    purity: float = CATEGORY_PURITY,
) -> dict[str, list[float]]:
    """The categorical columns whose levels the clusters follow.

    A column dominates when at least two clusters have rows and known shares, each such
    cluster has more than ``purity`` of its rows in one of the column's levels, and these
    levels are not all the same one (the clusters split by the column).

    Parameters
    ----------
    categories : sequence of (column, levels)
        The categorical columns and their levels, in the order of their one-hot features.
    shares : array-like of shape (k, sum of the numbers of levels)
        Per cluster, the mean of each one-hot feature in original units (its share of
        each level; NaN where unknown).
    counts : array-like of shape (k,)
        Rows per cluster.
    purity : float
        The share of a cluster's rows in one level above which it is pure.

    Returns
    -------
    dict
        ``{column: per-cluster share of its main level}`` (non-empty clusters, in order)
        for every dominating column; empty when none dominates.
    """
    P = np.asarray(shares, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64).ravel()
    out: dict[str, list[float]] = {}
    start = 0
    for column, levels in categories:
        block = P[:, start:start + len(levels)]
        start += len(levels)
        known = (n > 0) & np.isfinite(block).all(axis=1)
        if known.sum() < 2:
            continue
        main = block[known].max(axis=1)
        if np.all(main > purity) and len(set(block[known].argmax(axis=1).tolist())) > 1:
            out[str(column)] = [float(m) for m in np.minimum(main, 1.0)]
    return out


def categorical_warning(column: str, main_shares: Sequence[float], weight: str) -> str:
    """The sentence for a categorical column that decides the clusters.

    Names the column and the clusters' shares of their main level (no level: a level is
    a value of the sites' data), and what gives the measurements their say back.
    """
    shares = ", ".join(f"{m:.0%}" for m in main_shares)
    advice = ("categorical-weight='balanced' gives it the weight of one standardised "
              "feature (with 'standard' each of its levels weighs as much), or "
              if weight == "standard" else "")
    return (f"the clusters follow the categorical column {column!r}: every cluster has "
            f"more than {CATEGORY_PURITY:.0%} of its rows in one of its levels ({shares}), "
            "and the clusters split its levels, so the clustering mostly reproduces that "
            f"column; if the measurements should decide, {advice}leave it out of "
            "categorical-columns (or cluster each of its levels apart)")
