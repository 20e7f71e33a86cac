"""Round time on a real deployment: one SuperLink and N SuperNode processes on 127.0.0.1.

The deployment twin of ``bench rounds`` (which measures Ray simulations): a
:class:`~simulations.benchmarks.deployment.LocalDeployment` with one SuperLink and
``nodes`` SuperNodes, each reading its own ``.npz`` file (``data-path`` in its node config;
an ``iid`` share of ``blobs`` data, ``samples-per-node`` rows each), is started once; then
FedKMeans (``algorithm='fkm'``) and its no-computation twin Echo
(:mod:`simulations.benchmarks.echo`) run on it, interleaved, each with a fixed number of
rounds (``tol=-1``) and ``min-nodes = nodes``, through ``flwr run <repo> deploy`` (then
``flwr log --stream`` until the run ends). The SuperLink keeps its state in memory by
default (``--database :flwr-in-memory:``; ``database="file"``: a SQLite file, as the other
deployment tests; see :func:`superlink_args` for why).
Round time is the median of the ``"seconds"`` of rounds >= 2 in ``history.json``
(:func:`~simulations.benchmarks.common.summarize_history`; round 1 holds FKM's
initialisation phase and the first ClientApp start-ups). ``FKM/echo`` is the cost of the
algorithm over Flower's deployment floor (the Grid pulls replies every 3 s, an idle
SuperNode polls every 3 s, every message starts a fresh ``flwr-clientapp`` process).
Peak memory is the largest summed PSS of every process of the federation (SuperLink,
SuperNodes and all their descendants: SuperExecs, ServerApp, ClientApps), sampled in the
background.
Each run also reports its exchanges (the messages each SuperNode received for it, counted
from the SuperNodes' logs: what the deployment did, not a model of it), the CPU per
message of the ``flwr-clientapp`` processes, and the CPU of the SuperLink, of its
SuperExec and of the ``flwr-serverapp`` during the run (:func:`tree_cpu`: two snapshots
of ``/proc``, before the run and after its last app process exited; an exited app's CPU is
read from its zombie or, once its SuperExec reaped it, from the SuperExec's ``cutime``).

Every message starts a fresh process, so the ratio also counts imports: echo's ClientApp
and ServerApp import the ``simulations`` package (and with it scikit-learn) for every
message, FKM's ClientApp imports scikit-learn only in the phases that use it (not in the
App's data-source exchange). Measured with one SuperNode: about 3.4 s of CPU per echo
ClientApp process against 2-3 s per FKM one, so here echo is not a strict floor.

The federation-starting code (:func:`start_federation`, :func:`run_job`,
:func:`stop_federation`) is shared with ``tests/test_deployment_scale.py``. Every process,
port, ``FLWR_HOME`` and database belongs to the caller and is stopped by pid.

Usage::

    python -m simulations.benchmarks.supernodes --nodes 20 --rounds 6 --out bench-results

Each SuperNode node config allows the echo strategy (``allow-algorithms``): a node that
reads its own file imports no ``module:ATTRIBUTE`` algorithm otherwise.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import LABEL_CONFIGS, run_config_algorithm, toml_value
from .deployment import REPO_ROOT, LocalDeployment, read_json
from .echo import ECHO_ALGORITHM
from .processes import (
    ProcInfo,
    executable,
    pids_with_port_in_cmdline,
    port_is_open,
    tail,
)

__all__ = [
    "DATABASES",
    "CpuRow",
    "Federation",
    "REPO_ROOT",
    "add_parser",
    "bench_supernodes",
    "cpu_delta",
    "cpu_snapshot",
    "job_run_config",
    "main",
    "node_messages",
    "node_partitions",
    "parse_stat",
    "run_costs",
    "run_job",
    "start_federation",
    "stop_federation",
    "superlink_args",
    "supernodes_markdown",
    "supernodes_table",
    "tree_cpu",
]

MIB = 1024.0


# ============================================================================ federation
def node_partitions(
    nodes: int, samples_per_node: int, *, k: int = 16, features: int = 2, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The data of every SuperNode: ``blobs`` (``k`` centres) split ``iid`` over ``nodes``.

    The same data a ``bench rounds`` simulation of ``nodes`` clients loads
    (``n-samples = samples_per_node x nodes``, ``data-seed = seed``).

    Returns
    -------
    list of (X, y)
        Node ``i``'s rows and labels, ``i = 0 .. nodes - 1``.
    """
    from flwr_clustering.app.config import dataset_kwargs, merged_config
    from flwr_clustering.data.registry import load_partition

    cfg = merged_config({
        "dataset": "blobs", "partitioner": "iid", "n-samples": int(samples_per_node * nodes),
        "n-features": int(features), "centers": int(k), "data-seed": int(seed),
    })
    return [load_partition(i, int(nodes), **dataset_kwargs(cfg)) for i in range(int(nodes))]


