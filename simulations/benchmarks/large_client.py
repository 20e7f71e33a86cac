"""Benchmark: one client holding 10 million rows (issue: large data per client).

Each case runs in its own Python process, so its peak memory (``VmHWM`` of
``/proc/self/status``) is its own: the process generates its rows on the fly (in row
blocks, into one preallocated float64 array: no second copy), then runs one client step,
and reports

- ``data_mib``: the rows themselves (``X.nbytes``; labels ``y`` are 1/d of it more);
- ``rss_before_mib``: resident memory once the data exists and the code is imported;
- ``peak_mib``: the process's peak resident memory, data, imports and the step included;
- ``peak_over_data``: ``peak_mib / data_mib`` (goal: at most 2);
- ``seconds``: the step's wall time.

Cases (``--cases``):

``fkm-step``
    :class:`~flwr_clustering.clients.fkm.FedKMeansClient` ``.fit`` of an ``update`` round
    without evaluation: assignment to ``C_g`` and one local Lloyd step.
``evaluate``
    The same client's ``.evaluate`` (SSE, simplified silhouette, counts, contingency,
    moments, residual sums).
``sklearn-step``
    ``KMeans(init=C_g, n_init=1, max_iter=1).fit(X)`` on the same rows, one thread
    (``--threads 1``) and the default pools: the speed reference of a Lloyd step.
``kdc-assign``
    KDC's site labelling (:func:`~flwr_clustering.algorithms.kdc.kdc_site_assign`) with a
    model built by :func:`~flwr_clustering.algorithms.kdc.run_kdc` on a 200,000-row part
    of the same rows (the sample and the server steps are not the site's cost).
``masked-update``
    :class:`~flwr_clustering.clients.masked.MaskedFederatedClient` ``.fit`` of an
    ``update`` round without evaluation (10 warm-started local k-means iterations, the
    default), the client holding the rows with a quarter of the features unobserved (NaN).
``masked-evaluate``
    The same client's evaluation statistics (``local_stats``, on the observed features).
``masked-sklearn``
    ``KMeans(init=..., n_init=1, max_iter=10)`` on the observed columns (a copy): the
    reference of the masked client's warm-started local k-means.

Usage::

    python -m simulations bench large-client --rows 10000000 --features 16 --out bench/large

The rows are 16 Gaussian blobs (unit variance, centres ~ N(0, 10^2)), so the step's work is
that of real clustered data. Timings on a shared machine are noisy (the load average is
recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CASES", "add_parser", "bench_large_client", "generate", "main", "run_case"]

MIB = 2.0**20
#: The cases, in the order they run.
CASES = ("fkm-step", "evaluate", "sklearn-step", "kdc-assign", "masked-update",
         "masked-evaluate", "masked-sklearn")
#: Rows generated per block (the generator's temporaries stay small).
_GEN_BLOCK = 1 << 16


def generate(n: int, d: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of ``k`` Gaussian blobs in ``d`` dimensions, generated block by block.

    Returns
    -------
    X : numpy.ndarray of shape (n, d), float64
    y : numpy.ndarray of shape (n,), int64
        The blob of every row.
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=10.0, size=(k, d))
    X = np.empty((n, d))
    y = np.empty(n, dtype=np.int64)
    for start in range(0, n, _GEN_BLOCK):
        stop = min(n, start + _GEN_BLOCK)
        y[start:stop] = rng.integers(0, k, stop - start)
        X[start:stop] = centres[y[start:stop]] + rng.standard_normal((stop - start, d))
    return X, y


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _start_centroids(X: np.ndarray, k: int) -> np.ndarray:
    # k rows spread over the data (a deterministic start; no k-means++ pass over 10 M rows)
    return np.array(X[np.linspace(0, len(X) - 1, k).astype(np.int64)])


def run_case(case: str, n: int, d: int, k: int, threads: int | None) -> dict[str, Any]:
    """Run one case in this process and return its measurements (see the module doc)."""
    from threadpoolctl import threadpool_limits

    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; choose from {CASES}")
    X, y = generate(n, d, k)
    C = _start_centroids(X, k)
    work: Any
    if case in ("fkm-step", "evaluate"):
        from flwr_clustering.clients.fkm import FedKMeansClient

        client = FedKMeansClient(X, y, client_id=0)
        config = {"phase": "update", "k": k, "evaluate": False, "local-iterations": 1}
        if case == "fkm-step":
            def work():
                return client.fit([C], config)
        else:
            def work():
                return client.evaluate([C], {"n-classes": k})
    elif case == "sklearn-step":
        from sklearn.cluster import KMeans

        def work():
            return KMeans(k, init=C, n_init=1, max_iter=1).fit(X)
    elif case == "kdc-assign":
        from flwr_clustering.algorithms.kdc import kdc_site_assign, run_kdc

        part = X[: min(n, 200_000)]
        model = run_kdc([part], k, seed=0)  # the defaults: psi chosen by the data
        kdc_cells = model.model.t * model.model.psi

        def work():
            return kdc_site_assign(X, model.model, model.maps, model.lo, model.hi)
    else:
        unobserved = np.arange(d)[-max(1, d // 4):]
        X[:, unobserved] = np.nan
        C[:, unobserved] = np.nan
        if case in ("masked-update", "masked-evaluate"):
            from flwr_clustering.clients.masked import MaskedFederatedClient

            client = MaskedFederatedClient(X, y, client_id=0)
            config = {"phase": "update", "k": k, "evaluate": False, "n-classes": k}
            G = np.array(C)

            def work():
                if case == "masked-evaluate":
                    return client.local_stats(G, config)
                return client.fit([G], config)
        else:
            from sklearn.cluster import KMeans

            seen = np.setdiff1d(np.arange(d), unobserved)

            def work():
                return KMeans(k, init=C[:, seen], n_init=1, max_iter=10).fit(X[:, seen])
    rss_before = _status_mib("VmRSS")
    with threadpool_limits(threads):
        t0 = time.perf_counter()
        work()
        seconds = time.perf_counter() - t0
    data_mib = X.nbytes / MIB
    peak = _status_mib("VmHWM")
    return {
        "case": case, "rows": n, "features": d, "k": k,
        "threads": "default" if threads is None else threads,
        "data_mib": round(data_mib, 1), "labels_mib": round(y.nbytes / MIB, 1),
        "rss_before_mib": round(rss_before, 1), "peak_mib": round(peak, 1),
        "peak_over_data": round(peak / data_mib, 3), "seconds": round(seconds, 6),
        **({"kdc_cells": int(kdc_cells)} if case == "kdc-assign" else {}),
    }


def _run_in_subprocess(case: str, n: int, d: int, k: int, threads: int | None,
                       timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "simulations.benchmarks.large_client", "--worker", case,
           str(n), str(d), str(k), "default" if threads is None else str(threads)]
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(Path(__file__).resolve().parents[2]))
    if proc.returncode != 0:
        return {"case": case, "rows": n, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_large_client(rows: int = 10_000_000, features: int = 16, k: int = 16,
                       cases: tuple[str, ...] = CASES, threads: tuple[int | None, ...] = (1,),
                       timeout: float = 3600.0) -> dict[str, Any]:
    """Run the cases, each in a fresh process; see the module doc."""
    runs = []
    for case in cases:
        for th in (threads if case.endswith("sklearn") or case == "sklearn-step"
                   else threads[:1]):
            rec = _run_in_subprocess(case, rows, features, k, th, timeout)
            print(json.dumps(rec), flush=True)
            runs.append(rec)
    by = {(r["case"], r.get("threads")): r for r in runs if "error" not in r}
    ratios = {}
    step = by.get(("fkm-step", threads[0] if threads[0] is not None else "default"))
    for (case, th), r in by.items():
        if case == "sklearn-step" and step:
            ratios[f"fkm-step / sklearn-step (threads={th})"] = round(
                step["seconds"] / r["seconds"], 3)
    masked = by.get(("masked-update", threads[0] if threads[0] is not None else "default"))
    for (case, th), r in by.items():
        if case == "masked-sklearn" and masked:
            ratios[f"masked-update / masked-sklearn (threads={th})"] = round(
                masked["seconds"] / r["seconds"], 3)
    return {"rows": rows, "features": features, "k": k, "runs": runs, "ratios": ratios,
            "load": list(os.getloadavg()), "cpus": os.cpu_count()}


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown table."""
    lines = [f"One client, {result['rows']:,} rows x {result['features']} features, "
             f"k = {result['k']} ({result['cpus']} CPUs, load {result['load'][0]:.2f})", "",
             "| case | threads | data MiB | RSS before MiB | peak MiB | peak / data | s |",
             "|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['case']} | | | | | | error |")
            continue
        lines.append(f"| {r['case']} | {r['threads']} | {r['data_mib']} | "
                     f"{r['rss_before_mib']} | {r['peak_mib']} | {r['peak_over_data']} | "
                     f"{r['seconds']} |")
    lines.append("")
    lines += [f"- {name}: {value}" for name, value in result["ratios"].items()]
    return "\n".join(lines) + "\n"


def _cmd(args: argparse.Namespace) -> int:
    threads = tuple(None if t == "default" else int(t) for t in args.threads)
    result = bench_large_client(args.rows, args.features, args.k, tuple(args.cases), threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "large-client.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    (out / "large-client.md").write_text(text)
    print(text)
    return 0 if all("error" not in r for r in result["runs"]) else 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``large-client`` subcommand on ``bench``'s subparsers."""
    p = sub.add_parser("large-client", help="one client with 10 M rows: memory and step time")
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--threads", nargs="+", default=["1", "default"],
                   help="thread pools of the timed step ('default' or an integer); the "
                        "library's steps run with the first, scikit-learn with each")
    p.add_argument("--out", default="bench-results")
    p.set_defaults(func=_cmd)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; ``--worker CASE N D K THREADS`` runs one case (internal)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        case, n, d, k, th = argv[1:6]
        rec = run_case(case, int(n), int(d), int(k), None if th == "default" else int(th))
        print(json.dumps(rec))
        return 0
    parser = argparse.ArgumentParser(prog="large-client")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["large-client", *argv])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
