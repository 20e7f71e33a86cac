"""One reply contract per phase: what a client's reply may hold, checked before any use.

A client's reply is untrusted input to the server. :func:`check_contract` checks it against
its phase's :class:`Contract` before anything of it is decoded, logged, counted in the
ledger or used (:meth:`~flwr_clustering.strategies.exchange.Exchange.collect` calls it
first): which records the reply may carry, the keys, shapes and dtypes of its arrays (as
functions of the federation's ``d``, the model's ``k`` and what the server sent), the
length of every name and level, the number of columns and levels, the depth of its JSON,
its total bytes, and the statistics' own consistency (counts whole, non-negative and at
most the rows the client declared; a sum of squares at least ``sum**2 / count``; finite
values; ``min <= sum / count <= max``). A reply that breaks it raises
:class:`ContractBreach`, whose message names the rule, never the reply's content (no name,
no value): the reply is dropped, named with that rule, and the run goes on without it.

The contracts are declared once, in :data:`CONTRACTS` (the library's phases); any other
phase (an algorithm's own train or query phases, whose parsers check their arrays' shapes)
gets :data:`TRAIN_CONTRACT`: scalar metrics and a size bound from ``k``, ``d``, the rows
and what the server sent. docs/protocol.md ("Reply contracts") has the table.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Message

from ..data.schema import KINDS
from ..evaluation import check_evaluation_stats
from ..protocol import (
    CANDIDATE_ERRORS_RECORD,
    CATEGORIES_PHASE,
    COLUMNS_RECORD,
    DATA_SOURCE_PHASE,
    FEATURE_MOMENTS_PHASE,
    K_MOMENTS_PHASE,
    K_SPREADS_PHASE,
    MAX_REASON_CHARS,
    MOMENT_KEYS,
    MOMENTS_TRANSFORM_KEY,
    REFINE_PHASE,
    SPLIT_CHECK_KEYS,
    SPLIT_HISTOGRAM_PHASE,
    SPLIT_IN_EVALUATION_KEY,
    SPLIT_SCATTER_PHASE,
    SPLIT_WITHHELD_KEY,
    short_reason,
)

__all__ = ["CONTRACTS", "MAX_COLUMNS", "MAX_JSON_DEPTH", "MAX_LEVELS", "MAX_NAME_CHARS",
           "MAX_REASON_CHARS", "TRAIN_CONTRACT", "Bounds", "Contract", "ContractBreach",
           "Sent", "check_contract", "contract_of", "json_depth", "short_reason"]

#: The longest column name, category level or metric key a reply may carry (characters).
MAX_NAME_CHARS = 256
#: The most columns a ``data-source`` reply may describe.
MAX_COLUMNS = 10_000
#: The most levels a ``categories`` reply may list per column.
MAX_LEVELS = 10_000
#: The deepest nesting of a reply's JSON (``categories``: ``{column: {level: count}}``).
MAX_JSON_DEPTH = 2
#: The most scalar metrics a reply may carry.
MAX_METRICS = 256
#: Bytes every reply may spend on its keys and scalars, beyond its phase's arrays.
BASE_BYTES = 64 * 1024
#: The same for an algorithm's own phases (their metrics and small arrays vary).
TRAIN_BASE_BYTES = 1 << 20
#: Relative tolerance of the consistency rules of float sums (``sumsq >= sum**2 / count``,
#: ``min * count <= sum <= max * count``): rounding of honest sums stays far below it.
RTOL = 1e-6


class ContractBreach(ValueError):
    """A reply broke its phase's contract; the message names the rule, never the content."""


@dataclass(frozen=True)
class Sent:
    """What the server sent the node: the message's config, its arrays' shapes, its bytes."""

    config: Mapping[str, Any] = field(default_factory=dict)
    shapes: tuple[tuple[int, ...], ...] = ()
    nbytes: int = 0

    @classmethod
    def of(cls, msg: Message | None) -> Sent:
        """From the server's message (``None``: nothing known)."""
        if msg is None:
            return cls()
        content = msg.content
        config = dict(content["config"]) if "config" in content else {}
        shapes: tuple[tuple[int, ...], ...] = ()
        nbytes = 0
        if "arrays" in content:
            arrays = list(content["arrays"].values())
            shapes = tuple(tuple(int(s) for s in a.shape) for a in arrays)
            nbytes = sum(len(a.data) for a in arrays)
        return cls(config, shapes, nbytes)


