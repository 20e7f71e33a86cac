"""``bench lloyd-step``, ``bench data-build``, ``bench dtype``: the Lloyd step, a client's rows.

The client's Lloyd step against its floors, and how long a client waits for its rows.

``lloyd-step``
    On ``(n, d, k)`` shapes (default: the issue's 2,000,000 x 16 / k 16, 1,000,000 x 2 /
    k 16, 200,000 x 64 / k 10), one thread and, with ``--threads default``, BLAS's own:
    the minimum time of :func:`~flwr_clustering.algorithms.lloyd.lloyd_step` (labels, sums,
    counts), of its labels alone
    (:func:`~flwr_clustering.algorithms.lloyd.nearest_labels`), of the cdist labels it
    replaced (:func:`~flwr_clustering.algorithms.lloyd.assign_to_nearest`), of
    ``X @ C.T`` (the floor the goal is stated against), of one read of ``X``
    (``X.sum()``) and of scikit-learn's ``KMeans(init=C, n_init=1, max_iter=1).fit(X)``,
    all on the same arrays in one process. Both data types in one run (``--dtypes``):
    float32 rows are the float64 ones rounded, each type timed against ``X @ C.T`` in
    its own type. The labels of ``lloyd_step`` are checked equal to cdist's of the rows'
    exact values.

``data-build``
    For built-in data sets and partitioners, a fresh Python process imports
    :mod:`flwr_clustering.data` and builds one client's partition with
    :func:`~flwr_clustering.data.load_partition` (the cache empty, as in a new Ray worker):
    the import time and the build time, and the import time of the library's ClientApp
    (``flwr_clustering.app.client_app``).

``reply-check``
    The reply contract's cost per message (:func:`~flwr_clustering.strategies.contracts.
    check_contract`), in microseconds, at ``d`` = 13 and 100 (``k`` 16, 150 rows): a
    ``data-source``, ``feature-moments``, ``k-moments`` (one candidate), ``split-scatter``
    and ``evaluate`` reply as the library's clients build them, and an FKM train reply.

``dtype``
    FKM's ``dtype='float32'`` against float64 (:func:`bench_dtype`): ARI and SSE on the
    Garst grid (the paper's beta split and a 100,000-row grid) and scikit-learn's digits,
    over seeds, and the Lloyd step's time and memory in both types.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import load_average, machine_info, thread_limit, write_result

__all__ = ["add_parsers", "bench_data_build", "bench_dtype", "bench_lloyd_step",
           "bench_reply_check"]

#: The issue's shapes: (n, d, k).
SHAPES = ((2_000_000, 16, 16), (1_000_000, 2, 16), (200_000, 64, 10))

#: (dataset, partitioner, clients, extra load_partition arguments): 100,000 rows each.
BUILDS = (
    ("garst-grid", "iid", 5, {"ppc": 6250}),
    ("garst-grid", "iid", 200, {"ppc": 6250}),
    ("garst-grid", "natural", 5, {"ppc": 6250}),
    ("garst-grid", "dirichlet", 200, {"ppc": 6250}),
    ("garst-grid", "cluster-wise", 5, {"ppc": 6250}),
    ("blobs", "iid", 200, {"n_samples": 100_000}),
    ("blobs", "sorted", 200, {"n_samples": 100_000}),
    ("garst-grid", "iid", 5, {}),  # the quick-start run's 800 points
)


def _best(fn, repeats: int) -> float:
    fn()  # warm-up: page faults, imports, caches
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_lloyd_step(shapes=SHAPES, threads=("1",), repeats: int = 3, seed: int = 0,
                     dtypes=("float64", "float32")) -> list[dict[str, Any]]:
    """Minimum seconds of the Lloyd step and its floors per shape, type and thread setting.

    Each type runs on the same values (the float32 rows are the float64 ones rounded) and
    against its own floor: ``X @ C.T`` with ``X`` and ``C`` in that type, one read of
    ``X`` and scikit-learn's one-iteration ``KMeans`` on ``X`` as it is. ``lloyd_step``
    gets the float64 centroids in both (as FKM's float32 clients do), and its labels are
    checked equal to cdist's of the rows' exact (float64) values.
    """
    from scipy.spatial.distance import cdist
    from sklearn.cluster import KMeans

    from flwr_clustering.algorithms.lloyd import assign_to_nearest, lloyd_step, nearest_labels

    rows = []
    rng = np.random.default_rng(seed)
    for n, d, k in shapes:
        X64 = rng.normal(size=(int(n), int(d)))
        C = X64[rng.choice(int(n), int(k), replace=False)].copy()
        for dtype in dtypes:
            X = X64 if dtype == "float64" else X64.astype(dtype)
            Cd = C.astype(dtype)
            exact = np.argmin(cdist(X.astype(np.float64), C, "sqeuclidean"), axis=1)
            same = bool(np.array_equal(lloyd_step(X, C)[2], exact))
            for thr in threads:
                with thread_limit(thr):
                    t = {
                        "lloyd_step": _best(lambda X=X, C=C: lloyd_step(X, C), repeats),
                        "nearest_labels": _best(lambda X=X, C=C: nearest_labels(X, C),
                                                  repeats),
                        "cdist_labels": _best(lambda X=X, C=C: assign_to_nearest(X, C),
                                                repeats),
                        "gemm": _best(lambda X=X, Cd=Cd: X @ Cd.T, repeats),
                        "read": _best(lambda X=X: X.sum(), repeats),
                        "sklearn": _best(lambda X=X, Cd=Cd: KMeans(
                            n_clusters=len(Cd), init=Cd, n_init=1, max_iter=1).fit(X),
                            repeats),
                    }
                rows.append({"n": int(n), "d": int(d), "k": int(k), "dtype": dtype,
                             "threads": thr, "labels_equal_cdist": same,
                             **{f"{key}_s": v for key, v in t.items()},
                             "step_over_gemm": t["lloyd_step"] / t["gemm"],
                             "labels_over_gemm": t["nearest_labels"] / t["gemm"],
                             "step_over_read": t["lloyd_step"] / t["read"],
                             "step_over_sklearn": t["lloyd_step"] / t["sklearn"]})
                print(json.dumps(rows[-1]), flush=True)
            del X
    return rows


_BUILD_CODE = """
import json, sys, time
start = time.perf_counter()
from flwr_clustering.data import load_partition
imported = time.perf_counter()
dataset, partitioner, clients, extra = json.loads(sys.argv[1])
X, _ = load_partition(0, clients, dataset=dataset, partitioner=partitioner, **extra)
built = time.perf_counter()
print(json.dumps({"import_s": imported - start, "build_s": built - imported,
                  "rows_client_0": len(X)}))
"""

_IMPORT_CODE = """
import json, time
start = time.perf_counter()
import flwr_clustering.app.client_app
print(json.dumps({"import_s": time.perf_counter() - start}))
"""


def bench_data_build(builds=BUILDS, repeats: int = 3) -> dict[str, Any]:
    """Import and build times, each in a fresh process; minimum over ``repeats``."""
    def run(code: str, *args: str) -> dict[str, float]:
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                             text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    rows = []
    for dataset, partitioner, clients, extra in builds:
        runs = [run(_BUILD_CODE, json.dumps([dataset, partitioner, clients, extra]))
                for _ in range(repeats)]
        rows.append({"dataset": dataset, "partitioner": partitioner, "clients": clients,
                     **extra, "rows_client_0": runs[0]["rows_client_0"],
                     "import_s": min(r["import_s"] for r in runs),
                     "build_s": min(r["build_s"] for r in runs)})
        print(json.dumps(rows[-1]), flush=True)
    client_app = min(run(_IMPORT_CODE)["import_s"] for _ in range(repeats))
    return {"builds": rows, "client_app_import_s": client_app}


def _lloyd_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| n x d, k | dtype | threads | lloyd_step ms | labels ms | cdist labels ms | "
             "X @ C.T ms | read ms | scikit-learn ms | step / X@C.T | labels / X@C.T | "
             "step / scikit-learn | labels = cdist |", "|" + "---|" * 13]
    for r in rows:
        lines.append(
            f"| {r['n']:,} x {r['d']}, {r['k']} | {r['dtype']} | {r['threads']} | "
            f"{r['lloyd_step_s'] * 1e3:.1f} | {r['nearest_labels_s'] * 1e3:.1f} | "
            f"{r['cdist_labels_s'] * 1e3:.0f} | {r['gemm_s'] * 1e3:.1f} | "
            f"{r['read_s'] * 1e3:.1f} | {r['sklearn_s'] * 1e3:.0f} | "
            f"{r['step_over_gemm']:.2f} | {r['labels_over_gemm']:.2f} | "
            f"{r['step_over_sklearn']:.2f} | {r['labels_equal_cdist']} |")
    return "\n".join(lines) + "\n"


def _build_markdown(result: dict[str, Any]) -> str:
    lines = ["| dataset | partitioner | clients | client 0 rows | import s | build s |",
             "|---|---|---|---|---|---|"]
    for r in result["builds"]:
        lines.append(f"| {r['dataset']} | {r['partitioner']} | {r['clients']} | "
                     f"{r['rows_client_0']:,} | {r['import_s']:.3f} | {r['build_s']:.3f} |")
    lines.append(f"\nImport of `flwr_clustering.app.client_app`: "
                 f"{result['client_app_import_s']:.3f} s\n")
    return "\n".join(lines)


def _reply_cases(d: int, k: int, rows: int) -> dict[str, tuple[Any, Any]]:
    """``{phase: (reply content, bounds)}``: honest replies of one client at ``d``, ``k``."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

    from flwr_clustering.protocol import MOMENT_KEYS
    from flwr_clustering.strategies.contracts import Bounds, Sent

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, d))
    labels = rng.integers(0, k, rows)
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    sums = np.stack([X[labels == j].sum(axis=0) for j in range(k)])
    outer = np.stack([X[labels == j].T @ X[labels == j] for j in range(k)])
    metrics = MetricRecord({"num-examples": rows, "client-id": 0})
    stats = dict(zip(MOMENT_KEYS[:4], (np.full(d, float(rows)), X.sum(axis=0),
                                      (X * X).sum(axis=0), np.array([rows, 0.0])),
                     strict=True))

    def content(**records: Any) -> Any:
        return RecordDict({"metrics": metrics, **records})

    model = Sent({}, ((k, d),), 8 * k * d)
    return {
        "data-source": (content(columns=ConfigRecord({
            "names": [f"feature {j}" for j in range(d)], "kinds": ["numeric"] * d,
            "unique": [0] * d, "rows": rows})), Bounds(d=None, k=k)),
        "feature-moments": (content(stats=ArrayRecord(
            {key: Array(v) for key, v in stats.items()})), Bounds(d=d, k=k, rows=rows)),
        "k-moments": (content(arrays=ArrayRecord([
            counts, sums, rng.random(k), rng.random(k) * counts, np.zeros(1)])),
            Bounds(d=d, k=k, rows=rows, sent=Sent({"candidate-count": 1}, ((k, d),),
                                                  8 * k * d))),
        "split-scatter": (content(stats=ArrayRecord({
            "split-counts": Array(counts), "split-sums": Array(sums),
            "split-scatter": Array(outer)})), Bounds(d=d, k=k, rows=rows, sent=model)),
        "evaluate": (content(stats=ArrayRecord({
            "cluster-counts": Array(counts.astype(np.int64)),
            "cluster-sums": Array(sums)})), Bounds(d=d, k=k, rows=rows, sent=model,
                                                   model=(k, d))),
        "train (fkm)": (content(arrays=ArrayRecord([sums / np.maximum(counts, 1)[:, None],
                                                    counts])),
                        Bounds(d=d, k=k, rows=rows, sent=model)),
    }