@dataclass
class Federation:
    """A started local deployment whose SuperNodes each read one data file.

    Attributes
    ----------
    deployment : LocalDeployment
        The SuperLink, SuperNodes, their ports, homes and logs.
    files : list of pathlib.Path
        SuperNode ``i``'s data file (its node config's ``data-path``).
    parts : list of (X, y)
        The contents of those files (node ``i`` = ``partition-id`` ``i``).
    k : int
        The blobs' centres and the runs' ``k``.
    database : str
        The SuperLink's state, ``"memory"`` or ``"file"`` (:func:`superlink_args`).
    start_s : float
        Seconds from starting the processes to all SuperNodes online.
    """

    deployment: LocalDeployment
    files: list[Path]
    parts: list[tuple[np.ndarray, np.ndarray]]
    k: int = 16
    database: str = "memory"
    start_s: float = float("nan")

    @property
    def nodes(self) -> int:
        """Number of SuperNodes."""
        return len(self.files)

    @property
    def ports(self) -> list[int]:
        """The SuperLink's and every SuperNode's port."""
        return [self.deployment.link_port, *self.deployment.node_ports]


#: The SuperLink's state: Flower's in-memory LinkState, or a SQLite file in its home.
DATABASES = ("memory", "file")


def superlink_args(dep: LocalDeployment, database: str = "memory") -> list[str] | None:
    """The SuperLink's argv for ``database`` (``None``: the harness' default, a file).

    ``"file"`` is :class:`LocalDeployment`'s own SuperLink (``--database
    <home>/state.db``, SQLite); ``"memory"`` is the same command with Flower's in-memory
    state (``--database :flwr-in-memory:``). Measured on a loaded 2-core machine: with
    20 SuperNodes the SQLite state answered a reply's ``push-messages`` with HTTP 500
    ("database is locked", its 5 s busy timeout), the SuperNode did not retry and the
    round waited for a reply that never came; the in-memory state has no such lock.
    """
    if database not in DATABASES:
        raise ValueError(f"database must be one of {DATABASES}, got {database!r}")
    if database == "file":
        return None
    return [executable("flower-superlink"), "--insecure",
            "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(dep.link_port),
            "--database", ":flwr-in-memory:"]


def start_federation(
    tmp: Path, nodes: int = 20, samples_per_node: int = 50, *, k: int = 16,
    features: int = 2, seed: int = 0, database: str = "memory",
    online_timeout: float = 300.0, poll_seconds: float | None = None,
) -> Federation:
    """Write one data file per node, start a SuperLink and ``nodes`` SuperNodes, wait online.

    Parameters
    ----------
    tmp : pathlib.Path
        The folder of the data files (``data/``), homes, databases and logs (fresh, or at
        least without a ``superlink-home`` from an earlier federation).
    nodes : int, default 20
        SuperNode processes.
    samples_per_node, k, features, seed
        The data (:func:`node_partitions`).
    database : {"memory", "file"}, default "memory"
        The SuperLink's state (:func:`superlink_args`).
    online_timeout : float, default 300
        Seconds to wait until ``flwr supernode list`` shows every node online (20
        Python processes start at once on a small machine).
    poll_seconds : float, optional
        Flower's polling waits in every process (``LocalDeployment.poll_seconds``);
        ``None`` runs Flower as it ships (the benchmarks).

    Returns
    -------
    Federation
        Started; stop it with :func:`stop_federation` (on a failure here everything
        started is stopped before the exception propagates).
    """
    from flwr_clustering.data.local_file import save_local_file

    tmp = Path(tmp)
    parts = node_partitions(nodes, samples_per_node, k=k, features=features, seed=seed)
    data_dir = tmp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for i, (X, y) in enumerate(parts):
        path = data_dir / f"node{i}.npz"
        save_local_file(path, X, y)
        files.append(path)
    configs = [
        {"partition-id": i, "num-partitions": int(nodes), "data-path": path,
         # the echo strategy is loaded by module path: this node's owner allows it
         "allow-algorithms": ECHO_ALGORITHM}
        for i, path in enumerate(files)
    ]
    dep = LocalDeployment(tmp, int(nodes), configs, poll_seconds=poll_seconds)
    dep.superlink_args = superlink_args(dep, database)
    fed = Federation(dep, files, parts, k=int(k), database=database)
    t0 = time.monotonic()
    try:
        dep.start()
        dep.wait_online(int(nodes), timeout=online_timeout)
    except BaseException:
        stop_federation(fed)
        raise
    fed.start_s = time.monotonic() - t0
    return fed


def stop_federation(fed: Federation) -> list[ProcInfo]:
    """Stop every process of the federation by pid; return whatever is still there.

    The survivors of :meth:`LocalDeployment.stop` plus any Flower process still naming one
    of the federation's ports on its command line (an orphaned ServerApp or ClientApp),
    and a placeholder entry for every port that still accepts connections. Empty means
    everything is gone.
    """
    dep = fed.deployment
    left = {p.pid: p for p in dep.stop()}
    for port in fed.ports:
        for info in pids_with_port_in_cmdline(port):
            left.setdefault(info.pid, info)
        if port_is_open(port):
            left.setdefault(-port, ProcInfo(-1, -1, -1, -1, "?", -1,
                                            f"(something still listens on port {port})"))
    return list(left.values())


