"""Clustering metrics in centralized and exact federated (additive) form.

Federated evaluation: every client calls :func:`local_evaluation_stats` on its own data with
the global centroids and sends the returned counts and partial sums (never a data row); the
server calls :func:`aggregate_evaluation_stats`. Contingency tables, SSE and the simplified
silhouette are sums over points, so the global ARI, NMI, purity, SSE and simplified silhouette
equal what :func:`centralized_metrics` computes on the pooled data with the same centroids
(Garst & Reinders, Sec. 3: ARI and the simplified silhouette).

The paper's own ARI for federated methods is different: the sample-weighted mean of per-client
ARIs, ``sum_i n_i ARI_i / sum_i n_i``. It is reported as ``"ari-client-weighted"``.

Layer 2: NumPy / SciPy / scikit-learn only, no Flower import.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

# SciPy's optimize and spatial modules and scikit-learn's metrics are imported inside the
# functions that use them: the strategies and clients import this module, and importing them
# must stay cheap (scikit-learn alone pulls in pandas and pyarrow).
from .algorithms.lloyd import (
    assign_to_nearest,
    check_data,
    cluster_sums,
    distance_blocks,
    nearest,
    nearest_labels,
    row_blocks,
    squared_distances,
)

__all__ = [
    "EVALUATION_STATS",
    "aggregate_evaluation_stats",
    "ari_from_contingency",
    "assign_to_nearest",
    "centralized_metrics",
    "check_evaluation_stats",
    "contingency",
    "evaluation_stats_from_blocks",
    "evaluation_stats_from_distances",
    "accuracy_from_contingency",
    "hungarian_accuracy",
    "label_evaluation_stats",
    "local_evaluation_stats",
    "matched_centroid_error",
    "matched_centroid_mse",
    "moment_stats",
    "model_contingencies",
    "nmi_from_contingency",
    "per_model_metrics",
    "pooled_silhouette",
    "purity_from_contingency",
    "purity_per_cluster_from_contingency",
    "simplified_silhouette",
    "simplified_silhouette_sum",
    "sse",
    "sum_contingencies",
]


def _check_labels(labels: np.ndarray, size: int, name: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {labels.shape}")
    if labels.dtype.kind not in "iub" and not (
        labels.dtype.kind == "f" and np.array_equal(labels, np.round(labels))
    ):
        raise ValueError(f"{name} must hold integers, got dtype {labels.dtype}")
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= size):
        raise ValueError(
            f"{name} must be integers in [0, {size}), got values in "
            f"[{labels.min()}, {labels.max()}]; pass a larger n_classes/n_clusters or re-encode "
            "the labels as 0..K-1"
        )
    return labels


def contingency(
    labels_pred: np.ndarray, labels_true: np.ndarray, n_clusters: int, n_classes: int
) -> np.ndarray:
    """Count points per (predicted cluster, true class) pair.

    Parameters
    ----------
    labels_pred : array_like of shape (n,)
        Predicted cluster of each point, integers in ``[0, n_clusters)``.
    labels_true : array_like of shape (n,)
        True class of each point, integers in ``[0, n_classes)``.
    n_clusters : int
        Number of rows (all clusters, including empty ones).
    n_classes : int
        Number of columns (all classes, including those absent locally).

    Returns
    -------
    numpy.ndarray of shape (n_clusters, n_classes), int64
        ``table[j, c] = #{i : pred_i = j and true_i = c}``; additive over clients.

    Raises
    ------
    ValueError
        If the arrays differ in length or a label is out of range or not an integer.
    """
    pred = _check_labels(labels_pred, n_clusters, "labels_pred")
    true = _check_labels(labels_true, n_classes, "labels_true")
    if len(pred) != len(true):
        raise ValueError(
            f"labels_pred and labels_true differ in length ({len(pred)} != {len(true)})"
        )
    flat = np.bincount(pred * n_classes + true, minlength=n_clusters * n_classes)
    return flat.astype(np.int64).reshape(n_clusters, n_classes)


def sum_contingencies(tables: Sequence[np.ndarray]) -> np.ndarray:
    """Sum contingency tables, zero-padding them to the largest shape first.

    Parameters
    ----------
    tables : sequence of array_like of shape (k_i, c_i)
        Per-client tables (clients may know different numbers of classes).

    Returns
    -------
    numpy.ndarray of shape (max k_i, max c_i), int64
        The global table.

    Raises
    ------
    ValueError
        If there is no table, or one is not a 2-D table of non-negative integers.
    """
    if len(tables) == 0:
        raise ValueError("sum_contingencies needs at least one table")
    arrays = [_check_table(t) for t in tables]
    total = np.zeros(np.max([a.shape for a in arrays], axis=0), dtype=np.int64)
    for a in arrays:
        total[: a.shape[0], : a.shape[1]] += a
    return total


def _check_table(table: np.ndarray) -> np.ndarray:
    t = np.asarray(table)
    if t.ndim != 2:
        raise ValueError(f"a contingency table must be 2-D, got shape {t.shape}")
    if t.size and (not np.array_equal(t, np.round(t)) or t.min() < 0):
        raise ValueError("a contingency table must hold non-negative integer counts")
    return t.astype(np.int64)


def _labels_from_table(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rebuild ``(labels_true, labels_pred)`` arrays with exactly the counts of ``table``.

    sklearn's ARI/NMI depend on the labels only through their contingency table (restricted to
    non-empty rows/columns, in sorted label order), so calling sklearn on these arrays returns
    bit-for-bit the value it returns on the pooled labels. This is exact by construction and
    robust to changes in sklearn's internal formulas, at O(n) memory on the server.
    """
    t = _check_table(table)
    if t.sum() == 0:
        raise ValueError("the contingency table is empty (no points): the metric is undefined")
    counts = t.ravel()
    pred = np.repeat(np.repeat(np.arange(t.shape[0]), t.shape[1]), counts)
    true = np.repeat(np.tile(np.arange(t.shape[1]), t.shape[0]), counts)
    return true, pred


