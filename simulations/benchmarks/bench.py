"""Benchmarks: the FKM client step against scikit-learn, and round time against Flower's floor.

Speed and memory goals live here, never in the unit tests. Four subcommands, each writing
``<out>/<subcommand>.json`` and ``<out>/<subcommand>.md``:

``client-step``
    Median wall time (``time.perf_counter``) of the FKM client step
    :func:`~flwr_clustering.algorithms.fkm.fkm_client_update` ``(X, C, privacy_threshold=2,
    local_iters=1)``
    against ``sklearn.cluster.KMeans(n_clusters=k, init=C, n_init=1, max_iter=1).fit(X)`` on
    the same data, with the BLAS/OpenMP thread pools left alone (``threads=default``) and
    limited to one thread (``threads=1``, what a Ray actor with ``num_cpus=1`` gets). Goal:
    ratio ours/sklearn <= 1. Also a per-primitive breakdown and a cProfile of the largest
    size.

``server-step``
    The FKM server step :func:`~flwr_clustering.algorithms.fkm.fkm_server_aggregate` (weighted
    k-means, ``n_init=10``) on ``16 x clients`` local centroids, with default and one-thread
    pools: it runs in the ServerApp process, between the rounds' message exchanges.

``rounds``
    ``flwr run`` Ray simulations of FedKMeans (``algorithm='fkm'``) and of its no-computation
    twin Echo (:mod:`simulations.benchmarks.echo`) on ``blobs`` data
    with an ``iid`` split (``n-samples = samples-per-client x clients``), a fixed number of
    rounds (``tol=-1``) and ``min-nodes = clients``. Round time is the median of the
    ``"seconds"`` of rounds >= 2 in ``history.json`` (round 1 includes Ray's start-up);
    goal: FKM/echo <= 1.1. Peak memory is the largest summed PSS (``/proc/<pid>/smaps_rollup``)
    of the benchmark's own SuperLink and all its descendants (SuperExec, ``flwr-simulation``,
    Ray's GCS, raylet, dashboard and actors), sampled every ``--sample-interval`` seconds.
    The harness starts its own local SuperLink on ``--port`` (never the shared 39091) with
    the command ``flwr`` itself uses, and stops it and its descendants, by PID, at the end.

``inprocess``
    The same FKM and echo runs on :class:`~flwr_clustering.testing.InProcessGrid` (no Ray,
    no SuperLink; clients run one after the other in this process): the pure compute of a
    round, and a cProfile attribution of rounds >= 2 to client and server functions.

Usage::

    python -m simulations bench client-step --out bench-results
    python -m simulations bench server-step --clients 10 100 1000
    python -m simulations bench rounds --clients 10 100 1000 --out bench-results
    python -m simulations bench inprocess --clients 10 100 1000

Timings on a shared machine are noisy: every result records the load average before and
after, and the rounds subcommand interleaves FKM and echo runs.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    flower_env,
    load_average,
    machine_info,
    ms,
    run_config_algorithm,
    run_one,
    start_superlink,
    stop_tree,
    summarize_history,
    thread_limit,
    time_call,
    write_result,
)

__all__ = [
    "bench_client_step",
    "bench_server_step",
    "client_step_breakdown",
    "bench_inprocess",
    "main",
    "profile_client_step",
    "rounds_markdown",
    "run_rounds",
]


# =============================================================================== data
def _blobs(n: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=n, n_features=d, centers=k, random_state=seed)
    X = np.ascontiguousarray(X, dtype=np.float64)
    rng = np.random.default_rng(seed)
    C = X[rng.choice(n, size=k, replace=False)].copy()
    return X, C



# =========================================================================== client step
def bench_client_step(
    sizes: Sequence[int] = (1_000, 10_000, 100_000),
    dims: Sequence[int] = (2, 64),
    k: int = 16,
    repeats: int = 7,
    threads: Sequence[str] = ("default", "1"),
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Time the FKM client step and one scikit-learn Lloyd iteration on the same data.

    Parameters
    ----------
    sizes, dims : sequence of int
        Every ``(n, d)`` pair is measured (``make_blobs`` data with ``k`` centers).
    k : int, default 16
        Number of centroids; ``C`` is ``k`` distinct rows of ``X``.
    repeats : int, default 7
        Timed calls per measurement (the median is reported).
    threads : sequence of str
        ``"default"`` (thread pools untouched) and/or a thread count such as ``"1"``
        (``threadpoolctl.threadpool_limits``, applied to both sides).
    seed : int, default 0
        Seed of the data and of the choice of ``C``.

    Returns
    -------
    list of dict
        One row per ``(n, d, threads)``: seconds (median/min) of both and
        ``ratio = ours / sklearn`` (of the medians).
    """
    from sklearn.cluster import KMeans

    from flwr_clustering.algorithms.fkm import fkm_client_update

    rows = []
    for n in sizes:
        for d in dims:
            X, C = _blobs(int(n), int(d), int(k), seed)
            for thr in threads:
                with thread_limit(thr), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ours = time_call(
                        lambda X=X, C=C: fkm_client_update(
                            X, C, privacy_threshold=2, local_iters=1
                        ),
                        repeats,
                    )
                    skl = time_call(
                        lambda X=X, C=C: KMeans(
                            n_clusters=k, init=C, n_init=1, max_iter=1
                        ).fit(X),
                        repeats,
                    )
                rows.append({
                    "n": int(n), "d": int(d), "k": int(k), "threads": thr,
                    "ours_s": ours["median"], "ours_min_s": ours["min"],
                    "sklearn_s": skl["median"], "sklearn_min_s": skl["min"],
                    "ratio": ours["median"] / skl["median"],
                    "ratio_min": ours["min"] / skl["min"],
                })
    return rows