def bench_reply_check(ds=(13, 100), k: int = 16, rows: int = 150, number: int = 2000
                      ) -> list[dict[str, Any]]:
    """Microseconds per message of the reply contract, per phase and ``d`` (best of 5)."""
    import timeit

    from flwr_clustering.strategies.contracts import check_contract

    out = []
    for d in ds:
        for phase, (content, bounds) in _reply_cases(d, k, rows).items():
            kind = "train" if phase.startswith("train") else phase
            check_contract(kind, content, bounds)  # honest: passes
            best = min(timeit.repeat(lambda c=content, b=bounds, p=kind:
                                     check_contract(p, c, b), number=number, repeat=5))
            out.append({"phase": phase, "d": d, "k": k, "us": 1e6 * best / number})
    return out


def _reply_markdown(rows: list[dict[str, Any]]) -> str:
    ds = sorted({r["d"] for r in rows})
    lines = ["| phase | " + " | ".join(f"d = {d} (µs)" for d in ds) + " |",
             "|---|" + "---:|" * len(ds)]
    for phase in dict.fromkeys(r["phase"] for r in rows):
        cells = [next(f"{r['us']:.0f}" for r in rows if r["phase"] == phase and r["d"] == d)
                 for d in ds]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cmd_reply(args: argparse.Namespace) -> int:
    load = load_average()
    rows = bench_reply_check(tuple(args.d), args.k, number=args.number)
    result = {"benchmark": "reply-check", "machine": machine_info(), "load_before": load,
              "load_after": load_average(), "rows": rows}
    print(_reply_markdown(rows))
    write_result(Path(args.out), "reply_check", result, _reply_markdown(rows))
    return 0


