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

__all__ = ["LocalCentroids", "check_local_centroids"]


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
    """

    means: np.ndarray
    counts: np.ndarray
    index: np.ndarray

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
