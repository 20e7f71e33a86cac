"""Echo: a no-computation twin of FedKMeans that measures the Flower floor of a round.

:class:`Echo` sends exactly the messages :class:`~flwr_clustering.strategies.FedKMeans`
sends (round 1: no arrays and the ``init`` configuration; later rounds: ``[C_g (k, d)]``
and the ``update`` configuration, built by FedKMeans' own ``train_config``) and receives
payloads of the same shapes from :class:`EchoClient`
(``[means (k_i, d), counts (k_i,), index (k_i,)]`` plus the same evaluation statistics).
It does no clustering: the server keeps the previous centroids (round 1: the upload of
the lowest client id) and only decodes the payloads. All the plumbing (node waiting,
message building, reply checking and sorting, history, evaluation) is the shared
:class:`~flwr_clustering.strategies.base.ClusteringStrategy`, so ``FedKMeans round time /
Echo round time`` is the cost of the algorithm over the framework. Used by
:mod:`simulations.benchmarks.bench`; it never clusters anything. It is not part of the
library: the App loads it from the run config ``algorithm='simulations.benchmarks.echo:ECHO'``
(the registry imports an :class:`~flwr_clustering.registry.AlgorithmSpec` given as
``module:ATTRIBUTE``; ``flwr run .`` packs this folder into the Flower App). The client
half, :class:`EchoClient`, answers FedKMeansClient's messages with payloads of the same
shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flwr_clustering.algorithms.fkm import FKMOptions
from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.clients.base import ClusteringClient
from flwr_clustering.registry import AlgorithmSpec
from flwr_clustering.strategies.base import ClusteringStrategy, Reply
from flwr_clustering.strategies.fkm import FedKMeans

__all__ = ["ECHO", "ECHO_ALGORITHM", "ECHO_COUNT", "Echo", "EchoClient"]

#: The run-config value of ``algorithm`` that selects the echo pair.
ECHO_ALGORITHM = "simulations.benchmarks.echo:ECHO"


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
    #: FedKMeans' train_config reads it: the echo sends plain FKM's messages, never
    #: partial FKM's (``missing='partial'``).
    partial = False

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return FedKMeans' client configuration (the same keys and values)."""
        # FedKMeans' own method, so the echo messages follow any change to FedKMeans'.
        return FedKMeans.train_config(self, server_round)  # type: ignore[arg-type]

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> LocalCentroids:
        """Decode ``[means, counts, index]`` (no validation beyond the array count)."""
        return LocalCentroids.from_arrays(arrays)

    def payload_features(self, payload: LocalCentroids) -> int | None:
        """Return the dimension of a non-empty upload (its means are not validated)."""
        means = payload.means
        return int(means.shape[1]) if means.ndim == 2 and len(means) else None

    def payload_counts(self, payload: LocalCentroids) -> None:
        """None checked: the echo's counts are placeholders (always 2)."""
        return None

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



ECHO_COUNT = 2


class EchoClient(ClusteringClient):
    """Benchmark client: FedKMeansClient's replies without its computation.

    ``fit`` returns ``[means (k_i, d), counts (k_i,), index (k_i,)]``: in the ``init``
    phase ``k_i = min(n, k)`` placeholder means (row ``j`` is all ``j``) with index ``-1``;
    in the ``update`` phase the received ``(k, d)`` centroids with index ``0..k-1``; counts
    are always 2. With ``config["evaluate"]`` (the default, as FedKMeans sends it) the
    metrics are :meth:`placeholder_stats`.

    Parameters
    ----------
    X, y, client_id
        See :class:`~flwr_clustering.clients.base.ClusteringClient`.
    """

    def placeholder_stats(self, k: int, config: dict[str, Any]) -> dict[str, Any]:
        """Evaluation statistics with the shapes of the real ones and fixed values.

        Parameters
        ----------
        k : int
            Number of centroids (length of ``"cluster-counts"``).
        config : dict
            May carry ``"n-classes"`` (width of the contingency table), as for
            :meth:`~flwr_clustering.clients.base.ClusteringClient.local_stats`.

        Returns
        -------
        dict
            ``"num-examples"``, ``"sse"`` (0.0), ``"silhouette-sum"`` (0.0),
            ``"cluster-counts"`` (all points in cluster 0), ``"sum-x"`` (zeros),
            ``"sst-local"`` (0.0) and ``"cluster-residuals"`` (zeros, ``(k, d)``) and, with
            labels,
            ``"contingency"`` (all points in cell (0, 0)) and ``"ari-local"`` (0.0).
        """
        n = len(self.X)
        counts = np.zeros(k, dtype=np.int64)
        counts[:1] = n
        stats: dict[str, Any] = {
            "num-examples": n, "sse": 0.0, "silhouette-sum": 0.0, "cluster-counts": counts,
            "sum-x": np.zeros(self.X.shape[1]), "sst-local": 0.0,
            "cluster-residuals": np.zeros((k, self.X.shape[1])),
        }
        if self.y is not None:
            if config.get("n-classes"):
                n_classes = int(config["n-classes"])
            else:
                n_classes = int(self.y.max()) + 1 if self.y.size else 0
            table = np.zeros((k, n_classes), dtype=np.int64)
            if table.size:
                table[0, 0] = n
            stats["contingency"] = table
            stats["ari-local"] = 0.0
        return stats

    def fit(self, parameters, config):
        """Echo the received centroids (``update``) or send placeholders (``init``).

        Parameters
        ----------
        parameters : list of numpy.ndarray
            ``[]`` in the init phase, ``[global centroids]`` afterwards.
        config : dict
            FedKMeans' configuration (``phase``, ``k``, ``evaluate``, ...).

        Returns
        -------
        tuple
            ``([means, counts, index], n, metrics)``.
        """
        phase = config.get("phase", "update")
        metrics: dict[str, Any] = {}
        if phase == "init":
            k_i = min(len(self.X), int(config["k"]))
            d = self.X.shape[1]
            means = np.repeat(np.arange(k_i, dtype=np.float64)[:, None], d, axis=1)
            index = np.full(k_i, -1, dtype=np.int64)
        elif phase == "update":
            means = self.centroids_from(parameters)
            index = np.arange(len(means), dtype=np.int64)
            if config.get("evaluate", True):
                metrics = self.placeholder_stats(len(means), config)
        else:
            raise ValueError(f"client {self.client_id}: unknown echo phase {phase!r}")
        counts = np.full(len(means), ECHO_COUNT, dtype=np.int64)
        return [means, counts, index], len(self.X), metrics

    def evaluate(self, parameters, config):
        """Return :meth:`placeholder_stats` for the received centroids (no computation).

        Parameters
        ----------
        parameters : list of numpy.ndarray
            ``[centroids]``.
        config : dict
            Evaluation configuration.

        Returns
        -------
        tuple
            ``(0.0, n, statistics)``.
        """
        C = self.centroids_from(parameters)
        return 0.0, len(self.X), self.placeholder_stats(len(C), config)


#: The echo pair as an algorithm the App can load (``algorithm=ECHO_ALGORITHM``).
ECHO = AlgorithmSpec(name="echo", strategy=Echo, client=EchoClient, options=FKMOptions,
                     summary="benchmark: FedKMeans' messages, no computation", listed=False)