def job_run_config(algorithm: str, nodes: int, rounds: int, out_dir: Path, k: int = 16,
                   round_timeout: float = 300.0) -> str:
    """The ``--run-config`` of one job: fixed rounds, every node required, local files.

    ``algorithm`` is ``"fkm"``, ``"echo"`` (:data:`~simulations.benchmarks.echo.ECHO_ALGORITHM`),
    a label of :data:`~simulations.benchmarks.common.LABEL_CONFIGS` (``fkm-lloyd``,
    ``fkm-secure``) or any registered name. ``min-nodes = nodes``, so a lost reply fails
    the run after ``round_timeout`` seconds instead of being averaged away.
    """
    name = run_config_algorithm(algorithm)
    extra = "".join(f" {key}={toml_value(value)}"
                    for key, value in LABEL_CONFIGS.get(algorithm, ("", {}))[1].items())
    # scaling='none': FKM against the reference loop on the files' rows, echo alike; no
    # split check (two exchanges after the last round: not a round's cost)
    return (f"algorithm='{name}' dataset='local' k={int(k)} min-nodes={int(nodes)} "
            f"max-rounds={int(rounds)} tol=-1.0 round-timeout={float(round_timeout)} "
            f"scaling='none' split-check=false out-dir='{Path(out_dir).resolve()}'{extra}")


def run_job(
    fed: Federation, algorithm: str, rounds: int, out_dir: Path, *, app: Path | None = None,
    timeout: float = 900.0, round_timeout: float = 300.0,
) -> dict[str, Any]:
    """Run one job on the federation, following its log until it ends; return its record.

    ``flwr run <app> deploy`` submits it; ``flwr log <id>`` (streaming, as ``flwr run
    --stream`` does) follows it. If following fails or times out, ``flwr stop <id>`` ends
    the run before the error propagates, so no run is left behind on the federation.

    Parameters
    ----------
    fed : Federation
        A started federation.
    algorithm : str
        ``"fkm"`` or ``"echo"`` (see :func:`job_run_config`).
    rounds : int
        ``max-rounds`` (with ``tol=-1``: all of them).
    out_dir : pathlib.Path
        The run's ``out-dir`` (emptied first: it must be the caller's own folder).
    app : pathlib.Path, optional
        The Flower App (default: this repository).
    timeout : float, default 900
        Seconds from submission to the end of the run.
    round_timeout : float, default 300
        The run config's ``round-timeout``.

    Returns
    -------
    dict
        ``algorithm``, ``nodes``, ``run_id``, ``status`` (``flwr ls``), ``wall_s`` (submit
        to finished), ``serverapp_s`` (result.json), ``clients_per_round``,
        :func:`~simulations.benchmarks.common.summarize_history` of history.json, and ``ok``:
        the run completed every round with every node contributing.

    Raises
    ------
    RuntimeError
        If ``flwr run`` fails, or the run does not finish within ``timeout``.
    """
    from .common import summarize_history

    dep = fed.deployment
    out_dir = Path(out_dir).resolve()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    app = Path(app).resolve() if app else REPO_ROOT
    rc = job_run_config(algorithm, fed.nodes, rounds, out_dir, fed.k, round_timeout)
    t0 = time.monotonic()
    run_id, _ = dep.submit(app, rc, stream=False, timeout=120)
    try:
        follow = dep.cli("log", str(run_id), dep.connection, "--stream",
                         timeout=max(1.0, timeout - (time.monotonic() - t0)))
        record = dep.finished(run_id, timeout=120)
    except BaseException:
        try:
            dep.cli("stop", str(run_id), dep.connection, timeout=60)
            dep.finished(run_id, timeout=60)
        except RuntimeError:
            pass
        raise
    wall = time.monotonic() - t0
    rec: dict[str, Any] = {
        "algorithm": algorithm, "nodes": fed.nodes, "rounds_requested": int(rounds),
        "run_config": rc, "run_id": run_id, "status": record.get("status"),
        "status-details": record.get("status-details"), "wall_s": wall,
        "out_dir": str(out_dir), "database": fed.database,
    }
    history = read_json(out_dir / "history.json") if (out_dir / "history.json").exists() else []
    rec["clients_per_round"] = [int(h.get("clients", 0)) for h in history]
    rec.update(summarize_history(history))
    if (out_dir / "result.json").exists():
        rec["serverapp_s"] = read_json(out_dir / "result.json").get("seconds")
    rec["ok"] = (str(rec["status"]).startswith("finished:completed")
                 and rec["clients_per_round"] == [fed.nodes] * int(rounds))
    if not rec["ok"]:
        rec["log_tail"] = tail(follow.output, 3000)
    return rec


# ============================================================== CPU and exchanges per run
@dataclass(frozen=True)
class CpuRow:
    """One process's CPU from ``/proc/<pid>/stat`` (seconds).

    Attributes
    ----------
    pid, ppid, start_time : int
        Its id, its parent's, its start (clock ticks since boot).
    comm, state : str
        Its command name (field 2; a zombie keeps it) and state (``"Z"``: exited, not yet
        reaped: its CPU is still its own).
    own_s : float
        ``utime + stime``: its own CPU.
    reaped_s : float
        ``cutime + cstime``: the CPU of its children it has reaped (``wait``); an exited
        child's CPU moves here when its parent reaps it.
    """

    pid: int
    ppid: int
    start_time: int
    comm: str
    state: str
    own_s: float
    reaped_s: float