def ari_from_contingency(table: np.ndarray) -> float:
    """Adjusted Rand index (Hubert & Arabie 1985) from a cluster x class table.

    Parameters
    ----------
    table : array_like of shape (k, c)
        Counts, rows = predicted clusters, columns = true classes.

    Returns
    -------
    float
        Equal to ``sklearn.metrics.adjusted_rand_score`` on the underlying labels (1.0 when
        both labelings are a single group, as in sklearn).

    Raises
    ------
    ValueError
        If the table is empty or malformed.
    """
    t = _check_table(table)
    n = int(t.sum())
    if n == 0:
        raise ValueError("the contingency table is empty (no points): the metric is undefined")
    # Pair counts (Hubert & Arabie) in exact Python integers, the same quantities and final
    # expression as sklearn's adjusted_rand_score, so the float result is identical to it.
    sum_sq = int((t * t).sum())
    rows, cols = t.sum(axis=1), t.sum(axis=0)
    same_both = sum_sq - n
    same_row_only = int((rows * rows).sum()) - sum_sq
    same_col_only = int((cols * cols).sum()) - sum_sq
    neither = n * n - same_row_only - same_col_only - sum_sq
    if same_row_only == 0 and same_col_only == 0:
        return 1.0
    tp, tn, fp, fn = same_both, neither, same_row_only, same_col_only
    return 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))


def nmi_from_contingency(table: np.ndarray) -> float:
    """Normalized mutual information (arithmetic-mean normalisation) from a table.

    Parameters
    ----------
    table : array_like of shape (k, c)
        Counts, rows = predicted clusters, columns = true classes.

    Returns
    -------
    float
        Equal to ``sklearn.metrics.normalized_mutual_info_score`` on the underlying labels.

    Raises
    ------
    ValueError
        If the table is empty or malformed.
    """
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(*_labels_from_table(table)))


def purity_from_contingency(table: np.ndarray) -> float:
    """Purity, ``sum_j max_c table[j, c] / n``.

    Parameters
    ----------
    table : array_like of shape (k, c)
        Counts, rows = predicted clusters, columns = true classes.

    Returns
    -------
    float
        The fraction of points whose cluster's majority class is their class.

    Raises
    ------
    ValueError
        If the table is empty or malformed.
    """
    t = _check_table(table)
    n = int(t.sum())
    if n == 0:
        raise ValueError("the contingency table is empty (no points): purity is undefined")
    return int(t.max(axis=1).sum()) / n


