"""FKM on rows with missing cells: the partial-distance Lloyd step (``missing='partial'``).

Each row is clustered on the features it observes (the "partial distance strategy" of
k-POD and of Hathaway & Bezdek's fuzzy c-means for incomplete data): the squared
distance of a row ``x`` with observed features ``O(x)`` to a centre ``c`` is

    ``sum_{j in O(x)} (x_j - c_j)**2 * d / |O(x)|``

(rescaled to all ``d`` features, so rows observing few features are not closer), and
each coordinate ``c_j`` of a centre is the mean of the observed values of feature ``j``
among the rows assigned to it; a coordinate that no row of the cluster observes stays
where it was, as an empty cluster does in Lloyd.

The rescaling does not change a row's nearest centre (every centre gets the same factor),
so the labels are those of the masked algorithms' rule,
:func:`~flwr_clustering.algorithms.masked.pooled_masked_squared_distances` (the model's
``masked-nearest-centroid`` labelling): complete rows by
:func:`~flwr_clustering.algorithms.lloyd.nearest_labels`, which gives the same labels.
The factor enters only the distances reported (the SSE of the evaluation).

Federated, with FKM's ``server-update='lloyd'`` only: every round each client sends, for
each global centre that attracts a local row, the means of the observed values of every
feature after ``local-iterations`` partial-distance Lloyd steps and the number of
observed values behind each (per cluster and feature; a feature seen by fewer than
``privacy-threshold`` rows of the cluster is withheld: count 0), and the server sets each
coordinate to the count-weighted mean of the clients' means. With ``privacy-threshold`` 0
and one local step that is one centralized partial-distance Lloyd step on the pooled rows.
On complete rows every step is FKM's own bit for bit (:func:`run_fkm_partial` equals
:func:`~flwr_clustering.algorithms.fkm.run_fkm` with ``update='lloyd'`` from the same
start). The start: without given centroids, ``k`` centres drawn uniformly in the
federation's per-feature mean +- 2 std of the observed values (FKM's start under secure
aggregation, :func:`~flwr_clustering.algorithms.fkm.moment_init`, with a count per
feature), from per-feature counts, sums and sums of squares: no row leaves a client.

No Flower import (layer 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .fkm import FKMResult, as_run_dtype
from .lloyd import cluster_sums, matched_shift, nearest_labels_unchecked
from .upload import Claims

__all__ = [
    "PartialCentroids",
    "check_partial_data",
    "check_partial_upload",
    "fkm_partial_client_update",
    "observed_squared_distances",
    "partial_dense_totals",
    "partial_distance_blocks",
    "partial_labels",
    "partial_lloyd_from_totals",
    "partial_lloyd_step",
    "partial_moment_init",
    "partial_moments",
    "partial_server_step",
    "run_fkm_partial",
    "sum_moments",
]


@dataclass
class PartialCentroids:
    """What a client of partial FKM uploads: per cluster and feature, means and counts.

    Attributes
    ----------
    means : numpy.ndarray of shape (k_i, d)
        Per local cluster, the mean of the observed values of every feature (0 where
        ``feature_counts`` is 0: withheld or unobserved).
    counts : numpy.ndarray of shape (k_i,), int64
        Rows of each local cluster (``>= privacy_threshold``).
    index : numpy.ndarray of shape (k_i,), int64
        The global centre each local cluster grew from.
    feature_counts : numpy.ndarray of shape (k_i, d), int64
        Observed values behind each mean: 0 or ``>= privacy_threshold``, at most ``counts``.
    """

    means: np.ndarray
    counts: np.ndarray
    index: np.ndarray
    feature_counts: np.ndarray

    def claims(self) -> Claims:
        """The rows per cluster, the means with the values behind each, ``d``.

        (:class:`~.upload.Upload`.)
        """
        return Claims(counts=self.counts, means=self.means, mean_rows=self.feature_counts,
                      features=int(self.means.shape[1]) if len(self.means) else None)

    def to_arrays(self) -> list[np.ndarray]:
        """``[means, counts, index, feature_counts]``."""
        return [self.means, self.counts, self.index, self.feature_counts]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> PartialCentroids:
        """The inverse of :meth:`to_arrays`."""
        if len(arrays) != 4:
            raise ValueError(f"expected 4 arrays (means, counts, index, feature counts), got "
                             f"{len(arrays)}")
        return cls(*(np.asarray(a) for a in arrays))


def check_partial_data(X: np.ndarray, *, name: str = "data",
                       n_features: int | None = None) -> np.ndarray:
    """Rows that may hold NaN (a missing cell), as a C-contiguous float array.

    Float32 stays float32, anything else becomes float64 (as FKM's data).

    Raises
    ------
    ValueError
        If ``X`` is not 2-D, holds inf, has the wrong width, or a row observes no feature
        (naming how many and the first row, never a value).
    """
    dtype = np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64
    X = np.ascontiguousarray(X, dtype=dtype)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_samples, n_features), got shape "
                         f"{X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{name} has {X.shape[1]} features but the model has {n_features} "
                         "(feature-count mismatch between clients)")
    if np.isinf(X).any():
        raise ValueError(f"{name} contains inf in {int(np.isinf(X).sum())} value(s): clean it "
                         "before clustering")
    empty = np.isnan(X).all(axis=1) if X.shape[1] else np.zeros(len(X), dtype=bool)
    if empty.any():
        raise ValueError(
            f"{name}: {int(empty.sum())} row(s) observe no feature (every cell missing; first: "
            f"row {int(np.argmax(empty))}), which missing='partial' cannot place: leave them "
            "out at the site, or run with missing='drop'")
    return X


def observed_squared_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared distances of rows with NaN to full centres, over each row's observed features.

    The values of :func:`~flwr_clustering.algorithms.masked.pooled_masked_squared_distances`
    for centres without NaN, bit for bit (SciPy's ``cdist`` per pattern of observed
    features), with the rows grouped by one sort instead of one scan per pattern.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Rows, each observing at least one feature.
    C : numpy.ndarray of shape (k, d)
        Centres, float64, no NaN.

    Returns
    -------
    numpy.ndarray of shape (n, k), float64
    """
    from scipy.spatial.distance import cdist

    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    out = np.empty((len(X), len(C)))
    if not len(X):
        return out
    patterns, group = np.unique(~np.isnan(X), axis=0, return_inverse=True)
    group = group.ravel()
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(len(patterns) + 1))
    for p, mask in enumerate(patterns):
        rows = order[bounds[p]:bounds[p + 1]]
        out[rows] = cdist(X[rows][:, mask], C[:, mask], metric="sqeuclidean")
    return out