@dataclass(frozen=True)
class Bounds:
    """What a reply is checked against.

    Attributes
    ----------
    d : int or None
        The federation's features (``None``: not agreed yet).
    k : int or None
        The most clusters of the model (``None``: not known).
    rows : int or None
        The rows the client declared before (its ``data-source`` reply; ``None``: not
        declared, its reply's own ``num-examples`` bounds its counts).
    sent : Sent
        What the server sent the node in this exchange.
    model : tuple of int or None
        ``(k, d)`` of the server's model (its centroids), which evaluation statistics
        describe (``None``: none yet).
    """

    d: int | None = None
    k: int | None = None
    rows: int | None = None
    sent: Sent = field(default_factory=Sent)
    model: tuple[int, int] | None = None


@dataclass(frozen=True)
class Contract:
    """What a phase's reply may hold.

    Attributes
    ----------
    phase : str
        The phase (``"train"``: any phase without a contract of its own).
    records : frozenset of str
        The records a reply may carry besides ``metrics`` (always required).
    max_bytes : callable
        ``max_bytes(bounds, rows) -> int``: the most bytes the reply may carry (arrays'
        data, scalars, strings), from the phase, ``k``, ``d``, the rows and what was sent.
    check : callable
        ``check(reply, bounds, rows)``: keys, shapes, sizes and the statistics'
        consistency; raises :class:`ContractBreach` naming the rule.
    """

    phase: str
    records: frozenset[str]
    max_bytes: Callable[[Bounds, int], int]
    check: Callable[[Any, Bounds, int], None]


# ----------------------------------------------------------------------- helpers


def _breach(rule: str) -> ContractBreach:
    return ContractBreach(rule)


def _record_bytes(record: Any) -> int:
    return int(record.count_bytes())


def _whole(a: np.ndarray) -> bool:
    return bool(np.array_equal(a, np.rint(a)))