def parse_stat(pid: int, text: str, ticks: float) -> CpuRow:
    """A :class:`CpuRow` from the text of ``/proc/<pid>/stat`` (``ticks``: clock ticks/s)."""
    comm = text[text.index("(") + 1:text.rindex(")")]
    rest = text[text.rindex(")") + 2:].split()
    # proc(5) fields 3..: state, ppid, ..., utime (14), stime, cutime, cstime, ...,
    # starttime (22)
    return CpuRow(pid=int(pid), ppid=int(rest[1]), start_time=int(rest[19]), comm=comm,
                  state=rest[0], own_s=(int(rest[11]) + int(rest[12])) / ticks,
                  reaped_s=(int(rest[13]) + int(rest[14])) / ticks)


def cpu_snapshot(roots: Sequence[int]) -> dict[int, CpuRow]:
    """The :class:`CpuRow` of ``roots`` and every descendant, zombies included."""
    import os

    ticks = float(os.sysconf("SC_CLK_TCK"))
    rows: dict[int, CpuRow] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                rows[int(entry)] = parse_stat(int(entry), Path(f"/proc/{entry}/stat").read_text(),
                                              ticks)
            except (OSError, ValueError, IndexError):
                continue
    children: dict[int, list[int]] = {}
    for row in rows.values():
        children.setdefault(row.ppid, []).append(row.pid)
    keep, todo = set(), [r for r in roots if r in rows]
    while todo:
        pid = todo.pop()
        if pid not in keep:
            keep.add(pid)
            todo += children.get(pid, [])
    return {pid: rows[pid] for pid in keep}


def tree_cpu(snapshot: dict[int, CpuRow], roots: Sequence[int]) -> dict[str, Any]:
    """The CPU so far of three generations below ``roots``: the roots, their children, the rest.

    A SuperLink (or SuperNode) starts one ``flower-superexec`` child, which starts a
    ``flwr-serverapp`` (``flwr-clientapp``) process per run (per message) with
    ``subprocess.Popen`` and never waits for it: Python's ``subprocess`` reaps an exited one
    at the SuperExec's next ``Popen``. Until then it is a zombie whose ``/proc`` entry still
    holds its CPU; after, its CPU is in the SuperExec's ``cutime``/``cstime``. So the apps'
    CPU so far is the children's reaped CPU plus every app process still listed (running
    or zombie): the difference of two snapshots is the apps' CPU in between, exactly (as
    long as no SuperExec was replaced in between: ``middle`` names them).

    Returns
    -------
    dict
        ``root_s`` (the roots' own CPU), ``middle_s`` (their children's own), ``apps_s``
        (everything below, reaped or not), ``apps`` (app processes listed), ``middle``
        (``[(pid, start_time)]`` of the children) and ``names`` (``{generation: sorted command
        names}``).
    """
    root_set = {r for r in roots if r in snapshot}
    middle = [row for row in snapshot.values() if row.ppid in root_set]
    middle_set = {row.pid for row in middle}
    apps = [row for row in snapshot.values() if row.ppid in middle_set]
    return {
        "root_s": sum(snapshot[r].own_s for r in root_set),
        "middle_s": sum(row.own_s for row in middle),
        "apps_s": sum(row.reaped_s for row in middle)
                  + sum(row.own_s + row.reaped_s for row in apps),
        "apps": len(apps),
        "middle": sorted((row.pid, row.start_time) for row in middle),
        "names": {"root": sorted({snapshot[r].comm for r in root_set}),
                  "middle": sorted({row.comm for row in middle}),
                  "apps": sorted({row.comm for row in apps})},
    }


def cpu_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float | None]:
    """``after - before`` of two :func:`tree_cpu` results (``None`` if a child was replaced)."""
    same = before["middle"] == after["middle"]
    return {key: (after[key] - before[key]) if same or key == "root_s" else None
            for key in ("root_s", "middle_s", "apps_s")}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RUN_LINE = re.compile(r"\[RUN (\d+), ROUND \d+\]")
_RECEIVING = re.compile(r"Receiving: (\S+) message")


