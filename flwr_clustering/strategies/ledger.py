"""The privacy ledger: what every client sent (an object the strategy base holds).

:func:`ledger_entry` records one reply as the server received it (array entries by kind,
scalars, declared raw rows) and :func:`min_count` the fewest rows behind any sum or mean
it carried; :class:`Ledger` keeps them and totals them per client and per run
(``privacy.json``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import (
    Message,
)

from ..protocol import (
    DATA_SOURCE_PHASE,
    FEATURE_MOMENTS_PHASE,
    MOMENT_KEYS,
    SPLIT_CHECK_KEYS,
    SPLIT_IN_EVALUATION_PHASE,
    SPLIT_SCATTER_PHASE,
)


def ledger_entry(server_round: int, kind: str, client_id: int, msg: Message,
                 metrics: dict[str, Any]) -> dict[str, Any]:
    """What one reply carried, for the privacy ledger (see ``privacy_ledger``).

    A final evaluation's reply that also carried the split check's first sums is the
    phase ``evaluate+split-scatter``; a ``data-source`` reply that also carried the feature
    moments, ``data-source+feature-moments``.
    """
    arrays: list[np.ndarray] = []
    for name in ("arrays", "stats"):
        if name in msg.content:
            arrays += msg.content[name].to_numpy_ndarrays()
    if kind == "evaluate" and "stats" in msg.content and SPLIT_CHECK_KEYS[
            SPLIT_SCATTER_PHASE][0] in msg.content["stats"]:
        kind = SPLIT_IN_EVALUATION_PHASE
    if kind == DATA_SOURCE_PHASE and "stats" in msg.content and MOMENT_KEYS[
            0] in msg.content["stats"]:
        # a plain run that declares its features: the moments came with the columns
        # (strategies.features.moments_with_columns), no feature-moments reply
        kind = f"{DATA_SOURCE_PHASE}+{FEATURE_MOMENTS_PHASE}"
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


class Ledger:
    """The run's privacy ledger: one entry per reply the server received, and its report.

    An object with its own :meth:`state_dict` (the checkpoint saves it, as Opacus saves an
    accountant's): the exchange (:mod:`~flwr_clustering.strategies.exchange`) adds an entry
    for every reply, valid or not (:meth:`add`); a secure exchange
    (:mod:`flwr_clustering.secure.exchange`) one per contributor with what reached the
    server (its masked bytes) and one per exchange in :attr:`secure_totals`
    (:meth:`add_secure`). Iterating over the ledger gives its reply entries.

    Attributes
    ----------
    entries : list of dict
        One per reply (see :meth:`report`'s ``messages``).
    secure_totals : list of dict
        One per secure exchange: what the server learned (the federation's totals).
    before_run : list of dict
        Entries of exchanges that ran before :meth:`~flwr_clustering.strategies.base.
        ClusteringStrategy.start` (the App's data-source check); reported first.
    """

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.secure_totals: list[dict[str, Any]] = []
        self.before_run: list[dict[str, Any]] = []

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Add one reply's entry (:func:`ledger_entry`) and return it.

        Its ``min-count`` is filled in once the payload is parsed.
        """
        self.entries.append(entry)
        return entry

    def add_secure(self, server_round: int, phase: str, contributors: dict[int, int],
                   floats: int, error_bound: float) -> None:
        """Record a secure exchange: ``contributors`` is ``{client id: masked bytes}``."""
        for client, masked in contributors.items():
            self.entries.append({
                "round": int(server_round), "phase": f"{phase} (secure)",
                "client": int(client), "floats": 0, "integers": 0,
                "scalars": 0, "raw-rows": 0, "min-count": None,
                "masked-bytes": int(masked)})
        self.secure_totals.append({
            "round": int(server_round), "phase": phase, "clients": len(contributors),
            "floats": int(floats), "error-bound": error_bound})

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: ``ledger`` and ``secure_totals`` (the objects, not copies)."""
        return {"ledger": self.entries, "secure_totals": self.secure_totals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (missing keys: empty, as in older checkpoints)."""
        self.entries = [dict(e) for e in state.get("ledger", [])]
        self.secure_totals = [dict(e) for e in state.get("secure_totals", [])]

    def report(self, *, secure_aggregation: bool, privacy_threshold: Any,
               raw_rows_setting: str | None) -> dict[str, Any]:
        """What the clients sent in this run, as the server received it (``privacy.json``).

        Parameters
        ----------
        secure_aggregation : bool
            Whether the run summed its replies securely.
        privacy_threshold : int or None
            The run's minimum count.
        raw_rows_setting : str or None
            The setting of the run that sends raw rows
            (:meth:`~flwr_clustering.strategies.base.ClusteringStrategy.raw_rows_option`).

        Returns
        -------
        dict
            ``secure-aggregation`` (false: the server saw every reply on its own),
            ``differential-privacy`` (``None``: none; so ``epsilon`` and ``delta`` are
            ``None``, meaning unbounded), ``privacy-threshold``, ``raw-rows-setting``,
            ``totals`` over the run, ``clients`` (the same per client) and ``messages``:
            one entry per reply received (dropped ones too) with its round, phase, client,
            ``floats`` and ``integers`` (array entries), ``scalars``, ``raw-rows`` (declared
            by the client) and ``min-count``: the fewest rows behind any sum or mean it
            carried (``None``: the reply carries no counts the server can check, e.g.
            FeCA's centroids or DGC's centres).
        """
        keys = ("floats", "integers", "scalars", "raw-rows")

        def total(entries: list[dict[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {k: int(sum(e[k] for e in entries)) for k in keys}
            out["replies"] = len(entries)
            counts = [e["min-count"] for e in entries if e.get("min-count") is not None]
            out["min-count"] = min(counts) if counts else None
            return out

        ledger = [*self.before_run, *self.entries]
        by_client: dict[int, list[dict[str, Any]]] = {}  # one pass: rounds x clients entries
        for e in ledger:
            by_client.setdefault(e["client"], []).append(e)
        return {
            "secure-aggregation": bool(secure_aggregation),
            "secure-totals": list(self.secure_totals),
            "differential-privacy": None,
            "epsilon": None,
            "delta": None,
            "privacy-threshold": privacy_threshold,
            "raw-rows-setting": raw_rows_setting,
            "totals": total(ledger),
            "clients": {str(c): total(by_client[c]) for c in sorted(by_client)},
            "messages": ledger,
        }
