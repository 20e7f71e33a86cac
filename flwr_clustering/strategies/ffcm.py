"""FFCM: federated fuzzy c-means of Stallmann & Wilbik (2022), a baseline of the FeCA paper."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.serverapp import Grid

from ..algorithms.ffcm import (
    FFCMOptions,
    check_ffcm_uploads,
    ffcm_random_init,
    ffcm_server_v1,
    ffcm_server_v2,
    pooled_mean_std,
    run_ffcm,
)
from ..algorithms.lloyd import matched_shift
from ..clients.ffcm import FFCMClient
from ..registry import EVALUATION_METRICS, EVALUATION_STATS, AlgorithmSpec, Phase, register
from .base import ClusteringStrategy, Reply, logger

__all__ = ["FFCM"]


class FFCM(ClusteringStrategy):
    """Federated fuzzy c-means, iterative; client side: ``FFCMClient``.

    Before round 1 (unless ``initial_arrays`` are given) the clients send their feature
    moments ``(n, sum, sum of squares)``; the server draws the ``k`` initial centres
    uniformly in the box ``mean ± init_width * std`` of the pooled data. Every round the
    server broadcasts the global centres, each client runs fuzzy c-means from them to
    convergence and uploads its centres and supports ``s_j = sum_x u_xj``; the server
    averages them by support (``version=1``) or runs k-means over all local centres
    (``version=2``). Stops after ``max_rounds`` or when the Hungarian-matched shift is
    ``<= tol`` (``tol < 0``: never).

    Parameters
    ----------
    k : int
        Number of clusters.
    version : {1, 2}, default 1
        Server aggregation.
    fuzzifier : float, default 2.0
        ``m`` of fuzzy c-means (the paper's 2).
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
              "empty": ("fuzzifier", "k")}

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the initial centres (drawn from the moments exchange)."""
        return {**super().state_dict(), "initial": getattr(self, "initial", None)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the moments exchange is not repeated)."""
        super().load_state_dict(state)
        if state.get("initial") is not None:
            self.initial = np.asarray(state["initial"])

    def initialize(self, grid: Grid, timeout: float) -> None:
        """Draw the random initial centres from the clients' pooled feature moments."""
        if self.centroids is not None:
            if len(self.centroids) != self.k:
                raise ValueError(
                    f"initial centroids have {len(self.centroids)} rows, expected k={self.k}"
                )
            return
        valid = self.exchange(grid, 0, "moments", config=self.options.to_config(),
                              parse=self._parse_moments, timeout=timeout)
        mean, std = pooled_mean_std([r.payload for r in valid])
        self.centroids = ffcm_random_init(mean, std, self.k, self.rng, width=self.init_width)
        self.initial = self.centroids
        logger.info("initial centres drawn from the moments of %d clients", len(valid))

    def _parse_moments(self, arrays: list[np.ndarray]) -> tuple[int, np.ndarray, np.ndarray]:
        if len(arrays) != 3:
            raise ValueError(f"expected 3 arrays (n, sum, sum of squares), got {len(arrays)}")
        n, total, sumsq = (np.asarray(a) for a in arrays)
        if n.shape != (1,) or total.ndim != 1 or sumsq.shape != total.shape:
            raise ValueError(f"malformed moments: shapes {n.shape}, {total.shape}, {sumsq.shape}")
        if not (np.isfinite(total).all() and np.isfinite(sumsq).all()):
            raise ValueError("moments contain NaN or inf")
        if int(n[0]) < max(self.privacy_threshold, 1):
            raise ValueError(f"moments of {int(n[0])} points, below the privacy threshold")
        return int(n[0]), total.astype(np.float64), sumsq.astype(np.float64)

    def payload_features(self, payload: Any) -> int | None:
        """Return the dimension of an upload: moments ``(n, sum, sumsq)`` or ``(centres, s)``."""
        return int(payload[1].shape[0]) if len(payload) == 3 else int(payload[0].shape[1])

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return the local fuzzy c-means options."""
        return {"phase": "ffcm", **self.options.to_config()}

    def parse_payload(
        self, server_round: int, arrays: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode ``[centres (k, d), supports (k,)]`` and check it."""
        if len(arrays) != 2:
            raise ValueError(f"expected 2 arrays (centres, supports), got {len(arrays)}")
        centres, supports = check_ffcm_uploads([(arrays[0], arrays[1])], k=self.k)
        if self.centroids is not None and centres.shape[2] != self.centroids.shape[1]:
            raise ValueError(
                f"centres have {centres.shape[2]} features, expected {self.centroids.shape[1]}"
            )
        return centres[0], supports[0]

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


register(AlgorithmSpec(
    name="ffcm", strategy=FFCM, client=FFCMClient, options=FFCMOptions, loop=run_ffcm,
    summary="FFCM, federated fuzzy c-means (Stallmann & Wilbik 2022; baseline of Xu et al.)",
    protocol=(
        Phase("moments", "query", "round 0 (only when no initial centroids are given)",
              sends=("nothing",),
              reply_arrays=("`n` (1,) int64: local rows",
                            "`sum` (d,) float64: per-feature sum",
                            "`sumsq` (d,) float64: per-feature sum of squares"),
              notes="The server draws the k initial centres uniformly in the box mean ± "
                    "init-width · std of the pooled data; it rejects the moments of fewer "
                    "than privacy-threshold rows."),
        Phase("ffcm", "train", "every round",
              sends=("`centres` (k, d) float64: the global centres",),
              reply_arrays=("`centres` (k, d) float64: local fuzzy c-means from the global "
                            "centres (fuzzifier, local-max-iter, local-tol, criterion)",
                            "`supports` (k,) float64: s_j = sum over the rows of u_xj"),
              reply_metrics=("with `evaluate` true:", *EVALUATION_METRICS),
              reply_stats=("with `evaluate` true:", *EVALUATION_STATS),
              notes="With `evaluate` true the reply also scores the received centres. A "
                    "client with fewer than privacy-threshold rows refuses every phase "
                    "(error reply)."),
    )))