def node_messages(log: str, run_id: int) -> dict[str, int]:
    """The messages a SuperNode received for run ``run_id``, by type, from its log.

    Flower's SuperNode logs ``[RUN <id>, ROUND <r>]`` then ``Receiving: <type> message``
    for every message it pulls (each then starts one ``flwr-clientapp``).
    """
    counts: dict[str, int] = {}
    current = None
    for line in _ANSI.sub("", log).splitlines():
        m = _RUN_LINE.search(line)
        if m:
            current = int(m.group(1))
            continue
        m = _RECEIVING.search(line)
        if m and current == int(run_id):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def run_costs(rounds: int, messages_by_node: Sequence[dict[str, int]],
              link: dict[str, float | None], nodes: dict[str, float | None]) -> dict[str, Any]:
    """A run's exchanges and CPU from its nodes' messages and two :func:`cpu_delta` results.

    Parameters
    ----------
    rounds : int
        The run's rounds (the per-round figures divide by it).
    messages_by_node : sequence of dict
        :func:`node_messages` of every SuperNode.
    link, nodes : dict
        :func:`cpu_delta` of the SuperLink's tree (SuperLink, its SuperExec, the ServerApp)
        and of the SuperNodes' trees (SuperNodes, their SuperExecs, the ClientApps).

    Returns
    -------
    dict
        ``exchanges`` (messages per node; ``None`` if the nodes disagree), ``messages``
        (all nodes), ``messages_by_type``, ``clientapp_cpu_s`` and ``cpu_per_message_s``,
        ``superlink_cpu_s``, ``superlink_superexec_cpu_s``, ``serverapp_cpu_s``,
        ``supernode_cpu_s``, ``supernode_superexec_cpu_s`` and the SuperLink's,
        ServerApp's and SuperNodes' ``..._per_round_s``.
    """
    per_node = [sum(m.values()) for m in messages_by_node]
    messages = sum(per_node)
    by_type: dict[str, int] = {}
    for m in messages_by_node:
        for kind, n in m.items():
            by_type[kind] = by_type.get(kind, 0) + n

    def per(value: float | None, n: int) -> float | None:
        return value / n if value is not None and n else None

    costs: dict[str, Any] = {
        "exchanges": per_node[0] if per_node and len(set(per_node)) == 1 else None,
        "messages": messages, "messages_by_type": by_type,
        "superlink_cpu_s": link["root_s"], "superlink_superexec_cpu_s": link["middle_s"],
        "serverapp_cpu_s": link["apps_s"], "supernode_cpu_s": nodes["root_s"],
        "supernode_superexec_cpu_s": nodes["middle_s"], "clientapp_cpu_s": nodes["apps_s"],
        "cpu_per_message_s": per(nodes["apps_s"], messages),
    }
    for key in ("superlink", "serverapp", "supernode"):
        costs[f"{key}_cpu_per_round_s"] = per(costs[f"{key}_cpu_s"], int(rounds))
    return costs


def wait_for_apps(fed: Federation, timeout: float = 30.0) -> dict[int, CpuRow]:
    """Wait until no ServerApp or ClientApp of ``fed`` runs (zombies allowed); snapshot."""
    dep = fed.deployment
    roots = [dep.superlink.pid, *(p.pid for p in dep.supernodes.values())]
    deadline = time.monotonic() + timeout
    while True:
        snap = cpu_snapshot(roots)
        middle = {r.pid for r in snap.values() if r.ppid in roots}
        if (not any(r.ppid in middle and r.state != "Z" for r in snap.values())
                or time.monotonic() > deadline):
            return snap
        time.sleep(0.2)


def fed_roots(fed: Federation) -> tuple[list[int], list[int]]:
    """The SuperLink's pid and the SuperNodes' pids."""
    dep = fed.deployment
    return [dep.superlink.pid], [p.pid for p in dep.supernodes.values()]


# ================================================================================ memory
# ============================================================================= benchmark
def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def supernodes_table(runs: list[dict[str, Any]],
                     algorithms: Sequence[str] = ("fkm", "echo")) -> dict[str, Any]:
    """Per algorithm, medians over its successful runs; and ``ratio`` = FKM / echo.

    Returns
    -------
    dict
        ``{algorithm: {"runs", "ok", "round_s" (median over runs of each run's median of
        rounds >= 2), "round_min_s", "round_max_s" (over all rounds >= 2 of all runs),
        "round1_s", "wall_s", "serverapp_s", "peak_pss_mib", "exchanges",
        "cpu_per_message_s", "superlink_cpu_per_round_s", "serverapp_cpu_per_round_s"},
        "ratio": ...}`` (the last four from :func:`run_costs`).
    """
    table: dict[str, Any] = {}
    for alg in dict.fromkeys([*algorithms, *(r["algorithm"] for r in runs)]):
        sel = [r for r in runs if r["algorithm"] == alg]
        ok = [r for r in sel if r.get("ok")]
        later = [s for r in ok for s in r.get("round_seconds", [])[1:]]

        def med(key: str, ok=ok) -> float | None:
            return _median([float(r[key]) for r in ok if r.get(key) is not None])

        table[alg] = {
            "runs": len(sel), "ok": len(ok), "round_s": med("median_s"),
            "round_min_s": min(later) if later else None,
            "round_max_s": max(later) if later else None,
            "round1_s": med("round1_s"), "wall_s": med("wall_s"),
            "serverapp_s": med("serverapp_s"), "peak_pss_mib": med("peak_pss_mib"),
            "exchanges": med("exchanges"), "cpu_per_message_s": med("cpu_per_message_s"),
            "superlink_cpu_per_round_s": med("superlink_cpu_per_round_s"),
            "serverapp_cpu_per_round_s": med("serverapp_cpu_per_round_s"),
        }
    f = (table.get("fkm") or {}).get("round_s")
    e = (table.get("echo") or {}).get("round_s")
    table["ratio"] = f / e if f is not None and e else None
    return table


