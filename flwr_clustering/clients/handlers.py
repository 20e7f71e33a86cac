"""The client adapter: one handler per message type, for a user's own ClientApp too.

:func:`handle_train`, :func:`handle_query` and :func:`handle_evaluate` answer one message
with a NumPyClient, for a user's own ``@app.train()`` / ``@app.query()`` /
``@app.evaluate()`` handlers: ``ArrayRecord`` <-> list of ndarrays, ``ConfigRecord`` <->
dict, ``MetricRecord`` out (array-valued statistics travel in an ``ArrayRecord`` named
``"stats"``). Before any phase the adapter checks the node's rows
(:mod:`~flwr_clustering.clients.integrity`), holds them in the federation's features
(:meth:`~flwr_clustering.clients.base.ClusteringClient.use_features`) and refuses rows
that still hold missing cells; the reply itself comes from the table of phases
(:mod:`~flwr_clustering.clients.phases`). A client exception becomes an error reply whose
reason names the client (:mod:`~flwr_clustering.clients.errors`), so the server can log
why it dropped it.

The final message of a run (an ``EVALUATE`` message with ``final=True``) carries the final
model: the client labels its own rows
(:meth:`~flwr_clustering.clients.base.ClusteringClient.local_labels`) and the node keeps
the labels (:func:`~flwr_clustering.clients.labels.stored_labels`, node config
``labels-path``). The labels never leave the node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flwr.app import Context, Error, Message
from flwr.client import NumPyClient

from ..protocol import (
    CATEGORIES_PHASE,
    CLIENT_ERROR_CODE,
    DATA_SOURCE_PHASE,
    FEATURE_MOMENTS_PHASE,
    FEATURES_KEY,
    client_id_of,
)
from .errors import error_reasons
from .integrity import check_declared_rows, declare_rows
from .messages import phase_name, unpack
from .phases import Request, answer
from .statistics import data_source_metrics

__all__ = ["handle_evaluate", "handle_query", "handle_train"]

logger = logging.getLogger(__name__)

#: The phases a client answers while its rows still hold missing cells (round 0: the
#: federation's means are computed from their answers).
_ROUND_ZERO_PHASES = (DATA_SOURCE_PHASE, CATEGORIES_PHASE, FEATURE_MOMENTS_PHASE)


def _handle(msg: Message, context: Context, client: NumPyClient | Callable, kind: str
            ) -> Message:
    cid = client_id_of(context)
    config: dict[str, Any] = {}
    try:
        if not isinstance(client, NumPyClient):
            client = client(context)
        params, config = unpack(msg)
        source = None
        if config.get("phase") == DATA_SOURCE_PHASE:
            source = data_source_metrics(client)
            declare_rows(context, source[0], source[1].get("data-hash", -1))
            client._rows_checked = True  # (a client object kept across messages)
        else:
            check_declared_rows(context, client, cid)
        if FEATURES_KEY in config and hasattr(client, "use_features"):
            client.use_features(str(config[FEATURES_KEY]))
        if config.get("phase") not in _ROUND_ZERO_PHASES and hasattr(client,
                                                                     "require_complete"):
            client.require_complete(phase_name(msg, config))
        return answer(Request(msg, context, client, kind, cid, params, config, source))
    except Exception as ex:  # noqa: BLE001 - every failure becomes an error reply
        # the server gets the problem and where, never a cell (clients.errors); the
        # site's log keeps the whole message
        reason, detail, vetted = error_reasons(ex, cid, phase_name(msg, config))
        logger.warning("%s (%s)", detail, type(ex).__name__, exc_info=not vetted)
        return Message(Error(code=CLIENT_ERROR_CODE, reason=reason), reply_to=msg)


_HANDLER_DOC = """Answer one {kind} message with a NumPyClient (for a user's own handler).

    Parameters
    ----------
    msg : flwr.app.Message
        The server's message (content ``"arrays"`` and ``"config"``).
    context : flwr.app.Context
        The ClientApp context (its ``partition-id``, else the node id, is the client id).
    client : NumPyClient or callable
        The client (e.g. a :class:`~flwr_clustering.clients.base.ClusteringClient`
        around the node's rows), or ``client_fn(context) -> NumPyClient``.

    Returns
    -------
    flwr.app.Message
        The reply: {reply}; or an error reply naming the client.
    """


def handle_train(msg: Message, context: Context, client) -> Message:  # noqa: D103
    return _handle(msg, context, client, "train")


def handle_query(msg: Message, context: Context, client) -> Message:  # noqa: D103
    return _handle(msg, context, client, "query")


def handle_evaluate(msg: Message, context: Context, client) -> Message:  # noqa: D103
    return _handle(msg, context, client, "evaluate")


handle_train.__doc__ = _HANDLER_DOC.format(
    kind="``train``", reply="``fit``'s arrays, metrics and statistics")
handle_query.__doc__ = _HANDLER_DOC.format(
    kind="``query`` (a protocol phase that is not training)",
    reply="``query``'s (else ``fit``'s) arrays, metrics and statistics")
handle_evaluate.__doc__ = _HANDLER_DOC.format(
    kind="``evaluate``",
    reply="``evaluate``'s statistics (none when the config says ``evaluate=False``); "
          "with ``final=True`` the client first labels its rows and keeps the labels on "
          "the node (:func:`~flwr_clustering.clients.labels.stored_labels`, node config "
          "``labels-path``)")