def purity_per_cluster_from_contingency(table: np.ndarray) -> float:
    """Unweighted mean over non-empty clusters of the cluster's purity.

    The second reading of "the average purity for all clusters" (Xu et al., Sec. 6,
    "Evaluation metric"): ``mean_j (max_c table[j, c] / sum_c table[j, c])`` over clusters
    with at least one point. :func:`purity_from_contingency` is the standard
    (point-weighted) form.

    Parameters
    ----------
    table : array_like of shape (k, c)
        Counts, rows = predicted clusters, columns = true classes.

    Returns
    -------
    float
        The mean per-cluster purity.

    Raises
    ------
    ValueError
        If the table is empty or malformed.
    """
    t = _check_table(table)
    sizes = t.sum(axis=1)
    if sizes.sum() == 0:
        raise ValueError("the contingency table is empty (no points): purity is undefined")
    nz = sizes > 0
    return float(np.mean(t.max(axis=1)[nz] / sizes[nz]))


def sse(X: np.ndarray, C: np.ndarray) -> float:
    """Sum of squared distances to the nearest centroid (k-means objective, inertia).

    Parameters
    ----------
    X : array_like of shape (n, d)
        Data.
    C : array_like of shape (k, d)
        Centroids.

    Returns
    -------
    float
        ``sum_i min_j ||x_i - c_j||^2`` (0.0 for empty data).
    """
    return math.fsum(assign_to_nearest(X, C)[1])


def _silhouette_values(d2: np.ndarray) -> np.ndarray:
    """Simplified silhouette of every row of ``d2`` (see :func:`simplified_silhouette_sum`).

    An infinite squared distance is a centroid that cannot be measured on the row (a masked
    client's centroid with no value on its observed features): a row with one measurable
    centroid gets 1, the limit of ``(b - a) / b`` as ``b`` grows; a row with none gets 0,
    as with a single centroid. So every value is finite and lies in ``[0, 1]`` (``a <= b``).
    """
    values = np.zeros(len(d2))
    if d2.shape[1] < 2 or len(d2) == 0:
        return values
    two = np.sqrt(np.partition(d2, 1, axis=1)[:, :2])
    a, b = two[:, 0], two[:, 1]  # a <= b, so max(a, b) = b
    both = np.isfinite(b) & (b > 0)
    values[both] = (b[both] - a[both]) / b[both]
    values[np.isfinite(a) & np.isinf(b)] = 1.0
    return values


def simplified_silhouette_sum(X: np.ndarray, C: np.ndarray) -> float:
    """Sum of simplified silhouette values (Hruschka et al. 2004).

    ``s_i = (b_i - a_i) / max(a_i, b_i)`` with ``a_i`` the (non-squared) distance to the
    nearest centroid and ``b_i`` the distance to the second nearest; ``s_i = 0`` when
    ``max(a_i, b_i) = 0`` or when there is a single centroid. On a masked client's
    distances a centroid with no value on the row's features is infinitely far: ``s_i = 1``
    when only the nearest is measurable (the limit as ``b_i`` grows), 0 when none is.
    Additive over clients (Garst & Reinders, Sec. 3, FEMNIST).

    Parameters
    ----------
    X : array_like of shape (n, d)
        Data.
    C : array_like of shape (k, d)
        Centroids.

    Returns
    -------
    float
        ``sum_i s_i`` (0.0 for empty data).
    """
    return math.fsum(_silhouette_values(squared_distances(X, C)))


def simplified_silhouette(X: np.ndarray, C: np.ndarray) -> float:
    """Mean simplified silhouette, ``simplified_silhouette_sum(X, C) / n``.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Data, ``n >= 1``.
    C : array_like of shape (k, d)
        Centroids.

    Returns
    -------
    float
        Mean of ``s_i`` over the rows, in ``[-1, 1]`` (in fact ``[0, 1]``, as ``a_i <= b_i``).

    Raises
    ------
    ValueError
        If ``X`` is empty.
    """
    if len(X) == 0:
        raise ValueError("simplified_silhouette of empty data is undefined")
    return simplified_silhouette_sum(X, C) / len(X)


