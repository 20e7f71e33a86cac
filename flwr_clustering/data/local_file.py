"""Load (and write) one client's local data file, for deployments with real SuperNodes.

Each SuperNode reads its own file, named by ``data-path`` in its node-config. Supported formats:

- ``.csv`` -- numeric values, with a header row of column names or without one (detected: a
  first line whose every field is a number is data, and the columns are named ``0, 1, ...``);
  a column named ``label_column`` (default ``"label"``), if present, becomes the labels and
  every other column is a feature;
- ``.npy`` -- a 2-D numeric array of features (no labels); columns are named ``0, 1, ...``;
- ``.npz`` -- key ``"X"`` (2-D features) and optional key ``"y"`` (labels);
- ``.parquet`` -- like CSV, read with pandas (needs ``pyarrow``).

Nothing is clustered silently by mistake: a row index written with the data (a column
``Unnamed: 0`` or ``__index_level_0__``, or a first column equal to ``0, 1, ..., n-1``) is
refused unless declared (``index_column``, ``feature_columns``); ``feature_columns`` and
``label_column`` select columns by name, and an unknown name is an error listing the file's
columns. A CSV is read as written: a line with more fields than the first (a decimal comma,
a trailing separator) is refused naming the line, never turned into a row index; a header
that names a column twice is refused naming it. A CSV whose header has no comma but ``;``
or tabs is read with that separator when the header and every line agree (and no value has
a decimal comma), else refused naming the separator.
Booleans are read as 0/1, and a nullable integer or boolean column's missing values as
NaN. Date/time columns (a Parquet timestamp in any unit, with or without a time zone, or a
date) are kept apart as seconds since 1970-01-01 00:00 UTC (``LocalFile.dates``): the
federation uses them only where the run declares them (``datetime-columns``).
Missing values (empty CSV cells, NaN) are kept when ``allow_nan`` is true (the masked
algorithms read them as unobserved); with ``allow_nan=False`` the first one is reported by
column and row. Everything else that is wrong (unknown extension, non-numeric values, wrong
shape, no rows or no feature columns, labels that are not integers, an empty or cut file,
complex numbers) raises a ``ValueError``: a
:class:`~flwr_clustering.data.schema.SiteDataError` whose ``public`` message (what a client
sends the server) names the file by its name, the column, the row and the kind of problem,
never a cell or a line, and whose ``str()`` (the site's log) adds them and the whole path.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .schema import (
    COMPLEX_HINT,
    FeatureTable,
    SiteDataError,
    datetime_seconds,
    is_datetime_column,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

# pandas (and through it pyarrow) is imported by the functions that read or write CSV and
# Parquet, not here: importing the package must stay cheap for clients that never touch a file.

__all__ = [
    "HEADER_MODES",
    "INDEX_COLUMN_NAMES",
    "SUPPORTED_EXTENSIONS",
    "LocalFile",
    "load_local_file",
    "read_local_file",
    "save_local_file",
]

logger = logging.getLogger(__name__)

#: File extensions understood by :func:`load_local_file` and :func:`save_local_file`.
SUPPORTED_EXTENSIONS: tuple[str, ...] = (".csv", ".npy", ".npz", ".parquet")

#: Values of ``header``: detect, the first line is a header, the file has no header.
HEADER_MODES: tuple[str, ...] = ("auto", "first-row", "none")

#: Column names that pandas gives a row index written with the data (``to_csv()`` and
#: pyarrow without pandas metadata); such a column is refused unless declared.
INDEX_COLUMN_NAMES: tuple[str, ...] = ("Unnamed: 0", "__index_level_0__")

#: The label column that is used when present and silently absent otherwise; any other
#: ``label_column`` must exist in the file.
DEFAULT_LABEL_COLUMN = "label"

# Fields of a first CSV line that pandas reads as missing values (lower case).
_NA_TOKENS = frozenset(
    {"", "na", "n/a", "#n/a", "#na", "null", "none", "<na>", "nan", "-nan", "#n/a n/a"}
)

Column = str | int


@dataclass(frozen=True)
class LocalFile:
    """A loaded data file and what was read from it (see :func:`read_local_file`).

    Attributes
    ----------
    path : pathlib.Path
        The file.
    X : numpy.ndarray
        ``(n, d)`` float64 features.
    y : numpy.ndarray or None
        ``(n,)`` int64 labels, or ``None``.
    features : tuple
        The names of the feature columns, in the order of ``X``'s columns (positions
        ``0, 1, ...`` for NPY/NPZ and CSV files without a header).
    label_column : str or int or None
        The column the labels came from (``"y"`` for an NPZ archive's labels), or ``None``.
    index_column : str or int or None
        The declared index column that was dropped, or ``None``.
    header : bool or None
        CSV only: whether the first line was read as a header; ``None`` for other formats.
    text : dict
        Columns that hold text only, by name (not in ``X``): the federation's schema
        check names them (a text column is not a feature).
    dates : dict
        Date/time columns (Parquet timestamps in any unit, with or without a time zone,
        and dates), by name, as float seconds since 1970-01-01 00:00 UTC (not in ``X``):
        a feature only where the run declares it (``datetime-columns``).
    notes : tuple of str
        What the reading logged about the file (at INFO: a separator other than ``','``,
        a first line read as data), for a copy of the parse to log again
        (:mod:`~flwr_clustering.data.site_cache`).
    """

    path: Path
    X: np.ndarray
    y: np.ndarray | None
    features: tuple[Column, ...]
    label_column: Column | None
    index_column: Column | None
    header: bool | None
    text: dict = dataclasses.field(default_factory=dict)
    dates: dict = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def table(self) -> FeatureTable:
        """The file's columns by name (positions ``"0"``, ``"1"``... without a header)."""
        positional = self.header is False or self.path.suffix.lower() in (".npy", ".npz")
        return FeatureTable(self.X, tuple(str(f) for f in self.features),
                            {str(k): v for k, v in self.text.items()}, positional,
                            {str(k): v for k, v in self.dates.items()})

    def describe(self) -> str:
        """One line for a log: file, rows, features and the label column."""
        names = ", ".join(map(str, self.features[:8])) + (", ..." if len(self.features) > 8 else "")
        label = "none" if self.label_column is None else repr(self.label_column)
        text = (
            f"{self.path}: {self.X.shape[0]} rows, {self.X.shape[1]} features [{names}], "
            f"label column {label}"
        )
        if self.index_column is not None:
            text += f", index column {self.index_column!r} dropped"
        if self.header is False:
            text += ", no header row"
        if self.dates:
            text += (f", date column(s) {', '.join(map(repr, self.dates))} (seconds since "
                     "1970-01-01 UTC; features where the run declares datetime-columns)")
        return text


def _refusal(path: Path, problem: str, detail: str | None = None) -> SiteDataError:
    """A refusal of the file ``path``, for a client to raise.

    The public message (what leaves the site) names the file by its name: the folders
    of the site's machine tell the federation nothing and stay in the detail, which
    names the whole path and adds ``detail`` (a cell's value, a line of the file) in
    place of ``problem`` when given.
    """
    return SiteDataError(f"{path.name}: {problem}",
                         f"{path}: {problem if detail is None else detail}")


def _as_features(path: Path, values: np.ndarray, what: str = "features") -> np.ndarray:
    """Check a loaded feature array (numeric, 2-D, non-empty) and return it as float64."""
    if values.dtype.kind == "c":
        raise _refusal(path, f"{what} hold complex numbers (dtype {values.dtype}): "
                       + COMPLEX_HINT)
    if values.dtype.kind not in "biuf":
        raise _refusal(path, f"{what} must be numeric, got dtype {values.dtype}")
    if values.ndim != 2:
        raise _refusal(path,
            f"{what} must be a 2-D array (n_samples, n_features), got shape {values.shape}"
        )
    if values.shape[0] == 0:
        raise _refusal(path, "file is empty (no data rows)")
    if values.shape[1] == 0:
        raise _refusal(path, "file has no feature columns")
    return values.astype(np.float64)


def _as_labels(path: Path, values: np.ndarray, n: int, what: str = "labels") -> np.ndarray:
    """Check loaded labels (1-D, length ``n``, integer-valued) and return them as int64."""
    values = np.asarray(values)
    if values.ndim != 1 or values.shape[0] != n:
        raise _refusal(path,
            f"{what} must have shape ({n},) to match the features, got {values.shape}"
        )
    if values.dtype.kind in "iub":
        return values.astype(np.int64)
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values)
        bad[~bad] = values[~bad] != np.round(values[~bad])
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            where = f"at data row {row + 1}, 1-based), {int(bad.sum())} such value(s)"
            raise _refusal(path, f"{what} must be integers (missing or fractional value "
                           f"{where}", f"{what} must be integers (missing or fractional "
                           f"value {float(values[row])} {where}")
        return values.astype(np.int64)
    raise _refusal(path, f"{what} must be integers, got dtype {values.dtype}")


