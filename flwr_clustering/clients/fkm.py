"""NumPyClient of FKM (Garst & Reinders, Algorithm 1): the client side of FedKMeans."""

from __future__ import annotations

import logging
import math
from functools import lru_cache

import numpy as np

from ..algorithms.dp_lloyd import (
    client_noise_rng,
    dp_candidate_stats,
    dp_client_stats,
    dp_moment_stats,
    dp_noise_plan,
    moments_sensitivity,
    sensitivity,
)
from ..algorithms.ffcm import feature_moments
from ..algorithms.fkm import FKMOptions, dense_totals, fkm_client_init, fkm_client_update
from ..algorithms.fkm_partial import (
    check_partial_data,
    fkm_partial_client_update,
    partial_dense_totals,
    partial_distance_blocks,
    partial_labels,
    partial_moments,
)
from ..algorithms.lloyd import FLOAT_DTYPES, client_rng
from ..evaluation import evaluation_stats_from_blocks
from .base import ClusteringClient

__all__ = ["FedKMeansClient"]

logger = logging.getLogger(__name__)


#: The DP phases and the mechanism of the noise plan each answers (index into it).
_DP_MECHANISMS = {"dp-moments": 0, "dp-candidates": 1, "dp-update": -1}


@lru_cache(maxsize=32)
def _client_sigma(options: FKMOptions, clients: int, phase: str) -> float:
    """A client's own noise level, from the options (not from a number the server sends).

    ``phase``'s noise multiplier in :func:`~flwr_clustering.algorithms.dp_lloyd.dp_noise_plan`
    times its sensitivity, over ``sqrt(m)``; 0 with central placement.
    """
    if options.dp_placement == "central":
        return 0.0
    plan = dp_noise_plan(options.dp_epsilon, options.dp_delta, options.round_cap(),
                         init=options.dp_init, init_share=options.dp_init_share,
                         accountant=options.dp_accountant)
    if phase != "dp-update" and options.dp_init != "moments":
        raise ValueError(f"the {phase} phase belongs to dp-init='moments', the run says "
                         f"dp-init={options.dp_init!r}")
    z = plan[_DP_MECHANISMS[phase]]
    sens = moments_sensitivity if phase == "dp-moments" else sensitivity
    return z * sens(options.data_bound) / math.sqrt(max(int(clients), 1))


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
    dp_phases = ("dp-moments", "dp-candidates", "dp-update")

    #: Whether the run's feature transform keeps missing cells (``missing='partial'``):
    #: partial FKM, each row clustered on its observed features
    #: (:mod:`~flwr_clustering.algorithms.fkm_partial`). Set by :meth:`reads_missing`.
    partial = False

    def reads_missing(self, transform) -> bool:
        """Partial FKM trains on rows with missing cells (a transform that keeps them)."""
        self.partial = transform.missing == "keep"
        return self.partial

    def validated(self, X: np.ndarray) -> np.ndarray:
        """The base's checks; under partial FKM NaN is a missing cell (inf never)."""
        if not self.partial:
            return super().validated(X)
        X = check_partial_data(X, name=f"client {self.client_id} data")
        return np.ascontiguousarray(X, dtype=self.dtype)

    def local_stats(self, C: np.ndarray, config: dict) -> dict:
        """The base's statistics; partial FKM's from the rescaled partial distances.

        Partial FKM sends the SSE, silhouette, counts and contingency of its rows by the
        partial distance, and no residual or moment sums (they would need complete rows).
        """
        if not self.partial:
            return super().local_stats(C, config)
        n_classes = int(config["n-classes"]) if config.get("n-classes") else None
        stats, _ = evaluation_stats_from_blocks(
            partial_distance_blocks(self.X, C), len(self.X), len(C), self.y, n_classes)
        return stats

    def local_labels(self, parameters, config) -> np.ndarray:
        """The base's labels; partial FKM's nearest centre on each row's observed features."""
        if not self.partial:
            return super().local_labels(parameters, config)
        return partial_labels(self.X, self.centroids_from(parameters))

    def _partial_phase(self, phase: str) -> None:
        if not self.partial:
            raise ValueError(f"client {self.client_id}: the {phase} phase is partial FKM's, "
                             "and this run's feature transform does not keep missing cells "
                             "(missing='partial')")

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
                phase not in self.dp_phases or options.dp_epsilon > self.dp_max_epsilon):
            asked = (f"dp-epsilon={options.dp_epsilon:g}" if phase in self.dp_phases
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
        elif phase in self.dp_phases:
            # differentially private federated Lloyd: clipped rows, noisy statistics
            sigma = _client_sigma(options, int(config["dp-clients"]), phase)
            rng = client_noise_rng(int(config.get("seed", 0)), self.client_id,
                                   int(config.get("dp-round", 0)), phase)
            if phase == "dp-moments":
                arrays = list(dp_moment_stats(self.X, bound=options.data_bound, sigma=sigma,
                                              rng=rng))
            elif phase == "dp-candidates":
                if len(parameters) != 2:
                    raise ValueError(f"client {self.client_id}: dp-candidates expects the "
                                     f"subspace and the candidates, got {len(parameters)} "
                                     "arrays")
                U, Q = (np.asarray(a, dtype=np.float64) for a in parameters)
                if U.ndim != 2 or U.shape[0] != self.X.shape[1] or Q.ndim != 2 \
                        or Q.shape[1] != U.shape[1]:
                    raise ValueError(f"client {self.client_id}: dp-candidates subspace "
                                     f"{U.shape} and candidates {Q.shape} do not fit "
                                     f"{self.X.shape[1]} features")
                arrays = list(dp_candidate_stats(self.X, U, Q, bound=options.data_bound,
                                                 sigma=sigma, rng=rng))
            else:
                C = self.centroids_from(parameters)
                arrays = list(dp_client_stats(self.X, C, bound=options.data_bound,
                                              sigma=sigma, rng=rng))
            return arrays, len(self.X), {"dp-sigma": float(sigma)}
        elif phase == "secure-moments":
            # secure aggregation's start: rows, sum and sum of squares per feature
            if len(self.X) < options.privacy_threshold:
                d = self.X.shape[1]
                return [np.zeros(1), np.zeros(d), np.zeros(d)], len(self.X), {}
            n, total, sumsq = feature_moments(self.X)
            return [np.array([float(n)]), total, sumsq], len(self.X), {}
        elif phase == "secure-update":
            # federated Lloyd under secure aggregation: the same upload, as dense totals
            C = self.centroids_from(parameters)
            upload = fkm_client_update(self.X, C, **opts)
            return list(dense_totals(upload, len(C), C.shape[1])), len(self.X), {}
        elif phase in ("partial-moments", "secure-partial-moments"):
            # partial FKM's start: per feature, the count, sum and sum of squares of the
            # observed values (a feature seen in fewer than privacy-threshold rows: zeros)
            self._partial_phase(phase)
            arrays = list(partial_moments(self.X, options.privacy_threshold))
            return arrays, len(self.X), {}
        elif phase in ("partial-update", "secure-partial-update"):
            self._partial_phase(phase)
            C = self.centroids_from(parameters)
            if phase == "partial-update" and config.get("evaluate", True):
                metrics = self.local_stats(C, config)
            upload = fkm_partial_client_update(
                self.X, C, privacy_threshold=options.privacy_threshold,
                local_iters=options.local_iterations)
            if phase == "secure-partial-update":  # summed by secure aggregation
                return list(partial_dense_totals(upload, len(C), C.shape[1])), len(self.X), {}
        elif phase == "update":
            C = self.centroids_from(parameters)
            if config.get("evaluate", True):
                metrics = self.local_stats(C, config)
            upload = fkm_client_update(self.X, C, **opts)
        else:
            raise ValueError(f"client {self.client_id}: unknown FKM phase {phase!r}")
        return upload.to_arrays(), len(self.X), metrics
