"""``python -m simulations quality``: every algorithm at its App defaults on public data.

Runs each registered algorithm with the options a user of ``flwr run`` gets (the
registry's options dataclass at its defaults, ``k`` = the true class count) on
scikit-learn's bundled sets and generators, split IID and Dirichlet(0.3), for a few
seeds, and tabulates how close each result is to centralized k-means and whether it is
degenerate. Nothing is downloaded.

Usage, from the repository root::

    python -m simulations quality [--datasets D ...] [--algorithms A ...] [--seeds S ...]
                                  [--splits iid dirichlet] [--engine loop|app]
                                  [--refine N] [--jobs J] [--out DIR] [--quick]
    python -m simulations quality --from-json A/quality.json B/quality.json --out DIR

Data (``seed`` is the run's seed: it draws the generated sets, the split, the masks and
the algorithm's randomness, as the App's single ``seed`` key does):

- ``iris``, ``wine``, ``breast-cancer``: scikit-learn's sets, standardised (zero mean, unit
  variance per feature); 5 clients for iris and wine (150 and 178 rows), 10 for breast
  cancer.
- ``digits``: scikit-learn's 8x8 digits, raw pixel values 0-16 (64 features; some pixels
  are constant, so standardising would divide by zero); 10 clients.
- ``moons``, ``circles``, ``aniso``, ``varied``: the generators of scikit-learn's
  clustering comparison (:func:`flwr_clustering.data.shapes.shapes`), 1500 points, raw
  (not standardised); 10 clients.
- ``blobs100k``: ``make_blobs`` with 100 000 points, 10 features, 16 centres (std 1);
  50 clients.

Splits: ``iid`` and ``dirichlet`` (alpha 0.3 over the labels), both by the library's
:func:`flwr_clustering.data.registry.split_arrays` (Flower Datasets' partitioners). The
masked algorithms (``masked-federated``, ``masked-oneshot``) get the same row split and
every client observes a random ``ceil(0.7 d)`` of the features (NaN elsewhere, by
:func:`flwr_clustering.data.masks.apply_mask`); on the 2-D sets that is both features.
``--masks every-subset`` (the low-dimensional cases): every non-empty subset of the
features is some client's, in a seeded order, cycled over the clients (on a 2-D set:
clients that see both features, the first only, the second only); its rows name the
data set ``<name>/every-subset``. ``--masks one-feature``: client ``i`` observes feature
``i mod d`` only (rows ``<name>/one-feature``).

Engines: ``loop`` (default) runs the registry's pure loop of each algorithm (DeepFeCA,
whose model labels rows with its network, always runs as ``app``), its
arguments taken from the App's options dataclass at its defaults (not from the loop's
own keyword defaults, where they differ; see :data:`LOOP_NOTES`). ``app`` runs the real
strategy and clients in process (:class:`flwr_clustering.FederatedClustering` with the
App's ``min-nodes`` = 2), which also counts the warnings the Flower layer logs, and
records the split check's flagged clusters (``split_clusters``; ``split_warnings``: its
warnings among them); ``--refine N`` runs the refinable algorithms with
``refine-rounds=N`` (``repairs``: the split-and-merge repairs kept).

Columns: the ARI and NMI of the model's labels of the pooled (complete) rows, the SSE
ratio to centralized k-means (``sklearn.cluster.KMeans(k, n_init=10)`` on the same rows and
seed), the clusters of ``k`` that get a pooled row, the distinct centres (pairwise
distance above ``1e-6`` times the data's scale, the root of the total variance), the
non-finite entries of the model, the WARNING records of the ``flwr_clustering`` logger
during the run, Python warnings (e.g. scikit-learn's), seconds, and the first line of the
exception of a run that raised. A row is a *failure* when its SSE ratio is above 1.10,
fewer than ``k`` clusters are non-empty, fewer than ``k`` centres are distinct, the model
has NaN entries, or the run raised.

Labelling rules: centroid models label a row by its nearest centroid; a centroid with NaN
entries (masked algorithms) is measured on the coordinates it has, rescaled to the row's
dimension (:func:`flwr_clustering.algorithms.masked.pooled_masked_squared_distances`, the
library's own rule); KDC labels rows with its kernel model (as the App does), and its SSE
is that of its partition (rows to their cluster's mean); DGC's model is the network mean
of the nodes' centres (the App's ``centroids``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ALGORITHMS",
    "COLUMNS",
    "DATASETS",
    "QUICK",
    "QualityTask",
    "failure_reasons",
    "main",
    "markdown_table",
    "run_task",
    "run_tasks",
]

logger = logging.getLogger("simulations.quality")

PROG = "python -m simulations quality"

#: Data sets (see :func:`load`) and their number of clients.
DATASETS: dict[str, int] = {
    "iris": 5, "wine": 5, "breast-cancer": 10, "digits": 10,
    "moons": 10, "circles": 10, "aniso": 10, "varied": 10, "blobs100k": 50,
}
_STANDARDISED = ("iris", "wine", "breast-cancer")
SPLITS = ("iid", "dirichlet")
DIRICHLET_ALPHA = 0.3
MASK_FRACTION = 0.7
MASKED = ("masked-federated", "masked-oneshot")
#: ``--masks``: a random ``ceil(0.7 d)`` of the features per client, every non-empty
#: subset of them cycled over the clients, or one feature per client (``i mod d``).
MASK_MODES = ("fraction", "every-subset", "one-feature")
#: Every registered algorithm; DeepFeCA needs PyTorch and is left out by default.
ALGORITHMS = ("fkm", "kfed", "feca", "deepfeca", "mavg", "ffcm", "masked-federated",
              "masked-oneshot", "dgc", "kdc")
DEFAULT_ALGORITHMS = tuple(a for a in ALGORITHMS if a != "deepfeca")
#: The failure rules: SSE ratio limit, and the distinct-centre tolerance relative to the
#: data's scale.
SSE_RATIO_LIMIT = 1.10
DISTINCT_RTOL = 1e-6
#: ``--quick``: a few seconds, for the test.
QUICK = {"datasets": ("iris", "wine"), "algorithms": ("fkm", "kfed"), "seeds": (0,),
         "splits": ("iid",)}

COLUMNS = ("dataset", "split", "algorithm", "seed", "clients", "n", "d", "k", "ari", "nmi",
           "kmeans_ari", "sse_ratio", "nonempty", "distinct", "nan_entries", "warnings",
           "split_clusters", "split_warnings", "repairs", "py_warnings", "seconds", "info",
           "error")
#: The algorithms whose final model ``--refine`` refines (the App's ``refine-rounds``).
REFINABLE = ("fkm", "kfed", "feca", "mavg", "ffcm")
#: The words of the split check's warning (:func:`flwr_clustering.diagnostics.warnings_from`).
SPLIT_WARNING = "look like two groups"

#: Where a pure loop's own keyword defaults differ from the App's (the benchmark passes
#: the App's values).
LOOP_NOTES = {
    "ffcm": "run_ffcm defaults to rounds=10 and no early stop; the App runs max-rounds=20 "
            "with tol=1e-6 (passed as rounds=20, global_tol=1e-6)",
    "masked-federated": "run_masked_federated has no tol: it runs exactly F=3 rounds; the "
                        "App stops earlier once no coordinate moves more than tol=1e-6",
    "dgc": "run_dgc takes the graph and the initial centres: the benchmark builds them as "
           "the App does (ring, node-init=kmeans with the privacy threshold); the model is "
           "the network mean",
}


# --------------------------------------------------------------------------- data


def load(name: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows and true classes of a benchmark data set (see the module docstring)."""
    from flwr_clustering.data.registry import load_dataset

    if name == "blobs100k":
        X, y, _ = load_dataset("blobs", n_samples=100_000, n_features=10, centers=16,
                               cluster_std=1.0, seed=seed)
    elif name in ("moons", "circles", "aniso", "varied"):
        X, y, _ = load_dataset(name, n_samples=1500, seed=seed)
    else:
        X, y, _ = load_dataset(name, seed=seed)
    X = np.array(X, dtype=np.float64)
    if name in _STANDARDISED:
        X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, np.asarray(y, dtype=np.int64)