# ------------------------------------------------------------------------------------ options


def _header_mode(path: Path, header: Any) -> str:
    """Normalise ``header`` (a mode name or a bool) to one of :data:`HEADER_MODES`."""
    if header is True:
        return "first-row"
    if header is False:
        return "none"
    mode = str(header).strip().lower()
    if mode not in HEADER_MODES:
        raise _refusal(path,
            f"header={header!r} is not one of {', '.join(map(repr, HEADER_MODES))} "
            "(or True/False)"
        )
    return mode


def _is_none(value: Any) -> bool:
    """``None``, or the string ``"none"`` a node config gives for it."""
    return value is None or (isinstance(value, str) and value.strip().lower() == "none")


def _column_list(path: Path, columns: Any) -> list[Column] | None:
    """``feature_columns`` as a list: a sequence of names, or one comma-separated string."""
    if columns is None:
        return None
    if isinstance(columns, str):
        names: list[Column] = [c.strip() for c in columns.split(",") if c.strip()]
    elif isinstance(columns, int) and not isinstance(columns, bool):
        names = [columns]
    else:
        names = list(columns)
    if not names:
        raise _refusal(path, f"feature_columns={columns!r} names no column")
    return names


def _find(name: Column, columns: Sequence[Column]) -> Column | None:
    """The column of ``columns`` called ``name``; positions match as int or digit string."""
    if isinstance(name, bool):
        return None
    if name in columns:
        return name
    if isinstance(name, str) and name.strip().isdigit() and int(name) in columns:
        return int(name)
    if isinstance(name, (int, np.integer)) and str(int(name)) in columns:
        return str(int(name))
    return None