def client_step_breakdown(
    n: int = 100_000, d: int = 64, k: int = 16, repeats: int = 7, seed: int = 0
) -> list[dict[str, Any]]:
    """Time the primitives the FKM client step is made of.

    Parameters
    ----------
    n, d, k : int
        Data size, dimension, number of centroids.
    repeats : int, default 7
        Timed calls per item.
    seed : int, default 0
        Data seed.

    Returns
    -------
    list of dict
        ``{"item", "calls_per_step", "seconds"}``; ``calls_per_step`` is how often
        ``fkm_client_update`` performs the item.
    """
    from flwr_clustering.algorithms.fkm import fkm_client_update
    from flwr_clustering.algorithms.lloyd import (
        check_data,
        cluster_sums,
        nearest_labels_unchecked,
    )

    X, C = _blobs(n, d, k, seed)
    labels = nearest_labels_unchecked(X, C)
    items: list[tuple[str, Callable[[], Any], int]] = [
        ("fkm_client_update (total)", lambda: fkm_client_update(X, C), 1),
        ("check_data(X) (isfinite + contiguous copy check)", lambda: check_data(X), 1),
        ("X @ C.T (the floor: not called by the step)", lambda: X @ C.T, 0),
        ("nearest_labels_unchecked (C X^T expansion in row blocks + exact re-check)",
         lambda: nearest_labels_unchecked(X, C), 1),
        ("cluster_sums (bincount if d <= 8, else sparse one-hot @ X)",
         lambda: cluster_sums(X, labels, k), 1),
    ]
    with thread_limit("1"):
        return [
            {
                "item": name, "calls_per_step": calls,
                "seconds": time_call(fn, repeats)["median"], "n": n, "d": d, "k": k,
            }
            for name, fn, calls in items
        ]


def profile_client_step(
    n: int = 100_000, d: int = 64, k: int = 16, calls: int = 10, top: int = 12, seed: int = 0
) -> list[dict[str, Any]]:
    """Profile ``calls`` FKM client steps with cProfile; return the functions of largest own time.

    Parameters
    ----------
    n, d, k : int
        Data size, dimension, number of centroids.
    calls : int, default 10
        Profiled calls.
    top : int, default 12
        Rows returned.
    seed : int, default 0
        Data seed.

    Returns
    -------
    list of dict
        ``{"function", "ncalls", "tottime_s", "cumtime_s", "share"}`` sorted by own time;
        ``share`` is the fraction of the total profiled time.
    """
    from flwr_clustering.algorithms.fkm import fkm_client_update

    X, C = _blobs(n, d, k, seed)
    fkm_client_update(X, C)
    prof = cProfile.Profile()
    with thread_limit("1"):
        prof.enable()
        for _ in range(calls):
            fkm_client_update(X, C, privacy_threshold=2, local_iters=1)
        prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt or 1.0
    rows = []
    for (file, line, func), (_, ncalls, tottime, cumtime, _) in stats.stats.items():
        where = func if file == "~" else f"{Path(file).name}:{line}({func})"
        rows.append({
            "function": where, "ncalls": int(ncalls), "tottime_s": float(tottime),
            "cumtime_s": float(cumtime), "share": float(tottime / total),
        })
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:top]


