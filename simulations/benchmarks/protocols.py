"""Benchmarks of the protocols that should scale (issue 19, item 4): DGC's relay and KDC's sites.

Two measurements, written to ``<out>/protocols.json`` and ``<out>/protocols.md``:

DGC's relay (:func:`bench_dgc_relay`)
    DGC-rho (Armacki et al.) on a connected Erdős–Rényi graph ``G(m, p)``
    (:func:`~flwr_clustering.algorithms.dgc.erdos_renyi_graph`, redrawn until connected: the
    project's generator, what ``graph='erdos-renyi'`` with ``er-p = p`` gives the App), every
    node holding ``samples_per_node`` rows of an ``iid`` split of ``blobs`` data:

    (a) the pure algorithm core, all nodes in sequence: one synchronous step
        :func:`~flwr_clustering.algorithms.dgc.dgc_step` (clusters fixed), and one whole
        iteration of :func:`~flwr_clustering.algorithms.dgc.run_dgc` (assignment, the relaxed
        cost and consensus bookkeeping, the step), against one scikit-learn Lloyd iteration
        ``KMeans(k, init=C, n_init=1, max_iter=1).fit`` on the pooled rows;
    (b) one step through the Flower strategy :class:`~flwr_clustering.strategies.dgc.DGC`
        and the App's ClientApp on :class:`~flwr_clustering.testing.InProcessGrid` (no Ray,
        nodes one after the other in this process): the median ``"seconds"`` of the step
        rounds (round 1, the init with imports and data loading, is left out), with a
        cProfile attribution of the step rounds;
    (c) the relay's communication per step, **counted** on the grid (:class:`CountingGrid`
        tallies every delivered message and the array elements it carries, by round and
        direction), against a peer-to-peer exchange over the same graph: ``2 |E|`` messages
        of ``k d`` floats per step (every node sends its centres to each neighbour), from the
        graph's edge count, with ``|E|``, the average and the largest degree, and the load of
        the busiest party (the relay server against the highest-degree peer).

    Optionally (``ray=True``, ``--ray``) the same run as a ``flwr run`` Ray simulation on a
    private SuperLink (:func:`run_dgc_ray`, the ``rounds`` machinery of
    :mod:`~simulations.benchmarks.bench` with the graph keys added by
    :func:`dgc_run_config`).

KDC's sites (:func:`bench_kdc_sites`)
    Claim (b) of Zhang et al. (spec 004, §1 and §7): the largest site's time is below the
    centralized run's. ``blobs`` data (``total_rows`` rows, ``features`` features, ``k``
    centres) split IID (a random permutation cut evenly,
    :func:`simulations.kdc.split_sites` ``"even"``) over ``r`` sites, for every ``r`` of
    ``sites``. The protocol runs as :func:`simulations.kdc.timed_kdc` times it: every site's
    own work (round 0: size, minimum and maximum; round 1: its uniform sample; round 2:
    feature map and argmax of all its rows), timed per site, one site after the other, and
    the coordinator's (global range, allocation, Isolation Kernel on ``B``, κBCC, mean maps).
    The centralized baseline is Framework 1 (spec §3.3) on all rows pooled with the same
    ``B``, scaling and seed (:func:`~flwr_clustering.algorithms.kdc.kdc_central`), so its
    labels must equal the sites' labels concatenated (property (a), checked); its own
    min/max pass and sampling of ``B`` from the pooled rows are timed apart. ``psi`` is fixed,
    ``tau`` chosen on ``B`` without labels
    (:func:`~flwr_clustering.algorithms.kdc.select_parameters`, not counted in any time), as
    the ``kdc-runtime`` reproduction does.

Usage::

    python -c "from simulations.benchmarks import protocols; protocols.main(['--out', 'DIR'])"
    # once registered in bench.py:
    python -m simulations bench protocols --nodes 100 --sites 10 100 --out bench/protocols

Timings on a shared machine are noisy: the result records the load average before and after
every part, and the thread pools are limited (``--threads``, default 1: what a Ray actor with
``num_cpus=1`` gets; every KDC site would run on its own machine).
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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flwr_clustering.testing import InProcessGrid

from . import common
from .common import (
    load_average,
    machine_info,
    ms,
    summarize_history,
    thread_limit,
    time_call,
    write_result,
)

__all__ = [
    "CountingGrid",
    "DGC_PROFILE_ITEMS",
    "add_parser",
    "bench_dgc_relay",
    "bench_kdc_sites",
    "dgc_run_config",
    "main",
    "protocols_markdown",
    "run_dgc_ray",
]


# ================================================================================ the grid
class CountingGrid(InProcessGrid):
    """An :class:`~flwr_clustering.testing.InProcessGrid` that counts what it delivers.

    Every message sent to a node and every reply coming back is tallied under
    ``(round, message type, direction)``, the round being the message's ``group_id`` (the
    strategy's round) and the direction ``"down"`` (server to node) or ``"up"`` (reply):
    the number of messages, of array elements in their ``ArrayRecord`` objects (floats here) and
    of raw array bytes (elements times item size; the config and metric scalars are not
    counted).

    Parameters
    ----------
    *args, **kwargs
        As :class:`~flwr_clustering.testing.InProcessGrid`.

    Attributes
    ----------
    tally : dict
        ``{(round, type, direction): {"messages", "floats", "bytes"}}``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tally: dict[tuple[int, str, str], dict[str, int]] = {}

    def _count(self, msg: Any, direction: str) -> None:
        try:
            rnd = int(msg.metadata.group_id)
        except (TypeError, ValueError):
            rnd = -1
        key = (rnd, str(msg.metadata.message_type), direction)
        entry = self.tally.setdefault(key, {"messages": 0, "floats": 0, "bytes": 0})
        entry["messages"] += 1
        if msg.has_content():
            for record in msg.content.array_records.values():
                for arr in record.values():
                    size = int(np.prod(arr.shape, dtype=np.int64))
                    entry["floats"] += size
                    entry["bytes"] += size * np.dtype(arr.dtype).itemsize

    def send_and_receive(self, messages: Iterable[Any], *, timeout: float | None = None
                         ) -> list[Any]:
        """Deliver the messages (:class:`InProcessGrid`), counting them and the replies."""
        messages = list(messages)
        replies = super().send_and_receive(messages, timeout=timeout)
        for msg in messages:
            self._count(msg, "down")
        for reply in replies:
            self._count(reply, "up")
        return replies

    def per_round(self, message_type: str = "train") -> dict[int, dict[str, int]]:
        """Per round: ``messages-down/-up``, ``floats-down/-up``, ``bytes-down/-up``.

        Parameters
        ----------
        message_type : str, default "train"
            The Flower message type counted.

        Returns
        -------
        dict
            ``{round: {...}}``, rounds in order.
        """
        out: dict[int, dict[str, int]] = {}
        for (rnd, kind, direction), entry in sorted(self.tally.items()):
            if kind != message_type:
                continue
            row = out.setdefault(rnd, {})
            for key, value in entry.items():
                row[f"{key}-{direction}"] = row.get(f"{key}-{direction}", 0) + value
        return out


