"""The run's state and its checkpoint form (a dataclass the strategy base holds).

:class:`RunRecord` is what a run keeps between rounds: the generators, the model and its
history, the per-round history, the federation's features, the end-of-run findings.
:meth:`~RunRecord.state_dict` is what a checkpoint holds of it after a round and
:meth:`~RunRecord.load_state_dict` restores it, so that
:meth:`~flwr_clustering.strategies.base.ClusteringStrategy.start` can resume a run
(:mod:`flwr_clustering.app.checkpoint` writes it to disk, with the ledger's and the reply
rules' own state dicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.schema import FeatureTransform


@dataclass
class RunRecord:
    """What a run keeps between rounds (a new one per :meth:`start`).

    Attributes
    ----------
    rng, sample_rng : numpy.random.Generator
        The server generator (``default_rng(seed)``) and the node sampling one
        (``default_rng([seed, 1])``).
    centroids : numpy.ndarray or None
        The model.
    centroid_history : list of numpy.ndarray
        The model after every round.
    history : list of dict
        One record per round (clients, shift, metrics, ...).
    final_metrics : dict
        The last federated evaluation's metrics.
    n_features : int or None
        The feature dimension the replies agreed on.
    last_shift : float
        How far the last round moved the model.
    num_rounds : int or None
        The run's round count; ``stopped``: the run ended.
    training_round : int
        The training round under way (0: before round 1).
    feature_transform : FeatureTransform or None
        The federation's features and scaling (agreed before round 1), ``None`` when the
        rows are used as the clients hold them; ``feature_json`` its JSON (what messages
        carry); ``feature_summary`` describes it.
    evaluation_stats : list of dict
        The clients' statistics of the last federated evaluation (counts and sums).
    split_result : dict or None
        What the split check (and refinement) found.
    run_warnings : list of str
        Warnings logged during the run (put first among :attr:`warnings`).
    data_sources : Collected or None
        The ``data-source`` replies the run asked for itself before round 1 (the features
        step's query, :func:`~flwr_clustering.strategies.features.prepare_features`);
        ``None`` when it did not ask (not in the checkpoint: round 0 is not run again).
    diagnostics, warnings
        The end-of-run checks (:func:`~flwr_clustering.strategies.diagnosis.diagnose`).
    """

    rng: np.random.Generator
    sample_rng: np.random.Generator
    centroids: np.ndarray | None = None
    centroid_history: list[np.ndarray] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    final_metrics: dict[str, float] = field(default_factory=dict)
    n_features: int | None = None
    last_shift: float = float("inf")
    num_rounds: int | None = None
    stopped: bool = False
    training_round: int = 0
    feature_transform: FeatureTransform | None = None
    feature_json: str | None = None
    feature_summary: dict[str, Any] | None = None
    robust_set_aside: dict[str, list[str]] = field(default_factory=dict)
    evaluation_stats: list[dict[str, Any]] = field(default_factory=list)
    split_result: dict[str, Any] | None = None
    run_warnings: list[str] = field(default_factory=list)
    data_sources: Any = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def new(cls, seed: int, warnings: list[str] | None = None) -> RunRecord:
        """A fresh run's record: the generators from ``seed``, ``warnings`` logged before."""
        return cls(rng=np.random.default_rng(seed),
                   sample_rng=np.random.default_rng([seed, 1]),
                   run_warnings=list(warnings or []))

    def set_features(self, transform: FeatureTransform | None) -> None:
        """Adopt the federation's features (``None``: rows as the clients hold them)."""
        self.feature_transform = transform
        self.feature_json = None if transform is None else transform.to_json()

    def adopt_model(self, model, shift: float) -> np.ndarray:
        """Make ``model`` the run's model (float64), ``shift`` away from the previous one."""
        new = np.asarray(model, dtype=np.float64)
        self.last_shift = float(shift)
        self.centroids = new
        self.centroid_history.append(new)
        return new

    def state_dict(self) -> dict[str, Any]:
        """The run state after a round: what :meth:`load_state_dict` needs to continue.

        Arrays stay arrays; everything else is JSON-able (the generators' states are
        ``Generator.bit_generator.state`` dicts). The values are the record's own
        objects, not copies: serialise the dict before the next round.

        Returns
        -------
        dict
            ``round`` (the last completed round, 0 before round 1), ``num_rounds``,
            ``stopped`` (the run ended at that round), the model and its history, the
            per-round history, the final metrics so far, ``n_features``, ``last_shift``,
            the states of the server generator (``rng``) and the sampling one, and the
            features (``feature_transform`` as JSON, ``feature_summary``).
        """
        return {
            "round": int(self.history[-1]["round"]) if self.history else 0,
            "num_rounds": int(self.num_rounds or 0),
            "stopped": bool(self.stopped),
            "centroids": self.centroids,
            "centroid_history": list(self.centroid_history),
            "history": self.history,
            "final_metrics": self.final_metrics,
            "n_features": self.n_features,
            "last_shift": float(self.last_shift),
            "rng": self.rng.bit_generator.state,
            "sample_rng": self.sample_rng.bit_generator.state,
            "feature_transform": self.feature_json,
            "feature_summary": self.feature_summary,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` into this (fresh) record."""
        C = state["centroids"]
        self.centroids = None if C is None else np.asarray(C)
        self.centroid_history = [np.asarray(c) for c in state["centroid_history"]]
        self.history = [dict(record) for record in state["history"]]
        self.final_metrics = dict(state["final_metrics"])
        self.n_features = None if state["n_features"] is None else int(state["n_features"])
        self.last_shift = float(state["last_shift"])
        self.rng.bit_generator.state = state["rng"]
        self.sample_rng.bit_generator.state = state["sample_rng"]
        self.num_rounds = int(state["num_rounds"])
        self.stopped = bool(state["stopped"])
        text = state.get("feature_transform")
        if text:
            self.set_features(FeatureTransform.from_json(str(text)))
        self.feature_summary = state.get("feature_summary")


#: The record's fields the strategy exposes as its own attributes (``strategy.centroids``).
RECORD_FIELDS = ("rng", "centroids", "centroid_history", "history", "final_metrics",
                 "n_features", "last_shift", "num_rounds", "stopped", "training_round",
                 "feature_transform", "feature_summary", "robust_set_aside",
                 "evaluation_stats", "split_result", "run_warnings", "diagnostics",
                 "warnings")


class InRecord:
    """A strategy attribute that is a field of its :class:`RunRecord` (``self.record``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.record, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj.record, self.name, value)