def _listing(columns: Sequence[Column]) -> str:
    shown = ", ".join(repr(c) for c in columns[:30])
    return shown + (f", ... ({len(columns)} columns)" if len(columns) > 30 else "")


def _declare_hint(name: Column) -> str:
    return (
        f"Declare it: index_column={name!r} drops it (node config: index-column={name!r}); "
        "feature_columns lists the features to use (node config: feature-columns='a,b,c'); "
        "index_column=False keeps it as a feature (node config: index-column='none')."
    )


def _check_no_index(path: Path, first: Column, values: Any, features: list[Column]) -> None:
    """Refuse an undeclared row-index column among ``features``.

    ``first`` is the table's first column and ``values`` its values (a NumPy array or a
    pandas Series).
    """
    for name in features:
        if name in INDEX_COLUMN_NAMES:
            raise _refusal(path,
                f"column {name!r} looks like a row index written with the data "
                "(pandas' to_csv() without index=False) and would be clustered as a feature. "
                + _declare_hint(name)
            )
    n = len(values)
    if first in features and n >= 2 and values.dtype.kind in "iuf":
        if np.array_equal(np.asarray(values), np.arange(n)):
            raise _refusal(path,
                f"the first column {first!r} holds the row numbers 0..{n - 1}, which "
                "looks like a row index written with the data, and would be clustered as a "
                "feature. " + _declare_hint(first)
            )


def _check_nan(path: Path, X: np.ndarray, features: Sequence[Column], header: bool | None) -> None:
    """Raise on the first NaN of ``X``, naming its column and row."""
    missing = np.isnan(X)
    if not missing.any():
        return
    row, col = (int(v) for v in np.argwhere(missing)[0])
    where = f"data row {row + 1} (1-based"
    if header is not None:  # CSV: say how that maps to lines
        where += ", header row not counted" if header else ", the file has no header row"
    where += ")"
    n_cols = int(missing.any(axis=0).sum())
    raise _refusal(path,
        f"missing value (NaN or empty cell) in column {features[col]!r} at {where}; "
        f"{int(missing.sum())} missing value(s) in {n_cols} column(s). This algorithm needs "
        "complete rows: fill or drop them, or use an algorithm that accepts missing values."
    )


# ------------------------------------------------------------------------------------ reading


#: Separators read besides ',' when the header and every line agree on them (see
#: :func:`_separator`).
OTHER_SEPARATORS: tuple[str, ...] = (";", "\t")
_SEPARATOR_NAMES = {",": "','", ";": "';'", "\t": "tabs"}
_DECIMAL_COMMA = re.compile(r"^\s*[-+]?\d+,\d+\s*$")


