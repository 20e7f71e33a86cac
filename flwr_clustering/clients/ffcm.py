"""NumPyClient of FFCM (Stallmann & Wilbik 2022): the client side of the FFCM strategy."""

from __future__ import annotations

import numpy as np

from ..algorithms.ffcm import FFCMOptions, feature_moments, ffcm_client
from .base import ClusteringClient

__all__ = ["FFCMClient"]


class FFCMClient(ClusteringClient):
    """FFCM client: feature moments once, then local fuzzy c-means every round.

    ``config["phase"]`` is ``"moments"`` (return ``[n (1,), sum (d,), sum of squares
    (d,)]`` for the server's random initialisation) or ``"ffcm"`` (run fuzzy c-means from
    the received global centres with ``fuzzifier``, ``local-max-iter``, ``local-tol`` and
    ``criterion``; return ``[centres (k, d), supports (k,)]`` and, when ``evaluate`` is
    set, the evaluation statistics of the received centres). A client with fewer points
    than ``privacy-threshold`` refuses (its statistics would be near-raw rows).

    Parameters
    ----------
    X, y, client_id
        See :class:`~flwr_clustering.clients.base.ClusteringClient`.
    """

    def fit(self, parameters, config):
        """Run the FFCM client step named by ``config["phase"]``.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            ``[]`` for the moments, ``[global centres]`` afterwards.
        config : dict
            See the class docstring.

        Returns
        -------
        tuple
            ``(arrays, n, metrics)``.
        """
        options = FFCMOptions.from_config(config)
        p = options.privacy_threshold
        if len(self.X) < p:
            raise ValueError(
                f"client {self.client_id} has {len(self.X)} point(s), fewer than the privacy "
                f"threshold {p}: it withholds its reply"
            )
        phase = config.get("phase", "ffcm")
        if phase == "moments":
            n, total, sumsq = feature_moments(self.X)
            return [np.array([n], dtype=np.int64), total, sumsq], len(self.X), {}
        if phase not in ("ffcm", "secure-ffcm"):
            raise ValueError(f"client {self.client_id}: unknown FFCM phase {phase!r}")
        if options.fuzzifier == 0:
            raise ValueError(
                f"client {self.client_id}: fuzzifier 0 (chosen from the dimension) must be "
                "resolved by the server before the ffcm phase; send the chosen m"
            )
        V = self.centroids_from(parameters)
        metrics = self.local_stats(V, config) if config.get("evaluate", True) else {}
        centres, supports = ffcm_client(
            self.X, V, m=options.fuzzifier, max_iter=options.local_max_iter,
            tol=options.local_tol, criterion=options.criterion,
        )
        if phase == "secure-ffcm":  # secure aggregation: summable, s V and s
            return [centres * supports[:, None], supports], len(self.X), {}
        return [centres, supports], len(self.X), metrics
