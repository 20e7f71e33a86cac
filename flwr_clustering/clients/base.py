"""The base NumPyClient of every algorithm's client: :class:`ClusteringClient`.

It holds and validates the local data (the rows as read, then in the federation's features
and units: :meth:`ClusteringClient.use_features`), refuses what the node does not allow
(raw rows leaving it: :meth:`ClusteringClient.consent_to_raw_rows`) and implements
``evaluate`` (local metric statistics of the received centroids, in additive form) and the
labelling of the rows with the final model (:meth:`ClusteringClient.local_labels`).

The rest of the client side has a module each: the client adapter that answers a
message (:mod:`~flwr_clustering.clients.handlers`), the phases the library answers for
every client (:mod:`~flwr_clustering.clients.phases`, from the statistics of
:mod:`~flwr_clustering.clients.statistics`), the data-integrity check
(:mod:`~flwr_clustering.clients.integrity`), the reply's packing
(:mod:`~flwr_clustering.clients.messages`), the labels a node keeps
(:mod:`~flwr_clustering.clients.labels`) and the legacy API
(:mod:`~flwr_clustering.clients.legacy`, ``ClusteringClient.to_client()``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import numpy as np
from flwr.client import NumPyClient

from ..algorithms.lloyd import check_data, check_features, nearest_labels
from ..data.schema import DROP_LEAVES_NO_ROW, FeatureTable, FeatureTransform, SchemaError
from ..evaluation import local_evaluation_stats
from ..protocol import RAW_ROWS_KEY

__all__ = ["ClusteringClient"]


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


#: Names this module held until issue 51, by the module that holds them now. Importing one
#: from here still works for one release, with a DeprecationWarning naming its new home.
_MOVED = {
    **dict.fromkeys(("CATEGORIES_PHASE", "COLUMNS_RECORD", "DATA_SOURCE_PHASE",
                     "DP_MAX_EPSILON_KEY", "FEATURES_KEY", "FEATURE_MOMENTS_PHASE",
                     "LABELS_PATH_KEY", "MOMENT_KEYS"), "flwr_clustering.protocol"),
    # what a user's own ClientApp imports: from the package
    **dict.fromkeys(("client_id_of", "handle_evaluate", "handle_query", "handle_train",
                     "pack_reply", "stored_labels"), "flwr_clustering.clients"),
    **dict.fromkeys(("DECLARED_ROWS_KEY", "check_declared_rows", "data_hash",
                     "declare_rows"), "flwr_clustering.clients.integrity"),
    **dict.fromkeys(("columns_record", "data_source_metrics", "feature_moments_arrays",
                     "secure_evaluation_arrays", "split_check_arrays", "unit_check_arrays"),
                    "flwr_clustering.clients.statistics"),
    "sent_summary": "flwr_clustering.clients.messages",
}


def __getattr__(name: str) -> Any:
    """A name that moved out of this module: from its new home, with a DeprecationWarning."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _MOVED[name]
    warnings.warn(f"flwr_clustering.clients.base.{name} moved to {home}.{name}; import it "
                  "from there (the old path goes in the next release)", DeprecationWarning,
                  stacklevel=2)
    # by name, on the first use of an old path only: the modules that answer messages sit
    # above the client base, which imports none of them
    return getattr(importlib.import_module(home), name)
