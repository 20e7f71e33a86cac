"""The privacy ledger: what every client sent (a part of the strategy base).

:func:`ledger_entry` records one reply as the server received it (array entries by kind,
scalars, declared raw rows) and :func:`min_count` the fewest rows behind any sum or mean
it carried; :meth:`PrivacyLedger.privacy_ledger` totals them per client and per run
(``privacy.json``). The exchange (:mod:`~flwr_clustering.strategies.exchange`) writes an
entry for every reply, valid or not; secure aggregation
(:mod:`~flwr_clustering.strategies.secure_rounds`) one per contributor with what reached
the server (its masked bytes) and one per exchange in ``secure_totals``.

The host class provides ``ledger`` and ``secure_totals`` (lists), ``secure_aggregation``
and, where it has one, ``privacy_threshold``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import (
    Message,
)


def ledger_entry(server_round: int, kind: str, client_id: int, msg: Message,
                 metrics: dict[str, Any]) -> dict[str, Any]:
    """What one reply carried, for the privacy ledger (see ``privacy_ledger``)."""
    arrays: list[np.ndarray] = []
    for name in ("arrays", "stats"):
        if name in msg.content:
            arrays += msg.content[name].to_numpy_ndarrays()
    return {
        "round": int(server_round), "phase": kind, "client": int(client_id),
        "floats": int(sum(a.size for a in arrays if a.dtype.kind == "f")),
        "integers": int(sum(a.size for a in arrays if a.dtype.kind in "iub")),
        "scalars": len(metrics),
        "raw-rows": int(metrics.get("raw-rows", 0)),
        "min-count": None,
    }


def min_count(counts: np.ndarray | None, stats: dict[str, Any]) -> int | None:
    """The fewest rows behind a sum or mean of a reply (``None``: none the server sees).

    An upload's counts (:meth:`ClusteringStrategy.payload_counts`) give the rows behind
    each mean; in the evaluation statistics a residual row stands for its cluster's rows,
    and ``sse``, ``sum-x`` and the silhouette sum for all the client's rows; in the split
    check's and the refinement's sums a cluster's row stands for its rows.
    """
    found: list[float] = []
    if counts is not None:
        c = np.asarray(counts, dtype=np.float64).ravel()
        found += c[c > 0].tolist()
    if "cluster-residuals" in stats and "cluster-counts" in stats:
        R = np.asarray(stats["cluster-residuals"], dtype=np.float64)
        n = np.asarray(stats["cluster-counts"], dtype=np.float64)
        if R.ndim == 2 and len(R) == len(n):
            sent = ~np.isnan(R).all(axis=1) & (n > 0)
            found += n[sent].tolist()
    for key in ("split-counts", "refine-counts"):  # the split check's per-cluster sums
        if key in stats:
            c = np.asarray(stats[key], dtype=np.float64).ravel()
            found += c[c > 0].tolist()
    if any(k in stats for k in ("sse", "sum-x", "refine-sse")) and stats.get("num-examples"):
        found.append(float(stats["num-examples"]))
    return int(min(found)) if found else None


class PrivacyLedger:
    """The run's privacy ledger: :meth:`privacy_ledger` reports ``ledger``'s entries."""

    def privacy_ledger(self) -> dict[str, Any]:
        """What the clients sent in this run, as the server received it (``privacy.json``).

        Returns
        -------
        dict
            ``secure-aggregation`` (false: the server saw every reply on its own),
            ``differential-privacy`` (``None``: none; so ``epsilon`` and ``delta`` are
            ``None``, meaning unbounded), ``privacy-threshold``, ``raw-rows-setting``
            (:meth:`raw_rows_option`), ``totals`` over the run, ``clients`` (the same per
            client) and ``messages``: one entry per reply received (dropped ones too) with
            its round, phase, client, ``floats`` and ``integers`` (array entries),
            ``scalars``, ``raw-rows`` (declared by the client) and ``min-count``: the fewest
            rows behind any sum or mean it carried (``None``: the reply carries no counts
            the server can check, e.g. FeCA's centroids or DGC's centres).
        """
        keys = ("floats", "integers", "scalars", "raw-rows")

        def total(entries: list[dict[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {k: int(sum(e[k] for e in entries)) for k in keys}
            out["replies"] = len(entries)
            counts = [e["min-count"] for e in entries if e.get("min-count") is not None]
            out["min-count"] = min(counts) if counts else None
            return out

        # the App's data-source exchange runs before start() (which resets the run state)
        ledger = [*getattr(self, "pre_run_ledger", []), *self.ledger]
        by_client: dict[int, list[dict[str, Any]]] = {}  # one pass: rounds x clients entries
        for e in ledger:
            by_client.setdefault(e["client"], []).append(e)
        return {
            "secure-aggregation": self.secure_aggregation,
            "secure-totals": list(getattr(self, "secure_totals", [])),
            "differential-privacy": None,
            "epsilon": None,
            "delta": None,
            "privacy-threshold": getattr(self, "privacy_threshold", None),
            "raw-rows-setting": self.raw_rows_option(),
            "totals": total(ledger),
            "clients": {str(c): total(by_client[c]) for c in sorted(by_client)},
            "messages": ledger,
        }

    def raw_rows_option(self) -> str | None:
        """The setting of this run that sends raw rows, if any (``"init='paper'"``).

        The App stops before round 1 when a node refuses raw rows (node config
        ``allow-raw-rows``) and this is not ``None``; the clients refuse the step anyway.
        """
        return None
