"""Strategies for clustering across partially overlapping feature spaces (spec 000).

The server knows each client's feature mask (it arrives with the uploads: the per-feature
counts, or the mask array), never its rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.masked import LOCAL_ALGORITHMS, MaskedStats
from ..algorithms.masked_federated import masked_server_update, method_a, method_b
from ..algorithms.masked_oneshot import (
    FORCE_NORMALIZATIONS,
    GaussianUpload,
    cluster_overlap,
    force_agglomeration,
    force_sums,
    merge_groups,
    proxy_clusters,
)
from .base import ClusteringStrategy, Reply

__all__ = ["MaskedFederated", "MaskedOneShot"]


def _stats_payload(arrays: list[np.ndarray], k: int | None) -> MaskedStats:
    if len(arrays) != 2:
        raise ValueError(f"expected 2 arrays (sums, counts), got {len(arrays)}")
    stats = MaskedStats(arrays[0], arrays[1])
    if not (np.isfinite(stats.sums).all() and np.isfinite(stats.counts).all()):
        raise ValueError("sums or counts contain NaN or inf")
    if k is not None and len(stats) > k:
        raise ValueError(f"{len(stats)} centroids sent, more than k={k}")
    return stats


def _check_k_local(k_local: int | None, k: int, *, allow_above: bool) -> int | None:
    """Validate a fixed local cluster count (None: clients choose by silhouette)."""
    if k_local is None or int(k_local) == 0:
        return None
    if int(k_local) < 1 or (not allow_above and int(k_local) > k):
        raise ValueError(f"k_local must be in [1, {'...' if allow_above else k}] or None "
                         f"(silhouette), got {k_local}")
    return int(k_local)


def _check_algorithm(name: str) -> str:
    if name not in LOCAL_ALGORITHMS:
        raise ValueError(f"local_algorithm must be one of {LOCAL_ALGORITHMS}, got {name!r}")
    return name


class MaskedFederated(ClusteringStrategy):
    """Algorithm 1 of Maritan & Schenato: federated K-clustering of masked data.

    Round 1: clients upload the sufficient statistics of their local clusters; the server
    groups them with Method A or B into ``k`` global centroids. Rounds 2..F+1: clients
    align their warm-started local clusters to the global centroids and upload ``k``
    aligned rows; the server moves the centroids by ``alpha`` towards the merge.

    Parameters
    ----------
    k : int
        Global clusters.
    method : {"A", "B"}, default "B"
        Initial grouping (Assumption 1 or Assumptions 2-3).
    alpha : float, default 0.8
        Step size.
    federated_rounds : int, default 3
        ``F``.
    k_local : int, optional
        Local clusters at initialisation; by default every client chooses ``K_i <= k`` by
        silhouette.
    local_iterations : int, default 10
        Warm-started local clustering steps per round.
    local_algorithm : {"kmeans", "kmedoids"}, default "kmeans"
        The clients' algorithm. **k-medoids uploads medoids, which are real rows.**
    privacy_threshold : int, default 2
        Clusters of fewer points are never uploaded.
    n_init : int, default 10
        Restarts of the initial local k-means.
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    name = "masked-federated"

    def __init__(self, k: int, *, method: str = "B", alpha: float = 0.8,
                 federated_rounds: int = 3, k_local: int | None = None,
                 local_iterations: int = 10, privacy_threshold: int = 2, n_init: int = 10,
                 local_algorithm: str = "kmeans", **kwargs: Any) -> None:
        if method not in ("A", "B"):
            raise ValueError(f"method must be 'A' or 'B', got {method!r}")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if int(federated_rounds) < 0:
            raise ValueError(f"federated_rounds must be >= 0, got {federated_rounds}")
        self.k, self.method, self.alpha = int(k), method, float(alpha)
        self.k_local = _check_k_local(k_local, self.k, allow_above=False)
        self.local_algorithm = _check_algorithm(local_algorithm)
        self.local_iterations = int(local_iterations)
        self.privacy_threshold = int(privacy_threshold)
        self.n_init = int(n_init)
        kwargs["max_rounds"] = int(federated_rounds) + 1
        kwargs.setdefault("tol", -1.0)
        super().__init__(**kwargs)

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Init phase in round 1, federated update afterwards."""
        return {"phase": "init" if self.centroids is None else "update",
                "k-local": self.k_local or 0, "k-max": self.k,
                "local-algorithm": self.local_algorithm,
                "local-iterations": self.local_iterations, "n-init": self.n_init,
                "privacy-threshold": self.privacy_threshold}

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> MaskedStats:
        """Decode ``[sums, counts]``.

        At most ``k_local`` (or ``k``) rows at init, exactly ``k`` after.
        """
        if self.centroids is None:
            return _stats_payload(arrays, self.k_local or self.k)
        stats = _stats_payload(arrays, self.k)
        if len(stats) != self.k or stats.sums.shape[1] != self.centroids.shape[1]:
            raise ValueError(f"aligned upload of shape {stats.sums.shape}, expected "
                             f"{self.centroids.shape}")
        return stats

    def payload_features(self, payload: MaskedStats) -> int | None:
        """Return the global dimension ``d``."""
        return int(payload.sums.shape[1])

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Method A/B at initialisation, the alpha update afterwards."""
        if self.centroids is None:
            stats = MaskedStats.concatenate([r.payload for r in replies])
            owners = np.concatenate([[r.client_id] * len(r.payload) for r in replies])
            grouped, self.groups = (method_a(stats, owners, self.k) if self.method == "A"
                                    else method_b(stats, self.k))
            return grouped.means
        return masked_server_update(self.centroids, [r.payload for r in replies], self.alpha)

    def shift(self, previous: np.ndarray | None, new: np.ndarray) -> float:
        """Largest coordinate change (NaN-aware)."""
        if previous is None or previous.shape != new.shape:
            return float("inf")
        diff = np.abs(new - previous)
        return float(np.nanmax(diff)) if np.isfinite(diff).any() else 0.0

    def converged(self, server_round: int) -> bool:
        """Stop on ``tol`` (never by default: exactly F federated rounds)."""
        return server_round > 1 and self.tol >= 0 and self.last_shift <= self.tol


