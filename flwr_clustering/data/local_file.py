"""Load (and write) one client's local data file, for deployments with real SuperNodes.

Each SuperNode reads its own file, named by ``data-path`` in its node-config. Supported formats:

- ``.csv`` -- a header row, then numeric values; a column named ``label_column`` (default
  ``"label"``), if present, becomes the labels and every other column is a feature;
- ``.npy`` -- a 2-D numeric array of features (no labels);
- ``.npz`` -- key ``"X"`` (2-D features) and optional key ``"y"`` (labels);
- ``.parquet`` -- like CSV, read with pandas (needs ``pyarrow``).

Missing values (empty CSV cells, NaN) are *not* rejected here: the clustering clients check for
NaN themselves and report it with a message naming the client. Everything else that is wrong
(unknown extension, non-numeric values, wrong shape, no rows or no feature columns, labels that
are not integers) raises a ``ValueError`` that names the file and the problem.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# pandas (and through it pyarrow) is imported by the functions that read or write CSV and
# Parquet, not here: importing the package must stay cheap for clients that never touch a file.

__all__ = ["SUPPORTED_EXTENSIONS", "load_local_file", "save_local_file"]

#: File extensions understood by :func:`load_local_file` and :func:`save_local_file`.
SUPPORTED_EXTENSIONS: tuple[str, ...] = (".csv", ".npy", ".npz", ".parquet")


def _as_features(path: Path, values: np.ndarray, what: str = "features") -> np.ndarray:
    """Check a loaded feature array (numeric, 2-D, non-empty) and return it as float64."""
    if values.dtype.kind not in "biuf":
        raise ValueError(f"{path}: {what} must be numeric, got dtype {values.dtype}")
    if values.ndim != 2:
        raise ValueError(
            f"{path}: {what} must be a 2-D array (n_samples, n_features), got shape {values.shape}"
        )
    if values.shape[0] == 0:
        raise ValueError(f"{path}: file is empty (no data rows)")
    if values.shape[1] == 0:
        raise ValueError(f"{path}: file has no feature columns")
    return values.astype(np.float64)


def _as_labels(path: Path, values: np.ndarray, n: int, what: str = "labels") -> np.ndarray:
    """Check loaded labels (1-D, length ``n``, integer-valued) and return them as int64."""
    values = np.asarray(values)
    if values.ndim != 1 or values.shape[0] != n:
        raise ValueError(
            f"{path}: {what} must have shape ({n},) to match the features, got {values.shape}"
        )
    if values.dtype.kind in "iub":
        return values.astype(np.int64)
    if values.dtype.kind == "f":
        if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
            raise ValueError(
                f"{path}: {what} must be integers (missing or fractional values found)"
            )
        return values.astype(np.int64)
    raise ValueError(f"{path}: {what} must be integers, got dtype {values.dtype}")


def _load_table(
    path: Path, frame: pd.DataFrame, label_column: str | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Split a pandas DataFrame into float64 features and optional int64 labels."""
    import pandas as pd

    if frame.shape[0] == 0:
        raise ValueError(f"{path}: file is empty (no data rows)")
    y = None
    if label_column is not None and label_column in frame.columns:
        labels = frame[label_column]
        frame = frame.drop(columns=[label_column])
        numeric = pd.to_numeric(labels, errors="coerce")
        bad = numeric.isna() & labels.notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}: non-numeric value {labels.iloc[row]!r} in label column "
                f"{label_column!r} (data row {row})"
            )
        y = _as_labels(
            path,
            numeric.to_numpy(dtype=np.float64),
            len(frame),
            what=f"label column {label_column!r}",
        )
    if frame.shape[1] == 0:
        raise ValueError(f"{path}: file has no feature columns")
    for name in frame.columns:
        col = frame[name]
        if col.dtype.kind in "biuf":
            continue
        numeric = pd.to_numeric(col, errors="coerce")
        bad = numeric.isna() & col.notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}: non-numeric value {col.iloc[row]!r} in column {name!r} (data row {row})"
            )
        frame[name] = numeric
    X = frame.to_numpy(dtype=np.float64)
    return X, y


def load_local_file(
    path: str | os.PathLike[str], label_column: str | None = "label"
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load one client's data from a local CSV, NPY, NPZ or Parquet file.

    Parameters
    ----------
    path : str or os.PathLike
        The file; its extension selects the format (``.csv``, ``.npy``, ``.npz``, ``.parquet``).
    label_column : str or None, default "label"
        For CSV and Parquet: the column holding the labels, if the file has it. ``None`` treats
        every column as a feature. Ignored for NPY and NPZ.

    Returns
    -------
    X : numpy.ndarray
        ``(n, d)`` float64 features. NaN (e.g. an empty CSV cell) is passed through unchanged;
        the clustering clients reject it with a client-specific message.
    y : numpy.ndarray or None
        ``(n,)`` int64 labels, or ``None`` if the file has none.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the extension is not supported, the file cannot be parsed, a value is non-numeric,
        the features are not 2-D, there are no rows or no feature columns, or labels are not
        integers. The message names the file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_EXTENSIONS:
        raise ValueError(
            f"{path}: unsupported file extension {path.suffix!r}; "
            f"expected one of {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: data file not found")

    if suffix == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise ValueError(f"{path}: cannot read as a NumPy .npy array ({exc})") from exc
        return _as_features(path, arr), None

    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                keys = set(archive.files)
                if "X" not in keys:
                    raise ValueError(
                        f"{path}: .npz file must contain an array named 'X' "
                        f"(found keys: {sorted(keys)})"
                    )
                X = _as_features(path, archive["X"], what="array 'X'")
                y = None
                if "y" in keys:
                    y = _as_labels(path, archive["y"], len(X), what="array 'y'")
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: cannot read as a NumPy .npz archive ({exc})") from exc
        except ValueError as exc:
            if str(exc).startswith(str(path)):
                raise
            raise ValueError(f"{path}: cannot read as a NumPy .npz archive ({exc})") from exc
        return X, y

    import pandas as pd

    try:
        if suffix == ".csv":
            # pandas >= 3 parses floats exactly by default and deprecates the option.
            exact = {}
            if int(pd.__version__.split(".")[0]) < 3:
                exact["float_precision"] = "round_trip"
            frame = pd.read_csv(path, **exact)
        else:
            frame = pd.read_parquet(path)
    except pd.errors.EmptyDataError as exc:
        raise ValueError(f"{path}: file is empty (no header row and no data)") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot parse {suffix[1:]} file ({exc})") from exc
    return _load_table(path, frame, label_column)


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
        raise ValueError(
            f"{path}: unsupported file extension {path.suffix!r}; "
            f"expected one of {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{path}: X must be a 2-D array (n_samples, n_features), got {X.shape}")
    if y is not None:
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"{path}: y must have shape ({X.shape[0]},), got {y.shape}")
        y = y.astype(np.int64)

    if suffix == ".npy":
        if y is not None:
            raise ValueError(
                f"{path}: a .npy file holds features only; use .npz or .csv for labels"
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
        raise ValueError(f"{path}: label_column {label_column!r} clashes with a feature name")
    import pandas as pd

    frame = pd.DataFrame(X, columns=names)
    if y is not None:
        frame[label_column] = y
    if suffix == ".csv":
        frame.to_csv(path, index=False, float_format=None)
    else:
        frame.to_parquet(path, index=False)