def _cmd_lloyd(args: argparse.Namespace) -> int:
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]
    load = load_average()
    rows = bench_lloyd_step(shapes, args.threads, args.repeats, args.seed, args.dtypes)
    result = {"benchmark": "lloyd-step", "machine": machine_info(), "load_before": load,
              "load_after": load_average(), "rows": rows}
    print(_lloyd_markdown(rows))
    write_result(Path(args.out), "lloyd_step", result, _lloyd_markdown(rows))
    return 0 if all(r["labels_equal_cdist"] for r in rows) else 1


def _cmd_build(args: argparse.Namespace) -> int:
    load = load_average()
    result = {"benchmark": "data-build", "machine": machine_info(), "load_before": load,
              **bench_data_build(repeats=args.repeats)}
    result["load_after"] = load_average()
    print(_build_markdown(result))
    write_result(Path(args.out), "data_build", result, _build_markdown(result))
    return 0


def add_parsers(subparsers: Any) -> None:
    """Register ``lloyd-step``, ``data-build``, ``reply-check`` and ``dtype`` on ``bench``."""
    p = subparsers.add_parser("lloyd-step", help="the Lloyd step against X @ C.T, one read "
                              "of X and scikit-learn")
    p.add_argument("--shapes", nargs="+", default=[f"{n}x{d}x{k}" for n, d, k in SHAPES],
                   help="n x d x k (default: the issue's three)")
    p.add_argument("--threads", nargs="+", default=["1"], help="'1' and/or 'default'")
    p.add_argument("--dtypes", nargs="+", default=["float64", "float32"],
                   choices=["float64", "float32"], help="the data's types, each against "
                   "X @ C.T in its own type (default: both, in one run)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-results")
    p.set_defaults(func=_cmd_lloyd)
    b = subparsers.add_parser("data-build", help="a client's import and partition build "
                              "time, in fresh processes")
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--out", default="bench-results")
    b.set_defaults(func=_cmd_build)
    r = subparsers.add_parser("reply-check", help="the reply contract's cost per message "
                              "(microseconds), per phase, at d = 13 and 100")
    r.add_argument("--d", type=int, nargs="+", default=[13, 100])
    r.add_argument("--k", type=int, default=16)
    r.add_argument("--number", type=int, default=2000)
    r.add_argument("--out", default="bench-results")
    r.set_defaults(func=_cmd_reply)
    t = subparsers.add_parser("dtype", help="FKM in float32 against float64: ARI and SSE on "
                              "the Garst grid and digits, the Lloyd step's time")
    t.add_argument("--seeds", type=int, default=5)
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--out", default="bench-results")
    t.set_defaults(func=_cmd_dtype)


