"""NumPyClients of FeCA and M-Avg (Xu et al., "Jigsaw game"): client sides of FeCA, MAvg."""

from __future__ import annotations

import logging

from ..algorithms.feca import FeCAOptions, feca_client
from ..algorithms.lloyd import client_rng
from ..algorithms.mavg import MAvgOptions, mavg_client
from .base import ClusteringClient

__all__ = ["FeCAClient", "MAvgClient"]

logger = logging.getLogger(__name__)


class FeCAClient(ClusteringClient):
    """FeCA client: local k-means, elimination of one-fit-many centroids, radii; once.

    ``config`` carries ``seed`` and the keys of
    :class:`~flwr_clustering.algorithms.feca.FeCAOptions` (see
    :func:`flwr_clustering.algorithms.feca.feca_client`). ``fit`` returns
    ``[centroids (k_m, d), radii (k_m,)]`` and the metrics ``removed`` (centroids the
    elimination dropped) and ``withheld`` (kept centroids of fewer than
    ``privacy-threshold`` points, not sent). No counts and no labels leave the client.

    Parameters
    ----------
    X, y, client_id
        See :class:`~flwr_clustering.clients.base.ClusteringClient`.
    """

    def fit(self, parameters, config):
        """Run the FeCA client step.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            Unused (FeCA needs nothing from the server).
        config : dict
            See the class docstring.

        Returns
        -------
        tuple
            ``([centroids, radii], n, {"removed": int, "withheld": int})``.
        """
        options = FeCAOptions.from_config(config)
        k_local = options.k_local
        if len(self.X) < k_local:
            logger.warning("client %d has %d rows, fewer than k'=%d: it runs %d clusters",
                           self.client_id, len(self.X), k_local, len(self.X))
        res = feca_client(
            self.X, k_local, client_rng(int(config.get("seed", 0)), self.client_id),
            std_mode=options.std_mode, radius=options.radius, eliminate=options.eliminate,
            privacy_threshold=options.privacy_threshold, init=options.init,
            n_init=options.n_init,
        )
        metrics = {"removed": len(res.removed), "withheld": len(res.withheld)}
        return res.upload.to_arrays(), len(self.X), metrics


class MAvgClient(ClusteringClient):
    """M-Avg client: one single-start k-means with ``k`` clusters, centroids uploaded once.

    ``config`` carries ``seed`` and the keys of
    :class:`~flwr_clustering.algorithms.mavg.MAvgOptions`.
    ``fit`` returns ``[centroids (k, d)]``. A client with fewer than ``k`` points, or whose
    k-means leaves a cluster of fewer than ``privacy-threshold`` points, raises (M-Avg needs
    all ``k`` centroids, and a one-point centroid is a raw row); the server drops it with
    the logged reason.

    Parameters
    ----------
    X, y, client_id
        See :class:`~flwr_clustering.clients.base.ClusteringClient`.
    """

    def fit(self, parameters, config):
        """Run the M-Avg client step.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            Unused.
        config : dict
            See the class docstring.

        Returns
        -------
        tuple
            ``([centroids], n, {})``.
        """
        options = MAvgOptions.from_config(config)
        if len(self.X) < options.k:
            raise ValueError(
                f"client {self.client_id} has {len(self.X)} rows, fewer than k={options.k}: "
                "M-Avg uploads exactly k local centroids per client (lower k, or leave this "
                "client out)")
        rng = client_rng(int(config.get("seed", 0)), self.client_id)
        C = mavg_client(self.X, options.k, rng, init=options.init, n_init=options.n_init,
                        privacy_threshold=options.privacy_threshold)
        return [C], len(self.X), {}
