"""``python -m simulations bench raw-data``: quality at the defaults on raw-unit tabular data.

The federation agrees on its features by name and scales them across the sites before
round 1 (:class:`flwr_clustering.FederatedClustering`'s ``scaling="standard"``, the
default; ``scaling="none"`` is the old behaviour). This benchmark measures what that buys
on tabular data in its **raw units**, where features differ in scale by orders of
magnitude, and what it costs where they do not.

Data (scikit-learn's bundled sets only, nothing downloaded), every site a pandas
DataFrame with the set's column names:

- ``wine`` (k = 3, 178 x 13; proline in the 1000s next to hue near 1),
- ``breast-cancer`` (k = 2, 569 x 30; areas in the 1000s next to smoothness near 0.1),
- ``iris`` (k = 3, 150 x 4; all four in centimetres),
- ``iris-sepal-width-x1000`` (iris with ``sepal width (cm)`` multiplied by 1000 and named
  ``sepal width (cm x 1000)``: one feature in a unit a thousand times smaller, and the
  least informative one of the four),
- ``digits`` (k = 10, 1797 x 64; pixel intensities 0-16, one unit for every feature): the
  control, where scaling has nothing to repair.

Splits (fixed seed): ``iid`` (a shuffle cut into equal sites) and ``dirichlet`` (per
class, the class's rows shared among the sites by Dirichlet(0.3) proportions; redrawn
until every site has at least ``2 k`` rows). Every site must have at least ``2 k`` rows
for every split and site count, else the setting is skipped (a ``skipped`` row says why).

Algorithms: the estimator's centre-based ones, ``fkm``, ``kfed``, ``feca``, ``mavg``,
``ffcm``, ``dgc``, and the masked ones on the complete rows (no NaN), ``masked-federated``
and ``masked-oneshot``. KDC (a kernel model that labels rows with its Isolation Kernel) and
DeepFeCA (a network; it takes its rows as they are, whatever ``scaling``) are not
centre-based and are left out. Each runs as ``FederatedClustering(algorithm,
n_clusters=k, random_state=0, scaling=...)`` with nothing else set; a run that raises
because a local cluster is smaller than the privacy threshold is recorded as failed and
run once more with ``privacy_threshold=1`` (the smallest change that lets it run; the row
says so in ``options``).

Measured per run, for ``scaling="standard"`` and ``scaling="none"``: the ARI of the
concatenated ``labels_`` against the true classes; the SSE on the **standardised pooled
rows** (``StandardScaler`` fitted on the pooled rows; the model's ``cluster_centers_``,
which the estimator returns in the data's own units whatever the scaling, mapped through
that standardisation; every row to the centre of its own label in ``labels_``; DGC: every
site's rows to that site's own centres ``user_centers_[i]``, by which it labelled them);
the same for centralized ``KMeans(k, n_init=10, random_state=0)`` on the standardised
pooled rows (the reference); ``len(warnings_)`` and its text; the wall seconds of ``fit``.
A run that raises is a row with its error; the benchmark goes on.

Usage, from the repository root::

    python -m simulations bench raw-data [--datasets D ...] [--algorithms A ...]
                                         [--sites 3 5 10] [--splits iid dirichlet]
                                         [--seed S] [--threads N] [--out docs/]

writes ``<out>/raw-data-quality.csv`` (one row per run, :data:`COLUMNS`) and
``<out>/raw-data-quality.md`` (a table per data set, medians per algorithm, the runs worse
than k-means). The runs go one after the other in this process with one BLAS/OpenMP
thread (``--threads``): the whole default grid took 4.5 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ALGORITHMS",
    "COLUMNS",
    "DATASETS",
    "RawDataset",
    "add_parser",
    "kmeans_reference",
    "load",
    "main",
    "markdown",
    "run_benchmark",
    "run_one",
    "short_error",
    "split_rows",
    "standardised_sse",
    "write_csv",
]

logger = logging.getLogger("simulations.raw_data")

PROG = "python -m simulations bench raw-data"
CSV_NAME = "raw-data-quality.csv"
MD_NAME = "raw-data-quality.md"

#: The estimator's centre-based algorithms (KDC and DeepFeCA are not centre-based).
ALGORITHMS = ("fkm", "kfed", "feca", "mavg", "ffcm", "dgc", "masked-federated",
              "masked-oneshot")
SCALINGS = ("standard", "none")
SPLITS = ("iid", "dirichlet")
SITES = (3, 5, 10)
DIRICHLET_ALPHA = 0.3
#: Every site gets at least this many rows per cluster (``2 k``).
MIN_ROWS_PER_CLUSTER = 2
#: Dirichlet draws tried before a setting is skipped.
MAX_DRAWS = 1000
#: A run worse than k-means by more than this ARI is listed in the summary.
ARI_MARGIN = 0.05
#: The option a run that fails on the privacy threshold is retried with.
RETRY_OPTIONS = {"privacy_threshold": 1}
#: digits take about a minute per run (64 features, 1797 rows).

COLUMNS = (
    "dataset", "k", "n", "d", "split", "sites", "site_rows", "draws", "algorithm",
    "scaling", "options", "status", "ari", "sse_std", "kmeans_ari", "kmeans_sse_std",
    "sse_ratio", "ari_minus_kmeans", "ari_predict", "warnings", "n_iter", "seconds",
    "warning_text", "error",
)


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class RawDataset:
    """A bundled scikit-learn set in its raw units.

    Attributes
    ----------
    name : str
        The benchmark's name of the set.
    k : int
        The number of true classes (the ``n_clusters`` of every run).
    description : str
        One line for the Markdown page.
    loader : callable
        ``loader() -> (frame, y)``: the rows as a DataFrame with the set's column names and
        the true classes.
    """

    name: str
    k: int
    description: str
    loader: Callable[[], tuple[Any, np.ndarray]]


def _sklearn(name: str) -> Callable[[], tuple[Any, np.ndarray]]:
    def loader() -> tuple[Any, np.ndarray]:
        from sklearn import datasets

        bunch = getattr(datasets, f"load_{name}")(as_frame=True)
        return bunch.data.astype(np.float64), bunch.target.to_numpy().astype(np.int64)

    return loader


#: The column of iris multiplied by 1000, and its new name.
IRIS_SCALED_COLUMN = "sepal width (cm)"
IRIS_SCALED_NAME = "sepal width (cm x 1000)"
IRIS_FACTOR = 1000.0


def _iris_x1000() -> tuple[Any, np.ndarray]:
    frame, y = _sklearn("iris")()
    frame = frame.copy()
    frame[IRIS_SCALED_COLUMN] = frame[IRIS_SCALED_COLUMN] * IRIS_FACTOR
    return frame.rename(columns={IRIS_SCALED_COLUMN: IRIS_SCALED_NAME}), y


DATASETS: dict[str, RawDataset] = {d.name: d for d in (
    RawDataset("wine", 3, "178 x 13, raw units (proline ~750 with sd 315; hue ~1 with sd "
               "0.23; nonflavanoid phenols sd 0.12)", _sklearn("wine")),
    RawDataset("breast-cancer", 2, "569 x 30, raw units (worst area up to 4254; "
               "smoothness ~0.1)", _sklearn("breast_cancer")),
    RawDataset("iris", 3, "150 x 4, all in centimetres (sd 0.43-1.77)", _sklearn("iris")),
    RawDataset("iris-sepal-width-x1000", 3, f"iris with '{IRIS_SCALED_COLUMN}' x 1000 "
               f"(named '{IRIS_SCALED_NAME}'): one feature, the least informative, in a "
               "unit 1000x smaller", _iris_x1000),
    RawDataset("digits", 10, "1797 x 64, pixel intensities 0-16 (one unit; some pixels "
               "constant or nearly): the control", _sklearn("digits")),
)}


def load(name: str) -> tuple[Any, np.ndarray]:
    """The rows (a DataFrame, raw units) and true classes of a benchmark data set.

    Parameters
    ----------
    name : str
        A key of :data:`DATASETS`.

    Returns
    -------
    (pandas.DataFrame, numpy.ndarray)
        The rows with the set's column names (float64) and the classes (int64).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; available: {', '.join(DATASETS)}")
    return DATASETS[name].loader()


