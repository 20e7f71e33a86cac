"""Clustering metrics: their definitions, on a contingency table or on rows and centres.

The metrics themselves: from a contingency table (ARI, NMI, purity, accuracy), from rows
and centres (SSE, the simplified silhouette), matched centroid errors, and
:func:`centralized_metrics` on pooled rows. Contingency tables, SSE and the simplified
silhouette are sums over points, so the federation computes them exactly from what its
clients send: :mod:`flwr_clustering.evaluation` holds those statistics (Garst & Reinders,
Sec. 3: ARI and the simplified silhouette).

Layer 2: NumPy / SciPy / scikit-learn only, no Flower import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# SciPy's optimize and spatial modules and scikit-learn's metrics are imported inside the
# functions that use them: the strategies and clients import this module, and importing them
# must stay cheap (scikit-learn alone pulls in pandas and pyarrow).
from .algorithms.lloyd import (
    assign_to_nearest,
    check_data,
    nearest,
    nearest_labels,
    squared_distances,
)
from .algorithms.lloyd import silhouette_values as _silhouette_values

__all__ = [
    "ari_from_contingency",
    "assign_to_nearest",
    "centralized_metrics",
    "contingency",
    "accuracy_from_contingency",
    "hungarian_accuracy",
    "matched_centroid_error",
    "matched_centroid_mse",
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
