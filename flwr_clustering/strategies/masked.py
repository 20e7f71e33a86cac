"""Strategies for clustering across partially overlapping feature spaces (Maritan & Schenato).

The server knows each client's feature mask (it arrives with the uploads: the per-feature
counts, or the mask array), never its rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.masked import MaskedStats
from ..algorithms.masked_federated import (
    MaskedFederatedOptions,
    masked_server_update,
    method_a,
    method_b,
)
from ..algorithms.masked_oneshot import (
    GaussianUpload,
    MaskedOneShotOptions,
    cluster_overlap,
    force_agglomeration,
    force_sums,
    merge_groups,
    proxy_clusters,
)
from .base import ClusteringStrategy, Reply, logger
from .oneshot import OneShotStrategy

__all__ = ["MaskedFederated", "MaskedOneShot"]


def _stats_payload(arrays: list[np.ndarray], k: int | None, medoids: bool) -> MaskedStats:
    if len(arrays) != 2:
        raise ValueError(f"expected 2 arrays (sums, counts), got {len(arrays)}")
    stats = MaskedStats(arrays[0], arrays[1], single_row=medoids)
    if not (np.isfinite(stats.sums).all() and np.isfinite(stats.counts).all()):
        raise ValueError("sums or counts contain NaN or inf")
    if k is not None and len(stats) > k:
        raise ValueError(f"{len(stats)} centroids sent, more than k={k}")
    return stats


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
    reads_missing = True
    labelling = "masked-nearest-centroid"
    Options = MaskedFederatedOptions
    #: A global centre gets NaN where no client observed the feature in its cluster.
    advice = {**ClusteringStrategy.advice, "non-finite": ("k", "k_local")}
    resumable = True

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the initial grouping of the local clusters (round 1)."""
        groups = getattr(self, "groups", None)
        return {**super().state_dict(),
                "groups": None if groups is None else [[int(i) for i in g] for g in groups]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        if state.get("groups") is not None:
            self.groups = [list(g) for g in state["groups"]]

    def configure(self) -> None:
        """``k_local`` 0: clients choose by silhouette (``None``)."""
        self.k_local = self.options.k_local or None

    def protocol_rounds(self) -> int:
        """The initial round and ``F`` federated rounds (``tol >= 0`` may stop earlier)."""
        return self.options.federated_rounds + 1

    secure_row_moments = False  # rows miss features: no pooled sum of squares from totals

    def secure_aggregation_problem(self) -> str | None:
        """The federated rounds' aligned sums and counts need only the totals."""
        return None

    def secure_round(self, server_round: int) -> bool:
        """Round 1 groups every client's local clusters (Method A/B): in the clear.

        The federated rounds that follow (their aligned per-feature sums and counts) run
        under secure aggregation. The round-1 uploads are in the privacy ledger as
        ordinary replies, and the run logs a WARNING saying so.
        """
        if self.centroids is None:
            message = ("masked-federated: round 1 (the grouping of the clients' local "
                       "clusters by Method A/B) needs each client's clusters and runs without "
                       "secure aggregation; the federated rounds run with it")
            if message not in self.run_warnings:
                logger.warning(message)
                self.run_warnings.append(message)
            return False
        return True

    def aggregate_sums(self, server_round: int, totals) -> np.ndarray:
        """The alpha update from the federation's aligned sums and counts."""
        sums, counts = totals.sums
        if sums.shape != self.centroids.shape or counts.shape != self.centroids.shape:
            raise RuntimeError(f"round {server_round}: the secure totals have shapes "
                               f"{sums.shape} and {counts.shape}, expected "
                               f"{self.centroids.shape}")
        return masked_server_update(self.centroids, [MaskedStats(sums, np.rint(counts))],
                                    self.alpha)

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Init phase in round 1, federated update afterwards."""
        return {"phase": "init" if self.centroids is None else "update",
                **self.options.to_config()}

    def raw_rows_option(self) -> str | None:
        """k-medoids' representatives are medoids, raw rows."""
        return ("local-algorithm='kmedoids'" if self.options.local_algorithm == "kmedoids"
                else None)

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> MaskedStats:
        """Decode ``[sums, counts]``.

        At most ``k_local`` (or ``k``) rows at init, exactly ``k`` after. The payload
        claims the rows per cluster and feature and each cluster's observed means
        (:meth:`~flwr_clustering.algorithms.masked.MaskedStats.claims`); with
        ``local-algorithm='kmedoids'`` a representative is a medoid (a row, sent as
        size x medoid), held to the bound of a single row.
        """
        medoids = self.options.local_algorithm == "kmedoids"
        if self.centroids is None:
            return _stats_payload(arrays, self.k_local or self.k, medoids)
        stats = _stats_payload(arrays, self.k, medoids)
        if len(stats) != self.k or stats.sums.shape[1] != self.centroids.shape[1]:
            raise ValueError(f"aligned upload of shape {stats.sums.shape}, expected "
                             f"{self.centroids.shape}")
        return stats

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Method A/B at initialisation, the alpha update afterwards."""
        if self.centroids is None:
            total = sum(len(r.payload) for r in replies)
            if total < self.k:
                sent = ", ".join(f"client {r.client_id}: {len(r.payload)}" for r in replies)
                raise ValueError(
                    f"round {server_round}: the clients sent {total} local centroids in all "
                    f"({sent}), fewer than k={self.k}: there are not k to merge; lower k, or "
                    "raise k-local (a client with fewer rows than k-local sends fewer)")
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


class MaskedOneShot(OneShotStrategy):
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
    phase = "oneshot"
    reads_missing = True
    labelling = "masked-nearest-centroid"
    Options = MaskedOneShotOptions
    advice = {**ClusteringStrategy.advice, "non-finite": ("k", "k_local")}

    def configure(self) -> None:
        """``k_local`` 0: clients choose by silhouette (``None``)."""
        self.k_local = self.options.k_local or None

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
        if counts.dtype.kind not in "iu":
            raise ValueError(f"counts must be an integer array, got {counts.dtype}")
        if not (np.isfinite(means).all() and np.isfinite(covs).all()):
            raise ValueError("means or covariances contain NaN or inf")
        return GaussianUpload(mask, means.astype(np.float64), covs.astype(np.float64), counts)

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Proxies, forces, agglomeration to ``k`` groups, then the Eq. 4 merge."""
        uploads = [r.payload for r in replies if len(r.payload.means)]
        points, owner, masks = proxy_clusters(uploads, self.rng, min_size=self.min_size,
                                              max_size=self.max_size)
        groups = force_agglomeration(force_sums(points, owner, masks, w=self.w),
                                     np.bincount(owner), self.k,
                                     overlap=cluster_overlap(uploads, self.normalize))
        self.groups = groups
        if len(groups) < self.k:
            logger.warning(
                "round %d: only %d global clusters for k=%d: the clients sent %d clusters in "
                "all (%s); lower k, or raise k-local / k-max", server_round, len(groups),
                self.k, sum(len(u.means) for u in uploads),
                ", ".join(f"client {r.client_id}: {len(r.payload.means)}" for r in replies))
        return merge_groups(uploads, groups)
