"""FedKMeans: the FKM strategy of Garst & Reinders (server side of Algorithm 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.fkm import FKMOptions, fkm_server_aggregate, run_fkm
from ..algorithms.lloyd import matched_shift
from ..algorithms.local_centroids import LocalCentroids, check_local_centroids
from ..clients.fkm import FedKMeansClient
from ..registry import EVALUATION_METRICS, EVALUATION_STATS, AlgorithmSpec, Phase, register
from .base import ClusteringStrategy, Reply, logger

__all__ = ["FedKMeans"]


class FedKMeans(ClusteringStrategy):
    """Federated k-means (FKM), iterative; client side: ``FedKMeansClient``.

    Round 1 asks the clients for ``min(n_i, k)`` k-means++-seeded local clusters (or,
    given ``initial_arrays``, for one local update from those centroids); every round
    the server runs a count-weighted k-means with ``k`` clusters over all received local
    centroids and broadcasts the result; clients keep the global centroids that attract
    a local point, run ``local_iterations`` Lloyd steps and upload means and counts.
    Stops when the Hungarian-matched centroid shift is ``<= tol`` or after
    ``max_rounds`` aggregations.

    The options are the fields of :class:`~flwr_clustering.algorithms.fkm.FKMOptions`
    (given one by one or as ``options=``).

    Parameters
    ----------
    k : int
        ``K_g``, the number of global clusters.
    privacy_threshold : int, default 2
        ``p``: clients withhold clusters of fewer than ``p`` points; the server rejects
        uploads that break it.
    local_iterations : int, default 1
        Lloyd steps per round on each client (the paper: 1).
    server_seeding : {"weighted", "unweighted"}, default "weighted"
        k-means++ seeding of the server k-means; ``"unweighted"`` reproduces the paper's
        scikit-learn < 1.3 behaviour (needed for its cluster-wise figure).
    init : {"private", "paper"}, default "private"
        ``"private"`` runs a Lloyd step before the first upload so no raw row is sent;
        ``"paper"`` uploads the k-means++ seeds, **which are raw data rows**.
    server_update : {"kmeans", "lloyd"}, default "kmeans"
        ``"kmeans"`` is the paper; ``"lloyd"`` averages the local centroids by the global
        centroid they grew from (exactly a centralized Lloyd step when ``p = 0``).
    recount : bool, default False
        Count points nearest to the new local means (the paper's scikit-learn
        semantics) instead of the partition that produced them.
    n_init : int, default 10
        Restarts of the server k-means.
    max_rounds : int, default 20
        Aggregations at most.
    tol : float, default 1e-6
        Convergence tolerance on the Hungarian-matched shift (negative: never).
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options
        (``min_nodes``, ``fraction``, ``seed``, ``round_timeout``, ...).
    """

    name = "fkm"
    Options = FKMOptions
    resumable = True  # the base state (centroids, generators) is all it carries

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return the client options; ``phase`` is ``init`` until centroids exist."""
        return {"phase": "init" if self.centroids is None else "update",
                **self.options.to_config()}

    def raw_rows_option(self) -> str | None:
        """``init='paper'`` uploads the k-means++ seeds, raw rows."""
        return "init='paper'" if self.options.init == "paper" else None

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> LocalCentroids:
        """Decode ``[means, counts, index]`` and check shapes, finiteness, counts."""
        return check_local_centroids(
            LocalCentroids.from_arrays(arrays), n_features=self.n_features,
            privacy_threshold=self.privacy_threshold,
            k=None if self.centroids is None else len(self.centroids),
            # init: k seeds; update: one local centroid per global centroid at most
            max_centroids=self.k if self.centroids is None else len(self.centroids),
        )

    def payload_counts(self, payload: LocalCentroids) -> np.ndarray:
        """The rows behind each local centroid."""
        return payload.counts

    def payload_features(self, payload: LocalCentroids) -> int | None:
        """Return the dimension of a non-empty upload."""
        return int(payload.means.shape[1]) if len(payload.means) else None

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Run the FKM server step on the uploads in client-id order."""
        previous = self.centroids
        update = self.server_update if previous is not None else "kmeans"
        new = fkm_server_aggregate(
            [r.payload for r in replies], self.k, self.rng, seeding=self.server_seeding,
            update=update, previous=previous, n_init=self.n_init,
        )
        if len(new) < self.k:  # diagnose() warns if the final model has fewer than k
            logger.info(
                "round %d: only %d local centroids received (<= k=%d); using them as they are",
                server_round, len(new), self.k,
            )
        return new

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Return ``M``, the number of local centroids received (and the empty uploads).

        ``empty-uploads`` (only when > 0): clients that sent no centroid, every local
        cluster being smaller than the privacy threshold; :meth:`diagnose` warns when the
        last round has any.
        """
        info: dict[str, Any] = {
            "uploaded-centroids": int(sum(len(r.payload.means) for r in replies))}
        empty = sum(len(r.payload.means) == 0 for r in replies)
        if empty:
            info["empty-uploads"] = int(empty)
        return info

    def shift(self, previous: np.ndarray | None, new: np.ndarray) -> float:
        """Return the Hungarian-matched shift (cluster ids are not stable across rounds)."""
        return matched_shift(previous, new)

    def converged(self, server_round: int) -> bool:
        """Return whether the matched shift fell to ``tol``."""
        return self.last_shift <= self.tol


register(AlgorithmSpec(
    name="fkm", strategy=FedKMeans, client=FedKMeansClient, options=FKMOptions, loop=run_fkm,
    summary="FKM, iterative federated k-means (Garst & Reinders 2023)",
    protocol=(
        Phase("init", "train", "round 1 (when no initial centroids are given)",
              sends=("nothing",),
              reply_arrays=("`means` (k_i, d) float64: local cluster means, k_i <= min(n, k)",
                            "`counts` (k_i,) int64: rows behind each mean, each >= "
                            "privacy-threshold",
                            "`index` (k_i,) int64: all -1"),
              notes="The client seeds min(n, k) local clusters by k-means++; with `init` "
                    "\"private\" it runs max(1, local-iterations) Lloyd steps before the "
                    "upload, with \"paper\" it uploads the seeds themselves, **which are raw "
                    "rows**. Clusters of fewer than privacy-threshold rows are left out."),
        Phase("update", "train", "every later round (also round 1, given initial centroids)",
              sends=("`centroids` (k, d) float64: the global centroids",),
              reply_arrays=("`means` (k_i, d) float64: means after local-iterations Lloyd "
                            "steps from the global centroids that attract a local row, "
                            "k_i <= k",
                            "`counts` (k_i,) int64: rows behind each mean, each >= "
                            "privacy-threshold",
                            "`index` (k_i,) int64: the global centroid (0..k-1) each mean "
                            "grew from"),
              reply_metrics=("with `evaluate` true:", *EVALUATION_METRICS),
              reply_stats=("with `evaluate` true:", *EVALUATION_STATS),
              notes="With `evaluate` true the reply also scores the received centroids "
                    "(before the local step), so the rounds need no evaluation message."),
    )))
