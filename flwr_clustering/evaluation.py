"""The federated evaluation's statistics: what a client sends, the checks, the aggregation.

Every client calls :func:`local_evaluation_stats` on its own data with the global model
and sends the returned counts and partial sums (never a data row); the server checks each
reply (:func:`check_evaluation_stats`) and calls :func:`aggregate_evaluation_stats`.
Contingency tables, SSE and the simplified silhouette are sums over points, so the global
ARI, NMI, purity, SSE and simplified silhouette equal what
:func:`~flwr_clustering.metrics.centralized_metrics` computes on the pooled data with the
same centroids (Garst & Reinders, Sec. 3).

The paper's own ARI for federated methods is different: the sample-weighted mean of
per-client ARIs, ``sum_i n_i ARI_i / sum_i n_i``. It is reported as
``"ari-client-weighted"``.

Layer 2: NumPy / SciPy / scikit-learn only, no Flower import.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .algorithms.lloyd import (
    check_data,
    cluster_sums,
    distance_blocks,
    nearest,
    row_blocks,
)
from .metrics import (
    _silhouette_values,
    accuracy_from_contingency,
    ari_from_contingency,
    contingency,
    nmi_from_contingency,
    purity_from_contingency,
    purity_per_cluster_from_contingency,
    sum_contingencies,
)

__all__ = [
    "EVALUATION_STATS",
    "aggregate_evaluation_stats",
    "check_evaluation_stats",
    "evaluation_stats_from_blocks",
    "evaluation_stats_from_distances",
    "label_evaluation_stats",
    "local_evaluation_stats",
    "moment_stats",
    "residual_stats",
]


def local_evaluation_stats(
    X: np.ndarray, C: np.ndarray, y: np.ndarray | None = None, n_classes: int | None = None,
    min_rows: int = 2, profile: bool = False,
) -> dict[str, float | int | np.ndarray]:
    """Additive evaluation statistics of centroids ``C`` on one client's data.

    Only counts and sums leave the client, never a row.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The client's data (may be empty).
    C : array_like of shape (k, d)
        Global centroids.
    y : array_like of shape (n,), optional
        True classes, integers in ``[0, n_classes)``.
    n_classes : int, optional
        Width of the contingency table; defaults to ``y.max() + 1`` (0 for empty ``y``).
        Clients may differ: the server zero-pads.
    min_rows : int, default 2
        The privacy threshold: with fewer rows, ``"sum-x"`` and ``"sst-local"`` are not
        sent (:func:`moment_stats`).
    profile : bool, default False
        Also the per-cluster sums of squared deviations (``"cluster-sq-residuals"``,
        :func:`residual_stats`) for the cluster profile.

    Returns
    -------
    dict
        ``"num-examples"`` (int), ``"sse"`` (float), ``"silhouette-sum"`` (float, sum of
        simplified silhouette values), ``"cluster-counts"`` (int64, length k), ``"sum-x"`` and
        ``"sst-local"`` (:func:`moment_stats`, for the pooled total sum of squares),
        ``"cluster-residuals"`` (:func:`residual_stats`, for the Lloyd-step check), and with ``y``:
        ``"contingency"`` (int64, (k, n_classes)) and ``"ari-local"`` (float, the paper's
        per-client ARI of the nearest-centroid labels vs ``y``; 0.0 for an empty client,
        which has weight 0).

    Raises
    ------
    ValueError
        On malformed data, centroids or labels.
    """
    X = check_data(X, dtype=None)  # float32 rows stay float32; the sums are float64
    # distances one row block at a time: memory flat in the client's rows, values equal
    # to those of the whole matrix (see squared_distances)
    stats, labels = evaluation_stats_from_blocks(distance_blocks(X, C), len(X),
                                                 len(np.asarray(C)), y, n_classes)
    stats.update(moment_stats(X, min_rows))
    stats.update(residual_stats(X, C, labels, min_rows, squares=profile))
    return stats


def residual_stats(
    X: np.ndarray, C: np.ndarray, labels: np.ndarray, min_rows: int = 2,
    squares: bool = False,
) -> dict[str, np.ndarray]:
    """A client's per-cluster residual sums, for the Lloyd-step check (never a row).

    ``cluster-residuals[j] = sum over the rows x nearest to c_j of (x - c_j)``. Summed over
    the clients, ``||R_j||^2 / n_j`` is exactly how much moving ``c_j`` to the mean of its
    rows would lower the SSE (:func:`flwr_clustering.diagnostics.lloyd_gain`). A residual
    sum with the cluster's count and centre gives the sum of the cluster's rows, so the
    privacy threshold applies: the row of a cluster with fewer than ``min_rows`` rows is
    NaN (withheld). Withholding is not enough on its own: the client's total ``sum-x``
    minus the clusters it sends would give the withheld clusters' row sum, so when those
    hold fewer than ``min_rows`` rows together the smallest other cluster is withheld too.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The client's rows; a masked client's unobserved features are NaN columns, whose
        residuals are NaN (the server then counts the client's rows on the features it
        observes only).
    C : array_like of shape (k, d)
        Global centroids.
    labels : array_like of shape (n,)
        Nearest centroid of every row.
    min_rows : int, default 2
        The privacy threshold.
    squares : bool, default False
        Also ``"cluster-sq-residuals"``: per cluster and feature the sum of
        ``(x - c_j)**2`` over its rows (the cluster profile's spread: the final
        evaluation asks for it), withheld like the residuals.

    Returns
    -------
    dict
        ``{"cluster-residuals": (k, d) float64}`` (and ``"cluster-sq-residuals"``), whole
        NaN rows for the withheld clusters, NaN columns for unobserved features.
    """
    X = _float_rows(X)
    C = np.asarray(C, dtype=np.float64)
    if X.ndim != 2 or len(X) == 0:
        empty = {"cluster-residuals": np.zeros_like(C)}
        return {**empty, "cluster-sq-residuals": np.zeros_like(C)} if squares else empty
    p = max(int(min_rows), 1)
    seen = np.ones(X.shape[1], dtype=bool)  # a masked client's observed features
    for rows in row_blocks(len(X), X.shape[1]):
        seen &= ~np.isnan(X[rows]).any(axis=0)
    labels = np.asarray(labels, dtype=np.int64)
    if seen.all():  # every unmasked client: no column copy of the rows
        sums, counts = cluster_sums(X, labels, len(C))
    else:  # the observed columns, one row block at a time (no copy of all the rows)
        sums, counts = np.zeros((len(C), int(seen.sum()))), np.zeros(len(C), dtype=np.int64)
        for rows in row_blocks(len(X), X.shape[1]):
            block_sums, block_counts = cluster_sums(X[rows][:, seen], labels[rows], len(C))
            sums += block_sums
            counts += block_counts
    withheld = (counts > 0) & (counts < p)
    if 0 < counts[withheld].sum() < p:
        others = np.flatnonzero((counts > 0) & ~withheld)
        if len(others):
            withheld[others[np.argmin(counts[others])]] = True
    # a centre without a value on an observed feature was measured on fewer features
    # (rescaled): its residual would not match the SSE, so it is left out as withheld
    withheld |= (counts > 0) & np.isnan(C[:, seen]).any(axis=1)
    residuals = np.full(C.shape, np.nan)
    residuals[:, seen] = sums - counts[:, None] * C[:, seen]
    residuals[withheld] = np.nan
    if not squares:
        return {"cluster-residuals": residuals}
    # the squared deviations from the row's own centre, one row block at a time
    sq = np.zeros((len(C), int(seen.sum())))
    Cs = np.nan_to_num(C[:, seen])
    for rows in row_blocks(len(X), X.shape[1]):
        D = np.asarray(X[rows][:, seen], dtype=np.float64) - Cs[labels[rows]]
        sq += cluster_sums(D * D, labels[rows], len(C))[0]
    squared = np.full(C.shape, np.nan)
    squared[:, seen] = sq
    squared[withheld] = np.nan
    return {"cluster-residuals": residuals, "cluster-sq-residuals": squared}


def _float_rows(X: np.ndarray) -> np.ndarray:
    """The rows as float64, or as they are if float32 (the sums are taken in float64)."""
    X = np.asarray(X)
    return X if X.dtype in (np.float32, np.float64) else X.astype(np.float64)


def moment_stats(X: np.ndarray, min_rows: int = 2) -> dict[str, float | np.ndarray]:
    """A client's sums for the pooled total sum of squares (never a row).

    Parameters
    ----------
    X : array_like of shape (n, d)
        The client's data (may be empty).

    Returns
    -------
    dict
        ``"sum-x"`` (float64, ``(d,)``: the sum of the rows) and ``"sst-local"`` (float: the
        rows' sum of squares about their own mean). Additive through
        :func:`flwr_clustering.diagnostics.total_sum_of_squares`. A client with fewer
        than ``min_rows`` rows (the privacy threshold) sends neither: for one row ``sum-x``
        would be that row. The server then falls back to a scale guessed from the centres.
    """
    X = _float_rows(X)
    if X.ndim == 2 and 0 < len(X) < max(int(min_rows), 1):
        return {}
    if X.ndim != 2 or len(X) == 0:
        d = X.shape[1] if X.ndim == 2 else 0
        return {"sum-x": np.zeros(d), "sst-local": 0.0}
    total = X.sum(axis=0, dtype=np.float64)
    mean = total / len(X)
    # the squared deviations one row block at a time (no copy of the rows); beyond one
    # block the blocks' sums are added in order (float round-off against one np.sum)
    sst = 0.0
    for rows in row_blocks(len(X), X.shape[1]):
        sst += float(np.sum((X[rows] - mean) ** 2))
    return {"sum-x": total, "sst-local": sst}


def evaluation_stats_from_distances(
    d2: np.ndarray, y: np.ndarray | None = None, n_classes: int | None = None
) -> dict[str, float | int | np.ndarray]:
    """:func:`local_evaluation_stats` from a client's own squared distances.

    For clients whose distances are not plain Euclidean on full rows (e.g. computed on the
    client's observed features only).

    Parameters
    ----------
    d2 : numpy.ndarray of shape (n, k)
        Squared distances of every local row to every global centroid.
    y : array_like of shape (n,), optional
        True classes.
    n_classes : int, optional
        Width of the contingency table.

    Returns
    -------
    dict
        As :func:`local_evaluation_stats`.
    """
    labels, dist = nearest(d2)
    return _nearest_evaluation_stats(labels, dist, _silhouette_values(d2), d2.shape[1], y,
                                     n_classes)


def evaluation_stats_from_blocks(
    blocks: Iterable[tuple[slice, np.ndarray]], n: int, k: int, y: np.ndarray | None = None,
    n_classes: int | None = None,
) -> tuple[dict[str, float | int | np.ndarray], np.ndarray]:
    """:func:`evaluation_stats_from_distances` from the distances in row blocks.

    Memory stays flat in ``n``: only per-row vectors are kept, never the ``(n, k)``
    matrix. The statistics equal those of the whole matrix exactly (``math.fsum`` is
    exactly rounded, so blocking does not change the sums).

    Parameters
    ----------
    blocks : iterable of (slice, numpy.ndarray)
        ``(rows, d2)`` covering ``[0, n)``, e.g.
        :func:`~flwr_clustering.algorithms.lloyd.distance_blocks`.
    n : int
        The number of rows.
    k : int
        The number of centroids.
    y, n_classes
        As in :func:`local_evaluation_stats`.

    Returns
    -------
    stats : dict
        As :func:`evaluation_stats_from_distances`.
    labels : numpy.ndarray of shape (n,), int64
        The nearest centroid of every row.
    """
    labels = np.empty(n, dtype=np.int64)
    dist, sil = np.empty(n), np.empty(n)
    for rows, d2 in blocks:
        labels[rows], dist[rows] = nearest(d2)
        sil[rows] = _silhouette_values(d2)
    return _nearest_evaluation_stats(labels, dist, sil, k, y, n_classes), labels


def _nearest_evaluation_stats(labels, dist, silhouettes, k, y, n_classes) -> dict[str, Any]:
    # math.fsum is exactly rounded, so the sums do not depend on how the rows were blocked
    return {
        **label_evaluation_stats(labels, k, y, n_classes),
        "sse": math.fsum(dist),
        "silhouette-sum": math.fsum(silhouettes),
    }


def label_evaluation_stats(
    labels: np.ndarray, k: int, y: np.ndarray | None = None, n_classes: int | None = None
) -> dict[str, float | int | np.ndarray]:
    """Additive statistics of a client's cluster labels (no distances, never a row).

    For algorithms whose labels do not come from nearest centroids (KDC's distributional
    assignment): counts and, with ``y``, the contingency table.

    Parameters
    ----------
    labels : array_like of shape (n,)
        Cluster of every local row, integers in ``[0, k)``.
    k : int
        Number of clusters.
    y : array_like of shape (n,), optional
        True classes.
    n_classes : int, optional
        Width of the contingency table.

    Returns
    -------
    dict
        ``"num-examples"``, ``"cluster-counts"`` and, with ``y``, ``"contingency"`` and
        ``"ari-local"`` (as :func:`local_evaluation_stats`).
    """
    labels = np.asarray(labels, dtype=np.int64)
    stats: dict[str, float | int | np.ndarray] = {
        "num-examples": len(labels),
        "cluster-counts": np.bincount(labels, minlength=k).astype(np.int64),
    }
    if y is not None:
        y = np.asarray(y)
        if n_classes is None:
            n_classes = int(y.max()) + 1 if y.size else 0
        table = contingency(labels, y, k, n_classes)
        stats["contingency"] = table
        stats["ari-local"] = ari_from_contingency(table) if len(labels) else 0.0
    return stats


def _count_array(stats: dict, key: str, ndim: int) -> np.ndarray:
    """A statistic that holds counts: ``ndim``-D, integers, non-negative."""
    a = np.asarray(stats[key])
    if a.ndim != ndim:
        raise ValueError(f"{key} must be {ndim}-D, got shape {a.shape}")
    if a.dtype.kind not in "iub" and not (
        a.dtype.kind == "f" and np.isfinite(a).all() and np.array_equal(a, np.round(a))
    ):
        raise ValueError(f"{key} must hold integers, got dtype {a.dtype}")
    if a.size and a.min() < 0:
        raise ValueError(f"{key} must be non-negative, got {a.min()}")
    return a.astype(np.int64)


def check_evaluation_stats(
    stats: dict[str, Any], *, k_max: int | None = None, n_features: int | None = None
) -> None:
    """Check one client's evaluation statistics before they enter the global metrics.

    The server trusts nothing a client says about itself beyond what it can check:
    every count is a non-negative integer and no count, table or label list claims more
    rows than the client's ``num-examples``; a per-cluster statistic has at most
    ``k_max`` rows (the model's clusters) and ``n_features`` columns; sums and distances
    are finite (NaN only where the protocol withholds a value: a residual row under the
    privacy threshold, a masked client's unobserved feature). Unknown keys are left alone.

    Parameters
    ----------
    stats : dict
        The reply's statistics (``num-examples`` and any of the keys of
        :func:`local_evaluation_stats` and :func:`label_evaluation_stats`, ``labels``,
        ``model-contingency``).
    k_max : int, optional
        The most clusters the evaluated model has.
    n_features : int, optional
        The federation's feature dimension.

    Raises
    ------
    ValueError
        Naming the statistic and the rule it breaks.
    """
    n = stats.get("num-examples")
    if n is None:
        return
    if isinstance(n, bool) or not float(n).is_integer() or float(n) < 0:
        raise ValueError(f"num-examples must be a non-negative integer, got {n!r}")
    n = int(n)
    for key in ("sse", "sst-local"):
        if key in stats:
            v = float(stats[key])
            if np.isinf(v) or v < 0:
                raise ValueError(f"{key} must be finite and non-negative, got {v!r}")
    if "silhouette-sum" in stats:
        v = float(stats["silhouette-sum"])
        if not np.isfinite(v) or abs(v) > n * (1 + 1e-9):
            raise ValueError(f"silhouette-sum must be finite and at most num-examples={n} "
                             f"in size (silhouettes lie in [-1, 1]), got {v!r}")
    if "ari-local" in stats:
        v = float(stats["ari-local"])
        if not np.isfinite(v) or abs(v) > 1 + 1e-9:
            raise ValueError(f"ari-local must lie in [-1, 1], got {v!r}")
    k = None
    if "cluster-counts" in stats:
        counts = _count_array(stats, "cluster-counts", 1)
        k = len(counts)
        if counts.sum() > n:
            raise ValueError(f"cluster-counts sum to {counts.sum()}, more than the client's "
                             f"num-examples={n}")
    if k_max is not None and k is not None and k > k_max:
        raise ValueError(f"cluster-counts has {k} clusters, the model {k_max}")
    tables = {"contingency": 2, "model-contingency": 3}
    for key, ndim in tables.items():
        if key not in stats:
            continue
        table = _count_array(stats, key, ndim)
        per_model = table.reshape((-1, *table.shape[-2:])) if ndim == 3 else table[None]
        if k is not None and table.shape[-2] != k:
            raise ValueError(f"{key} has {table.shape[-2]} cluster rows, cluster-counts {k}")
        if k_max is not None and table.shape[-2] > k_max:
            raise ValueError(f"{key} has {table.shape[-2]} cluster rows, the model {k_max}")
        if per_model.size and per_model.sum(axis=(1, 2)).max() > n:
            raise ValueError(f"{key} counts {per_model.sum(axis=(1, 2)).max()} rows, more "
                             f"than the client's num-examples={n}")
    for key, ndim in (("sum-x", 1), ("cluster-residuals", 2)):
        if key not in stats:
            continue
        a = np.asarray(stats[key])
        if a.ndim != ndim or a.dtype.kind not in "fiu":
            raise ValueError(f"{key} must be a {ndim}-D numeric array, got shape {a.shape} "
                             f"({a.dtype})")
        if np.isinf(a).any():
            raise ValueError(f"{key} contains inf")
        if n_features is not None and a.shape[-1] != n_features:
            raise ValueError(f"{key} has {a.shape[-1]} features, the federation "
                             f"{n_features}")
        if ndim == 2 and ((k is not None and len(a) != k)
                          or (k_max is not None and len(a) > k_max)):
            raise ValueError(f"{key} has {len(a)} rows, expected {k if k is not None else k_max}"
                             " (one per cluster)")
    if "labels" in stats:
        labels = _count_array(stats, "labels", 1)
        if len(labels) != n:
            raise ValueError(f"labels has {len(labels)} entries, the client's "
                             f"num-examples={n}")
        top = k if k is not None else k_max
        if top is not None and labels.size and labels.max() >= top:
            raise ValueError(f"labels must lie in [0, {top}), got {labels.max()}")


#: The statistics every client's evaluation reply must carry to enter the global metrics
#: (:func:`local_evaluation_stats` also sends ``contingency`` when it has labels).
EVALUATION_STATS: tuple[str, ...] = ("num-examples", "sse", "silhouette-sum")


def aggregate_evaluation_stats(stats: Sequence[dict]) -> dict[str, float]:
    """Combine clients' :func:`local_evaluation_stats` into global metrics (exactly).

    Parameters
    ----------
    stats : sequence of dict
        One dict per client.

    Returns
    -------
    dict
        ``"num-examples"``; when every client sent distances (``"sse"``), ``"sse"``,
        ``"inertia"`` (= sse), ``"mean-sq-distance"`` (sse / n), ``"simplified-silhouette"``
        (sum of silhouette sums / n); when every client
        sent a contingency table and n > 0, also ``"ari"``, ``"nmi"``, ``"purity"``,
        ``"purity-per-cluster"``, ``"accuracy"`` (Hungarian-matched) from the
        summed table (equal to the pooled values) and ``"ari-client-weighted"``
        (``sum_i n_i ARI_i / sum_i n_i``, the paper's reported ARI; clients with no
        example contribute nothing). Ratios are NaN when n = 0.

    Raises
    ------
    ValueError
        If a dict lacks ``"num-examples"``, or has only one of ``"sse"`` and
        ``"silhouette-sum"``.
    """
    for i, s in enumerate(stats):
        missing = {"num-examples"} - set(s)
        if missing or ("sse" in s) != ("silhouette-sum" in s):
            raise ValueError(f"evaluation stats of client {i} lack "
                             f"{sorted(missing or {'sse', 'silhouette-sum'} - set(s))}")
    n = sum(int(s["num-examples"]) for s in stats)
    out: dict[str, float] = {"num-examples": n}
    if all("sse" in s for s in stats):
        total_sse = math.fsum(float(s["sse"]) for s in stats)
        out.update({
            "sse": total_sse,
            "inertia": total_sse,
            "mean-sq-distance": total_sse / n if n else math.nan,
            "simplified-silhouette": (
                math.fsum(float(s["silhouette-sum"]) for s in stats) / n if n else math.nan
            ),
        })
    if n and stats and all("contingency" in s for s in stats):
        table = sum_contingencies([s["contingency"] for s in stats])
        out["ari"] = ari_from_contingency(table)
        out["nmi"] = nmi_from_contingency(table)
        out["purity"] = purity_from_contingency(table)
        out["purity-per-cluster"] = purity_per_cluster_from_contingency(table)
        out["accuracy"] = accuracy_from_contingency(table)
        # Garst & Reinders' number (Sec. 3); a missing "ari-local" is recomputed from the
        # client's own table, which gives the same value.
        weighted = [
            int(s["num-examples"])
            * float(s["ari-local"] if "ari-local" in s else ari_from_contingency(s["contingency"]))
            for s in stats
            if int(s["num-examples"]) > 0
        ]
        out["ari-client-weighted"] = math.fsum(weighted) / n
    return out