def _separator(path: Path, notes: list[str] | None = None) -> str:
    """The separator of a CSV: ``','``, or ``';'`` or a tab that every line agrees on.

    A header without a comma but with a ``;`` (or a tab) is a file written with that
    separator (a spreadsheet's export in many locales): it is read so when the header
    and every line have the same number of fields and no value holds a decimal comma;
    otherwise it is refused, naming the separator and the first line that disagrees
    (never a line's content).
    """
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        header = next((line for line in fh if line.strip()), "")
    if "," in header:
        return ","
    found = [sep for sep in OTHER_SEPARATORS if sep in header]
    if not found:
        return ","
    sep = found[0]
    name = _SEPARATOR_NAMES[sep]
    fix = ("write it with ',' between values and '.' as the decimal mark (pandas: "
           "to_csv(path, index=False))")
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        lines = ((n, row) for n, row in enumerate(csv.reader(fh, delimiter=sep), start=1)
                 if row)
        first_n, first = next(lines)
        for n, row in lines:
            if len(row) != len(first):
                raise _refusal(path, f"the values are separated by {name}, and line {n} has "
                               f"{len(row)} fields where line {first_n} has {len(first)}: "
                               + fix)
            comma = next((j for j, v in enumerate(row) if _DECIMAL_COMMA.match(v)), None)
            if comma is not None:
                raise _refusal(path, f"the values are separated by {name} and line {n} "
                               f"holds a decimal comma (field {comma + 1}): " + fix)
    _note([] if notes is None else notes, "%s: the values are separated by %s (the header "
          "and every line agree): read so", path, name)
    return sep


