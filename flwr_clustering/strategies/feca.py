"""FeCA and MAvg: the one-shot centroid-aggregation strategies of Xu et al. ("Jigsaw game")."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.feca import FeCAOptions, FeCAUpload, check_feca_upload, feca_server
from ..algorithms.lloyd import check_data
from ..algorithms.mavg import MAvgOptions, MAvgUpload, mavg_server
from .base import ClusteringStrategy, Reply, logger
from .oneshot import OneShotStrategy

__all__ = ["FeCA", "MAvg"]


class FeCA(OneShotStrategy):
    """FeCA, one round (Xu et al. 2024, Algorithm 1); client side: ``FeCAClient``.

    Every client runs single-start k-means with ``k_local`` clusters, removes its
    one-fit-many centroids (Algorithm 2), gives every kept centroid a radius (Algorithm 4,
    or 3) and uploads ``[centroids (k_m, d), radii (k_m,)]`` once; no counts, no labels.
    The server groups all centroids greedily in balls, largest radius first, and returns
    the unweighted means of the ``k`` largest groups (Algorithm 5). It may return fewer
    than ``k`` centroids (fewer groups formed); it says so in the log and in the history
    (``num-centroids``).

    Parameters
    ----------
    k : int
        Number of output centroids.
    k_local : int, optional
        ``k'``, clusters of each client's k-means; defaults to ``k``.
    std_mode : {"rms", "dist_std"}, default "rms"
        Spread that picks the one-fit-many candidate (Xu et al., Sec. 4.1, "largest
        standard deviation"; our reading).
    radius : {"empirical", "theoretical"}, default "empirical"
        Algorithm 4 (the paper's experiments) or Algorithm 3 (its theory).
    eliminate : bool, default True
        ``False`` skips the elimination step (the paper's ablation, Table 5).
    privacy_threshold : int, default 2
        Clients do not upload centroids of fewer points (a one-point centroid is a raw
        row); the server cannot check it, as FeCA sends no counts.
    init : {"k-means++", "random"}, default "k-means++"
        Seeding of the clients' k-means.
    n_init : int, default 1
        Restarts of the clients' k-means (the paper: a single start).
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options
        (``min_nodes``, ``fraction``, ``seed``, ``round_timeout``, ...).
    """

    name = "feca"
    phase = "feca"
    searches_k = True  # k='auto' (strategies/choose_k.py)
    Options = FeCAOptions
    advice = {**ClusteringStrategy.advice, "fewer-centroids": ("k_local", "k"),
              "empty": ("k_local", "k"), "lloyd-gain": ("k_local",)}

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> FeCAUpload:
        """Decode ``[centroids, radii]`` and check shapes, finiteness and ``k_m <= k'``."""
        return check_feca_upload(
            FeCAUpload.from_arrays(arrays), n_features=self.n_features, k=self.k_local
        )

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Run ServerAggregation (Algorithm 5) on the uploads in client-id order."""
        result = feca_server([r.payload for r in replies], self.k)
        self.server_result = result
        if len(result.centroids) < self.k:  # diagnose() warns at the end of the run
            logger.info(
                "round %d: only %d groups formed, FeCA returns %d centroids instead of k=%d",
                server_round, len(result.groups), len(result.centroids), self.k,
            )
        return result.centroids

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Return the uploaded centroids, the groups formed and their sizes."""
        sizes = self.server_result.group_sizes
        return {
            "uploaded-centroids": int(sum(len(r.payload.centroids) for r in replies)),
            "groups": len(sizes),
            "group-sizes": [sizes[j] for j in self.server_result.selected],
            "removed-by-clients": int(sum(int(r.metrics.get("removed", 0)) for r in replies)),
        }


class MAvg(OneShotStrategy):
    """M-Avg (match averaging), one round; client side: ``MAvgClient``.

    Every client runs single-start k-means with ``k`` clusters and uploads its ``k``
    centroids once; the server matches every client's centroids to the reference (the
    lowest client id's, or the running mean) by the Hungarian algorithm and averages the
    matched slots without weights (the FeCA paper's baseline, Xu et al., Sec. 6).

    Parameters
    ----------
    k : int
        Number of clusters (every client must upload exactly ``k`` centroids).
    reference : {"first", "running"}, default "first"
        Matching reference.
    match_iter : int, default 1
        Re-matching passes (1 = the paper's one-shot description).
    privacy_threshold : int, default 2
        A client whose k-means has a cluster of fewer points withholds its reply
        (M-Avg needs all ``k`` centroids and a one-point centroid is a raw row).
    init : {"k-means++", "random"}, default "k-means++"
        Seeding of the clients' k-means.
    n_init : int, default 1
        Restarts of the clients' k-means.
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    name = "mavg"
    phase = "mavg"
    Options = MAvgOptions
    advice = {**ClusteringStrategy.advice, "empty": ("n_init", "k")}

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> MAvgUpload:
        """Decode ``[centroids (k, d)]`` and check it."""
        if len(arrays) != 1:
            raise ValueError(f"expected 1 array (centroids), got {len(arrays)}")
        C = check_data(arrays[0], name="centroids")
        if len(C) != self.k:
            raise ValueError(f"{len(C)} centroids sent, M-Avg needs exactly k={self.k}")
        if self.n_features is not None and C.shape[1] != self.n_features:
            raise ValueError(f"centroids have {C.shape[1]} features, expected {self.n_features}")
        return MAvgUpload(C)

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Match and average the uploads in client-id order."""
        return mavg_server([r.payload.centroids for r in replies], reference=self.reference,
                           max_iter=self.match_iter)