class MaskedOneShot(ClusteringStrategy):
    """Algorithm 2 of Maritan & Schenato: one upload of Gaussians, force agglomeration.

    Parameters
    ----------
    k : int
        Global clusters.
    k_local : int, optional
        Local clusters (over-clustering allowed); by default every client chooses ``K_i <=
        k_max`` by silhouette.
    k_max : int, optional
        Largest silhouette choice (default ``k``).
    local_algorithm : {"kmeans", "kmedoids"}, default "kmeans"
        The clients' algorithm (only its labels shape the uploaded Gaussians).
    normalize : {"literal", "valid_pairs"}, default "literal"
        Denominator of the group force: all point pairs (Eq. 11 as printed) or only pairs
        of clusters that share a feature.
    w : float, default 2.0
        Force exponent.
    min_size, max_size : int
        Proxy cluster sizes.
    privacy_threshold : int, default 2
        Clusters of fewer points are not uploaded.
    n_init : int, default 10
        Restarts of the local k-means.
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    name = "masked-oneshot"

    def __init__(self, k: int, *, k_local: int | None = None, k_max: int | None = None,
                 w: float = 2.0, min_size: int = 30, max_size: int = 100,
                 privacy_threshold: int = 2, n_init: int = 10, local_algorithm: str = "kmeans",
                 normalize: str = "literal", **kwargs: Any) -> None:
        if normalize not in FORCE_NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {FORCE_NORMALIZATIONS}, got "
                             f"{normalize!r}")
        self.normalize = normalize
        self.k = int(k)
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k_local = _check_k_local(k_local, self.k, allow_above=True)
        self.k_max = self.k if k_max is None else _check_k_local(k_max, self.k, allow_above=True)
        self.local_algorithm = _check_algorithm(local_algorithm)
        if float(w) <= 1.0:
            raise ValueError(f"w must be > 1 (the paper uses 2), got {w}")
        if not 1 <= int(min_size) <= int(max_size):
            raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
        self.w, self.min_size, self.max_size = float(w), int(min_size), int(max_size)
        self.privacy_threshold, self.n_init = int(privacy_threshold), int(n_init)
        kwargs["max_rounds"] = 1
        super().__init__(**kwargs)

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Local clustering options."""
        return {"k-local": self.k_local or 0, "k-max": self.k_max,
                "local-algorithm": self.local_algorithm, "n-init": self.n_init,
                "privacy-threshold": self.privacy_threshold}

    def train_arrays(self, server_round: int) -> list[np.ndarray]:
        """Nothing: the clients need no model."""
        return []

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> GaussianUpload:
        """Decode ``[mask, means, covariances, counts]`` and check the shapes."""
        if len(arrays) != 4:
            raise ValueError(f"expected 4 arrays (mask, means, covariances, counts), got "
                             f"{len(arrays)}")
        mask = np.asarray(arrays[0]).astype(bool)
        means, covs, counts = (np.asarray(a) for a in arrays[1:])
        d_i = int(mask.sum())
        if means.ndim != 2 or means.shape[1] != d_i or covs.shape != (len(means), d_i, d_i) \
                or counts.shape != (len(means),):
            raise ValueError(f"inconsistent shapes: mask {mask.shape} ({d_i} observed), means "
                             f"{means.shape}, covariances {covs.shape}, counts {counts.shape}")
        limit = self.k_local or self.k_max
        if len(means) > limit:
            raise ValueError(f"{len(means)} clusters sent, more than {limit}")
        return GaussianUpload(mask, means.astype(np.float64), covs.astype(np.float64), counts)

    def payload_features(self, payload: GaussianUpload) -> int | None:
        """Return the global dimension ``d``."""
        return int(len(payload.mask))

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Proxies, forces, agglomeration to ``k`` groups, then the Eq. 4 merge."""
        uploads = [r.payload for r in replies if len(r.payload.means)]
        points, owner, masks = proxy_clusters(uploads, self.rng, min_size=self.min_size,
                                              max_size=self.max_size)
        groups = force_agglomeration(force_sums(points, owner, masks, w=self.w),
                                     np.bincount(owner), self.k,
                                     overlap=cluster_overlap(uploads, self.normalize))
        self.groups = groups
        return merge_groups(uploads, groups)
