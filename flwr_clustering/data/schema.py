"""The federation's features: one schema agreed across sites, and their scaling.

A consortium's sites export their own files: the same columns in another order, raw units,
an identifier column, a text column. This module turns what the sites *say about* their
columns (names and kinds, never values) into one agreed feature list, and the sites' sums
into one scaling, so that every algorithm sees the same features in the same order and in
comparable units (:class:`FeatureTransform`). Layer 2: NumPy only (pandas for DataFrames).

* :class:`FeatureTable` -- a site's columns by name (a numeric matrix plus text and
  date/time columns).
* :func:`describe_columns` -- per column its name, kind (``numeric``, ``integer``,
  ``text``, ``datetime``) and whether every row holds another value (metadata a site
  sends in round 0).
* :func:`agree_schema` -- the federation's features, or a :class:`SchemaError` naming the
  site, the columns and the option that resolves it.
* :func:`column_moments` / :func:`scaling_from_moments` -- per-feature counts, sums, sums of
  squares and extremes (additive, except the extremes) and the scaling they give.
* :class:`FeatureTransform` -- the agreed features and scaling, applied by every client,
  inverted for everything a user reads (centroids, profiles, plots).
* :func:`epoch_seconds` / :func:`datetime_seconds` -- dates and times, in any unit or
  time zone, as the one unit every site uses: float seconds since 1970-01-01 00:00 UTC.

The federation's order (no ``feature-columns`` given): the column order that most sites
share; between orders that as many sites share, the one of the site listed first (the
lowest client id). Columns are matched by name, so the order changes only the layout of
the results, never the clustering.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any

import numpy as np

__all__ = [
    "COMPLEX_HINT",
    "CONTINUOUS_LEVELS",
    "CONTINUOUS_SHARE",
    "EPOCH",
    "DROP_LEAVES_NO_ROW",
    "OTHER",
    "ID_NAME_TOKENS",
    "KINDS",
    "MAX_MISSING_SHARE",
    "MIN_ID_ROWS",
    "MISSING",
    "MISSING_LEVEL",
    "SCALINGS",
    "ROBUST_MIN_SITES",
    "ROBUST_SCALE_FACTOR",
    "ROBUST_SPARSE_FACTOR",
    "SPREAD_RATIO",
    "RobustMoments",
    "ColumnInfo",
    "FeatureTable",
    "FeatureTransform",
    "Schema",
    "SchemaError",
    "SiteDataError",
    "CATEGORICAL_WEIGHTS",
    "agree_categories",
    "agree_schema",
    "categorical_scales",
    "category_counts",
    "column_moments",
    "continuous_columns",
    "datetime_seconds",
    "describe_columns",
    "epoch_seconds",
    "is_datetime_column",
    "looks_like_id_name",
    "one_hot",
    "one_hot_name",
    "parse_datetime_text",
    "robust_moments",
    "robust_scaling_warnings",
    "scaling_from_moments",
    "self_scaled_warning",
    "site_unit_powers",
    "spread_warning",
    "unit_factor",
    "unit_mismatches",
    "unit_powers",
]

#: Column kinds a site declares.
KINDS: tuple[str, ...] = ("numeric", "integer", "text", "datetime")

#: Values of the ``scaling`` option: z-scores (``StandardScaler``), ``[0, 1]``
#: (``MinMaxScaler``), the rows as they are.
SCALINGS: tuple[str, ...] = ("standard", "minmax", "none")

#: Values of the ``missing`` option (what a missing cell of a numeric feature becomes):
#: ``mean`` the federation's mean of the feature (from the scaling's sums), ``drop`` the
#: row is left out (labelled -1), ``partial`` the row is clustered on its observed
#: features (algorithms that read NaN as unobserved), ``refuse`` an error naming the file,
#: the column and the count. ``auto``: ``partial`` where the algorithm reads NaN as
#: unobserved (masked algorithms), else ``mean``.
MISSING: tuple[str, ...] = ("auto", "mean", "drop", "partial", "refuse")

#: Part of a client's error when ``missing='drop'`` leaves it no row (the server refuses
#: the run on it, naming the option, rather than go on without the site).
DROP_LEAVES_NO_ROW = "so missing='drop' leaves it no row"

#: A feature missing at more than this share of the rows of every site is refused under
#: ``missing='mean'``: more than half of its values would be the federation's mean.
MAX_MISSING_SHARE = 0.5
#: Values of the ``categorical-weight`` option: ``balanced`` (each categorical variable
#: weighs like one standardised numeric feature, :func:`categorical_scales`), ``standard``
#: (each one-hot column standardised like a measurement).
CATEGORICAL_WEIGHTS: tuple[str, ...] = ("balanced", "standard")

#: Name tokens of an identifier column (``patient_id``, ``PatientID``, ``uuid``, ``MRN``).
ID_NAME_TOKENS: frozenset[str] = frozenset({"id", "ids", "uuid", "guid", "mrn", "ssn"})
#: Whole names of an identifier column.
_ID_NAMES = frozenset({"index", "idx", "key", "rowid", "row", "record"})

#: A column whose integer or text values all differ is an identifier only where a site
#: has at least this many rows (a small site's integers differ by chance).
MIN_ID_ROWS = 30

#: With ``scaling='none'``, a feature whose standard deviation is more than this factor of
#: the median feature's makes the run warn: the widest feature decides the distances.
SPREAD_RATIO = 10.0

_OPTIONS_HINT = ("-c \"feature-columns='a,b,c'\" lists the federation's features (each site's "
                 "other columns are then ignored)")


#: What to do with complex numbers, said with every refusal of them (a file's array, an
#: estimator's array or DataFrame column): their real part alone would be clustered.
COMPLEX_HINT = ("clustering needs real numbers: give the real and imaginary parts as two "
                "columns (numpy.column_stack([X.real, X.imag])) or the magnitude "
                "(numpy.abs(X)), as the run should see them")


class SchemaError(ValueError):
    """The sites' columns do not make one federation: the message names the fix."""


class SiteDataError(ValueError):
    """A site's data cannot be used: a message for the federation and one for the site.

    ``public`` names the file (its name), the column, the row and the kind of problem and
    the fix, never a cell's value nor a line of the file: it is what a client sends the
    server. ``str(error)`` (``detail``) is the full message, with the cell or the line,
    for the site's own log and for a user reading the file on their own machine.

    Parameters
    ----------
    public : str
        The message without any value of the data.
    detail : str, optional
        The full message; default ``public``.
    """

    def __init__(self, public: str, detail: str | None = None) -> None:
        super().__init__(public if detail is None else detail)
        self.public = public

    def __reduce__(self) -> tuple[Any, ...]:
        # both messages through pickling (a Ray actor, a process pool), not the detail alone
        return type(self), (self.public, self.detail)

    @property
    def detail(self) -> str:
        """The full message (the site's own log only)."""
        return str(self)

    def prefixed(self, prefix: str) -> SiteDataError:
        """The same error with ``prefix`` (``"client 3: "``) before both messages."""
        return SiteDataError(prefix + self.public, prefix + self.detail)


@dataclass(frozen=True)
class ColumnInfo:
    """What a site says about one of its columns (never a value).

    Attributes
    ----------
    name : str
        The column's name (a position ``"0"``, ``"1"``, ... for files without names).
    kind : str
        ``"numeric"``, ``"integer"`` (every value a whole number), ``"text"`` or
        ``"datetime"`` (a date/time type, or text that reads as ISO 8601 dates).
    unique : bool
        Every row of the site holds another value (integer and text columns only).
    rows : int
        The site's rows.
    """

    name: str
    kind: str
    unique: bool = False
    rows: int = 0