def client_step_markdown(result: dict[str, Any]) -> str:
    """Render the ``client-step`` result as Markdown tables."""
    lines = [
        "# FKM client step vs scikit-learn",
        "",
        "`fkm_client_update(X, C, privacy_threshold=2, local_iters=1)` vs "
        "`KMeans(n_clusters=k, init=C, n_init=1, max_iter=1).fit(X)`; median of "
        f"{result['repeats']} calls (ms). Goal: ratio <= 1. Load average before/after: "
        f"{result['load_before']} / {result['load_after']}.",
        "",
        "| n | d | k | threads | ours (ms) | sklearn (ms) | ratio ours/sklearn | "
        "ratio of minima |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['n']} | {r['d']} | {r['k']} | {r['threads']} | {ms(r['ours_s'])} | "
            f"{ms(r['sklearn_s'])} | {r['ratio']:.2f} | {r['ratio_min']:.2f} |"
        )
    if result.get("breakdown"):
        b0 = result["breakdown"][0]
        lines += [
            "",
            f"## Breakdown (n={b0['n']}, d={b0['d']}, k={b0['k']}, one thread)",
            "",
            "| item | calls per client step | ms per call |",
            "|---|---|---|",
        ]
        for r in result["breakdown"]:
            lines.append(f"| {r['item']} | {r['calls_per_step']} | {ms(r['seconds'])} |")
    if result.get("profile"):
        lines += [
            "",
            f"## cProfile, {result['profile_calls']} client steps "
            f"(n={result['profile_n']}, d={result['profile_d']}), by own time",
            "",
            "| function | calls | own time (ms) | cumulative (ms) | share |",
            "|---|---|---|---|---|",
        ]
        for r in result["profile"]:
            lines.append(
                f"| `{r['function']}` | {r['ncalls']} | {ms(r['tottime_s'])} | "
                f"{ms(r['cumtime_s'])} | {r['share']:.0%} |"
            )
    return "\n".join(lines) + "\n"


def _cmd_client_step(args: argparse.Namespace) -> int:
    load_before = load_average()
    rows = bench_client_step(args.sizes, args.dims, args.k, args.repeats, args.threads, args.seed)
    n_big, d_big = max(args.sizes), max(args.dims)
    result: dict[str, Any] = {
        "benchmark": "client-step", "machine": machine_info(), "repeats": args.repeats,
        "rows": rows, "load_before": load_before,
    }
    if not args.no_profile:
        result["breakdown"] = client_step_breakdown(n_big, d_big, args.k, args.repeats, args.seed)
        result["profile"] = profile_client_step(n_big, d_big, args.k, seed=args.seed)
        result.update(profile_calls=10, profile_n=n_big, profile_d=d_big)
    result["load_after"] = load_average()
    md = client_step_markdown(result)
    paths = write_result(Path(args.out), "client_step", result, md)
    print(md)
    print(f"written: {paths}")
    return 0