def feature_masks(d: int, n_clients: int, seed: int, mode: str = "fraction") -> np.ndarray:
    """Every client observes a random ``ceil(0.7 d)`` of the ``d`` features.

    ``mode="every-subset"``: the ``2^d - 1`` non-empty subsets in a seeded order, client
    ``i`` observing subset ``i`` modulo their number (for small ``d``).
    ``mode="one-feature"``: client ``i`` observes feature ``i mod d`` only (no two
    clients' features overlap unless equal: some centres stay partly undefined).
    """
    if mode == "one-feature":
        return np.arange(d)[None, :] == (np.arange(n_clients) % d)[:, None]
    if mode == "every-subset":
        from itertools import combinations

        subsets = [c for r in range(1, d + 1) for c in combinations(range(d), r)]
        order = np.random.default_rng([seed, 71]).permutation(len(subsets))
        masks = np.zeros((n_clients, d), dtype=bool)
        for i in range(n_clients):
            masks[i, list(subsets[order[i % len(subsets)]])] = True
        return masks
    if mode != "fraction":
        raise ValueError(f"mask mode must be one of {MASK_MODES}, got {mode!r}")
    rng = np.random.default_rng([seed, 70])
    seen = math.ceil(MASK_FRACTION * d)
    masks = np.zeros((n_clients, d), dtype=bool)
    for i in range(n_clients):
        masks[i, rng.choice(d, seen, replace=False)] = True
    return masks


