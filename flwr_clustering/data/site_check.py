"""A site's own check of its file before it joins a federation (nothing leaves the machine).

``python -m flwr_clustering check <file> [--schema schema.json]`` reads the file as the
site's SuperNode would (:func:`~flwr_clustering.data.local_file.read_local_file`), tells
what a run would see of it (rows, columns with their kinds, missing cells per column,
identifier-like and text columns) and, given the federation's schema (``schema.json``,
written by every App run next to ``model.json``) or a saved model (``model.json``),
whether the file fits it. The verdict comes from the server's own rules and in its own
words: the file is checked as one more site against the federation's features with
:func:`~flwr_clustering.data.schema.agree_schema` (the site is named ``this site``).

* :class:`FederationSchema` -- what a site needs to check a file: the features in order,
  the categorical columns with their agreed levels, the index column, the scaling, the
  missing-cell policy, the library version (``schema.json``, :func:`load_schema`).
* :func:`check_file` -- the check, as a :class:`SiteCheck` (:meth:`SiteCheck.lines` is
  what the command prints: counts, names and kinds, never a cell's value).

Layer 2: NumPy and pandas (through the loader); no Flower import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flwr_clustering import __version__
from flwr_clustering.data.local_file import DEFAULT_LABEL_COLUMN, LocalFile, read_local_file
from flwr_clustering.data.schema import (
    MIN_ID_ROWS,
    MISSING,
    OTHER,
    ColumnInfo,
    SchemaError,
    SiteDataError,
    _looks_like_id,
    agree_schema,
    category_counts,
    describe_columns,
)
from flwr_clustering.model import MODEL_FORMAT, ClusteringModel, load_model
from flwr_clustering.reporting import atomic_write_text

__all__ = [
    "ACCEPTS_MISSING",
    "MISSING_POLICIES",
    "SCHEMA_FORMAT",
    "SITE",
    "FederationSchema",
    "SiteCheck",
    "check_file",
    "load_schema",
    "missing_policy",
]

#: The ``format`` of a ``schema.json``; another value is refused by :func:`load_schema`.
SCHEMA_FORMAT = "flwr-clustering-schema/1"

#: Values of the run's ``missing`` option (what a missing cell of a feature becomes).
MISSING_POLICIES: tuple[str, ...] = MISSING
#: The policies under which a file with missing cells in its features joins (``auto``:
#: ``mean`` or, for the masked algorithms, ``partial``).
ACCEPTS_MISSING: frozenset[str] = frozenset(MISSING) - {"refuse"}

#: How the file is named in the server's messages: as one site among the federation's.
SITE = "this site"

# the federation, as sites whose columns are the schema's: two of them, so that a column
# of this file that they lack is "one most sites do not have" (agree_schema's majority)
_FEDERATION = ("the federation", "the federation's other sites")


def missing_policy(transform: Any, labelling: str = "") -> str:
    """The missing-cell policy of a run, from its agreed ``FeatureTransform``.

    ``mean``, ``drop`` and ``refuse`` as the transform says; a transform that keeps NaN is
    ``partial`` for the masked algorithms and partial FKM (their labelling
    ``masked-nearest-centroid``: a missing cell is a feature the row does not observe)
    and ``refuse`` for the others (a model of a version without the ``missing`` option).
    """
    value = getattr(transform, "missing", "keep")
    if value != "keep":
        return str(value)
    return "partial" if labelling == "masked-nearest-centroid" else "refuse"


def _none_if_empty(value: Any) -> str | None:
    return None if value in (None, "", "none", False) else str(value)


@dataclass(frozen=True)
class FederationSchema:
    """What a site needs to check its file against a federation (``schema.json``).

    Attributes
    ----------
    features : tuple of str
        The numeric features, in the federation's order.
    categories : tuple of (str, tuple of str)
        The categorical columns and their agreed levels (the last is ``other``).
    index_column : str or None
        The declared identifier column (never a feature).
    named : bool
        Whether the run listed its features (``feature-columns``): a site's other
        columns are then ignored; otherwise every site must have the same columns.
    scaling : str
        The scaling's name (``standard``, ``minmax``, ``none``).
    missing : str
        The missing-cell policy (:data:`MISSING_POLICIES`).
    algorithm : str
        The run's algorithm.
    library_version : str
        The ``flwr_clustering`` version of the run.
    datetimes : tuple of str
        The declared date/time features (``datetime-columns``), among ``features``.
    """

    features: tuple[str, ...]
    categories: tuple[tuple[str, tuple[str, ...]], ...] = ()
    index_column: str | None = None
    named: bool = False
    scaling: str = "none"
    missing: str = "refuse"
    algorithm: str = ""
    library_version: str = __version__
    datetimes: tuple[str, ...] = ()

    @classmethod
    def from_run(cls, transform: Any, options: Mapping[str, Any], *, labelling: str = "",
                 library_version: str = __version__) -> FederationSchema:
        """The schema of a run: its agreed ``FeatureTransform`` and its run config."""
        return cls(tuple(transform.numeric_features), tuple(transform.categories),
                   _none_if_empty(options.get("index-column")),
                   bool(_none_if_empty(options.get("feature-columns"))), transform.scaling,
                   missing_policy(transform, labelling), str(options.get("algorithm", "")),
                   library_version, tuple(getattr(transform, "datetimes", ())))

    @classmethod
    def from_model(cls, model: ClusteringModel) -> FederationSchema:
        """The schema a saved model (``model.json``) stands for."""
        return cls.from_run(model.transform, model.options, labelling=model.labelling,
                            library_version=model.library_version)

    def to_dict(self) -> dict[str, Any]:
        """The schema as JSON-able values (the keys of ``schema.json``)."""
        dates = {"datetime-columns": list(self.datetimes)} if self.datetimes else {}
        return {"format": SCHEMA_FORMAT, "features": list(self.features),
                "categorical-columns": {c: list(levels) for c, levels in self.categories},
                **dates,
                "feature-columns": self.named, "index-column": self.index_column,
                "scaling": self.scaling, "missing": self.missing,
                "algorithm": self.algorithm, "library-version": self.library_version}

    @classmethod
    def from_dict(cls, data: Any) -> FederationSchema:
        """Read :meth:`to_dict`'s output.

        Raises
        ------
        ValueError
            If ``data`` is not a schema of :data:`SCHEMA_FORMAT`.
        """
        if not isinstance(data, Mapping) or data.get("format") != SCHEMA_FORMAT:
            raise ValueError(f"not a federation schema (format {SCHEMA_FORMAT!r})")
        try:
            features = [str(f) for f in data["features"]]
            categories = tuple((str(c), tuple(str(v) for v in levels))
                               for c, levels in dict(data["categorical-columns"]).items())
            missing = str(data["missing"])
            schema = cls(tuple(features), categories, _none_if_empty(data["index-column"]),
                         bool(data["feature-columns"]), str(data["scaling"]), missing,
                         str(data.get("algorithm", "")), str(data["library-version"]),
                         tuple(str(c) for c in data.get("datetime-columns", [])))
        except (KeyError, TypeError, ValueError) as ex:
            raise ValueError(f"malformed federation schema: {ex}") from ex
        if missing not in MISSING_POLICIES:
            raise ValueError(f"malformed federation schema: missing={missing!r} is not one "
                             f"of {', '.join(MISSING_POLICIES)}")
        return schema

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the schema to ``path`` (JSON, atomically); returns ``path``."""
        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    def describe(self) -> str:
        """One line: features, categorical columns, scaling, missing policy."""
        text = f"{len(self.features)} features"
        if self.datetimes:
            text += f" ({len(self.datetimes)} of them dates)"
        if self.categories:
            text += f" and {len(self.categories)} categorical column(s)"
        if self.named:
            text += " (feature-columns: other columns ignored)"
        if self.index_column:
            text += f", index-column {self.index_column!r}"
        return (text + f", scaling {self.scaling!r}, missing={self.missing!r}, "
                f"flwr_clustering {self.library_version}")