#: (name, data set arguments of load_dataset, k, clients) of ``bench dtype``.
DTYPE_CASES = (
    ("garst-grid beta 0.1 (paper's split, 800 rows)", None, 16, 5),
    ("garst-grid 100,000 rows, iid", {"dataset": "garst-grid", "ppc": 6250}, 16, 5),
    ("digits (1,797 x 64), iid", {"dataset": "digits"}, 10, 5),
)


def bench_dtype(cases=DTYPE_CASES, seeds=range(5), shape=(2_000_000, 16, 16),
                repeats: int = 3) -> dict[str, Any]:
    """FKM in float32 against float64: quality per data set and seed, the step's time.

    Quality: the pure loop :func:`~flwr_clustering.algorithms.fkm.run_fkm` (20 rounds at
    most, the defaults) in both types on the same clients; the ARI of the pooled rows'
    labels against the truth and the pooled SSE of the final centroids, both computed in
    float64 on the float64 rows. Speed: one Lloyd step and ``X @ C.T`` in both types, one
    thread, on ``shape``.
    """
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering.algorithms.fkm import run_fkm
    from flwr_clustering.algorithms.lloyd import lloyd_step, nearest_labels
    from flwr_clustering.data import load_dataset
    from flwr_clustering.data.splits import iid_indices
    from flwr_clustering.data.synthetic import garst_beta_split
    from flwr_clustering.metrics import sse

    quality = []
    for name, data, k, clients in cases:
        if data is None:
            X, y, c = garst_beta_split(0.1)
            parts = [np.flatnonzero(c == i) for i in range(clients)]
        else:
            X, y = load_dataset(data["dataset"], **{a: v for a, v in data.items()
                                                   if a != "dataset"})[:2]
            parts = iid_indices(len(X), clients, 0)
        for seed in seeds:
            row: dict[str, Any] = {"data": name, "k": k, "clients": clients, "seed": seed}
            for dtype in ("float64", "float32"):
                res = run_fkm([X[p] for p in parts], k, seed=seed, dtype=dtype)
                C = np.asarray(res.centroids, dtype=np.float64)
                row[f"ari_{dtype}"] = float(adjusted_rand_score(y, nearest_labels(X, C)))
                row[f"sse_{dtype}"] = float(sse(X, C))
                row[f"rounds_{dtype}"] = len(res.history)
            row["sse_rel_diff"] = row["sse_float32"] / row["sse_float64"] - 1
            quality.append(row)
            print(json.dumps(row), flush=True)
    n, d, k = shape
    rng = np.random.default_rng(0)
    X64 = rng.normal(size=(n, d))
    C = X64[rng.choice(n, k, replace=False)].copy()
    speed: dict[str, Any] = {"n": n, "d": d, "k": k}
    with thread_limit("1"):
        for dtype in ("float64", "float32"):
            X = X64.astype(dtype)
            Cd = C.astype(dtype)
            speed[f"step_{dtype}_s"] = _best(lambda X=X, C=C: lloyd_step(X, C), repeats)
            speed[f"gemm_{dtype}_s"] = _best(lambda X=X, Cd=Cd: X @ Cd.T, repeats)
            speed[f"rows_{dtype}_mib"] = X.nbytes / 2**20
            del X
    print(json.dumps(speed), flush=True)
    return {"quality": quality, "speed": speed}