def _first_line_is_data(path: Path, sep: str = ",") -> bool:
    """Whether the first non-blank line of a CSV has only numbers (and missing values)."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        for line in fh:
            if line.strip():
                break
        else:
            return False
    fields = [f.strip() for f in next(csv.reader([line], delimiter=sep))]
    numbers = 0
    for field in fields:
        if field.lower() in _NA_TOKENS:
            continue
        if "_" in field:  # float() accepts 1_000, pandas does not
            return False
        try:
            float(field)
        except ValueError:
            return False
        numbers += 1
    return numbers > 0


def _suspect_label(frame: pd.DataFrame) -> Column | None:
    """The last column of a headerless table, if it looks like integer labels."""
    if frame.shape[1] < 2:
        return None
    last = frame.columns.tolist()[-1]
    values = frame[last].to_numpy()
    if values.dtype.kind not in "iuf" or not np.all(np.isfinite(values)):
        return None
    if not np.all(values == np.round(values)):
        return None
    distinct = len(np.unique(values))
    return last if distinct <= 20 and distinct < len(values) / 2 else None


#: What makes a CSV row longer than its header, said with every refusal of one.
_FIELDS_HINT = (
    "likely a decimal comma ('-0,80' for -0.80), values separated by ';' or tabs, or a "
    "separator at the end of the lines. Write the file with '.' as the decimal mark, ',' "
    "between values and nothing after the last (pandas: to_csv(path, index=False))"
)


class MalformedCsvError(SiteDataError):
    """A CSV that cannot be read as written (its line's content in the detail only)."""


def _read_csv(path: Path, has_header: bool, pd, exact: dict, sep: str = ",") -> pd.DataFrame:
    """Read a CSV exactly as written: every row as many fields as the first line, or refuse.

    pandas takes the first field(s) of rows longer than the header as a row index (a
    decimal comma in a one-column file loads ``-0,80`` as 80), drops an empty last field
    of the data rows, and names an empty last column ``Unnamed: <i>``: each is refused
    here, naming the line and the likely cause. A header that names a column twice
    (pandas would rename the second ``f0.1``) is refused naming it.
    """
    import warnings

    first, second = _first_two_lines(path, sep)
    if second is not None and len(second[1]) > len(first[1]):
        raise _ragged(path, first, second)
    if has_header:
        names = [f.strip() for f in first[1]]
        twice = sorted({f for f in names if names.count(f) > 1 and f})
        if twice:
            where = "; ".join(
                f"{f!r} (columns {', '.join(str(j + 1) for j, g in enumerate(names) if g == f)})"
                for f in twice)
            raise _refusal(path, f"the header names a column twice: {where}: give each "
                           "column its own name (or drop the copy) before the run")
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            frame = pd.read_csv(path, header=0 if has_header else None, index_col=False,
                                sep=sep, **exact)
        except pd.errors.ParserWarning:  # a longer line that the first two did not show
            problem = f"the lines have different numbers of fields: {_FIELDS_HINT}"
            raise MalformedCsvError(f"{path.name}: {problem}", f"{path}: {problem}") from None
        except pd.errors.ParserError as exc:
            raise MalformedCsvError(
                f"{path.name}: cannot parse csv file: {_FIELDS_HINT}",
                f"{path}: cannot parse csv file ({str(exc).strip()}): {_FIELDS_HINT}") from None
    last = frame.columns[-1]
    if (len(frame.columns) > 1 and frame[last].isna().all()
            and (not has_header or str(last).startswith("Unnamed: "))):
        problem = f"column {len(frame.columns)} has no name and no value on any line"
        raise MalformedCsvError(f"{path.name}: {problem}: {_FIELDS_HINT}",
                                f"{path}: {problem}: {_FIELDS_HINT}")
    return frame


def _first_two_lines(path: Path, sep: str = ","
                     ) -> tuple[tuple[int, list[str]], tuple[int, list[str]] | None]:
    """The first two non-blank lines of a CSV as (line number, fields)."""
    lines: list[tuple[int, list[str]]] = []
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        for number, row in enumerate(csv.reader(fh, delimiter=sep), start=1):
            if row:
                lines.append((number, row))
                if len(lines) == 2:
                    break
    if not lines:
        return (1, []), None
    return lines[0], (lines[1] if len(lines) > 1 else None)


def _ragged(path: Path, first: tuple[int, list[str]], line: tuple[int, list[str]]
            ) -> MalformedCsvError:
    """A line longer than the first: its number and fields' count (the lines: detail only)."""
    (n1, f1), (n, f) = first, line
    return MalformedCsvError(
        f"{path.name}: line {n} has {len(f)} fields where line {n1} has {len(f1)}: "
        f"{_FIELDS_HINT}",
        f"{path}: line {n} has {len(f)} fields ({','.join(f)!r}) where line {n1} has "
        f"{len(f1)} ({','.join(f1)!r}): {_FIELDS_HINT}")


def _roles(
    path: Path,
    columns: list[Column],
    *,
    label_column: Any,
    feature_columns: list[Column] | None,
    index_column: Any,
    labels: np.ndarray | None,
) -> tuple[Column | None, Column | None, list[Column] | None, bool]:
    """The label, index and declared feature columns of a table with ``columns``.

    Returns ``(label, index, features, check_index)``: ``features`` is ``None`` when
    ``feature_columns`` declares none (every other column is then a feature), and
    ``check_index`` whether an undeclared row-index column is to be refused.
    """
    label = None
    if not _is_none(label_column):
        label = _find(label_column, columns)
        if label is None and label_column != DEFAULT_LABEL_COLUMN:
            raise _refusal(path,
                f"no label column {label_column!r}; the file's columns are: "
                f"{_listing(columns)}"
            )
    if label is not None and labels is not None:
        raise _refusal(path,
            f"the archive has labels 'y', so label_column={label_column!r} cannot "
            "name a column of 'X' as well"
        )

    index = None
    check_index = index_column is None
    if not check_index and not (index_column is False or _is_none(index_column)):
        index = _find(index_column, columns)
        if index is None:
            raise _refusal(path,
                f"no index column {index_column!r}; the file's columns are: "
                f"{_listing(columns)}"
            )
        if index == label:
            raise _refusal(path, f"column {index!r} is declared both index and label")

    features: list[Column] | None = None
    if feature_columns is not None:
        features = []
        for name in feature_columns:
            found = _find(name, columns)
            if found is None:
                raise _refusal(path,
                    f"unknown feature column {name!r}; the file's columns are: "
                    f"{_listing(columns)}"
                )
            if found in (label, index) or found in features:
                role = "the label" if found == label else "the index" if found == index else ""
                raise _refusal(path,
                    f"feature column {found!r} is "
                    + (f"also {role} column" if role else "listed twice")
                )
            features.append(found)
    return label, index, features, check_index


def _select(
    path: Path,
    frame: pd.DataFrame,
    *,
    label_column: Any,
    feature_columns: list[Column] | None,
    index_column: Any,
    allow_nan: bool,
    header: bool | None,
) -> LocalFile:
    """Pick features, labels and index of a table, convert and check them."""
    import pandas as pd

    if frame.shape[0] == 0:
        raise _refusal(path, "file is empty (no data rows)")
    # Positions (headerless CSV) as plain ints, for messages and the node-config hints.
    frame.columns = [int(c) if isinstance(c, np.integer) else c for c in frame.columns]
    columns = list(frame.columns)
    label, index, features, check_index = _roles(
        path, columns, label_column=label_column, feature_columns=feature_columns,
        index_column=index_column, labels=None)
    if features is None:
        features = [c for c in columns if c != label and c != index]
        if check_index:
            _check_no_index(path, columns[0], frame[columns[0]], features)
        if header is False and label is None and not _is_none(label_column):
            suspect = _suspect_label(frame)
            if suspect is not None:
                distinct = len(np.unique(frame[suspect].to_numpy()))
                raise _refusal(path,
                    f"the last column ({suspect!r}) of this headerless file holds "
                    f"integers only ({distinct} distinct values), like a label column; say "
                    f"what it is: label_column={suspect!r} to read it as labels, or "
                    "label_column='none' to cluster it as a feature (node config: "
                    f"label-column={suspect!r} or label-column='none')"
                )

    y = None
    if label is not None:
        raw = frame[label]
        numeric = pd.to_numeric(raw, errors="coerce")
        bad = numeric.isna() & raw.notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            where = (f"in label column {label!r} (data row {row + 1}, 1-based), "
                     f"{int(bad.sum())} such cell(s): labels are integers; fix those cells, "
                     "or name another label column (label_column; node config "
                     "label-column='none' reads none)")
            raise _refusal(path, f"non-numeric value {where}",
                           f"non-numeric value {raw.iloc[row]!r} {where}")
        y = _as_labels(
            path, numeric.to_numpy(dtype=np.float64), len(frame), what=f"label column {label!r}"
        )
    if not features:
        raise _refusal(path, "file has no feature columns")

    data = {}
    text: dict[Column, np.ndarray] = {}
    dates: dict[Column, np.ndarray] = {}
    for name in features:
        col = frame[name]
        if is_datetime_column(col):
            # one unit at every site, whatever the file's (ns, us, ms, s; a time zone):
            # kept apart, a feature only where the run declares it (datetime-columns)
            dates[name] = datetime_seconds(col)
            continue
        if col.dtype.kind == "m":  # a duration: seconds, whatever its unit
            col = col.dt.total_seconds()
        if col.dtype.kind not in "biuf":
            numeric = pd.to_numeric(col, errors="coerce")
            bad = numeric.isna() & col.notna()
            if feature_columns is None and bad.any() and not numeric.notna().any():
                # a text column: kept by name for the federation's schema check, which
                # refuses it as a feature (naming it) unless the run leaves it out
                text[name] = col.to_numpy(dtype=object)
                continue
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                where = (f"in column {name!r} (data row {row + 1}, 1-based), "
                         f"{int(bad.sum())} such cell(s): a column of numbers holds text; "
                         "fix or empty those cells, or leave the column out of the features")
                raise _refusal(path, f"non-numeric value {where}",
                               f"non-numeric value {col.iloc[row]!r} {where}")
            col = numeric
        # bool: 0/1; a nullable integer or boolean's missing value (pd.NA): NaN
        data[name] = col.to_numpy(dtype=np.float64, na_value=np.nan)
    features = [name for name in features if name not in text and name not in dates]
    X = (np.column_stack([data[name] for name in features]) if features
         else np.empty((len(frame), 0)))
    if not allow_nan:
        _check_nan(path, X, features, header)
    return LocalFile(
        path=path,
        X=X,
        y=y,
        features=tuple(features),
        label_column=label,
        index_column=index,
        header=header,
        text=text,
        dates=dates,
    )


def _select_array(
    path: Path,
    X: np.ndarray,
    labels: np.ndarray | None,
    *,
    label_column: Any,
    feature_columns: list[Column] | None,
    index_column: Any,
    allow_nan: bool,
) -> LocalFile:
    """:func:`_select` of a NPY/NPZ file's float64 array, with NumPy alone (no pandas).

    The columns are the positions ``0, 1, ...``; the same roles, refusals and arrays as
    :func:`_select` of the array as a data frame.
    """
    n, d = X.shape
    columns: list[Column] = list(range(d))
    label, index, features, check_index = _roles(
        path, columns, label_column=label_column, feature_columns=feature_columns,
        index_column=index_column, labels=labels)
    if features is None:
        features = [c for c in columns if c != label and c != index]
        if check_index:
            _check_no_index(path, 0, X[:, 0], features)
    y = labels
    if label is not None:
        y = _as_labels(path, X[:, label], n, what=f"label column {label!r}")
    if not features:
        raise _refusal(path, "file has no feature columns")
    picked = X[:, features] if features != columns else X
    picked = np.ascontiguousarray(picked)
    if not allow_nan:
        _check_nan(path, picked, features, None)
    return LocalFile(path=path, X=picked, y=y, features=tuple(features),
                     label_column="y" if labels is not None else label,
                     index_column=index, header=None)


def read_local_file(
    path: str | os.PathLike[str],
    label_column: Column | None = DEFAULT_LABEL_COLUMN,
    *,
    feature_columns: Sequence[Column] | str | None = None,
    header: str | bool = "auto",
    index_column: Column | bool | None = None,
    allow_nan: bool = True,
) -> LocalFile:
    """Load one client's data file and say what was read (see :func:`load_local_file`).

    Takes the parameters of :func:`load_local_file`.

    Returns
    -------
    LocalFile
        The features and labels, with the feature names, the label column used, the dropped
        index column and (CSV) whether the file had a header row.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_EXTENSIONS:
        raise _refusal(path,
            f"unsupported file extension {path.suffix!r}; "
            f"expected one of {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: data file not found")
    if path.stat().st_size == 0:
        raise _refusal(path, "file is empty (0 bytes): write the site's rows into it "
                       "(numpy.save for .npy, pandas' to_csv or to_parquet), or point "
                       "data-path at the file that holds them")
    mode = _header_mode(path, header)
    features = _column_list(path, feature_columns)
    options = dict(
        label_column=label_column,
        feature_columns=features,
        index_column=index_column,
        allow_nan=allow_nan,
    )

    if suffix in (".npy", ".npz"):
        labels = None
        if suffix == ".npy":
            try:
                arr = np.load(path, allow_pickle=False)
            except (ValueError, EOFError, OSError) as exc:
                raise _refusal(path, "cannot read as a NumPy .npy array (a cut or "
                               "overwritten file, or another format): save the rows with "
                               "numpy.save(path, X)",
                               f"cannot read as a NumPy .npy array ({exc})") from exc
            X = _as_features(path, arr)
        else:
            X, labels = _read_npz(path)
        return _select_array(path, X, labels, **options)

    # pandas (and for Parquet pyarrow) reads tables only: a NumPy file never imports it
    import pandas as pd

    notes: list[str] = []
    try:
        if suffix == ".csv":
            sep = _separator(path, notes)
            has_header = mode == "first-row" or (mode == "auto"
                                                 and not _first_line_is_data(path, sep))
            # pandas >= 3 parses floats exactly by default and deprecates the option.
            exact = {}
            if int(pd.__version__.split(".")[0]) < 3:
                exact["float_precision"] = "round_trip"
            frame = _read_csv(path, has_header, pd, exact, sep)
        else:
            has_header = None
            frame = pd.read_parquet(path)
    except SiteDataError:
        raise
    except pd.errors.EmptyDataError as exc:
        raise _refusal(path, "file is empty (no header row and no data)") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        # pandas' and pyarrow's own words may quote a line: the site's log only
        raise _refusal(path, f"cannot parse {suffix[1:]} file ({type(exc).__name__}; the "
                       "reason is in the site's log): check that it is a "
                       f"{suffix[1:]} file, written as save_local_file writes one",
                       f"cannot parse {suffix[1:]} file ({exc})") from exc
    if has_header is False and mode == "auto":
        _note(notes,
            "%s: the first line holds numbers only, so the file has no header row: read it "
            "as data (%d rows), columns named 0..%d; pass header='first-row' (node config: "
            "header='first-row') if that line is a header",
            path, frame.shape[0], frame.shape[1] - 1,
        )
    loaded = _select(path, frame, header=has_header, **options)
    return dataclasses.replace(loaded, notes=tuple(notes)) if notes else loaded


def _note(notes: list[str], message: str, *args: Any) -> None:
    """Log ``message % args`` at INFO and keep it in ``notes`` (``LocalFile.notes``)."""
    text = message % args
    logger.info("%s", text)
    notes.append(text)


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Features ``X`` and optional labels ``y`` of an NPZ archive."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = set(archive.files)
            if "X" not in keys:
                raise _refusal(path,
                    f".npz file must contain an array named 'X' "
                    f"(found keys: {sorted(keys)})"
                )
            X = _as_features(path, archive["X"], what="array 'X'")
            y = None
            if "y" in keys:
                y = _as_labels(path, archive["y"], len(X), what="array 'y'")
    except SiteDataError:
        raise
    except (OSError, EOFError, ValueError) as exc:
        raise _refusal(path, "cannot read as a NumPy .npz archive (a cut or overwritten "
                       "file, or another format): save the arrays with numpy.savez(path, "
                       "X=X, y=y)", f"cannot read as a NumPy .npz archive ({exc})") from exc
    return X, y


def load_local_file(
    path: str | os.PathLike[str],
    label_column: Column | None = DEFAULT_LABEL_COLUMN,
    *,
    feature_columns: Sequence[Column] | str | None = None,
    header: str | bool = "auto",
    index_column: Column | bool | None = None,
    allow_nan: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load one client's data from a local CSV, NPY, NPZ or Parquet file.

    Columns are named by the file's header (CSV, Parquet) or by position ``0, 1, ...``
    (NPY, NPZ's ``X``, a CSV without a header); a position may also be given as a digit
    string (``"3"``), as a node config gives it.

    Parameters
    ----------
    path : str or os.PathLike
        The file; its extension selects the format (``.csv``, ``.npy``, ``.npz``, ``.parquet``).
    label_column : str or int or None, default "label"
        The column holding the labels. ``"label"`` is used if the file has it; any other name
        must exist. ``None`` (or ``"none"``) treats every column as a feature. An NPZ
        archive's ``y`` holds its labels.
    feature_columns : sequence of str or int, or str, optional
        The feature columns, in this order (a comma-separated string is split); the other
        columns, except the label, are ignored. Default: every column but the label (and the
        index column). An unknown name is an error listing the file's columns.
    header : {"auto", "first-row", "none"} or bool, default "auto"
        CSV only. ``"auto"``: the first line is data if every field is a number (or empty),
        else a header -- a file without a header is logged at INFO and its columns are named
        ``0, 1, ...``. ``"first-row"`` (``True``) and ``"none"`` (``False``) force it.
    index_column : str or int or False, optional
        A row-index column to drop. By default (``None``) a column named ``"Unnamed: 0"`` or
        ``"__index_level_0__"``, or a first column equal to ``0, 1, ..., n-1``, is refused
        unless ``feature_columns`` is given; ``False`` (or ``"none"``) keeps such a column as
        a feature.
    allow_nan : bool, default True
        Keep missing values (empty CSV cells, NaN) as NaN, for the algorithms that read them
        as unobserved features. ``False`` raises on the first one, naming its column and its
        1-based data row (the header row is not counted).

    Returns
    -------
    X : numpy.ndarray
        ``(n, d)`` float64 features.
    y : numpy.ndarray or None
        ``(n,)`` int64 labels, or ``None`` if the file has none.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the extension is not supported, the file cannot be parsed, a value is non-numeric,
        a column name is unknown, an undeclared index column is found, a value is missing
        while ``allow_nan`` is false, the features are not 2-D, there are no rows or no
        feature columns, or labels are not integers. The message names the file.
    """
    loaded = read_local_file(
        path,
        label_column,
        feature_columns=feature_columns,
        header=header,
        index_column=index_column,
        allow_nan=allow_nan,
    )
    return loaded.X, loaded.y


def save_local_file(
    path: str | os.PathLike[str],
    X: np.ndarray,
    y: np.ndarray | None = None,
    label_column: str = "label",
) -> None:
    """Write features (and labels) to a file that :func:`load_local_file` reads back exactly.

    Used to prepare SuperNode data files in tests and docs. CSV and Parquet get the feature
    columns ``x0, x1, ...`` plus ``label_column`` if ``y`` is given; NPZ gets keys ``"X"`` and
    ``"y"``; NPY holds the features only. Float values round-trip exactly in every format.

    Parameters
    ----------
    path : str or os.PathLike
        Target file; the extension selects the format. Parent folders must exist.
    X : numpy.ndarray
        ``(n, d)`` numeric features.
    y : numpy.ndarray, optional
        ``(n,)`` integer labels.
    label_column : str, default "label"
        Name of the label column in CSV and Parquet files.

    Raises
    ------
    ValueError
        If the extension is not supported, ``X`` is not 2-D, ``y`` does not match ``X``, or
        labels are given for a ``.npy`` file (which can hold one array only).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_EXTENSIONS:
        raise _refusal(path,
            f"unsupported file extension {path.suffix!r}; "
            f"expected one of {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise _refusal(path, f"X must be a 2-D array (n_samples, n_features), got {X.shape}")
    if y is not None:
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise _refusal(path, f"y must have shape ({X.shape[0]},), got {y.shape}")
        y = y.astype(np.int64)

    if suffix == ".npy":
        if y is not None:
            raise _refusal(path,
                "a .npy file holds features only; use .npz or .csv for labels"
            )
        np.save(path, X, allow_pickle=False)
        return
    if suffix == ".npz":
        arrays = {"X": X} if y is None else {"X": X, "y": y}
        # np.savez appends ".npz" to names without it; open the file ourselves to keep the name.
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
        return

    names = [f"x{j}" for j in range(X.shape[1])]
    if label_column in names:
        raise _refusal(path, f"label_column {label_column!r} clashes with a feature name")
    import pandas as pd

    frame = pd.DataFrame(X, columns=names)
    if y is not None:
        frame[label_column] = y
    if suffix == ".csv":
        frame.to_csv(path, index=False, float_format=None)
    else:
        frame.to_parquet(path, index=False)