def split_rows(y: np.ndarray, sites: int, split: str, k: int, seed: int = 0
               ) -> tuple[list[np.ndarray] | None, int, str]:
    """The row indices of every site, or why the setting is skipped.

    Parameters
    ----------
    y : numpy.ndarray of shape (n,)
        The true classes.
    sites : int
        Number of sites.
    split : {"iid", "dirichlet"}
        ``iid``: a shuffle cut into ``sites`` near-equal parts; ``dirichlet``: every class's
        rows shared by Dirichlet(:data:`DIRICHLET_ALPHA`) proportions, redrawn until every
        site has at least ``2 k`` rows (at most :data:`MAX_DRAWS` draws).
    k : int
        Number of clusters (the minimum site size is ``2 k``).
    seed : int, default 0
        Seed of the shuffle and the draws (with ``sites``, so every setting has its own).

    Returns
    -------
    (list of numpy.ndarray or None, int, str)
        The rows of every site (shuffled within the site), the draws used (1 for ``iid``),
        and ``""``, or ``None``, the draws tried and the reason for skipping.
    """
    y = np.asarray(y)
    n = len(y)
    need = MIN_ROWS_PER_CLUSTER * k
    if split == "iid":
        rng = np.random.default_rng([seed, sites, 0])
        parts = np.array_split(rng.permutation(n), sites)
        smallest = min(len(p) for p in parts)
        if smallest < need:
            return None, 1, (f"an IID site has {smallest} rows, fewer than 2k = {need}")
        return parts, 1, ""
    if split != "dirichlet":
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    rng = np.random.default_rng([seed, sites, 1])
    classes = np.unique(y)
    for draw in range(1, MAX_DRAWS + 1):
        buckets: list[list[np.ndarray]] = [[] for _ in range(sites)]
        for c in classes:
            rows = rng.permutation(np.flatnonzero(y == c))
            share = rng.dirichlet(np.full(sites, DIRICHLET_ALPHA))
            cuts = np.round(np.cumsum(share)[:-1] * len(rows)).astype(int)
            for site, part in enumerate(np.split(rows, cuts)):
                buckets[site].append(part)
        parts = [rng.permutation(np.concatenate(b)) for b in buckets]
        if min(len(p) for p in parts) >= need:
            return parts, draw, ""
    return None, MAX_DRAWS, (f"no Dirichlet({DIRICHLET_ALPHA}) draw of {MAX_DRAWS} gave every "
                             f"site 2k = {need} rows")