def load_schema(path: str | os.PathLike[str]) -> FederationSchema:
    """A federation's schema from its ``schema.json`` or a saved model's ``model.json``.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        Naming the path: not JSON, or neither a schema nor a model.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no schema file {str(path)!r}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as ex:
        raise ValueError(f"{str(path)!r} is not a schema: not JSON ({ex})") from ex
    except RecursionError:  # a JSON nested thousands of levels deep
        raise ValueError(f"{str(path)!r} is neither a schema.json nor a model.json of "
                         "flwr_clustering: its JSON nests deeper than Python reads (they "
                         "are a few levels deep): give the file a run wrote") from None
    if isinstance(data, Mapping) and data.get("format") == MODEL_FORMAT:
        return FederationSchema.from_model(load_model(path))
    try:
        return FederationSchema.from_dict(data)
    except ValueError as ex:
        raise ValueError(f"{str(path)!r} is neither a schema.json nor a model.json of "
                         f"flwr_clustering: {ex}") from ex


# ------------------------------------------------------------------------------- check


@dataclass(frozen=True)
class ColumnReport:
    """What the check says of one column: its kind and counts, never a value."""

    name: str
    kind: str
    missing: int
    id_like: bool
    role: str


@dataclass
class SiteCheck:
    """The check of one file: what a run would see of it and whether it would join.

    Attributes
    ----------
    path : str
        The file.
    rows : int
        Its data rows.
    columns : list of ColumnReport
        Per column (label column excluded) its kind, missing cells, whether it looks like
        an identifier, and its role in the run (``feature``, ``categorical``, ``index``,
        ``ignored``, or ``""`` when the file does not fit).
    label_column : str or None
        The column read as labels (not a feature).
    dropped_index : str or None
        The index column the reading dropped (``--index-column``).
    header : bool or None
        CSV: whether the first line was read as a header.
    schema : FederationSchema or None
        The federation's schema the file was checked against.
    missing : str
        The missing-cell policy the verdict assumes.
    features : tuple of str
        The run's features of this file, in order (empty when it does not fit).
    problems : list of str
        Why the file would be refused (the server's words); empty when accepted.
    notes : list of str
        What the operator should know, without a refusal.
    """

    path: str
    rows: int
    columns: list[ColumnReport]
    label_column: str | None
    dropped_index: str | None
    header: bool | None
    schema: FederationSchema | None
    missing: str
    features: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    schema_source: str | None = None

    @property
    def accepted(self) -> bool:
        """Whether a run would accept the file."""
        return not self.problems

    def lines(self) -> list[str]:
        """The report as printed by ``python -m flwr_clustering check``."""
        how = []
        if self.header is not None:
            how.append("header row" if self.header else "no header row (columns by position)")
        how.append(f"label column {self.label_column!r} (not a feature)"
                   if self.label_column else "no label column")
        if self.dropped_index is not None:
            how.append(f"index column {self.dropped_index!r} dropped")
        out = [f"{self.path}: {self.rows} rows, {len(self.columns)} columns "
               f"({'; '.join(how)})"]
        width = max([len(c.name) for c in self.columns] + [6])
        out.append(f"  {'column':<{width}}  {'kind':<8} {'missing':>7}  role")
        for c in self.columns:
            role = ", ".join(r for r in (c.role, "identifier-like" if c.id_like else "") if r)
            out.append(f"  {c.name:<{width}}  {c.kind:<8} {c.missing:>7}  {role}".rstrip())
        missing = [c for c in self.columns if c.missing]
        total = sum(c.missing for c in missing)
        out.append(f"missing cells: {total}" + (
            f" in {len(missing)} column(s) ({', '.join(repr(c.name) for c in missing)})"
            if total else ""))
        ids = [c.name for c in self.columns if c.id_like]
        text = [c.name for c in self.columns if c.kind == "text"]
        dates = [c.name for c in self.columns if c.kind == "datetime"]
        out.append("identifier-like columns: " + (", ".join(map(repr, ids)) or "none"))
        out.append("text columns: " + (", ".join(map(repr, text)) or "none"))
        out.append("date columns: " + (", ".join(map(repr, dates)) or "none"))
        if self.schema is not None:
            out.append(f"federation: {self.schema_source or 'schema'}: "
                       f"{self.schema.describe()}")
        else:
            out.append(f"no federation schema given (--schema): the file checked alone, "
                       f"with missing={self.missing!r}")
        if self.features:
            names = ", ".join(self.features[:12]) + (", ..." if len(self.features) > 12
                                                      else "")
            out.append(f"features a run would take: {len(self.features)} [{names}]")
        out.extend(f"note: {n}" for n in self.notes)
        out.extend(f"refused: {p}" for p in self.problems)
        out.append("verdict: " + ("this file would be accepted" if self.accepted
                                  else "this file would be refused"))
        return out


def _without_values(ex: ValueError) -> str:
    """A loader's refusal without any cell or line (the message a client sends)."""
    return ex.public if isinstance(ex, SiteDataError) else str(ex)


def _read(path: str | os.PathLike[str], options: dict[str, Any]
          ) -> tuple[LocalFile, str | None]:
    """The file as the SuperNode reads it, and the loader's refusal of a row index.

    A row index written with the data is refused by the loader itself (the SuperNode's
    error); the check then reads the file with that column kept, to say the rest.

    Raises
    ------
    FileNotFoundError, ValueError
        When the file cannot be read (the message without any cell's value).
    """
    try:
        return read_local_file(path, **options), None
    except FileNotFoundError:
        raise
    except ValueError as ex:
        first = _without_values(ex)
        if options.get("index_column") is not None:
            raise ValueError(first) from None
        try:
            return read_local_file(path, **{**options, "index_column": False}), first
        except ValueError:
            raise ValueError(first) from None


def _federation_columns(schema: FederationSchema) -> list[ColumnInfo]:
    """The federation's columns as a site would describe them.

    Numeric (declared dates as dates), and not unique on every row (the federation agreed
    on them, so they did not look like identifiers across its sites); categorical columns
    as text.
    """
    return ([ColumnInfo(f, "datetime" if f in schema.datetimes else "numeric", False,
                        MIN_ID_ROWS) for f in schema.features]
            + [ColumnInfo(c, "text", False, MIN_ID_ROWS) for c, _ in schema.categories])


def _missing_per_column(loaded: LocalFile) -> dict[str, int]:
    counts = {str(f): int(n) for f, n in zip(loaded.features, np.isnan(loaded.X).sum(axis=0),
                                               strict=True)}
    for name, values in loaded.text.items():
        counts[str(name)] = int(sum(1 for v in values if v is None or v != v
                                    or (isinstance(v, str) and not v.strip())))
    for name, seconds in loaded.dates.items():
        counts[str(name)] = int(np.isnan(seconds).sum())
    return counts


def check_file(
    path: str | os.PathLike[str],
    schema: FederationSchema | None = None,
    *,
    feature_columns: Sequence[str] | None = None,
    index_column: str | None = None,
    categorical_columns: Sequence[str] = (),
    datetime_columns: Sequence[str] = (),
    label_column: str | None = DEFAULT_LABEL_COLUMN,
    header: str | bool = "auto",
    missing: str = "refuse",
    schema_source: str | None = None,
) -> SiteCheck:
    """Check a site's file as a run would see it (see the module).

    Parameters
    ----------
    path : str or os.PathLike
        The site's data file (CSV, NPY, NPZ, Parquet).
    schema : FederationSchema, optional
        The federation's schema (:func:`load_schema`); ``None``: the file checked alone,
        as if every site held a file like it, with the options below.
    feature_columns : sequence of str, optional
        Without a schema: the run's ``feature-columns`` (the features, in this order; the
        other columns are ignored).
    index_column : str, optional
        The identifier column: dropped when the file is read (as the node config's
        ``index-column``) and, without a schema, the run's ``index-column``.
    categorical_columns : sequence of str
        Without a schema: the run's ``categorical-columns`` (the schema has its own).
    datetime_columns : sequence of str
        Without a schema: the run's ``datetime-columns`` (the schema has its own).
    label_column, header
        As the node config's ``label-column`` and ``header``.
    missing : str
        Without a schema: the run's missing-cell policy (the schema has its own).
    schema_source : str, optional
        Where the schema came from, for the report.

    Returns
    -------
    SiteCheck

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If it cannot be read (the loader's message, without any cell's value), or on a bad
        option.
    """
    policy = schema.missing if schema is not None else str(missing)
    if policy not in MISSING_POLICIES:
        raise ValueError(f"missing={policy!r} is not one of {', '.join(MISSING_POLICIES)}")
    # every column read (the report names them all); feature-columns chooses among them
    # in the agreement, as the run's, and (as at the loader) spares the row-index check
    options = {"label_column": label_column, "header": header,
               "index_column": index_column if index_column or not feature_columns else False,
               "allow_nan": True}
    loaded, refusal = _read(path, options)
    table = loaded.table()
    infos = describe_columns(table)
    problems = [refusal] if refusal else []
    notes: list[str] = []

    if schema is not None:
        sites: dict[str, Sequence[ColumnInfo]] = {s: _federation_columns(schema)
                                                  for s in _FEDERATION}
        agreement = {"feature_columns": schema.features if schema.named else None,
                     "index_column": schema.index_column,
                     "categorical_columns": [c for c, _ in schema.categories],
                     "datetime_columns": list(schema.datetimes)}
    else:
        sites = {}
        agreement = {"feature_columns": list(feature_columns) if feature_columns else None,
                     "index_column": index_column,
                     "categorical_columns": list(categorical_columns),
                     "datetime_columns": list(datetime_columns)}
    sites[SITE] = infos
    index = agreement["index_column"]
    if index and not any(str(index) == c.name for cols in sites.values() for c in cols):
        # dropped when the file was read (--index-column), or a federation's column that
        # this file lacks too (the schema's sites do not list it): nothing to agree on
        agreement["index_column"] = None
    features: tuple[str, ...] = ()
    categorical = tuple(agreement["categorical_columns"])
    try:
        agreed = agree_schema(sites, **agreement)
        features, categorical = agreed.features, agreed.categorical
        notes.extend(agreed.notes)
    except SchemaError as ex:
        problems.append(str(ex))
    for column in agreement["datetime_columns"]:  # read as the clients read it
        if column in table.text:
            try:
                table.seconds(column)
            except SchemaError as ex:  # a cell that is not a date: its row, never its value
                problems.append(str(ex))
    counts = _missing_per_column(loaded)
    # the features' missing cells; where the file does not fit, those of the federation's
    # features it has (so that one check says both)
    judged = features or (tuple(f for f in schema.features if f in table.names)
                          if schema is not None else ())
    in_features = {f: counts.get(f, 0) for f in judged}
    cells = sum(in_features.values())
    if cells:
        where = ", ".join(f"{f!r}: {n}" for f, n in in_features.items() if n)
        try:
            values = table.columns(judged, agreement["datetime_columns"])
            rows = int(np.isnan(values).any(axis=1).sum())
        except SchemaError:  # a declared date column's cell that is not a date (above)
            rows = 0
        if policy not in ACCEPTS_MISSING:
            problems.append(f"{cells} missing cell(s) in the features ({where}; {rows} "
                            f"row(s)): the federation runs with missing={policy!r}, so "
                            "this file would be refused (fill or drop them, or a run "
                            "with missing='mean', 'drop' or 'partial')")
        elif policy == "drop" and rows == loaded.X.shape[0]:
            problems.append(f"every row of this file has a missing cell ({where}): with "
                            "missing='drop' none would be clustered")
        else:
            notes.append(f"{cells} missing cell(s) in the features ({where}; {rows} row(s)): "
                         f"accepted with missing={policy!r}")
    if schema is not None:
        for column, levels in schema.categories:
            if column not in table.all_names:
                continue
            found = category_counts(table, [column], 1)[column]
            unknown = {v: n for v, n in found.items() if v not in levels}
            if unknown:
                notes.append(f"categorical column {column!r}: {sum(unknown.values())} row(s) "
                             f"hold {len(unknown)} value(s) the federation did not agree "
                             f"on ({len(levels) - 1} levels): they count as {OTHER!r}")

    label = None if loaded.label_column is None else str(loaded.label_column)
    index = None if loaded.index_column is None else str(loaded.index_column)
    fed_index = agreement["index_column"]
    reports = []
    for info in infos:
        if info.name in features:
            role = "feature"
        elif info.name in categorical:
            role = "categorical"
        elif fed_index is not None and info.name == str(fed_index):
            role = "index"
        elif features:
            role = "ignored"
        else:
            role = ""
        reports.append(ColumnReport(info.name, info.kind, counts.get(info.name, 0),
                                    _looks_like_id(info.name, [info]), role))
    return SiteCheck(str(path), int(loaded.X.shape[0]), reports, label, index, loaded.header,
                     schema, policy, tuple(features), problems, notes, schema_source)