def bench_supernodes(
    nodes: int = 20,
    rounds: int = 6,
    algorithms: Sequence[str] = ("fkm", "echo"),
    repeats: int = 2,
    *,
    samples_per_node: int = 50,
    k: int = 16,
    features: int = 2,
    database: str = "memory",
    out: Path = Path("bench-results"),
    app: Path | None = None,
    timeout: float = 1800.0,
    round_timeout: float = 300.0,
    sample_interval: float = 1.0,
    poll_seconds: float | None = None,
) -> dict[str, Any]:
    """FKM vs echo round time on one SuperLink and ``nodes`` SuperNode processes.

    The federation is started once (in ``out/federation``, emptied first); then, for each
    repeat, every algorithm runs once, in the given order (interleaved). Results are
    written to ``out/supernodes.json`` and ``.md`` after every run.

    Parameters
    ----------
    nodes : int, default 20
        SuperNode processes (and ``min-nodes``).
    rounds : int, default 6
        ``max-rounds`` of every run (``tol=-1``: all of them; >= 2 for a round time).
    algorithms : sequence of str, default ("fkm", "echo")
        ``"fkm"``, ``"echo"`` or other registered names that read ``k``/``max-rounds``.
    repeats : int, default 2
        Runs per algorithm.
    samples_per_node, k, features : int
        Rows per node file, blobs centres and ``k``, dimension.
    database : {"memory", "file"}, default "memory"
        The SuperLink's state (:func:`superlink_args`).
    out : pathlib.Path
        Results folder (``runs/<algorithm>-r<repeat>`` are the runs' ``out-dir``).
    app : pathlib.Path, optional
        The Flower App (default: this repository).
    timeout : float, default 1800
        Seconds per run (submission to its end).
    round_timeout : float, default 300
        The runs' ``round-timeout`` (a lost reply fails the run after it).
    sample_interval : float, default 1.0
        Seconds between memory samples.
    poll_seconds : float, optional
        Shorten Flower's 3-s polling waits to this (the test deployments' patch,
        :class:`~simulations.benchmarks.deployment.LocalDeployment`): what a round costs
        without Flower's polling floor. Default: Flower's own waits.

    Returns
    -------
    dict
        ``params``, ``machine``, ``federation`` (start-up seconds, idle PSS, ports,
        survivors after the stop), ``runs`` (:func:`run_job` records plus peak PSS) and
        ``table`` (:func:`supernodes_table`: per-round seconds of rounds >= 2, round 1,
        wall, and ``ratio`` = FKM / echo).
    """
    from .common import PssSampler, load_average, machine_info, write_result

    out = Path(out).resolve()
    fed_dir = out / "federation"
    if fed_dir.exists():  # the benchmark's own folder: a SuperLink database from before
        shutil.rmtree(fed_dir)
    params = dict(nodes=int(nodes), rounds=int(rounds), algorithms=list(algorithms),
                  repeats=int(repeats), samples_per_node=int(samples_per_node), k=int(k),
                  features=int(features), database=database,
                  app=str(Path(app).resolve() if app else REPO_ROOT),
                  round_timeout=float(round_timeout), sample_interval=float(sample_interval),
                  poll_seconds=poll_seconds)
    result: dict[str, Any] = {"benchmark": "supernodes", "params": params,
                              "machine": machine_info(), "load_before": load_average(), "runs": []}
    runs: list[dict[str, Any]] = result["runs"]

    def write() -> None:
        result["table"] = supernodes_table(runs, algorithms)
        write_result(out, "supernodes", result, supernodes_markdown(result))

    print(f"[{time.strftime('%H:%M:%S')}] starting 1 SuperLink + {nodes} SuperNodes",
          flush=True)
    fed = start_federation(fed_dir, nodes, samples_per_node, k=k, features=features,
                           database=database, poll_seconds=poll_seconds)
    sampler = PssSampler(lambda: [p.pid for p in fed.deployment.started if p.alive()],
                         sample_interval)
    try:
        sampler.start()
        time.sleep(max(2.0, 2 * sample_interval))
        result["federation"] = {
            "start_s": fed.start_s, "idle_pss_mib": sampler.last_kib / MIB,
            "idle_pss_by_process_mib": {
                label: {"count": c, "mib": round(kib / MIB, 1)}
                for label, (c, kib) in sorted(sampler.peak_by_label.items(),
                                              key=lambda x: -x[1][1])},
            "link_port": fed.deployment.link_port, "node_ports": fed.deployment.node_ports,
        }
        print(f"    all {nodes} online after {fed.start_s:.1f} s; idle PSS "
              f"{sampler.last_kib / MIB:.0f} MiB", flush=True)
        for rep in range(int(repeats)):
            for alg in algorithms:
                print(f"[{time.strftime('%H:%M:%S')}] {alg}, {nodes} SuperNodes, {rounds} "
                      f"rounds, repeat {rep}", flush=True)
                sampler.reset_peak()
                load_before = load_average()
                link_roots, node_roots = fed_roots(fed)
                snap = wait_for_apps(fed)
                cpu_before = (tree_cpu(snap, link_roots), tree_cpu(snap, node_roots))
                try:
                    rec = run_job(fed, alg, rounds, out / "runs" / f"{alg}-r{rep}", app=app,
                                  timeout=timeout, round_timeout=round_timeout)
                except RuntimeError as exc:
                    rec = {"algorithm": alg, "nodes": int(nodes), "ok": False,
                           "error": tail(str(exc), 3000)}
                snap = wait_for_apps(fed)
                if rec.get("run_id") is not None:
                    link_after, nodes_after = tree_cpu(snap, link_roots), tree_cpu(snap, node_roots)
                    rec.update(run_costs(
                        rounds,
                        [node_messages(p.log(), rec["run_id"])
                         for _, p in sorted(fed.deployment.supernodes.items())],
                        cpu_delta(cpu_before[0], link_after),
                        cpu_delta(cpu_before[1], nodes_after)))
                    rec["process_names"] = {"superlink": link_after["names"],
                                            "supernodes": nodes_after["names"]}
                rec.update(repeat=rep, load_before=load_before, load_after=load_average(),
                           max_processes=dict(sorted(sampler.max_count.items())),
                           peak_pss_mib=sampler.peak_kib / MIB,
                           peak_pss_by_process_mib={
                               label: {"count": c, "mib": round(kib / MIB, 1)}
                               for label, (c, kib) in sorted(sampler.peak_by_label.items(),
                                                             key=lambda x: -x[1][1])})
                runs.append(rec)
                print(f"    ok={rec['ok']} wall={rec.get('wall_s', float('nan')):.1f}s rounds="
                      f"{[round(x, 2) for x in rec.get('round_seconds', [])]} clients="
                      f"{rec.get('clients_per_round')} peak PSS={rec['peak_pss_mib']:.0f} MiB "
                      f"ClientApps at once<={rec['max_processes'].get('flwr-clientapp', 0)} "
                      f"status={rec.get('status')} exchanges={rec.get('exchanges')} "
                      f"CPU/message={_fmt(rec.get('cpu_per_message_s'))}s SuperLink CPU/round="
                      f"{_fmt(rec.get('superlink_cpu_per_round_s'))}s ServerApp CPU/round="
                      f"{_fmt(rec.get('serverapp_cpu_per_round_s'))}s", flush=True)
                write()
    finally:
        sampler.stop()
        left = stop_federation(fed)
        result.setdefault("federation", {})["survivors"] = [
            f"pid {p.pid} {p.cmdline[:200]}" for p in left]
        result["load_after"] = load_average()
        print(f"stopped the federation by pid; survivors: {len(left)}", flush=True)
        write()
    return result