def matched_centroid_error(C_est: np.ndarray, C_true: np.ndarray) -> tuple[float, np.ndarray]:
    """Centroid error after optimal one-to-one matching (Hungarian algorithm).

    Pairs rows by ``scipy.optimize.linear_sum_assignment`` on squared distances; when the
    row counts differ, ``min(k1, k2)`` pairs are matched and the rest ignored.

    Parameters
    ----------
    C_est : array_like of shape (k1, d)
        Estimated centroids.
    C_true : array_like of shape (k2, d)
        Reference centroids.

    Returns
    -------
    error : float
        Frobenius norm of the matched differences, ``sqrt(sum ||c_est - c_true||^2)``.
    match : numpy.ndarray of shape (k1,), int64
        Row of ``C_true`` matched to each row of ``C_est``; ``-1`` where unmatched.

    Raises
    ------
    ValueError
        On NaN/inf, wrong dimensions or a feature-count mismatch.
    """
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    C_true = check_data(C_true, name="C_true")
    C_est = check_data(C_est, name="C_est", n_features=C_true.shape[1])
    rows, cols = linear_sum_assignment(cdist(C_est, C_true, metric="sqeuclidean"))
    match = np.full(len(C_est), -1, dtype=np.int64)
    match[rows] = cols
    return float(np.linalg.norm(C_est[rows] - C_true[cols])), match


def matched_centroid_mse(C_est: np.ndarray, C_true: np.ndarray) -> float:
    """Mean squared centroid error after Hungarian matching (Xu et al., Tables 5 and 10).

    ``l2**2 / m`` with ``l2`` from :func:`matched_centroid_error` and ``m = min(k1, k2)`` the
    number of matched pairs; with ``k1 = k2 = k`` this is the paper's ``MSE = l2**2 / k``
    (Tables 1 and 5: FeCA's S1 ``l2 = 1.0e4`` gives ``MSE = 6.7e6``).

    Parameters
    ----------
    C_est : array_like of shape (k1, d)
        Estimated centroids.
    C_true : array_like of shape (k2, d)
        Reference centroids.

    Returns
    -------
    float
        The mean over matched pairs of ``||c_est - c_true||^2``.
    """
    error, _ = matched_centroid_error(C_est, C_true)
    return error**2 / min(len(C_est), len(C_true))


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


def centralized_metrics(
    X: np.ndarray, C: np.ndarray, y: np.ndarray | None = None
) -> dict[str, float]:
    """Metrics of centroids ``C`` on the pooled data, computed directly with scikit-learn.

    The reference that :func:`aggregate_evaluation_stats` must reproduce.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Pooled data, ``n >= 1``; rows with NaN (partially overlapping feature spaces) are
        measured on their observed features only.
    C : array_like of shape (k, d)
        Centroids.
    y : array_like of shape (n,), optional
        True classes (any discrete labels).

    Returns
    -------
    dict
        The keys of :func:`aggregate_evaluation_stats` except ``"ari-client-weighted"``,
        which has no centralized counterpart.

    Raises
    ------
    ValueError
        On empty or malformed data, or ``y`` of the wrong length.
    """
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
    from sklearn.metrics.cluster import contingency_matrix

    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 2 and np.isnan(X).any():
        # Rows of partially overlapping feature spaces: distances on each row's features.
        from .algorithms.masked import pooled_masked_squared_distances

        d2 = pooled_masked_squared_distances(X, np.asarray(C, dtype=np.float64))
    else:
        d2 = squared_distances(X, C)
    n = len(d2)
    if n == 0:
        raise ValueError("centralized_metrics needs at least one data row")
    labels, dist = nearest(d2)
    total_sse = math.fsum(dist)
    out: dict[str, float] = {
        "num-examples": n,
        "sse": total_sse,
        "inertia": total_sse,
        "mean-sq-distance": total_sse / n,
        "simplified-silhouette": math.fsum(_silhouette_values(d2)) / n,
    }
    if y is not None:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},) to match the data, got {y.shape}")
        out["ari"] = float(adjusted_rand_score(y, labels))
        out["nmi"] = float(normalized_mutual_info_score(y, labels))
        table = contingency_matrix(y, labels)
        out["purity"] = int(table.max(axis=0).sum()) / n
        out["purity-per-cluster"] = float(np.mean(table.max(axis=0) / table.sum(axis=0)))
        out["accuracy"] = accuracy_from_contingency(table)
    return out


