"""KFed: the one-shot k-FED strategy of Dennis, Li & Smith (ICML 2021)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..algorithms.kfed import KFedOptions, kfed_server
from ..algorithms.local_centroids import LocalCentroids, check_local_centroids
from .base import ClusteringStrategy, Reply
from .oneshot import OneShotStrategy

__all__ = ["KFed"]


class KFed(OneShotStrategy):
    """k-FED, one round; pairs with :class:`~flwr_clustering.clients.KFedClient`.

    Every client uploads ``k'`` local centres once (Awasthi-Sheffet local step); the
    server seeds ``k`` centres max-from-set from the first client's centres (lowest
    client id) and runs unweighted k-means over all local centres.

    Parameters
    ----------
    k : int
        Number of global clusters.
    k_local : int, optional
        ``k'``, local clusters per client; defaults to ``k`` (the untuned setting).
    privacy_threshold : int, default 2
        Local centres of fewer points are withheld.
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    name = "kfed"
    phase = "kfed"
    searches_k = True  # k='auto' (strategies/choose_k.py)

    Options = KFedOptions
    advice = {**ClusteringStrategy.advice, "empty": ("k_local", "k"),
              "collapse": ("k_local", "k"), "lloyd-gain": ("k_local",)}

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> LocalCentroids:
        """Decode ``[centres, counts, index]`` and validate it.

        Each centre is held to the bound of a single row (``single_row``): a centre is
        scikit-learn's ``cluster_centers_`` (the mean of the partition before the last
        assignment) and its count is of the rows nearest to it after; near convergence
        they differ by a few rows, which on one-hot or other two-valued columns (where a
        cluster can sit exactly on the bound) would drop an honest reply.
        """
        upload = check_local_centroids(
            LocalCentroids.from_arrays(arrays), n_features=self.n_features,
            privacy_threshold=self.privacy_threshold,
        )
        if len(upload.means) > self.k_local:
            raise ValueError(f"{len(upload.means)} centres sent, more than k'={self.k_local}")
        return dataclasses.replace(upload, single_row=True)

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Run the k-FED server step on the uploads in client-id order."""
        if self.k_local * len(replies) < self.k:
            raise RuntimeError(
                f"k-FED needs k' * clients >= k: {self.k_local} * {len(replies)} < {self.k}"
            )
        return kfed_server([r.payload for r in replies], self.k)