# ===================================================================================== DGC
#: Functions whose cumulative time the DGC strategy profile reports: (label, file suffix,
#: function), over the step rounds only.
DGC_PROFILE_ITEMS = (
    ("grid: InProcessGrid.send_and_receive (all node work + copies)", "flwr_clustering/testing.py",
     "send_and_receive"),
    ("grid: copy.deepcopy of every delivered message", "copy.py", "deepcopy"),
    ("ClientApp handler, all nodes (adapter + client)", "clients/handlers.py", "_handle"),
    ("client: client_fn (cached partition, client object)", "app/client_app.py", "client_fn"),
    ("client: DGCClient.fit", "clients/dgc.py", "fit"),
    ("client: node_update (the algorithm's step)", "algorithms/dgc.py", "node_update"),
    ("server: DGC.configure_train (neighbour sums, per-node messages)", "strategies/dgc.py",
     "configure_train"),
    ("server: aggregate_train (decode, validate, store)", "strategies/base.py",
     "aggregate_train"),
    ("server: wait_for_nodes", "strategies/base.py", "wait_for_nodes"),
)


def _dgc_run_config(nodes: int, edge_probability: float, iterations: int, inner_steps: int,
                    k: int, samples_per_node: int, features: int, seed: int) -> dict[str, Any]:
    return {
        "algorithm": "dgc", "dataset": "blobs", "partitioner": "iid",
        "n-samples": samples_per_node * nodes, "n-features": features, "centers": k, "k": k,
        "min-nodes": nodes, "graph": "erdos-renyi", "er-p": float(edge_probability),
        "iterations": iterations, "inner-steps": inner_steps, "seed": seed,
        # the relay against the pure core on the same rows (the App scales by default)
        "scaling": "none",
    }


def _profile_components(prof: cProfile.Profile, items, rounds: int) -> dict[str, float]:
    stats = pstats.Stats(prof, stream=io.StringIO())
    comp = {}
    for label, suffix, func in items:
        total = sum(
            v[3] for (file, _, name), v in stats.stats.items()
            if name == func and file.replace(os.sep, "/").endswith(suffix)
        )
        if total:
            comp[label] = total / max(1, rounds)
    return comp