# --------------------------------------------------------------------------- metrics
def standardised_sse(Z: np.ndarray, centres: np.ndarray, labels: np.ndarray) -> float:
    """Sum of squared distances of every row to the centre of its label.

    Parameters
    ----------
    Z : numpy.ndarray of shape (n, d)
        Rows (here: standardised).
    centres : numpy.ndarray of shape (k, d) or (n, d)
        The centres, or every row's own centre (``(n, d)``, with ``labels=None``).
    labels : numpy.ndarray of shape (n,) or None
        The centre of every row; ``None`` when ``centres`` already has one row per row.

    Returns
    -------
    float
        The SSE (NaN if a used centre has NaN entries).
    """
    own = centres if labels is None else centres[np.asarray(labels, dtype=np.int64)]
    return float(np.sum((Z - own) ** 2))


def kmeans_reference(Z: np.ndarray, y: np.ndarray, k: int) -> dict[str, float]:
    """Centralized ``KMeans(k, n_init=10, random_state=0)`` on the standardised rows.

    Parameters
    ----------
    Z : numpy.ndarray of shape (n, d)
        The standardised pooled rows.
    y : numpy.ndarray of shape (n,)
        The true classes.
    k : int
        Number of clusters.

    Returns
    -------
    dict
        ``{"ari", "sse"}``: its ARI against ``y`` and its SSE on ``Z``.
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    km = KMeans(n_clusters=k, n_init=10, random_state=0).fit(Z)
    return {"ari": float(adjusted_rand_score(y, km.labels_)),
            "sse": standardised_sse(Z, km.cluster_centers_, km.labels_)}


def _column_order(est: Any, columns: Sequence[str]) -> np.ndarray:
    """Positions of ``columns`` among the estimator's ``feature_names_in_``."""
    names = [str(c) for c in est.feature_names_in_]
    return np.array([names.index(str(c)) for c in columns])


