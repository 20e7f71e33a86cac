"""A model a site can keep: the run's centroids, features and scaling in one JSON file.

A federated run ends with centroids in the scaled space the clients computed in. To label a
new file later, on any node, a site needs three things together: those centroids, the
federation's feature names (in order) and the scaling. :class:`ClusteringModel` holds them,
:meth:`ClusteringModel.save` writes them to one strict-JSON file (``model.json``) and
:func:`load_model` reads it back, without the server and without Flower:

>>> model = load_model("results/model.json")            # doctest: +SKIP
>>> labels = model.predict(pd.read_csv("new_site.csv"))  # doctest: +SKIP

:meth:`ClusteringModel.predict` takes the columns by name, applies the scaling and labels
every row exactly as the clients did (:func:`~flwr_clustering.algorithms.lloyd.nearest_labels`,
or the mask-aware distances of
:func:`~flwr_clustering.algorithms.masked.pooled_masked_squared_distances` for rows and
centres with unobserved features).

The file (format :data:`MODEL_FORMAT`) holds the centroids twice: ``centroids`` in the
original units (what a person reads) and ``model-centroids`` in the scaled space (what
labels rows; exact, as Python's shortest float repr round-trips). NaN (an unobserved
feature) is written as ``null``.

Layer 2: the standard library and NumPy (pandas only inside :meth:`ClusteringModel.predict`,
for a DataFrame); no Flower import.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flwr_clustering import __version__
from flwr_clustering.algorithms.lloyd import nearest_labels
from flwr_clustering.data.schema import FeatureTable, FeatureTransform
from flwr_clustering.reporting import atomic_write_text

__all__ = [
    "LABELLINGS",
    "MODEL_FORMAT",
    "ClusteringModel",
    "load_model",
]

logger = logging.getLogger(__name__)

#: The ``format`` of a model file; another value is refused by :func:`load_model`.
MODEL_FORMAT = "flwr-clustering-model/1"

#: The labellings :meth:`ClusteringModel.predict` performs: the nearest centroid, and the
#: nearest centroid on each row's observed features (rows and centres may hold NaN).
LABELLINGS: tuple[str, ...] = ("nearest-centroid", "masked-nearest-centroid")

_MASKED = "masked-nearest-centroid"

#: Where the runs whose labelling :meth:`ClusteringModel.predict` does not perform keep
#: their model (the file among the run's results).
_ARTIFACTS = {
    "kernel": "kdc_model.npz (the kernel, the mean maps and the scaling)",
    "network": "model.npz (the network's weights)",
}

#: The keys of a model file, in the order they are written.
_KEYS = ("format", "algorithm", "k", "feature_names", "scaling", "center", "scale",
         "centroids", "model-centroids", "labelling", "options", "library-version")


def _nan_to_none(value: Any) -> Any:
    """Lists and dicts with every NaN float replaced by ``None`` (strict JSON's ``null``)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list | tuple):
        return [_nan_to_none(v) for v in value]
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    return value


def _jsonable(value: Any, where: str) -> Any:
    """``value`` as plain JSON types (NumPy scalars and arrays converted, NaN as ``None``).

    Raises
    ------
    ValueError
        For a value JSON cannot hold (an object, an infinity), naming ``where``.
    """
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise ValueError(f"{where} is {value!r}, which JSON cannot hold")
        return float(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has the key {key!r}: JSON keys are strings")
            out[key] = _jsonable(v, f"{where}[{key!r}]")
        return out
    raise ValueError(f"{where} is a {type(value).__name__} ({value!r}), which JSON cannot hold")


def _floats(values: Any, key: str) -> np.ndarray:
    """A float64 array from a JSON list (``null`` read as NaN), or a ValueError naming ``key``."""
    try:
        return np.array(_none_to_nan(values), dtype=np.float64)
    except (TypeError, ValueError) as ex:
        raise ValueError(f"model key {key!r} must hold numbers (null for NaN): {ex}") from ex


def _none_to_nan(value: Any) -> Any:
    if value is None:
        return math.nan
    if isinstance(value, list):
        return [_none_to_nan(v) for v in value]
    if isinstance(value, bool | str):  # float("1.5") and float(True) would pass silently
        raise TypeError(f"{value!r} is not a number")
    return value


@dataclass
class ClusteringModel:
    """A clustering run's model: centroids, feature names and scaling, kept together.

    Parameters
    ----------
    algorithm : str
        The algorithm that computed the model (the registry's name, e.g. ``"fkm"``).
    k : int
        The number of clusters: ``len(centroids)``.
    feature_names : tuple of str
        The federation's features, in the order of the centroids' columns.
    transform : FeatureTransform
        The scaling the federation computed in (``transform.features == feature_names``;
        ``scaling`` may be ``"none"``).
    centroids : numpy.ndarray of shape (k, d)
        The centroids in the scaled space (they label rows exactly as the clients did);
        NaN only with the ``"masked-nearest-centroid"`` labelling (a feature no
        contributor of that cluster observed).
    options : dict, optional
        The run's settings (JSON-able: NumPy values are converted, NaN becomes ``None``).
    library_version : str, optional
        The ``flwr_clustering`` version that computed the model; default the running one.
    labelling : str, default "nearest-centroid"
        How rows are labelled: one of :data:`LABELLINGS`, or another algorithm's own rule
        (``"kernel"`` for KDC, ``"network"`` for DeepFeCA), which is stored but which
        :meth:`predict` refuses.

    Raises
    ------
    ValueError
        If the shapes, names, ``k`` or the transform do not agree, or the centroids hold
        NaN or inf (NaN is allowed with the masked labelling, inf never).
    """

    algorithm: str
    k: int
    feature_names: tuple[str, ...]
    transform: FeatureTransform
    centroids: np.ndarray
    options: dict[str, Any] = field(default_factory=dict)
    library_version: str = __version__
    labelling: str = "nearest-centroid"

    def __post_init__(self) -> None:
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise ValueError(f"algorithm must be a non-empty string, got {self.algorithm!r}")
        if not isinstance(self.labelling, str) or not self.labelling:
            raise ValueError(f"labelling must be a non-empty string, got {self.labelling!r}")
        if not isinstance(self.library_version, str):
            raise ValueError(f"library_version must be a string, got {self.library_version!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int | np.integer):
            raise ValueError(f"k must be an integer, got {self.k!r}")
        self.k = int(self.k)
        if isinstance(self.feature_names, str):
            raise ValueError("feature_names must be a sequence of names, not one string")
        self.feature_names = tuple(str(f) for f in self.feature_names)
        if len(set(self.feature_names)) != len(self.feature_names):
            twice = sorted({f for f in self.feature_names if self.feature_names.count(f) > 1})
            raise ValueError(f"feature_names lists {twice} twice")
        if not isinstance(self.transform, FeatureTransform):
            raise ValueError("transform must be a FeatureTransform, got "
                             f"{type(self.transform).__name__}")
        try:
            C = np.array(self.centroids, dtype=np.float64)  # a copy: the model owns it
        except (TypeError, ValueError) as ex:
            raise ValueError(f"centroids must be a numeric (k, d) array: {ex}") from ex
        if C.ndim != 2:
            raise ValueError(f"centroids must be a 2-D (k, d) array, got shape {C.shape}")
        if len(C) == 0:
            raise ValueError("a model needs at least one centroid (k >= 1)")
        if self.k != len(C):
            raise ValueError(f"k = {self.k} but there are {len(C)} centroids")
        d = C.shape[1]
        if len(self.feature_names) != d:
            raise ValueError(f"{len(self.feature_names)} feature names for centroids of "
                             f"{d} features")
        if tuple(self.transform.features) != self.feature_names:
            raise ValueError(f"the transform's features {list(self.transform.features)} are "
                             f"not the model's feature_names {list(self.feature_names)}")
        if np.isinf(C).any():
            raise ValueError("centroids hold inf")
        if np.isnan(C).any() and self.labelling != _MASKED:
            rows = sorted({int(i) for i in np.argwhere(np.isnan(C))[:, 0]})
            raise ValueError(f"centroid(s) {rows} hold NaN, which only the {_MASKED!r} "
                             f"labelling allows (this model's: {self.labelling!r})")
        C.setflags(write=False)
        self.centroids = C
        if not isinstance(self.options, Mapping):
            raise ValueError(f"options must be a dict, got {type(self.options).__name__}")
        self.options = _jsonable(dict(self.options), "options")

    # ------------------------------------------------------------------ views

    @property
    def n_features(self) -> int:
        """The number of features ``d``."""
        return len(self.feature_names)

    @property
    def centroids_original(self) -> np.ndarray:
        """The centroids in the original units (``transform.inverse``; NaN stays NaN).

        Returns
        -------
        numpy.ndarray of shape (k, d)
            A new array.
        """
        return np.array(self.transform.inverse(self.centroids), dtype=np.float64)

    def describe(self) -> str:
        """One line: algorithm, ``k``, features, scaling and labelling."""
        names = ", ".join(self.feature_names[:6])
        if self.n_features > 6:
            names += f", ... ({self.n_features} features)"
        return (f"{self.algorithm} model: k={self.k}, features [{names}], "
                f"scaling={self.transform.scaling}, labelling={self.labelling}, "
                f"flwr_clustering {self.library_version}")

    def __repr__(self) -> str:
        """``ClusteringModel(<describe()>)``."""
        return f"ClusteringModel({self.describe()})"

    def __eq__(self, other: object) -> bool:
        """Equal fields, the centroids compared bit for bit (NaN equal to NaN)."""
        if not isinstance(other, ClusteringModel):
            return NotImplemented
        return (self.algorithm == other.algorithm and self.k == other.k
                and self.feature_names == other.feature_names
                and self.transform == other.transform
                and self.centroids.shape == other.centroids.shape
                and np.array_equal(self.centroids, other.centroids, equal_nan=True)
                and self.options == other.options
                and self.library_version == other.library_version
                and self.labelling == other.labelling)

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """The model as JSON-able values (NaN as ``None``).

        Returns
        -------
        dict
            ``format`` (:data:`MODEL_FORMAT`), ``algorithm``, ``k``, ``feature_names``,
            ``scaling``, ``center`` and ``scale`` (empty lists when not scaled),
            ``categories`` (the levels of each one-hot encoded column, whose features
            ``"<column>=<level>"`` come last), ``missing`` and ``fill`` (what a missing
            cell becomes: ``mean`` fills it with ``fill``, the federation's means in
            original units; ``drop`` labels its row -1; ``keep`` reads it as unobserved),
            ``datetime-columns`` (the features that are dates, in seconds since
            1970-01-01 00:00 UTC; only when there are),
            ``centroids`` (original units, what a person reads), ``model-centroids`` (the
            scaled space, what labels rows; exact), ``labelling``, ``options``,
            ``library-version``.
        """
        t = self.transform
        dates = {"datetime-columns": list(t.datetimes)} if t.datetimes else {}
        return {
            "format": MODEL_FORMAT,
            "algorithm": self.algorithm,
            "k": self.k,
            "feature_names": list(self.feature_names),
            "scaling": t.scaling,
            "center": [float(c) for c in t.center],
            "scale": [float(s) for s in t.scale],
            "categories": {c: list(levels) for c, levels in t.categories},
            "missing": t.missing,
            "fill": [float(v) for v in t.fill],
            **dates,
            "centroids": _nan_to_none(self.centroids_original.tolist()),
            "model-centroids": _nan_to_none(self.centroids.tolist()),
            "labelling": self.labelling,
            "options": self.options,
            "library-version": self.library_version,
        }

    def to_json(self) -> str:
        """The model as strict JSON (no ``NaN`` token: ``null``), indented by one space."""
        return json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusteringModel:
        """Read :meth:`to_dict`'s output.

        Parameters
        ----------
        data : mapping
            A model file's contents.

        Returns
        -------
        ClusteringModel

        Raises
        ------
        ValueError
            If ``data`` is not a model of :data:`MODEL_FORMAT` (another ``format``, a
            missing key, a value of the wrong type), or its readable ``centroids`` do not
            match ``model-centroids`` (the file was edited: ``model-centroids`` label rows).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a model is a JSON object, got {type(data).__name__}")
        if "format" not in data:
            raise ValueError(f"not a flwr-clustering model: no key 'format' (expected "
                             f"{MODEL_FORMAT!r})")
        if data["format"] != MODEL_FORMAT:
            raise ValueError(f"model format {data['format']!r} is not {MODEL_FORMAT!r}: "
                             "written by another version of flwr_clustering?")
        missing = [key for key in _KEYS if key not in data]
        if missing:
            raise ValueError(f"the model lacks key(s) {missing}")
        for key in ("feature_names", "center", "scale", "centroids", "model-centroids"):
            if not isinstance(data[key], list):
                raise ValueError(f"model key {key!r} must be a list, got "
                                 f"{type(data[key]).__name__}")
        for key in ("algorithm", "scaling", "labelling", "library-version"):
            if not isinstance(data[key], str):
                raise ValueError(f"model key {key!r} must be a string, got {data[key]!r}")
        if not all(isinstance(f, str) for f in data["feature_names"]):
            raise ValueError("model key 'feature_names' must hold strings")
        if not isinstance(data["options"], Mapping):
            raise ValueError("model key 'options' must be an object")
        features = tuple(data["feature_names"])
        center, scale = _floats(data["center"], "center"), _floats(data["scale"], "scale")
        categories = data.get("categories") or {}
        if not isinstance(categories, Mapping) or not all(
                isinstance(v, list) and all(isinstance(x, str) for x in v)
                for v in categories.values()):
            raise ValueError("model key 'categories' must map column names to lists of "
                             "levels")
        dates = data.get("datetime-columns") or []
        if not isinstance(dates, list) or not all(isinstance(c, str) for c in dates):
            raise ValueError("model key 'datetime-columns' must be a list of column names")
        fill = _floats(data.get("fill") or [], "fill")
        transform = FeatureTransform(features, data["scaling"], tuple(center.tolist()),
                                     tuple(scale.tolist()),
                                     tuple((str(c), tuple(v)) for c, v in categories.items()),
                                     str(data.get("missing", "keep")), tuple(fill.tolist()),
                                     datetimes=tuple(dates))
        C = _floats(data["model-centroids"], "model-centroids")
        if C.ndim == 1 and C.size == 0:  # [] is no centroid: let the model say so
            C = C.reshape(0, len(features))
        model = cls(algorithm=data["algorithm"], k=data["k"], feature_names=features,
                    transform=transform, centroids=C, options=dict(data["options"]),
                    library_version=data["library-version"], labelling=data["labelling"])
        shown = _floats(data["centroids"], "centroids")
        expected = model.centroids_original
        if shown.shape != expected.shape or not np.allclose(
                shown, expected, rtol=1e-9, atol=1e-12 * max(1.0, float(np.nanmax(
                    np.abs(expected), initial=0.0))), equal_nan=True):
            raise ValueError("the model's 'centroids' (original units) do not match its "
                             "'model-centroids' with the scaling: the file was edited? "
                             "'model-centroids' (the scaled space) are what label rows")
        return model

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model to ``path`` (strict JSON, atomically: a reader never sees half).

        Parameters
        ----------
        path : str or os.PathLike
            The file, conventionally ``model.json``; its directory must exist.

        Returns
        -------
        pathlib.Path
            ``path``.
        """
        path = Path(path)
        atomic_write_text(path, self.to_json())
        return path

    # ------------------------------------------------------------------ labels

    def predict(self, X: Any) -> np.ndarray:
        """The cluster of every row, as the clients label theirs.

        Parameters
        ----------
        X : pandas.DataFrame, FeatureTable or array_like of shape (n, d)
            New rows in the original units. A DataFrame (or FeatureTable) is read by
            column name in :attr:`feature_names` order; its other columns (an id, a label)
            are ignored and logged at INFO. An array must have the features as columns, in
            :attr:`feature_names` order. NaN marks an unobserved feature (masked labelling
            only; a row needs at least one observed feature).

        Returns
        -------
        numpy.ndarray of shape (n,), int64
            Index of the nearest centroid of every row (empty for no row).

        Raises
        ------
        ValueError
            If the model's labelling is not one of :data:`LABELLINGS` (naming the
            algorithm and where its model is kept), a feature column is missing (naming it)
            or holds text, an array's width is not ``d``, or a value is inf, or NaN (unless
            the labelling is masked).
        """
        if self.labelling not in LABELLINGS:
            where = _ARTIFACTS.get(self.labelling, "the run's own result files")
            raise ValueError(
                f"the {self.algorithm!r} model labels rows by its {self.labelling!r} rule, "
                f"not by the nearest centroid: predict cannot label with it; its model is "
                f"in {where}")
        if self.transform.categories or self.transform.datetimes:
            return self._predict_categorical(X)
        X, names = self._rows(X)
        if len(X) == 0:
            return np.empty(0, dtype=np.int64)
        masked = self.labelling == _MASKED
        dropped = self._dropped(X)
        if dropped is not None:
            return dropped
        filled = self.transform.missing == "mean" and bool(self.transform.fill)
        bad = np.isinf(X) if masked or filled else ~np.isfinite(X)
        if bad.any():
            row, col = (int(v) for v in np.argwhere(bad)[0])
            what = "inf" if masked or filled else "NaN or inf"
            hint = "" if masked or filled else (
                f": impute or drop those rows (this model's labelling, {self.labelling!r}, "
                "needs every feature)")
            raise ValueError(f"the data hold {what} in {int(bad.sum())} value(s) (first: row "
                             f"{row}, column {names[col]!r}){hint}")
        Z = self.transform.transform(X)
        if not masked:
            return nearest_labels(Z, self.centroids)
        from flwr_clustering.algorithms.masked import pooled_masked_squared_distances

        empty = np.isnan(Z).all(axis=1)
        if empty.any():
            raise ValueError(f"{int(empty.sum())} row(s) observe no feature (every value NaN; "
                             f"first: row {int(np.argmax(empty))}): they cannot be labelled")
        d2 = pooled_masked_squared_distances(Z, self.centroids)
        lost = ~np.isfinite(d2).any(axis=1)
        if lost.any():
            raise ValueError(f"{int(lost.sum())} row(s) observe only features no centroid has "
                             f"a value on (first: row {int(np.argmax(lost))}): they cannot "
                             "be labelled")
        return np.argmin(d2, axis=1).astype(np.int64)

    def _dropped(self, X: np.ndarray) -> np.ndarray | None:
        """Labels with -1 for the rows with a missing cell (``missing='drop'``), else None."""
        if self.transform.missing != "drop":
            return None
        keep = self.transform.complete_rows(X)
        if keep.all():
            return None
        out = np.full(len(X), -1, dtype=np.int64)
        if keep.any():
            out[keep] = self.predict(X[keep])
        return out

    def _predict_categorical(self, X: Any) -> np.ndarray:
        """Labels of a table with categorical or date columns (by name, as the clients)."""
        transform = self.transform
        needed = [*transform.numeric_features, *(c for c, _ in transform.categories)]
        pd = sys.modules.get("pandas")
        if pd is not None and isinstance(X, pd.DataFrame):
            missing = [c for c in needed if c not in {str(n) for n in X.columns}]
            if missing:
                raise ValueError(f"the data lack column(s) {missing}; the model reads "
                                 f"{needed}")
            self._log_extra([str(n) for n in X.columns if str(n) not in needed])
            X = FeatureTable.from_frame(X[[n for n in X.columns if str(n) in needed]])
        if not isinstance(X, FeatureTable):
            raise ValueError(f"the model reads the categorical or date column(s) "
                             f"{[c for c, _ in transform.categories] + list(transform.datetimes)}"
                             ": pass a DataFrame with the columns by name")
        if len(X.X) == 0:
            return np.empty(0, dtype=np.int64)
        Z = transform.apply(X)
        if transform.missing == "drop":  # a row with a missing cell: -1, as at the sites
            keep = transform.complete_rows(Z)
            out = np.full(len(Z), -1, dtype=np.int64)
            if keep.any():
                out[keep] = nearest_labels(Z[keep], self.centroids)
            return out
        if not np.isfinite(Z).all():
            raise ValueError("the data hold NaN or inf in a numeric feature: impute or drop "
                             "those rows")
        return nearest_labels(Z, self.centroids)

    def _rows(self, X: Any) -> tuple[np.ndarray, tuple[str, ...]]:
        """``X``'s feature columns as a float64 (n, d) array, and the names for errors."""
        names = self.feature_names
        pd = sys.modules.get("pandas")  # a DataFrame means pandas is imported already
        if pd is not None and isinstance(X, pd.DataFrame):
            return self._frame_rows(X), names
        if isinstance(X, FeatureTable):
            extra = [n for n in X.all_names if n not in names]
            self._log_extra(extra)
            return np.asarray(X.columns(names), dtype=np.float64), names
        arr = np.asarray(X)
        if arr.ndim == 1 and arr.size == 0:
            arr = arr.reshape(0, self.n_features)
        if arr.ndim != 2:
            hint = " (one row: X.reshape(1, -1))" if arr.ndim == 1 else ""
            raise ValueError(f"X must be a 2-D array (n, {self.n_features}) or a DataFrame, "
                             f"got shape {arr.shape}{hint}")
        if arr.shape[1] != self.n_features:
            raise ValueError(f"X has {arr.shape[1]} columns, the model {self.n_features} "
                             f"features ({', '.join(names)}): pass a DataFrame to select "
                             "them by name")
        if arr.dtype.kind not in "biuf":
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError) as ex:
                raise ValueError(f"X must hold numbers, got dtype {arr.dtype}: {ex}") from ex
        return np.ascontiguousarray(arr, dtype=np.float64), names

    def _frame_rows(self, frame: Any) -> np.ndarray:
        import pandas as pd

        by_name: dict[str, Any] = {}
        for col in frame.columns:
            if str(col) in by_name:
                raise ValueError(f"the data have two columns named {str(col)!r}")
            by_name[str(col)] = col
        missing = [f for f in self.feature_names if f not in by_name]
        if missing:
            raise ValueError(f"the data lack column(s) {missing}; the model's features are "
                             f"{list(self.feature_names)}")
        self._log_extra([n for n in by_name if n not in self.feature_names])
        out = np.empty((len(frame), self.n_features), dtype=np.float64)
        for j, name in enumerate(self.feature_names):
            col = frame[by_name[name]]
            kind = getattr(col.dtype, "kind", "O")
            if kind in "biuf":
                out[:, j] = col.to_numpy(dtype=np.float64, na_value=np.nan)
                continue
            if kind != "O" and not pd.api.types.is_string_dtype(col.dtype):
                raise ValueError(f"column {name!r} holds {col.dtype} values, not numbers")
            try:
                values = pd.to_numeric(col, errors="coerce")
            except (TypeError, ValueError) as ex:
                raise ValueError(f"column {name!r} does not hold numbers: {ex}") from ex
            text = values.isna().to_numpy() & col.notna().to_numpy()
            if text.any():
                row = int(np.flatnonzero(text)[0])
                raise ValueError(f"column {name!r} holds text, not numbers: {int(text.sum())} "
                                 f"value(s), first {col.iloc[row]!r} (row {row})")
            out[:, j] = values.to_numpy(dtype=np.float64, na_value=np.nan)
        return out

    def _log_extra(self, extra: list[str]) -> None:
        if extra:
            logger.info("ignoring column(s) %s: not among the %s model's features %s",
                        extra, self.algorithm, list(self.feature_names))


def load_model(path: str | os.PathLike[str]) -> ClusteringModel:
    """Read a model file written by :meth:`ClusteringModel.save`.

    Parameters
    ----------
    path : str or os.PathLike
        The file (``model.json``).

    Returns
    -------
    ClusteringModel

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        Naming the path: the file is not UTF-8 JSON (or nests deeper than Python
        reads), or not a model of :data:`MODEL_FORMAT` (:meth:`ClusteringModel.from_dict`'s
        reasons).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file {str(path)!r}"
                                + (" (it is a directory)" if path.is_dir() else ""))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as ex:
        raise ValueError(f"{str(path)!r} is not a model file: not JSON ({ex})") from ex
    except RecursionError:  # a JSON nested thousands of levels deep
        raise ValueError(f"{str(path)!r} is not a model file of flwr_clustering: its JSON "
                         "nests deeper than Python reads (a model.json is a few levels "
                         "deep): give the model.json that a run wrote") from None
    try:
        return ClusteringModel.from_dict(data)
    except RecursionError:
        raise ValueError(f"{str(path)!r} is not a model file of flwr_clustering: it nests "
                         "deeper than a model (a few levels): give the model.json that a "
                         "run wrote") from None
    except ValueError as ex:
        raise ValueError(f"{str(path)!r} is not a usable model: {ex}") from ex