def bench_dgc_relay(
    nodes: int = 100,
    edge_probability: float = 0.3,
    *,
    iterations: int = 10,
    inner_steps: int = 1,
    k: int = 16,
    samples_per_node: int = 100,
    features: int = 2,
    seed: int = 0,
    repeats: int = 7,
    threads: str = "1",
    profile: bool = True,
) -> dict[str, Any]:
    """Time DGC's step (core and strategy) and count the relay's messages on an ER graph.

    Parameters
    ----------
    nodes : int, default 100
        Graph nodes ``m`` (one Flower node each).
    edge_probability : float, default 0.3
        ``p`` of ``G(m, p)`` (the App's default ``er-p``), redrawn until connected with
        ``default_rng(seed)`` (:func:`~flwr_clustering.algorithms.dgc.build_graph`).
    iterations : int, default 10
        ``T`` of the strategy run (``1 + T S`` rounds) and of the timed :func:`run_dgc`.
    inner_steps : int, default 1
        ``S``: with ``S > 1`` the later inner steps also carry the anchor.
    k : int, default 16
        Centres per node (and ``blobs`` centres).
    samples_per_node : int, default 100
        Rows per node (``n-samples = samples_per_node x nodes``, ``iid`` split).
    features : int, default 2
        ``d``.
    seed : int, default 0
        Run-config ``seed``: the data, the split, the graph and the nodes' initial centres.
    repeats : int, default 7
        Timed calls of each core measurement (median reported).
    threads : str, default "1"
        Thread-pool limit of every DGC measurement (``"default"``: untouched).
    profile : bool, default True
        Also run the strategy once under cProfile (step rounds only) for the attribution.

    Returns
    -------
    dict
        ``graph`` (``|E|``, degrees), ``core`` (seconds of a step, of an iteration, of the
        Lloyd iteration, ratios), ``strategy``
        (:func:`~simulations.benchmarks.common.summarize_history` of the step rounds,
        components), ``communication`` (counted per step, the history's
        stated numbers, the peer-to-peer equivalent, the busiest party) and
        ``core_equals_strategy`` (the relay's final centres equal :func:`run_dgc`'s, bit for
        bit).
    """
    from sklearn.cluster import KMeans

    from flwr_clustering.algorithms.dgc import (
        assign,
        build_graph,
        dgc_step,
        initial_centres,
        resolve_rho,
        run_dgc,
        step_size,
    )
    from flwr_clustering.app.client_app import app as client_app
    from flwr_clustering.app.config import build_strategy, dataset_kwargs, merged_config
    from flwr_clustering.data.registry import load_partition

    m = int(nodes)
    rc = _dgc_run_config(m, edge_probability, iterations, inner_steps, k, samples_per_node,
                         features, seed)
    cfg = merged_config(rc)
    load_before = load_average()
    data = [load_partition(i, m, **dataset_kwargs(cfg))[0] for i in range(m)]
    A = build_graph("erdos-renyi", m, p=float(edge_probability), seed=int(cfg["seed"]))
    edges = int(np.count_nonzero(A)) // 2
    deg = A.sum(axis=1)
    graph = {
        "generator": "erdos_renyi_graph (G(m, p) redrawn until connected)",
        "nodes": m, "edge_probability": float(edge_probability), "seed": int(cfg["seed"]),
        "edges": edges, "average_degree": float(deg.mean()), "min_degree": int(deg.min()),
        "max_degree": int(deg.max()),
        "connectivity_threshold_ln_m_over_m": float(np.log(m) / m) if m > 1 else None,
    }
    loss = str(cfg["loss"])
    # the App's default rho=0 adapts to the graph and the largest node, as the strategy does
    rho = resolve_rho(float(cfg["rho"]), A, loss, max(len(X) for X in data))
    pooled = np.vstack(data)
    with thread_limit(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        init = initial_centres(data, k, seed=int(cfg["seed"]), scheme=str(cfg["node-init"]),
                               privacy_threshold=int(cfg["privacy-threshold"]))
        alpha = step_size(A, loss, rho, max(len(X) for X in data))
        labels = [assign(X, init[i]) for i, X in enumerate(data)]
        step = time_call(lambda: dgc_step(init, A, data, labels, alpha, rho, loss), repeats)
        whole = time_call(
            lambda: run_dgc(data, A, init, loss=loss, rho=rho, iterations=iterations,
                            inner_steps=inner_steps, keep_history=False),
            max(1, repeats // 2),
        )
        C0 = init.mean(axis=0)
        lloyd = time_call(
            lambda: KMeans(n_clusters=k, init=C0, n_init=1, max_iter=1).fit(pooled), repeats
        )
        ref = run_dgc(data, A, init, loss=loss, rho=rho, iterations=iterations,
                      inner_steps=inner_steps, keep_history=False)
    per_iteration = whole["median"] / iterations
    core = {
        "step_s": step["median"], "step_min_s": step["min"],
        "step_per_node_s": step["median"] / m,
        "iteration_s": per_iteration, "iteration_steps": inner_steps,
        "lloyd_sklearn_s": lloyd["median"], "lloyd_sklearn_min_s": lloyd["min"],
        "pooled_rows": len(pooled),
        "ratio_step_to_lloyd": step["median"] / lloyd["median"],
        "ratio_iteration_to_lloyd": per_iteration / lloyd["median"],
        "alpha": float(alpha),
    }

    # (b) + (c): the strategy on the counting grid
    with thread_limit(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid = CountingGrid(client_app, m, run_config=rc)
        strategy = build_strategy(cfg)
        strategy.start(grid=grid)
    history = strategy.history
    steps = summarize_history(history, skip=1)
    equal = bool(np.array_equal(strategy.node_centres, ref.centres)
                 and np.array_equal(strategy.adjacency, A))
    counted = grid.per_round("train")
    kd = k * features
    step_rounds = [h["round"] for h in history if h["round"] >= 2]
    per_step = []
    for h in history:
        rnd = h["round"]
        if rnd < 2:
            continue
        c = counted.get(rnd, {})
        first = (rnd - 2) % inner_steps == 0
        per_step.append({
            "round": rnd, "first_inner_step": first,
            "messages_down": c.get("messages-down", 0), "messages_up": c.get("messages-up", 0),
            "floats_down": c.get("floats-down", 0), "floats_up": c.get("floats-up", 0),
            "bytes_down": c.get("bytes-down", 0), "bytes_up": c.get("bytes-up", 0),
            "stated_messages": h.get("messages"), "stated_floats_down": h.get("floats-down"),
            "stated_floats_up": h.get("floats-up"),
            "stated_p2p_messages": h.get("p2p-messages"),
            "stated_p2p_floats": h.get("p2p-floats"),
        })
    msgs = [r["messages_down"] + r["messages_up"] for r in per_step]
    floats = [r["floats_down"] + r["floats_up"] for r in per_step]
    init_round = counted.get(1, {})
    evaluate = grid.per_round("evaluate")
    communication = {
        "k": k, "d": features, "kd": kd, "steps": len(per_step),
        "relay_messages_per_step": sorted(set(msgs)),
        "relay_floats_per_step": sorted(set(floats)),
        "relay_floats_down_per_step": sorted({r["floats_down"] for r in per_step}),
        "relay_floats_up_per_step": sorted({r["floats_up"] for r in per_step}),
        "relay_floats_per_step_mean": float(np.mean(floats)) if floats else None,
        "relay_messages_expected_2m": 2 * m,
        "p2p_messages_per_step": 2 * edges,
        "p2p_floats_per_step": 2 * edges * kd,
        "ratio_p2p_to_relay_messages": (2 * edges) / np.mean(msgs) if msgs else None,
        "ratio_p2p_to_relay_floats": (2 * edges * kd) / np.mean(floats) if floats else None,
        # the busiest party of a step: the relay server sends and receives everything; a
        # peer sends its centres to, and receives from, each of its neighbours
        "busiest_relay_server_messages": max(msgs) if msgs else None,
        "busiest_relay_server_floats": max(floats) if floats else None,
        "busiest_relay_node_floats": max(floats) // m if floats else None,
        "busiest_p2p_node_messages": 2 * int(deg.max()),
        "busiest_p2p_node_floats": 2 * int(deg.max()) * kd,
        "init_round": {key.replace("-", "_"): v for key, v in init_round.items()},
        "final_evaluate": {key.replace("-", "_"): v for rnd, row in evaluate.items()
                           for key, v in row.items()},
        "per_step": per_step,
    }
    result = {
        "params": dict(nodes=m, edge_probability=float(edge_probability),
                       iterations=iterations, inner_steps=inner_steps, k=k,
                       samples_per_node=samples_per_node, features=features, seed=seed,
                       repeats=repeats, threads=threads, rho=rho, loss=loss,
                       node_init=str(cfg["node-init"])),
        "graph": graph, "core": core,
        "strategy": {**steps, "step_rounds": step_rounds,
                     "step_per_node_s": (steps["median_s"] or 0.0) / m,
                     "ratio_to_core_step": ((steps["median_s"] or 0.0) / step["median"])},
        "communication": communication, "core_equals_strategy": equal,
    }
    if profile and iterations * inner_steps >= 3:
        last = 1 + iterations * inner_steps
        prof = cProfile.Profile()

        def hook(server_round, arrays, prof=prof):
            # rounds 2 .. last-1: the step rounds before the final evaluation
            if server_round == 1:
                prof.enable()
            elif server_round == last - 1:
                prof.disable()

        with thread_limit(threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_strategy(cfg).start(grid=InProcessGrid(client_app, m, run_config=rc),
                                      evaluate_fn=hook)
        profiled = last - 2
        stats = pstats.Stats(prof, stream=io.StringIO())
        result["strategy"]["components"] = _profile_components(prof, DGC_PROFILE_ITEMS,
                                                               profiled)
        result["strategy"]["profiled_rounds"] = profiled
        result["strategy"]["profiled_total_s_per_step"] = (stats.total_tt or 0.0) / profiled
    result["load_before"], result["load_after"] = load_before, load_average()
    return result


# ------------------------------------------------------------------------------ Ray run
def dgc_run_config(edge_probability: float, seed: int = 0) -> dict[str, Any]:
    """The run-config keys of a DGC run on an Erdős–Rényi graph (``graph``, ``er-p``, ``seed``)."""
    return {"graph": "erdos-renyi", "er-p": float(edge_probability), "seed": int(seed)}


def run_dgc_ray(
    nodes: int = 100,
    edge_probability: float = 0.3,
    *,
    iterations: int = 10,
    k: int = 16,
    samples_per_node: int = 100,
    features: int = 2,
    seed: int = 0,
    out: Path = Path("bench-results"),
    port: int = 39391,
    cpus_per_client: int = 1,
    timeout: float = 1800.0,
) -> dict[str, Any]:
    """The same DGC run as a ``flwr run`` Ray simulation on a private SuperLink.

    Starts a SuperLink on ``port`` (:func:`~simulations.benchmarks.common.start_superlink`),
    runs :func:`~simulations.benchmarks.common.run_one` with the keys of
    :func:`dgc_run_config` added to its run config, and stops the SuperLink's tree by PID.

    Parameters
    ----------
    nodes, edge_probability, iterations, k, samples_per_node, features, seed
        As :func:`bench_dgc_relay` (``inner-steps`` 1: ``1 + iterations`` rounds).
    out : pathlib.Path
        Results directory (the run goes to ``out/runs/dgc-ray-<nodes>-p<p>``).
    port : int, default 39391
        HTTP port of the private SuperLink (Control API ``port + 2``).
    cpus_per_client : int, default 1
        ``client-resources-num-cpus``.
    timeout : float, default 1800
        Seconds for ``flwr run``.

    Returns
    -------
    dict
        :func:`~simulations.benchmarks.common.run_one`'s record (round seconds, wall time,
        peak PSS, status, ``ok``).
    """
    out = Path(out).resolve()
    app = Path(__file__).resolve().parents[2]
    home = out / "flwr-home"
    env = common.flower_env(home, port, port + 2)
    rounds = 1 + int(iterations)
    run_dir = out / "runs" / f"dgc-ray-{nodes}-p{edge_probability:g}"
    superlink = common.start_superlink(home, port, port + 2, env)
    print(f"SuperLink pid {superlink.pid} on 127.0.0.1:{port}", flush=True)
    try:
        rec = common.run_one(
            app=app, algorithm="dgc", clients=int(nodes), rounds=rounds, k=k,
            samples_per_client=samples_per_node, features=features,
            cpus_per_client=cpus_per_client, out_dir=run_dir,
            env=env, superlink_pid=superlink.pid, sample_interval=0.5, timeout=timeout,
            extra_run_config=dgc_run_config(edge_probability, seed),
        )
    finally:
        stopped = common.stop_tree(superlink.pid)
        print(f"stopped SuperLink tree: {stopped}", flush=True)
    rec["edge_probability"] = float(edge_probability)
    return rec


# ===================================================================================== KDC
def _kdc_warm_up(sites: Sequence[np.ndarray], k: int, psi: int, t: int, tau: float,
                 seed: int) -> None:
    """Run every timed KDC code path once on a few rows, untimed (imports, first calls)."""
    from simulations.kdc import timed_kdc

    rows = [X[: min(len(X), 500)] for X in sites[:2]]
    try:
        timed_kdc(rows, k, s=min(400, sum(len(X) for X in rows)), psi=psi, tau=tau, t=t,
                  seed=seed)
    except ValueError:  # too few κBCC components on the tiny sample: the paths still ran
        pass


def _summary(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    return {"max": float(v.max()), "median": float(np.median(v)), "min": float(v.min()),
            "sum": float(v.sum())}


def bench_kdc_sites(
    sites: Sequence[int] = (10, 100),
    total_rows: int = 1_000_000,
    *,
    k: int = 4,
    features: int = 4,
    sample_size: int = 10_000,
    psi: int = 16,
    t: int = 100,
    tau: float | None = None,
    seed: int = 0,
    repeats: int = 1,
    threads: str = "1",
) -> dict[str, Any]:
    """Time every KDC site's work, the coordinator, and centralized KDC on the pooled rows.

    Parameters
    ----------
    sites : sequence of int, default (10, 100)
        Numbers of sites ``r``.
    total_rows : int, default 1_000_000
        Rows in all (``blobs``), split IID and evenly over the sites.
    k : int, default 4
        Clusters (``blobs`` centres).
    features : int, default 4
        ``d``.
    sample_size : int, default 10000
        ``s`` (capped at ``total_rows``), the paper's ``min(n, 10000)``.
    psi, t : int
        Isolation Kernel cells per partitioning and partitionings.
    tau : float, optional
        κBCC threshold; default: chosen on each run's ``B`` without labels
        (:func:`~flwr_clustering.algorithms.kdc.select_parameters` with ``psi`` fixed).
    seed : int, default 0
        Data, split, the sites' samples, the kernel.
    repeats : int, default 1
        Timed runs per site count (medians reported; every run's numbers kept).
    threads : str, default "1"
        Thread-pool limit.

    Returns
    -------
    dict
        ``params``, ``data`` and ``rows``: one per site count with the largest, median and
        smallest site time (and per phase), the coordinator's, the distributed protocol's
        (max stats + max sample + coordinator + max assign), the centralized time (same
        ``B``) and with its own min/max and sampling, their ratios, the per-site seconds,
        ``labels_equal`` (property (a)) and ``labelled_rows``.
    """
    from flwr_clustering.algorithms.kdc import (
        kdc_central,
        kdc_site_sample,
        pooled_sample,
        select_parameters,
    )
    from flwr_clustering.algorithms.lloyd import client_rng
    from flwr_clustering.data.registry import load_dataset
    from simulations.kdc import split_sites, timed_kdc

    load_before = load_average()
    t0 = time.perf_counter()
    X, y, _ = load_dataset("blobs", n_samples=int(total_rows), n_features=features,
                           centers=k, seed=seed)
    data_s = time.perf_counter() - t0
    n = len(X)
    s = min(int(sample_size), n)
    rows = []
    for r in sites:
        r = int(r)
        parts = split_sites(y, r, "even", np.random.default_rng(seed))
        local = [np.ascontiguousarray(X[p]) for p in parts]
        pooled = np.vstack(local)  # what a central holder of all rows has
        row: dict[str, Any] = {"sites": r, "rows_per_site": len(parts[0]),
                               "rows_per_site_min": min(len(p) for p in parts),
                               "rows_per_site_max": max(len(p) for p in parts),
                               "load_before": load_average()}
        with thread_limit(threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tau_r, selection_s = tau, None
            if tau_r is None:
                start = time.perf_counter()
                B = pooled_sample(local, s, seed=seed)[0]
                try:
                    sel = select_parameters(B, k, t=t, psi_grid=(psi,), seed=seed)
                except ValueError as err:
                    row["error"] = f"no tau: {err}"
                    rows.append(row)
                    continue
                tau_r, selection_s = float(sel["tau"]), time.perf_counter() - start
                row["selection_fallback"] = bool(sel.get("fallback"))
                del B
            row["tau"], row["selection_s"] = float(tau_r), selection_s
            _kdc_warm_up(local, k, psi, t, tau_r, seed)
            runs = []
            for _ in range(max(1, int(repeats))):
                try:
                    run = timed_kdc(local, k, s=s, psi=psi, tau=tau_r, t=t, seed=seed)
                except ValueError as err:  # κBCC: fewer than k components
                    row["error"] = str(err)
                    break
                start = time.perf_counter()
                cen = kdc_central(pooled, run["B"], k, psi=psi, t=t, tau=tau_r, lo=run["lo"],
                                  hi=run["hi"], seed=seed)
                central_s = time.perf_counter() - start
                # the centralized run's own step 1 (the distributed run's B is reused above,
                # so both label with the same kernel): global range and a uniform sample
                start = time.perf_counter()
                lo, hi = pooled.min(axis=0), pooled.max(axis=0)
                kdc_site_sample(pooled, s, client_rng(seed, 0), lo, hi)
                central_step1_s = time.perf_counter() - start
                per_site = (np.array(run["stats"]) + np.array(run["sample"])
                            + np.array(run["assign"]))
                labels = np.concatenate(run["labels"])
                runs.append({
                    "site_s": per_site.tolist(), "stats_s": list(run["stats"]),
                    "sample_s": list(run["sample"]), "assign_s": list(run["assign"]),
                    "coordinator_s": float(run["coordinator"]),
                    "distributed_s": float(run["distributed"]),
                    "central_s": central_s, "central_step1_s": central_step1_s,
                    "labelled_rows": int(len(labels)),
                    "labels_equal": bool(np.array_equal(labels, cen.labels[0])),
                    "sample_rows": int(len(run["B"])),
                })
                del run, cen, labels
        if runs:
            row.update(_kdc_row(runs))
        row["runs"] = runs
        row["load_after"] = load_average()
        rows.append(row)
        del local, pooled
    return {
        "params": dict(sites=[int(r) for r in sites], total_rows=int(total_rows), k=k,
                       features=features, sample_size=s, psi=psi, t=t, tau=tau, seed=seed,
                       repeats=repeats, threads=threads, data="blobs (make_blobs), IID "
                       "even split (simulations.kdc.split_sites 'even')"),
        "data": {"rows": n, "features": int(X.shape[1]), "generate_s": data_s},
        "rows": rows, "load_before": load_before, "load_after": load_average(),
    }


def _kdc_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats of the per-run statistics of :func:`bench_kdc_sites`."""

    def med(fn) -> float:
        return float(np.median([fn(run) for run in runs]))

    site = {key: med(lambda run, key=key: _summary(run["site_s"])[key])
            for key in ("max", "median", "min", "sum")}
    out = {
        "largest_site_s": site["max"], "median_site_s": site["median"],
        "smallest_site_s": site["min"], "all_sites_sum_s": site["sum"],
        "largest_stats_s": med(lambda run: max(run["stats_s"])),
        "largest_sample_s": med(lambda run: max(run["sample_s"])),
        "largest_assign_s": med(lambda run: max(run["assign_s"])),
        "server_s": med(lambda run: run["coordinator_s"]),
        "distributed_s": med(lambda run: run["distributed_s"]),
        "central_s": med(lambda run: run["central_s"]),
        "central_with_step1_s": med(lambda run: run["central_s"] + run["central_step1_s"]),
        "labelled_rows": runs[0]["labelled_rows"], "sample_rows": runs[0]["sample_rows"],
        "labels_equal": all(run["labels_equal"] for run in runs),
    }
    # the minimum over repeats: the least disturbed run of each quantity (shared machine)
    for key, fn in (("largest_site", lambda run: max(run["site_s"])),
                    ("server", lambda run: run["coordinator_s"]),
                    ("distributed", lambda run: run["distributed_s"]),
                    ("central", lambda run: run["central_s"])):
        out[f"{key}_min_s"] = float(min(fn(run) for run in runs))
    out["ratio_central_to_largest_site_min"] = out["central_min_s"] / out["largest_site_min_s"]
    out["ratio_largest_site_to_central"] = out["largest_site_s"] / out["central_s"]
    out["ratio_central_to_largest_site"] = out["central_s"] / out["largest_site_s"]
    out["ratio_central_to_distributed"] = out["central_s"] / out["distributed_s"]
    out["ratio_server_to_central"] = out["server_s"] / out["central_s"]
    out["claim_b_holds"] = out["largest_site_s"] < out["central_s"]
    return out


# ============================================================================ reporting
def protocols_markdown(result: dict[str, Any]) -> str:
    """Render a ``protocols`` result as Markdown tables."""

    def f(v: Any, fmt: str = "{:.2f}") -> str:
        return "n/a" if v is None else fmt.format(v)

    lines = ["# Protocols that scale: DGC's relay and KDC's sites", ""]
    dgc = result.get("dgc") or []
    if dgc:
        p = dgc[0]["params"]
        lines += [
            "## DGC on an Erdős–Rényi graph",
            "",
            f"blobs, iid split, {p['samples_per_node']} rows per node, d={p['features']}, "
            f"k={p['k']}, loss {p['loss']}, rho={p['rho']:g}, node-init {p['node_init']}, "
            f"T={p['iterations']} iterations x S={p['inner_steps']} inner step(s), "
            f"threads={p['threads']}. Graph: `erdos_renyi_graph`, G(m, p) redrawn until "
            "connected (seed = run-config seed). Core: median of "
            f"{p['repeats']} calls, all nodes in sequence. Strategy: DGC + the App's "
            "ClientApp on InProcessGrid, median of the step rounds (round >= 2).",
            "",
            "| nodes | p | edges | avg degree (min-max) | core step (ms) | core iteration "
            "(ms) | sklearn Lloyd iter, pooled (ms) | step / Lloyd | strategy step (ms) | "
            "strategy / core step | relay = pure loop |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in dgc:
            g, c, s = r["graph"], r["core"], r["strategy"]
            lines.append(
                f"| {g['nodes']} | {g['edge_probability']:g} | {g['edges']} | "
                f"{g['average_degree']:.1f} ({g['min_degree']}-{g['max_degree']}) | "
                f"{ms(c['step_s'])} | {ms(c['iteration_s'])} | {ms(c['lloyd_sklearn_s'])} | "
                f"{c['ratio_step_to_lloyd']:.2f} | {ms(s['median_s'])} | "
                f"{f(s['ratio_to_core_step'], '{:.0f}')}x | {r['core_equals_strategy']} |"
            )
        lines += [
            "",
            "Communication per step, counted on the grid (train messages of rounds >= 2; "
            "arrays only, config scalars not counted) against a peer-to-peer exchange over "
            "the same graph (2|E| messages of k·d floats):",
            "",
            "| nodes | p | relay messages (down+up) | expected 2m | relay floats (down / up) "
            "| P2P messages (2·edges) | P2P floats | P2P / relay messages | P2P / relay floats "
            "| busiest party: relay server / P2P peer (floats) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in dgc:
            g, cm = r["graph"], r["communication"]
            msgs = "/".join(str(x) for x in cm["relay_messages_per_step"])
            down = "/".join(str(x) for x in cm["relay_floats_down_per_step"])
            up = "/".join(str(x) for x in cm["relay_floats_up_per_step"])
            lines.append(
                f"| {g['nodes']} | {g['edge_probability']:g} | {msgs} | "
                f"{cm['relay_messages_expected_2m']} | {down} / {up} | "
                f"{cm['p2p_messages_per_step']} | {cm['p2p_floats_per_step']} | "
                f"{f(cm['ratio_p2p_to_relay_messages'], '{:.1f}')} | "
                f"{f(cm['ratio_p2p_to_relay_floats'], '{:.1f}')} | "
                f"{cm['busiest_relay_server_floats']} / {cm['busiest_p2p_node_floats']} |"
            )
        for r in dgc:
            comp = r["strategy"].get("components") or {}
            if not comp:
                continue
            g = r["graph"]
            lines += [
                "",
                f"Where a strategy step goes ({g['nodes']} nodes, p={g['edge_probability']:g};"
                f" cProfile, cumulative seconds per step over {r['strategy']['profiled_rounds']}"
                " step rounds; cProfile inflates call-heavy code):",
                "",
                "| component | ms per step |",
                "|---|---|",
            ]
            lines += [f"| {label} | {ms(sec)} |" for label, sec in comp.items()]
        lines += ["", "Load average before/after: " + "; ".join(
            f"{r['load_before']} / {r['load_after']}" for r in dgc) + "."]
    ray = result.get("dgc_ray") or []
    if ray:
        lines += ["", "### The same run as a `flwr run` Ray simulation", "",
                  "| nodes | p | ok | step round, median (s) | rounds min-max (s) | round 1 (s) "
                  "| ServerApp (s) | wall (s) | peak PSS (MiB) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in ray:
            lines.append(
                f"| {r['clients']} | {r['edge_probability']:g} | {r.get('ok')} | "
                f"{f(r.get('median_s'), '{:.3f}')} | {f(r.get('min_s'), '{:.3f}')}-"
                f"{f(r.get('max_s'), '{:.3f}')} | {f(r.get('round1_s'), '{:.1f}')} | "
                f"{f(r.get('serverapp_s'), '{:.1f}')} | {f(r.get('wall_s'), '{:.1f}')} | "
                f"{f(r.get('peak_pss_mib'), '{:.0f}')} |"
            )
    kdc = result.get("kdc")
    if kdc:
        p = kdc["params"]
        lines += [
            "",
            "## KDC: the largest site's time against the centralized run (claim (b))",
            "",
            f"{p['data']}; {kdc['data']['rows']} rows, d={p['features']}, k={p['k']}; "
            f"s={p['sample_size']}, psi={p['psi']}, t={p['t']}, κBCC, aNNE; tau chosen on "
            "B without labels (not timed) unless given; threads="
            f"{p['threads']}; median of {p['repeats']} run(s). Site time = its round 0 "
            "(size, min, max) + round 1 (sample) + round 2 (feature map and argmax of its "
            "rows), sites timed one after the other. Server = coordinator (global range, "
            "allocation, kernel on B, κBCC, mean maps). Distributed = max round 0 + max "
            "round 1 + server + max round 2. Centralized = `kdc_central` on all rows with the "
            "same B (kernel, κBCC, mean maps, assignment); '+ step 1' adds its own min/max "
            "pass and sampling of B.",
            "",
            "| sites | rows per site | tau | largest site (s) | median site (s) | largest "
            "site's assign (s) | server (s) | distributed (s) | centralized (s) | "
            "centralized + step 1 (s) | central / largest site | central / distributed | "
            "largest site < central | labels = centralized | labelled rows |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in kdc["rows"]:
            if "largest_site_s" not in r:
                lines.append(f"| {r['sites']} | {r['rows_per_site']} | "
                             f"{f(r.get('tau'))} | failed: {r.get('error')} |")
                continue
            lines.append(
                f"| {r['sites']} | {r['rows_per_site']} | {r['tau']:.2f} | "
                f"{r['largest_site_s']:.3f} | {r['median_site_s']:.3f} | "
                f"{r['largest_assign_s']:.3f} | {r['server_s']:.3f} | "
                f"{r['distributed_s']:.3f} | {r['central_s']:.3f} | "
                f"{r['central_with_step1_s']:.3f} | "
                f"{r['ratio_central_to_largest_site']:.1f} | "
                f"{r['ratio_central_to_distributed']:.2f} | {r['claim_b_holds']} | "
                f"{r['labels_equal']} | {r['labelled_rows']} |"
            )
        done = [r for r in kdc["rows"] if "largest_site_min_s" in r]
        if done:
            lines += ["", "Minimum over the repeats (the least disturbed run of each quantity):",
                      "", "| sites | largest site (s) | server (s) | distributed (s) | "
                      "centralized (s) | central / largest site |", "|---|---|---|---|---|---|"]
            lines += [f"| {r['sites']} | {r['largest_site_min_s']:.3f} | {r['server_min_s']:.3f} "
                      f"| {r['distributed_min_s']:.3f} | {r['central_min_s']:.3f} | "
                      f"{r['ratio_central_to_largest_site_min']:.1f} |" for r in done]
        lines += ["", "Load average before/after: " + "; ".join(
            f"{r['sites']} sites {r['load_before']} / {r['load_after']}"
            for r in kdc["rows"]) + "."]
    return "\n".join(lines) + "\n"


# ================================================================================== CLI
QUICK = {"nodes": 20, "iterations": 5, "sites": [2, 5], "total_rows": 20_000,
         "sample_size": 2_000}


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parts", nargs="+", choices=("dgc", "kdc"), default=["dgc", "kdc"],
                   help="what to measure (default both)")
    p.add_argument("--nodes", type=int, default=100, help="DGC graph nodes (default 100)")
    p.add_argument("--edge-probability", type=float, nargs="+", default=[0.3],
                   help="p of the Erdős–Rényi graph G(m, p), one run each (default 0.3, "
                        "the App's er-p)")
    p.add_argument("--iterations", type=int, default=10, help="DGC T (default 10)")
    p.add_argument("--inner-steps", type=int, default=1, help="DGC S (default 1)")
    p.add_argument("--k", type=int, default=16, help="DGC centres per node (default 16)")
    p.add_argument("--samples-per-node", type=int, default=100)
    p.add_argument("--features", type=int, default=2, help="DGC d (default 2)")
    p.add_argument("--repeats", type=int, default=7, help="timed calls of the DGC core")
    p.add_argument("--no-profile", action="store_true", help="skip the DGC cProfile run")
    p.add_argument("--ray", action="store_true",
                   help="also run DGC as a `flwr run` Ray simulation on a private SuperLink")
    p.add_argument("--port", type=int, default=39391,
                   help="HTTP port of that SuperLink (not the shared 39091)")
    p.add_argument("--sites", type=int, nargs="+", default=[10, 100],
                   help="KDC site counts (default 10 100)")
    p.add_argument("--total-rows", type=int, default=1_000_000,
                   help="KDC rows in all (default 1e6)")
    p.add_argument("--kdc-k", type=int, default=4, help="KDC clusters (default 4)")
    p.add_argument("--kdc-features", type=int, default=4, help="KDC d (default 4)")
    p.add_argument("--sample-size", type=int, default=10_000, help="KDC s (default 10000)")
    p.add_argument("--psi", type=int, default=16)
    p.add_argument("--ik-t", type=int, default=100)
    p.add_argument("--tau", type=float, default=None,
                   help="κBCC threshold (default: chosen on B without labels)")
    p.add_argument("--kdc-repeats", type=int, default=1, help="timed KDC runs per site count")
    p.add_argument("--threads", default="1", help="'default' or a thread count (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help=f"small sizes: {QUICK} (overrides those arguments)")
    p.add_argument("--out", default="bench-results")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``protocols`` subcommand on ``subparsers`` (of ``bench``'s parser).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        What ``parser.add_subparsers()`` returned.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser (its ``func`` runs the benchmark).
    """
    p = subparsers.add_parser(
        "protocols", help="DGC's relay on an Erdős–Rényi graph and KDC's sites vs centralized")
    _add_arguments(p)
    p.set_defaults(func=_cmd_protocols)
    return p


def _cmd_protocols(args: argparse.Namespace) -> int:
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    out = Path(args.out)
    result: dict[str, Any] = {
        "benchmark": "protocols", "machine": machine_info(),
        "args": {key: v for key, v in vars(args).items() if key != "func"},
        "load_before": load_average(),
    }
    ok = True
    if "dgc" in args.parts:
        result["dgc"] = []
        for p in args.edge_probability:
            print(f"[{time.strftime('%H:%M:%S')}] DGC, {args.nodes} nodes, G(m, {p})",
                  flush=True)
            row = bench_dgc_relay(
                args.nodes, p, iterations=args.iterations, inner_steps=args.inner_steps,
                k=args.k, samples_per_node=args.samples_per_node, features=args.features,
                seed=args.seed, repeats=args.repeats, threads=args.threads,
                profile=not args.no_profile,
            )
            ok = ok and row["core_equals_strategy"]
            result["dgc"].append(row)
            write_result(out, "protocols", result, protocols_markdown(result))
        if args.ray:
            result["dgc_ray"] = []
            for p in args.edge_probability:
                print(f"[{time.strftime('%H:%M:%S')}] DGC Ray simulation, {args.nodes} nodes, "
                      f"G(m, {p})", flush=True)
                rec = run_dgc_ray(
                    args.nodes, p, iterations=args.iterations, k=args.k,
                    samples_per_node=args.samples_per_node, features=args.features,
                    seed=args.seed, out=out, port=args.port,
                )
                ok = ok and bool(rec.get("ok"))
                result["dgc_ray"].append(rec)
                write_result(out, "protocols", result, protocols_markdown(result))
    if "kdc" in args.parts:
        print(f"[{time.strftime('%H:%M:%S')}] KDC, sites {args.sites}, {args.total_rows} rows",
              flush=True)
        result["kdc"] = bench_kdc_sites(
            args.sites, args.total_rows, k=args.kdc_k, features=args.kdc_features,
            sample_size=args.sample_size, psi=args.psi, t=args.ik_t, tau=args.tau,
            seed=args.seed, repeats=args.kdc_repeats, threads=args.threads,
        )
        ok = ok and all(r.get("labels_equal") for r in result["kdc"]["rows"])
    result["load_after"] = load_average()
    md = protocols_markdown(result)
    paths = write_result(out, "protocols", result, md)
    print(md)
    print(f"written: {paths}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Run the ``protocols`` benchmark; return the exit code.

    Parameters
    ----------
    argv : list of str, optional
        The subcommand's arguments (``["--out", "DIR", ...]``; default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success; 1 if the relay's result differs from the pure loop, a Ray run failed
        or KDC's distributed labels differ from the centralized ones.
    """
    parser = argparse.ArgumentParser(
        prog="python -m simulations bench protocols",
        description="DGC's relay on an Erdős–Rényi graph and KDC's sites vs centralized.",
    )
    _add_arguments(parser)
    return int(_cmd_protocols(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