def federation(name: str, split: str, seed: int, *, masked: bool, masks: str = "fraction"
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """``(clients, complete client rows, client labels)`` of a data set and split."""
    from flwr_clustering.data.masks import apply_mask
    from flwr_clustering.data.registry import split_arrays

    X, y = load(name, seed)
    m = DATASETS[name]
    parts = split_arrays(X, y, m, partitioner=split, dirichlet_alpha=DIRICHLET_ALPHA,
                         seed=seed)
    complete = [Xi for Xi, _ in parts]
    labels = [yi for _, yi in parts]
    clients = complete
    if masked:
        client_masks = feature_masks(X.shape[1], m, seed, masks)
        clients = [apply_mask(Xi, mask) for Xi, mask in zip(complete, client_masks,
                                                             strict=True)]
    return clients, complete, labels


# ---------------------------------------------------------------------- the runs


@dataclass(frozen=True)
class Model:
    """What a run produced: centroids (may hold NaN) and/or the labels of the pooled rows."""

    centroids: np.ndarray | None
    labels: np.ndarray | None = None
    info: str = ""
    #: ``app`` engine: the split check's flagged clusters and the refinement's repairs.
    split_clusters: int | None = None
    repairs: int | None = None


def _options(name: str, k: int):
    from flwr_clustering import registry

    return registry.get(name).options(k=k)


def _loop_fkm(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.fkm import run_fkm

    r = run_fkm(clients, k, seed=seed, max_rounds=o.max_rounds, tol=o.tol,
                privacy_threshold=o.privacy_threshold, local_iters=o.local_iterations,
                init=o.init, recount=o.recount, seeding=o.server_seeding,
                update=o.server_update, n_init=o.n_init)
    return Model(r.centroids, info=f"rounds {len(r.history)}, "
                 f"{'converged' if r.converged else 'round cap'}")


def _loop_kfed(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.kfed import run_kfed

    return Model(run_kfed(clients, k, o.k_local, seed=seed,
                          privacy_threshold=o.privacy_threshold))


def _loop_feca(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.feca import run_feca

    r = run_feca(clients, k, k_local=o.k_local, seed=seed, std_mode=o.std_mode,
                 radius=o.radius, eliminate=o.eliminate, privacy_threshold=o.privacy_threshold,
                 init=o.init, n_init=o.n_init)
    return Model(r.centroids)


def _loop_mavg(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.mavg import run_mavg

    return Model(run_mavg(clients, k, seed=seed, reference=o.reference,
                          match_iter=o.match_iter, init=o.init, n_init=o.n_init,
                          privacy_threshold=o.privacy_threshold))


def _loop_ffcm(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.ffcm import run_ffcm

    r = run_ffcm(clients, k, version=o.version, rounds=o.max_rounds, seed=seed, m=o.fuzzifier,
                 local_max_iter=o.local_max_iter, tol=o.local_tol, criterion=o.criterion,
                 init_width=o.init_width, weighted=o.weighted, n_init=o.n_init,
                 global_tol=o.tol if o.tol >= 0 else None)
    return Model(r.centroids)


def _loop_masked_federated(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.masked_federated import run_masked_federated

    r = run_masked_federated(clients, k, method=o.method, alpha=o.alpha,
                             rounds=o.federated_rounds, k_local=o.k_local or None, seed=seed,
                             local_iterations=o.local_iterations,
                             privacy_threshold=o.privacy_threshold, n_init=o.n_init,
                             algorithm=o.local_algorithm)
    return Model(r.centroids)


def _loop_masked_oneshot(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot

    r = run_masked_oneshot(clients, k, k_local=o.k_local or None, k_max=o.k_max, seed=seed,
                           w=o.w, min_size=o.min_size, max_size=o.max_size, n_init=o.n_init,
                           privacy_threshold=o.privacy_threshold,
                           algorithm=o.local_algorithm, normalize=o.normalize)
    return Model(r.centroids)


def _loop_dgc(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.dgc import build_graph, initial_centres, run_dgc

    A = build_graph(o.graph, len(clients), p=o.er_p, seed=seed)
    init = initial_centres(clients, k, seed=seed, scheme=o.init,
                           privacy_threshold=o.privacy_threshold)
    r = run_dgc(clients, A, init, loss=o.loss, rho=o.rho, iterations=o.iterations,
                inner_steps=o.inner_steps, alpha=o.alpha or None, delta=o.delta,
                keep_history=False)
    C = np.asarray(r.centres)
    info = f"consensus {r.consensus[-1]:.3g}" if r.consensus else ""
    return Model(C.mean(axis=0) if C.ndim == 3 else C, info=info)


def _loop_kdc(clients, k, seed, o) -> Model:
    from flwr_clustering.algorithms.kdc import initial_cluster_means, run_kdc

    # run_kdc's defaults are the App's: with auto it chooses (psi, tau) on the sample
    r = run_kdc(clients, k, s=o.sample_size, psi=o.psi, t=o.t, tau=o.tau, auto=o.auto,
                step2=o.step2, variant=o.variant, normalize=o.normalize, seed=seed)
    sel = r.extra.get("selection", {})
    psi, tau = sel.get("psi", o.psi), sel.get("tau", o.tau)
    return Model(initial_cluster_means(r.B, r.groups, r.lo, r.hi),
                 labels=np.concatenate(r.labels), info=f"psi {psi}, tau {tau:g}")


LOOPS: dict[str, Callable[..., Model]] = {
    "fkm": _loop_fkm, "kfed": _loop_kfed, "feca": _loop_feca, "mavg": _loop_mavg,
    "ffcm": _loop_ffcm, "masked-federated": _loop_masked_federated,
    "masked-oneshot": _loop_masked_oneshot, "dgc": _loop_dgc, "kdc": _loop_kdc,
}


def _app(name: str, clients, labels, k: int, seed: int, refine: int = 0) -> Model:
    """The real strategy and clients in process, as ``flwr run`` with the App's min-nodes.

    ``refine``: the App's ``refine-rounds`` for the :data:`REFINABLE` algorithms.
    """
    import importlib.util

    from flwr_clustering import FederatedClustering

    if name == "deepfeca" and importlib.util.find_spec("torch") is None:
        raise ModuleNotFoundError("DeepFeCA needs PyTorch, which is not installed")
    est = FederatedClustering(name, n_clusters=k, random_state=seed, min_nodes=2,
                              refine_rounds=refine if name in REFINABLE else 0)
    est.fit(clients, labels)
    diag = est.diagnostics_
    flagged = diag.get("split-clusters")
    split = {"split_clusters": None if flagged is None else len(flagged),
             "repairs": (diag.get("refine") or {}).get("repairs")}
    if name in ("kdc", "deepfeca"):  # the model labels rows itself; clients' own labels
        return Model(est.cluster_centers_, labels=np.concatenate(est.labels_), **split)
    return Model(est.cluster_centers_, **split)


# ------------------------------------------------------------------------ metrics


def _distinct(C: np.ndarray, tol: float) -> int:
    """Centres left when those within ``tol`` of each other (NaN-aware) are merged."""
    from scipy.sparse.csgraph import connected_components

    C = np.asarray(C, dtype=np.float64)
    if len(C) == 0:
        return 0
    diff = C[:, None, :] - C[None, :, :]
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pairs: never merged
        d2 = np.nanmean(diff**2, axis=2) * C.shape[1]
    close = np.nan_to_num(np.sqrt(d2), nan=np.inf) <= tol
    return int(connected_components(close, directed=False)[0])


#: Centralized k-means of the last pooled data set (one per process).
_KMEANS: dict[tuple, Any] = {}


def evaluate(model: Model, X: np.ndarray, y: np.ndarray, k: int, seed: int
             ) -> dict[str, Any]:
    """ARI, NMI, SSE ratio, non-empty, distinct, NaN entries of a model on complete rows."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from flwr_clustering.algorithms.masked import pooled_masked_squared_distances
    from flwr_clustering.metrics import squared_distances

    key = (X.shape, k, seed, hash(X.tobytes()))
    if key not in _KMEANS:  # the same pooled rows for every algorithm of a cell
        _KMEANS.clear()
        _KMEANS[key] = KMeans(k, n_init=10, random_state=seed).fit(X)
    km = _KMEANS[key]
    scale = float(np.sqrt(X.var(axis=0).sum())) or 1.0
    out: dict[str, Any] = {"kmeans_ari": float(adjusted_rand_score(y, km.labels_))}
    C = model.centroids
    if C is not None:
        C = np.asarray(C, dtype=np.float64)
        out["nan_entries"] = int((~np.isfinite(C)).sum())
        out["distinct"] = _distinct(C, DISTINCT_RTOL * scale)
    if model.labels is not None:
        labels = np.asarray(model.labels)
        sse = sum(float(((X[labels == c] - X[labels == c].mean(axis=0)) ** 2).sum())
                  for c in np.unique(labels))
    else:
        d2 = (pooled_masked_squared_distances(X, C) if not np.isfinite(C).all()
              else squared_distances(X, C))
        labels = np.argmin(d2, axis=1)
        sse = float(np.min(d2, axis=1).sum())
        if C.shape[1] != X.shape[1]:
            raise ValueError(f"model has {C.shape[1]} columns for {X.shape[1]} features")
    out.update(ari=float(adjusted_rand_score(y, labels)),
               nmi=float(normalized_mutual_info_score(y, labels)),
               sse_ratio=sse / float(km.inertia_),
               nonempty=int(len(np.unique(labels))))
    return out


# -------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class QualityTask:
    """One cell: a data set, a split, an algorithm and a seed."""

    dataset: str
    split: str
    algorithm: str
    seed: int
    engine: str = "loop"
    masks: str = "fraction"
    refine: int = 0


class _Counter(logging.Handler):
    """Counts the WARNING (and higher) records it sees, keeping the first messages."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.split = 0
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.split += SPLIT_WARNING in record.getMessage()
        if len(self.messages) < 5:
            self.messages.append(record.getMessage().splitlines()[0][:200])


def run_task(task: QualityTask, *, runner: Callable[..., Model] | None = None
             ) -> dict[str, Any]:
    """Run one cell and return its row (never raises for a failing run).

    Parameters
    ----------
    task : QualityTask
    runner : callable, optional
        ``runner(clients, k, seed, options) -> Model`` in place of the engine's (tests).
    """
    row: dict[str, Any] = {"dataset": task.dataset + ("" if task.masks == "fraction"
                                                      else f"/{task.masks}"),
                           "split": task.split,
                           "algorithm": task.algorithm, "seed": task.seed,
                           "clients": DATASETS.get(task.dataset), "error": ""}
    lib_logger = logging.getLogger("flwr_clustering")
    counter = _Counter()
    lib_logger.addHandler(counter)
    old_level = lib_logger.level
    if lib_logger.getEffectiveLevel() > logging.WARNING:
        lib_logger.setLevel(logging.WARNING)
    start = time.perf_counter()
    py_warnings: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as py_warnings:
            warnings.simplefilter("always")
            masked = task.algorithm in MASKED
            clients, complete, labels = federation(task.dataset, task.split, task.seed,
                                                   masked=masked, masks=task.masks)
            X, y = np.vstack(complete), np.concatenate(labels)
            k = int(len(np.unique(y)))
            row.update(n=len(X), d=X.shape[1], k=k)
            start = time.perf_counter()
            if runner is not None:
                model = runner(clients, k, task.seed, _options(task.algorithm, k))
            elif task.engine == "app" or task.algorithm == "deepfeca":
                model = _app(task.algorithm, clients, labels, k, task.seed, task.refine)
            else:
                model = LOOPS[task.algorithm](clients, k, task.seed,
                                              _options(task.algorithm, k))
            row["seconds"] = time.perf_counter() - start
            row["info"] = model.info
            row.update(split_clusters=model.split_clusters, repairs=model.repairs)
            row.update(evaluate(model, X, y, k, task.seed))
    except Exception as ex:  # noqa: BLE001 - a failing run is a row, not a crash
        row.setdefault("seconds", time.perf_counter() - start)
        text = str(ex).strip().splitlines()
        row["error"] = f"{type(ex).__name__}: {text[0] if text else ''}"[:300]
    finally:
        lib_logger.removeHandler(counter)
        lib_logger.setLevel(old_level)
    row["warnings"] = counter.count
    row["split_warnings"] = counter.split
    row["warning_messages"] = counter.messages
    row["py_warnings"] = len(py_warnings)
    row["py_warning_messages"] = sorted({str(w.message).splitlines()[0][:200]
                                         for w in py_warnings})[:5]
    for col in COLUMNS:
        row.setdefault(col, None)
    return row


def _run_logged(task: QualityTask) -> dict[str, Any]:
    row = run_task(task)
    logger.info("%s %s %s seed %d: %.1f s%s", task.dataset, task.split, task.algorithm,
                task.seed, row["seconds"] or 0.0,
                f" ERROR {row['error']}" if row["error"] else "")
    return row


def run_tasks(tasks: Sequence[QualityTask], jobs: int = 1, chunk: int = 1,
              partial: str | Path | None = None) -> list[dict[str, Any]]:
    """Run every cell, ``jobs`` at a time (one process each); rows in task order.

    ``chunk`` consecutive tasks go to the same process (the algorithms of one data set,
    split and seed share its centralized k-means). ``partial``: append every row to this
    JSON-lines file as soon as it is done (an interrupted run keeps what it finished).
    """
    if jobs <= 1:
        rows_iter = map(_run_logged, tasks)
        pool = None
    else:
        pool = ProcessPoolExecutor(jobs)
        rows_iter = pool.map(_run_logged, tasks, chunksize=max(1, chunk))
    rows = []
    try:
        for row in rows_iter:
            rows.append(row)
            if partial is not None:
                with open(partial, "a") as fh:
                    fh.write(json.dumps(row, default=float) + "\n")
    finally:
        if pool is not None:
            pool.shutdown()
    return rows


def read_rows(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and meta of a ``quality.json`` or of a ``rows.jsonl`` of an unfinished run."""
    text = Path(path).read_text()
    if str(path).endswith(".jsonl"):
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        return rows, {"command": f"(partial rows of {Path(path).name})"}
    data = json.loads(text)
    return data["rows"], data["meta"]


# ------------------------------------------------------------------------ reports


def failure_reasons(row: dict[str, Any]) -> list[str]:
    """Why a row is a failure (empty: it is not)."""
    if row.get("error"):
        return ["error"]
    out = []
    if row["sse_ratio"] is not None and row["sse_ratio"] > SSE_RATIO_LIMIT:
        out.append("sse")
    if row["nonempty"] is not None and row["nonempty"] < row["k"]:
        out.append("empty")
    if row["distinct"] is not None and row["distinct"] < row["k"]:
        out.append("merged")
    if row["nan_entries"]:
        out.append("nan")
    return out


def _fmt(values: list[float], digits: int) -> str:
    vals = [v for v in values if v is not None and np.isfinite(v)]
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{np.mean(vals):.{digits}f} ± {np.std(vals):.{digits}f}"


def _range(values: list[int]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    lo, hi = min(vals), max(vals)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One cell per (dataset, split, algorithm): mean ± sd over seeds, ranges of counts."""
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["dataset"], r["split"], r["algorithm"]), []).append(r)
    out = []
    for (ds, split, alg), rs in cells.items():
        ok = [r for r in rs if not r["error"]]
        errors = sorted({r["error"] for r in rs if r["error"]})
        fails = [r for r in rs if failure_reasons(r)]
        out.append({
            "dataset": ds, "split": split, "algorithm": alg, "seeds": len(rs),
            "k": rs[0]["k"],
            "ari": _fmt([r["ari"] for r in ok], 2),
            "kmeans_ari": _fmt([r["kmeans_ari"] for r in ok], 2),
            "nmi": _fmt([r["nmi"] for r in ok], 2),
            "sse_ratio": _fmt([r["sse_ratio"] for r in ok], 2),
            "nonempty": _range([r["nonempty"] for r in ok]),
            "distinct": _range([r["distinct"] for r in ok]),
            "nan_entries": _range([r["nan_entries"] for r in ok]),
            "warnings": sum(r["warnings"] for r in rs),
            "seconds": _fmt([r["seconds"] for r in rs], 1),
            "failures": f"{len(fails)}/{len(rs)}",
            "failed_silently": sum(1 for r in fails if r["warnings"] == 0),
            "error": (f"{len(rs) - len(ok)}× {errors[0][:80]}"
                      + ("…" if len(errors[0]) > 80 else "")) if errors else "",
        })
    return out


SUMMARY_COLUMNS = (("dataset", "dataset"), ("split", "split"), ("algorithm", "algorithm"),
                   ("k", "k"), ("ari", "ARI"), ("kmeans_ari", "k-means ARI"), ("nmi", "NMI"),
                   ("sse_ratio", "SSE / k-means"), ("nonempty", "non-empty"),
                   ("distinct", "distinct"), ("nan_entries", "NaN"),
                   ("warnings", "warnings"), ("seconds", "s"),
                   ("failures", "failed"), ("error", "error"))


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The per-cell summary (mean ± sd over seeds) as a Markdown table."""
    cells = summarize(rows)
    head = "| " + " | ".join(h for _, h in SUMMARY_COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in SUMMARY_COLUMNS) + "|"
    lines = [head, sep]
    for c in cells:
        lines.append("| " + " | ".join(str(c[key]).replace("|", "/")
                                       for key, _ in SUMMARY_COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def failure_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts of failing runs, by reason and algorithm, and how many carried no warning."""
    fails = [r for r in rows if failure_reasons(r)]
    by_reason: dict[str, int] = {}
    by_alg: dict[str, list[int]] = {}
    for r in rows:
        reasons = failure_reasons(r)
        for reason in reasons:
            by_reason[reason] = by_reason.get(reason, 0) + 1
        tot = by_alg.setdefault(r["algorithm"], [0, 0, 0])
        tot[0] += 1
        tot[1] += bool(reasons)
        tot[2] += bool(reasons) and r["warnings"] == 0
    sse_fails = [r for r in fails if "sse" in failure_reasons(r)]
    good = [r for r in rows if not failure_reasons(r) and not r["error"]]
    checked = [r for r in rows if r.get("split_clusters") is not None]
    return {
        "runs": len(rows), "failed": len(fails),
        "failed_without_warning": sum(1 for r in fails if r["warnings"] == 0),
        # the split check (app engine): failing runs it flags, good runs it flags, and
        # the failing runs whose only warning is its own
        "split_checked": len(checked),
        "split_hits": sum(1 for r in sse_fails if r.get("split_clusters")),
        "sse_failures_checked": sum(1 for r in sse_fails
                                    if r.get("split_clusters") is not None),
        "split_false_alarms": sum(1 for r in good if r.get("split_clusters")),
        "good_checked": sum(1 for r in good if r.get("split_clusters") is not None),
        "failed_warned_only_by_split": sum(
            1 for r in fails if r["warnings"] and r["warnings"] == r.get("split_warnings")),
        "errors": sum(1 for r in rows if r["error"]),
        "by_reason": by_reason,
        "by_algorithm": {a: {"runs": t[0], "failed": t[1], "failed_without_warning": t[2]}
                         for a, t in by_alg.items()},
    }


def failure_list(rows: Sequence[dict[str, Any]]) -> str:
    """The failing cells as a Markdown list: runs, reasons, warnings, errors."""
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if failure_reasons(r):
            cells.setdefault((r["dataset"], r["split"], r["algorithm"]), []).append(r)
    order = {(c["dataset"], c["split"], c["algorithm"]): i
             for i, c in enumerate(summarize(rows))}
    lines = []
    for (ds, split, alg), rs in sorted(cells.items(), key=lambda kv: order[kv[0]]):
        reasons: dict[str, int] = {}
        for r in rs:
            for reason in failure_reasons(r):
                reasons[reason] = reasons.get(reason, 0) + 1
        what = ", ".join(f"{_REASONS[x]} {n}" for x, n in reasons.items())
        errors = sorted({r["error"] for r in rs if r["error"]})
        warned = sum(1 for r in rs if r["warnings"])
        better = [r for r in rs if failure_reasons(r) == ["sse"]
                  and r["ari"] >= r["kmeans_ari"] - 0.01]
        if better:
            what += (f" ({len(better)} of them: SSE only, with an ARI at or above "
                     "k-means')")
        lines.append(f"- {ds} / {split} / {alg}: {len(rs)} run(s) (seeds "
                     f"{', '.join(str(r['seed']) for r in rs)}): {what}; "
                     f"{warned} with a warning" + (f"; `{errors[0]}`" if errors else ""))
    return "\n".join(lines) + ("\n" if lines else "")


_REASONS = {"error": "raised", "sse": "SSE > 1.10x", "empty": "empty clusters",
            "merged": "merged centres", "nan": "NaN entries"}


def write_results(rows: Sequence[dict[str, Any]], out: str | Path, meta: dict[str, Any]
                  ) -> list[str]:
    """``quality.json`` (rows, summary, meta), ``quality.csv`` (rows), ``quality.md``."""
    import csv

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = failure_summary(rows)
    (out / "quality.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "rows": list(rows)}, indent=1, default=float))
    with open(out / "quality.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    (out / "quality.md").write_text(
        f"Command: `{meta['command']}`\n\n" + markdown_table(rows) + "\n"
        + f"Failing runs: {summary['failed']} of {summary['runs']}, "
        f"{summary['failed_without_warning']} without a warning.\n\n" + failure_list(rows))
    return [str(out / f) for f in ("quality.json", "quality.csv", "quality.md")]


# -------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``python -m simulations quality``."""
    p = argparse.ArgumentParser(
        prog=PROG, description="Every algorithm at its App defaults, k = the class count, "
        "on scikit-learn's sets and generators; ARI, NMI, SSE ratio to centralized "
        "k-means, degenerate results, warnings, seconds.")
    p.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    p.add_argument("--algorithms", nargs="+", choices=list(ALGORITHMS),
                   default=list(DEFAULT_ALGORITHMS),
                   help="default: all but deepfeca (needs PyTorch)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--big-seeds", nargs="+", type=int, default=None,
                   help="seeds of blobs100k (default: --seeds)")
    p.add_argument("--splits", nargs="+", choices=list(SPLITS), default=list(SPLITS))
    p.add_argument("--engine", choices=("loop", "app"), default="loop",
                   help="loop: the pure loops with the App's options (default); app: the "
                   "real strategy and clients in process")
    p.add_argument("--masks", choices=MASK_MODES, default="fraction",
                   help="the masked algorithms' feature masks: a random 70%% of the "
                   "features per client (default), every non-empty subset of them "
                   "cycled over the clients, or feature i mod d at client i "
                   "(low-dimensional cases; rows named <data set>/<masks>)")
    p.add_argument("--refine", type=int, default=0, metavar="N",
                   help="app engine: refine-rounds=N for " + ", ".join(REFINABLE)
                   + " (default 0: the App's default)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--out", default="./results/quality", help="output directory")
    p.add_argument("--from-json", nargs="+", metavar="FILE",
                   help="run nothing: merge the rows of earlier quality.json files (or "
                   "the rows.jsonl of an unfinished run) and write the tables again")
    p.add_argument("--quick", action="store_true",
                   help=f"a small subset: {QUICK['datasets']}, {QUICK['algorithms']}, seed 0, "
                   "iid")
    return p


def tasks_from_args(args: argparse.Namespace) -> list[QualityTask]:
    """The cells the arguments select, in table order."""
    if args.quick:
        datasets, algorithms = QUICK["datasets"], QUICK["algorithms"]
        seeds, splits = QUICK["seeds"], QUICK["splits"]
    else:
        datasets, algorithms, seeds, splits = (args.datasets, args.algorithms, args.seeds,
                                               args.splits)
    tasks = []
    for ds in datasets:
        ds_seeds = args.big_seeds if ds == "blobs100k" and args.big_seeds else seeds
        for split in splits:
            for seed in ds_seeds:  # a cell's algorithms together: one k-means per data
                for alg in algorithms:
                    tasks.append(QualityTask(ds, split, alg, seed, args.engine,
                                             args.masks if alg in MASKED else "fraction",
                                             args.refine))
    return tasks


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run the cells, write ``<out>/quality.{json,csv,md}``, print the table."""
    import os
    import platform
    import sys

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S")
    logger.setLevel(logging.INFO)
    logger.handlers = [logging.StreamHandler(sys.stderr)]
    logger.propagate = False
    command = " ".join([PROG, *(argv if argv is not None else sys.argv[1:])])
    if args.from_json:
        loaded = [read_rows(f) for f in args.from_json]
        rows = [r for part, _ in loaded for r in part]
        meta = {"command": "; ".join(m["command"] for _, m in loaded),
                "merged": [m for _, m in loaded]}
        files = write_results(rows, args.out, meta)
        print(markdown_table(rows))
        print(f"merged {len(rows)} rows; wrote " + ", ".join(files))
        return 0
    if args.refine and args.engine != "app":
        raise SystemExit(f"{PROG}: --refine needs --engine app (the pure loops do not "
                         "refine)")
    tasks = tasks_from_args(args)
    start = time.perf_counter()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    partial = Path(args.out) / "rows.jsonl"
    partial.unlink(missing_ok=True)
    rows = run_tasks(tasks, args.jobs, chunk=len({t.algorithm for t in tasks}),
                     partial=partial)
    wall = time.perf_counter() - start
    meta = {"command": command,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "engine": args.engine,
            "wall_seconds": wall, "loop_notes": LOOP_NOTES if args.engine == "loop" else {}}
    files = write_results(rows, args.out, meta)
    print(markdown_table(rows))
    s = failure_summary(rows)
    print(f"{s['failed']} of {s['runs']} runs failed ({s['errors']} errors), "
          f"{s['failed_without_warning']} without a warning; {wall:.0f} s; wrote "
          + ", ".join(files))
    if s["split_checked"]:
        print(f"split check: {s['split_hits']} of {s['sse_failures_checked']} checked SSE "
              f"failures flagged, {s['split_false_alarms']} of {s['good_checked']} checked "
              f"good runs flagged; {s['failed_warned_only_by_split']} failing runs warned "
              "by the split check alone")
    return 0
