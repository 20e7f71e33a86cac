"""A message's arrays and config in, a NumPyClient's answer out: the reply's packing.

:func:`pack_reply` turns a NumPyClient's output (arrays, number of examples, metrics)
into the reply to a server's message: ``ArrayRecord`` "arrays", ``MetricRecord``
"metrics" (with ``num-examples`` and ``client-id``) and array-valued statistics in an
``ArrayRecord`` named "stats". :func:`unpack` reads a message's arrays and config;
:func:`phase_name` names the message in a log line or an error, :func:`sent_summary` says
what a reply carries (for the node's log).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from ..protocol import split_metrics

__all__ = ["pack_reply", "phase_name", "sent_summary", "unpack"]


def pack_reply(
    msg: Message, arrays: list[np.ndarray] | None, num_examples: int, metrics: dict, client_id: int
) -> Message:
    """Build the reply to ``msg`` from a NumPyClient's output.

    Parameters
    ----------
    msg : flwr.app.Message
        The server's message.
    arrays : list of numpy.ndarray or None
        The payload (``fit``'s parameters); ``None`` for evaluation replies.
    num_examples : int
        Number of local examples.
    metrics : dict
        Scalars go into ``MetricRecord "metrics"``, arrays into ``ArrayRecord "stats"``.
    client_id : int
        Added to the metrics as ``"client-id"``.

    Returns
    -------
    flwr.app.Message
        The reply.
    """
    scalars, stats = split_metrics(metrics)
    scalars.update({"num-examples": int(num_examples), "client-id": int(client_id)})
    content = RecordDict({"metrics": MetricRecord(scalars)})
    if arrays is not None:
        # np.require keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d).
        content["arrays"] = ArrayRecord([np.require(a, requirements="C") for a in arrays])
    if stats:
        content["stats"] = ArrayRecord(
            {k: Array(np.require(v, requirements="C")) for k, v in stats.items()}
        )
    return Message(content, reply_to=msg)


def unpack(msg: Message) -> tuple[list[np.ndarray], dict[str, Any]]:
    """A message's arrays (a list of ndarrays) and config (a dict); empty when absent."""
    params = msg.content["arrays"].to_numpy_ndarrays() if "arrays" in msg.content else []
    config = dict(msg.content["config"]) if "config" in msg.content else {}
    return params, config


def phase_name(msg: Message, config: dict[str, Any]) -> str:
    """The message, for a log line or an error: ``"round 3 train (fkm-step)"``."""
    return (f"round {msg.metadata.group_id} {msg.metadata.message_type}"
            + (f" ({config['phase']})" if config.get("phase") else ""))


def sent_summary(reply: Message) -> str:
    """What a reply carries, for the node's log: arrays, floats, integers and raw rows.

    The raw rows are the ones the client declared in its ``raw-rows`` metric (KDC's
    sample, FKM's ``init='paper'`` seeds, ...); every other float is a mean, a sum or a
    statistic of several rows.
    """
    # from the arrays' dtype and shape: no second deserialisation of what was just packed
    arrays = [(np.dtype(a.dtype).kind, math.prod(a.shape)) for name in ("arrays", "stats")
              if name in reply.content for a in reply.content[name].values()]
    floats = sum(size for kind, size in arrays if kind == "f")
    ints = sum(size for kind, size in arrays if kind in "iub")
    metrics = dict(reply.content["metrics"]) if "metrics" in reply.content else {}
    raw = int(metrics.get("raw-rows", 0))
    return (f"sent {len(arrays)} arrays ({floats} floats, {ints} integers), "
            f"{len(metrics)} scalars, {raw} raw rows")
