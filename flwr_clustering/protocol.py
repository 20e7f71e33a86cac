"""The message protocol's names, shared by both sides (below clients, strategies and plugins).

The phases every client answers without the algorithm's code, the record and node-config
keys, the client id a reply carries (:func:`client_id_of`) and the split of a reply's
metrics into scalars and arrays (:func:`split_metrics`). The client adapter
(:mod:`flwr_clustering.clients.handlers`), the strategies, secure aggregation
(:mod:`flwr_clustering.secure`) and the legacy adapter import them from here, so none of
them imports another for a name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Context

__all__ = [
    "CANDIDATES_KEY",
    "CANDIDATE_ERRORS_RECORD",
    "CATEGORIES_PHASE",
    "CLIENT_ERROR_CODE",
    "COLUMNS_RECORD",
    "DATA_SOURCE_PHASE",
    "DP_MAX_EPSILON_KEY",
    "FEATURES_KEY",
    "FEATURE_MOMENTS_PHASE",
    "K_MOMENTS_PHASE",
    "K_SPREADS_PHASE",
    "LABELS_PATH_KEY",
    "MOMENTS_TRANSFORM_KEY",
    "MOMENT_KEYS",
    "RAW_ROWS_KEY",
    "REFINE_PHASE",
    "SECURE_EVALUATE_PHASE",
    "SPLIT_CHECK_KEYS",
    "SPLIT_IN_EVALUATION_KEY",
    "SPLIT_IN_EVALUATION_PHASE",
    "SPLIT_WITHHELD_KEY",
    "SPLIT_HISTOGRAM_PHASE",
    "SPLIT_SCATTER_PHASE",
    "UNIT_CHECK_PHASE",
    "MAX_REASON_CHARS",
    "client_id_of",
    "short_reason",
    "split_metrics",
    "with_features",
]

#: Error code of a reply built from a client exception
#: (:func:`~flwr_clustering.clients.handlers.handle_train` and its siblings).
CLIENT_ERROR_CODE = 1

#: Node-config key of the file where a node writes the labels of its rows at the end of a run.
LABELS_PATH_KEY = "labels-path"

#: Node-config key: whether the data owner lets a protocol step send this node's raw rows
#: (or deliver other sites' rows to it). The App's default: false on a node that reads its
#: own file (``data-path``), true on a simulated node that holds a built-in partition.
RAW_ROWS_KEY = "allow-raw-rows"

#: Node-config key: the largest differential-privacy epsilon this node accepts (a DP run
#: asking for more, or no DP at all where an algorithm offers it, is refused). Unset: any.
DP_MAX_EPSILON_KEY = "dp-max-epsilon"

#: The library's ``QUERY`` phase (round 0) where every client tells where its data came
#: from; :func:`~flwr_clustering.clients.handlers.handle_query` answers it for any client,
#: without the algorithm's code.
DATA_SOURCE_PHASE = "data-source"
#: The federated evaluation under secure aggregation (a ``TRAIN`` message: SecAgg+'s).
SECURE_EVALUATE_PHASE = "secure-evaluate"
#: The library's phase (round 0) where every client sends its per-feature sums for the
#: federation's scaling (:func:`~flwr_clustering.clients.statistics.feature_moments_arrays`),
#: answered without the algorithm.
FEATURE_MOMENTS_PHASE = "feature-moments"
#: Phase of the unit check under secure aggregation (round 0, after ``feature-moments``):
#: each client compares its rows with the federation's mean and spread and flags the
#: features that look recorded in other units; only the flags' totals reach the server.
UNIT_CHECK_PHASE = "unit-check"
#: The library's phase (round 0) where every client tells the values of its declared
#: categorical columns with their counts (a value rarer than the privacy threshold at the
#: site as ``other`` only), in its ``columns`` reply record.
CATEGORIES_PHASE = "categories"
#: The library's phases after the last round (:mod:`flwr_clustering.strategies.split_check`):
#: per-cluster scatter, histograms along each cluster's main axis, and a Lloyd round of
#: the refinement; answered without the algorithm
#: (:func:`~flwr_clustering.clients.statistics.split_check_arrays`).
SPLIT_SCATTER_PHASE = "split-scatter"
SPLIT_HISTOGRAM_PHASE = "split-histograms"
REFINE_PHASE = "refine"
#: Each phase's reply statistics (a plain exchange), in the order of its arrays.
SPLIT_CHECK_KEYS: dict[str, tuple[str, ...]] = {
    SPLIT_SCATTER_PHASE: ("split-counts", "split-sums", "split-scatter"),
    SPLIT_HISTOGRAM_PHASE: ("split-histograms",),
    REFINE_PHASE: ("refine-sums", "refine-counts", "refine-sse"),
}
#: Evaluate-config key: the final evaluation also carries the split check's first sums
#: (the ``split-scatter`` phase's statistics, same keys, and ``split-withheld`` for its
#: ``withheld``), one exchange for both when the check cannot change the model.
SPLIT_IN_EVALUATION_KEY = "split-scatter"
#: That reply's metric for the phase's ``withheld``, and the privacy ledger's phase name.
SPLIT_WITHHELD_KEY = "split-withheld"
SPLIT_IN_EVALUATION_PHASE = "evaluate+split-scatter"
#: The reply statistics of the ``feature-moments`` phase (a plain exchange), in order.
MOMENT_KEYS: tuple[str, ...] = ("moment-count", "moment-sum", "moment-sumsq", "moment-rows",
                                "moment-min", "moment-max")
#: ``data-source`` query-config key of a plain run that declares its features
#: (:func:`~flwr_clustering.strategies.features.moments_with_columns`): the features the
#: ``feature-moments`` phase would take its sums in (a
#: :class:`~flwr_clustering.data.schema.FeatureTransform` as JSON); the client's reply
#: then carries the :data:`MOMENT_KEYS` statistics too, and that phase is not sent.
MOMENTS_TRANSFORM_KEY = "moments-transform"
#: Message-config key of a search's train message (:mod:`flwr_clustering.strategies.choose_k`):
#: JSON, one entry per candidate model, ``{"config": {...}, "arrays": n}``; the message's
#: arrays are the candidates' in order. The client answers each candidate as a message of
#: its own (:func:`~flwr_clustering.clients.candidates.fit_candidates`).
CANDIDATES_KEY = "candidates"
#: Reply record of a search's train message: ``{candidate index: reason}`` of the
#: candidates the client could not answer (the others are answered).
CANDIDATE_ERRORS_RECORD = "candidate-errors"
#: The library's phases after a search's last round: per cluster of every candidate, the
#: moments (count, sum, SSE, silhouette sum) and the spreads about the clusters' means
#: (:mod:`flwr_clustering.algorithms.choose_k`); answered without the algorithm.
K_MOMENTS_PHASE = "k-moments"
K_SPREADS_PHASE = "k-spreads"
#: Message-config key of the federation's features and scaling
#: (:class:`~flwr_clustering.data.schema.FeatureTransform` as JSON): every client holds
#: its rows in those features and units
#: (:meth:`~flwr_clustering.clients.base.ClusteringClient.use_features`).
FEATURES_KEY = "feature-transform"
#: Reply record of the ``data-source`` phase: the client's column names and kinds.
COLUMNS_RECORD = "columns"


def with_features(text: str | None, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the federation's agreed features ``text`` (:data:`FEATURES_KEY`).

    Every message after the features are agreed carries them, so that a client holds its
    rows in the same features and units whatever message it answers; ``text`` ``None``
    (rows as the clients hold them) leaves ``config`` as it is.
    """
    return config if text is None else {**config, FEATURES_KEY: text}


