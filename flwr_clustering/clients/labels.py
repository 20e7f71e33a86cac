"""The labels a node keeps of its rows at the end of a run; they never leave the node.

The final message of a run (an ``EVALUATE`` message with ``final=True``, or the last train
round of a protocol that labels the rows itself, KDC's) has the client label its own rows;
the node keeps them in ``context.state`` (:func:`stored_labels`) and, when the node config
has ``labels-path``, in that file (``.npy``, else one integer per line).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context

from ..protocol import LABELS_PATH_KEY

__all__ = ["keep_labels", "labels_of_rows_read", "stored_labels"]

logger = logging.getLogger(__name__)

#: Name of the ``context.state`` record that keeps a node's labels.
_STATE_KEY = "flwr-clustering.labels"


def stored_labels(context: Context) -> np.ndarray | None:
    """The labels this node's client gave its rows at the end of the run, if any.

    Parameters
    ----------
    context : flwr.app.Context
        The ClientApp context of the node.

    Returns
    -------
    numpy.ndarray of shape (n,) or None
        The cluster of every local row, kept in ``context.state``.
    """
    if _STATE_KEY not in context.state:
        return None
    return context.state[_STATE_KEY]["labels"].numpy()


def keep_labels(context: Context, labels: np.ndarray, cid: int) -> None:
    """Keep a node's labels in ``context.state`` and, with ``labels-path``, in that file."""
    labels = np.ascontiguousarray(np.asarray(labels, dtype=np.int64))
    context.state[_STATE_KEY] = ArrayRecord({"labels": Array(labels)})
    path = context.node_config.get(LABELS_PATH_KEY)
    if path:
        path = Path(str(path)).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".npy":
            np.save(path, labels)
        else:
            np.savetxt(path, labels, fmt="%d")
        logger.info("client %d: wrote the labels of its %d rows to %s", cid, len(labels), path)


def labels_of_rows_read(client: Any, labels: np.ndarray) -> np.ndarray:
    """A client's labels of the rows as read (-1 where ``missing='drop'`` left one out)."""
    expand = getattr(client, "labels_of_rows_read", None)
    return labels if expand is None else expand(labels)
