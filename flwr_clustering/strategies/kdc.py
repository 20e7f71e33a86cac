"""KDC in Flower: one upload of a random subset, one broadcast of the kernel (Zhang et al., Sec. 4).

Round 0 (statistics): every site sends its size and, for the global [0, 1] scaling, its
per-feature min and max. Round 1 (sample): each site is asked for its share ``s_l`` of the
sample (proportional allocation) and sends ``s_l`` **raw rows**, scaled; the coordinator
pools them in client-id order, builds the Isolation Kernel, finds the ``k`` initial
clusters (κBCC or kernel k-means) and their kernel mean maps. Round 2 (assign): the model
and the maps go to every site; each labels its rows by the most similar cluster
distribution and returns counts and evaluation statistics only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MessageType
from flwr.serverapp import Grid

from ..algorithms.kdc import (
    KDCOptions,
    allocate_sample,
    initial_cluster_means,
    kdc_coordinator,
    kdc_site_assign,
    select_parameters,
    selection_warning,
)
from ..algorithms.upload import Arrays, Claims
from ..evaluation import aggregate_evaluation_stats
from .base import ClusteringStrategy, Reply, logger

__all__ = ["KDC"]


class KDC(ClusteringStrategy):
    """KDC (Zhang et al.): distributed clustering based on a distributional kernel.

    Parameters
    ----------
    k : int
        Clusters.
    sample_size : int, default 10000
        ``s``, the total number of rows the sites send (capped at ``n``), allocated in
        proportion to the site sizes. **These rows leave the sites**: KDC needs them.
    psi, t : int, default 16, 100
        Isolation Kernel: cells per partitioning, partitionings.
    tau : float, default 0.5
        κBCC similarity threshold.
    auto : bool, default True
        Choose ``psi`` and ``tau`` on the pooled sample without labels
        (:func:`~flwr_clustering.algorithms.kdc.select_parameters`).
    step2 : {"kbcc", "kernel-kmeans"}, default "kbcc"
        The coordinator's clustering of the sample.
    variant : {"anne", "inne"}, default "anne"
        Voronoi cells or hyperspheres.
    normalize : bool, default True
        Global min-max scaling (the statistics round also carries per-feature min and max).
    return_labels : bool, default False
        Sites also return their labels (simulation checks); by default they stay local.
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    name = "kdc"
    labelling = "kernel"
    Options = KDCOptions
    advice = {**ClusteringStrategy.advice, "cores": ("psi", "tau", "auto")}

    def protocol_rounds(self) -> int:
        """The sample round and the assign round (after the statistics query)."""
        return 2

    def reset(self) -> None:
        """Forget the run."""
        super().reset()
        self.sizes: dict[int, int] = {}
        self.node_of: dict[int, int] = {}
        self.alloc: dict[int, int] = {}
        self.lo = self.hi = None
        self.model = self.maps = self.B = None
        self.groups: list[np.ndarray] = []
        self.selection: dict | None = None
        self.site_labels: dict[int, np.ndarray] = {}

    # ----------------------------------------------------------- round 0: stats
    def initialize(self, grid: Grid, timeout: float) -> None:
        """The statistics round: sizes (and min/max) of every site, the sample allocation."""
        valid = self.exchange(grid, 0, "stats", config=self.options.to_config(),
                              parse=self._parse_stats, timeout=timeout)
        self.sizes = {r.client_id: r.payload[0] for r in valid}
        self.node_of = {r.client_id: r.node_id for r in valid}
        if self.normalize:
            self.lo = np.min([r.payload[1] for r in valid], axis=0)
            self.hi = np.max([r.payload[2] for r in valid], axis=0)
        ids = sorted(self.sizes)
        self.alloc = dict(zip(ids, allocate_sample([self.sizes[i] for i in ids],
                                                   self.sample_size).tolist(), strict=True))
        logger.info("KDC: %d sites, n = %d, sample s = %d (per site %s)", len(ids),
                    sum(self.sizes.values()), sum(self.alloc.values()), self.alloc)

    def _parse_stats(self, arrays: list[np.ndarray]) -> Arrays:
        """``(n,)`` or ``(n, min, max)``, claiming the site's rows (and its dimension)."""
        if len(arrays) != (3 if self.normalize else 1):
            raise ValueError(f"expected {'[n, min, max]' if self.normalize else '[n]'}, "
                             f"got {len(arrays)} arrays")
        n = np.asarray(arrays[0])
        if n.shape != (1,) or int(n[0]) < 1:
            raise ValueError(f"malformed size {n}")
        rows = np.array([int(n[0])])
        if not self.normalize:
            return Arrays((int(n[0]),), Claims(counts=rows))
        lo, hi = (np.asarray(a, dtype=np.float64) for a in arrays[1:])
        if lo.ndim != 1 or hi.shape != lo.shape or not (np.isfinite(lo).all()
                                                        and np.isfinite(hi).all()):
            raise ValueError(f"malformed min/max of shapes {lo.shape}, {hi.shape}")
        return Arrays((int(n[0]), lo, hi), Claims(counts=rows, features=int(lo.shape[0])))

    def secure_aggregation_problem(self) -> str | None:
        """KDC's statistics round is not a sum, and its sample is raw rows."""
        return ("KDC's statistics round needs each site's row count (its share of the "
                "sample) and the per-feature minimum and maximum, which are not sums, and "
                "its sample is raw rows the coordinator must see; secure aggregation hides "
                "individual uploads from the server, so there is nothing it could protect "
                "here (see allow-raw-rows)")

    def raw_rows_option(self) -> str:
        """KDC uploads a sample of every site's rows and broadcasts them in its model."""
        return "algorithm='kdc'"

    # ------------------------------------------------------------------ messages
    def _scaling(self) -> list[np.ndarray]:
        return [self.lo, self.hi] if self.normalize else []

    def configure_train(self, server_round, arrays, config, grid) -> list[Message]:
        """Round 1: each site its own sample size; round 2: the model to every site."""
        base = {**dict(config or {}), **self.options.to_config(), "seed": self.seed}
        if server_round == 1:
            return [self.message(server_round, self.node_of[cid],
                                 self.records(self._scaling(),
                                              {**base, "phase": "sample", "size": size}),
                                 MessageType.TRAIN)
                    for cid, size in sorted(self.alloc.items())]
        cfg = {**base, "phase": "assign"}
        return self._messages(server_round, [self.maps, *self.model.arrays(), *self._scaling()],
                              cfg, grid, MessageType.TRAIN)

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> Arrays:
        """Round 1: the sample ``(s_l, d)``; round 2: the cluster counts ``(k,)``.

        The sample claims its rows and dimension, the counts themselves.
        """
        if len(arrays) != 1:
            raise ValueError(f"expected 1 array, got {len(arrays)}")
        a = np.asarray(arrays[0])
        if server_round == 1:
            a = a.astype(np.float64)
            if a.ndim != 2 or not np.isfinite(a).all():
                raise ValueError(f"the sample must be a finite 2-D array, got {a.shape}")
            return Arrays([a], Claims(counts=np.array([len(a)]), features=int(a.shape[1])))
        if a.shape != (self.k,) or a.dtype.kind not in "iu" or (a < 0).any():
            raise ValueError(f"counts must be {self.k} non-negative numbers, got {a.shape}")
        counts = a.astype(np.int64)
        return Arrays([counts], Claims(counts=counts))

    # --------------------------------------------------------------- aggregation
    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Round 1: the coordinator's step 2; round 2: counts and metrics."""
        if server_round == 1:
            parts = []
            for r in replies:
                want = self.alloc.get(r.client_id)
                if want is None or len(r.payload[0]) != want:
                    logger.warning("round 1: dropping the sample of client %d: %d rows, "
                                   "asked for %s", r.client_id, len(r.payload[0]), want)
                    continue
                logger.info("round 1: site %d sent %d raw rows (of %d)", r.client_id,
                            want, self.sizes[r.client_id])
                parts.append(r.payload[0])
            if not parts:
                raise RuntimeError("round 1: no valid sample")
            self.B = np.vstack(parts)
            psi, tau = self.psi, self.tau
            if self.auto:
                self.selection = select_parameters(self.B, self.k, t=self.t,
                                                   variant=self.variant, seed=self.seed)
                psi, tau = self.selection["psi"], self.selection["tau"]
                message = selection_warning(self.selection, self.k)
                if message:
                    logger.warning(message)
                    self.run_warnings.append(message)
                else:
                    logger.info("KDC: chose psi=%d, tau=%.2f without labels (stable over "
                                "tau %s)", psi, tau, self.selection["run"])
            self.model, self.maps, self.groups = kdc_coordinator(
                self.B, self.k, psi=psi, t=self.t, tau=tau, step2=self.step2,
                variant=self.variant, seed=self.seed)
            logger.info("KDC: initial clusters of %s sample points",
                        [len(g) for g in self.groups])
            return initial_cluster_means(self.B, self.groups, self.lo, self.hi)
        self.final_metrics = aggregate_evaluation_stats([r.stats for r in replies])
        # the counts travel as the payload; the diagnostics read them with the stats
        self.evaluation_stats = [{**r.stats, "cluster-counts": r.payload[0]} for r in replies]
        self.cluster_sizes = np.sum([r.payload[0] for r in replies], axis=0)
        if self.return_labels:
            self.site_labels = {r.client_id: np.asarray(r.stats["labels"], dtype=np.int64)
                                for r in replies if "labels" in r.stats}
        return self.centroids

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Rows uploaded (round 1) and floats broadcast (round 2)."""
        if server_round == 1:
            return {"rows-uploaded": int(len(self.B)), "initial-cluster-sizes":
                    [len(g) for g in self.groups]}
        broadcast = self.maps.size + sum(a.size for a in self.model.arrays())
        return {"floats-broadcast-per-site": int(broadcast), "sites": len(replies),
                "cluster-sizes": self.cluster_sizes.tolist(), "metrics": self.final_metrics}

    def converged(self, server_round: int) -> bool:
        """Never early: the protocol is the sample round and the assign round."""
        return False

    def configure_evaluate(self, server_round, arrays, config, grid) -> list[Message]:
        """No evaluate message: the assign round returns the statistics."""
        return []

    def label(self, X: np.ndarray) -> np.ndarray:
        """Label rows with the broadcast model (the centralized framework's step 3)."""
        if self.model is None:
            raise RuntimeError("no KDC model yet")
        return kdc_site_assign(X, self.model, self.maps, self.lo, self.hi)

    def pooled_labels(self, X: np.ndarray) -> np.ndarray | None:
        """KDC labels rows with its kernel model, not by nearest centroid."""
        return None if self.model is None else self.label(X)

    def _model_arrays(self) -> dict[str, np.ndarray]:
        if self.model is None:
            return {}
        return {"centres": self.model.centres,
                "radii": self.model.radii if self.model.radii is not None else np.empty(0),
                "maps": self.maps, "lo": self.lo if self.lo is not None else np.empty(0),
                "hi": self.hi if self.hi is not None else np.empty(0),
                "group_sizes": np.array([len(g) for g in self.groups])}

    def model_record(self) -> ArrayRecord:
        """The initial-cluster means (``centroids``) and the kernel model that labels rows."""
        record = super().model_record()
        for name, a in self._model_arrays().items():
            record[f"kdc.{name}"] = Array(np.ascontiguousarray(a))
        return record

    def artifacts(self) -> dict[str, dict[str, np.ndarray]]:
        """``kdc_model.npz``: the kernel, the mean maps, the scaling, the cluster sizes.

        Arrays ``centres``, ``radii`` (iNNE), ``maps``, ``lo``, ``hi``, ``group_sizes``.
        """
        arrays = self._model_arrays()
        return {"kdc_model.npz": arrays} if arrays else {}

    def diagnostic_extras(self, diagnostics: dict[str, Any]) -> dict[str, Any]:
        """The (psi, tau) used, whether chosen without labels, and the kBCC cores found."""
        chosen = self.selection if self.selection is not None else {}
        groups = self.groups if self.model is not None else None
        return {"psi": int(chosen.get("psi", self.psi)),
                "tau": float(chosen.get("tau", self.tau)),
                "auto": self.selection is not None,
                "selection-fallback": bool(chosen.get("fallback", False)),
                "cores": None if groups is None else len(groups),
                "core-sizes": None if groups is None else [len(g) for g in groups]}

    def result_summary(self) -> dict[str, Any]:
        """The label-free choice of ``psi`` and ``tau`` (with ``auto``)."""
        if self.selection is None:
            return {}
        return {"selection": {k: v for k, v in self.selection.items() if k != "tried"}}
