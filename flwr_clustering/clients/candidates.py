"""A client's side of a search over candidate models (any algorithm's client).

A search (:mod:`flwr_clustering.strategies.choose_k`) sends every candidate model in one
train message: the config's ``candidates`` (:data:`~flwr_clustering.protocol.CANDIDATES_KEY`)
lists each candidate's own config and how many of the message's arrays are its.
:func:`fit_candidates` answers each candidate with the client's own ``fit``, as if it were
a message of its own, and packs the answers into one reply: first an array of the number
of arrays each candidate answered with (-1: it failed; the reason in the reply's
``candidate-errors`` record), then every answer's arrays. After the last round
:func:`score_arrays` answers the search's scoring phases with per-cluster sums of every
candidate (:mod:`flwr_clustering.algorithms.choose_k`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from ..algorithms.choose_k import client_moments, client_spreads
from ..protocol import CANDIDATES_KEY, K_MOMENTS_PHASE, K_SPREADS_PHASE
from .errors import error_reasons

__all__ = ["candidate_list", "fit_candidates", "score_arrays"]

logger = logging.getLogger(__name__)


def candidate_list(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The candidates of a search's message config (``[{"config", "arrays"}]``)."""
    entries = json.loads(str(config[CANDIDATES_KEY]))
    if not isinstance(entries, list) or not entries:
        raise ValueError("the search's candidates must be a non-empty list")
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("config"), dict) \
                or int(e.get("arrays", -1)) < 0:
            raise ValueError(f"malformed candidate {e!r}")
    return entries


def fit_candidates(client: Any, step, params: list[np.ndarray], config: dict[str, Any], *,
                   strict: bool = False) -> tuple[list[np.ndarray], int, dict[str, Any],
                                                  dict[str, str]]:
    """Answer every candidate of a search's train message with ``step`` (``client.fit``).

    Parameters
    ----------
    client : ClusteringClient
        The client (its ``client_id`` names it in errors).
    step : callable
        ``step(parameters, config) -> (arrays, n, metrics)``: the client's ``fit``.
    params : list of numpy.ndarray
        The message's arrays, the candidates' in order.
    config : dict
        The message's config: its keys, with each candidate's own config over them.
    strict : bool, default False
        Fail the whole reply when one candidate fails (a secure exchange sums whole
        replies), instead of answering the others.

    Returns
    -------
    arrays : list of numpy.ndarray
        ``[sizes (c,) int64, *answers' arrays]``.
    n : int
        The client's rows.
    metrics : dict
        ``raw-rows`` summed over the candidates (the ledger's), each candidate's other
        metrics as ``candidate-<i>-<key>``.
    errors : dict
        ``{str(i): reason}`` of the candidates that failed.
    """
    entries = candidate_list(config)
    base = {k: v for k, v in config.items() if k != CANDIDATES_KEY}
    need = sum(int(e["arrays"]) for e in entries)
    if need != len(params):
        raise ValueError(f"client {client.client_id}: the search's message has "
                         f"{len(params)} arrays, its candidates {need}")
    sizes, out, metrics, errors = [], [], {}, {}
    raw, n, at = 0, len(getattr(client, "X", ())), 0
    for i, e in enumerate(entries):
        sub = params[at:at + int(e["arrays"])]
        at += int(e["arrays"])
        try:
            arrays, n, m = step(sub, {**base, **e["config"]})
        except (ValueError, RuntimeError) as ex:
            if strict:
                raise
            # sent to the server: the vetted reason, never a cell (clients.errors); the
            # site's log keeps the whole message
            public, detail, vetted = error_reasons(ex, client.client_id, f"candidate {i}")
            logger.warning("candidate %d: %s", i, detail, exc_info=not vetted)
            errors[str(i)] = public
            sizes.append(-1)
            continue
        arrays = list(arrays or [])
        sizes.append(len(arrays))
        out += arrays
        for key, value in (m or {}).items():
            if key == "raw-rows":
                raw += int(value)
            else:
                metrics[f"candidate-{i}-{key}"] = value
    if raw:
        metrics["raw-rows"] = raw
    return [np.asarray(sizes, dtype=np.int64), *out], int(n), metrics, errors


def score_arrays(client: Any, phase: str, params: list[np.ndarray], config: dict[str, Any]
                 ) -> list[np.ndarray]:
    """A client's reply to a search's scoring phase (float64 arrays).

    ``k-moments`` (arrays: every candidate's centres): per candidate ``[counts, sums,
    sse, silhouette, withheld]``; ``k-spreads`` (the centres, then every candidate's
    clusters' means): per candidate the sum of distances to the means, per cluster.
    Clusters with fewer rows here than the config's ``privacy-threshold`` are withheld
    (0 under secure aggregation, where only totals reach the server).
    """
    X = np.asarray(client.X, dtype=np.float64)
    count = int(config["candidate-count"])
    threshold = int(config.get("privacy-threshold", 2))
    models = [np.asarray(C, dtype=np.float64) for C in params[:count]]
    for C in models:
        if C.ndim != 2 or C.shape[1] != X.shape[1]:
            raise ValueError(f"client {client.client_id}: {phase}: centres of shape "
                             f"{C.shape} for rows of {X.shape[1]} features")
    if phase == K_MOMENTS_PHASE:
        return [a for m in client_moments(X, models, threshold) for a in m.to_arrays()]
    if phase == K_SPREADS_PHASE:
        means = params[count:2 * count]
        if len(means) != count:
            raise ValueError(f"client {client.client_id}: {phase}: {len(means)} means for "
                             f"{count} candidates")
        return client_spreads(X, models, means, threshold)
    raise ValueError(f"client {client.client_id}: unknown search phase {phase!r}")
