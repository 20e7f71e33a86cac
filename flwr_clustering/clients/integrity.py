"""The data-integrity check: a node answers a whole run on the rows it declared before round 1.

Every message of a deployment starts a fresh ClientApp that reads the node's file again.
In the library's ``data-source`` phase (round 0) a node declares its rows: their count and
a fingerprint (:func:`data_hash`, a SHA-256 over them), kept in its ``context.state``
(:func:`declare_rows`); every later message is answered only on the same rows
(:func:`check_declared_rows`), so a file overwritten, cut or appended to during a run
never silently enters the next round. The fingerprint also travels in the ``data-source``
reply: the server compares it with data it already holds (a built-in partition), never
the rows.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context

__all__ = ["DECLARED_ROWS_KEY", "check_declared_rows", "data_hash", "declare_rows"]

#: Name of the ``context.state`` record that keeps the rows a node declared in round 0.
DECLARED_ROWS_KEY = "flwr-clustering-declared-rows"


def data_hash(X: np.ndarray) -> int:
    """A fingerprint of a data matrix: the first 8 bytes of sha256 over its float64 rows.

    Parameters
    ----------
    X : array_like of shape (n, ...)
        The rows (flattened to ``(n, d)`` float64, C order; NaN hash as their bytes).

    Returns
    -------
    int
        A non-negative integer below ``2**63`` (it travels in a ``MetricRecord``).
    """
    a = np.asarray(X, dtype=np.float64)
    a = np.ascontiguousarray(a.reshape(len(a), -1))
    # hashed through the buffer protocol: no bytes copy of the rows (10 M rows = 1.3 GB);
    # flat, so that rows without a column (a file of text columns only) hash too
    return int.from_bytes(hashlib.sha256(memoryview(a.reshape(-1)).cast("B")).digest()[:8],
                          "big") >> 1


def declare_rows(context: Context, rows: int, fingerprint: int) -> None:
    """Keep, in the node's run state, the rows it declares in the ``data-source`` phase."""
    context.state[DECLARED_ROWS_KEY] = ConfigRecord({"rows": int(rows),
                                                     "hash": int(fingerprint)})


def check_declared_rows(context: Context, client: Any, cid: int) -> None:
    """Refuse to answer on rows other than those the node declared before round 1.

    Every message of a deployment starts a fresh ClientApp that reads its file again: a
    file overwritten, cut or appended to during a run would silently enter the next round.
    The rows as read (before the federation's transform) are fingerprinted
    (:func:`data_hash`, a SHA-256 over them) and compared with the ``data-source``
    declaration kept in ``context.state``. A client object that already answered a message
    of the run keeps its rows in memory (maybe in other features or dtype since): it has
    read nothing again and is not checked again.

    Raises
    ------
    ValueError
        Naming the client, its file, the rows now and the rows declared.
    """
    if (DECLARED_ROWS_KEY not in context.state or getattr(client, "_rows_checked", False)
            or getattr(client, "_features_key", None)):
        return
    X = getattr(client, "X", None)
    if X is None:
        return
    declared = context.state[DECLARED_ROWS_KEY]
    rows, fingerprint = len(X), data_hash(np.asarray(X))
    if (rows, fingerprint) == (int(declared["rows"]), int(declared["hash"])):
        client._rows_checked = True
        return
    source = getattr(client, "data_source", None) or {}
    where = f"its file {source['path']}" if source.get("path") else "its data"
    raise ValueError(
        f"client {cid}: {where} changed during the run: it now holds {rows} rows "
        f"(fingerprint {fingerprint}), not the {int(declared['rows'])} rows (fingerprint "
        f"{int(declared['hash'])}) it declared before round 1. Restore the file for this "
        "run, or start a new run on the new data")
