"""NumPyClient of KDC, distributed clustering with a distributional kernel (Zhang et al., Sec. 4).

A site answers three messages: ``stats`` (its size and, for the global [0, 1] scaling, its
per-feature min and max), ``sample`` (a uniform random subset of its rows, **raw rows**:
the upload KDC needs), and ``assign`` (the kernel model and the ``k`` kernel mean maps: it
labels every local row and returns only counts and evaluation statistics; the labels stay
on the site, in :attr:`KDCClient.labels`, unless the run asks for them).
"""

from __future__ import annotations

import numpy as np

from ..algorithms.kdc import IsolationKernel, KDCOptions, kdc_site_assign, kdc_site_sample
from ..algorithms.lloyd import client_rng
from ..evaluation import label_evaluation_stats
from .base import ClusteringClient

__all__ = ["KDCClient"]


class KDCClient(ClusteringClient):
    """A KDC site.

    ``config["phase"]``:

    - ``"stats"``: returns ``[n]`` or ``[n, min, max]`` (``normalize``);
    - ``"sample"``: receives ``[]`` or ``[min, max]`` and ``size``; returns ``[B_l]``,
      ``size`` rows drawn uniformly without replacement with ``client_rng(seed, id)``,
      scaled to [0, 1];
    - ``"assign"``: receives ``[maps, centres]`` (+ ``radii`` for iNNE, + ``min, max``);
      returns ``[counts]`` and the statistics of
      :func:`~flwr_clustering.evaluation.label_evaluation_stats` (with ``labels`` only when
      ``return-labels`` is set).
    """

    labels: np.ndarray | None = None

    def _scaling(self, arrays, options: KDCOptions):
        if not options.normalize:
            return None, None, list(arrays)
        if len(arrays) < 2:
            raise ValueError(f"client {self.client_id}: the scaling (min, max) is missing")
        lo, hi = (np.asarray(a, dtype=np.float64) for a in arrays[-2:])
        if lo.shape != (self.X.shape[1],) or hi.shape != lo.shape:
            raise ValueError(f"client {self.client_id}: scaling of shape {lo.shape}, expected "
                             f"({self.X.shape[1]},)")
        return lo, hi, list(arrays[:-2])

    def fit(self, parameters, config):
        """Answer the ``stats``, ``sample`` or ``assign`` message."""
        phase = config.get("phase")
        options = KDCOptions.from_config(config)
        n = len(self.X)
        if phase == "stats":
            out = [np.array([n], dtype=np.int64)]
            if options.normalize:
                out += [self.X.min(axis=0), self.X.max(axis=0)]
            return out, n, {}
        if phase == "sample":
            self.consent_to_raw_rows("KDC's sample", f"{int(config['size'])} raw rows "
                                     "(KDC uploads a sample of every site's rows by design)")
            lo, hi, _ = self._scaling(parameters, options)
            rng = client_rng(int(config.get("seed", 0)), self.client_id)
            B, _ = kdc_site_sample(self.X, int(config["size"]), rng, lo, hi)
            return [B], n, {"sample-rows": len(B), "raw-rows": int(len(B))}
        if phase == "assign":
            self.consent_to_raw_rows("KDC's assign round", "this node the sample rows of every "
                                     "site (they are the kernel model)")
            lo, hi, rest = self._scaling(parameters, options)
            if len(rest) not in (2, 3):
                raise ValueError(f"client {self.client_id}: expected [maps, centres(, radii)], "
                                 f"got {len(rest)} arrays")
            maps = np.asarray(rest[0], dtype=np.float64)
            model = IsolationKernel.from_arrays(rest[1:])
            if maps.ndim != 2 or maps.shape[1] != model.t * model.psi:
                raise ValueError(f"client {self.client_id}: mean maps of shape {maps.shape} "
                                 f"do not fit a kernel of {model.t} x {model.psi} cells")
            self.labels = kdc_site_assign(self.X, model, maps, lo, hi)
            # the assign round is KDC's final model delivery: the node keeps the labels
            self.final_labels = self.labels
            k = len(maps)
            n_classes = int(config["n-classes"]) if config.get("n-classes") else None
            stats = label_evaluation_stats(self.labels, k, self.y, n_classes)
            counts = stats.pop("cluster-counts")
            if options.return_labels:
                stats["labels"] = self.labels
            return [counts], n, stats
        raise ValueError(f"client {self.client_id}: unknown KDC phase {phase!r}")

    def evaluate(self, parameters, config):
        """Not used: KDC's assign round already returns the evaluation statistics."""
        raise ValueError("KDC evaluates in its assign round; there is no evaluate message")