# =========================================================================== server step
def bench_server_step(
    clients: Sequence[int] = (10, 100, 1000),
    k: int = 16,
    d: int = 2,
    repeats: int = 5,
    threads: Sequence[str] = ("default", "1"),
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Time the FKM server step on ``k`` local centroids per client.

    Parameters
    ----------
    clients : sequence of int
        Numbers of clients ``m``; the server clusters ``M = k m`` weighted points.
    k, d : int
        Centroids per client (and global), dimension.
    repeats : int, default 5
        Timed calls (median reported).
    threads : sequence of str
        As in :func:`bench_client_step`.
    seed : int, default 0
        Seed of the synthetic uploads and of the server generator.

    Returns
    -------
    list of dict
        ``{"clients", "points", "threads", "seconds", "min_s"}``.
    """
    from flwr_clustering.algorithms.fkm import fkm_server_aggregate
    from flwr_clustering.algorithms.local_centroids import LocalCentroids

    rows = []
    for m in clients:
        X, _ = _blobs(int(m) * k, d, k, seed)
        rng = np.random.default_rng(seed)
        counts = rng.integers(2, 12, size=len(X)).astype(np.int64)
        uploads = [
            LocalCentroids(X[i * k:(i + 1) * k], counts[i * k:(i + 1) * k],
                           np.arange(k, dtype=np.int64))
            for i in range(int(m))
        ]
        for thr in threads:
            with thread_limit(thr), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = time_call(
                    lambda u=uploads: fkm_server_aggregate(u, k, np.random.default_rng(seed)),
                    repeats,
                )
            rows.append({
                "clients": int(m), "points": len(X), "k": k, "d": d, "threads": thr,
                "seconds": t["median"], "min_s": t["min"], "max_s": t["max"],
            })
    return rows


def _cmd_server_step(args: argparse.Namespace) -> int:
    load_before = load_average()
    rows = bench_server_step(args.clients, args.k, args.d, args.repeats, args.threads, args.seed)
    result = {
        "benchmark": "server-step", "machine": machine_info(), "rows": rows,
        "load_before": load_before, "load_after": load_average(),
    }
    lines = [
        "# FKM server step (weighted k-means, n_init=10, on k local centroids per client)",
        "",
        f"Median of {args.repeats} calls. Load average before/after: "
        f"{result['load_before']} / {result['load_after']}.",
        "",
        "| clients | points | threads | median (ms) | min (ms) | max (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clients']} | {r['points']} | {r['threads']} | {ms(r['seconds'])} | "
            f"{ms(r['min_s'])} | {ms(r['max_s'])} |"
        )
    md = "\n".join(lines) + "\n"
    paths = write_result(Path(args.out), "server_step", result, md)
    print(md)
    print(f"written: {paths}")
    return 0


# ============================================================================ processes
def _median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get("ok") and r.get(key) is not None]
    return float(np.median(vals)) if vals else None


def rounds_table(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Combine runs into one row per client count: FKM vs echo.

    Parameters
    ----------
    runs : list of dict
        Outputs of :func:`run_one` (possibly several repeats).

    Returns
    -------
    list of dict
        Per client count: medians over the successful repeats of the round time (median of
        rounds >= 2), round 1, ServerApp and wall seconds, peak PSS, for ``fkm`` and
        ``echo``, and ``ratio = fkm / echo`` of the round times.
    """
    rows = []
    for clients in sorted({r["clients"] for r in runs}):
        row: dict[str, Any] = {"clients": clients}
        for alg in ("fkm", "echo"):
            sel = [r for r in runs if r["clients"] == clients and r["algorithm"] == alg]
            row[alg] = {
                "runs": len(sel), "ok": sum(bool(r.get("ok")) for r in sel),
                "round_s": _median_of(sel, "median_s"),
                "round_min_s": _median_of(sel, "min_s"),
                "round_max_s": _median_of(sel, "max_s"),
                "round1_s": _median_of(sel, "round1_s"),
                "serverapp_s": _median_of(sel, "serverapp_s"),
                "wall_s": _median_of(sel, "wall_s"),
                "peak_pss_mib": _median_of(sel, "peak_pss_mib"),
            }
        f, e = row["fkm"]["round_s"], row["echo"]["round_s"]
        row["ratio"] = f / e if f is not None and e else None
        rows.append(row)
    return rows


def rounds_markdown(result: dict[str, Any]) -> str:
    """Render the ``rounds`` result as a Markdown table."""

    def s(v: float | None, fmt: str = "{:.2f}") -> str:
        return "n/a" if v is None else fmt.format(v)

    p = result["params"]
    lines = [
        "# Round time: FedKMeans vs echo (Flower's floor), `flwr run` Ray simulation",
        "",
        f"blobs data, iid split, {p['samples_per_client']} points per client, d="
        f"{p['features']}, k={p['k']}, {p['rounds']} rounds (tol=-1), "
        f"client-resources-num-cpus={p['cpus_per_client']}, min-nodes = clients, "
        f"{p['repeats']} repeat(s), extra environment {p.get('extra_env') or 'none'}. "
        "Round time = median of rounds >= 2 from history.json; "
        "peak PSS = largest summed PSS of the SuperLink and all its descendants. "
        "Goal: FKM/echo <= 1.1.",
        "",
        "| clients | FKM round (s) | echo round (s) | ratio FKM/echo | FKM rounds min-max (s) | "
        "echo rounds min-max (s) | round 1 FKM / echo (s) | wall FKM / echo (s) | "
        "peak PSS FKM / echo (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["table"]:
        f, e = r["fkm"], r["echo"]
        lines.append(
            f"| {r['clients']} | {s(f['round_s'], '{:.3f}')} | {s(e['round_s'], '{:.3f}')} | "
            f"{s(r['ratio'])} | {s(f['round_min_s'], '{:.3f}')}-{s(f['round_max_s'], '{:.3f}')}"
            f" | {s(e['round_min_s'], '{:.3f}')}-{s(e['round_max_s'], '{:.3f}')} | "
            f"{s(f['round1_s'], '{:.1f}')} / {s(e['round1_s'], '{:.1f}')} | "
            f"{s(f['wall_s'], '{:.1f}')} / {s(e['wall_s'], '{:.1f}')} | "
            f"{s(f['peak_pss_mib'], '{:.0f}')} / {s(e['peak_pss_mib'], '{:.0f}')} |"
        )
    failed = [r for r in result["runs"] if not r.get("ok")]
    if failed:
        lines += ["", "Failed runs (excluded): " + ", ".join(
            f"{r['algorithm']}@{r['clients']} ({r.get('status')}, {r.get('error', '')})"
            for r in failed
        )]
    lines += ["", "Per run (any algorithm; a one-shot run's time is its round 1, Ray start-up "
              "included):", "",
              "| algorithm | clients | round seconds | ServerApp (s) | wall (s) | "
              "peak PSS (MiB) | load before / after |",
              "|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        secs = ", ".join(f"{x:.3f}" for x in r.get("round_seconds", []))
        lines.append(
            f"| {r['algorithm']} | {r['clients']} | {secs} | {s(r.get('serverapp_s'))} | "
            f"{s(r.get('wall_s'), '{:.1f}')} | {r['peak_pss_mib']:.0f} | "
            f"{r['load_before']} / {r['load_after']} |"
        )
    return "\n".join(lines) + "\n"


def run_rounds(
    clients: Sequence[int] = (10, 100, 1000),
    *,
    algorithms: Sequence[str] = ("fkm", "echo"),
    rounds: int = 5,
    k: int = 16,
    samples_per_client: int = 100,
    features: int = 2,
    cpus_per_client: int = 1,
    repeats: int = 1,
    out: Path = Path("bench-results"),
    app: Path | None = None,
    port: int = 39291,
    control_port: int | None = None,
    sample_interval: float = 0.5,
    timeout: float = 1800.0,
    extra_env: dict[str, str] | None = None,
    run_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the round-time benchmark on a private local SuperLink.

    Parameters
    ----------
    clients : sequence of int
        Numbers of virtual clients (``num-supernodes`` and ``min-nodes``).
    algorithms : sequence of str
        Run configs' ``algorithm``; interleaved within each client count and repeat.
    rounds : int, default 5
        ``max-rounds`` (``tol=-1``: always all of them).
    k, samples_per_client, features : int
        Centroids / blobs centers, points per client, dimension.
    cpus_per_client : int, default 1
        ``client-resources-num-cpus`` (1 gives two Ray actors on two cores).
    repeats : int, default 1
        Runs per (client count, algorithm).
    out : pathlib.Path
        Results directory (runs go to ``out/runs/``, Flower's home to ``out/flwr-home``).
    app : pathlib.Path, optional
        The Flower App; defaults to the repository this package lives in.
    port : int, default 39291
        The private SuperLink's HTTP port.
    control_port : int, optional
        Its Control API port; defaults to ``port + 2``.
    sample_interval : float, default 0.5
        Seconds between memory samples.
    timeout : float, default 1800
        Seconds per ``flwr run``.
    extra_env : dict, optional
        Extra environment of the SuperLink (hence of the ServerApp and the Ray actors),
        e.g. ``{"OMP_NUM_THREADS": "1"}`` to test the effect of thread pools.
    run_config : dict, optional
        Run-config keys added to every run (echo's too, so both send the same messages),
        e.g. ``{"network": "mlp"}`` for DeepFeCA on tabular rows.

    Returns
    -------
    dict
        ``{"params", "machine", "runs", "table"}``.
    """
    out = Path(out).resolve()
    app = Path(app).resolve() if app else Path(__file__).resolve().parents[2]
    if not (app / "pyproject.toml").exists():
        raise FileNotFoundError(f"{app} has no pyproject.toml; pass --app <Flower App dir>")
    control_port = port + 2 if control_port is None else control_port
    home = out / "flwr-home"
    env = {**flower_env(home, port, control_port), **dict(extra_env or {})}
    params = dict(
        extra_env=dict(extra_env or {}), run_config=dict(run_config or {}),
        clients=list(clients), algorithms=list(algorithms), rounds=rounds, k=k,
        samples_per_client=samples_per_client, features=features,
        cpus_per_client=cpus_per_client, repeats=repeats, app=str(app), port=port,
        control_port=control_port, sample_interval=sample_interval,
    )
    runs: list[dict[str, Any]] = []
    superlink = start_superlink(home, port, control_port, env)
    params["superlink_pid"] = superlink.pid
    print(f"SuperLink pid {superlink.pid} on 127.0.0.1:{port}", flush=True)
    try:
        for n in clients:
            for rep in range(repeats):
                for alg in algorithms:
                    run_dir = out / "runs" / f"{alg}-{n}-r{rep}"
                    print(f"[{time.strftime('%H:%M:%S')}] {alg} with {n} clients, repeat {rep}",
                          flush=True)
                    rec = run_one(
                        app=app, algorithm=alg, clients=int(n), rounds=rounds, k=k,
                        samples_per_client=samples_per_client, features=features,
                        cpus_per_client=cpus_per_client, out_dir=run_dir, env=env,
                        superlink_pid=superlink.pid, sample_interval=sample_interval,
                        timeout=timeout, extra_run_config=run_config,
                    )
                    rec["repeat"] = rep
                    runs.append(rec)
                    print(
                        f"    ok={rec['ok']} wall={rec['wall_s']:.1f}s rounds="
                        f"{[round(x, 3) for x in rec.get('round_seconds', [])]} "
                        f"peak PSS={rec['peak_pss_mib']:.0f} MiB status={rec.get('status')}",
                        flush=True,
                    )
                    result = {
                        "benchmark": "rounds", "params": params, "machine": machine_info(),
                        "runs": runs, "table": rounds_table(runs),
                    }
                    write_result(out, "rounds", result, rounds_markdown(result))
    finally:
        stopped = stop_tree(superlink.pid)
        print(f"stopped SuperLink tree: {stopped}", flush=True)
    result = {
        "benchmark": "rounds", "params": params, "machine": machine_info(), "runs": runs,
        "table": rounds_table(runs),
    }
    return result


def _parse_value(text: str) -> Any:
    """A ``--run-config`` value: a TOML scalar (``1``, ``0.5``, ``true``) or a bare string."""
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _cmd_rounds(args: argparse.Namespace) -> int:
    result = run_rounds(
        args.clients, algorithms=args.algorithms, rounds=args.rounds, k=args.k,
        samples_per_client=args.samples_per_client, features=args.features,
        cpus_per_client=args.cpus_per_client, repeats=args.repeats, out=Path(args.out),
        app=args.app, port=args.port, control_port=args.control_port,
        sample_interval=args.sample_interval, timeout=args.timeout,
        extra_env=dict(item.split("=", 1) for item in args.env),
        run_config={key: _parse_value(value) for key, value in
                    (item.split("=", 1) for item in args.run_config)},
    )
    md = rounds_markdown(result)
    paths = write_result(Path(args.out), "rounds", result, md)
    print(md)
    print(f"written: {paths}")
    return 0 if all(r.get("ok") for r in result["runs"]) else 1


# ============================================================================ in-process
#: Functions whose cumulative time ``inprocess`` reports: (label, file suffix, function).
INPROCESS_ITEMS = (
    ("ClientApp handler, all clients (adapter + client)", "clients/handlers.py", "_handle"),
    ("client: FedKMeansClient.fit", "clients/fkm.py", "fit"),
    ("client: EchoClient.fit", "benchmarks/echo.py", "fit"),
    ("client: local_evaluation_stats (the 'evaluate' stats)", "metrics.py",
     "local_evaluation_stats"),
    ("client+server: ari_from_contingency", "metrics.py", "ari_from_contingency"),
    ("client: fkm_client_update", "algorithms/fkm.py", "fkm_client_update"),
    ("server: aggregate_train (all server work)", "strategies/base.py", "aggregate_train"),
    ("server: collect (decode + validate replies)", "strategies/base.py", "collect"),
    ("server: aggregate_evaluation_stats", "metrics.py", "aggregate_evaluation_stats"),
    ("server: fkm_server_aggregate (weighted k-means)", "algorithms/fkm.py",
     "fkm_server_aggregate"),
    ("server: matched_shift", "algorithms/lloyd.py", "matched_shift"),
)


def bench_inprocess(
    clients: Sequence[int] = (10, 100, 1000),
    algorithms: Sequence[str] = ("fkm", "echo"),
    rounds: int = 5,
    k: int = 16,
    samples_per_client: int = 100,
    features: int = 2,
    threads: str = "default",
) -> list[dict[str, Any]]:
    """Run FKM and echo on :class:`~flwr_clustering.testing.InProcessGrid` (no Flower runtime).

    The same run config as ``rounds``, but every client runs synchronously in this process,
    so the per-round time is the pure compute of our code (client steps of all clients in
    sequence, plus the server step). Each case runs twice: once for the round times, once
    under cProfile (profiling only rounds >= 2) to say where the time goes.

    Parameters
    ----------
    clients, algorithms, rounds, k, samples_per_client, features
        As in :func:`run_rounds`.
    threads : str, default "default"
        Thread-pool limit (see :func:`bench_client_step`).

    Returns
    -------
    list of dict
        Per (clients, algorithm): :func:`summarize_history` of the un-profiled run and
        ``components``: ``{label: cumulative seconds per round}`` of :data:`INPROCESS_ITEMS`
        over rounds >= 2 of the profiled run.
    """
    from flwr_clustering.app.client_app import app as client_app
    from flwr_clustering.app.config import build_strategy, merged_config
    from flwr_clustering.testing import InProcessGrid

    rows = []
    for n in clients:
        for alg in algorithms:
            rc = {
                "algorithm": run_config_algorithm(alg), "dataset": "blobs", "partitioner": "iid",
                "n-samples": samples_per_client * int(n), "n-features": features,
                "centers": k, "k": k, "max-rounds": rounds, "tol": -1.0, "min-nodes": int(n),
            }
            cfg = merged_config(rc)
            with thread_limit(threads), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                strategy = build_strategy(cfg)
                strategy.start(grid=InProcessGrid(client_app, int(n), run_config=rc))
                # One-shot runs have only round 1 (no Ray start-up in process): keep it.
                row = {"clients": int(n), "algorithm": alg, "threads": threads,
                       **summarize_history(strategy.history, skip=0 if rounds == 1 else 1)}
                if rounds == 1:
                    row["components"], row["profiled_total_s_per_round"] = {}, None
                    rows.append(row)
                    continue
                prof = cProfile.Profile()

                def hook(server_round, arrays, prof=prof):
                    if server_round == 1:
                        prof.enable()
                    elif server_round == rounds:
                        prof.disable()

                strategy = build_strategy(cfg)
                strategy.start(
                    grid=InProcessGrid(client_app, int(n), run_config=rc), evaluate_fn=hook
                )
            stats = pstats.Stats(prof, stream=io.StringIO())
            profiled_rounds = max(1, rounds - 1)
            comp = {}
            for label, suffix, func in INPROCESS_ITEMS:
                total = sum(
                    v[3] for (file, _, name), v in stats.stats.items()
                    if name == func and file.replace(os.sep, "/").endswith(suffix)
                )
                if total:
                    comp[label] = total / profiled_rounds
            row["components"] = comp
            row["profiled_total_s_per_round"] = (stats.total_tt or 0.0) / profiled_rounds
            rows.append(row)
    return rows


def _cmd_inprocess(args: argparse.Namespace) -> int:
    load_before = load_average()
    rows = bench_inprocess(
        args.clients, args.algorithms, args.rounds, args.k, args.samples_per_client,
        args.features, args.threads,
    )
    result = {
        "benchmark": "inprocess", "machine": machine_info(), "rows": rows,
        "load_before": load_before, "load_after": load_average(),
    }
    lines = [
        "# FKM vs echo without the Flower runtime (InProcessGrid, clients run in sequence)",
        "",
        f"Same run config as `rounds`; {args.rounds} rounds, threads={args.threads}. "
        "Round time = median of rounds >= 2 (of round 1 for one-round runs; un-profiled "
        "run). Components (runs of 2 rounds or more): cumulative "
        "seconds per round under cProfile (which inflates call-heavy code). Load average "
        f"before/after: {result['load_before']} / {result['load_after']}.",
        "",
        "| clients | algorithm | round (s) | rounds min-max (s) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clients']} | {r['algorithm']} | {r['median_s']:.4f} | "
            f"{r['min_s']:.4f}-{r['max_s']:.4f} |"
        )
    lines += ["", "| clients | algorithm | component | s per round (profiled) |",
              "|---|---|---|---|"]
    for r in rows:
        for label, sec in r["components"].items():
            lines.append(f"| {r['clients']} | {r['algorithm']} | {label} | {sec:.4f} |")
    md = "\n".join(lines) + "\n"
    paths = write_result(Path(args.out), "inprocess", result, md)
    print(md)
    print(f"written: {paths}")
    return 0


# ================================================================================== CLI
def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``python -m simulations bench``."""
    parser = argparse.ArgumentParser(
        prog="python -m simulations bench",
        description="Benchmarks: FKM client/server steps and round time vs Flower's floor.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    cs = sub.add_parser("client-step", help="FKM client step vs one sklearn Lloyd iteration")
    cs.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    cs.add_argument("--dims", type=int, nargs="+", default=[2, 64])
    cs.add_argument("--k", type=int, default=16)
    cs.add_argument("--repeats", type=int, default=7)
    cs.add_argument("--threads", nargs="+", default=["default", "1"],
                    help="'default' and/or thread counts for threadpoolctl")
    cs.add_argument("--seed", type=int, default=0)
    cs.add_argument("--no-profile", action="store_true",
                    help="skip the breakdown and cProfile of the largest size")
    cs.add_argument("--out", default="bench-results")
    cs.set_defaults(func=_cmd_client_step)

    ss = sub.add_parser("server-step", help="FKM server step (weighted k-means)")
    ss.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    ss.add_argument("--k", type=int, default=16)
    ss.add_argument("--d", type=int, default=2)
    ss.add_argument("--repeats", type=int, default=5)
    ss.add_argument("--threads", nargs="+", default=["default", "1"])
    ss.add_argument("--seed", type=int, default=0)
    ss.add_argument("--out", default="bench-results")
    ss.set_defaults(func=_cmd_server_step)

    rd = sub.add_parser("rounds", help="FKM vs echo round time in `flwr run` simulations")
    rd.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    rd.add_argument("--algorithms", nargs="+", default=["fkm", "echo"])
    rd.add_argument("--rounds", type=int, default=5)
    rd.add_argument("--k", type=int, default=16)
    rd.add_argument("--samples-per-client", type=int, default=100)
    rd.add_argument("--features", type=int, default=2)
    rd.add_argument("--cpus-per-client", type=int, default=1)
    rd.add_argument("--repeats", type=int, default=1)
    rd.add_argument("--app", type=Path, default=None, help="Flower App dir (default: repo root)")
    rd.add_argument("--port", type=int, default=39291,
                    help="HTTP port of the benchmark's own SuperLink (not the shared 39091)")
    rd.add_argument("--control-port", type=int, default=None, help="default: --port + 2")
    rd.add_argument("--sample-interval", type=float, default=0.5)
    rd.add_argument("--timeout", type=float, default=1800.0)
    rd.add_argument("--run-config", nargs="*", default=[], metavar="KEY=VALUE",
                    help="run-config keys for every run (a TOML scalar or a bare string)")
    rd.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra environment of the SuperLink, ServerApp and Ray actors")
    rd.add_argument("--out", default="bench-results")
    rd.set_defaults(func=_cmd_rounds)

    ip = sub.add_parser("inprocess", help="FKM vs echo compute without the Flower runtime")
    ip.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    ip.add_argument("--algorithms", nargs="+", default=["fkm", "echo"])
    ip.add_argument("--rounds", type=int, default=5)
    ip.add_argument("--k", type=int, default=16)
    ip.add_argument("--samples-per-client", type=int, default=100)
    ip.add_argument("--features", type=int, default=2)
    ip.add_argument("--threads", default="default", help="'default' or a thread count")
    ip.add_argument("--out", default="bench-results")
    ip.set_defaults(func=_cmd_inprocess)
    # the scale benchmarks, each in its own module
    from . import large_client, perf, protocols, supernodes

    large_client.add_parser(sub)
    protocols.add_parser(sub)
    supernodes.add_parser(sub)
    perf.add_parsers(sub)
    from . import exchanges, raw_data, site_message

    exchanges.add_parser(sub)
    raw_data.add_parser(sub)
    site_message.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a benchmark subcommand; return the exit code.

    Parameters
    ----------
    argv : list of str, optional
        Arguments after ``bench`` (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success; 1 if a ``rounds`` run failed.
    """
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