@dataclass
class FeatureTable:
    """A site's columns by name: a numeric matrix and, optionally, text and date columns.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The numeric columns (float; may hold NaN).
    names : sequence of str, optional
        The names of ``X``'s columns; default positions ``"0"``, ``"1"``, ...
    text : mapping of str to numpy.ndarray, optional
        Text columns (object arrays of length n), by name.
    positional : bool, optional
        Whether the names are positions (a file without column names); default: true
        when ``names`` is not given.
    dates : mapping of str to numpy.ndarray, optional
        Date/time columns as float seconds since 1970-01-01 00:00 UTC (NaN: no date), by
        name (:func:`datetime_seconds`). A feature only where the federation declares it
        (``datetime-columns``); text columns declared so are parsed on use.
    """

    X: np.ndarray
    names: tuple[str, ...] = ()
    text: dict[str, np.ndarray] = field(default_factory=dict)
    positional: bool = False
    dates: dict[str, np.ndarray] = field(default_factory=dict)
    #: Text columns declared as dates, parsed once (:meth:`seconds`).
    _parsed: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False,
                                           compare=False)

    def __post_init__(self) -> None:
        X = np.asarray(self.X)
        if X.ndim != 2:
            raise ValueError(f"a feature table needs a 2-D matrix, got shape {X.shape}")
        self.X = X
        if not self.names:
            self.names = tuple(str(j) for j in range(X.shape[1]))
            self.positional = True
        self.names = tuple(str(n) for n in self.names)
        if len(self.names) != X.shape[1]:
            raise ValueError(f"{len(self.names)} column names for {X.shape[1]} columns")
        self.text = {str(n): v for n, v in self.text.items()}
        self.dates = {str(n): np.asarray(v, dtype=np.float64) for n, v in self.dates.items()}
        everything = list(self.all_names)
        duplicated = sorted({n for n in everything if everything.count(n) > 1})
        if duplicated:
            raise ValueError(f"column names appear twice: {duplicated}")
        for kind, columns in (("text", self.text), ("date", self.dates)):
            for name, values in columns.items():
                if len(values) != len(X):
                    raise ValueError(f"{kind} column {name!r} has {len(values)} rows, the "
                                     f"table {len(X)}")

    @classmethod
    def from_frame(cls, frame: Any) -> FeatureTable:
        """A table from a pandas DataFrame: numbers to ``X``, dates to ``dates``, the rest text.

        Booleans become 0/1 and a nullable integer or boolean column's missing values
        (``pd.NA``) NaN; durations become seconds; date/time columns (any unit, with or
        without a time zone, and columns of ``datetime.date`` objects) become seconds
        since the epoch in ``dates`` (:func:`datetime_seconds`).

        Raises
        ------
        SiteDataError
            If a column mixes numbers and text (its public message names the column and
            the row of the first text cell; the cell itself is in the detail only).
        ValueError
            If two columns have the same name (as text), or a column holds complex
            numbers.
        """
        import pandas as pd

        names = [str(n) for n in frame.columns]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # frame[name] would be a DataFrame of the copies
            raise ValueError(
                f"column name(s) {_listing(twice)} appear twice (positions "
                + "; ".join(f"{n!r}: {', '.join(str(j) for j, m in enumerate(names) if m == n)}"
                            for n in twice)
                + "): give each column its own name (frame.columns.duplicated() finds the "
                "copies; frame.loc[:, ~frame.columns.duplicated()] drops them)")
        numeric: dict[str, np.ndarray] = {}
        text: dict[str, np.ndarray] = {}
        dates: dict[str, np.ndarray] = {}
        for name in frame.columns:
            col = frame[name]
            if col.dtype.kind == "c":
                raise ValueError(f"column {str(name)!r} holds complex numbers "
                                 f"(dtype {col.dtype}): " + COMPLEX_HINT)
            if is_datetime_column(col):
                dates[str(name)] = datetime_seconds(col)
                continue
            if col.dtype.kind == "m":  # a duration: seconds, whatever its unit
                numeric[str(name)] = col.dt.total_seconds().to_numpy(
                    dtype=np.float64, na_value=np.nan)
                continue
            if str(col.dtype) == "category":
                text[str(name)] = col.astype(object).to_numpy()
                continue
            if col.dtype.kind in "biuf":  # bool: 0/1; Int64, boolean: pd.NA is NaN
                numeric[str(name)] = col.to_numpy(dtype=np.float64, na_value=np.nan)
                continue
            values = pd.to_numeric(col, errors="coerce")
            bad = values.isna() & col.notna()
            if bad.all() or not values.notna().any():
                text[str(name)] = col.to_numpy(dtype=object)
            elif bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                where = (f"in column {name!r} (data row {row + 1}, 1-based), "
                         f"{int(bad.sum())} such cell(s): a column of numbers holds text; "
                         "fix or empty those cells, or leave the column out")
                raise SiteDataError(f"non-numeric value {where}",
                                    f"non-numeric value {col.iloc[row]!r} {where}")
            else:
                numeric[str(name)] = values.to_numpy(dtype=np.float64, na_value=np.nan)
        X = (np.column_stack(list(numeric.values())) if numeric
             else np.empty((len(frame), 0)))
        return cls(X, tuple(numeric), text, dates=dates)

    def values(self, name: str) -> np.ndarray:
        """One column's values (text, numbers, or a date column's seconds), by name.

        Raises
        ------
        SchemaError
            If the table has no such column.
        """
        if name in self.text:
            return self.text[name]
        if name in self.dates:
            return self.dates[name]
        if name in self.names:
            return self.X[:, self.names.index(name)]
        raise SchemaError(f"no column {name!r}; the columns are {list(self.all_names)}")

    @property
    def all_names(self) -> tuple[str, ...]:
        """Every column: the numeric ones, then the text ones, then the dates."""
        return self.names + tuple(self.text) + tuple(self.dates)

    def seconds(self, name: str) -> np.ndarray:
        """A declared date column as float seconds since 1970-01-01 00:00 UTC (NaN: none).

        A text column is parsed (:func:`parse_datetime_text`) once, on first use.

        Raises
        ------
        SchemaError
            If the column holds numbers, or a text cell that is not a date (naming the
            column and the row, never the cell), or the table has no such column.
        """
        if name in self.dates:
            return self.dates[name]
        if name in self.text:
            if name not in self._parsed:
                self._parsed[name] = parse_datetime_text(self.text[name], name)
            return self._parsed[name]
        if name in self.names:
            raise SchemaError(
                f"column {name!r} is declared in datetime-columns but holds numbers: a date "
                "column holds dates (a date/time type, or text such as 2024-03-01); leave "
                "it out of datetime-columns (a number is a feature as it is)")
        raise SchemaError(f"no column {name!r}; the columns are {list(self.all_names)}")

    def columns(self, names: Sequence[str], datetimes: Sequence[str] = ()) -> np.ndarray:
        """The numeric columns ``names``, in that order (``X`` itself when it is ``X``'s).

        ``datetimes``: those of ``names`` that are declared dates, taken as seconds since
        the epoch (:meth:`seconds`).

        Raises
        ------
        SchemaError
            If a name is missing, or is a text or date column not declared so.
        """
        names = [str(n) for n in names]
        declared = {str(n) for n in datetimes}
        position = {n: j for j, n in enumerate(self.names)}
        dated = [n for n in names if n in self.dates and n not in declared]
        if dated:
            raise SchemaError(
                f"column(s) {dated} hold dates or times, not numbers: declare them with "
                f"-c \"datetime-columns='{dated[0]}'\" (seconds since 1970-01-01 UTC at "
                "every site), or leave them out")
        text = [n for n in names if n in self.text and n not in declared]
        if text:
            raise SchemaError(f"column(s) {text} hold text, not numbers")
        if declared & set(names):
            parts = [self.seconds(n) if n in declared else self.X[:, position[n]]
                     if n in position else None for n in names]
            missing = [n for n, part in zip(names, parts, strict=True) if part is None]
            if missing:
                raise SchemaError(f"no column(s) {missing}; the columns are "
                                  f"{list(self.all_names)}")
            return np.column_stack([np.asarray(p, dtype=np.float64) for p in parts])
        missing = [n for n in names if n not in position]
        if missing and self.positional and len(names) == self.X.shape[1] and not self.text:
            return self.X  # a file without names: its columns by position (agree_schema)
        if missing:
            raise SchemaError(f"no column(s) {missing}; the columns are {list(self.all_names)}")
        idx = [position[n] for n in names]
        if idx == list(range(self.X.shape[1])):
            return self.X
        return np.ascontiguousarray(self.X[:, idx])


# ---------------------------------------------------------------------------- dates

#: Whatever their unit (ns, us, ms, s) or time zone, dates become float seconds since
#: this instant; a date without a time zone is taken as UTC.
EPOCH = "1970-01-01T00:00:00Z"


