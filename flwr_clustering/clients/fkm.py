"""NumPyClient of FKM (Garst & Reinders, Algorithm 1): the client side of FedKMeans."""

from __future__ import annotations

import logging
import math
from functools import lru_cache

import numpy as np

from ..algorithms.fkm import FKMOptions, fkm_client_init, fkm_client_update
from ..algorithms.lloyd import FLOAT_DTYPES, client_rng
from .base import ClusteringClient

__all__ = ["FedKMeansClient"]

logger = logging.getLogger(__name__)


@lru_cache(maxsize=32)
def _client_sigma(epsilon: float, delta: float, rounds: int, bound: float, clients: int,
                  placement: str) -> float:
    """A client's own noise level, from the options (not from a number the server sends)."""
    from ..algorithms.dp_lloyd import noise_multiplier_for, sensitivity

    if placement == "central":
        return 0.0
    z = noise_multiplier_for(epsilon, delta, rounds)
    return z * sensitivity(bound) / math.sqrt(max(int(clients), 1))


class FedKMeansClient(ClusteringClient):
    """FKM client: k-means++ initialisation, then one local Lloyd step per round.

    The server drives it through ``config``:

    ``phase``
        ``"init"`` (round 0: seed ``min(n, k)`` local clusters) or ``"update"`` (keep
        the received global centroids that attract a local point, run the local
        Lloyd steps); ``"dp-update"`` (noisy clipped sums and counts, differential
        privacy); under secure aggregation ``"secure-moments"`` (rows, sum and sum of
        squares per feature) and ``"secure-update"`` (the ``"update"`` upload as dense
        per-centroid sums and counts), which reach the server only summed.
    the keys of :class:`~flwr_clustering.algorithms.fkm.FKMOptions` and ``seed``
        See :func:`flwr_clustering.algorithms.fkm.fkm_client_init`.
    ``dtype``
        ``"float32"``: hold the rows as float32 from this message on, compute in float32
        and send float32 means (:meth:`~flwr_clustering.clients.base.ClusteringClient.use_dtype`).
    ``evaluate``
        In ``"update"``, also return the evaluation statistics of the received
        centroids (the paper scores round ``r`` on the assignment to ``C_g`` before the
        local step), so no extra message is needed per round.

    ``fit`` returns ``[means (k_i, d), counts (k_i,), index (k_i,)]``. Only means of
    at least ``privacy-threshold`` points are sent; with ``init="paper"`` the round-0
    upload is the k-means++ seeds, i.e. raw rows (as in the paper's code).

    Parameters
    ----------
    X, y, client_id
        See :class:`~flwr_clustering.clients.base.ClusteringClient`.
    """

    #: FKM computes in float32 too (its ``dtype`` option: half the memory and messages).
    dtypes = FLOAT_DTYPES

    #: The phases that are differentially private (a node with ``dp-max-epsilon`` in its
    #: node config answers no other train phase).
    dp_phases = ("dp-update",)

    def fit(self, parameters, config):
        """Run the FKM client step named by ``config["phase"]``.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            ``[]`` in the init phase, ``[global centroids]`` afterwards.
        config : dict
            See the class docstring.

        Returns
        -------
        tuple
            ``([means, counts, index], n, metrics)``.
        """
        phase = config.get("phase", "update")
        options = FKMOptions.from_config(config)
        self.use_dtype(options.dtype)
        opts = dict(privacy_threshold=options.privacy_threshold,
                    local_iters=options.local_iterations, recount=options.recount)
        metrics: dict = {}
        if self.dp_max_epsilon is not None and (
                phase != "dp-update" or options.dp_epsilon > self.dp_max_epsilon):
            asked = (f"dp-epsilon={options.dp_epsilon:g}" if phase == "dp-update"
                     else "a run without differential privacy")
            raise PermissionError(
                f"client {self.client_id}: this node accepts differential privacy with "
                f"epsilon at most {self.dp_max_epsilon:g} (node config dp-max-epsilon), the "
                f"run asks for {asked}: run FKM with server-update='lloyd' and "
                f"dp-epsilon <= {self.dp_max_epsilon:g}")
        if phase == "init":
            k = options.k
            if len(self.X) < k:
                logger.warning(
                    "client %d has %d rows, fewer than k=%d: it seeds %d local clusters",
                    self.client_id, len(self.X), k, len(self.X),
                )
            if options.init == "paper":
                self.consent_to_raw_rows("init='paper'",
                                         f"the k-means++ seeds, up to {k} raw rows")
            rng = client_rng(int(config.get("seed", 0)), self.client_id)
            upload = fkm_client_init(self.X, k, rng, init=options.init, **opts)
            if options.init == "paper":
                metrics["raw-rows"] = int(len(upload.means))
        elif phase == "dp-update":
            # differentially private federated Lloyd: clipped rows, noisy sums and counts
            from ..algorithms.dp_lloyd import client_noise_rng, dp_client_stats

            C = self.centroids_from(parameters)
            clients = int(config["dp-clients"])
            sigma = _client_sigma(options.dp_epsilon, options.dp_delta, options.max_rounds,
                                  options.data_bound, clients, options.dp_placement)
            rng = client_noise_rng(int(config.get("seed", 0)), self.client_id,
                                   int(config["dp-round"]))
            sums, counts = dp_client_stats(self.X, C, bound=options.data_bound, sigma=sigma,
                                           rng=rng)
            return [sums, counts], len(self.X), {"dp-sigma": float(sigma)}
        elif phase == "secure-moments":
            # secure aggregation's start: rows, sum and sum of squares per feature
            if len(self.X) < options.privacy_threshold:
                d = self.X.shape[1]
                return [np.zeros(1), np.zeros(d), np.zeros(d)], len(self.X), {}
            from ..algorithms.ffcm import feature_moments

            n, total, sumsq = feature_moments(self.X)
            return [np.array([float(n)]), total, sumsq], len(self.X), {}
        elif phase == "secure-update":
            # federated Lloyd under secure aggregation: the same upload, as dense totals
            from ..algorithms.fkm import dense_totals

            C = self.centroids_from(parameters)
            upload = fkm_client_update(self.X, C, **opts)
            return list(dense_totals(upload, len(C), C.shape[1])), len(self.X), {}
        elif phase == "update":
            C = self.centroids_from(parameters)
            if config.get("evaluate", True):
                metrics = self.local_stats(C, config)
            upload = fkm_client_update(self.X, C, **opts)
        else:
            raise ValueError(f"client {self.client_id}: unknown FKM phase {phase!r}")
        return upload.to_arrays(), len(self.X), metrics
