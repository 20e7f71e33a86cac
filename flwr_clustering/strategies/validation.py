"""The validation rules of a reply (an object the strategy base holds).

:meth:`ReplyRules.check` holds the rules every reply must keep, whatever the algorithm: a
row count that does not change during a run, counts within the rows, local means that the
client's declared per-feature sums allow, evaluation statistics within the model.
:meth:`~flwr_clustering.strategies.exchange.Exchange.collect` drops a reply that breaks
one, with the rule's reason in the log. The caller says what the upload claims (its
counts and means, from the algorithm's
:meth:`~flwr_clustering.strategies.base.ClusteringStrategy.payload_counts` and
``payload_means``); the shapes of its arrays are its parser's. What the rules remember of
each client (its row counts, its declared sums) is the object's own state, with a
:meth:`~ReplyRules.state_dict` for the checkpoint.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.local_centroids import RowMoments, check_means_within_rows
from ..data.schema import FeatureTransform
from ..evaluation import check_evaluation_stats
from ..protocol import CATEGORIES_PHASE, DATA_SOURCE_PHASE, FEATURE_MOMENTS_PHASE

#: Round 0's phases: their replies count the rows as read (with ``missing='drop'`` the
#: later replies count the complete rows only).
_ROWS_READ_PHASES = (DATA_SOURCE_PHASE, CATEGORIES_PHASE, FEATURE_MOMENTS_PHASE)


class ReplyRules:
    """The rules every reply keeps, and what they remember of each client (its own state).

    Attributes
    ----------
    client_rows : dict
        ``{(client id, key): rows}``: the row count (``num-examples``) of each client's
        first reply, which its later replies must repeat; ``key`` is ``"read"`` for round
        0's phases (the rows as read), ``True`` for evaluation replies, ``False`` for the
        rest.
    client_read_rows : dict
        ``{client id: rows}`` each client read (its ``feature-moments`` reply).
    client_sums : dict
        ``{client id: (count, sum, sum of squares)}`` per feature, as declared before
        round 1 (``feature-moments``); a checkpoint keeps them.
    client_moments : dict
        ``{client id: RowMoments}``: what those sums allow a client's means, in the run's
        space.
    """

    def __init__(self) -> None:
        self.client_rows: dict[tuple[int, Any], int] = {}
        self.client_read_rows: dict[int, float] = {}
        self.client_sums: dict[int, tuple[np.ndarray, ...]] = {}
        self.client_moments: dict[int, RowMoments] = {}

    def rows_of(self, kind: str, client_id: int) -> int | None:
        """The rows a client declared before, which a reply of ``kind`` is bounded by."""
        cid = int(client_id)
        rows = self.client_rows.get((cid, "read"))
        if kind not in _ROWS_READ_PHASES:
            rows = self.client_rows.get((cid, False), rows)
        return None if rows is None else int(rows)

    def set_sums(self, sums: dict[int, tuple[np.ndarray, ...]],
                 transform: FeatureTransform | None) -> None:
        """Keep each client's declared sums and the bounds they give its means."""
        self.client_sums = dict(sums)
        self.client_moments = {
            cid: RowMoments.from_sums(*arrays, *((transform.center, transform.scale)
                                                 if transform is not None else ()))
            for cid, arrays in self.client_sums.items()}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: ``client_sums`` (JSON-able lists)."""
        return {"client_sums": {str(cid): [np.asarray(a, dtype=np.float64).tolist()
                                           for a in sums]
                                for cid, sums in self.client_sums.items()}}

    def load_state_dict(self, state: dict[str, Any],
                        transform: FeatureTransform | None) -> None:
        """Restore :meth:`state_dict` (the sums bound the means after a resume too)."""
        sums = state.get("client_sums") or {}
        self.set_sums({int(cid): tuple(np.asarray(a, dtype=np.float64) for a in arrays)
                       for cid, arrays in sums.items()}, transform)

    def check(self, kind: str, client_id: int, metrics: dict[str, Any],
              stats: dict[str, Any], *, counts: Any = None,
              means: tuple[np.ndarray, np.ndarray] | None = None,
              transform: FeatureTransform | None = None,
              model: tuple[int, ...] | None = None, k: int | None = None) -> None:
        """The rules every reply must keep, whatever the algorithm (raise ``ValueError``).

        * ``num-examples`` is a non-negative integer, and a client's replies repeat the row
          count of its first one (evaluation replies are tracked apart, for clients that
          evaluate on other rows; round 0's replies count the rows as read, which the
          later ones repeat unless ``missing='drop'`` left rows out);
        * the upload's counts (``counts``) are finite, non-negative and sum to
          at most ``num-examples``;
        * each local mean (``means``) lies where the rows behind it can put it,
          given the per-feature sums the client declared before round 1 (only when the
          run agreed its features: ``feature-moments``; not under secure aggregation);
        * the evaluation statistics keep :func:`~flwr_clustering.evaluation.check_evaluation_stats`
          (counts within the rows, one row per cluster of the model, finite sums).

        The shapes, dtypes and sizes of each protocol's arrays are checked by the
        algorithm's parser (:meth:`parse_payload`). A client can still lie consistently
        about its row count from its first reply on: the rules bound what it claims by
        what it said before, not by its real data.
        """
        rows = metrics.get("num-examples")
        if rows is not None:
            if isinstance(rows, bool) or not float(rows).is_integer() or float(rows) < 0:
                raise ValueError(f"num-examples must be a non-negative integer, got {rows!r}")
            rows, cid = int(rows), int(client_id)
            key: tuple[int, Any] = (cid, "read" if kind in _ROWS_READ_PHASES
                                    else kind == "evaluate")
            if key == (cid, False) and key not in self.client_rows and (
                    cid, "read") in self.client_rows and (
                    transform is None or transform.missing != "drop"):
                self.client_rows[key] = self.client_rows[(cid, "read")]
            first = self.client_rows.setdefault(key, rows)
            if rows != first:
                raise ValueError(f"its row count changed: num-examples={rows}, but {first} in "
                                 "its first reply (a client's rows may not change during a "
                                 "run)")
        if counts is not None:
            c = np.asarray(counts, dtype=np.float64)
            if not np.isfinite(c).all() or (c < 0).any():
                raise ValueError("its counts must be finite and non-negative")
            if rows is None:
                raise ValueError("it sent counts without num-examples")
            total = float(c.sum(axis=0).max() if c.ndim == 2 and c.size else c.sum())
            if total > rows * (1 + 1e-9):  # fuzzy supports are float sums
                raise ValueError(f"its counts sum to {total:.0f}, more than the {rows} rows "
                                 "it reported (num-examples)")
        moments = self.client_moments.get(int(client_id))
        if means is not None and moments is not None:
            check_means_within_rows(*means, moments,
                                    None if transform is None else transform.features)
        if any(key in stats for key in ("sse", "cluster-counts", "contingency", "labels")):
            k_max = max([v for v in (k, None if model is None else model[0]) if v] or [0])
            check_evaluation_stats(stats, k_max=k_max or None,
                                   n_features=None if model is None else model[1])
