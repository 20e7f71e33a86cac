"""What a client uploads in the centroid-sharing protocols: local means with their counts.

FKM (Garst & Reinders, Algorithm 1), k-FED (the FKM and FeCA papers' baseline) and
DeepFeCA's k-FED labeller all upload the same thing: the means of the local clusters
that have at least ``privacy_threshold`` points, the number of points behind each mean,
and (FKM's federated-Lloyd update only) the global centroid each one grew from. This
module holds that payload and its server-side validation, so that none of these
algorithms has to import another one for it.

No Flower import here (layer 1 of the architecture).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .upload import Claims, centre_claims

__all__ = ["LocalCentroids", "RowMoments", "check_local_centroids", "check_means_within_rows"]


@dataclass
class LocalCentroids:
    """What one client uploads: local centroids, their sizes and their origin.

    Attributes
    ----------
    means : numpy.ndarray of shape (k_i, d)
        Local centroids (``k_i`` may be 0).
    counts : numpy.ndarray of shape (k_i,), int64
        Number of local points behind each centroid; every count is ``>= privacy_threshold``.
    index : numpy.ndarray of shape (k_i,), int64
        Index of the global centroid each local centroid started from (``-1`` at
        initialisation). Only the ``"lloyd"`` server update uses it.
    single_row : bool, default False
        What the server's parser knows of the means: ``True`` holds each to the bound of
        a single row in the reply rules, for means that are not of exactly the rows
        counted (k-FED's centres, FKM's ``recount`` or ``init='paper'`` seeds). Not sent.
    """

    means: np.ndarray
    counts: np.ndarray
    index: np.ndarray
    single_row: bool = False

    def claims(self) -> Claims:
        """The counts, the means and their dimension (:class:`~.upload.Upload`)."""
        return centre_claims(self.means, self.counts, single_row=self.single_row)

    def to_arrays(self) -> list[np.ndarray]:
        """Return the payload as the list ``[means, counts, index]``."""
        return [self.means, self.counts, self.index]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> LocalCentroids:
        """Build from ``[means, counts, index]`` (the inverse of :meth:`to_arrays`)."""
        if len(arrays) != 3:
            raise ValueError(f"expected 3 arrays (means, counts, index), got {len(arrays)}")
        means, counts, index = (np.asarray(a) for a in arrays)
        return cls(means, counts, index)


def check_local_centroids(
    upload: LocalCentroids,
    *,
    n_features: int | None,
    privacy_threshold: int = 2,
    k: int | None = None,
    max_centroids: int | None = None,
    dtype: str | None = None,
) -> LocalCentroids:
    """Validate an upload received from a client (server side).

    Parameters
    ----------
    upload : LocalCentroids
        The payload.
    n_features : int or None
        Expected dimension (``None``: not known yet).
    privacy_threshold : int, default 2
        Every count must be at least this (and at least 1).
    k : int, optional
        Number of global centroids; ``index`` entries must be in ``[-1, k)``.
    max_centroids : int, optional
        The most local centroids the protocol lets a client send.
    dtype : str, optional
        The type the run computes in: the means must be of it (a client that computed in
        another type did not run what the server asked). ``None``: any real type.

    Returns
    -------
    LocalCentroids
        The same upload with canonical dtypes.

    Raises
    ------
    ValueError
        Naming what is malformed: shapes, non-finite values, counts below the threshold.
    """
    if np.asarray(upload.means).dtype.kind not in "fiu":
        raise ValueError(f"means must be a real array, got {np.asarray(upload.means).dtype}")
    if dtype is not None and np.asarray(upload.means).dtype != dtype:
        raise ValueError(f"means are {np.asarray(upload.means).dtype}, the run computes in "
                         f"{dtype} (its dtype option): the client did not run what the "
                         "server asked")
    means = np.asarray(upload.means, dtype=np.float64)
    counts = np.asarray(upload.counts)
    index = np.asarray(upload.index)
    if means.ndim != 2:
        raise ValueError(f"means must be 2-D (k_i, d), got shape {means.shape}")
    if counts.shape != (len(means),) or index.shape != (len(means),):
        raise ValueError(
            f"counts {counts.shape} and index {index.shape} must have shape ({len(means)},) "
            f"to match means {means.shape}"
        )
    if max_centroids is not None and len(means) > max_centroids:
        raise ValueError(f"{len(means)} centroids sent, the protocol allows at most "
                         f"{max_centroids}")
    if counts.dtype.kind not in "iu" or index.dtype.kind not in "iu":
        raise ValueError(f"counts and index must be integer arrays, got {counts.dtype} and "
                         f"{index.dtype}")
    if n_features is not None and len(means) and means.shape[1] != n_features:
        raise ValueError(f"means have {means.shape[1]} features, expected {n_features}")
    if not np.isfinite(means).all():
        raise ValueError("means contain NaN or inf")
    if len(counts) and (counts < max(privacy_threshold, 1)).any():
        raise ValueError(
            f"a count is below the privacy threshold {privacy_threshold}: {counts.min()}"
        )
    if k is not None and len(index) and ((index < -1) | (index >= k)).any():
        raise ValueError(f"index values must lie in [-1, {k}), got {index.min()}..{index.max()}")
    return LocalCentroids(means, counts.astype(np.int64), index.astype(np.int64))


@dataclass(frozen=True)
class RowMoments:
    """A client's rows summed per feature (what it declared before round 1).

    Attributes
    ----------
    count, mean, var : numpy.ndarray of shape (d,)
        Its rows with a value in each feature, their mean and their (population) variance,
        in the space the algorithm runs in (the federation's scaling applied).
    """

    count: np.ndarray
    mean: np.ndarray
    var: np.ndarray

    @classmethod
    def from_sums(cls, count, total, sumsq, center=None, scale=None) -> RowMoments:
        """From the raw rows' per-feature count, sum and sum of squares.

        For rows mapped to ``(x - center) / scale`` (default: as they are).
        """
        n = np.asarray(count, dtype=np.float64)
        d = n.shape[0]
        c = np.zeros(d) if center is None or not len(center) else np.asarray(center, float)
        sc = np.ones(d) if scale is None or not len(scale) else np.asarray(scale, float)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_raw = np.where(n > 0, np.asarray(total, float) / n, 0.0)
            var_raw = np.where(n > 0, np.asarray(sumsq, float) / n - mean_raw**2, 0.0)
        return cls(n, (mean_raw - c) / sc, np.maximum(var_raw, 0.0) / sc**2)


def check_means_within_rows(means: np.ndarray, counts: np.ndarray, rows: RowMoments,
                            names: Sequence[str] | None = None) -> None:
    """Refuse local means that no subset of the client's declared rows can have.

    A subset of ``m`` of ``n`` values with mean ``mu`` and variance ``var`` has its mean
    within ``sqrt(var * (n - m) / m)`` of ``mu`` (Cauchy-Schwarz; equality when the
    subset's values are all equal and the rest all equal). Each local mean, with the rows
    behind it, is held to that bound in every feature, with a margin for rounding
    (``1e-6`` of the features' spread, and float32 models).

    ``counts`` holds the rows behind each mean, shape ``(k,)``, or ``(k, d)`` where each
    feature has its own (masked data). The bound also holds for a weighted mean whose
    weights lie in [0, 1] and sum to ``m`` (fuzzy memberships), and with ``m = 1`` for any
    convex combination of rows (a mean whose row count is not sent): the farthest a
    single row can lie is ``sd * sqrt(n - 1)``.

    Raises
    ------
    ValueError
        Naming the local mean, the feature, how far it lies and what its rows allow.
    """
    M = np.asarray(means, dtype=np.float64)
    if M.ndim != 2 or not len(M):
        return
    m = np.asarray(counts, dtype=np.float64)
    m = np.broadcast_to(m if m.ndim == 2 else m.reshape(-1, 1), M.shape)
    n = rows.count[None, :]
    sd = np.sqrt(rows.var)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        allowed = sd * np.sqrt(np.clip(n - m, 0.0, None) / m)
    allowed = np.where(m > 0, allowed, np.inf)
    margin = 1e-6 * (np.abs(rows.mean) + np.sqrt(rows.var) + 1.0)[None, :]
    deviation = np.abs(M - rows.mean[None, :])
    bad = ~(deviation <= allowed + margin)  # NaN (unobserved) features are not checked
    bad &= np.isfinite(M)
    if bad.any():
        j, f = (int(v[0]) for v in np.nonzero(bad))
        name = names[f] if names is not None and f < len(names) else f"feature {f}"
        rows_j = f"{m[j, f]:.4g}"
        raise ValueError(
            f"its local mean {j} ({rows_j} rows) lies {deviation[j, f]:.3g} from the mean "
            f"of its rows in {name!r}, where any {rows_j} of its {int(rows.count[f])} rows "
            f"allow at most {allowed[j, f]:.3g} (their sums, declared before round 1): a "
            "mean that cannot come from its rows")