def run_one(frames: Sequence[Any], ys: Sequence[np.ndarray], scaler: Any, algorithm: str,
            k: int, scaling: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit the estimator once and measure it (never raises).

    Parameters
    ----------
    frames : sequence of pandas.DataFrame
        The sites' rows, raw units.
    ys : sequence of numpy.ndarray
        The sites' true classes.
    scaler : sklearn.preprocessing.StandardScaler
        Fitted on the pooled rows (the standardisation of the SSE).
    algorithm : str
        A registered algorithm.
    k : int
        ``n_clusters``.
    scaling : {"standard", "none"}
        The estimator's ``scaling``.
    options : dict, optional
        Algorithm options besides the defaults (the retry's).

    Returns
    -------
    dict
        ``status`` (``"ok"`` or ``"failed"``), ``ari``, ``sse_std``, ``ari_predict`` (the
        ARI of ``predict`` on the pooled rows: the global model; DGC: the network mean),
        ``warnings``, ``warning_text``, ``n_iter``, ``seconds``, ``error``.
    """
    import pandas as pd
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering import FederatedClustering

    options = dict(options or {})
    columns = list(frames[0].columns)
    row: dict[str, Any] = {"status": "failed", "ari": math.nan, "sse_std": math.nan,
                           "ari_predict": math.nan, "warnings": math.nan, "warning_text": "",
                           "n_iter": math.nan, "seconds": math.nan, "error": ""}
    start = time.perf_counter()
    try:
        est = FederatedClustering(algorithm, n_clusters=k, random_state=0, scaling=scaling,
                                  **options).fit(list(frames))
        row["seconds"] = time.perf_counter() - start
        if any(lab is None for lab in est.labels_):
            raise RuntimeError("a client returned no labels")
        labels = [np.asarray(lab, dtype=np.int64) for lab in est.labels_]
        order = _column_order(est, columns)
        if est.user_centers_ is not None:  # DGC: every site labels with its own centres
            per_site = [np.asarray(est.user_centers_[i], dtype=np.float64)[:, order]
                        for i in range(len(frames))]
        else:
            per_site = [np.asarray(est.cluster_centers_, dtype=np.float64)[:, order]] \
                * len(frames)
        own = np.concatenate([scaler.transform(C)[lab]
                              for C, lab in zip(per_site, labels, strict=True)])
        Z = scaler.transform(np.concatenate([f.to_numpy(dtype=np.float64) for f in frames]))
        y = np.concatenate(ys)
        pooled = pd.concat(list(frames), ignore_index=True)
        row.update(
            status="ok",
            ari=float(adjusted_rand_score(y, np.concatenate(labels))),
            sse_std=standardised_sse(Z, own, None),
            ari_predict=float(adjusted_rand_score(y, est.predict(pooled))),
            warnings=len(est.warnings_),
            warning_text=" | ".join(est.warnings_),
            n_iter=int(est.n_iter_),
        )
    except Exception as ex:  # noqa: BLE001 - a failed run is a row, never a crash
        if math.isnan(row["seconds"]):
            row["seconds"] = time.perf_counter() - start
        first = (str(ex).strip().splitlines() or [""])[0]
        row["error"] = f"{type(ex).__name__}: {first}"
    return row


def short_error(error: str) -> str:
    """A failed run's error in one short sentence (the CSV keeps the first line whole).

    Parameters
    ----------
    error : str
        The row's ``error``.

    Returns
    -------
    str
        For a reply withheld under the privacy threshold: how many sites withheld and why;
        otherwise the error, cut at 160 characters.
    """
    withheld = re.search(r"(\d+) client\(s\) withheld", error)
    quorum = re.search(r"min_nodes=(\d+)", error)
    size = re.search(r"a local cluster has (\d+) point\(s\), fewer than the privacy threshold "
                     r"(\d+)", error)
    if withheld and quorum and size:
        return (f"{withheld.group(1)} of {quorum.group(1)} sites withheld their reply (a local "
                f"cluster of {size.group(1)} row(s), under the privacy threshold "
                f"{size.group(2)}), so round 1 had too few replies")
    return error if len(error) <= 160 else error[:157] + "..."


def _needs_retry(row: dict[str, Any]) -> bool:
    """Whether a failed run failed on the privacy threshold (then retried)."""
    return row["status"] == "failed" and "privacy threshold" in row["error"]


# ------------------------------------------------------------------------------ runs
def _thread_limit(threads: int | None):
    from contextlib import nullcontext

    if threads is None:
        return nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(threads)


def run_benchmark(datasets: Sequence[str] = tuple(DATASETS),
                  algorithms: Sequence[str] = ALGORITHMS,
                  sites: Sequence[int] = SITES, splits: Sequence[str] = SPLITS, *,
                  seed: int = 0, threads: int | None = 1,
                  progress: Callable[[str], None] | None = None,
                  on_dataset: Callable[[list[dict[str, Any]]], None] | None = None,
                  ) -> list[dict[str, Any]]:
    """Run every (data set, split, sites, algorithm, scaling); one row per run.

    Parameters
    ----------
    datasets, algorithms, sites, splits : sequences
        The grid (names of :data:`DATASETS`, :data:`ALGORITHMS`, :data:`SPLITS`).
    seed : int, default 0
        Seed of the splits (the estimator always runs with ``random_state=0``).
    threads : int or None, default 1
        BLAS/OpenMP threads (threadpoolctl) during the runs; ``None`` leaves them alone.
    progress : callable, optional
        Called with one line per run.
    on_dataset : callable, optional
        Called with the rows so far after every data set (to save partial results).

    Returns
    -------
    list of dict
        One row per run with the keys :data:`COLUMNS`: a run at the defaults; after a run
        that failed on the privacy threshold, its retry (``options`` set); a ``skipped`` row
        per setting without a split (``error`` says why).
    """
    from sklearn.preprocessing import StandardScaler

    missing = [d for d in datasets if d not in DATASETS]
    if missing:
        raise ValueError(f"unknown data set(s) {missing}; available: {', '.join(DATASETS)}")
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {unknown}; centre-based: {', '.join(ALGORITHMS)}")
    say = progress or (lambda _line: None)
    rows: list[dict[str, Any]] = []
    with _thread_limit(threads):
        for name in datasets:
            spec = DATASETS[name]
            frame, y = load(name)
            X = frame.to_numpy(dtype=np.float64)
            scaler = StandardScaler().fit(X)
            ref = kmeans_reference(scaler.transform(X), y, spec.k)
            base = {"dataset": name, "k": spec.k, "n": len(X), "d": X.shape[1],
                    "kmeans_ari": ref["ari"], "kmeans_sse_std": ref["sse"]}
            for split in splits:
                for m in sites:
                    parts, draws, why = split_rows(y, m, split, spec.k, seed)
                    setting = {**base, "split": split, "sites": m, "draws": draws,
                               "site_rows": "" if parts is None
                               else ";".join(str(len(p)) for p in parts)}
                    for algorithm in algorithms:
                        if why:
                            rows.extend(_skipped(setting, algorithm, s, why) for s in SCALINGS)
                            say(f"{name} {split} {m} sites {algorithm}: skipped ({why})")
                            continue
                        frames = [frame.iloc[p].reset_index(drop=True) for p in parts]
                        ys = [y[p] for p in parts]
                        for scaling in SCALINGS:
                            options: dict[str, Any] = {}
                            while True:
                                r = run_one(frames, ys, scaler, algorithm, spec.k, scaling,
                                            options)
                                row = _row(setting, algorithm, scaling, options, r)
                                rows.append(row)
                                say(_progress_line(row))
                                if options or not _needs_retry(r):
                                    break
                                options = dict(RETRY_OPTIONS)
            if on_dataset is not None:
                on_dataset(rows)
    return rows


def _options_text(options: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(options.items()))


def _row(setting: dict[str, Any], algorithm: str, scaling: str, options: dict[str, Any],
         r: dict[str, Any]) -> dict[str, Any]:
    row = {**setting, "algorithm": algorithm, "scaling": scaling,
           "options": _options_text(options), **r}
    row["sse_ratio"] = row["sse_std"] / row["kmeans_sse_std"]
    row["ari_minus_kmeans"] = row["ari"] - row["kmeans_ari"]
    return {c: row.get(c, "") for c in COLUMNS}


def _skipped(setting: dict[str, Any], algorithm: str, scaling: str, why: str
             ) -> dict[str, Any]:
    row = {**setting, "algorithm": algorithm, "scaling": scaling, "options": "",
           "status": "skipped", "error": why}
    return {c: row.get(c, "") for c in COLUMNS}


def _progress_line(row: dict[str, Any]) -> str:
    head = (f"{row['dataset']} {row['split']} {row['sites']} sites {row['algorithm']} "
            f"scaling={row['scaling']}" + (f" [{row['options']}]" if row["options"] else ""))
    if row["status"] != "ok":
        seconds = row["seconds"] if isinstance(row["seconds"], float) else math.nan
        return f"{head}: {row['status']} {short_error(row['error'])} ({seconds:.1f} s)"
    return (f"{head}: ARI {row['ari']:.3f} (k-means {row['kmeans_ari']:.3f}), SSE ratio "
            f"{row['sse_ratio']:.3f}, {row['warnings']} warning(s), {row['seconds']:.1f} s")


# ---------------------------------------------------------------------------- output
def write_csv(rows: Sequence[dict[str, Any]], path: Path | str) -> Path:
    """Write the rows, columns :data:`COLUMNS` (floats with 6 significant digits).

    Parameters
    ----------
    rows : sequence of dict
        The runs.
    path : path-like
        The CSV file.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    path = Path(path)

    def cell(value: Any) -> Any:
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.6g}"
        return value

    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({c: cell(row.get(c, "")) for c in COLUMNS})
    return path


def _f(value: Any, digits: int = 3) -> str:
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _pick(rows: Sequence[dict[str, Any]], scaling: str) -> tuple[dict | None, dict | None]:
    """The default run of a scaling and, if it failed on the threshold, its retry."""
    default = next((r for r in rows if r["scaling"] == scaling and not r["options"]), None)
    retry = next((r for r in rows if r["scaling"] == scaling and r["options"]), None)
    return default, retry


def _cell(default: dict | None, retry: dict | None, key: str, notes: list[str],
          digits: int = 3) -> str:
    """A table cell: the default run's value, or the retry's with a note marker."""
    if default is None:
        return "–"
    if default["status"] == "skipped":
        return "skipped"
    if default["status"] == "ok":
        return _f(default[key], digits)
    if retry is not None and retry["status"] == "ok":
        note = (f"failed at the defaults: {short_error(default['error'])}; shown: the run "
                f"with {retry['options']}")
        if note not in notes:
            notes.append(note)
        return f"{_f(retry[key], digits)} [{notes.index(note) + 1}]"
    note = f"failed: {short_error(default['error'])}" + (
        f"; with {retry['options']} too: {short_error(retry['error'])}"
        if retry is not None else "")
    if note not in notes:
        notes.append(note)
    return f"failed [{notes.index(note) + 1}]"


def _warnings_cell(rows: Sequence[dict[str, Any]]) -> str:
    out = []
    for scaling in SCALINGS:
        default, retry = _pick(rows, scaling)
        use = default if default is not None and default["status"] == "ok" else retry
        out.append("–" if use is None or use["status"] != "ok" else str(int(use["warnings"])))
    return " / ".join(out)


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def _ok(rows: Sequence[dict[str, Any]], scaling: str, algorithm: str | None = None,
        dataset: str | None = None) -> list[dict[str, Any]]:
    """The successful runs at the defaults (no retry) of a scaling."""
    return [r for r in rows if r["status"] == "ok" and not r["options"]
            and r["scaling"] == scaling
            and (algorithm is None or r["algorithm"] == algorithm)
            and (dataset is None or r["dataset"] == dataset)]


def markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The Markdown page: intro, one table per data set, medians, runs worse than k-means.

    Parameters
    ----------
    rows : sequence of dict
        The runs (:func:`run_benchmark`).
    meta : dict
        ``command``, ``wall_seconds``, ``machine`` (a line), ``started`` (a time stamp),
        ``commit``, ``load_before``, ``load_after`` and ``csv`` (the CSV's file name).

    Returns
    -------
    str
        The page.
    """
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    algorithms = [a for a in ALGORITHMS if any(r["algorithm"] == a for r in rows)]
    runs = [r for r in rows if r["status"] != "skipped"]
    failed_default = [r for r in runs if r["status"] == "failed" and not r["options"]]
    lines = [
        "# Quality at the defaults on raw-unit tabular data: `scaling='standard'` vs "
        "`'none'`",
        "",
        "The federation agrees on its features by name and scales them across the sites "
        "before round 1 (`FederatedClustering(..., scaling='standard')`, the default; "
        "`scaling='none'` is the old behaviour, see [data.md](data.md)). This page measures "
        "both on scikit-learn's bundled tabular sets **in their raw units**, every site a "
        "pandas DataFrame, every algorithm at the estimator's defaults (`n_clusters=k`, "
        "`random_state=0`, nothing else), against centralized "
        "`KMeans(k, n_init=10, random_state=0)` on the standardised pooled rows. "
        "It is generated by the command below: every number is the run's. The module "
        "docstring of `simulations/benchmarks/raw_data.py` defines every measure.",
        "",
        f"Command: `{meta['command']}` (from the repository root). Wall time "
        f"**{meta['wall_seconds']:.0f} s** ({meta['wall_seconds'] / 60:.1f} min) for "
        f"{len(runs)} runs; started {meta['started']}, commit `{meta['commit']}`. "
        f"Machine: {meta['machine']}; load average {meta['load_before']} before, "
        f"{meta['load_after']} after (shared with other jobs). Every run's row: "
        f"[{meta['csv']}]({meta['csv']}).",
        "",
        "- **ARI**: of the sites' own `labels_`, concatenated, against the true classes.",
        "- **SSE ratio**: the model's SSE on the *standardised* pooled rows "
        "(`StandardScaler` of the pooled rows; the model's centres mapped through it; every "
        "row to the centre of its own label; DGC: to its site's own centres) over "
        "k-means' SSE there. The same yardstick for both scalings, so `none` is judged in "
        "the units `standard` optimises: a ratio near 1 means the same partition quality "
        "as k-means on scaled data. DGC's ratio can fall below 1: every site has its own "
        "k centres, more than k in all.",
        "- **warnings**: `len(warnings_)` with `standard` / with `none`.",
        "- **DGC** labels every site's rows with that site's own centres "
        "(`user_centers_[i]`), numbered by the site's own initialisation: unless the nodes "
        "reach consensus, cluster 0 at one site need not be cluster 0 at another, which "
        "lowers the ARI of the concatenated labels even where every site's own partition is "
        "good. The CSV's `ari_predict` is the ARI of `predict` on the pooled rows (the "
        "network-mean centres); for the other algorithms it equals the ARI of `labels_`.",
        "- Splits: `iid` (equal shuffled sites) and `dirichlet` (alpha "
        f"{DIRICHLET_ALPHA} over the classes, redrawn until every site has >= 2k rows; the "
        "split seed is fixed). Every setting needs >= 2k rows at every site, else it is "
        "skipped.",
        "- Not run: KDC (a kernel model: it labels rows with its Isolation Kernel, no "
        "centre) and DeepFeCA (a network that takes its rows as they are, whatever "
        "`scaling`).",
        "",
        "Data sets:",
        "",
    ]
    for name in datasets:
        spec = DATASETS[name]
        lines.append(f"- `{name}` (k = {spec.k}): {spec.description}.")
    lines.append("")
    # one table per data set
    for name in datasets:
        sub = [r for r in rows if r["dataset"] == name]
        spec = DATASETS[name]
        km = sub[0]
        lines += [
            f"## {name} (k = {spec.k})",
            "",
            f"k-means on the standardised pooled rows: ARI {_f(km['kmeans_ari'])}, SSE "
            f"{km['kmeans_sse_std']:.1f}. {_smallest_site(sub)}",
            "",
            "| algorithm | split | sites | ARI standard | ARI none | ARI k-means (std) "
            "| SSE ratio standard / k-means | SSE ratio none / k-means | warnings std / none |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        notes: list[str] = []
        for algorithm in algorithms:
            for split in SPLITS:
                for m in sorted({r["sites"] for r in sub}):
                    cell_rows = [r for r in sub if r["algorithm"] == algorithm
                                 and r["split"] == split and r["sites"] == m]
                    if not cell_rows or all(r["status"] == "skipped" for r in cell_rows):
                        continue
                    std_default, std_retry = _pick(cell_rows, "standard")
                    none_default, none_retry = _pick(cell_rows, "none")
                    lines.append(
                        f"| {algorithm} | {split} | {m} "
                        f"| {_cell(std_default, std_retry, 'ari', notes)} "
                        f"| {_cell(none_default, none_retry, 'ari', notes)} "
                        f"| {_f(cell_rows[0]['kmeans_ari'])} "
                        f"| {_cell(std_default, std_retry, 'sse_ratio', notes)} "
                        f"| {_cell(none_default, none_retry, 'sse_ratio', notes)} "
                        f"| {_warnings_cell(cell_rows)} |")
        skipped = sorted({(SPLITS.index(r["split"]), r["sites"], r["error"]) for r in sub
                          if r["status"] == "skipped"})
        lines.append("")
        for i, note in enumerate(notes, 1):
            lines.append(f"[{i}] {note}  ")
        for split, m, why in skipped:
            lines.append(f"Skipped: {SPLITS[split]}, {m} sites: {why}.  ")
        lines.append("")
    # medians per algorithm
    lines += [
        "## Summary: medians per algorithm, `standard` vs `none`",
        "",
        "Over every data set, split and site count that ran at the defaults (a run that "
        "failed at the defaults is left out and counted; its retry is not in the medians).",
        "",
        "| algorithm | runs at defaults (std / none) | median ARI standard "
        "| median ARI none | standard > none (ARI) | median SSE ratio standard "
        "| median SSE ratio none | median ARI standard - k-means "
        "| median ARI of predict, standard | failed at defaults (std / none) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for algorithm in algorithms:
        std, none = _ok(rows, "standard", algorithm), _ok(rows, "none", algorithm)
        pairs = _pairs(rows, algorithm)
        wins = sum(a["ari"] > b["ari"] for a, b in pairs)
        fails = [sum(1 for r in failed_default if r["algorithm"] == algorithm
                     and r["scaling"] == s) for s in SCALINGS]
        lines.append(
            f"| {algorithm} | {len(std)} / {len(none)} | {_f(_median([r['ari'] for r in std]))} "
            f"| {_f(_median([r['ari'] for r in none]))} | {wins} of {len(pairs)} "
            f"| {_f(_median([r['sse_ratio'] for r in std]))} "
            f"| {_f(_median([r['sse_ratio'] for r in none]))} "
            f"| {_f(_median([r['ari_minus_kmeans'] for r in std]), 3)} "
            f"| {_f(_median([r['ari_predict'] for r in std]))} "
            f"| {fails[0]} / {fails[1]} |")
    lines += [
        "",
        "Median ARI per data set (`standard` / `none`):",
        "",
        "| algorithm | " + " | ".join(datasets) + " |",
        "|---|" + "---:|" * len(datasets),
    ]
    for algorithm in algorithms:
        cells = []
        for name in datasets:
            std = _median([r["ari"] for r in _ok(rows, "standard", algorithm, name)])
            none = _median([r["ari"] for r in _ok(rows, "none", algorithm, name)])
            cells.append(f"{_f(std)} / {_f(none)}")
        lines.append(f"| {algorithm} | " + " | ".join(cells) + " |")
    kms = [f"{n} {_f(next(r['kmeans_ari'] for r in rows if r['dataset'] == n))}"
           for n in datasets]
    lines += ["", "k-means (standardised) ARI: " + ", ".join(kms) + ".", ""]
    lines += _unit_change_lines(rows)
    # worse than k-means at the default
    worse = [r for r in _ok(rows, "standard") if r["ari_minus_kmeans"] < -ARI_MARGIN]
    total = len(_ok(rows, "standard"))
    silent = sum(1 for r in worse if r["warnings"] == 0)
    lines += [
        f"## Runs worse than k-means by more than {ARI_MARGIN} ARI at the default "
        "(`scaling='standard'`)",
        "",
        f"{len(worse)} of the {total} runs at the defaults that ran ({silent} of them "
        "without any warning)"
        + (f"; besides, {sum(1 for r in failed_default if r['scaling'] == 'standard')} "
           "failed at the defaults (in the tables above)." if failed_default else "."),
        "",
    ]
    if worse:
        lines += [
            "| data set | algorithm | split | sites | ARI standard | ARI k-means | "
            "difference | ARI none | warnings | first warning |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in sorted(worse, key=lambda r: (r["dataset"], ALGORITHMS.index(r["algorithm"]),
                                              r["split"], r["sites"])):
            none = next((o for o in rows if o["status"] == "ok" and not o["options"]
                         and o["scaling"] == "none" and o["dataset"] == r["dataset"]
                         and o["algorithm"] == r["algorithm"] and o["split"] == r["split"]
                         and o["sites"] == r["sites"]), None)
            first = r["warning_text"].split(" | ")[0] if r["warning_text"] else ""
            if len(first) > 90:
                first = first[:87] + "..."
            lines.append(
                f"| {r['dataset']} | {r['algorithm']} | {r['split']} | {r['sites']} "
                f"| {_f(r['ari'])} | {_f(r['kmeans_ari'])} | {_f(r['ari_minus_kmeans'])} "
                f"| {_f(None if none is None else none['ari'])} | {int(r['warnings'])} "
                f"| {first.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def _smallest_site(rows: Sequence[dict[str, Any]]) -> str:
    """A sentence: the smallest site of a data set's settings, and where."""
    sizes = [(min(int(x) for x in r["site_rows"].split(";")), r["split"], r["sites"])
             for r in rows if r["site_rows"]]
    if not sizes:
        return "No setting had a split."
    n, split, m = min(sizes, key=lambda t: (t[0], SPLITS.index(t[1]), t[2]))
    return f"Smallest site: {n} rows ({split}, {m} sites)."


def _unit_change_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """How ``iris`` and ``iris-sepal-width-x1000`` compare, per scaling (both ran)."""
    changed = "iris-sepal-width-x1000"
    out = []
    for scaling in SCALINGS:
        base = {(r["algorithm"], r["split"], r["sites"]): r for r in _ok(rows, scaling, None,
                                                                         "iris")}
        pairs = [(base[key], r) for r in _ok(rows, scaling, None, changed)
                 if (key := (r["algorithm"], r["split"], r["sites"])) in base]
        if not pairs:
            continue
        same = sum(abs(a["ari"] - b["ari"]) < 1e-12 for a, b in pairs)
        gap = _median([b["ari"] - a["ari"] for a, b in pairs])
        out.append(f"- `scaling='{scaling}'`: the same ARI on `iris` and `{changed}` in {same} "
                   f"of {len(pairs)} runs (median ARI change {gap:+.3f}).")
    if out:
        out = ["One feature's unit changed (`iris` against `iris-sepal-width-x1000`, the same "
               "splits and seeds):", "", *out, ""]
    return out


def _pairs(rows: Sequence[dict[str, Any]], algorithm: str
           ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The (standard, none) runs at the defaults of one setting, where both ran."""
    none = {(r["dataset"], r["split"], r["sites"]): r for r in _ok(rows, "none", algorithm)}
    return [(r, none[key]) for r in _ok(rows, "standard", algorithm)
            if (key := (r["dataset"], r["split"], r["sites"])) in none]


# ------------------------------------------------------------------------------- CLI
def _machine() -> str:
    import sklearn

    import flwr_clustering

    version = getattr(flwr_clustering, "__version__", "?")
    return (f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, NumPy {np.__version__}, scikit-learn "
            f"{sklearn.__version__}, flwr_clustering {version}")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - non-Unix
        return "?"


def _commit() -> str:
    """The checked-out commit (read only), with ``+changes`` when the tree differs."""
    try:
        root = Path(__file__).resolve().parents[2]
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain",
                                "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout
        return (head or "?") + ("+changes" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def _command(args: argparse.Namespace) -> str:
    parts = [PROG]
    defaults = {"datasets": list(DATASETS), "algorithms": list(ALGORITHMS),
                "sites": list(SITES), "splits": list(SPLITS)}
    for key, default in defaults.items():
        value = list(getattr(args, key))
        if value != default:
            parts.append(f"--{key} " + " ".join(map(str, value)))
    if args.seed != 0:
        parts.append(f"--seed {args.seed}")
    if args.threads != "1":
        parts.append(f"--threads {args.threads}")
    if Path(args.out) != Path("docs"):
        parts.append(f"--out {args.out}")
    return " ".join(parts)


def _cmd(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the runs' own log lines (Flower's INFO, the library's warnings, also in warnings_)
    # are kept quiet, and the levels restored afterwards
    quiet = {name: logging.getLogger(name).level for name in ("flwr", "flwr_clustering")}
    try:
        for name in quiet:
            logging.getLogger(name).setLevel(logging.ERROR)
        return _run(args, out)
    finally:
        for name, level in quiet.items():
            logging.getLogger(name).setLevel(level)


def _run(args: argparse.Namespace, out: Path) -> int:
    threads = None if args.threads == "default" else int(args.threads)
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    meta = {"command": _command(args), "started": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                time.gmtime()),
            "commit": _commit(), "machine": _machine(), "load_before": _load(),
            "csv": CSV_NAME}
    start = time.perf_counter()
    rows = run_benchmark(args.datasets, args.algorithms, args.sites, args.splits,
                         seed=args.seed, threads=threads, progress=progress,
                         on_dataset=lambda so_far: write_csv(so_far, out / CSV_NAME))
    meta.update(wall_seconds=time.perf_counter() - start, load_after=_load())
    write_csv(rows, out / CSV_NAME)
    text = markdown(rows, meta)
    (out / MD_NAME).write_text(text)
    print(f"{PROG}: {len(rows)} rows in {meta['wall_seconds']:.1f} s; wrote "
          f"{out / CSV_NAME} and {out / MD_NAME}")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``raw-data`` subcommand on ``bench``'s subparsers.

    Parameters
    ----------
    sub : argparse subparsers action
        ``bench``'s subparsers.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser.
    """
    p = sub.add_parser(
        "raw-data", help="quality at the defaults on raw-unit tabular data: scaling "
        "'standard' vs 'none' against k-means",
        description="Every centre-based algorithm at the estimator's defaults on "
        "scikit-learn's bundled tabular sets in raw units, with scaling='standard' and "
        "'none'; writes <out>/raw-data-quality.csv and .md.")
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    p.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS),
                   choices=list(ALGORITHMS))
    p.add_argument("--sites", nargs="+", type=int, default=list(SITES))
    p.add_argument("--splits", nargs="+", default=list(SPLITS), choices=list(SPLITS))
    p.add_argument("--seed", type=int, default=0, help="seed of the splits (default 0)")
    p.add_argument("--threads", default="1",
                   help="BLAS/OpenMP threads during the runs, or 'default' (default 1)")
    p.add_argument("--out", default="docs", help="output directory (default docs/)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; ``argv`` are the arguments after ``raw-data``.

    Parameters
    ----------
    argv : list of str, optional
        Default: ``sys.argv[1:]``.

    Returns
    -------
    int
        0.
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="raw-data")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["raw-data", *argv])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