def _array(record: Any, key: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """``record[key]`` as float64 after checking its shape and dtype (no content named)."""
    if key not in record:
        raise _breach(f"{what}: {key} is missing")
    a = record[key]
    got = tuple(int(s) for s in a.shape)
    if got != tuple(shape):
        raise _breach(f"{what}: {key} has shape {got}, the contract {tuple(shape)}")
    if np.dtype(a.dtype).kind not in "fiu":
        raise _breach(f"{what}: {key} is not numeric")
    out = np.asarray(_numpy(a, what, key), dtype=np.float64)
    if out.shape != tuple(shape):
        raise _breach(f"{what}: {key}'s data do not match its declared shape")
    if not np.isfinite(out).all():
        raise _breach(f"{what}: {key} holds a value that is not finite")
    return out


def _numpy(a: Any, what: str, key: str) -> np.ndarray:
    """An ``Array``'s values; data that do not decode break the contract."""
    try:
        return a.numpy()
    except Exception:  # noqa: BLE001 - any decoding failure of hostile bytes
        raise _breach(f"{what}: {key} is not a readable array") from None


def _counts(c: np.ndarray, rows: int, what: str, key: str, *, total: bool = True) -> None:
    """Counts whole, non-negative and (summed, or each with ``total=False``) at most rows."""
    if (c < 0).any() or not _whole(c):
        raise _breach(f"{what}: {key} must be whole and non-negative")
    if total and float(c.sum()) > rows:
        raise _breach(f"{what}: {key} sum to more than the {rows} rows the client declared")
    if not total and float(c.max(initial=0.0)) > rows:
        raise _breach(f"{what}: {key} holds a count above the {rows} rows the client "
                      "declared")


def _sumsq_at_least(sumsq: np.ndarray, sums: np.ndarray, count: np.ndarray, what: str,
                    key: str) -> None:
    """``sumsq >= sum**2 / count`` per entry (Cauchy-Schwarz), and zero without rows."""
    if (sumsq < 0).any():
        raise _breach(f"{what}: {key} is negative")
    empty = count == 0
    if (np.abs(sums[empty]) > 0).any() or (np.abs(sumsq[empty]) > 0).any():
        raise _breach(f"{what}: a sum without rows (count 0) is not 0")
    with np.errstate(all="ignore"):
        floor = np.where(empty, 0.0, sums * sums / np.where(empty, 1.0, count))
    if (sumsq < floor * (1 - RTOL) - 1e-300).any():
        raise _breach(f"{what}: {key} is below sum**2 / count (no rows have such sums)")


def _metrics(metrics: Mapping[str, Any], what: str) -> int:
    """Scalar metrics with short keys; ``num-examples`` a non-negative integer. Its value."""
    if len(metrics) > MAX_METRICS:
        raise _breach(f"{what}: more than {MAX_METRICS} metrics")
    for key, value in metrics.items():
        if len(str(key)) > MAX_NAME_CHARS:
            raise _breach(f"{what}: a metric key is longer than {MAX_NAME_CHARS} characters")
        if isinstance(value, list):
            if not all(isinstance(v, int | float) and not isinstance(v, bool)
                       for v in value):
                raise _breach(f"{what}: a metric list holds a value that is not a number")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise _breach(f"{what}: a metric is not a number")
    rows = metrics.get("num-examples", 0)
    if isinstance(rows, list) or not float(rows).is_integer() or not 0 <= rows < 2**53:
        raise _breach(f"{what}: num-examples must be a non-negative integer")
    cid = metrics.get("client-id", 0)
    if isinstance(cid, list) or not float(cid).is_integer():
        raise _breach(f"{what}: client-id must be an integer")
    return int(rows)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in JSON ``text`` (strings left out), in C speed.

    Measured before ``json.loads``, whose recursion a deeply nested text exhausts.
    """
    skeleton = _JSON_STRING.sub("", text).encode("utf-8", "replace")
    b = np.frombuffer(skeleton, dtype=np.uint8)
    step = (np.isin(b, (ord("["), ord("{"))).astype(np.int64)
            - np.isin(b, (ord("]"), ord("}"))).astype(np.int64))
    return int(np.cumsum(step).max(initial=0))


def _json(record: Any, key: str, depth: int, max_chars: int, what: str) -> Any:
    """``record[key]`` parsed as JSON after bounding its length and depth."""
    if key not in record:
        raise _breach(f"{what}: {key} is missing")
    text = record[key]
    if not isinstance(text, str):
        raise _breach(f"{what}: {key} is not a JSON string")
    if len(text) > max_chars:
        raise _breach(f"{what}: {key} is longer than {max_chars} characters")
    if json_depth(text) > depth:
        raise _breach(f"{what}: {key} is nested deeper than {depth} levels")
    try:
        return json.loads(text)
    except RecursionError:
        raise _breach(f"{what}: {key} is nested too deep") from None
    except ValueError:
        raise _breach(f"{what}: {key} is not valid JSON") from None


def _name(value: Any, what: str, noun: str) -> str:
    if not isinstance(value, str):
        raise _breach(f"{what}: a {noun} is not a string")
    if len(value) > MAX_NAME_CHARS:
        raise _breach(f"{what}: a {noun} is longer than {MAX_NAME_CHARS} characters")
    return value


def _asked_columns(bounds: Bounds) -> list[str]:
    """The categorical columns the server asked about (its own config: trusted)."""
    try:
        return [str(c) for c in json.loads(str(bounds.sent.config.get("categorical-columns",
                                                                      "[]")))]
    except ValueError:
        return []


def _d(bounds: Bounds) -> int:
    return int(bounds.d) if bounds.d is not None else 0


def _kd_from_sent(bounds: Bounds, what: str) -> tuple[int, int]:
    """``(k, d)`` of the model the server sent (its first array)."""
    if not bounds.sent.shapes or len(bounds.sent.shapes[0]) != 2:
        raise _breach(f"{what}: no model was sent to check the reply against")
    k, d = bounds.sent.shapes[0]
    return int(k), int(d)


def _no_other_records(reply: Any, allowed: tuple[str, ...], what: str) -> None:
    for name in ("arrays", "stats", COLUMNS_RECORD):
        if name in reply and name not in allowed:
            raise _breach(f"{what}: a {name} record it should not carry")


# ----------------------------------------------------------------------- the phases


def _asked_moments(bounds: Bounds) -> int | None:
    """The features a ``data-source`` query asked the moments in (``None``: not asked)."""
    text = bounds.sent.config.get(MOMENTS_TRANSFORM_KEY)
    return None if text is None else len(json.loads(str(text))["features"])


def _data_source(reply: Any, bounds: Bounds, rows: int) -> None:
    what = DATA_SOURCE_PHASE
    if "stats" in reply:  # the feature moments, only where the query asked for them
        d = _asked_moments(bounds)
        if d is None:  # (the other records the phase lacks are refused before)
            raise _breach(f"{what}: 1 record(s) the phase does not have")
        if COLUMNS_RECORD not in reply:
            raise _breach(f"{what}: the feature moments without the columns record")
        _moment_stats(reply["stats"], dataclasses.replace(bounds, d=d), rows, what)
    if COLUMNS_RECORD not in reply:
        return
    rec = reply[COLUMNS_RECORD]
    allowed = {"names", "kinds", "unique", "rows", "magnitude"}
    if set(rec.keys()) - allowed or not {"names", "kinds", "unique"} <= set(rec.keys()):
        raise _breach(f"{what}: the columns record's keys are not names, kinds, unique, rows "
                      "(and magnitude)")
    names, kinds, unique = rec["names"], rec["kinds"], rec["unique"]
    for value in (names, kinds, unique):
        if not isinstance(value, list):
            raise _breach(f"{what}: names, kinds and unique must be lists")
    if len(names) > MAX_COLUMNS:
        raise _breach(f"{what}: more than {MAX_COLUMNS} columns")
    if not len(names) == len(kinds) == len(unique):
        raise _breach(f"{what}: names, kinds and unique differ in length")
    for n in names:
        _name(n, what, "column name")
    if any(k not in KINDS for k in kinds):
        raise _breach(f"{what}: a column kind is not one of {', '.join(KINDS)}")
    if any(u not in (0, 1) for u in unique):
        raise _breach(f"{what}: unique must be 0 or 1")
    if "rows" in rec and rec["rows"] != rows:
        raise _breach(f"{what}: the columns record's rows differ from num-examples")
    if "magnitude" in rec:
        mag = rec["magnitude"]
        if not isinstance(mag, list) or len(mag) != len(names) or any(
                isinstance(m, bool) or not isinstance(m, int) or abs(m) > 4096 for m in mag):
            raise _breach(f"{what}: magnitude must be one power of two per column")


def _data_source_bytes(bounds: Bounds, rows: int) -> int:
    d = _asked_moments(bounds)
    return (BASE_BYTES + MAX_COLUMNS * (4 * MAX_NAME_CHARS + 64)
            + (0 if d is None else 8 * (5 * d + 2) + 6 * 256))


def _categories(reply: Any, bounds: Bounds, rows: int) -> None:
    what = CATEGORIES_PHASE
    _no_other_records(reply, (COLUMNS_RECORD,), what)
    if COLUMNS_RECORD not in reply:
        raise _breach(f"{what}: no columns record")
    rec = reply[COLUMNS_RECORD]
    if set(rec.keys()) - {"categories", "continuous"}:
        raise _breach(f"{what}: the columns record's keys are not categories and continuous")
    asked = _asked_columns(bounds)
    n = max(len(asked), 1)
    counts = _json(rec, "categories", MAX_JSON_DEPTH, _categories_chars(n), what)
    if not isinstance(counts, dict) or (not asked and len(counts) > n):
        raise _breach(f"{what}: categories must map each column asked to its levels")
    for column, levels in counts.items():
        if asked and column not in asked:
            raise _breach(f"{what}: categories names a column the server did not ask about")
        if not isinstance(levels, dict):
            raise _breach(f"{what}: a column's levels are not a mapping to counts")
        if len(levels) > MAX_LEVELS:
            raise _breach(f"{what}: a column has more than {MAX_LEVELS} levels")
        total = 0
        for level, count in levels.items():
            _name(level, what, "category level")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise _breach(f"{what}: a level's count is not a non-negative integer")
            total += count
        if total > rows:
            raise _breach(f"{what}: a column's counts sum to more than the {rows} rows the "
                          "client declared")
    if "continuous" in rec:
        flagged = _json(rec, "continuous", 1, n * (MAX_NAME_CHARS + 8) + 16, what)
        if not isinstance(flagged, list) or len(flagged) > n:
            raise _breach(f"{what}: continuous must list columns asked")
        for c in flagged:
            _name(c, what, "column name")
            if asked and c not in asked:
                raise _breach(f"{what}: continuous names a column the server did not ask "
                              "about")


def _categories_chars(columns: int) -> int:
    return 64 + columns * (MAX_NAME_CHARS + 8 + MAX_LEVELS * (MAX_NAME_CHARS + 32))


def _categories_bytes(bounds: Bounds, rows: int) -> int:
    n = max(len(_asked_columns(bounds)), 1)
    return BASE_BYTES + _categories_chars(n) + n * (MAX_NAME_CHARS + 8)


def _feature_moments(reply: Any, bounds: Bounds, rows: int) -> None:
    what = FEATURE_MOMENTS_PHASE
    _no_other_records(reply, ("stats",), what)
    if "stats" not in reply:
        raise _breach(f"{what}: no stats record")
    _moment_stats(reply["stats"], bounds, rows, what)


def _moment_stats(stats: Any, bounds: Bounds, rows: int, what: str) -> None:
    """The ``feature-moments`` statistics (that phase's, or a ``data-source`` reply's)."""
    minmax = bounds.sent.config.get("scaling") == "minmax"
    keys = set(MOMENT_KEYS if minmax else MOMENT_KEYS[:4])
    if set(stats.keys()) != keys:
        raise _breach(f"{what}: its statistics are not {', '.join(sorted(keys))}")
    d = _d(bounds) if bounds.d is not None else int(stats[MOMENT_KEYS[0]].shape[0])
    count, total, sumsq = (_array(stats, k, (d,), what) for k in MOMENT_KEYS[:3])
    read, incomplete = _array(stats, MOMENT_KEYS[3], (2,), what)
    if not (float(read).is_integer() and float(incomplete).is_integer()
            and 0 <= incomplete <= read):
        raise _breach(f"{what}: moment-rows must be the rows read and the rows with a "
                      "missing cell, whole and in that order")
    if read != rows:
        raise _breach(f"{what}: moment-rows' rows read differ from the rows the client "
                      "declared (in data-source, else its num-examples)")
    _counts(count, int(read), what, "moment-count", total=False)
    _sumsq_at_least(sumsq, total, count, what, "moment-sumsq")
    if minmax:
        lo = np.asarray(_numpy(stats["moment-min"], what, "moment-min"), dtype=np.float64)
        hi = np.asarray(_numpy(stats["moment-max"], what, "moment-max"), dtype=np.float64)
        if lo.shape != (d,) or hi.shape != (d,):
            raise _breach(f"{what}: moment-min and moment-max must have {d} values")
        seen = count > 0
        if not (np.isfinite(lo[seen]).all() and np.isfinite(hi[seen]).all()):
            raise _breach(f"{what}: a feature's min or max is not finite")
        if (lo[seen] > hi[seen]).any():
            raise _breach(f"{what}: a feature's min is above its max")
        slack = RTOL * np.maximum(np.abs(total), np.abs(np.maximum(np.abs(lo), np.abs(hi))
                                                        * count)) + 1e-300
        if ((lo * count > total + slack) | (hi * count < total - slack))[seen].any():
            raise _breach(f"{what}: a feature's sum lies outside min * count .. max * count")


def _feature_moments_bytes(bounds: Bounds, rows: int) -> int:
    d = _d(bounds) or MAX_COLUMNS * (MAX_LEVELS + 1)
    return BASE_BYTES + 8 * (5 * d + 2) + 6 * 256


def _k_moments(reply: Any, bounds: Bounds, rows: int) -> None:
    what = K_MOMENTS_PHASE
    ks, d = _candidates(bounds, what)
    arrays = _list_of(reply, "arrays", what, [s for k in ks for s in
                                               ((k,), (k, d), (k,), (k,), (1,))])
    for c in range(len(ks)):
        counts, sums, sse, sil, withheld = arrays[5 * c:5 * c + 5]
        _counts(counts, rows, what, "counts")
        if withheld[0] < 0 or not _whole(withheld) or counts.sum() + withheld[0] > rows:
            raise _breach(f"{what}: counts and withheld rows sum to more than the {rows} "
                          "rows the client declared")
        if (sse < 0).any():
            raise _breach(f"{what}: a negative SSE")
        if (np.abs(sil) > counts * (1 + RTOL)).any():
            raise _breach(f"{what}: a silhouette sum beyond its cluster's count (each row's "
                          "silhouette lies in [-1, 1])")
        if (np.abs(sums[counts == 0]) > 0).any():
            raise _breach(f"{what}: a sum without rows (count 0) is not 0")


def _k_spreads(reply: Any, bounds: Bounds, rows: int) -> None:
    what = K_SPREADS_PHASE
    ks, _ = _candidates(bounds, what)
    for s in _list_of(reply, "arrays", what, [(k,) for k in ks]):
        if (s < 0).any():
            raise _breach(f"{what}: a negative sum of distances")


def _candidates(bounds: Bounds, what: str) -> tuple[list[int], int]:
    """The candidates' ``k`` and ``d`` from the centres the server sent."""
    try:
        count = int(bounds.sent.config.get("candidate-count", len(bounds.sent.shapes)))
    except (TypeError, ValueError):
        count = len(bounds.sent.shapes)
    shapes = bounds.sent.shapes[:count]
    if not shapes or any(len(s) != 2 for s in shapes):
        raise _breach(f"{what}: no candidates were sent to check the reply against")
    return [int(s[0]) for s in shapes], int(shapes[0][1])


def _list_of(reply: Any, name: str, what: str, shapes: list[tuple[int, ...]]
             ) -> list[np.ndarray]:
    _no_other_records(reply, (name,), what)
    if name not in reply:
        raise _breach(f"{what}: no {name} record")
    record = reply[name]
    if len(record) != len(shapes):
        raise _breach(f"{what}: {len(record)} arrays, the contract {len(shapes)}")
    return [_array(record, key, shape, what) for key, shape in zip(record.keys(), shapes,
                                                                     strict=True)]


def _sent_model_bytes(bounds: Bounds, rows: int) -> int:
    """A scoring or split reply: a few arrays per cluster of what was sent."""
    k = max([s[0] for s in bounds.sent.shapes if s] or [1])
    d = max([s[-1] for s in bounds.sent.shapes if s] or [1])
    count = max(len(bounds.sent.shapes), 1)
    return BASE_BYTES + 8 * count * 5 * (k + 2) * (d + 2) * (d + 2)


def _split_scatter(reply: Any, bounds: Bounds, rows: int) -> None:
    what = SPLIT_SCATTER_PHASE
    _no_other_records(reply, ("stats",), what)
    _split_scatter_stats(_stats(reply, what, SPLIT_CHECK_KEYS[SPLIT_SCATTER_PHASE]), bounds,
                         rows, what)


def _split_scatter_stats(stats: Any, bounds: Bounds, rows: int, what: str) -> None:
    """The ``split-scatter`` sums of a reply (its own phase's, or the final evaluation's)."""
    k, d = _kd_from_sent(bounds, what)
    counts = _array(stats, "split-counts", (k,), what)
    sums = _array(stats, "split-sums", (k, d), what)
    outer = _array(stats, "split-scatter", (k, d, d), what)
    _counts(counts, rows, what, "split-counts")
    diag = np.diagonal(outer, axis1=1, axis2=2)
    _sumsq_at_least(diag, sums, counts[:, None] * np.ones((1, d)), what,
                    "split-scatter's diagonal")


def _split_histograms(reply: Any, bounds: Bounds, rows: int) -> None:
    what = SPLIT_HISTOGRAM_PHASE
    _no_other_records(reply, ("stats",), what)
    k, _ = _kd_from_sent(bounds, what)
    if len(bounds.sent.shapes) < 4 or len(bounds.sent.shapes[3]) != 2:
        raise _breach(f"{what}: no bins were sent to check the reply against")
    bins = int(bounds.sent.shapes[3][1]) - 1
    stats = _stats(reply, what, ("split-histograms",))
    hist = _array(stats, "split-histograms", (k, bins), what)
    _counts(hist, rows, what, "split-histograms")


def _refine(reply: Any, bounds: Bounds, rows: int) -> None:
    what = REFINE_PHASE
    _no_other_records(reply, ("stats",), what)
    k, d = _kd_from_sent(bounds, what)
    stats = _stats(reply, what, ("refine-sums", "refine-counts", "refine-sse"))
    sums = _array(stats, "refine-sums", (k, d), what)
    counts = _array(stats, "refine-counts", (k,), what)
    sse = _array(stats, "refine-sse", (1,), what)
    _counts(counts, rows, what, "refine-counts")
    if sse[0] < 0:
        raise _breach(f"{what}: a negative SSE")
    if (np.abs(sums[counts == 0]) > 0).any():
        raise _breach(f"{what}: a sum without rows (count 0) is not 0")


def _stats(reply: Any, what: str, keys: tuple[str, ...]) -> Any:
    if "stats" not in reply:
        raise _breach(f"{what}: no stats record")
    stats = reply["stats"]
    if set(stats.keys()) != set(keys):
        raise _breach(f"{what}: its statistics are not {', '.join(keys)}")
    return stats


def _evaluate(reply: Any, bounds: Bounds, rows: int) -> None:
    what = "evaluate"
    _no_other_records(reply, ("stats",), what)
    stats: dict[str, Any] = dict(reply["metrics"])
    split_keys = SPLIT_CHECK_KEYS[SPLIT_SCATTER_PHASE]
    asked = bool(bounds.sent.config.get(SPLIT_IN_EVALUATION_KEY))
    if "stats" in reply:
        if asked and any(key in reply["stats"] for key in split_keys):
            # the split check's sums in the final evaluation: the split-scatter rules
            _split_scatter_stats(reply["stats"], bounds, rows, f"{what} ({SPLIT_SCATTER_PHASE})")
        for key, a in reply["stats"].items():
            if asked and key in split_keys:
                continue
            if len(str(key)) > MAX_NAME_CHARS or np.dtype(a.dtype).kind not in "fiub":
                raise _breach(f"{what}: a statistic with a long key or not numeric")
            stats[key] = _numpy(a, what, "a statistic")
    stats.pop(SPLIT_WITHHELD_KEY, None)
    # as the strategy's own check: the model's clusters and features
    model = bounds.model or ()
    k_max = max([int(bounds.k or 0)] + ([model[0]] if model else [])) or None
    try:
        check_evaluation_stats(stats, k_max=k_max, n_features=model[1] if model else None)
    except (ValueError, TypeError, IndexError) as ex:
        # the rule's own words name the statistic and the rule; cut, as any reason
        raise _breach(f"{what}: {short_reason(_without_values(str(ex)), 160)}") from None


_GOT = re.compile(r",? got .*$")
_NUMBER = re.compile(r"(?<![\w-])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _without_values(text: str) -> str:
    """A rule's message without the values it quotes (``got 1e9``, ``sum to 4500``)."""
    return _NUMBER.sub("<n>", _GOT.sub("", text))


def _evaluate_bytes(bounds: Bounds, rows: int) -> int:
    k = max(int(bounds.k or 0), bounds.model[0] if bounds.model else 0, 1)
    d = max(int(bounds.d or 0), bounds.model[1] if bounds.model else 0, 1)
    split = (_sent_model_bytes(bounds, rows) if bounds.sent.config.get(SPLIT_IN_EVALUATION_KEY)
             else 0)  # the split check's sums, asked in the final evaluation
    return split + BASE_BYTES + 2 * bounds.sent.nbytes + 8 * (8 * (k + 2) * (d + 2)
                                                              + 4 * (rows + 2) * (k + 2))


def _train(reply: Any, bounds: Bounds, rows: int) -> None:
    """An algorithm's own phase: its parser checks the arrays; here the records' names."""


def _train_bytes(bounds: Bounds, rows: int) -> int:
    k = max([int(bounds.k or 0)] + [s[0] for s in bounds.sent.shapes if len(s) == 2] + [1])
    d = max([int(bounds.d or 0)] + [s[-1] for s in bounds.sent.shapes if len(s) == 2] + [1])
    return (TRAIN_BASE_BYTES + 2 * bounds.sent.nbytes
            + 8 * (4 * (k + 2) * (d + 2) + 2 * (rows + 2) * (d + 2)))


def _plain(records: tuple[str, ...]) -> frozenset[str]:
    return frozenset(records)


#: The library's phases' contracts, by phase.
CONTRACTS: dict[str, Contract] = {
    DATA_SOURCE_PHASE: Contract(DATA_SOURCE_PHASE, _plain((COLUMNS_RECORD, "stats")),
                                _data_source_bytes, _data_source),
    CATEGORIES_PHASE: Contract(CATEGORIES_PHASE, _plain((COLUMNS_RECORD,)),
                               _categories_bytes, _categories),
    FEATURE_MOMENTS_PHASE: Contract(FEATURE_MOMENTS_PHASE, _plain(("stats",)),
                                    _feature_moments_bytes, _feature_moments),
    K_MOMENTS_PHASE: Contract(K_MOMENTS_PHASE, _plain(("arrays",)), _sent_model_bytes,
                              _k_moments),
    K_SPREADS_PHASE: Contract(K_SPREADS_PHASE, _plain(("arrays",)), _sent_model_bytes,
                              _k_spreads),
    SPLIT_SCATTER_PHASE: Contract(SPLIT_SCATTER_PHASE, _plain(("stats",)), _sent_model_bytes,
                                  _split_scatter),
    SPLIT_HISTOGRAM_PHASE: Contract(SPLIT_HISTOGRAM_PHASE, _plain(("stats",)),
                                    _sent_model_bytes, _split_histograms),
    REFINE_PHASE: Contract(REFINE_PHASE, _plain(("stats",)), _sent_model_bytes, _refine),
    "evaluate": Contract("evaluate", _plain(("stats",)), _evaluate_bytes, _evaluate),
}

#: Any other phase (an algorithm's train and query phases): scalar metrics, the records
#: a reply may carry and a size bound; the algorithm's parser checks its arrays' shapes.
TRAIN_CONTRACT = Contract("train", _plain(("arrays", "stats", COLUMNS_RECORD,
                                           CANDIDATE_ERRORS_RECORD)), _train_bytes, _train)


def contract_of(phase: str) -> Contract:
    """The contract of ``phase`` (:data:`TRAIN_CONTRACT` for an algorithm's own phase)."""
    return CONTRACTS.get(phase, TRAIN_CONTRACT)


def check_contract(phase: str, content: Any, bounds: Bounds) -> int:
    """Check a reply's content against its phase's contract, before any use of it.

    Parameters
    ----------
    phase : str
        The phase (``"train"``, ``"evaluate"`` or a library phase).
    content : flwr.app.RecordDict
        The reply's records.
    bounds : Bounds
        The federation's ``d``, the model's ``k``, the client's declared rows and what
        the server sent.

    Returns
    -------
    int
        The reply's ``num-examples``.

    Raises
    ------
    ContractBreach
        Naming the rule broken (never the reply's content).
    """
    contract = contract_of(phase)
    what = contract.phase
    if "metrics" not in content:
        raise _breach(f"{what}: no metrics record")
    extra = set(content.keys()) - contract.records - {"metrics"}
    if extra:
        raise _breach(f"{what}: {len(extra)} record(s) the phase does not have")
    rows_here = _metrics(content["metrics"], what)
    rows = rows_here if bounds.rows is None or phase == "evaluate" else int(bounds.rows)
    if contract is TRAIN_CONTRACT and bounds.d is None:
        # before the federation's d is known (the first round of a run without a features
        # step): the reply's own widest row, so that its rows stay bounded by the rows
        bounds = dataclasses.replace(bounds, d=max(
            [int(a.shape[-1]) for name in ("arrays", "stats") if name in content
             for a in content[name].values() if len(a.shape) >= 2] or [1]))
    size = sum(_record_bytes(content[name]) for name in content.keys())
    limit = contract.max_bytes(bounds, max(rows, rows_here))
    if size > limit:
        raise _breach(f"{what}: {size} bytes, more than the phase's bound of {limit}")
    try:
        contract.check(content, bounds, rows)
    except ContractBreach:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as ex:
        # a record of another form than the phase's (a number where a list belongs, ...)
        raise _breach(f"{what}: a malformed record ({type(ex).__name__})") from None
    return rows_here
