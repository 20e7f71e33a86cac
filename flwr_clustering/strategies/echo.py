"""Echo: a no-computation twin of FedKMeans that measures the Flower floor of a round.

:class:`Echo` sends exactly the messages :class:`~flwr_clustering.strategies.FedKMeans`
sends (round 1: no arrays and the ``init`` configuration; later rounds: ``[C_g (k, d)]``
and the ``update`` configuration, built by FedKMeans' own ``train_config``) and receives
payloads of the same shapes from :class:`~flwr_clustering.clients.echo.EchoClient`
(``[means (k_i, d), counts (k_i,), index (k_i,)]`` plus the same evaluation statistics).
It does no clustering: the server keeps the previous centroids (round 1: the upload of
the lowest client id) and only decodes the payloads. All the plumbing (node waiting,
message building, reply checking and sorting, history, evaluation, saving) is the shared
:class:`~flwr_clustering.strategies.base.ClusteringStrategy`, so ``FedKMeans round time /
Echo round time`` is the cost of the algorithm over the framework. Used by
``flwr_clustering.simulations.bench``; it never clusters anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.fkm import FKMOptions
from ..algorithms.local_centroids import LocalCentroids
from ..clients.echo import EchoClient
from ..registry import AlgorithmSpec, register
from .base import ClusteringStrategy, Reply
from .fkm import FedKMeans

__all__ = ["Echo"]


class Echo(ClusteringStrategy):
    """Benchmark strategy: FedKMeans' messages without FedKMeans' computation.

    Parameters
    ----------
    k : int
        ``K_g``, the number of centroids in the messages.
    privacy_threshold : int, default 2
        Sent to the clients, as FedKMeans does (the echo client ignores it).
    local_iterations : int, default 1
        Sent to the clients, as FedKMeans does.
    init : {"private", "paper"}, default "private"
        Sent to the clients, as FedKMeans does.
    recount : bool, default False
        Sent to the clients, as FedKMeans does.
    max_rounds : int, default 20
        Aggregations at most.
    tol : float, default 1e-6
        Stop when the centroids move by at most ``tol`` (they stop moving after round 2,
        so benchmarks pass a negative ``tol`` to run a fixed number of rounds).
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    name = "echo"
    #: FedKMeans' options: the same run-config keys and message config.
    Options = FKMOptions

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return FedKMeans' client configuration (the same keys and values)."""
        # FedKMeans' own method, so the echo messages follow any change to FedKMeans'.
        return FedKMeans.train_config(self, server_round)  # type: ignore[arg-type]

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> LocalCentroids:
        """Decode ``[means, counts, index]`` (no validation beyond the array count)."""
        return LocalCentroids.from_arrays(arrays)

    def payload_features(self, payload: LocalCentroids) -> int | None:
        """Return the dimension of a non-empty upload."""
        means = payload.means
        return int(means.shape[1]) if means.ndim == 2 and len(means) else None

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Return the previous centroids; in round 1 the lowest client id's upload."""
        if self.centroids is not None:
            return self.centroids
        return replies[0].payload.means

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Return ``M``, the number of local centroids received (as FedKMeans)."""
        return {"uploaded-centroids": int(sum(len(r.payload.means) for r in replies))}

    def converged(self, server_round: int) -> bool:
        """Return whether the centroids moved by at most ``tol``."""
        return self.last_shift <= self.tol


# Benchmark only: FedKMeans' messages without computation (not listed as an algorithm).
ECHO = register(AlgorithmSpec(name="echo", strategy=Echo, client=EchoClient, options=FKMOptions,
                              summary="benchmark: FedKMeans' messages, no computation",
                              listed=False))