def _dtype_markdown(result: dict[str, Any]) -> str:
    lines = ["| data | seed | ARI float64 | ARI float32 | SSE float64 | SSE float32 / float64 "
             "- 1 | rounds 64 / 32 |", "|---|---|---|---|---|---|---|"]
    for r in result["quality"]:
        lines.append(f"| {r['data']} | {r['seed']} | {r['ari_float64']:.4f} | "
                     f"{r['ari_float32']:.4f} | {r['sse_float64']:.6g} | "
                     f"{r['sse_rel_diff']:.2e} | {r['rounds_float64']} / "
                     f"{r['rounds_float32']} |")
    s = result["speed"]
    lines += ["", f"One Lloyd step, {s['n']:,} x {s['d']}, k {s['k']}, one thread:", "",
              "| dtype | rows MiB | step ms | X @ C.T ms | step / X@C.T |", "|---|---|---|---|---|"]
    for dtype in ("float64", "float32"):
        lines.append(f"| {dtype} | {s[f'rows_{dtype}_mib']:.0f} | "
                     f"{s[f'step_{dtype}_s'] * 1e3:.0f} | {s[f'gemm_{dtype}_s'] * 1e3:.0f} | "
                     f"{s[f'step_{dtype}_s'] / s[f'gemm_{dtype}_s']:.2f} |")
    return "\n".join(lines) + "\n"


def _cmd_dtype(args: argparse.Namespace) -> int:
    load = load_average()
    result = {"benchmark": "dtype", "machine": machine_info(), "load_before": load,
              **bench_dtype(seeds=range(args.seeds), repeats=args.repeats)}
    result["load_after"] = load_average()
    print(_dtype_markdown(result))
    write_result(Path(args.out), "dtype", result, _dtype_markdown(result))
    return 0