def _fmt(v: float | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _first_line(run: dict[str, Any], width: int = 200) -> str:
    """The first line of a failed run's reason (``status-details``, else ``error``)."""
    text = str(run.get("status-details") or run.get("error") or "")
    return (text.splitlines() or [""])[0][:width]


def supernodes_markdown(result: dict[str, Any]) -> str:
    """Render a :func:`bench_supernodes` result as Markdown."""

    def s(v: float | None, fmt: str = "{:.2f}") -> str:
        return "n/a" if v is None else fmt.format(v)

    p, fed = result["params"], result.get("federation", {})
    table = result.get("table") or supernodes_table(result["runs"], p["algorithms"])
    lines = [
        f"# Round time on a real deployment: 1 SuperLink + {p['nodes']} SuperNodes "
        "(127.0.0.1), FedKMeans vs echo",
        "",
        f"blobs data, iid split, {p['samples_per_node']} rows per node (one .npz file each, "
        f"dataset='local'), d={p['features']}, k={p['k']}, {p['rounds']} rounds (tol=-1), "
        f"min-nodes={p['nodes']}, {p['repeats']} repeat(s), algorithms interleaved; "
        f"SuperLink state: {p.get('database', 'memory')}. "
        "Round time = median of rounds >= 2 from history.json (median over repeats); "
        "wall = `flwr run` submission to the run's end; peak PSS = largest summed PSS of "
        "the SuperLink, SuperNodes and all their descendants during the run; more "
        "ClientApps at once than SuperNodes means Flower launched some again (a ClientApp "
        "that does not start within 30 s loses its claim on the message). "
        f"All nodes online {s(fed.get('start_s'), '{:.1f}')} s after start; idle PSS "
        f"{s(fed.get('idle_pss_mib'), '{:.0f}')} MiB. Load average before/after: "
        f"{result.get('load_before')} / {result.get('load_after', 'n/a')}.",
        "",
        "Exchanges = messages each SuperNode received for the run (its log's `Receiving:` "
        "lines); CPU per message = the `flwr-clientapp` processes' CPU (user + system, "
        "reaped into their SuperExec's cutime/cstime or still listed as zombies) over all "
        "nodes' messages; SuperLink and ServerApp CPU per round = the `flower-superlink` "
        "process's own CPU and its `flwr-serverapp` grandchild's during the run, over its "
        "rounds.",
        "",
        "| algorithm | runs ok | round (s) | rounds >= 2 min-max (s) | round 1 (s) | "
        "ServerApp (s) | wall (s) | peak PSS (MiB) | exchanges | CPU / message (s) | "
        "SuperLink CPU / round (s) | ServerApp CPU / round (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for alg in p["algorithms"]:
        r = table.get(alg) or {}
        lines.append(
            f"| {alg} | {r.get('ok', 0)}/{r.get('runs', 0)} | {s(r.get('round_s'), '{:.2f}')} | "
            f"{s(r.get('round_min_s'))}-{s(r.get('round_max_s'))} | "
            f"{s(r.get('round1_s'), '{:.1f}')} | {s(r.get('serverapp_s'), '{:.1f}')} | "
            f"{s(r.get('wall_s'), '{:.1f}')} | {s(r.get('peak_pss_mib'), '{:.0f}')} | "
            f"{s(r.get('exchanges'), '{:.0f}')} | {s(r.get('cpu_per_message_s'))} | "
            f"{s(r.get('superlink_cpu_per_round_s'), '{:.3f}')} | "
            f"{s(r.get('serverapp_cpu_per_round_s'), '{:.3f}')} |")
    lines += ["", f"FKM / echo round time: **{s(table.get('ratio'))}**", "",
              "| algorithm | repeat | ok | clients per round | round seconds | wall (s) | "
              "peak PSS (MiB) | most ClientApps at once | load before / after | exchanges "
              "(messages by type) | ClientApp CPU (s) | SuperLink / its SuperExec / ServerApp "
              "CPU (s) | SuperNodes / their SuperExecs CPU (s) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        secs = ", ".join(f"{x:.2f}" for x in r.get("round_seconds", []))
        lines.append(
            f"| {r['algorithm']} | {r.get('repeat')} | {r.get('ok')} | "
            f"{r.get('clients_per_round', 'n/a')} | {secs} | {s(r.get('wall_s'), '{:.1f}')} | "
            f"{s(r.get('peak_pss_mib'), '{:.0f}')} | "
            f"{(r.get('max_processes') or {}).get('flwr-clientapp', 'n/a')} | "
            f"{r.get('load_before')} / {r.get('load_after')} | {r.get('exchanges', 'n/a')} "
            f"({r.get('messages_by_type', 'n/a')}) | {s(r.get('clientapp_cpu_s'), '{:.1f}')} | "
            f"{s(r.get('superlink_cpu_s'))} / {s(r.get('superlink_superexec_cpu_s'))} / "
            f"{s(r.get('serverapp_cpu_s'))} | {s(r.get('supernode_cpu_s'))} / "
            f"{s(r.get('supernode_superexec_cpu_s'))} |")
    failed = [r for r in result["runs"] if not r.get("ok")]
    if failed:
        lines += ["", "Failed runs (excluded): " + "; ".join(
            f"{r['algorithm']} r{r.get('repeat')} ({r.get('status')}: {_first_line(r)})"
            for r in failed)]
    if fed.get("survivors"):
        lines += ["", f"Processes left after the stop: {fed['survivors']}"]
    return "\n".join(lines) + "\n"


# =================================================================================== CLI
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=20, help="SuperNode processes")
    parser.add_argument("--rounds", type=int, default=6, help="max-rounds (tol=-1)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per algorithm")
    parser.add_argument("--samples-per-node", type=int, default=50,
                        help="rows in each SuperNode's data file")
    parser.add_argument("--algorithms", nargs="+", default=["fkm", "echo"],
                        help="run in this order within each repeat")
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--features", type=int, default=2)
    parser.add_argument("--database", choices=DATABASES, default="memory",
                        help="the SuperLink's state: in memory, or a SQLite file")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--round-timeout", type=float, default=300.0,
                        help="the runs' round-timeout (a lost reply fails the run)")
    parser.add_argument("--sample-interval", type=float, default=1.0,
                        help="seconds between memory samples")
    parser.add_argument("--poll-seconds", type=float, default=None,
                        help="shorten Flower's 3-s polling waits to this (default: Flower's)")
    parser.add_argument("--out", default="bench-results")
    parser.set_defaults(func=_cmd_supernodes)


def _cmd_supernodes(args: argparse.Namespace) -> int:
    result = bench_supernodes(
        args.nodes, args.rounds, tuple(args.algorithms), args.repeats,
        samples_per_node=args.samples_per_node, k=args.k, features=args.features,
        database=args.database, out=Path(args.out), timeout=args.timeout,
        round_timeout=args.round_timeout, sample_interval=args.sample_interval,
        poll_seconds=args.poll_seconds,
    )
    print(supernodes_markdown(result))
    out = Path(args.out).resolve()
    print(f"written: {out / 'supernodes.json'}, {out / 'supernodes.md'}")
    ok = all(r.get("ok") for r in result["runs"]) and not result["federation"].get("survivors")
    return 0 if ok else 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``supernodes`` subcommand on ``subparsers`` (of ``bench``'s parser).

    Its ``func`` default runs the benchmark and returns the exit code (1 if a run failed
    or a process survived the stop).
    """
    parser = subparsers.add_parser(
        "supernodes", help="FKM vs echo round time on 1 SuperLink + N SuperNode processes")
    _add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``supernodes`` benchmark; return the exit code.

    Parameters
    ----------
    argv : list of str, optional
        The subcommand's arguments (``--nodes 20 --rounds 6 ...``; default
        ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m simulations.benchmarks.supernodes",
        description="FKM vs echo round time on one SuperLink and N SuperNode processes.")
    _add_arguments(parser)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
