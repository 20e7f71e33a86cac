"""NumPyClient of decentralized gradient clustering (DGC-rho, Armacki et al., Algorithm 1).

The client is a graph node: it keeps its data, and in every round applies one step (U) to
its own centres using the sum of its neighbours' centres that the relay forwards. It holds
no state between rounds: the clusters of the current iteration come from the *anchor* (the
centres at the iteration's start), which the relay sends along.
"""

from __future__ import annotations

import numpy as np

from ..algorithms.dgc import (
    DGCOptions,
    assign,
    flag_outliers,
    local_cost,
    local_init,
    node_update,
    outlier_scores,
)
from ..algorithms.lloyd import client_rng
from ..metrics import model_contingencies, sse
from .base import ClusteringClient

__all__ = ["DGCClient"]


class DGCClient(ClusteringClient):
    """A node of DGC-rho.

    ``config["phase"] == "init"``: returns its own initial centres
    (:func:`~flwr_clustering.algorithms.dgc.local_init`, ``init`` = ``kmeans`` or the
    paper's ``random`` rows). Otherwise it receives ``[x_i, neighbour_sum]`` (an
    iteration's first step, where the anchor is ``x_i``) or ``[x_i, neighbour_sum,
    anchor]`` and the config ``degree``, ``alpha``, ``rho``, ``loss``, ``delta``, and
    returns ``[x_i_new]`` with its local cost ``J_i(x_i, C_i)`` (clusters from the anchor)
    in the metrics.
    """

    def fit(self, parameters, config):
        """Initialise, or take one consensus + innovation step."""
        options = DGCOptions.from_config(config)
        if config.get("phase") == "init":
            if options.init == "random":
                self.consent_to_raw_rows("node-init='random'",
                                         f"{options.k} raw rows as the first centres")
            rng = client_rng(int(config.get("seed", 0)), self.client_id)
            C = local_init(self.X, options.k, rng, options.init,
                           privacy_threshold=options.privacy_threshold)
            return [C], len(self.X), ({"raw-rows": int(len(C))} if options.init == "random"
                                      else {})
        if len(parameters) not in (2, 3):
            raise ValueError(f"client {self.client_id}: expected [centres, neighbour sum] "
                             f"or [centres, neighbour sum, anchor], got {len(parameters)} "
                             "arrays")
        x, nbr, anchor = (self.centroids_from([p]) for p in (*parameters, parameters[0])[:3])
        if not x.shape == nbr.shape == anchor.shape:
            raise ValueError(f"client {self.client_id}: shapes {x.shape}, {nbr.shape}, "
                             f"{anchor.shape} differ")
        loss, delta = options.loss, options.delta
        if options.rho < 1:
            raise ValueError(f"client {self.client_id}: a step needs the run's rho (>= 1), "
                             f"got {options.rho}")
        labels = assign(self.X, anchor)
        cost = local_cost(self.X, labels, x, loss, delta=delta)
        new = node_update(x, nbr, float(config["degree"]), self.X, labels,
                          options.alpha, options.rho, loss, delta=delta)
        return [new], len(self.X), {"local-cost": cost}

    def evaluate(self, parameters, config):
        """Statistics of the network mean, plus per scored user's centres when sent.

        ``parameters = [mean]``, ``[mean, scored users' centres (s, K, d)]`` or
        ``[mean, scored users' centres, own centres (K, d)]``. The extra statistics are
        ``model-sse`` (s,) and, with labels, ``model-contingency`` (s, K, n_classes):
        counts and sums only, never a row. The own centres only label the rows
        (:meth:`local_labels`).
        """
        loss, n, stats = super().evaluate(parameters[:1], config)
        if len(parameters) > 1:
            mean = self.centroids_from(parameters[:1])
            models = np.asarray(parameters[1], dtype=np.float64)
            if models.ndim != 3 or models.shape[1:] != mean.shape or not np.isfinite(
                    models).all():
                raise ValueError(f"client {self.client_id}: node centres must be a finite "
                                 f"(s, {mean.shape[0]}, {mean.shape[1]}) array, got "
                                 f"{models.shape}")
            stats["model-sse"] = np.array([sse(self.X, C) for C in models])
            if self.y is not None:
                n_classes = int(config["n-classes"]) if config.get("n-classes") else None
                stats["model-contingency"] = model_contingencies(self.X, models, self.y,
                                                                 n_classes)
        return loss, n, stats

    def local_labels(self, parameters, config) -> np.ndarray:
        """Nearest of this node's own final centres (``parameters[2]``).

        DGC's users each keep their own centres; without them the network mean labels
        the rows.
        """
        own = parameters[2] if len(parameters) > 2 else parameters[0]
        return assign(self.X, self.centroids_from([own])).astype(np.int64)

    def label_and_score(self, centres: np.ndarray, *, fraction: float | None = None,
                        threshold: float | None = None) -> dict[str, np.ndarray]:
        """Label the local rows with ``centres`` and score them as outliers (local use).

        Returns ``{"labels", "scores", "outliers"}``: nearest centre, distance to it, and
        (with ``fraction`` or ``threshold``) the flagged rows. Nothing is sent: this is
        the client's own use of the final model, e.g. Huber centres for outlier detection.
        """
        labels, scores = outlier_scores(self.X, self.centroids_from([centres]))
        out = {"labels": labels, "scores": scores}
        if fraction is not None or threshold is not None:
            out["outliers"] = flag_outliers(scores, fraction=fraction, threshold=threshold)
        return out
