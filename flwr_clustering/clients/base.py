"""Client-side plumbing shared by every algorithm.

* :class:`ClusteringClient` is the base :class:`flwr.client.NumPyClient` of all our
  clients: it holds and validates the local data and implements ``evaluate`` (local
  metric statistics of the received centroids, in additive form).
* :func:`handle_train`, :func:`handle_query` and :func:`handle_evaluate` answer one
  message with a NumPyClient, for a user's own ``@app.train()`` / ``@app.query()`` /
  ``@app.evaluate()`` handlers: ``ArrayRecord`` <-> list of ndarrays, ``ConfigRecord`` <->
  dict, ``MetricRecord`` out (array-valued statistics travel in an ``ArrayRecord`` named
  ``"stats"``). A client exception becomes an error reply whose reason names the client,
  so the server can log why it dropped it.
* :func:`client_app` builds a whole Message-API :class:`flwr.clientapp.ClientApp` from a
  ``client_fn``, with these three handlers.

The final message of a run (an ``EVALUATE`` message with ``final=True``) carries the final
model: :func:`handle_evaluate` has the client label its own rows
(:meth:`ClusteringClient.local_labels`) and keeps the labels on the node, in
``context.state`` (:func:`stored_labels`) and, when the node config has ``labels-path``,
in that file (``.npy``, else one integer per line). The labels never leave the node.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.client import NumPyClient

from ..algorithms.cluster_split import (
    AxisBins,
    client_histograms,
    client_scatter,
    refine_stats,
    withholds,
)
from ..algorithms.lloyd import check_data, check_features, nearest_labels
from ..data.schema import (
    DROP_LEAVES_NO_ROW,
    FeatureTable,
    FeatureTransform,
    SchemaError,
    SiteDataError,
    category_counts,
    column_moments,
    continuous_columns,
    describe_columns,
    site_unit_powers,
    unit_factor,
)
from ..evaluation import local_evaluation_stats
from ..protocol import (  # the message protocol's names, re-exported here
    CANDIDATE_ERRORS_RECORD,
    CANDIDATES_KEY,
    CATEGORIES_PHASE,
    CLIENT_ERROR_CODE,
    COLUMNS_RECORD,
    DATA_SOURCE_PHASE,
    DP_MAX_EPSILON_KEY,
    FEATURE_MOMENTS_PHASE,
    FEATURES_KEY,
    K_MOMENTS_PHASE,
    K_SPREADS_PHASE,
    LABELS_PATH_KEY,
    MOMENT_KEYS,
    RAW_ROWS_KEY,
    SECURE_EVALUATE_PHASE,
    SPLIT_CHECK_KEYS,
    SPLIT_HISTOGRAM_PHASE,
    SPLIT_SCATTER_PHASE,
    UNIT_CHECK_PHASE,
    client_id_of,
    split_metrics,
)
from .candidates import fit_candidates, score_arrays
from .errors import error_reasons
from .legacy import legacy_client

__all__ = [
    "CATEGORIES_PHASE",
    "COLUMNS_RECORD",
    "DATA_SOURCE_PHASE",
    "FEATURES_KEY",
    "FEATURE_MOMENTS_PHASE",
    "LABELS_PATH_KEY",
    "MOMENT_KEYS",
    "DP_MAX_EPSILON_KEY",
    "RAW_ROWS_KEY",
    "ClusteringClient",
    "client_id_of",
    "DECLARED_ROWS_KEY",
    "check_declared_rows",
    "data_hash",
    "declare_rows",
    "columns_record",
    "data_source_metrics",
    "feature_moments_arrays",
    "handle_evaluate",
    "handle_query",
    "handle_train",
    "pack_reply",
    "stored_labels",
]

logger = logging.getLogger(__name__)

#: Name of the ``context.state`` record that keeps a node's labels.
_STATE_KEY = "flwr-clustering.labels"



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


def data_source_metrics(client: Any) -> tuple[int, dict[str, int]]:
    """The reply to the ``data-source`` phase: ``(num-examples, metrics)``.

    ``data-local`` is 1 for rows read from a local file, 0 for a partition of a built-in
    dataset (then ``partition-id`` and ``num-partitions``), -1 when the client does not say
    (its ``data_source`` attribute, set by the App's ``client_fn``, is missing);
    ``num-features`` and ``data-hash`` (:func:`data_hash`) describe the client's rows.
    """
    source = getattr(client, "data_source", None)
    metrics: dict[str, int] = {"data-local": -1 if source is None
                               else int(bool(source.get("local"))),
                               "allow-raw-rows": int(bool(getattr(client, "allow_raw_rows",
                                                                  True)))}
    for key in ("partition-id", "num-partitions"):
        if source is not None and source.get(key) is not None:
            metrics[key] = int(source[key])
    X = getattr(client, "X", None)
    if X is None:
        return 0, {**metrics, "num-features": -1, "data-hash": -1}
    X = np.asarray(X)
    metrics["num-features"] = int(np.prod(X.shape[1:], dtype=np.int64))
    metrics["data-hash"] = data_hash(X)
    return len(X), metrics


#: Name of the ``context.state`` record that keeps the rows a node declared in round 0.
DECLARED_ROWS_KEY = "flwr-clustering-declared-rows"


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


def columns_record(client: Any, magnitudes: bool = False,
                   datetimes: Sequence[str] = ()) -> ConfigRecord | None:
    """The ``columns`` record of a ``data-source`` reply: names and kinds, never values.

    ``names``, ``kinds`` (``numeric``, ``integer``, ``text``, ``datetime``), ``unique`` (1
    where every row holds another integer or text value), ``rows`` and, when the server
    asks (``magnitudes``: a secure scaling exchange needs it), ``magnitude``: per numeric
    or date column the power of two above its largest ``|value|`` (a date's in seconds
    since the epoch, as is a text column the run declares in ``datetimes``; 0 for other
    text), an order of magnitude, not a value. ``None`` for a client without rows.
    """
    X = getattr(client, "X", None)
    if getattr(client, "feature_table", None) is not None:
        table = client.feature_table
    elif X is not None and np.ndim(X) == 2:  # not images (DeepFeCA): no columns to name
        table = client.table() if hasattr(client, "table") else FeatureTable(np.asarray(X))
    else:
        return None
    infos = describe_columns(table)
    record: dict[str, Any] = {
        "names": [c.name for c in infos], "kinds": [c.kind for c in infos],
        "unique": [int(c.unique) for c in infos], "rows": int(len(table.X))}
    if not magnitudes:
        return ConfigRecord(record)
    # the columns in describe_columns' order: numbers, text (a date as text: its
    # seconds), dates
    seconds = [_seconds_or_none(table, c.name) if c.kind == "datetime" or c.name in datetimes
               else np.zeros(0) for c in infos[table.X.shape[1]:]]
    with np.errstate(all="ignore"):
        largest = np.nanmax(np.abs(np.asarray(table.X, dtype=np.float64)), axis=0,
                            initial=0.0) if table.X.size else np.zeros(table.X.shape[1])
        largest = [*np.atleast_1d(largest), *(np.nanmax(np.abs(v), initial=0.0)
                                              for v in seconds)]
    exponents = [int(np.ceil(np.log2(v))) if np.isfinite(v) and v > 0 else 0
                 for v in largest]
    return ConfigRecord({**record, "magnitude": exponents})


def _seconds_or_none(table: FeatureTable, name: str) -> np.ndarray:
    """A date column's seconds, for its magnitude.

    None for text that is not dates: the federation's transform refuses it later, naming
    the row.
    """
    try:
        return table.seconds(name)
    except SchemaError:
        return np.zeros(0)


def feature_moments_arrays(client: Any, config: dict[str, Any]) -> list[np.ndarray]:
    """The reply to the ``feature-moments`` phase: per-feature sums for the scaling.

    ``[count, sum, sumsq]`` of the client's rows in the federation's features (NaN left
    out; with ``missing='drop'`` the complete rows only), each value divided by ``2**e``
    of the config's ``moment-exponents`` (a secure exchange keeps its totals in the
    fixed-point range), then ``rows``: the rows as read and the rows with a missing cell
    (two counts); with ``scaling='minmax'`` also ``[min, max]`` (one row's value each:
    refused under secure aggregation by the server).

    Raises
    ------
    ValueError
        When the client has fewer rows than the config's ``privacy-threshold`` (its sums
        would be its rows): the reply is withheld.
    """
    X = np.asarray(client.X, dtype=np.float64)
    threshold = int(config.get("privacy-threshold", 2))
    if len(X) < threshold:
        raise ValueError(f"client {client.client_id}: {len(X)} rows, fewer than the privacy "
                         f"threshold ({threshold}): its feature sums are withheld")
    exponents = config.get("moment-exponents")
    if exponents:
        exponents = json.loads(exponents) if isinstance(exponents, str) else exponents
        if len(exponents) != X.shape[1]:
            raise ValueError(f"client {client.client_id}: {len(exponents)} moment exponents "
                             f"for {X.shape[1]} features")
        X = X / np.exp2(np.asarray(exponents, dtype=np.float64))
    with np.errstate(over="ignore"):
        m = column_moments(X)
    overflow = ~(np.isfinite(m["sum"]) & np.isfinite(m["sumsq"]))
    if overflow.any():
        j = int(np.flatnonzero(overflow)[0])
        top = float(np.nanmax(np.abs(X[:, j])))
        key = getattr(client, "_features_key", None)
        names = FeatureTransform.from_json(key).features if key else ()
        name = names[j] if j < len(names) else None
        what = f"column {name!r}" if name is not None else f"feature {j}"
        why = (f"its sum of squares overflows float64 (above "
               f"{np.finfo(np.float64).max:.3g}), so no scaling (nor a centroid's squared "
               "distance) can be computed in these units. Rescale that column before the "
               "run (for example divide it by a power of ten), with the same factor at "
               "every site")
        # the largest value is one row's: the site's log only
        raise SiteDataError(f"client {client.client_id}: {what}: {why}",
                            f"client {client.client_id}: {what} reaches {top:.3g}: {why}")
    mask = getattr(client, "row_mask", None)
    if mask is not None:  # missing='drop': the rows as read, those left out
        rows = [len(mask), int(len(mask) - np.count_nonzero(mask))]
    else:
        rows = [len(X), int(np.count_nonzero(np.isnan(X).any(axis=1))) if X.size else 0]
    arrays = [m["count"], m["sum"], m["sumsq"], np.asarray(rows, dtype=np.float64)]
    if config.get("scaling") == "minmax":
        arrays += [m["min"], m["max"]]
    return arrays


def unit_check_arrays(client: Any) -> list[np.ndarray]:
    """A client's unit check under secure aggregation: ``[flags (d,), powers (d,)]``.

    The client's rows in the federation's features, back in original units, against the
    federation's mean and standard deviation that its feature transform carries
    (:func:`~flwr_clustering.data.schema.site_unit_powers`). A flagged feature is logged
    on the node, naming it; the server receives only the totals over the sites.
    """
    key = getattr(client, "_features_key", None)
    transform = FeatureTransform.from_json(key) if key else None
    if transform is None or not transform.scaled:
        raise ValueError(f"client {client.client_id}: the unit check needs the federation's "
                         "scaling (scaling='standard')")
    d = len(transform.numeric_features)
    X = transform.inverse(np.asarray(client.X, dtype=np.float64))[:, :d]
    powers = site_unit_powers(X, transform.center[:d], transform.scale[:d])
    for j in np.flatnonzero(powers):
        logger.warning("client %d: its %r is about %s of the federation's (mean %.3g vs %.3g): "
                       "a unit mismatch? Export that column in the other sites' units",
                       client.client_id, transform.features[j], unit_factor(int(powers[j])),
                       float(np.nanmean(X[:, j])), transform.center[j])
    pad = np.zeros(len(transform.features) - d)
    return [np.concatenate([(powers != 0).astype(np.float64), pad]),
            np.concatenate([powers.astype(np.float64), pad])]


def split_check_arrays(client: Any, phase: str, params: list[np.ndarray],
                       config: dict[str, Any]) -> list[np.ndarray]:
    """A client's reply to a phase of the split check or the refinement (float64 arrays).

    ``split-scatter`` (arrays ``[C]``): per cluster the count, sum and sum of outer
    products of the rows nearest to it; ``split-histograms`` (``[C, means, axes,
    edges]``): per cluster the counts of its rows in the bins along its main axis;
    ``refine`` (``[C]``): per cluster the sum and count of its rows, and the SSE of ``C``
    (:mod:`flwr_clustering.algorithms.cluster_split`). Only complete rows take part; a
    client with a cluster of fewer rows than the config's ``privacy-threshold`` (0 under
    secure aggregation, where only totals reach the server) sends zeros only.
    """
    X = np.asarray(client.X, dtype=np.float64)
    C = np.asarray(params[0], dtype=np.float64)
    if C.ndim != 2 or C.shape[1] != X.shape[1]:
        raise ValueError(f"client {client.client_id}: {phase}: centroids of shape {C.shape} "
                         f"for rows of {X.shape[1]} features")
    threshold = int(config.get("privacy-threshold", 2))
    if phase == SPLIT_SCATTER_PHASE:
        return list(client_scatter(X, C, threshold))
    if phase == SPLIT_HISTOGRAM_PHASE:
        means, axes, edges = (np.asarray(a, dtype=np.float64) for a in params[1:4])
        return [client_histograms(X, C, AxisBins(means, axes, edges), threshold)]
    sums, counts, sse = refine_stats(X, C, threshold)
    return [sums, counts, np.array([sse])]


class ClusteringClient(NumPyClient):
    """Base NumPyClient of the clustering algorithms.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The local data. It never leaves the client.
    y : array_like of shape (n,), optional
        Ground-truth labels (simulation and benchmarks only); when present, ``evaluate``
        also returns a contingency table and the local ARI.
    client_id : int, default 0
        Stable id (partition id): seeds the client's generator and orders replies.
    dtype : str, optional
        The type to hold the rows in, one of :attr:`dtypes` (default: the first,
        float64). A run's ``dtype`` option converts them at its first message
        (:meth:`use_dtype`); given here, the rows are converted once, on arrival.

    Raises
    ------
    ValueError
        If ``X`` is not a finite 2-D array, is empty, or ``y`` does not match it, or
        ``dtype`` is not one the algorithm computes in.
    """

    #: The types the algorithm's client computes in, the default first. FKM adds
    #: float32 (its ``dtype`` option); the others hold their rows as float64.
    dtypes: tuple[str, ...] = ("float64",)

    #: Whether the local data may hold NaN (read as unobserved features; masked algorithms).
    #: A local file with a missing value is refused for clients that do not accept it.
    accepts_missing = False

    #: Where the rows came from, told to the server in the ``data-source`` phase:
    #: ``{"local": True}`` (a local file) or ``{"local": False, "partition-id": i,
    #: "num-partitions": n}`` (a built-in partition); set by the App's ``client_fn``.
    #: ``None``: not said (the reply's ``data-local`` is -1).
    data_source: dict[str, Any] | None = None

    #: Whether this client may send raw rows (or receive other sites' rows) when an
    #: option asks for it (:meth:`consent_to_raw_rows`). The App sets it from the node
    #: config's ``allow-raw-rows``; set it to False in your own ClientApp to refuse.
    allow_raw_rows: bool = True

    #: The largest epsilon this node accepts in a differentially private run (node config
    #: ``dp-max-epsilon``); ``None``: any. See :meth:`FedKMeansClient.fit`.
    dp_max_epsilon: float | None = None

    #: The client's columns by name (the App sets it from the node's file, the estimator
    #: from a DataFrame); ``None``: ``X``'s columns, named by position ``"0"``, ``"1"``...
    feature_table: FeatureTable | None = None

    def table(self) -> FeatureTable:
        """The client's columns by name, as read (before the federation's transform)."""
        if self.feature_table is None:
            self.feature_table = FeatureTable(self.X)
        return self.feature_table

    def use_features(self, text: str) -> None:
        """Hold the rows in the federation's features and units from now on.

        ``text`` is a :class:`~flwr_clustering.data.schema.FeatureTransform` as JSON (the
        ``feature-transform`` key of every message of a run that agreed on one): the
        columns are taken by name, in the federation's order, filled or dropped where a
        cell is missing (``missing='mean'``, ``'drop'``) and scaled. Applied once per
        transform; the rows as read stay in :meth:`table`. Rows that still hold a missing
        cell (round 0's transform, before the federation's means are known) are kept as
        they are, and :meth:`require_complete` refuses any later phase on them.

        Raises
        ------
        ValueError
            If this client lacks a feature (naming it), or ``missing='drop'`` leaves it
            no row.
        """
        if text == getattr(self, "_features_key", None):
            return
        transform = FeatureTransform.from_json(text)
        try:
            X = transform.apply(self.table(), dtype=self.dtype)
        except SchemaError as ex:
            raise ValueError(f"client {self.client_id}: the federation's features: "
                             f"{ex}") from ex
        self.row_mask, self.y = None, self._y_read
        if transform.missing == "drop":
            keep = transform.complete_rows(X)
            if not keep.any():
                raise ValueError(
                    f"client {self.client_id}: every one of its {len(X)} rows has a missing "
                    f"cell, {DROP_LEAVES_NO_ROW}: run with missing='mean' (each missing cell "
                    "filled with the federation's mean of its feature)")
            if not keep.all():
                X, self.row_mask = np.ascontiguousarray(X[keep]), keep
                self.y = None if self._y_read is None else self._y_read[keep]
        self.missing_cells = (0 if self.reads_missing(transform)
                              else int(np.count_nonzero(np.isnan(X))))
        if self.missing_cells:
            X = np.ascontiguousarray(X, dtype=self.dtype)
        elif X is not self.X:
            X = self.validated(X)
        self.X = X
        self._features_key = text

    def reads_missing(self, transform: FeatureTransform) -> bool:
        """Whether this client trains on rows with missing cells under ``transform``.

        :attr:`accepts_missing` (the masked algorithms) by default; FKM when the run's
        transform keeps them (``missing='partial'``). Its :meth:`validated` then takes
        rows with NaN.
        """
        return self.accepts_missing

    def labels_of_rows_read(self, labels: np.ndarray) -> np.ndarray:
        """Labels of the rows as read: -1 for a row left out (``missing='drop'``)."""
        labels = np.asarray(labels, dtype=np.int64)
        if self.row_mask is None:
            return labels
        full = np.full(len(self.row_mask), -1, dtype=np.int64)
        full[self.row_mask] = labels
        return full

    def consent_to_raw_rows(self, option: str, what: str) -> None:
        """Refuse a step that sends raw rows unless this node allows it.

        Parameters
        ----------
        option : str
            The run-config setting that causes it (``"init='paper'"``).
        what : str
            What would be sent (``"the k-means++ seeds, 16 raw rows"``).

        Raises
        ------
        PermissionError
            When :attr:`allow_raw_rows` is False, naming the option and the node-config key.
        """
        if not self.allow_raw_rows:
            raise PermissionError(
                f"client {self.client_id}: {option} would send {what}; this node does not "
                f"allow raw rows to leave it. The data owner may allow it (flower-supernode "
                f"--node-config \"... {RAW_ROWS_KEY}=true\"), or run without {option}")

    def __init__(self, X: np.ndarray, y: np.ndarray | None = None, *, client_id: int = 0,
                 dtype: str | None = None, missing_cells: bool = False):
        self.client_id = int(client_id)
        self.dtype = self._checked_dtype(self.dtypes[0] if dtype is None else dtype)
        #: rows kept of those read (``missing='drop'``); ``None``: every row
        self.row_mask: np.ndarray | None = None
        #: the rows hold missing cells that the federation's transform has yet to fill
        #: or drop (:meth:`use_features`); until then only round 0's phases are answered
        self.missing_cells = 0
        if missing_cells and not self.accepts_missing:
            X = np.ascontiguousarray(X, dtype=self.dtype)
            holes = np.isnan(X)
            self.missing_cells = int(np.count_nonzero(holes))
            if self.missing_cells:  # every other value checked (finite, 2-D) as usual
                self.validated(np.where(holes, 0.0, X))
                self.X = X
        if not self.missing_cells:
            self.X = self.validated(X)
        if len(self.X) == 0:
            raise ValueError(f"client {self.client_id} data is empty")
        self.y = None
        if y is not None:
            self.y = np.asarray(y).astype(np.int64)
            if self.y.shape != (len(self.X),):
                raise ValueError(
                    f"client {self.client_id}: labels have shape {self.y.shape}, "
                    f"expected ({len(self.X)},)"
                )
        self._y_read = self.y

    def require_complete(self, phase: str) -> None:
        """Refuse a phase while the rows still hold missing cells (naming the fix).

        Raises
        ------
        ValueError
            Naming the client, the columns and counts (never a value) and the options.
        """
        if not self.missing_cells:
            return
        key = getattr(self, "_features_key", None)
        transform = FeatureTransform.from_json(key) if key else None
        holes = np.isnan(np.asarray(self.X, dtype=np.float64)).sum(axis=0)
        names = transform.features if transform is not None else self.table().names
        where = ", ".join(f"{names[j]!r} ({int(holes[j])})" for j in np.flatnonzero(holes)[:10]
                          if j < len(names))
        source = getattr(self, "data_source", None) or {}
        what = (f"its file {source['path']} has" if source.get("path")
                else "its rows have")
        why = ("the run sent no federation means to fill them (a differentially private "
               "run sends no per-feature sums): run with missing='drop'"
               if transform is not None and transform.missing == "mean" else
               "run with missing='mean' (each missing cell filled with the federation's "
               "mean of its feature) or missing='drop' (rows with a missing cell left "
               "out), or fill them at the site")
        raise ValueError(f"client {self.client_id}: {what} {int(holes.sum())} missing "
                         f"cell(s) (NaN or empty) in {where}, which {phase} cannot use: "
                         f"{why}")

    def validated(self, X: np.ndarray) -> np.ndarray:
        """Check the local data and return it as float64 (override for other data models).

        Parameters
        ----------
        X : array_like of shape (n, d)
            The local data.

        Returns
        -------
        numpy.ndarray
            The data, finite and 2-D.
        """
        return check_data(X, name=f"client {self.client_id} data", dtype=self.dtype)

    def _checked_dtype(self, dtype: str) -> str:
        if str(dtype) not in self.dtypes:
            raise ValueError(f"client {self.client_id}: {type(self).__name__} computes in "
                             f"{' or '.join(self.dtypes)}, not {dtype!r}")
        return str(dtype)

    def use_dtype(self, dtype: str) -> None:
        """Hold the rows in ``dtype`` from now on (a run's ``dtype`` option).

        Float64 to float32 rounds every value once; float32 to float64 is exact.

        Raises
        ------
        ValueError
            If the algorithm does not compute in ``dtype`` (:attr:`dtypes`).
        """
        dtype = self._checked_dtype(dtype)
        if dtype != self.dtype:
            self.X = np.ascontiguousarray(self.X, dtype=dtype)
            self.dtype = dtype

    def centroids_from(self, parameters: list[np.ndarray]) -> np.ndarray:
        """Return the global centroids (first array of ``parameters``), validated.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            What the server sent.

        Returns
        -------
        numpy.ndarray of shape (k, d)
            The centroids; their dimension must match the local data.
        """
        if not parameters:
            raise ValueError(f"client {self.client_id}: the server sent no centroids")
        C = check_data(parameters[0], name="global centroids")
        # the rows were validated once, in __init__: only their width is checked per round
        check_features(self.X, C.shape[1], name=f"client {self.client_id} data")
        return C

    def local_stats(self, C: np.ndarray, config: dict[str, Any]) -> dict[str, Any]:
        """Return additive evaluation statistics of ``C`` on the local data.

        Parameters
        ----------
        C : numpy.ndarray of shape (k, d)
            Centroids to evaluate.
        config : dict
            May carry ``"n-classes"`` (width of the contingency table).

        Returns
        -------
        dict
            See :func:`flwr_clustering.evaluation.local_evaluation_stats`.
        """
        n_classes = int(config["n-classes"]) if config.get("n-classes") else None
        # the sum of the rows is a row for a client of one: withheld below the threshold
        threshold = int(config.get("privacy-threshold", 2))
        return local_evaluation_stats(self.X, C, self.y, n_classes, min_rows=threshold,
                                      profile=bool(config.get("profile")))

    def local_labels(self, parameters: list[np.ndarray], config: dict[str, Any]) -> np.ndarray:
        """Label the local rows with the final model (the arrays of the final message).

        The default: nearest of the global centroids ``parameters[0]``. Algorithms whose
        model labels rows differently override it (masked data, DGC's own centres,
        DeepFeCA's network). The labels stay on the client.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            The final model, as in the evaluate message.
        config : dict
            The message's configuration.

        Returns
        -------
        numpy.ndarray of shape (n,)
            The cluster of every local row (int64).
        """
        return nearest_labels(self.X, self.centroids_from(parameters)).astype(np.int64)

    def to_client(self):
        """Return a legacy ``flwr.client.Client`` (see :mod:`flwr_clustering.legacy`).

        Array-valued metrics travel as ``np.save`` bytes, with ``"client-id"``; pair it
        with :class:`flwr_clustering.legacy.LegacyStrategy` on the server.
        """
        return legacy_client(self)

    def query(self, parameters, config):
        """Answer a ``QUERY`` message: a protocol phase that is not training.

        The phase is ``config["phase"]``; the default hands it to :meth:`fit`, which
        dispatches on the phase. Same return form as ``fit``.
        """
        return self.fit(parameters, config)

    def evaluate(self, parameters, config):
        """Evaluate the global centroids on the local data (statistics, not rows).

        Parameters
        ----------
        parameters : list of numpy.ndarray
            ``[centroids]``.
        config : dict
            Evaluation configuration.

        Returns
        -------
        tuple
            ``(mean squared distance, n, statistics)``.
        """
        C = self.centroids_from(parameters)
        stats = self.local_stats(C, config)
        return float(stats["sse"]) / len(self.X), len(self.X), stats


def secure_evaluation_arrays(client: Any, C: np.ndarray, config: dict[str, Any]
                             ) -> list[np.ndarray]:
    """A client's evaluation statistics as the arrays secure aggregation sums.

    ``[head (5,), cluster-counts (k,), sum-x (d,), cluster-residuals (k, d)]`` and, with
    ``config["n-classes"]``, ``contingency (k, n_classes)``; ``head`` is rows, SSE,
    silhouette sum, whether the client has labels (0 or 1) and the sum of squares of its
    rows. The client's own :meth:`ClusteringClient.local_stats` computes them (a masked
    client's on its observed features; unobserved entries count 0), with nothing
    withheld under the privacy threshold: only the federation's totals reach the server
    (:mod:`flwr_clustering.secure`).
    """
    X = np.asarray(client.X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    k, d = C.shape
    width = int(config.get("n-classes") or 0)
    labelled = width > 0 and getattr(client, "y", None) is not None
    cfg = {key: v for key, v in config.items() if key != "n-classes"}
    if labelled:
        cfg["n-classes"] = width
    stats = client.local_stats(C, {**cfg, "privacy-threshold": 0})
    n = int(stats["num-examples"])
    head = np.array([n, stats["sse"], stats["silhouette-sum"], float(labelled),
                     float(np.nansum(np.square(X)))], dtype=np.float64)
    out = [head, np.asarray(stats["cluster-counts"], dtype=np.float64),
           np.nan_to_num(np.nansum(X, axis=0) if n else np.zeros(d)),
           np.nan_to_num(np.asarray(stats.get("cluster-residuals", np.zeros((k, d))),
                                    dtype=np.float64))]
    if width:
        table = np.zeros((k, width))
        if labelled:
            table = np.asarray(stats["contingency"], dtype=np.float64)
            if table.shape != (k, width):
                raise ValueError(f"labels outside the {width} classes of n-classes")
        out.append(table)
    if config.get("profile"):  # the cluster profile's spreads, last
        out.append(np.nan_to_num(np.asarray(
            stats.get("cluster-sq-residuals", np.zeros((k, d))), dtype=np.float64)))
    return out


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


def _unpack(msg: Message) -> tuple[list[np.ndarray], dict[str, Any]]:
    params = msg.content["arrays"].to_numpy_ndarrays() if "arrays" in msg.content else []
    config = dict(msg.content["config"]) if "config" in msg.content else {}
    return params, config


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


def _keep_labels(context: Context, labels: np.ndarray, cid: int) -> None:
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


#: The phases a client answers while its rows still hold missing cells (round 0: the
#: federation's means are computed from their answers).
_ROUND_ZERO_PHASES = (DATA_SOURCE_PHASE, CATEGORIES_PHASE, FEATURE_MOMENTS_PHASE)


def _rows_read(client: Any, labels: np.ndarray) -> np.ndarray:
    """A client's labels of the rows as read (-1 where ``missing='drop'`` left one out)."""
    expand = getattr(client, "labels_of_rows_read", None)
    return labels if expand is None else expand(labels)


def _refuse_without_noise(client: Any, cid: int, phase: str) -> None:
    """A node that takes part only in DP runs answers no phase of exact sums."""
    if getattr(client, "dp_max_epsilon", None) is not None:
        raise PermissionError(
            f"client {cid}: this node takes part only in differentially private runs (node "
            f"config dp-max-epsilon), and the {phase} phase sends sums without noise")


def _phase_name(msg: Message, config: dict[str, Any]) -> str:
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


def _handle(msg: Message, context: Context, client: NumPyClient | Callable, kind: str
            ) -> Message:
    cid = client_id_of(context)
    config: dict[str, Any] = {}
    try:
        if not isinstance(client, NumPyClient):
            client = client(context)
        params, config = _unpack(msg)
        if config.get("phase") == DATA_SOURCE_PHASE:
            n, metrics = data_source_metrics(client)
            declare_rows(context, n, metrics.get("data-hash", -1))
            client._rows_checked = True  # (a client object kept across messages)
        else:
            check_declared_rows(context, client, cid)
        if FEATURES_KEY in config and hasattr(client, "use_features"):
            client.use_features(str(config[FEATURES_KEY]))
        if config.get("phase") not in _ROUND_ZERO_PHASES and hasattr(client,
                                                                     "require_complete"):
            client.require_complete(_phase_name(msg, config))
        if (config.get("phase") in (CATEGORIES_PHASE, FEATURE_MOMENTS_PHASE)
                and getattr(client, "dp_max_epsilon", None) is not None):
            raise PermissionError(
                f"client {cid}: this node takes part only in differentially private runs "
                f"(node config dp-max-epsilon), and the {config['phase']} phase sends "
                "statistics without noise: run with scaling='none' and without "
                "categorical-columns")
        if config.get("phase") == CATEGORIES_PHASE:  # the library's phase, any client
            columns = json.loads(str(config["categorical-columns"]))
            # a continuous column is flagged by name (no count: the server refuses it)
            continuous = continuous_columns(client.table(), columns)
            counts = category_counts(client.table(),
                                     [c for c in columns if c not in continuous],
                                     int(config.get("privacy-threshold", 2)))
            reply = pack_reply(msg, None, len(client.X), {}, cid)
            reply.content[COLUMNS_RECORD] = ConfigRecord(
                {"categories": json.dumps(counts), "continuous": json.dumps(continuous)})
            logger.info("client %d %s: %d values of %d columns (no row)", cid,
                        CATEGORIES_PHASE, sum(len(v) for v in counts.values()), len(counts))
            return reply
        if config.get("phase") == FEATURE_MOMENTS_PHASE:  # the library's phase, any client
            arrays = feature_moments_arrays(client, config)
            read = int(arrays[3][0])  # the rows as read, as in the data-source reply
            if config.get("moments-secure"):  # summed by the secure aggregation mod
                reply = pack_reply(msg, arrays, read, {}, cid)
            else:
                reply = pack_reply(msg, None, read,
                                   dict(zip(MOMENT_KEYS, arrays, strict=False)), cid)
            logger.info("client %d %s: %s", cid, FEATURE_MOMENTS_PHASE, sent_summary(reply))
            return reply
        if config.get("phase") in SPLIT_CHECK_KEYS:  # the library's phases, any client
            phase = str(config["phase"])
            _refuse_without_noise(client, cid, phase)
            arrays = split_check_arrays(client, phase, params,
                                        {**config, "privacy-threshold": 0}
                                        if kind == "train" else config)
            if kind == "train":  # summed by the secure aggregation mod
                return pack_reply(msg, arrays, len(client.X), {}, cid)
            held = withholds(client.X, params[0], int(config.get("privacy-threshold", 2)))
            reply = pack_reply(msg, None, len(client.X),
                               {**dict(zip(SPLIT_CHECK_KEYS[phase], arrays, strict=True)),
                                "withheld": int(held)}, cid)
            logger.info("client %d %s: %s", cid, phase, sent_summary(reply))
            return reply
        if config.get("phase") in (K_MOMENTS_PHASE, K_SPREADS_PHASE):  # a search's scores
            phase = str(config["phase"])
            _refuse_without_noise(client, cid, phase)
            # a train message is summed by the secure aggregation mod: nothing withheld
            arrays = score_arrays(client, phase, params, {**config, "privacy-threshold": 0}
                                  if kind == "train" else config)
            reply = pack_reply(msg, arrays, len(client.X), {}, cid)
            logger.info("client %d %s: %s", cid, phase, sent_summary(reply))
            return reply
        if kind == "train" and config.get("phase") == UNIT_CHECK_PHASE:
            return pack_reply(msg, unit_check_arrays(client), len(client.X), {}, cid)
        if kind == "train" and config.get("phase") == SECURE_EVALUATE_PHASE:
            arrays = secure_evaluation_arrays(client, params[0], config)
            return pack_reply(msg, arrays, len(client.X), {}, cid)
        if kind == "query" and config.get("phase") == DATA_SOURCE_PHASE:
            # the library's phase, for any client (n, metrics: computed above)
            reply = pack_reply(msg, None, n, metrics, cid)
            columns = columns_record(client, bool(config.get("magnitudes")), json.loads(
                str(config.get("datetime-columns", "[]"))))
            if columns is not None:
                reply.content[COLUMNS_RECORD] = columns
            return reply
        if kind == "evaluate":
            if config.get("final") and hasattr(client, "local_labels"):
                _keep_labels(context, _rows_read(client, client.local_labels(params, config)),
                             cid)
            if not config.get("evaluate", True):
                n = len(getattr(client, "X", ()))
                return pack_reply(msg, None, n, {}, cid)
            loss, n, metrics = client.evaluate(params, config)
            reply = pack_reply(msg, None, n, {**metrics, "loss": float(loss)}, cid)
            logger.info("client %d %s: %s", cid, _phase_name(msg, config), sent_summary(reply))
            return reply
        # a plain NumPyClient has no ``query``: it answers every phase in ``fit``
        step = getattr(client, "query", client.fit) if kind == "query" else client.fit
        errors = None
        if config.get(CANDIDATES_KEY):  # a search: every candidate model in one message
            arrays, n, metrics, errors = fit_candidates(
                client, step, params, config, strict=bool(config.get("candidates-strict")))
        else:
            arrays, n, metrics = step(params, config)
        final = getattr(client, "final_labels", None)
        if final is not None:  # a protocol whose last train round labels the rows (KDC)
            _keep_labels(context, _rows_read(client, final), cid)
        reply = pack_reply(msg, arrays, n, metrics, cid)
        if errors:
            reply.content[CANDIDATE_ERRORS_RECORD] = ConfigRecord(errors)
            logger.warning("client %d %s: %d of the search's candidates failed: %s", cid,
                           _phase_name(msg, config), len(errors),
                           "; ".join(f"{i}: {why}" for i, why in errors.items()))
        logger.info("client %d %s: %s", cid, _phase_name(msg, config), sent_summary(reply))
        return reply
    except Exception as ex:  # noqa: BLE001 - every failure becomes an error reply
        # the server gets the problem and where, never a cell (clients.errors); the
        # site's log keeps the whole message
        reason, detail, vetted = error_reasons(ex, cid, _phase_name(msg, config))
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
        The client (e.g. a :class:`ClusteringClient` around the node's rows), or
        ``client_fn(context) -> NumPyClient``.

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
          "the node (:func:`stored_labels`, node config ``labels-path``)")