#: How much of a client's error reason the server logs and stores (characters): a hostile
#: client could send megabytes.
MAX_REASON_CHARS = 300


def short_reason(reason: Any, limit: int = MAX_REASON_CHARS) -> str:
    """``reason`` as text of at most ``limit`` characters and a note of the cut."""
    text = str(reason)
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters cut]"


def client_id_of(context: Context) -> int:
    """Return the stable id of a client: its ``partition-id``, else its node id.

    Parameters
    ----------
    context : flwr.app.Context
        The ClientApp context.

    Returns
    -------
    int
        The id used to seed the client and to order replies on the server.
    """
    if "partition-id" in context.node_config:
        return int(context.node_config["partition-id"])
    return int(context.node_id)


def split_metrics(metrics: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Split a reply's metrics into scalars (bools as ints) and arrays; refuse anything else."""
    scalars, arrays = {}, {}
    for key, value in metrics.items():
        if isinstance(value, np.ndarray):
            arrays[key] = value
        elif isinstance(value, bool | np.bool_):
            scalars[key] = int(value)
        elif isinstance(value, int | np.integer):
            scalars[key] = int(value)
        elif isinstance(value, float | np.floating):
            scalars[key] = float(value)
        else:
            raise TypeError(f"metric {key!r} has unsupported type {type(value).__name__}")
    return scalars, arrays
