"""The run state and its checkpoint (a part of the strategy base).

:meth:`RunState.reset` starts a run afresh (the generators from ``seed``, the model, the
history, the ledger, the per-client rules' memory); :meth:`~RunState.state_dict` is what a
checkpoint holds after a round and :meth:`~RunState.load_state_dict` restores it, so that
:meth:`~flwr_clustering.strategies.rounds.RoundDriver.start` can resume a run
(:mod:`flwr_clustering.app.checkpoint` writes it to disk).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.local_centroids import (
    RowMoments,
)
from ..data.schema import FeatureTransform


class RunState:
    """What a run keeps between rounds, and its checkpoint form."""

    def reset(self) -> None:
        """Forget every run state (called at the start of :meth:`start`)."""
        self.rng = np.random.default_rng(self.seed)
        self._sample_rng = np.random.default_rng([self.seed, 1])
        self.centroids: np.ndarray | None = None
        self.centroid_history: list[np.ndarray] = []
        self.history: list[dict[str, Any]] = []
        self.final_metrics: dict[str, float] = {}
        self.n_features: int | None = None
        self.last_shift = float("inf")
        self._expect_stats = True
        self._client_of: dict[int, int] = {}
        #: Warnings logged during the run (e.g. KDC's fallback choice of psi and tau);
        #: :meth:`diagnose` puts them first in :attr:`warnings`, after those the App
        #: logged before :meth:`start` (``pre_run_warnings``, e.g. identical data).
        self.run_warnings: list[str] = list(getattr(self, "pre_run_warnings", []))
        self.stopped = False
        #: What the split check (and refinement) found (:meth:`_split_check`).
        self.split_result: dict[str, Any] | None = None
        self.diagnostics: dict[str, Any] = {}
        self.warnings: list[str] = []
        #: ``{client: reason}`` of every client without a valid reply in the run (latest).
        self.run_absent: dict[str, str] = {}
        #: The clients' statistics of the last federated evaluation (counts and sums).
        self.evaluation_stats: list[dict[str, Any]] = []
        #: ``{(client id, evaluate?): rows}``: the row count (``num-examples``) of each
        #: client's first reply, which its later replies must repeat (:meth:`check_reply`).
        self.client_rows: dict[tuple[int, bool], int] = {}
        #: Each client's per-feature count, sum and sum of squares (``feature-moments``)
        #: and, in the run's space, what they allow its means (:meth:`check_reply`).
        self.client_sums: dict[int, tuple[np.ndarray, ...]] = {}
        self.client_moments: dict[int, RowMoments] = {}
        #: One entry per client reply received (valid or not): what it carried
        #: (:meth:`privacy_ledger`).
        self.ledger: list[dict[str, Any]] = []
        #: One entry per secure exchange: what the server learned (the federation's totals).
        self.secure_totals: list[dict[str, Any]] = []
        #: The federation's features and scaling (agreed before round 1), ``None`` when
        #: the rows are used as the clients hold them; ``feature_summary`` describes it.
        self.feature_transform = None
        self._feature_json: str | None = None
        self.feature_summary: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The run state after a round: what :meth:`load_state_dict` needs to continue.

        Arrays stay arrays; everything else is JSON-able (the generators' states are
        ``Generator.bit_generator.state`` dicts). Subclasses with more between-round
        state extend it (and :meth:`load_state_dict`). The values are the strategy's own
        objects, not copies: serialise the dict before the next round.

        Returns
        -------
        dict
            ``round`` (the last completed round, 0 before round 1), ``num_rounds``,
            ``stopped`` (the run ended at that round), the model and its history, the
            per-round history, the final metrics so far, ``n_features``, ``last_shift``
            and the states of the server generator (``rng``) and the sampling one.
        """
        return {
            "round": int(self.history[-1]["round"]) if self.history else 0,
            "num_rounds": int(getattr(self, "num_rounds", self.max_rounds)),
            "stopped": bool(self.stopped),
            "centroids": self.centroids,
            "centroid_history": list(self.centroid_history),
            "history": self.history,
            "final_metrics": self.final_metrics,
            "n_features": self.n_features,
            "last_shift": float(self.last_shift),
            "rng": self.rng.bit_generator.state,
            "sample_rng": self._sample_rng.bit_generator.state,
            "ledger": self.ledger,
            "secure_totals": self.secure_totals,
            "feature_transform": self._feature_json,
            "feature_summary": self.feature_summary,
            # each client's declared sums: they bound its means after a resume too
            "client_sums": {str(cid): [np.asarray(a, dtype=np.float64).tolist() for a in sums]
                            for cid, sums in getattr(self, "client_sums", {}).items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the run state of :meth:`state_dict` (after :meth:`reset`)."""
        C = state["centroids"]
        self.centroids = None if C is None else np.asarray(C)
        self.centroid_history = [np.asarray(c) for c in state["centroid_history"]]
        self.history = [dict(record) for record in state["history"]]
        self.final_metrics = dict(state["final_metrics"])
        self.n_features = None if state["n_features"] is None else int(state["n_features"])
        self.last_shift = float(state["last_shift"])
        self.rng.bit_generator.state = state["rng"]
        self._sample_rng.bit_generator.state = state["sample_rng"]
        self.ledger = [dict(e) for e in state.get("ledger", [])]
        self.secure_totals = [dict(e) for e in state.get("secure_totals", [])]
        self.num_rounds = int(state["num_rounds"])
        self.stopped = bool(state["stopped"])
        text = state.get("feature_transform")
        if text:
            self.feature_transform = FeatureTransform.from_json(str(text))
            self._feature_json = str(text)
        self.feature_summary = state.get("feature_summary")
        sums = state.get("client_sums") or {}
        self.client_sums = {int(cid): tuple(np.asarray(a, dtype=np.float64) for a in arrays)
                            for cid, arrays in sums.items()}
        transform = self.feature_transform
        self.client_moments = {
            cid: RowMoments.from_sums(*arrays, *((transform.center, transform.scale)
                                                 if transform is not None else ()))
            for cid, arrays in self.client_sums.items()}

    def adopt_model(self, model) -> np.ndarray:
        """Make ``model`` the run's model (float64), after a train or a secure round.

        Its shift from the previous model (:meth:`shift`) goes in ``last_shift``, the
        model in ``centroid_history``.
        """
        new = np.asarray(model, dtype=np.float64)
        self.last_shift = self.shift(self.centroids, new)
        self.centroids = new
        self.centroid_history.append(new)
        return new
