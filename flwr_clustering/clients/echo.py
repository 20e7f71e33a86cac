"""EchoClient: the client side of the :class:`~flwr_clustering.strategies.echo.Echo` benchmark.

It answers FedKMeans' messages with payloads of the same shapes as
:class:`~flwr_clustering.clients.FedKMeansClient` but computes nothing: in the ``init``
phase it uploads ``min(n, k)`` data-free placeholder centroids, in the ``update`` phase the
received centroids themselves, always with counts of 2; its evaluation statistics have the
keys, types and shapes of :func:`flwr_clustering.metrics.local_evaluation_stats` but fixed
values. No data row leaves the client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import ClusteringClient

__all__ = ["EchoClient"]

#: The count the echo client reports for every centroid.
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
            ``"cluster-counts"`` (all points in cluster 0) and, with labels,
            ``"contingency"`` (all points in cell (0, 0)) and ``"ari-local"`` (0.0).
        """
        n = len(self.X)
        counts = np.zeros(k, dtype=np.int64)
        counts[:1] = n
        stats: dict[str, Any] = {
            "num-examples": n, "sse": 0.0, "silhouette-sum": 0.0, "cluster-counts": counts,
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
