"""The end-of-run checks (a part of the strategy base).

:meth:`RunDiagnosis.diagnose` runs after the final federated evaluation: it computes, from
the model and the clients' counts and sums, what :mod:`flwr_clustering.diagnostics` turns
into warnings (collapsed, empty or non-finite centres, the round cap, clients withheld or
dropped, a cluster that looks like two groups), each naming the run-config option that
addresses it. :meth:`~RunDiagnosis._split_check` runs the split check and refinement
(:mod:`~flwr_clustering.strategies.split_check`) before that evaluation, never fatally.
An algorithm adds its own numbers in :meth:`~RunDiagnosis.diagnostic_extras`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.serverapp import Grid

from .. import diagnostics as _diagnostics
from ..log import logger
from .split_check import refine_problem, run_split_check


class RunDiagnosis:
    """Degenerate results found from counts and sums, logged and kept as warnings."""

    def diagnose(self) -> dict[str, Any]:
        """Check the finished run for degenerate results; log and keep every anomaly.

        Called by :meth:`start` after the final federated evaluation. Everything comes
        from the model and the clients' additive statistics (counts and sums, no row):
        see :mod:`flwr_clustering.diagnostics` for the rules. Each anomaly is one WARNING
        line of the library's logger and one sentence of :attr:`warnings`, naming the
        cause and the run-config option(s) that address it (:attr:`advice`).

        Returns
        -------
        dict
            :attr:`diagnostics`: ``k``; ``centroids`` (rows of the model);
            ``non-finite-entries``; ``distinct-centres`` and ``distinct-tolerance``;
            ``data-scale`` (RMS distance of the rows to their mean); ``cluster-counts``
            and ``non-empty-clusters`` (``None`` without a final evaluation),
            ``largest-cluster-share`` (rows of the largest cluster over all; reported,
            not warned about: some data has one dominant cluster); ``sse``,
            ``sst`` (total sum of squares) and ``sse-ratio`` (``sse / sst``);
            ``lloyd-gain`` and ``lloyd-gain-clusters``
            (:func:`~flwr_clustering.diagnostics.lloyd_gain`);
            ``rounds``, ``num-rounds``, ``iterative``, ``converged`` (``None`` where no
            tolerance applies), ``round-cap-hit``, ``last-shift``, ``tol``; ``absent``
            (``{client: reason}``), ``withheld`` and ``dropped`` (client counts),
            ``withheld-centroids`` (local centroids kept back under the privacy threshold,
            where the clients report it: FeCA), ``empty-uploads`` (clients of the last
            round that sent no centroid, every local cluster under the privacy threshold:
            FKM); plus
            the algorithm's own (:meth:`diagnostic_extras`).
        """
        try:
            diag = self._diagnostics()
            diag.update(self.diagnostic_extras(diag))
            keys = self.Options.fields_by_key()
            by_field = {f.name: key for key, f in keys.items()}
            advice = {anomaly: tuple(by_field[name] for name in names if name in by_field)
                      for anomaly, names in self.advice.items()}
            advice["split"] = (("refine-rounds",) if refine_problem(self) is None
                               else tuple(by_field[n] for n in self.advice.get("split", ())
                                          if n in by_field))
            warnings = _diagnostics.warnings_from(diag, advice, type(self).__name__)
            warnings += self._categorical_warnings(diag)
        except Exception as ex:  # noqa: BLE001 - a diagnostic must not end a finished run
            logger.exception("diagnostics failed")
            diag, warnings = {}, [f"{type(self).__name__}: the diagnostics could not be "
                                  f"computed: {type(ex).__name__}: {ex}"]
        for text in warnings:
            logger.warning("%s", text)
        warnings = [*getattr(self, "run_warnings", []), *warnings]  # already logged
        self.diagnostics, self.warnings = diag, warnings
        return diag

    def _diagnostics(self) -> dict[str, Any]:
        """The algorithm-independent part of :meth:`diagnose`."""
        C = self.centroids
        k = int(getattr(self, "k", 0) or 0)
        stats = list(getattr(self, "evaluation_stats", []) or [])
        n = int(sum(int(s["num-examples"]) for s in stats)) if stats else None
        sst = _diagnostics.total_sum_of_squares(stats)
        scale = _diagnostics.data_scale(sst, n, C)
        counts = _diagnostics.pooled_counts(stats, k)
        sse = self.final_metrics.get("sse") if stats else None
        last = int(self.history[-1]["round"]) if self.history else 0
        iterative = self.protocol_rounds() is None
        converged = None
        if iterative and self.tol >= 0 and self.history:
            converged = bool(self.converged(last))
        absent = dict(getattr(self, "run_absent", {}))
        withheld = sum("privacy" in why for why in absent.values())
        gain, gain_clusters = _diagnostics.lloyd_gain(stats)
        return {
            "lloyd-gain": gain,
            "lloyd-gain-clusters": gain_clusters,
            "k": k,
            "centroids": 0 if C is None else int(len(C)),
            "non-finite-entries": _diagnostics.non_finite_entries(C),
            "distinct-centres": _diagnostics.distinct_centres(C, scale),
            "distinct-tolerance": _diagnostics.DISTINCT_RTOL * (scale or 0.0),
            "data-scale": scale,
            "cluster-counts": None if counts is None else [int(c) for c in counts],
            "non-empty-clusters": _diagnostics.nonempty_clusters(counts),
            "largest-cluster-share": (float(counts.max() / counts.sum())
                                      if counts is not None and counts.sum() else None),
            "sse": None if sse is None else float(sse),
            "sst": sst,
            "sse-ratio": (float(sse) / sst if sse is not None and sst else None),
            "rounds": last,
            "num-rounds": int(getattr(self, "num_rounds", self.max_rounds)),
            "iterative": iterative,
            "converged": converged,
            "round-cap-hit": bool(converged is False and self.early_stop
                                  and last >= int(getattr(self, "num_rounds", 0))),
            "last-shift": (float(self.last_shift) if iterative and np.isfinite(self.last_shift)
                           else None),
            "tol": self.tol,
            "absent": absent,
            "withheld": int(withheld),
            "dropped": int(len(absent) - withheld),
            "withheld-centroids": int(sum(int(h.get("withheld-centroids", 0))
                                          for h in self.history)),
            "empty-uploads": int(self.history[-1].get("empty-uploads", 0)
                                 if self.history else 0),
            **(getattr(self, "split_result", None) or {"split-check": "off"}),
        }

    def _categorical_warnings(self, diag: dict[str, Any]) -> list[str]:
        """A warning per categorical column whose levels the clusters follow.

        From the final evaluation's per-cluster sums (each cluster's share of each level is
        the mean of its one-hot feature); sets ``diag["categorical-dominance"]``.
        """
        transform = getattr(self, "feature_transform", None)
        counts = diag.get("cluster-counts")
        if transform is None or not transform.categories or counts is None:
            return []
        means = _diagnostics.pooled_cluster_means(
            list(getattr(self, "evaluation_stats", []) or []), self.centroids)
        if means is None or means.shape[1] != len(transform.features):
            return []
        d = len(transform.numeric_features)
        found = _diagnostics.dominant_categories(
            transform.categories, transform.inverse(means)[:, d:], counts[:len(means)])
        diag["categorical-dominance"] = found
        options = getattr(self, "feature_options", None)
        weight = (options.categorical_weight
                  if options is not None and transform.scaling == "standard" else "")
        return [f"{type(self).__name__}: "
                + _diagnostics.categorical_warning(column, shares, weight)
                for column, shares in found.items()]

    def _split_check(self, grid: Grid, server_round: int, timeout: float) -> None:
        """The split check and refinement before the final evaluation (never fatal).

        The node sampling generator is restored afterwards, so that the final evaluation
        asks the nodes it would have asked without the check.
        """
        state = self._sample_rng.bit_generator.state
        model = self.centroids
        try:
            self.split_result = run_split_check(self, grid, server_round, timeout)
        except Exception as ex:  # noqa: BLE001 - a diagnostic must not end a finished run
            logger.warning("round %d: the split check%s failed, the model is kept as it "
                           "was: %s: %s", server_round,
                           " and refinement" if self.refine_rounds else "",
                           type(ex).__name__, ex)
            self.centroids = model
            self.split_result = {"split-check": f"failed: {type(ex).__name__}: {ex}"}
        self._sample_rng.bit_generator.state = state

    def diagnostic_extras(self, diagnostics: dict[str, Any]) -> dict[str, Any]:
        """The algorithm's own diagnostics (override; DGC's consensus, KDC's cores).

        Parameters
        ----------
        diagnostics : dict
            The common part (``data-scale`` among others).
        """
        return {}
