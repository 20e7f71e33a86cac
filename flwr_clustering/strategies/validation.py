"""The validation rules of a reply (a part of the strategy base).

:meth:`ReplyValidation.check_reply` holds the rules every reply must keep, whatever the
algorithm: a row count that does not change during a run, counts within the rows, local
means that the client's declared per-feature sums allow, evaluation statistics within the
model. :meth:`~flwr_clustering.strategies.exchange.Exchange.collect` drops a reply that
breaks one, with the rule's reason in the log. An algorithm says what its upload claims
(:meth:`~ReplyValidation.payload_counts`, :meth:`~ReplyValidation.payload_means`); the
shapes of its arrays are its parser's.

The host class provides ``client_rows`` and ``client_moments`` (dicts, reset per run),
``feature_transform``, ``centroids`` and ``k``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.local_centroids import check_means_within_rows
from ..algorithms.upload import claims_of
from ..evaluation import check_evaluation_stats
from ..protocol import CATEGORIES_PHASE, DATA_SOURCE_PHASE, FEATURE_MOMENTS_PHASE

#: Round 0's phases: their replies count the rows as read (with ``missing='drop'`` the
#: later replies count the complete rows only).
_ROWS_READ_PHASES = (DATA_SOURCE_PHASE, CATEGORIES_PHASE, FEATURE_MOMENTS_PHASE)


class ReplyValidation:
    """The rules every reply keeps (counts, row count, means, evaluation statistics)."""

    def payload_counts(self, payload: Any) -> np.ndarray | None:
        """Return the row counts an upload claims (``None``: it claims none).

        :meth:`check_reply` refuses an upload whose counts are negative or sum to more
        than the rows the client reported (``num-examples``); for a 2-D array (counts per
        cluster and feature) every column is such a sum. Read from the upload
        (:class:`~flwr_clustering.algorithms.upload.Upload`).
        """
        return claims_of(payload).counts

    def payload_means(self, payload: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """Return the local means an upload claims and the rows behind each (``None``: none).

        :meth:`check_reply` refuses a mean that no subset of the client's rows can have,
        given the sums it declared before round 1 (:func:`~flwr_clustering.algorithms.
        local_centroids.check_means_within_rows`). Read from the upload
        (:class:`~flwr_clustering.algorithms.upload.Upload`).
        """
        return claims_of(payload).means_and_rows()

    def check_reply(self, kind: str, client_id: int, metrics: dict[str, Any], payload: Any,
                    stats: dict[str, Any]) -> None:
        """The rules every reply must keep, whatever the algorithm (raise ``ValueError``).

        * ``num-examples`` is a non-negative integer, and a client's replies repeat the row
          count of its first one (evaluation replies are tracked apart, for clients that
          evaluate on other rows; round 0's replies count the rows as read, which the
          later ones repeat unless ``missing='drop'`` left rows out);
        * the upload's counts (:meth:`payload_counts`) are finite, non-negative and sum to
          at most ``num-examples``;
        * each local mean (:meth:`payload_means`) lies where the rows behind it can put it,
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
            transform = getattr(self, "feature_transform", None)
            if key == (cid, False) and key not in self.client_rows and (
                    cid, "read") in self.client_rows and (
                    transform is None or transform.missing != "drop"):
                self.client_rows[key] = self.client_rows[(cid, "read")]
            first = self.client_rows.setdefault(key, rows)
            if rows != first:
                raise ValueError(f"its row count changed: num-examples={rows}, but {first} in "
                                 "its first reply (a client's rows may not change during a "
                                 "run)")
        counts = None if payload is None else self.payload_counts(payload)
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
        moments = getattr(self, "client_moments", {}).get(int(client_id))
        claimed = None if payload is None or moments is None else self.payload_means(payload)
        if claimed is not None:
            transform = self.feature_transform
            check_means_within_rows(*claimed, moments,
                                    None if transform is None else transform.features)
        if any(key in stats for key in ("sse", "cluster-counts", "contingency", "labels")):
            C = self.centroids
            model = C if C is not None and np.ndim(C) == 2 else None
            k_max = max([v for v in (getattr(self, "k", None),
                                     None if model is None else len(model)) if v] or [0])
            check_evaluation_stats(stats, k_max=k_max or None,
                                   n_features=None if model is None else model.shape[1])
