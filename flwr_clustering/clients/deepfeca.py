"""NumPyClient of DeepFeCA (Xu et al., Algorithm 6): the client side of ``DeepFeCA``.

A client answers four messages (``config["phase"]``):

- ``describe``: returns ``[n_features]`` (the server builds the network from it);
- ``cluster``: receives the global weights, embeds its rows and returns its labeller
  upload on the features (FeCA: ``[centroids, radii]``; M-Avg: ``[centroids]``; k-FED:
  ``[centres, counts, index]``) — statistics of features, never a row;
- ``train``: receives ``[*weights, C*]``, labels its rows by the nearest centroid of
  ``C*``, trains for the configured epochs and returns its weights (same dtypes and
  shapes) and the metrics ``loss``, ``steps``, ``clusters-used``, ``seconds``;
- ``evaluate``: receives ``[*weights, C*]`` and returns the additive statistics of ``C*``
  on its features (``sse``, counts and, with labels, the contingency table).
"""

from __future__ import annotations

import time

import numpy as np

from ..algorithms.deepfeca import (
    DeepFeCAOptions,
    NetworkSpec,
    build_model,
    cluster_step,
    embed,
    train_step,
)
from ..algorithms.lloyd import nearest_labels
from ..evaluation import local_evaluation_stats
from .base import ClusteringClient

__all__ = ["DeepFeCAClient"]


class DeepFeCAClient(ClusteringClient):
    """A DeepFeCA client (see the module docstring for its messages).

    Parameters
    ----------
    X : array_like of shape (n, d)
        The local rows (images flattened: ``d = prod(input shape)``); they never leave.
    y, client_id
        See :class:`~flwr_clustering.clients.base.ClusteringClient`.
    """

    def _spec(self, config) -> NetworkSpec:
        spec = NetworkSpec.from_config(config)
        if spec.n_inputs != self.X.shape[1]:
            raise ValueError(f"client {self.client_id}: the network takes {spec.n_inputs} "
                             f"features, this client's rows have {self.X.shape[1]}")
        return spec

    def _split(self, parameters) -> tuple[list[np.ndarray], np.ndarray]:
        if len(parameters) < 2:
            raise ValueError(f"client {self.client_id}: expected [*weights, C*], got "
                             f"{len(parameters)} arrays")
        return list(parameters[:-1]), np.asarray(parameters[-1], dtype=np.float64)

    def fit(self, parameters, config):
        """Answer the ``describe``, ``cluster`` or ``train`` message."""
        phase = config.get("phase")
        n = len(self.X)
        if phase == "describe":
            return [np.array([self.X.shape[1]], dtype=np.int64)], n, {}
        t0 = time.perf_counter()
        spec = self._spec(config)
        common = dict(seed=int(config.get("seed", 0)), client_id=self.client_id,
                      server_round=int(config["server-round"]))
        options = DeepFeCAOptions.from_config(config)
        if phase == "cluster":
            arrays = cluster_step(list(parameters), self.X, spec, options.labeller, options.k,
                                  k_local=options.k_local or None,
                                  privacy_threshold=options.privacy_threshold,
                                  threads=options.threads, **common)
            return arrays, n, {"seconds": time.perf_counter() - t0}
        if phase == "train":
            weights, C = self._split(parameters)
            new, metrics = train_step(weights, self.X, C, spec,
                                      options.train_options(), **common)
            return new, n, {**metrics, "seconds": time.perf_counter() - t0}
        raise ValueError(f"client {self.client_id}: unknown DeepFeCA phase {phase!r}")

    def local_labels(self, parameters, config) -> np.ndarray:
        """Nearest ``C*`` to each row's feature under the global network."""
        spec = self._spec(config)
        weights, C = self._split(parameters)
        F = embed(build_model(spec, weights), self.X, spec)
        return nearest_labels(F, C).astype(np.int64)

    def evaluate(self, parameters, config):
        """Statistics of ``C*`` on this client's features under the global network."""
        spec = self._spec(config)
        weights, C = self._split(parameters)
        F = embed(build_model(spec, weights), self.X, spec)
        n_classes = int(config["n-classes"]) if config.get("n-classes") else None
        stats = local_evaluation_stats(F, C, self.y, n_classes,
                                       min_rows=int(config.get("privacy-threshold", 2)))
        return float(stats["sse"]) / len(self.X), len(self.X), stats
