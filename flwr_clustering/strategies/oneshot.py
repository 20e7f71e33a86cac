"""The one-shot strategy base: one train round, nothing sent, one upload per client.

k-FED, FeCA, M-Avg and the masked one-shot algorithm share one shape: the server sends
each client its options (no model), every client clusters its own rows once and uploads a
summary of its local clusters (centres, counts, radii or Gaussians), and the server builds
the global model from the uploads in client-id order. :class:`OneShotStrategy` holds that
shape; an algorithm says only its train ``phase``, how to read one upload
(:meth:`~flwr_clustering.strategies.base.ClusteringStrategy.parse_payload`, returning a
payload that keeps :class:`~flwr_clustering.algorithms.upload.Upload`) and how to
aggregate the uploads (:meth:`~flwr_clustering.strategies.base.ClusteringStrategy.
aggregate_payloads`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import ClusteringStrategy

__all__ = ["OneShotStrategy"]


class OneShotStrategy(ClusteringStrategy):
    """Base of the one-shot strategies: one train round, no model sent.

    A subclass sets :attr:`phase` and overrides
    :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.parse_payload` and
    :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.aggregate_payloads`; what
    an upload claims (counts, means, features) for the reply rules is the payload's own
    (:class:`~flwr_clustering.algorithms.upload.Upload`).

    Parameters
    ----------
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    #: The ``phase`` of the one train message (what the client runs).
    phase: str = ""

    def protocol_rounds(self) -> int:
        """One shot."""
        return 1

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return the phase and the algorithm's options (what the clients run)."""
        return {"phase": self.phase, **self.options.to_config()}

    def train_arrays(self, server_round: int) -> list[np.ndarray]:
        """Return nothing: the clients need no model."""
        return []

    def converged(self, server_round: int) -> bool:
        """Done after the one round."""
        return True
