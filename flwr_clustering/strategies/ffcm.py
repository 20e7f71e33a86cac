"""FFCM: federated fuzzy c-means of Stallmann & Wilbik (2022), a baseline of the FeCA paper."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from flwr.serverapp import Grid

from ..algorithms.ffcm import (
    FFCMOptions,
    check_ffcm_uploads,
    ffcm_random_init,
    ffcm_server_v1,
    ffcm_server_v2,
    fuzzifier_from_dimension,
    pooled_mean_std,
)
from ..algorithms.lloyd import matched_shift
from ..algorithms.upload import Arrays, Claims
from .base import ClusteringStrategy, Reply, logger

__all__ = ["FFCM"]


class FFCM(ClusteringStrategy):
    """Federated fuzzy c-means, iterative; client side: ``FFCMClient``.

    Before round 1 (unless ``initial_arrays`` are given and the fuzzifier is fixed) the
    clients send their feature moments ``(n, sum, sum of squares)``; the server draws the
    ``k`` initial centres uniformly in the box ``mean ± init_width * std`` of the pooled
    data and, with ``fuzzifier=0``, chooses ``m`` from the dimension and the row count.
    Every round the server broadcasts the global centres, each client runs fuzzy c-means
    from them to convergence and uploads its centres and supports ``s_j = sum_x u_xj``; the server
    averages them by support (``version=1``) or runs k-means over all local centres
    (``version=2``). Stops after ``max_rounds`` or when the Hungarian-matched shift is
    ``<= tol`` (``tol < 0``: never).

    Parameters
    ----------
    k : int
        Number of clusters.
    version : {1, 2}, default 1
        Server aggregation.
    fuzzifier : float, default 0.0
        ``m`` of fuzzy c-means. ``0`` (default) chooses it before round 1 from the
        dimension and the federation's row count (from the moments exchange,
        :func:`~flwr_clustering.algorithms.ffcm.fuzzifier_from_dimension`: 1.05 for 64
        features, 1.3 for 10-13, the paper's 2 below 6); the paper's value is 2.
    local_max_iter : int, default 100
        Fuzzy c-means iterations at most per round.
    local_tol : float, default 1e-4
        Local stopping tolerance (see ``criterion``).
    criterion : {"centres", "memberships"}, default "centres"
        Local stop on the largest centre move (data units) or on the change of the
        membership matrix (the authors' code).
    init_width : float, default 2.0
        Half-width of the initial box in pooled standard deviations.
    weighted : bool, default False
        Version 2: weight the local centres by their supports (the authors' code does not).
    n_init : int, default 10
        Version 2: k-means restarts in round 1.
    privacy_threshold : int, default 2
        Clients with fewer points refuse to take part (their centres would be near-raw rows).
    max_rounds : int, default 20
        Rounds at most.
    tol : float, default 1e-6
        Convergence tolerance on the matched shift (negative: run ``max_rounds``).
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options.
    """

    name = "ffcm"
    Options = FFCMOptions
    resumable = True
    #: Fuzzy c-means with m = 2 pulls the centres to the grand mean in high dimensions.
    advice = {**ClusteringStrategy.advice, "collapse": ("fuzzifier", "k"),
              "empty": ("fuzzifier", "k"), "lloyd-gain": ("fuzzifier",)}

    def secure_aggregation_problem(self) -> str | None:
        """Version 1 (support-weighted average) needs only the totals."""
        if self.options.version == 1:
            return None
        return ("FFCM version 2 runs k-means over every client's local centres, which "
                "secure aggregation hides from the server; use ffcm-version=1 (the "
                "support-weighted average, which needs only the totals)")

    def configure(self) -> None:
        """Remember the fuzzifier asked for (``0``: chosen before every new run)."""
        self.requested_fuzzifier = float(self.options.fuzzifier)

    def reset(self) -> None:
        """Forget the run state, including a fuzzifier chosen for the last run."""
        super().reset()
        if getattr(self, "requested_fuzzifier", None) is not None:
            self._use_fuzzifier(self.requested_fuzzifier)

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the initial centres and the fuzzifier in use."""
        return {**super().state_dict(), "initial": getattr(self, "initial", None),
                "fuzzifier": float(self.fuzzifier)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the moments exchange is not repeated)."""
        super().load_state_dict(state)
        if state.get("initial") is not None:
            self.initial = np.asarray(state["initial"])
        if state.get("fuzzifier"):
            self._use_fuzzifier(float(state["fuzzifier"]))

    def _use_fuzzifier(self, m: float) -> None:
        self.options = dataclasses.replace(self.options, fuzzifier=m)
        self.fuzzifier = self.options.fuzzifier

    def initialize(self, grid: Grid, timeout: float) -> None:
        """Draw the initial centres and choose the fuzzifier from the clients' moments.

        With given centroids and a fixed fuzzifier, nothing is exchanged. A resumed run
        keeps the fuzzifier of its checkpoint.
        """
        if self.centroids is not None:
            if len(self.centroids) != self.k:
                raise ValueError(
                    f"initial centroids have {len(self.centroids)} rows, expected k={self.k}"
                )
        if self.fuzzifier != 0 and self.centroids is not None:
            return
        # under secure aggregation only the federation's triple reaches the server
        totals = self.sum_phase(grid, 0, "moments", config=self.options.to_config(),
                                parse=self._parse_moments, timeout=timeout,
                                parts=lambda r: [np.array([r.payload[0]]), *r.payload[1:]]
                                ).totals
        n, total, sumsq = totals.sums
        moments = [(int(np.rint(n[0])), total, sumsq)]
        valid = totals.nodes
        if self.fuzzifier == 0:
            n = sum(mom[0] for mom in moments)
            d = int(moments[0][1].shape[0])
            self._use_fuzzifier(fuzzifier_from_dimension(d, n))
            logger.info("fuzzifier m=%.4g chosen from d=%d features and n=%d rows "
                        "(Schwaemmle & Jensen 2010; the paper's m: fuzzifier=2)",
                        self.fuzzifier, d, n)
        if self.centroids is not None:
            return
        mean, std = pooled_mean_std(moments)
        self.centroids = ffcm_random_init(mean, std, self.k, self.rng, width=self.init_width)
        self.initial = self.centroids
        logger.info("initial centres drawn from the moments of %d clients", len(valid))

    def _parse_moments(self, arrays: list[np.ndarray]) -> Arrays:
        """``(n, sum, sum of squares)``, claiming the client's rows and dimension."""
        if len(arrays) != 3:
            raise ValueError(f"expected 3 arrays (n, sum, sum of squares), got {len(arrays)}")
        n, total, sumsq = (np.asarray(a) for a in arrays)
        if n.dtype.kind not in "iu":
            raise ValueError(f"the row count must be an integer array, got {n.dtype}")
        if n.shape != (1,) or total.ndim != 1 or sumsq.shape != total.shape:
            raise ValueError(f"malformed moments: shapes {n.shape}, {total.shape}, {sumsq.shape}")
        if not (np.isfinite(total).all() and np.isfinite(sumsq).all()):
            raise ValueError("moments contain NaN or inf")
        if int(n[0]) < max(self.privacy_threshold, 1):
            raise ValueError(f"moments of {int(n[0])} points, below the privacy threshold")
        return Arrays((int(n[0]), total.astype(np.float64), sumsq.astype(np.float64)),
                      Claims(counts=np.array([int(n[0])]), features=int(total.shape[0])))

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return the local fuzzy c-means options."""
        return {"phase": "ffcm", **self.options.to_config()}

    def aggregate_sums(self, server_round: int, totals) -> np.ndarray:
        """Version 1 from the secure totals: ``sum s V / sum s`` (previous where 0)."""
        weighted, supports = totals.sums
        if weighted.shape != self.centroids.shape or supports.shape != (self.k,):
            raise RuntimeError(f"round {server_round}: the secure totals have shapes "
                               f"{weighted.shape} and {supports.shape}, expected "
                               f"{self.centroids.shape} and ({self.k},)")
        ok = supports > 0
        centres = np.zeros_like(weighted)
        centres[ok] = weighted[ok] / supports[ok, None]
        return ffcm_server_v1([(centres, np.where(ok, supports, 0.0))],
                              previous=self.centroids)

    def parse_payload(
        self, server_round: int, arrays: list[np.ndarray]
    ) -> Arrays:
        """Decode ``[centres (k, d), supports (k,)]`` and check it.

        It claims the supports as counts (sums of ``u``, at most the rows) and every
        local centre as a weighted mean of the client's rows (weights ``u^m``), held to
        the bound of a single row (``m = 1``, a convex combination of rows: the supports
        are sums of ``u``, not of the weights); a centre that no row weighs stays the
        broadcast one (:func:`~flwr_clustering.algorithms.ffcm.fcm`) and is not claimed.
        """
        if len(arrays) != 2:
            raise ValueError(f"expected 2 arrays (centres, supports), got {len(arrays)}")
        try:
            centres, supports = check_ffcm_uploads([(arrays[0], arrays[1])], k=self.k)
        except ValueError as ex:  # one upload: "client 0" would name the wrong client
            raise ValueError(str(ex).removeprefix("client 0 ")) from None
        if self.centroids is not None and centres.shape[2] != self.centroids.shape[1]:
            raise ValueError(
                f"centres have {centres.shape[2]} features, expected {self.centroids.shape[1]}"
            )
        centres, supports = centres[0], supports[0]
        moved = supports > 0
        if self.centroids is not None and self.centroids.shape == centres.shape:
            moved &= (centres != self.centroids).any(axis=1)
        return Arrays((centres, supports),
                      Claims(counts=supports, means=centres[moved],
                             mean_rows=np.ones(int(moved.sum())),
                             features=int(centres.shape[1])))

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Average by support (v1) or k-means over the local centres (v2)."""
        uploads = [r.payload for r in replies]
        if self.version == 1:
            return ffcm_server_v1(uploads, previous=self.centroids)
        previous = None if server_round == 1 else self.centroids
        return ffcm_server_v2(uploads, self.k, self.rng, previous=previous,
                              weighted=self.weighted, n_init=self.n_init)

    def shift(self, previous: np.ndarray | None, new: np.ndarray) -> float:
        """Return the Hungarian-matched shift (v2 may reorder the centres)."""
        return matched_shift(previous, new)

    def converged(self, server_round: int) -> bool:
        """Return whether the matched shift fell to ``tol`` (never when ``tol < 0``)."""
        return self.tol >= 0 and self.last_shift <= self.tol
