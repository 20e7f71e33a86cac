"""DeepFeCA in Flower: FeCA on a global network's features, then FedAvg (Xu et al., Alg. 6).

Before round 1 a ``describe`` exchange asks every client for its feature count, from which
the server builds the network and its random initial weights. Every round then has the
paper's two exchanges:

1. ``cluster`` (sent by :meth:`DeepFeCA.prepare_round`): the weights go down; each client
   embeds its rows and uploads its labeller payload (FeCA: centroids and radii of its
   features); the server aggregates ``C*``.
2. ``train``: the weights and ``C*`` go down; each client trains on its pseudo-labels and
   uploads its weights and size; the server averages them (FedAvg).

The weights travel as the arrays of the network's ``state_dict`` in order, unchanged in
dtype and shape; every reply is checked against the global model's shapes and dtypes, and
a bad one is dropped with the reason logged.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid

from ..algorithms.deepfeca import (
    DeepFeCAOptions,
    NetworkSpec,
    TrainOptions,
    build_model,
    check_weights,
    embed,
    fedavg,
    initial_weights,
    labeller_server,
    parse_labeller_upload,
    require_torch,
    weight_names,
)
from ..algorithms.lloyd import nearest_labels
from ..algorithms.local_centroids import LocalCentroids
from ..algorithms.upload import Arrays, Claims
from .base import ClusteringStrategy, logger

__all__ = ["DeepFeCA"]


class DeepFeCA(ClusteringStrategy):
    """DeepFeCA (Xu et al. 2024, Algorithm 6); client side: ``DeepFeCAClient``.

    Parameters
    ----------
    k : int
        Clusters, the pseudo-classes of the local training. Over-clustering helps, as in
        DeepCluster-v2: on digits (10 classes) ``k = 30`` improves the network and
        ``k = 10`` degrades it (docs/algorithms/deepfeca.md).
    labeller : {"feca", "mavg", "kfed"}, default "feca"
        Where the pseudo-labels come from: FeCA (DeepFeCA), or the M-Avg and k-FED
        baselines run on the same features.
    network : {"cnn", "resnet18", "mlp"}, default "cnn"
        The network (:mod:`~flwr_clustering.algorithms.networks`).
    input_shape : str, default ""
        E.g. ``"1x8x8"``; empty: a square single-channel image for the convolutional
        networks, the feature count for the MLP.
    proj_dim : int, default 32
        Dimension of the clustering features.
    options : DeepFeCAOptions or TrainOptions, optional
        All options at once, or only the local training recipe (epochs, batch, SGD,
        temperature, augmentation, threads; the fields of
        :class:`~flwr_clustering.algorithms.deepfeca.DeepFeCAOptions` otherwise).
    k_local : int, optional
        ``k'`` of FeCA (default ``k``) and k-FED (default 3).
    privacy_threshold : int, default 2
        Clusters of fewer rows are never uploaded (M-Avg and k-FED clients then refuse).
    mavg_reference : {"first", "running"}, default "first"
        M-Avg's matching reference.
    centralized : bool, default True
        The App's linear-probe report (:func:`flwr_clustering.app.reports.deepfeca_linear_probe`)
        also trains the same network on the pooled rows (one client; simulation only).
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options;
        ``max_rounds`` is ``T`` (default 20). ``min_nodes`` applies to the train
        exchange; the cluster exchange accepts any number of valid uploads (an M-Avg
        or k-FED client with too few rows refuses and only trains).
    """

    name = "deepfeca"
    labelling = "network"
    scales_features = False
    scales_features_why = ("its clients train a network on raw inputs such as images, "
                           "whose pixels share one unit")
    Options = DeepFeCAOptions
    curves = ("loss", "k-out")
    resumable = True

    def __init__(self, k: int | None = None, *,
                 options: DeepFeCAOptions | TrainOptions | None = None, **kwargs: Any) -> None:
        require_torch()
        if isinstance(options, TrainOptions):  # the training recipe alone
            kwargs = {**dataclasses.asdict(options), **kwargs}
            options = None
        super().__init__(k, options=options, **kwargs)

    def configure(self) -> None:
        """The training recipe; ``k_local`` 0 means the labeller's default."""
        self.train_opts = self.options.train_options()
        self.k_local = self.options.k_local or None

    def reset(self) -> None:
        """Forget the run."""
        super().reset()
        self.spec: NetworkSpec | None = None
        self.model: list[np.ndarray] | None = None
        self.initial_model: list[np.ndarray] | None = None
        self.sizes: dict[int, int] = {}
        self._round_info: dict[str, Any] = {}

    def state_dict(self) -> dict[str, Any]:
        """The base state, the describe exchange's result and the weights.

        Network spec and client sizes (the describe exchange), global and initial weights.
        """
        spec = None if self.spec is None else {
            "name": self.spec.name, "input_shape": list(self.spec.input_shape),
            "proj_dim": int(self.spec.proj_dim)}
        return {**super().state_dict(), "spec": spec, "model": self.model,
                "initial_model": self.initial_model,
                "sizes": {int(c): int(n) for c, n in self.sizes.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the describe exchange is not repeated)."""
        super().load_state_dict(state)
        spec = state["spec"]
        self.spec = None if spec is None else NetworkSpec(
            spec["name"], tuple(spec["input_shape"]), spec["proj_dim"])
        self.model = None if state["model"] is None else [np.asarray(w) for w in state["model"]]
        self.initial_model = (None if state["initial_model"] is None
                              else [np.asarray(w) for w in state["initial_model"]])
        self.sizes = {int(c): int(n) for c, n in state["sizes"].items()}

    # ------------------------------------------------------------ describe exchange
    def initialize(self, grid: Grid, timeout: float) -> None:
        """Ask the clients for their feature count and size; build ``θ̄_0``."""
        valid = self.exchange(grid, 0, "describe", parse=self._parse_describe, timeout=timeout)
        self.sizes = {r.client_id: int(r.metrics["num-examples"]) for r in valid}
        self.spec = NetworkSpec.for_data(self.network, self.n_features, self.input_shape,
                                         self.proj_dim)
        self.model = initial_weights(self.spec, self.seed)
        self.initial_model = self.model
        logger.info("DeepFeCA: %d clients, %d rows, network %s %s (%d weights in %d arrays)",
                    len(valid), sum(self.sizes.values()), self.spec.name,
                    self.spec.input_shape, sum(w.size for w in self.model), len(self.model))

    @staticmethod
    def _parse_describe(arrays: list[np.ndarray]) -> Claims:
        """``[n_features]``: a payload that is nothing but the dimension it claims."""
        if len(arrays) != 1 or np.asarray(arrays[0]).shape != (1,):
            raise ValueError("expected [n_features]")
        d = int(np.asarray(arrays[0])[0])
        if d < 1:
            raise ValueError(f"malformed feature count {d}")
        return Claims(features=d)

    def _common_config(self, server_round: int, phase: str) -> dict[str, Any]:
        return {"phase": phase, "seed": self.seed, "server-round": server_round,
                **self.options.to_config(), **self.spec.to_config()}

    # ------------------------------------------------------------- cluster exchange
    def prepare_round(self, server_round: int, grid: Grid, timeout: float) -> None:
        """The cluster exchange of round ``t``: labeller uploads on features -> ``C*``."""
        t0 = time.monotonic()
        valid = self.exchange(grid, server_round, "cluster", self.model,
                              self._common_config(server_round, "cluster"),
                              parse=self._parse_upload, min_replies=1, timeout=timeout)
        self.centroids = labeller_server([r.payload[0] for r in valid], self.labeller, self.k,
                                         mavg_reference=self.mavg_reference)
        if len(self.centroids) < self.k:
            logger.warning("round %d: %s returned %d centroids instead of k=%d",
                           server_round, self.labeller, len(self.centroids), self.k)
        self._round_info = {
            "k-out": int(len(self.centroids)), "labelling-clients": len(valid),
            "cluster-dropped": valid.received - len(valid),
            "seconds-cluster": time.monotonic() - t0,
        }

    def _parse_upload(self, arrays: list[np.ndarray]) -> Arrays:
        """The labeller's upload, claiming only k-FED's counts (rows behind each centre).

        Its centres live in the encoder's space, not the rows', and its dimension is the
        projection's (checked by the parser).
        """
        upload = parse_labeller_upload(arrays, self.labeller, k=self.k, k_local=self.k_local,
                                       n_features=self.proj_dim,
                                       privacy_threshold=self.privacy_threshold)
        counts = upload.counts if isinstance(upload, LocalCentroids) else None
        return Arrays([upload], Claims(counts=counts))

    # --------------------------------------------------------------- train exchange
    def configure_train(self, server_round, arrays, config, grid) -> list[Message]:
        """The train messages: ``[*θ̄, C*]`` and the training recipe."""
        cfg = {**dict(config or {}), **self._common_config(server_round, "train")}
        return self._messages(server_round, [*self.model, self.centroids], cfg, grid,
                              MessageType.TRAIN)

    def aggregate_train(self, server_round: int, replies) -> tuple[ArrayRecord, MetricRecord]:
        """FedAvg of the valid replies (client-id order, weighted by size)."""
        t0 = time.monotonic()
        replies = list(replies)
        valid = self.collect(server_round, replies,
                             lambda a: check_weights(a, self.model))
        sizes = [int(r.metrics["num-examples"]) for r in valid]
        self.model = fedavg([r.payload for r in valid], sizes)
        self.centroid_history.append(self.centroids)
        losses = np.array([r.metrics.get("loss", np.nan) for r in valid], dtype=float)
        seconds = [float(r.metrics.get("seconds", 0.0)) for r in valid]
        record = {
            "round": server_round, "clients": len(valid), "dropped": len(replies) - len(valid),
            "num-centroids": self._round_info.get("k-out"), "shift": None,
            **self._round_info,
            "loss": float(np.nansum(losses * sizes) / sum(sizes)),
            "client-seconds-mean": float(np.mean(seconds)),
            "client-seconds-max": float(np.max(seconds)),
            "seconds-fedavg": time.monotonic() - t0,
        }
        self.history.append(record)
        logger.info("round %d: C* of %d centroids from %d clients; %d clients trained, "
                    "loss %.4f, client time mean %.2f s, max %.2f s", server_round,
                    record["k-out"], record["labelling-clients"], len(valid), record["loss"],
                    record["client-seconds-mean"], record["client-seconds-max"])
        metrics = {k: float(v) for k, v in record.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        return self.model_record(), MetricRecord(metrics)

    def model_record(self) -> ArrayRecord:
        """``centroids`` (``C*``) and the network's weights under ``model.<name>``."""
        if self.model is None:
            return ArrayRecord()
        names = weight_names(self.spec)
        record = {"centroids": Array(np.ascontiguousarray(self.centroids))}
        record.update({f"model.{n}": Array(np.require(w, requirements="C"))
                       for n, w in zip(names, self.model, strict=True)})
        return ArrayRecord(record)

    def converged(self, server_round: int) -> bool:
        """Never early: ``T`` rounds, as the paper."""
        return False

    # ------------------------------------------------------------------ evaluation
    def configure_evaluate(self, server_round, arrays, config, grid) -> list[Message]:
        """Send ``[*θ̄, C*]``: clients score ``C*`` on their features."""
        if self.model is None:
            return []
        cfg = {**dict(config or {}), **self._common_config(server_round, "evaluate")}
        return self._messages(server_round, [*self.model, self.centroids], cfg, grid,
                              MessageType.EVALUATE)

    def label(self, X: np.ndarray) -> np.ndarray:
        """Cluster of every row: nearest ``C*`` to its feature under ``θ̄``."""
        if self.model is None:
            raise RuntimeError("no DeepFeCA model yet")
        F = embed(build_model(self.spec, self.model), X, self.spec)
        return nearest_labels(F, self.centroids)

    def pooled_labels(self, X: np.ndarray) -> np.ndarray | None:
        """DeepFeCA labels rows through its network (``C*`` lives in feature space)."""
        return None if self.model is None else self.label(X)

    def plot_features(self, X: np.ndarray) -> np.ndarray:
        """The rows' features under the final network (where ``C*`` lives)."""
        if self.model is None:
            return X
        return embed(build_model(self.spec, self.model), X, self.spec)

    def artifacts(self) -> dict[str, dict[str, np.ndarray]]:
        """``model.npz``: the network's weights by ``state_dict`` name."""
        if self.model is None:
            return {}
        return {"model.npz": dict(zip(weight_names(self.spec), self.model, strict=True))}

    def result_summary(self) -> dict[str, Any]:
        """The network and the training recipe."""
        return {"network": {"spec": self.spec.to_config() if self.spec else None,
                            "options": self.train_opts.to_config()}}