def partial_labels(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """The nearest centre of every row on its observed features (int64).

    Complete rows: :func:`~flwr_clustering.algorithms.lloyd.nearest_labels_unchecked`
    (the labels of ``argmin`` of the squared distances); rows with a missing cell:
    ``argmin`` of :func:`observed_squared_distances` (the squared distance over the row's
    observed features, the values of
    :func:`~flwr_clustering.algorithms.masked.pooled_masked_squared_distances`; ties to the
    lowest index).
    The same rule as the model's ``masked-nearest-centroid`` labelling.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Checked rows (:func:`check_partial_data`), NaN where a cell is missing.
    C : numpy.ndarray of shape (k, d)
        Centres, float64, no NaN.
    """
    C = np.asarray(C, dtype=np.float64)
    holes = np.isnan(X).any(axis=1)
    if not holes.any():
        return nearest_labels_unchecked(X, C)
    labels = np.empty(len(X), dtype=np.int64)
    if not holes.all():
        labels[~holes] = nearest_labels_unchecked(np.ascontiguousarray(X[~holes]), C)
    labels[holes] = np.argmin(observed_squared_distances(X[holes], C), axis=1)
    return labels


def partial_distance_blocks(X: np.ndarray, C: np.ndarray, block: int = 4096):
    """The rescaled partial squared distances of ``X`` to ``C``, in row blocks.

    ``sum over observed j of (x_j - c_j)**2 * d / (observed features)`` (the plain squared
    distance for a complete row); for the evaluation statistics (SSE).

    Yields
    ------
    rows : slice
    d2 : numpy.ndarray of shape (rows, k)
    """
    C = np.asarray(C, dtype=np.float64)
    d = X.shape[1]
    for start in range(0, len(X), block):
        rows = slice(start, min(len(X), start + block))
        Xb = np.asarray(X[rows], dtype=np.float64)
        seen = (~np.isnan(Xb)).sum(axis=1)
        yield rows, observed_squared_distances(Xb, C) * (d / seen)[:, None]


def _observed_sums(X: np.ndarray, labels: np.ndarray, k: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cluster and feature, the sum and count of the observed values; rows per cluster."""
    observed = ~np.isnan(X)
    values = X if observed.all() else np.where(observed, X, 0)
    sums, counts = cluster_sums(values, labels, k)
    seen = cluster_sums(observed.astype(np.float64), labels, k)[0].astype(np.int64)
    return sums, seen, counts


def partial_lloyd_step(X: np.ndarray, C: np.ndarray, labels: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One partial-distance Lloyd step (see the module).

    On complete rows the means, counts and labels of
    :func:`~flwr_clustering.algorithms.lloyd.lloyd_step`, bit for bit.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Checked rows (:func:`check_partial_data`).
    C : numpy.ndarray of shape (k, d)
        Centres (float64, no NaN).
    labels : numpy.ndarray of shape (n,), optional
        :func:`partial_labels` of ``X`` and ``C``, when the caller has them.

    Returns
    -------
    means : numpy.ndarray of shape (k, d)
        Each coordinate the mean of the cluster's observed values of the feature; where
        none, the coordinate of ``C``.
    feature_counts : numpy.ndarray of shape (k, d), int64
        The observed values behind each coordinate.
    counts : numpy.ndarray of shape (k,), int64
        The rows of each cluster.
    labels : numpy.ndarray of shape (n,), int64
    """
    if labels is None:
        labels = partial_labels(X, C)
    sums, seen, counts = _observed_sums(X, labels, len(C))
    means = np.array(C, dtype=np.float64, copy=True)
    ok = seen > 0
    means[ok] = sums[ok] / seen[ok]
    return means, seen, counts, labels


def _empty_upload(d: int, dtype) -> PartialCentroids:
    return PartialCentroids(np.zeros((0, d), dtype), np.zeros(0, np.int64),
                            np.zeros(0, np.int64), np.zeros((0, d), np.int64))


def fkm_partial_client_update(X: np.ndarray, global_centroids: np.ndarray, *,
                              privacy_threshold: int = 2, local_iters: int = 1
                              ) -> PartialCentroids:
    """A client's round of partial FKM (``server-update='lloyd'``).

    As :func:`~flwr_clustering.algorithms.fkm.fkm_client_update`: assign the rows to the
    global centres (:func:`partial_labels`), keep the centres that attract a row, run
    ``local_iters`` partial-distance Lloyd steps from them, apply the privacy filter: a
    local cluster of fewer than ``privacy_threshold`` rows is not sent, and in a cluster
    that is, a feature observed by fewer than ``privacy_threshold`` of its rows is
    withheld (its mean 0, its count 0).

    Parameters
    ----------
    X : numpy.ndarray of shape (n_i, d)
        The client's rows, NaN where a cell is missing (float32: computed in and sent as
        float32).
    global_centroids : numpy.ndarray of shape (K, d)
        The broadcast centres.
    privacy_threshold : int, default 2
    local_iters : int, default 1
        0: the surviving global centres with the counts of the assignment (no step).

    Returns
    -------
    PartialCentroids
    """
    from .lloyd import check_data

    C = check_data(global_centroids, name="global centroids")
    X = check_partial_data(X, n_features=C.shape[1])
    if len(X) == 0:
        return _empty_upload(C.shape[1], X.dtype)
    labels = partial_labels(X, C)
    present = np.flatnonzero(np.bincount(labels, minlength=len(C)))
    if local_iters == 0:
        _, seen, counts = _observed_sums(X, labels, len(C))
        means, seen, counts = C[present], seen[present], counts[present]
    else:
        # dropping the centres that attract no row changes no row's nearest (ties still go
        # to the lowest index): the first step reuses the assignment, renumbered
        renumber = np.zeros(len(C), dtype=np.int64)
        renumber[present] = np.arange(len(present))
        means, step_labels = C[present], renumber[labels]
        for _ in range(local_iters):
            means, seen, counts, _ = partial_lloyd_step(X, means, step_labels)
            step_labels = None
    p = int(privacy_threshold)
    keep = counts >= max(p, 1)  # (a cluster emptied by the local steps has nothing to send)
    seen = np.where(seen >= p, seen, 0)[keep]
    means = np.where(seen > 0, means[keep], 0.0)
    return PartialCentroids(np.ascontiguousarray(means, dtype=X.dtype),
                            counts[keep].astype(np.int64), present[keep].astype(np.int64),
                            seen.astype(np.int64))


def check_partial_upload(upload: PartialCentroids, *, n_features: int | None,
                         privacy_threshold: int, k: int, dtype: str | None = None
                         ) -> PartialCentroids:
    """Validate a partial FKM upload (server side).

    The means, counts and index as FKM's
    (:func:`~flwr_clustering.algorithms.local_centroids.check_local_centroids`, each
    index a global centre, at most one local mean each); the feature counts integer,
    ``(k_i, d)``, each 0 or at least the privacy threshold and at most its cluster's rows.

    Raises
    ------
    ValueError
        Naming what is malformed (shapes, counts, the threshold), never a value of a row.
    """
    from .local_centroids import LocalCentroids, check_local_centroids

    base = check_local_centroids(
        LocalCentroids(upload.means, upload.counts, upload.index), n_features=n_features,
        privacy_threshold=privacy_threshold, k=k, max_centroids=k, dtype=dtype)
    seen = np.asarray(upload.feature_counts)
    if seen.dtype.kind not in "iu" or seen.shape != base.means.shape:
        raise ValueError(f"feature counts must be integers of shape {base.means.shape}, got "
                         f"{seen.dtype} {seen.shape}")
    seen = seen.astype(np.int64)
    if len(base.index) and (base.index < 0).any():
        raise ValueError("partial FKM uploads are indexed by global centroid (no -1)")
    if len(np.unique(base.index)) != len(base.index):
        raise ValueError("two local means grew from the same global centroid")
    if (seen < 0).any() or (seen > base.counts[:, None]).any():
        raise ValueError("a feature count is negative or above its cluster's rows")
    p = max(int(privacy_threshold), 1)
    if ((seen > 0) & (seen < p)).any():
        raise ValueError(f"a feature count is below the privacy threshold {privacy_threshold}")
    return PartialCentroids(base.means, base.counts, base.index, seen)


def partial_server_step(uploads: Sequence[PartialCentroids], previous: np.ndarray
                        ) -> np.ndarray:
    """The server's step: each coordinate the count-weighted mean of the clients' means.

    A coordinate no client sent a value for stays where it was. On complete rows the
    arithmetic of :func:`~flwr_clustering.algorithms.fkm.fkm_server_aggregate` with
    ``update='lloyd'``, bit for bit.

    Raises
    ------
    ValueError
        If no client uploaded any mean.
    """
    uploads = [u for u in uploads if len(u.means)]
    if not uploads:
        raise ValueError(
            "no client uploaded any centroid (every local cluster was below the privacy "
            "threshold or every client failed)")
    new = np.array(previous, dtype=np.float64, copy=True)
    means = np.concatenate([np.asarray(u.means, dtype=np.float64) for u in uploads])
    seen = np.concatenate([u.feature_counts for u in uploads]).astype(np.float64)
    index = np.concatenate([u.index for u in uploads])
    weight = np.zeros_like(new)
    np.add.at(weight, index, seen)
    sums = np.zeros_like(new)
    np.add.at(sums, index, means * seen)
    hit = weight > 0
    new[hit] = sums[hit] / weight[hit]
    return new


def partial_dense_totals(upload: PartialCentroids, k: int, d: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """An upload as per-centre sums ``(k, d)`` and per-feature counts ``(k, d)``, float64.

    What a client sends under secure aggregation (only the federation's totals reach the
    server), as :func:`~flwr_clustering.algorithms.fkm.dense_totals`.
    """
    sums = np.zeros((int(k), int(d)))
    seen = np.zeros((int(k), int(d)))
    index = np.asarray(upload.index, dtype=np.int64)
    if len(index):
        counts = np.asarray(upload.feature_counts, dtype=np.float64)
        sums[index] = np.asarray(upload.means, dtype=np.float64) * counts
        seen[index] = counts
    return sums, seen


def partial_lloyd_from_totals(sums: np.ndarray, seen: np.ndarray, previous: np.ndarray
                              ) -> np.ndarray:
    """The server's step from secure totals: ``sum / count`` per coordinate where > 0."""
    new = np.array(previous, dtype=np.float64, copy=True)
    seen = np.asarray(seen, dtype=np.float64)
    ok = seen > 0
    new[ok] = np.asarray(sums, dtype=np.float64)[ok] / seen[ok]
    return new


def partial_moments(X: np.ndarray, privacy_threshold: int = 2
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A client's per-feature count, sum and sum of squares of its observed values.

    A feature observed in fewer than ``privacy_threshold`` rows is withheld (all three 0).
    On complete rows the sums of :func:`~flwr_clustering.algorithms.ffcm.feature_moments`.
    """
    X = np.asarray(X, dtype=np.float64)
    observed = ~np.isnan(X)
    values = X if observed.all() else np.where(observed, X, 0.0)
    count = observed.sum(axis=0).astype(np.float64)
    total, sumsq = values.sum(axis=0), (values**2).sum(axis=0)
    low = count < max(int(privacy_threshold), 1)
    return (np.where(low, 0.0, count), np.where(low, 0.0, total),
            np.where(low, 0.0, sumsq))


def sum_moments(parts: Sequence[Sequence[np.ndarray]]) -> tuple[np.ndarray, ...]:
    """The clients' :func:`partial_moments` added in the order given (client-id order)."""
    out = [np.zeros_like(np.asarray(a, dtype=np.float64)) for a in parts[0]]
    for part in parts:
        for total, a in zip(out, part, strict=True):
            total += np.asarray(a, dtype=np.float64)
    return tuple(out)


def partial_moment_init(count: np.ndarray, total: np.ndarray, sumsq: np.ndarray, k: int,
                        rng: np.random.Generator) -> np.ndarray:
    """``k`` starting centres uniform in each feature's mean +- 2 std of its observed values.

    :func:`~flwr_clustering.algorithms.fkm.moment_init` with a count per feature (on
    complete rows the same draw, bit for bit).

    Raises
    ------
    ValueError
        If a feature has no observed value in the totals (naming its position).
    """
    from .ffcm import ffcm_random_init

    count = np.asarray(count, dtype=np.float64)
    if (count <= 0).any():
        raise ValueError(
            f"no site sent a value of feature(s) {np.flatnonzero(count <= 0).tolist()} (every "
            "cell missing, or observed at fewer rows than privacy-threshold): leave them out "
            "(feature-columns)")
    mean = np.asarray(total, dtype=np.float64) / count
    var = np.maximum(np.asarray(sumsq, dtype=np.float64) / count - mean**2, 0.0)
    return ffcm_random_init(mean, np.sqrt(var), int(k), rng)


def run_fkm_partial(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    seed: int = 0,
    max_rounds: int = 20,
    tol: float = 1e-6,
    privacy_threshold: int = 2,
    local_iters: int = 1,
    initial_centroids: np.ndarray | None = None,
    dtype: str = "float64",
) -> FKMResult:
    """Partial FKM on in-memory client arrays with NaN, no Flower (the reference loop).

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Every client's rows in client-id order, NaN where a cell is missing.
    k : int
    seed : int, default 0
        Seeds the server's generator ``default_rng(seed)`` (the start's draw).
    max_rounds, tol, privacy_threshold, local_iters, dtype
        As in :func:`~flwr_clustering.algorithms.fkm.run_fkm`.
    initial_centroids : numpy.ndarray of shape (k, d), optional
        A shared start; else :func:`partial_moment_init` from the clients'
        :func:`partial_moments`.

    Returns
    -------
    FKMResult
    """
    server_rng = np.random.default_rng(seed)
    clients = [check_partial_data(as_run_dtype(X, dtype), name=f"client {i} data")
               for i, X in enumerate(clients)]
    if initial_centroids is None:
        moments = sum_moments([partial_moments(X, privacy_threshold) for X in clients])
        start = partial_moment_init(*moments, k, server_rng)
    else:
        start = np.asarray(initial_centroids, dtype=float)
    previous = as_run_dtype(start, dtype)
    opts = dict(privacy_threshold=privacy_threshold, local_iters=local_iters)
    result = FKMResult(centroids=previous)
    uploads = [fkm_partial_client_update(X, previous, **opts) for X in clients]
    for _ in range(max_rounds):
        new = as_run_dtype(partial_server_step(uploads, previous), dtype)
        shift = matched_shift(previous, new)
        result.history.append(new)
        result.shifts.append(shift)
        result.uploads.append(sum(len(u.means) for u in uploads))
        result.centroids, previous = new, new
        if shift <= tol:
            result.converged = True
            break
        if len(result.history) < max_rounds:
            uploads = [fkm_partial_client_update(X, new, **opts) for X in clients]
    return result