def pooled_silhouette(X: np.ndarray, labels: np.ndarray) -> float:
    """Full silhouette of a labelling on pooled data (simulation only: needs every row).

    Parameters
    ----------
    X : array_like of shape (n, d)
        Pooled data.
    labels : array_like of shape (n,)
        Cluster of each row (e.g. nearest global centroid).

    Returns
    -------
    float
        ``sklearn.metrics.silhouette_score(X, labels)`` (Euclidean), or NaN when fewer than 2
        clusters are used or every point is its own cluster (silhouette undefined).
    """
    from sklearn.metrics import silhouette_score

    X = check_data(X, name="data")
    n_used = len(np.unique(labels))
    if n_used < 2 or n_used > len(X) - 1:
        return math.nan
    return float(silhouette_score(X, labels, metric="euclidean"))


def accuracy_from_contingency(table: np.ndarray) -> float:
    """Accuracy after the best one-to-one cluster-to-class matching, from a contingency table.

    ``linear_sum_assignment`` on the table (either orientation); the federated form of
    :func:`hungarian_accuracy`, exact because the table is additive over clients.
    """
    from scipy.optimize import linear_sum_assignment

    table = np.asarray(table)
    total = table.sum()
    if total == 0:
        return math.nan
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / total)


def model_contingencies(
    X: np.ndarray, models: np.ndarray, y: np.ndarray, n_classes: int | None = None
) -> np.ndarray:
    """Contingency tables of several centre sets on the same rows (one per model).

    For methods where every user keeps its own centres (DGC): the tables are additive over
    clients, so summing the clients' tables gives each model's exact table on the joint
    data.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Rows (may be empty).
    models : array_like of shape (m, k, d)
        ``m`` centre sets.
    y : array_like of shape (n,)
        True classes, integers in ``[0, n_classes)``.
    n_classes : int, optional
        Width of the tables; defaults to ``y.max() + 1``.

    Returns
    -------
    numpy.ndarray of shape (m, k, n_classes), int64
        Rows: nearest centre of the model (ties to the lowest index).
    """
    models = np.asarray(models, dtype=np.float64)
    if models.ndim != 3:
        raise ValueError(f"models must be an (m, k, d) array, got shape {models.shape}")
    y = np.asarray(y)
    if n_classes is None:
        n_classes = int(y.max()) + 1 if y.size else 0
    m, k = models.shape[:2]
    if m == 0:
        return np.zeros((0, k, n_classes), dtype=np.int64)
    return np.stack([contingency(nearest_labels(X, C), y, k, n_classes) for C in models])


def per_model_metrics(tables: Sequence[np.ndarray], prefix: str = "user") -> dict[str, float]:
    """Accuracy and ARI of every model from its table, summarised over the models.

    The paper's DGC numbers are the mean over users of each user's accuracy with its own
    centres (Armacki et al., Sec. 5); the spread shows how far from consensus the users still are.

    Parameters
    ----------
    tables : sequence of array_like of shape (k, c)
        One contingency table per model (e.g. the sum of the clients' tables).
    prefix : str, default "user"
        Key prefix.

    Returns
    -------
    dict
        ``{prefix}-accuracy-mean``, ``-min``, ``-max``, ``{prefix}-ari-mean``, ``-min``,
        ``-max``. Models whose table is empty are skipped; no model left gives ``{}``.
    """
    used = [t for t in tables if int(np.asarray(t).sum()) > 0]
    if not used:
        return {}
    acc = np.array([accuracy_from_contingency(t) for t in used])
    ari = np.array([ari_from_contingency(t) for t in used])
    out: dict[str, float] = {}
    for name, values in (("accuracy", acc), ("ari", ari)):
        out[f"{prefix}-{name}-mean"] = float(values.mean())
        out[f"{prefix}-{name}-min"] = float(values.min())
        out[f"{prefix}-{name}-max"] = float(values.max())
    return out


def hungarian_accuracy(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """Accuracy after the best one-to-one cluster-to-class matching (Hungarian method).

    The accuracy of Maritan & Schenato (E2, E5; Sec. 6.2 and 6.3).

    Parameters
    ----------
    labels_true, labels_pred : array_like of shape (n,)
        True classes and predicted clusters (any discrete labels).

    Returns
    -------
    float
        Fraction of points whose cluster is matched to their class.
    """
    from sklearn.metrics.cluster import contingency_matrix

    return accuracy_from_contingency(contingency_matrix(labels_true, labels_pred))