def epoch_seconds(values: np.ndarray) -> np.ndarray:
    """``datetime64`` values in any unit as float seconds since the epoch (NaT: NaN).

    The same instant gives the same float in every unit: the whole seconds are counted in
    integers and only the fraction of a second is divided (so a timestamp in nanoseconds
    at one site and in milliseconds at another agree exactly).
    """
    values = np.asarray(values)
    if values.dtype.kind != "M":
        raise ValueError(f"epoch_seconds takes datetime64 values, got dtype {values.dtype}")
    unit, count = np.datetime_data(values.dtype)
    if count != 1:
        values = values.astype(f"datetime64[{unit}]")
    if unit in ("Y", "M", "W", "D", "h", "m", "s", "generic"):
        values = values.astype("datetime64[s]")
        unit = "s"
    nat = np.isnat(values)
    ticks = values.view(np.int64)
    per_second = int(np.timedelta64(1, "s") // np.timedelta64(1, unit))
    whole, rest = np.divmod(np.where(nat, 0, ticks), per_second)
    out = whole.astype(np.float64) + rest.astype(np.float64) / per_second
    out[nat] = np.nan
    return out


def is_datetime_column(column: Any) -> bool:
    """Whether a pandas Series holds dates or times.

    A ``datetime64`` type in any unit, with or without a time zone, or objects that are
    all ``datetime.date`` or ``datetime.datetime``.
    """
    if column.dtype.kind == "M":
        return True
    if column.dtype != object:
        return False
    import pandas as pd

    return pd.api.types.infer_dtype(column, skipna=True) in ("date", "datetime",
                                                             "datetime64")


def datetime_seconds(column: Any) -> np.ndarray:
    """A pandas date/time column as float seconds since 1970-01-01 00:00 UTC.

    A time zone is converted to UTC; a time without one is taken as UTC. Missing
    (``NaT``, ``None``) is NaN.
    """
    import pandas as pd

    if isinstance(column.dtype, pd.DatetimeTZDtype):
        values = column.dt.tz_convert("UTC").dt.tz_localize(None)
    elif column.dtype.kind == "M":
        values = column
    else:  # datetime.date / datetime objects, maybe with time zones
        values = pd.to_datetime(column, utc=True).dt.tz_localize(None)
    array = values.to_numpy()
    if array.dtype.kind != "M":  # an extension type (pyarrow timestamps)
        array = pd.to_datetime(values).to_numpy()
    return epoch_seconds(array)


def _parse_text_dates(values: Any) -> tuple[Any, Any]:
    """Text as UTC timestamps (``NaT`` where a cell does not parse), and its missing mask."""
    import warnings

    import pandas as pd

    text = pd.Series(np.asarray(values, dtype=object), dtype=object)
    missing = text.isna() | text.map(lambda v: isinstance(v, str) and not v.strip())
    present = text.where(~missing, None)
    with warnings.catch_warnings():  # "could not infer format": the refusal says it
        warnings.simplefilter("ignore", UserWarning)
        parsed = pd.to_datetime(present, format="ISO8601", utc=True, errors="coerce")
        if (parsed.isna() & ~missing).any():
            other = pd.to_datetime(present, utc=True, errors="coerce")
            if (other.isna() & ~missing).sum() < (parsed.isna() & ~missing).sum():
                parsed = other
    return parsed, missing


def parse_datetime_text(values: Any, name: str) -> np.ndarray:
    """A text column declared as dates, as float seconds since 1970-01-01 00:00 UTC.

    Read as pandas reads dates (``pandas.to_datetime``: ISO 8601 such as ``2024-03-01``
    or ``2024-03-01T14:30:00+01:00``, else one format inferred for the whole column); a
    time zone is converted to UTC, a time without one taken as UTC; an empty cell is a
    missing cell (NaN).

    Raises
    ------
    SchemaError
        On a cell that is not a date, naming the column, its row and how many cells do
        not parse (never a cell's value).
    """
    parsed, missing = _parse_text_dates(values)
    bad = (parsed.isna() & ~missing).to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SchemaError(
            f"column {name!r} is declared in datetime-columns, but data row {row + 1} "
            f"(1-based) is not a date ({int(bad.sum())} such cell(s)): write the dates "
            "in ISO 8601 (2024-03-01 or 2024-03-01T14:30:00), or in one format throughout "
            "the column; an empty cell is a missing date")
    seconds = np.full(len(parsed), np.nan)
    keep = ~missing.to_numpy()
    if keep.any():
        seconds[keep] = datetime_seconds(parsed[keep])
    return seconds


def _text_is_dates(values: np.ndarray) -> bool:
    """Whether every text cell reads as an ISO 8601 date (an undeclared date column)."""
    first = next((v for v in values if isinstance(v, str) and v.strip()), None)
    if first is None or "-" not in first.strip()[1:]:  # 2024-03-01, not -3 nor 20240301
        return False
    import pandas as pd

    try:
        pd.to_datetime([first.strip()], format="ISO8601", utc=True)
    except (ValueError, TypeError, OverflowError):
        return False
    text = pd.Series(np.asarray(values, dtype=object), dtype=object)
    filled = text.map(lambda v: isinstance(v, str) and bool(v.strip()))
    blank = text.isna() | text.map(lambda v: isinstance(v, str) and not v.strip())
    if int(filled.sum()) + int(blank.sum()) != len(text):
        return False  # numbers among the text (a mixed column)
    present = text[filled]
    parsed = pd.to_datetime(present.str.strip(), format="ISO8601", utc=True,
                            errors="coerce")
    return not bool(parsed.isna().any())


#: The level of a categorical column that stands for every value the federation did not
#: agree on (a value rarer than the privacy threshold at a site, or new at prediction).
OTHER = "other"

#: The level of a categorical column that stands for a missing cell (an empty cell, NaN,
#: None): a level of its own, agreed like any value.
MISSING_LEVEL = "missing"


def one_hot_name(column: str, level: str) -> str:
    """The feature of one level of a categorical column: ``"city=Leiden"``."""
    return f"{column}={level}"


def _as_levels(values: np.ndarray) -> np.ndarray:
    """Values of a categorical column as text (whole numbers without ``.0``; NaN None)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            out[i] = None
        elif isinstance(v, float | np.floating) and float(v).is_integer():
            out[i] = str(int(v))
        else:
            out[i] = str(v)
    return out


def one_hot(values: np.ndarray, levels: Sequence[str]) -> np.ndarray:
    """One-hot rows of a categorical column over the agreed ``levels``.

    A missing value (empty cell, NaN, None) is the level :data:`MISSING_LEVEL`; a value
    outside the levels (a missing one included, where the federation did not agree on a
    ``missing`` level) counts as :data:`OTHER` (the last level).
    """
    text = _as_levels(values)
    index = {level: j for j, level in enumerate(levels)}
    other = index.get(OTHER)
    out = np.zeros((len(text), len(levels)))
    for i, v in enumerate(text):
        j = index.get(MISSING_LEVEL if v is None else v, other)
        if j is not None:
            out[i, j] = 1.0
    return out


def category_counts(table: FeatureTable, columns: Sequence[str], min_rows: int
                    ) -> dict[str, dict[str, int]]:
    """A site's values of its categorical columns with their counts (for the agreement).

    A value held by fewer than ``min_rows`` rows of the site is reported as :data:`OTHER`
    only, so the server never learns a value that identifies fewer rows. Missing cells are
    counted as the level :data:`MISSING_LEVEL`.
    """
    out = {}
    for column in columns:
        counts: dict[str, int] = {}
        for v in _as_levels(table.values(column)):
            v = MISSING_LEVEL if v is None else v
            counts[v] = counts.get(v, 0) + 1
        kept = {v: n for v, n in counts.items() if n >= max(int(min_rows), 1)}
        rare = sum(n for v, n in counts.items() if v not in kept)
        if rare:
            kept[OTHER] = kept.get(OTHER, 0) + rare
        out[str(column)] = kept
    return out


#: A declared categorical column is continuous at a site (a measurement, not categories)
#: when it holds more than this many distinct values ...
CONTINUOUS_LEVELS = 50
#: ... on more than this share of the site's rows with a value.
CONTINUOUS_SHARE = 0.5


def continuous_columns(table: FeatureTable, columns: Sequence[str]) -> list[str]:
    """Which declared categorical ``columns`` are continuous at this site.

    A column is continuous when it holds more than :data:`CONTINUOUS_LEVELS` distinct
    values and more distinct values than :data:`CONTINUOUS_SHARE` of the site's rows with
    a value: one-hot encoded, nearly every value would be rarer than the privacy
    threshold and fold into :data:`OTHER`. The site reports the column's name only.
    """
    out = []
    for column in columns:
        present = [v for v in _as_levels(table.values(column)) if v is not None]
        distinct = len(set(present))
        if distinct > CONTINUOUS_LEVELS and distinct > CONTINUOUS_SHARE * len(present):
            out.append(str(column))
    return out


def agree_categories(sites: Mapping[str, Mapping[str, Mapping[str, int]]],
                     columns: Sequence[str], min_rows: int, *,
                     continuous: Mapping[str, Sequence[str]] | None = None,
                     ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The federation's levels of every categorical column, from the sites' counts.

    A value held by fewer than ``min_rows`` rows in the whole federation folds into
    :data:`OTHER`; the levels are sorted, :data:`OTHER` last (always present, for values
    a site kept back and for new values at prediction).

    Parameters
    ----------
    sites : mapping
        Per site (``"client 3"``) its counts (:func:`category_counts`).
    columns : sequence of str
        The declared categorical columns.
    min_rows : int
        The privacy threshold.
    continuous : mapping of str to sequence of str, optional
        Per site the declared columns it found continuous (:func:`continuous_columns`).

    Raises
    ------
    SchemaError
        When a site found a declared column continuous, naming the column and the sites.
    """
    flagged: dict[str, list[str]] = {}
    for site, names in (continuous or {}).items():
        for column in names:
            flagged.setdefault(str(column), []).append(site)
    if flagged:
        raise SchemaError(
            "categorical-columns names continuous column(s): " + "; ".join(
                f"{c!r} at {', '.join(s)}" for c, s in flagged.items())
            + f" (more than {CONTINUOUS_LEVELS} distinct values, over "
            f"{CONTINUOUS_SHARE:.0%} of the site's rows): one-hot encoded, nearly every "
            f"value would fold into {OTHER!r}; leave it out of categorical-columns (a "
            "number is then a feature as it is, scaled like the others), or bin it into "
            "a few categories at the sites first")
    out = []
    for column in columns:
        total: dict[str, int] = {}
        for counts in sites.values():
            for v, n in counts.get(column, {}).items():
                total[v] = total.get(v, 0) + int(n)
        levels = sorted(v for v, n in total.items() if n >= max(int(min_rows), 1)
                        and v != OTHER)
        out.append((str(column), (*levels, OTHER)))
    return tuple(out)


def looks_like_id_name(name: str) -> bool:
    """Whether a column's name says it is an identifier (``patient_id``, ``PatientID``)."""
    text = str(name).strip()
    if text.lower() in _ID_NAMES:
        return True
    # camelCase and separators: "PatientID" -> patient, id; "record-no" -> record, no
    tokens = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", text)
    return any(t.lower() in ID_NAME_TOKENS for t in tokens)


def describe_columns(table: FeatureTable) -> list[ColumnInfo]:
    """What a site tells the federation about its columns: names, kinds, uniqueness.

    Only integer and text columns are checked for uniqueness (a sort per such column):
    those are the ones an identifier is stored in. Date/time columns, and text columns
    whose every cell reads as an ISO 8601 date, are of kind ``"datetime"``.
    """
    n = len(table.X)
    out = []
    for j, name in enumerate(table.names):
        col = table.X[:, j]
        finite = col[np.isfinite(col)]
        # whole numbers that an integer type can hold: every float64 beyond 2**53 is
        # "whole", so data in huge units (1e200) is not mistaken for an identifier
        integer = finite.size > 0 and bool(np.all(np.abs(finite) < 2.0**53)) and bool(
            np.all(finite == np.round(finite)))
        unique = integer and n >= 2 and finite.size == n and np.unique(finite).size == n
        out.append(ColumnInfo(name, "integer" if integer else "numeric", bool(unique), n))
    for name, values in table.text.items():
        present = [v for v in values if v is not None and v == v]
        unique = n >= 2 and len(present) == n and len(set(map(str, present))) == n
        kind = "datetime" if _text_is_dates(values) else "text"
        out.append(ColumnInfo(str(name), kind, bool(unique) and kind == "text", n))
    for name in table.dates:
        out.append(ColumnInfo(str(name), "datetime", False, n))
    return out


@dataclass(frozen=True)
class Schema:
    """The federation's features, in order, and the declared identifier column."""

    features: tuple[str, ...]
    index_column: str | None = None
    positional: bool = False
    #: What the user should know about the agreement (sites matched by position).
    notes: tuple[str, ...] = ()
    #: Declared categorical columns (one-hot encoded with the federation's levels).
    categorical: tuple[str, ...] = ()
    #: Declared date/time columns among ``features`` (seconds since the epoch).
    datetime: tuple[str, ...] = ()


#: The most names an error lists (then "and N more"), each cut to this many characters:
#: a site with 100,000 columns, or a name of 50,000 characters, does not make a message of
#: megabytes.
_LISTED, _LISTED_CHARS = 20, 80


def _listing(names: Sequence[str]) -> str:
    shown = [repr(n if len(n) <= _LISTED_CHARS else n[:_LISTED_CHARS] + "...")
             for n in list(names[:_LISTED])]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def agree_schema(
    sites: Mapping[str, Sequence[ColumnInfo]],
    *,
    feature_columns: Sequence[str] | None = None,
    index_column: str | None = None,
    categorical_columns: Sequence[str] = (),
    datetime_columns: Sequence[str] = (),
) -> Schema:
    """The federation's features from what every site said about its columns.

    Parameters
    ----------
    sites : mapping of str to sequence of ColumnInfo
        Per site (a display name such as ``"client 3"``, in client order) its columns, in
        its own order (:func:`describe_columns`).
    feature_columns : sequence of str, optional
        The federation's features in this order (run config ``feature-columns``); every
        site must have each of them, their other columns are ignored.
    index_column : str, optional
        A declared identifier column (run config ``index-column``): never a feature.
    categorical_columns : sequence of str
        Columns to one-hot encode (run config ``categorical-columns``): every site must
        have them; text is allowed there; they are not among ``Schema.features``.
    datetime_columns : sequence of str
        Date/time columns to use as features (run config ``datetime-columns``): each
        site converts them to seconds since 1970-01-01 UTC; they must be among the
        features. An undeclared date/time column among the features is refused.

    Returns
    -------
    Schema

    Raises
    ------
    SchemaError
        Naming the site(s), the column(s) and the option that resolves it: a site that
        lacks a column, has one the others do not, names one differently, has another
        number of unnamed columns; a text column among the features; an identifier
        (named like one, or integer or text values that differ on every row at every site
        with at least :data:`MIN_ID_ROWS` rows) that is not declared; an undeclared
        date/time column among the features, or a declared one that is not a feature or
        holds numbers; an ``index_column`` that no site has.
    """
    if not sites:
        raise SchemaError("no site described its columns")
    _check_index_column(sites, index_column)
    categorical = tuple(str(c) for c in categorical_columns)
    dated = tuple(str(c) for c in datetime_columns)
    if categorical:
        return _with_categorical(sites, categorical, feature_columns, index_column, dated)
    names = {site: [c.name for c in cols] for site, cols in sites.items()}
    unnamed = [site for site, cols in names.items() if _positional(cols)]
    if unnamed and len(unnamed) < len(sites):
        return _with_unnamed_sites(sites, unnamed, feature_columns, index_column, dated)
    info: dict[str, dict[str, ColumnInfo]] = {
        site: {c.name: c for c in cols} for site, cols in sites.items()}
    for site, cols in names.items():
        if len(set(cols)) != len(cols):
            twice = sorted(c for c, n in Counter(cols).items() if n > 1)
            raise SchemaError(f"{site}: column name(s) {_listing(twice)} appear twice")
    index = None if index_column in (None, "", "none") else str(index_column)
    positional = all(_positional(cols) for cols in names.values())

    if feature_columns is not None:
        wanted = [str(c) for c in feature_columns]
        if len(set(wanted)) != len(wanted):
            raise SchemaError(f"feature-columns lists a column twice: {wanted}")
        if index is not None and index in wanted:
            raise SchemaError(f"column {index!r} is both index-column and in feature-columns")
        problems = []
        wanted_set = set(wanted)
        for site, cols in names.items():
            held_here = set(cols)
            missing = [c for c in wanted if c not in held_here]
            if missing:
                near = _near(missing, [c for c in cols if c not in wanted_set])
                problems.append(f"{site} has no column {_listing(missing)}{near}")
        if problems:
            raise SchemaError(
                "the sites do not all have the feature-columns: " + "; ".join(problems)
                + ": rename the columns in those sites' files, or leave them out of "
                "feature-columns")
        features = wanted
    else:
        if positional:
            widths = {site: len(cols) for site, cols in names.items()}
            common = Counter(widths.values()).most_common(1)[0][0]
            odd = {s: w for s, w in widths.items() if w != common}
            if odd:
                raise SchemaError(
                    "files without column names are matched by position, so every site "
                    f"needs the same number of columns: most have {common}, "
                    + ", ".join(f"{s} has {w}" for s, w in odd.items())
                    + ": give the files a header row with the column names, or make every "
                    "site export the same columns")
        candidates = {site: [c for c in cols if c != index] for site, cols in names.items()}
        # the columns at least half the sites have are expected; a site is named for the
        # expected columns it lacks and the others it has
        held = Counter(c for cols in candidates.values() for c in cols)
        expected = [c for c in _union_in_order(candidates) if 2 * held[c] >= len(candidates)]
        problems = []
        wanted_set = set(expected)  # sets: a site with 100,000 columns stays linear
        for site, cols in candidates.items():
            held_here = set(cols)
            missing = [c for c in expected if c not in held_here]
            extra = [c for c in cols if c not in wanted_set]
            if missing or extra:
                part = f"{site}"
                if missing:
                    part += f" lacks {_listing(missing)}"
                if extra:
                    part += (" and" if missing else "") + f" has {_listing(extra)}, which "
                    part += "most sites do not have" + _near(extra, missing)
                problems.append(part)
        if problems:
            raise SchemaError(
                "the sites' columns differ: " + "; ".join(problems) + ": rename the columns "
                "so that every site uses the same names, or " + _OPTIONS_HINT)
        orders = Counter(tuple(cols) for cols in candidates.values())
        top = max(orders.values())
        features = list(next(tuple(c) for c in candidates.values()
                             if orders[tuple(c)] == top))

    _check_datetime(sites, info, features, dated, feature_columns is not None)
    text = {c: [s for s in sites if info[s][c].kind == "text"] for c in features
            if c not in dated}
    text = {c: s for c, s in text.items() if s}
    if text:
        raise SchemaError(
            "text column(s) among the features: " + "; ".join(
                f"{c!r} at {', '.join(s)}" for c, s in text.items())
            + ": clustering needs numbers; declare a column of categories with "
            f"-c \"categorical-columns='{next(iter(text))}'\" (one-hot encoded with the "
            "categories agreed across the sites), or leave it out ("
            + ("list the other columns in feature-columns" if feature_columns is None
               else "remove it from feature-columns") + "); a column of dates is "
            f"declared with -c \"datetime-columns='{next(iter(text))}'\"")
    if feature_columns is None:
        ids = [c for c in features if c not in dated
               and _looks_like_id(c, [info[s][c] for s in sites])]
        if ids:
            raise SchemaError(
                f"column(s) {_listing(ids)} look like identifiers (named like an id, or a "
                "different whole number or text on every row), and an identifier clustered "
                "as a feature gives clusters of id ranges: declare it with "
                f"-c \"index-column='{ids[0]}'\" (it is then ignored), or, if it is a real "
                "feature, list it with the others in -c \"feature-columns='...'\"")
    return Schema(tuple(features), index, positional, datetime=dated)


def _check_index_column(sites: Mapping[str, Sequence[ColumnInfo]], index_column: Any) -> None:
    """Refuse an ``index-column`` that no site has (a typo would leave the id a feature).

    As for ``feature-columns``, the refusal names the column and a near name of the
    sites' columns.
    """
    if index_column in (None, "", "none"):
        return
    index = str(index_column)
    every = _union_in_order({site: [c.name for c in cols] for site, cols in sites.items()})
    if index in every:
        return
    shown = _listing(every[:30]) + (f", ... ({len(every)} columns)" if len(every) > 30 else "")
    raise SchemaError(
        f"index-column names {index!r}, which no site has{_near([index], every)}; the "
        f"sites' columns are {shown}: check the name, or leave index-column out of the run "
        "config (a column that a SuperNode's own node-config index-column drops when it "
        "reads its file is never described to the federation, and needs none)")


def _check_datetime(sites: Mapping[str, Sequence[ColumnInfo]],
                    info: Mapping[str, Mapping[str, ColumnInfo]], features: Sequence[str],
                    dated: Sequence[str], listed: bool) -> None:
    """Refuse undeclared date columns among the features, and declared ones that are not.

    A declared date column must be a feature and hold dates (or text) at every site.
    Every refusal names the column, the sites and the option.
    """
    if len(set(dated)) != len(dated):
        raise SchemaError(f"datetime-columns lists a column twice: {list(dated)}")
    absent = [c for c in dated if c not in features]
    if absent:
        raise SchemaError(
            f"datetime-columns names {_listing(absent)}, which "
            f"{'is' if len(absent) == 1 else 'are'} not among the federation's features "
            f"{_listing(features)}: "
            + ("add it to feature-columns, or " if listed else "check the name, or ")
            + "leave it out of datetime-columns")
    numbers = {c: [s for s in sites if info[s][c].kind in ("numeric", "integer")]
               for c in dated}
    numbers = {c: s for c, s in numbers.items() if s}
    if numbers:
        raise SchemaError(
            "datetime-columns names column(s) that hold numbers: " + "; ".join(
                f"{c!r} at {', '.join(s)}" for c, s in numbers.items())
            + ": a declared date column holds dates (a date/time type, or text such as "
            "2024-03-01); leave it out of datetime-columns (a number is a feature as it "
            "is), or export the dates as dates at those sites")
    undeclared = {c: [s for s in sites if info[s][c].kind == "datetime"] for c in features
                  if c not in dated}
    undeclared = {c: s for c, s in undeclared.items() if s}
    if undeclared:
        first = next(iter(undeclared))
        raise SchemaError(
            "date/time column(s) among the features: " + "; ".join(
                f"{c!r} at {', '.join(s)}" for c, s in undeclared.items())
            + ": a site's file may hold them in its own unit (nanoseconds at one, "
            "milliseconds at another); declare them with "
            f"-c \"datetime-columns='{','.join(undeclared)}'\" (converted to seconds "
            "since 1970-01-01 UTC at every site), or leave them out ("
            + ("remove them from feature-columns" if listed
               else f"list the other columns in feature-columns, without {first!r}") + ")")


def _with_categorical(sites: Mapping[str, Sequence[ColumnInfo]], categorical: tuple[str, ...],
                      feature_columns: Sequence[str] | None,
                      index_column: str | None, dated: tuple[str, ...] = ()) -> Schema:
    """The schema of the numeric features, with the declared categorical columns beside."""
    if len(set(categorical)) != len(categorical):
        raise SchemaError(f"categorical-columns lists a column twice: {list(categorical)}")
    clash = [c for c in categorical if c == index_column or c in (feature_columns or ())]
    if clash:
        raise SchemaError(f"column(s) {_listing(clash)} are both categorical-columns and "
                          "index-column or feature-columns: name each column once")
    both = [c for c in categorical if c in dated]
    if both:
        raise SchemaError(f"column(s) {_listing(both)} are both categorical-columns and "
                          "datetime-columns: name each column once")
    missing = {site: [c for c in categorical if c not in {i.name for i in cols}]
               for site, cols in sites.items()}
    missing = {site: cols for site, cols in missing.items() if cols}
    if missing:
        raise SchemaError(
            "the sites do not all have the categorical-columns: " + "; ".join(
                f"{site} has no column {_listing(cols)}" for site, cols in missing.items())
            + ": rename the columns in those sites' files, or leave them out of "
            "categorical-columns")
    rest = {site: [c for c in cols if c.name not in categorical] for site, cols in sites.items()}
    schema = agree_schema(rest, feature_columns=feature_columns, index_column=index_column,
                          datetime_columns=dated)
    return Schema(schema.features, schema.index_column, schema.positional, schema.notes,
                  categorical, schema.datetime)


def _with_unnamed_sites(sites: Mapping[str, Sequence[ColumnInfo]], unnamed: list[str],
                        feature_columns: Sequence[str] | None,
                        index_column: str | None, dated: tuple[str, ...] = ()) -> Schema:
    """Sites with named columns and sites whose files have none (NPY, no header row).

    The named sites agree as usual; an unnamed site's columns are taken by position as the
    federation's features, which needs the same number of columns, and the schema's
    ``notes`` say so (the run warns: give that file a header row to match by name).
    """
    named = {site: cols for site, cols in sites.items() if site not in unnamed}
    schema = agree_schema(named, feature_columns=feature_columns, index_column=index_column,
                          datetime_columns=dated)
    d = len(schema.features)
    wrong = {site: len(sites[site]) for site in unnamed if len(sites[site]) != d}
    if wrong:
        raise SchemaError(
            f"{', '.join(wrong)} {'has' if len(wrong) == 1 else 'have'} a file without column "
            f"names ({', '.join(f'{s}: {w} columns' for s, w in wrong.items())}), so its "
            f"columns can only be taken by position, as the other sites' {d} features "
            f"{_listing(schema.features)}: give the file a header row with the column names")
    text = [site for site in unnamed if any(c.kind == "text" for c in sites[site])]
    if text:
        raise SchemaError(f"{', '.join(text)}: a file without column names holds text: give "
                          "it a header row with the column names")
    note = (f"{', '.join(unnamed)} {'has' if len(unnamed) == 1 else 'have'} files without "
            f"column names: their columns are taken by position as {_listing(schema.features)}"
            "; give those files a header row to have them matched by name")
    return Schema(schema.features, schema.index_column, False, (note,),
                  datetime=schema.datetime)


def _positional(cols: Sequence[str]) -> bool:
    return list(cols) == [str(j) for j in range(len(cols))]


def _union_in_order(candidates: Mapping[str, Sequence[str]]) -> list[str]:
    seen: dict[str, None] = {}
    for cols in candidates.values():
        for c in cols:
            seen.setdefault(c, None)
    return list(seen)


def _near(names: Sequence[str], others: Sequence[str]) -> str:
    """`` ('Hue' may be 'hue')`` for names that look like another site's spelling."""
    pairs = []
    lowered = {o.lower().replace(" ", "_"): o for o in others}
    others = list(others[:1000])  # difflib per name: bounded (the lowered match is not)
    for n in list(names[:_LISTED]):
        key = n.lower().replace(" ", "_")
        match = lowered.get(key) or next(iter(get_close_matches(n, others, 1, 0.8)), None)
        if match is not None:
            pairs.append(f"{n!r} may be {match!r}")
    return f" ({'; '.join(pairs)})" if pairs else ""


def _looks_like_id(name: str, infos: Sequence[ColumnInfo]) -> bool:
    if looks_like_id_name(name):
        return True
    big = [c for c in infos if c.rows >= MIN_ID_ROWS]
    return bool(big) and all(c.kind in ("integer", "text") and c.unique for c in big)


# ---------------------------------------------------------------------------- scaling


def column_moments(X: np.ndarray) -> dict[str, np.ndarray]:
    """A site's per-feature statistics for the scaling (NaN entries are left out).

    Returns
    -------
    dict
        ``"count"`` (observed values per feature), ``"sum"``, ``"sumsq"`` (additive, so
        they may be summed securely) and ``"min"``, ``"max"`` (NaN for a feature with no
        value; each is one row's value: not additive).
    """
    X = np.asarray(X, dtype=np.float64)
    observed = ~np.isnan(X)
    Z = np.where(observed, X, 0.0)
    count = observed.sum(axis=0).astype(np.float64)
    with np.errstate(all="ignore"):
        lo = np.where(count > 0, np.nanmin(np.where(observed, X, np.inf), axis=0), np.nan)
        hi = np.where(count > 0, np.nanmax(np.where(observed, X, -np.inf), axis=0), np.nan)
    return {"count": count, "sum": Z.sum(axis=0), "sumsq": (Z * Z).sum(axis=0),
            "min": lo, "max": hi}


def _scale_or_one(scale: np.ndarray) -> np.ndarray:
    """A scale of (nearly) zero becomes 1, as scikit-learn's scalers do."""
    scale = np.asarray(scale, dtype=np.float64).copy()
    scale[~(scale >= 10 * np.finfo(np.float64).eps)] = 1.0
    return scale


def _check_scaling(method: str) -> None:
    """Refuse an unknown scaling: the data layer's one check of its name.

    For a transform read from a message or a model file, and a direct call; a run's options
    are checked by their declaration (:class:`flwr_clustering.run_options.RunOptions`).
    """
    if method not in SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, got {method!r}")


def scaling_from_moments(
    method: str,
    count: np.ndarray,
    total: np.ndarray,
    sumsq: np.ndarray,
    minimum: np.ndarray | None = None,
    maximum: np.ndarray | None = None,
    rows: np.ndarray | float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The centre and scale of every feature, from the federation's totals.

    ``standard``: mean and population standard deviation (``StandardScaler``), from
    ``sum / count`` and ``sumsq / count - mean**2`` (the sum-of-squares form is what
    secure aggregation can sum; its relative error is about ``1e-16 * mean**2 / var``).
    ``minmax``: minimum and range (``MinMaxScaler``). ``none``: 0 and 1. A scale of zero
    (a constant feature) becomes 1.

    ``rows`` (``missing='mean'``): the rows after the missing cells are filled with the
    mean, ``count`` of them observed. The filled cells add nothing to the sum of squared
    deviations, so the variance is ``(sumsq - count * mean**2) / rows``: scikit-learn's
    ``SimpleImputer(strategy="mean")`` then ``StandardScaler`` on the pooled rows (the
    mean, and the extremes of ``minmax``, do not change).

    Raises
    ------
    ValueError
        On an unknown method, a feature without any value, or missing extremes for
        ``minmax``.
    """
    _check_scaling(method)
    count = np.asarray(count, dtype=np.float64)
    d = count.shape[0]
    if method == "none":
        return np.zeros(d), np.ones(d)
    seen = count > 0  # a feature no site observes (masked data) keeps centre 0, scale 1
    safe = np.where(seen, count, 1.0)
    if method == "minmax":
        if minimum is None or maximum is None:
            raise ValueError("scaling='minmax' needs every site's minimum and maximum")
        lo = np.where(seen, np.asarray(minimum, dtype=np.float64), 0.0)
        hi = np.where(seen, np.asarray(maximum, dtype=np.float64), 1.0)
        return lo, _scale_or_one(hi - lo)
    mean = np.where(seen, np.asarray(total, dtype=np.float64) / safe, 0.0)
    if rows is None:
        var = np.maximum(np.asarray(sumsq, dtype=np.float64) / safe - mean * mean, 0.0)
    else:
        n = np.broadcast_to(np.asarray(rows, dtype=np.float64), count.shape)
        var = np.maximum((np.asarray(sumsq, dtype=np.float64) - count * mean * mean)
                         / np.where(n > 0, n, 1.0), 0.0)
    return mean, _scale_or_one(np.where(seen, np.sqrt(var), 1.0))


#: ``robust-scaling``: a site is set aside from a feature's scaling when its rows' root mean
#: square deviation from the median of the sites' means is more than this many times the
#: median site's. Measured on honest splits (iris, wine, breast cancer, digits; 3, 5 and 10
#: sites, IID and Dirichlet(0.3, 0.5), 10 seeds): at most 6.5 on a dense feature (breast
#: cancer, Dirichlet(0.3)); no site set aside in those 59,940 (site, feature) checks.
ROBUST_SCALE_FACTOR = 10.0
#: ... on a sparse feature (the median site's ``|mean|`` below :data:`UNIT_MIN_MEAN_SHARE`
#: of its deviation: pixels, counts that are mostly 0), whose sites differ far more
#: without any lie: at most 45 measured (digits' pixels, Dirichlet(0.3), 10 sites).
ROBUST_SPARSE_FACTOR = 100.0
#: The fewest sites observing a feature for the rule (a median of two is their mean).
ROBUST_MIN_SITES = 3


@dataclass(frozen=True)
class RobustMoments:
    """The federation's sums of a robust scaling (:func:`robust_moments`).

    Attributes
    ----------
    total, sumsq : numpy.ndarray of shape (d,)
        Per feature, the sum and sum of squares that the federation's ``count`` rows would
        have if they were spread like the kept sites' rows: ``count`` times the kept
        sites' pooled mean and mean square (the scale floored). With every site kept they
        are the plain totals.
    set_aside : dict
        ``{site: {feature index: ratio}}``: the sites set aside per feature, with their
        deviation over the median site's.
    unchecked : tuple of int
        The features observed at fewer than :data:`ROBUST_MIN_SITES` sites (plain sums).
    """

    total: np.ndarray
    sumsq: np.ndarray
    set_aside: dict[str, dict[int, float]]
    unchecked: tuple[int, ...]


def robust_moments(sites: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                   checked: int | None = None, *, factor: float = ROBUST_SCALE_FACTOR,
                   sparse_factor: float = ROBUST_SPARSE_FACTOR) -> RobustMoments:
    """The federation's per-feature sums with the sites of extreme moments set aside.

    ``sites`` maps a site to its per-feature (count, sum, sum of squares). Per feature,
    each site that observes it votes once, whatever rows it claims: its mean ``m_s`` and
    standard deviation ``s_s`` from its own sums. With ``c`` the median of the ``m_s``,
    a site's deviation is ``r_s = sqrt(s_s**2 + (m_s - c)**2)``, the root mean square
    distance of its rows from ``c`` (a shifted mean and a wide spread both raise it); with
    ``r`` the median of the ``r_s``, a site with ``r_s > factor * r`` (``sparse_factor``
    when ``|c| < UNIT_MIN_MEAN_SHARE * r``) is set aside. The federation's mean and
    variance of the feature are then the kept sites' (count-weighted, as the plain
    scaling's), the standard deviation at least ``r / factor`` (a site claiming tight
    rows and many of them cannot shrink it further). No site set aside: the plain sums
    exactly. A single site, or fewer than half of them, cannot move ``c`` and ``r``
    beyond the honest sites' range.

    Parameters
    ----------
    sites : mapping
        ``{site: (count, sum, sumsq)}``, arrays of shape ``(d,)``.
    checked : int, optional
        The rule applies to the first ``checked`` features (the numeric ones); the others
        (one-hot features, whose spread their levels' shares set) keep the plain sums.
        Default: every feature.
    factor, sparse_factor : float
        See :data:`ROBUST_SCALE_FACTOR`, :data:`ROBUST_SPARSE_FACTOR`.

    Returns
    -------
    RobustMoments
        With the federation's ``count`` (the plain one) they give the centre, the scale
        and ``missing='mean'``'s fill through :func:`scaling_from_moments`.
    """
    names = list(sites)
    C, T, Q = (np.stack([np.asarray(sites[s][i], dtype=np.float64) for s in names])
               for i in range(3))
    d = C.shape[1]
    count, total, sumsq = C.sum(axis=0), T.sum(axis=0), Q.sum(axis=0)
    voters = (C > 0).sum(axis=0)
    first = np.arange(d) < (d if checked is None else int(checked))
    cols = np.flatnonzero(first & (voters >= ROBUST_MIN_SITES))
    set_aside: dict[str, dict[int, float]] = {}
    for j in cols:
        votes = C[:, j] > 0
        with np.errstate(all="ignore"):
            mean = T[votes, j] / C[votes, j]
            var = np.maximum(Q[votes, j] / C[votes, j] - mean * mean, 0.0)
            centre = float(np.median(mean))
            r = np.sqrt(var + (mean - centre) ** 2)
        typical = float(np.median(r))
        if not typical > 0:  # constant at most sites: no typical deviation to compare with
            continue
        limit = sparse_factor if abs(centre) < UNIT_MIN_MEAN_SHARE * typical else factor
        out = r > limit * typical
        kept = np.flatnonzero(votes)[~out]  # the median site is among them
        n = C[kept, j].sum()
        m = T[kept, j].sum() / n
        spread = max(Q[kept, j].sum() / n - m * m, 0.0)
        least = (typical / limit) ** 2
        if not out.any() and spread >= least:
            continue  # the plain sums, exactly
        total[j], sumsq[j] = count[j] * m, count[j] * (max(spread, least) + m * m)
        for i, ratio in zip(np.flatnonzero(votes)[out], r[out] / typical, strict=True):
            set_aside.setdefault(names[i], {})[int(j)] = float(ratio)
    unchecked = tuple(int(j) for j in np.flatnonzero(first & (voters < ROBUST_MIN_SITES)))
    return RobustMoments(total, sumsq, set_aside, unchecked)


def robust_scaling_warnings(found: RobustMoments, names: Sequence[str], sites: int
                            ) -> list[str]:
    """Sentences on a robust scaling: the sites set aside, the features it could not check.

    ``found`` is :func:`robust_moments`' answer over ``sites`` sites, ``names`` the
    features' names. Each set-aside site gets one sentence naming it, the features and how
    many times the median site's deviation its rows have (a ratio of sums, never a value).
    """
    out = []
    for site, features in sorted(found.set_aside.items()):
        listed = ", ".join(f"{names[j]!r} ({ratio:.3g}x)" for j, ratio in sorted(features.items()))
        out.append(
            f"robust-scaling: {site} set aside from the scaling of {listed}: its rows' "
            "deviation from the sites' median mean is that many times the median site's "
            f"(the rule: over {ROBUST_SCALE_FACTOR:g}x, {ROBUST_SPARSE_FACTOR:g}x for a "
            "sparse feature), so the federation's mean and scale of "
            f"{'that feature' if len(features) == 1 else 'those features'} come from the "
            "other sites' sums (its rows are still clustered): a site in other units, or a "
            "false reply?")
    if found.unchecked:
        if sites < ROBUST_MIN_SITES:
            out.append(
                f"robust-scaling: {sites} site{'s' if sites != 1 else ''} sent feature sums; "
                f"a median of sites needs {ROBUST_MIN_SITES} or more, so the scaling is the "
                "plain one (every site's sums): run with more sites, or "
                "robust-scaling=false")
        else:
            unchecked = [names[j] for j in found.unchecked]
            listed = ", ".join(repr(n) for n in unchecked[:10])
            out.append(
                f"robust-scaling: {listed}{', ...' if len(unchecked) > 10 else ''} observed "
                f"at fewer than {ROBUST_MIN_SITES} sites: "
                f"{'its' if len(unchecked) == 1 else 'their'} scaling is the plain one "
                "(a median of sites needs 3)")
    return out


def categorical_scales(levels_per_column: Sequence[int], shares: Any) -> np.ndarray:
    """The scale of every one-hot feature with ``categorical-weight='balanced'``.

    Each categorical variable weighs like one standardised numeric feature (as the gamma
    of k-prototypes): two random rows differ in a standardised feature by an expected
    squared difference of 2 (twice its variance of 1). In a variable's one-hot columns,
    with level shares ``p_l``, the expected squared difference is twice the sum of the
    columns' variances, ``2 * sum_l p_l (1 - p_l)`` (``2 (1 - sum_l p_l**2)`` when every row
    has a level: 2 when the rows differ in level, 0 when not). Dividing every one-hot
    column of the variable by

        ``s = sqrt(sum_l p_l (1 - p_l))``

    makes that expectation 2 whatever the number of levels or their shares (a rare level
    gets no larger weight than a common one, unlike standardising each column by
    ``sqrt(p_l (1 - p_l))``). A variable with a single observed level (``s = 0``) keeps
    scale 1, as a constant feature does.

    Parameters
    ----------
    levels_per_column : sequence of int
        The number of levels (one-hot features) of each categorical column, in order.
    shares : array-like of shape (sum(levels_per_column),)
        Each one-hot feature's share of the rows, ``sum / count`` of the feature (they sum
        to 1 per column when every row has a level; a row of zeros, if any, is counted by
        the general form).

    Returns
    -------
    numpy.ndarray of shape (sum(levels_per_column),)
        The scale ``s`` of each one-hot feature (the same for the columns of one variable).

    Raises
    ------
    ValueError
        When the lengths disagree, a share lies outside ``[0, 1]`` or a column's shares
        sum to more than 1.
    """
    sizes = [int(n) for n in levels_per_column]
    p = np.asarray(shares, dtype=np.float64).ravel()
    if any(n < 1 for n in sizes) or p.shape != (sum(sizes),):
        raise ValueError(f"categorical_scales: {p.size} shares for columns of {sizes} levels")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("categorical_scales: a share outside [0, 1]")
    out = np.empty_like(p)
    start = 0
    for n in sizes:
        block = p[start:start + n]
        if block.sum() > 1 + 1e-9:
            raise ValueError("categorical_scales: the shares of a column's levels sum to "
                             "more than 1")
        out[start:start + n] = np.sqrt(np.sum(block * (1.0 - block)))
        start += n
    return _scale_or_one(out)


def spread_warning(count: np.ndarray, total: np.ndarray, sumsq: np.ndarray,
                   names: Sequence[str], ratio: float = SPREAD_RATIO) -> str | None:
    """A sentence when one feature's spread is ``ratio`` times the typical one (else ``None``).

    Used with ``scaling='none'``: the widest feature then decides every distance. The
    widest standard deviation is compared with the median of the positive ones, so that
    near-constant features (an image's border pixels) do not make a data set in one unit
    look mixed.
    """
    count = np.maximum(np.asarray(count, dtype=np.float64), 1.0)
    mean = np.asarray(total, dtype=np.float64) / count
    raw = np.sqrt(np.maximum(np.asarray(sumsq, dtype=np.float64) / count - mean * mean, 0.0))
    positive = raw[raw > 0]
    if positive.size < 2:
        return None
    typical = float(np.median(positive))
    if positive.max() <= ratio * typical:
        return None
    wide = int(np.argmax(raw))
    return (f"scaling='none' and the features' spreads differ: the standard deviation of "
            f"{names[wide]!r} ({raw[wide]:.4g}) is {raw[wide] / typical:.3g}x the median "
            f"feature's ({typical:.4g}), so the widest features decide the clusters; "
            "scaling='standard' (the App's default) gives every feature the same weight")


def self_scaled_warning(sites: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
                        ) -> str | None:
    """A sentence when every site standardised its own file (else ``None``).

    ``sites`` maps a site to its per-feature (count, sum, sum of squares). When at every
    one of at least two sites every feature has mean 0 and a standard deviation of 1 (the
    population's, or the sample's: ``sqrt((n - 1) / n)`` up to 1), the sites scaled their
    rows with their own means and spreads, which erases what differs between sites (a
    site of one class becomes indistinguishable from another): no federated scaling can
    undo it.
    """
    if len(sites) < 2:
        return None
    for count, total, sumsq in sites.values():
        n = np.asarray(count, dtype=np.float64)
        if n.size == 0 or np.any(n < 2):
            return None
        mean = np.asarray(total, dtype=np.float64) / n
        std = np.sqrt(np.maximum(np.asarray(sumsq, dtype=np.float64) / n - mean * mean, 0))
        low = np.sqrt((n - 1) / n) - 1e-6
        if not (np.all(np.abs(mean) < 1e-6) and np.all((std > low) & (std < 1 + 1e-6))):
            return None
    return (f"every site's features have mean 0 and standard deviation 1 ({len(sites)} "
            "sites): the sites standardised their own files, which erases the differences "
            "between the sites (a site that holds one group looks like every other); send "
            "the rows in their raw units and let the federation scale them "
            "(scaling='standard', computed from every site's sums)")


#: A site's feature is suspected of other units when its size differs from the other
#: sites' by at least this factor (log10: 1.2, about 16x; a g/L vs mg/L export is 1000x)...
UNIT_FACTOR_LOG10 = 1.2
#: ... and its size and its spread differ by the same factor within this margin (log10
#: 0.75, a factor of about 5.6), as a value multiplied by a constant does. Measured
#: (``python -m simulations missing --table units``): no false alarm in 39,960 (site,
#: feature) checks of wine, breast cancer, iris and digits' pixels over 3, 5 and 10
#: sites, IID and Dirichlet(0.3), 10 seeds; every site in units 100x or 1000x off found,
#: 16 % of those 10x off (sums alone do not tell 10x from sites of other populations).
UNIT_AGREEMENT_LOG10 = 0.75
#: ... for a measurement away from zero: the others' mean at least this share of their
#: standard deviation. Sparse features (an image's pixels, counts that are mostly 0) move
#: their size and spread together from site to site without any unit change.
UNIT_MIN_MEAN_SHARE = 0.5


def unit_powers(size: np.ndarray, spread: np.ndarray, *,
                min_factor_log10: float = UNIT_FACTOR_LOG10,
                agreement_log10: float = UNIT_AGREEMENT_LOG10) -> np.ndarray:
    """The power of ten by which a site's feature looks recorded in other units (0: none).

    ``size`` and ``spread`` are per feature the log10 ratios of the site's root mean
    square and standard deviation to the others'. A value exported in other units (g/L
    where the others have mg/L) is the same data times a constant ``c``: both differ by
    ``c``. A feature is flagged when its size differs by at least ``10**min_factor_log10``
    and its spread by the same factor within ``10**agreement_log10``; a site that merely
    holds other rows (a non-IID split) moves its mean without scaling its spread with it.
    NaN (a feature not observed, or constant at the others) is never flagged.
    """
    size = np.asarray(size, dtype=np.float64)
    spread = np.asarray(spread, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        flagged = (np.isfinite(size) & np.isfinite(spread) & (np.abs(size) >= min_factor_log10)
                   & (np.abs(spread - size) <= agreement_log10))
    return np.where(flagged, np.round(np.nan_to_num(size)), 0.0).astype(np.int64)


def unit_factor(power: int) -> str:
    """``"1000"`` or ``"1/1000"``: a power of ten as a factor a person reads."""
    return f"{10 ** power:g}" if power > 0 else f"1/{10 ** -power:g}"


def unit_mismatches(sites: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                    names: Sequence[str], *, min_factor_log10: float = UNIT_FACTOR_LOG10,
                    agreement_log10: float = UNIT_AGREEMENT_LOG10,
                    min_mean_share: float = UNIT_MIN_MEAN_SHARE) -> list[str]:
    """Sentences naming the sites whose feature looks recorded in other units.

    ``sites`` maps a site to its per-feature (count, sum, sum of squares) of the rows as
    read (before scaling). For every site and feature, the site's size (root mean square)
    and spread (standard deviation) are compared with the pooled other sites'
    (:func:`unit_powers`); the nearest power of ten is named (the likely unit prefix).
    Needs at least two sites; a feature that a site does not observe, that is constant at
    the other sites, or whose mean there is below ``min_mean_share`` of its spread (a
    sparse feature, mostly 0: it moves size and spread together without a unit change)
    is skipped.

    Returns
    -------
    list of str
        One sentence per (site, feature) flagged, e.g. ``"client 2's 'proline' is about
        1/1000 of the other sites' (mean 0.75 vs 746, standard deviation 0.31 vs 315): a
        unit mismatch? ..."``.
    """
    if len(sites) < 2:
        return []
    parts = {site: tuple(np.asarray(a, dtype=np.float64) for a in sums)
             for site, sums in sites.items()}
    totals = [np.sum([p[i] for p in parts.values()], axis=0) for i in range(3)]
    out = []
    for site, (count, total, sumsq) in parts.items():
        n_o = totals[0] - count
        with np.errstate(all="ignore"):
            mean_s, mean_o = total / count, (totals[1] - total) / n_o
            rms_s, rms_o = np.sqrt(sumsq / count), np.sqrt((totals[2] - sumsq) / n_o)
            sd_s = np.sqrt(np.maximum(sumsq / count - mean_s ** 2, 0.0))
            sd_o = np.sqrt(np.maximum((totals[2] - sumsq) / n_o - mean_o ** 2, 0.0))
            usable = (count >= 2) & (n_o >= 2) & (np.abs(mean_o) >= min_mean_share * sd_o)
            size = np.where(usable, np.log10(rms_s / rms_o), np.nan)
            spread = np.where(usable, np.log10(sd_s / sd_o), np.nan)
        powers = unit_powers(size, spread, min_factor_log10=min_factor_log10,
                             agreement_log10=agreement_log10)
        for j in np.flatnonzero(powers):
            out.append(
                f"{site}'s {names[j]!r} is about {unit_factor(int(powers[j]))} of the other "
                f"sites' (mean {mean_s[j]:.3g} vs {mean_o[j]:.3g}, standard deviation "
                f"{sd_s[j]:.3g} vs {sd_o[j]:.3g}): a unit mismatch? Its rows would sit apart "
                "from every other site's after the scaling: export that column in the other "
                "sites' units (unit-check='refuse' makes this an error, unit-check='off' "
                "silences it)")
    return out


def site_unit_powers(X: np.ndarray, center: Sequence[float], scale: Sequence[float]
                     ) -> np.ndarray:
    """A site's own unit check against the federation's mean and standard deviation.

    Under secure aggregation no one sees another site's sums; every client receives the
    federation's per-feature mean (``center``) and standard deviation (``scale``) in the
    feature transform, and compares its own rows as read, ``X`` (original units), with
    them (:func:`unit_powers`; the federation includes the site itself, so a site far
    above the others is seen by the others, as far below). Sparse features (the
    federation's mean below half its spread) are not checked. Returns the power per
    feature.
    """
    X = np.asarray(X, dtype=np.float64)
    center = np.asarray(center, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    with np.errstate(all="ignore"):
        count = np.sum(~np.isnan(X), axis=0)
        mean = np.nanmean(X, axis=0) if len(X) else np.full(X.shape[1], np.nan)
        rms = np.sqrt(np.nanmean(X * X, axis=0)) if len(X) else mean
        sd = np.nanstd(X, axis=0) if len(X) else mean
        usable = (count >= 2) & (np.abs(center) >= UNIT_MIN_MEAN_SHARE * scale)
        size = np.where(usable, np.log10(rms / np.sqrt(center ** 2 + scale ** 2)), np.nan)
        spread = np.where(usable, np.log10(sd / scale), np.nan)
    return unit_powers(size, spread)


# ---------------------------------------------------------------------------- transform


@dataclass(frozen=True)
class FeatureTransform:
    """The federation's features and scaling, as every client applies them.

    Attributes
    ----------
    features : tuple of str
        The features, in the federation's order.
    scaling : str
        ``"standard"``, ``"minmax"`` or ``"none"``.
    center, scale : tuple of float
        ``z = (x - center) / scale`` per feature (``()``: not scaled).
    """

    features: tuple[str, ...]
    scaling: str = "none"
    center: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    #: Categorical columns and their agreed levels (the last is :data:`OTHER`): each is
    #: one-hot encoded as the features ``"<column>=<level>"``, after the numeric ones.
    categories: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: What a missing cell (NaN) of a numeric feature becomes: ``"keep"`` (NaN stays: the
    #: algorithms that read it as unobserved, and a transform whose ``fill`` is not known
    #: yet), ``"mean"`` (``fill``, the federation's mean, before scaling), ``"drop"`` (the
    #: row is left out: :meth:`complete_rows`), ``"refuse"`` (an error).
    missing: str = "keep"
    #: Per feature the value of a missing cell in the original units (``missing='mean'``:
    #: the federation's mean); ``()``: none yet.
    fill: tuple[float, ...] = ()
    #: Declared date/time features (among :attr:`numeric_features`): each client takes
    #: them as float seconds since 1970-01-01 00:00 UTC (:meth:`FeatureTable.seconds`).
    datetimes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.missing not in ("keep", "mean", "drop", "refuse"):
            raise ValueError(f"a feature transform's missing is keep, mean, drop or refuse, "
                             f"got {self.missing!r}")
        if self.fill and (len(self.fill) != len(self.features)
                          or not all(np.isfinite(self.fill))):
            raise ValueError(f"a fill of {len(self.fill)} values for {len(self.features)} "
                             "features (finite values)")
        encoded = [one_hot_name(c, level) for c, levels in self.categories for level in levels]
        if encoded and tuple(self.features[-len(encoded):]) != tuple(encoded):
            raise ValueError("a feature transform lists its one-hot features last, in the "
                             "order of its categories")
        stray = [c for c in self.datetimes if c not in self.numeric_features]
        if stray:
            raise ValueError(f"date feature(s) {stray} are not among the transform's "
                             "numeric features")
        _check_scaling(self.scaling)
        d = len(self.features)
        if self.center or self.scale:
            if len(self.center) != d or len(self.scale) != d:
                raise ValueError(f"a scaling of {len(self.center)}/{len(self.scale)} values "
                                 f"for {d} features")
            if not all(np.isfinite(self.center)) or not all(
                    s > 0 and np.isfinite(s) for s in self.scale):
                raise ValueError("a scaling needs finite centres and positive finite scales")

    @property
    def numeric_features(self) -> tuple[str, ...]:
        """The features taken as they are (the one-hot features are the rest)."""
        n = sum(len(levels) for _, levels in self.categories)
        return self.features[:len(self.features) - n]

    @property
    def scaled(self) -> bool:
        """Whether the rows are scaled (not only selected)."""
        return bool(self.center)

    def to_json(self) -> str:
        """The transform as a JSON string (exact floats: Python's shortest repr)."""
        data: dict[str, Any] = {
            "features": list(self.features), "scaling": self.scaling,
            "center": list(self.center), "scale": list(self.scale),
            "categories": [[c, list(levels)] for c, levels in self.categories],
            "missing": self.missing, "fill": list(self.fill)}
        if self.datetimes:
            data["datetimes"] = list(self.datetimes)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> FeatureTransform:
        """Read :meth:`to_json`'s output.

        Raises
        ------
        ValueError
            On anything else.
        """
        try:
            data = json.loads(text)
            return cls(tuple(str(f) for f in data["features"]), str(data["scaling"]),
                       tuple(float(c) for c in data["center"]),
                       tuple(float(s) for s in data["scale"]),
                       tuple((str(c), tuple(str(v) for v in levels))
                             for c, levels in data.get("categories", [])),
                       str(data.get("missing", "keep")),
                       tuple(float(v) for v in data.get("fill", [])),
                       tuple(str(c) for c in data.get("datetimes", [])))
        except (TypeError, KeyError, json.JSONDecodeError) as ex:
            raise ValueError(f"malformed feature transform: {ex}") from ex

    def apply(self, table: FeatureTable, dtype: Any = np.float64) -> np.ndarray:
        """The client's rows in the federation's features and units.

        Every row of the table, in the federation's order: a missing cell is filled with
        :attr:`fill` (``missing='mean'``) before scaling, else stays NaN (a ``drop``
        transform's rows with a missing cell are left out by the caller,
        :meth:`complete_rows`).

        Raises
        ------
        SchemaError
            If the table lacks a feature or holds it as text (or as dates, undeclared),
            or a declared date column holds numbers or a cell that is not a date.
        """
        X = table.columns(self.numeric_features, self.datetimes)
        if self.categories:
            blocks = [np.asarray(X, dtype=np.float64)]
            for column, levels in self.categories:
                blocks.append(one_hot(table.values(column), levels))
            X = np.hstack(blocks)
        X = self._filled(X)
        if not self.scaled:
            return X if X.dtype == dtype else np.ascontiguousarray(X, dtype=dtype)
        out = (np.asarray(X, dtype=np.float64) - np.asarray(self.center)) / np.asarray(
            self.scale)
        return np.ascontiguousarray(out, dtype=dtype)

    def _filled(self, X: np.ndarray) -> np.ndarray:
        """``X`` with its missing cells filled (``missing='mean'`` with a fill), else as is."""
        if self.missing != "mean" or not self.fill:
            return X
        missing = np.isnan(X)
        if not missing.any():
            return X
        return np.where(missing, np.asarray(self.fill, dtype=np.float64), X)

    @staticmethod
    def complete_rows(X: np.ndarray) -> np.ndarray:
        """The rows without a missing cell (a boolean mask; ``missing='drop'`` keeps these)."""
        return ~np.isnan(np.asarray(X, dtype=np.float64)).any(axis=1)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Fill (``missing='mean'``) and scale rows already in the federation's order."""
        X = self._filled(np.asarray(X, dtype=np.float64))
        if not self.scaled:
            return X
        return (X - np.asarray(self.center)) / np.asarray(self.scale)

    def inverse(self, Z: np.ndarray) -> np.ndarray:
        """Back to the original units (centroids, means); NaN stays NaN."""
        Z = np.asarray(Z, dtype=np.float64)
        if not self.scaled:
            return Z
        return Z * np.asarray(self.scale) + np.asarray(self.center)
