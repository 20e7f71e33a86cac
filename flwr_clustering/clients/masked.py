"""NumPyClients for clustering across partially overlapping feature spaces (Maritan & Schenato).

A client's rows are full ``d``-vectors with NaN on the features it does not observe; its
mask (the observed features) is public, its rows never leave it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.lloyd import client_rng
from ..algorithms.masked import (
    client_local_clusters,
    client_mask,
    masked_distance_blocks,
    masked_nearest,
)
from ..algorithms.masked_federated import MaskedFederatedOptions, masked_client_update
from ..algorithms.masked_oneshot import MaskedOneShotOptions, fit_gaussians
from ..evaluation import evaluation_stats_from_blocks, residual_stats
from .base import ClusteringClient

__all__ = ["MaskedClient", "MaskedFederatedClient", "MaskedOneShotClient"]


class MaskedClient(ClusteringClient):
    """Base client of masked data: rows with NaN outside the client's feature mask.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Rows with NaN exactly on the features this client does not observe.
    y : array_like of shape (n,), optional
        True classes (simulation only).
    client_id : int, default 0
        Stable id: seeds the client and orders replies.

    Raises
    ------
    ValueError
        If a row has NaN in an observed feature, no feature is observed, the data is
        empty, or ``y`` does not match.
    """

    accepts_missing = True

    def validated(self, X: np.ndarray) -> np.ndarray:
        """Accept NaN outside the mask only; remember the mask (``self.mask``)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 2 and len(X) == 0:
            raise ValueError(f"client {self.client_id} data is empty")
        try:
            self.mask = client_mask(X)
        except ValueError as ex:
            raise ValueError(f"client {self.client_id}: {ex}") from ex
        return X

    def centroids_from(self, parameters: list[np.ndarray]) -> np.ndarray:
        """Return the global centroids (NaN allowed where a centroid has no value)."""
        if not parameters:
            raise ValueError(f"client {self.client_id}: the server sent no centroids")
        G = np.asarray(parameters[0], dtype=np.float64)
        if G.ndim != 2 or G.shape[1] != len(self.mask):
            raise ValueError(
                f"client {self.client_id}: centroids of shape {G.shape}, data has "
                f"{len(self.mask)} features"
            )
        return G

    def local_clusters(self, options, k_max: int, seed: int) -> tuple[np.ndarray, Any]:
        """Run the initial local clustering.

        ``options.k_local`` clusters, or (``k_local`` 0) ``K_i <= k_max`` chosen by
        silhouette; ``options.local_algorithm`` k-means or k-medoids.
        """
        return client_local_clusters(
            self.X, options.k_local or None, k_max, client_rng(seed, self.client_id),
            algorithm=options.local_algorithm, n_init=options.n_init,
        )

    def local_labels(self, parameters, config) -> np.ndarray:
        """Nearest global centroid on the observed features of each row."""
        return masked_nearest(self.X, self.centroids_from(parameters), self.mask)

    def local_stats(self, G: np.ndarray, config: dict[str, Any]) -> dict[str, Any]:
        """Additive evaluation statistics of ``G`` on the observed features."""
        n_classes = int(config["n-classes"]) if config.get("n-classes") else None
        stats, labels = evaluation_stats_from_blocks(
            masked_distance_blocks(self.X, G, self.mask), len(self.X), len(G), self.y,
            n_classes)
        threshold = int(config.get("privacy-threshold", 2))
        stats.update(residual_stats(self.X, G, labels, threshold))
        return stats


class MaskedFederatedClient(MaskedClient):
    """Client of Algorithm 1 (federated K-clustering of masked data).

    ``config["phase"]``: ``"init"`` runs the local clustering (:meth:`local_clusters`) and
    uploads the per-feature sums and counts of the clusters of at least
    ``privacy-threshold`` points; ``"update"`` runs one federated round from the received
    global centroids (:func:`~flwr_clustering.algorithms.masked_federated.masked_client_update`) and
    uploads ``K`` aligned rows. Payload: ``[sums (k, d), counts (k, d)]``.
    """

    def fit(self, parameters, config):
        """Run the phase named by ``config["phase"]``."""
        options = MaskedFederatedOptions.from_config(config)
        p = options.privacy_threshold
        metrics: dict[str, Any] = {}
        if options.local_algorithm == "kmedoids":
            self.consent_to_raw_rows("local-algorithm='kmedoids'",
                                     "its medoids, which are raw rows")
        if config.get("phase") == "init":
            _, stats = self.local_clusters(options, options.k, int(config.get("seed", 0)))
            stats = stats.take(np.flatnonzero(stats.sizes >= max(p, 1)))
        else:
            G = self.centroids_from(parameters)
            if config.get("evaluate", True):
                metrics = self.local_stats(G, config)
            stats = masked_client_update(
                self.X, G, local_iterations=options.local_iterations,
                privacy_threshold=p, algorithm=options.local_algorithm,
            )
        if options.local_algorithm == "kmedoids":
            metrics["raw-rows"] = int(np.count_nonzero(stats.counts.max(axis=1) > 0))
        return [stats.sums, stats.counts], len(self.X), metrics


class MaskedOneShotClient(MaskedClient):
    """Client of Algorithm 2: a Gaussian per local cluster, uploaded once.

    Payload: ``[mask (d,) uint8, means (K_i, d_i), covariances (K_i, d_i, d_i),
    counts (K_i,)]``; clusters of fewer than ``privacy-threshold`` points are withheld.
    """

    def fit(self, parameters, config):
        """Cluster locally, fit the Gaussians, upload their parameters."""
        options = MaskedOneShotOptions.from_config(config)
        labels, stats = self.local_clusters(options, options.k_max, int(config.get("seed", 0)))
        up = fit_gaussians(self.X, labels, len(stats))
        keep = up.counts >= max(options.privacy_threshold, 1)
        return ([up.mask.astype(np.uint8), up.means[keep], up.covariances[keep],
                 up.counts[keep].astype(np.int64)], len(self.X), {})
