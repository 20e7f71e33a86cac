"""The phases the library answers for every client: a table of handlers, one per phase.

A message's ``config["phase"]`` names what the server asks. The library's own phases
(round 0's data source, categories, feature moments and unit check, the split check and
refinement after the last round, a search's scores, the evaluation under secure
aggregation) are answered here, for any client, without its algorithm's code:
:data:`PHASES` maps each phase to its handler. A handler receives the message as a
:class:`Request` and returns the reply, or ``None`` when the phase is not the library's
for that message type (``data-source`` is the library's in a ``query`` message only,
``unit-check`` and ``secure-evaluate`` in a ``train`` message only): then the message is
the client's, and :data:`MESSAGE_TYPES` answers it by its type: the client's
``evaluate`` for an ``evaluate`` message, its ``query`` (else ``fit``) or ``fit`` for a
phase of its algorithm. :func:`answer` applies the two tables in that order.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message

from ..algorithms.cluster_split import withholds
from ..data.schema import (
    ColumnInfo,
    FeatureTransform,
    agree_schema,
    category_counts,
    continuous_columns,
)
from ..protocol import (
    CANDIDATE_ERRORS_RECORD,
    CANDIDATES_KEY,
    CATEGORIES_PHASE,
    COLUMNS_RECORD,
    DATA_SOURCE_PHASE,
    FEATURE_MOMENTS_PHASE,
    K_MOMENTS_PHASE,
    K_SPREADS_PHASE,
    MOMENT_KEYS,
    MOMENTS_TRANSFORM_KEY,
    REFINE_PHASE,
    SECURE_EVALUATE_PHASE,
    SPLIT_CHECK_KEYS,
    SPLIT_HISTOGRAM_PHASE,
    SPLIT_IN_EVALUATION_KEY,
    SPLIT_SCATTER_PHASE,
    SPLIT_WITHHELD_KEY,
    UNIT_CHECK_PHASE,
)
from .candidates import fit_candidates, score_arrays
from .labels import keep_labels, labels_of_rows_read
from .messages import pack_reply, phase_name, sent_summary
from .statistics import (
    columns_record,
    feature_moments_arrays,
    secure_evaluation_arrays,
    split_check_arrays,
    unit_check_arrays,
)

__all__ = ["MESSAGE_TYPES", "PHASES", "Request", "answer"]

logger = logging.getLogger(__name__)


@dataclass
class Request:
    """One message to answer, with what the client adapter read of it.

    Attributes
    ----------
    msg : flwr.app.Message
        The server's message.
    context : flwr.app.Context
        The ClientApp context of the node.
    client : Any
        The NumPyClient that answers (one of ours, or a user's own).
    kind : str
        The message type: ``"train"``, ``"query"`` or ``"evaluate"``.
    cid : int
        The client id its reply carries.
    params : list of numpy.ndarray
        The message's arrays.
    config : dict
        The message's config.
    source : tuple, optional
        ``(num-examples, metrics)`` of the ``data-source`` phase, computed once by the
        adapter (it declares the rows from them); ``None`` in any other phase.
    """

    msg: Message
    context: Context
    client: Any
    kind: str
    cid: int
    params: list[np.ndarray]
    config: dict[str, Any]
    source: tuple[int, dict[str, int]] | None = None

    @property
    def phase(self) -> Any:
        """The message's ``config["phase"]`` (``None`` when it has none)."""
        return self.config.get("phase")

    def reply(self, arrays: list[np.ndarray] | None, num_examples: int,
              metrics: dict[str, Any]) -> Message:
        """The reply to this message (:func:`~.messages.pack_reply`)."""
        return pack_reply(self.msg, arrays, num_examples, metrics, self.cid)

    def log_sent(self, reply: Message, what: str | None = None) -> None:
        """Log on the node what ``reply`` carries, under ``what`` (default: the message)."""
        logger.info("client %d %s: %s", self.cid,
                    phase_name(self.msg, self.config) if what is None else what,
                    sent_summary(reply))


def _refuse_without_noise(r: Request, sends: str) -> None:
    """A node that takes part only in DP runs answers no phase of exact statistics."""
    if getattr(r.client, "dp_max_epsilon", None) is not None:
        raise PermissionError(
            f"client {r.cid}: this node takes part only in differentially private runs (node "
            f"config dp-max-epsilon), and the {r.phase} phase sends {sends}")


#: What the round-0 statistics phases tell a node of a DP-only run to change.
_NO_STATISTICS = ("statistics without noise: run with scaling='none' and without "
                  "categorical-columns")


def data_source(r: Request) -> Message | None:
    """``data-source``, a ``query`` message: where the rows came from, and their columns.

    The rows' count, fingerprint and source (computed by the adapter, which declares the
    rows from them) and their columns' names and kinds
    (:func:`~.statistics.columns_record`).
    """
    if r.kind != "query":
        return None
    n, metrics = r.source
    columns = columns_record(r.client, bool(r.config.get("magnitudes")), json.loads(
        str(r.config.get("datetime-columns", "[]"))))
    moments = _moments_with_columns(r, columns) if columns is not None else None
    reply = r.reply(None, n, {**metrics, **(moments or {})})
    if columns is not None:
        reply.content[COLUMNS_RECORD] = columns
    if moments:
        r.log_sent(reply, f"{DATA_SOURCE_PHASE} with the {FEATURE_MOMENTS_PHASE}")
    return reply


def _moments_with_columns(r: Request, columns: ConfigRecord
                          ) -> dict[str, np.ndarray] | None:
    """The ``feature-moments`` statistics a plain run's ``data-source`` query asks for.

    When the config names the features (:data:`~flwr_clustering.protocol.
    MOMENTS_TRANSFORM_KEY`) and its own ``columns`` make them (the schema agreement for
    this site alone), the client takes its rows in them and computes what its
    ``feature-moments`` reply would carry (:func:`~.statistics.feature_moments_arrays`,
    the same sums). Anything that phase would refuse (a node of DP runs only, a missing
    column, fewer rows than the privacy threshold, an overflow) leaves them out, logged
    on the node: the server then sends that phase, which refuses it as before.
    """
    text = r.config.get(MOMENTS_TRANSFORM_KEY)
    if not text or not hasattr(r.client, "use_features") or getattr(
            r.client, "dp_max_epsilon", None) is not None:
        return None
    try:
        # this site's own columns must make the declared features (the server's schema
        # agreement, for this site alone): else no sum leaves before the run is refused
        transform = FeatureTransform.from_json(str(text))
        rows = int(columns.get("rows", 0))
        agree_schema({f"client {r.cid}": [
            ColumnInfo(str(n), str(k), bool(u), rows)
            for n, k, u in zip(columns["names"], columns["kinds"], columns["unique"],
                               strict=True)]},
            feature_columns=transform.features, datetime_columns=transform.datetimes)
        r.client.use_features(str(text))
        arrays = feature_moments_arrays(r.client, r.config)
    except Exception as ex:  # noqa: BLE001 - the feature-moments phase refuses it, named
        logger.info("client %d %s: no feature moments here (%s); the server asks for them "
                    "in their own phase", r.cid, DATA_SOURCE_PHASE, type(ex).__name__)
        return None
    return dict(zip(MOMENT_KEYS, arrays, strict=False))


def categories(r: Request) -> Message:
    """``categories``: the values of the declared categorical columns with their counts."""
    _refuse_without_noise(r, _NO_STATISTICS)
    columns = json.loads(str(r.config["categorical-columns"]))
    # a continuous column is flagged by name (no count: the server refuses it)
    continuous = continuous_columns(r.client.table(), columns)
    counts = category_counts(r.client.table(), [c for c in columns if c not in continuous],
                             int(r.config.get("privacy-threshold", 2)))
    reply = r.reply(None, len(r.client.X), {})
    reply.content[COLUMNS_RECORD] = ConfigRecord(
        {"categories": json.dumps(counts), "continuous": json.dumps(continuous)})
    logger.info("client %d %s: %d values of %d columns (no row)", r.cid,
                CATEGORIES_PHASE, sum(len(v) for v in counts.values()), len(counts))
    return reply


def feature_moments(r: Request) -> Message:
    """``feature-moments``: per-feature sums for the federation's scaling.

    As statistics or, with ``moments-secure``, as arrays the secure aggregation mod sums
    (:func:`~.statistics.feature_moments_arrays`).
    """
    _refuse_without_noise(r, _NO_STATISTICS)
    arrays = feature_moments_arrays(r.client, r.config)
    read = int(arrays[3][0])  # the rows as read, as in the data-source reply
    if r.config.get("moments-secure"):  # summed by the secure aggregation mod
        reply = r.reply(arrays, read, {})
    else:
        reply = r.reply(None, read, dict(zip(MOMENT_KEYS, arrays, strict=False)))
    r.log_sent(reply, FEATURE_MOMENTS_PHASE)
    return reply


def unit_check(r: Request) -> Message | None:
    """``unit-check``, a ``train`` message: the features that look in other units.

    Summed by the secure aggregation mod (:func:`~.statistics.unit_check_arrays`).
    """
    if r.kind != "train":
        return None
    return r.reply(unit_check_arrays(r.client), len(r.client.X), {})


def split_check(r: Request) -> Message:
    """``split-scatter``, ``split-histograms``, ``refine``: per-cluster sums after the run.

    :func:`~.statistics.split_check_arrays`; as arrays in a ``train`` message (summed by
    the secure aggregation mod, nothing withheld), else as statistics.
    """
    phase = str(r.phase)
    _refuse_without_noise(r, "sums without noise")
    summed = r.kind == "train"
    arrays = split_check_arrays(r.client, phase, r.params,
                                {**r.config, "privacy-threshold": 0} if summed else r.config)
    if summed:
        return r.reply(arrays, len(r.client.X), {})
    held = withholds(r.client.X, r.params[0], int(r.config.get("privacy-threshold", 2)))
    reply = r.reply(None, len(r.client.X),
                    {**dict(zip(SPLIT_CHECK_KEYS[phase], arrays, strict=True)),
                     "withheld": int(held)})
    r.log_sent(reply, phase)
    return reply


def k_scores(r: Request) -> Message:
    """``k-moments``, ``k-spreads``: a search's per-cluster scores of every candidate.

    :func:`~.candidates.score_arrays`; nothing withheld in a ``train`` message (summed by
    the secure aggregation mod).
    """
    phase = str(r.phase)
    _refuse_without_noise(r, "sums without noise")
    # a train message is summed by the secure aggregation mod: nothing withheld
    arrays = score_arrays(r.client, phase, r.params, {**r.config, "privacy-threshold": 0}
                          if r.kind == "train" else r.config)
    reply = r.reply(arrays, len(r.client.X), {})
    r.log_sent(reply, phase)
    return reply


def secure_evaluate(r: Request) -> Message | None:
    """``secure-evaluate``, a ``train`` message: the evaluation's statistics as arrays.

    Summed by the secure aggregation mod (:func:`~.statistics.secure_evaluation_arrays`).
    With ``final=True`` it is also the final model's delivery: the client first labels
    its rows, as for the ``evaluate`` message.
    """
    if r.kind != "train":
        return None
    if r.config.get("final") and hasattr(r.client, "local_labels"):
        keep_labels(r.context, labels_of_rows_read(
            r.client, r.client.local_labels(r.params[:1], r.config)), r.cid)
    arrays = secure_evaluation_arrays(r.client, r.params[0], r.config)
    return r.reply(arrays, len(r.client.X), {})


def evaluate(r: Request) -> Message:
    """An ``evaluate`` message: the client's ``evaluate`` statistics.

    None with ``evaluate=False``; with ``final=True`` the client first labels its rows
    and the node keeps the labels (:func:`~.labels.keep_labels`).
    """
    client, config = r.client, r.config
    if config.get("final") and hasattr(client, "local_labels"):
        keep_labels(r.context, labels_of_rows_read(client, client.local_labels(r.params, config)),
                    r.cid)
    split = _split_in_evaluation(r) if config.get(SPLIT_IN_EVALUATION_KEY) else {}
    if not config.get("evaluate", True):
        reply = r.reply(None, len(getattr(client, "X", ())), split)
        if split:
            r.log_sent(reply)
        return reply
    loss, n, metrics = client.evaluate(r.params, config)
    reply = r.reply(None, n, {**metrics, "loss": float(loss), **split})
    r.log_sent(reply)
    return reply


def _split_in_evaluation(r: Request) -> dict[str, Any]:
    """The ``split-scatter`` phase's statistics, asked in the final evaluation.

    The same sums as :func:`split_check`'s reply to ``split-scatter`` with the same
    centroids (the message's first array), under the same privacy threshold (the
    evaluation's ``privacy-threshold``); its ``withheld`` is ``split-withheld`` here.
    """
    _refuse_without_noise(r, "sums without noise")
    threshold = int(r.config.get("privacy-threshold", 2))
    arrays = split_check_arrays(r.client, SPLIT_SCATTER_PHASE, r.params[:1],
                                {"privacy-threshold": threshold})
    held = withholds(r.client.X, r.params[0], threshold)
    return {**dict(zip(SPLIT_CHECK_KEYS[SPLIT_SCATTER_PHASE], arrays, strict=True)),
            SPLIT_WITHHELD_KEY: int(held)}


def algorithm_step(r: Request) -> Message:
    """A phase of the client's algorithm: its ``fit``, or its ``query``.

    Its ``query`` answers a ``query`` message (a plain NumPyClient has none and answers
    every phase in ``fit``); a search's message answers every candidate
    (:func:`~.candidates.fit_candidates`).
    """
    client, config = r.client, r.config
    step = getattr(client, "query", client.fit) if r.kind == "query" else client.fit
    errors = None
    if config.get(CANDIDATES_KEY):  # a search: every candidate model in one message
        arrays, n, metrics, errors = fit_candidates(
            client, step, r.params, config, strict=bool(config.get("candidates-strict")))
    else:
        arrays, n, metrics = step(r.params, config)
    final = getattr(client, "final_labels", None)
    if final is not None:  # a protocol whose last train round labels the rows (KDC)
        keep_labels(r.context, labels_of_rows_read(client, final), r.cid)
    reply = r.reply(arrays, n, metrics)
    if errors:
        reply.content[CANDIDATE_ERRORS_RECORD] = ConfigRecord(errors)
        logger.warning("client %d %s: %d of the search's candidates failed: %s", r.cid,
                       phase_name(r.msg, config), len(errors),
                       "; ".join(f"{i}: {why}" for i, why in errors.items()))
    r.log_sent(reply)
    return reply


#: A handler: the reply to a request, or ``None`` when the phase is not the library's
#: for the request's message type.
Handler = Callable[[Request], Message | None]

#: The library's phases, answered for every client: phase -> handler.
PHASES: dict[str, Handler] = {
    DATA_SOURCE_PHASE: data_source,
    CATEGORIES_PHASE: categories,
    FEATURE_MOMENTS_PHASE: feature_moments,
    UNIT_CHECK_PHASE: unit_check,
    SPLIT_SCATTER_PHASE: split_check,
    SPLIT_HISTOGRAM_PHASE: split_check,
    REFINE_PHASE: split_check,
    K_MOMENTS_PHASE: k_scores,
    K_SPREADS_PHASE: k_scores,
    SECURE_EVALUATE_PHASE: secure_evaluate,
}

#: Every other message, by its type: message type -> handler.
MESSAGE_TYPES: dict[str, Callable[[Request], Message]] = {
    "train": algorithm_step,
    "query": algorithm_step,
    "evaluate": evaluate,
}


def answer(r: Request) -> Message:
    """The reply to a request: its phase's handler, else its message type's.

    :data:`PHASES` first; a phase not there, or whose handler returns ``None`` for this
    message type, is answered by :data:`MESSAGE_TYPES`.
    """
    handler = PHASES.get(r.phase)
    reply = handler(r) if handler is not None else None
    return reply if reply is not None else MESSAGE_TYPES[r.kind](r)
