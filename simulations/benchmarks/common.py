"""What the benchmarks share: timing, the machine, result files, Flower runs and memory.

One module for every ``python -m simulations bench`` command (:mod:`.bench`,
:mod:`.perf`, :mod:`.protocols`, :mod:`.supernodes`): timing a call
(:func:`time_call`), the machine and its load (:func:`machine_info`,
:func:`load_average`), thread limits, writing a result's JSON and Markdown
(:func:`write_result`), and running ``flwr run`` simulations against a SuperLink started
and stopped by PID while sampling the process tree's memory (:func:`start_superlink`,
:func:`run_one`, :class:`PssSampler`, :func:`stop_tree`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import processes
from .echo import ECHO_ALGORITHM

__all__ = [
    "MIB",
    "PssSampler",
    "flower_env",
    "flwr_run_command",
    "jsonable",
    "load_average",
    "machine_info",
    "ms",
    "process_label",
    "pss_kib",
    "run_config_algorithm",
    "run_one",
    "run_status",
    "start_superlink",
    "stop_tree",
    "summarize_history",
    "thread_limit",
    "time_call",
    "toml_value",
    "write_result",
]

#: KiB per MiB (the samplers count KiB).
MIB = 1024.0


def time_call(fn: Callable[[], Any], repeats: int = 7, warmup: int = 1) -> dict[str, float]:
    """Time ``fn()`` with :func:`time.perf_counter`.

    Parameters
    ----------
    fn : callable
        The work, called without arguments.
    repeats : int, default 7
        Timed calls.
    warmup : int, default 1
        Untimed calls first (imports, caches, thread pools).

    Returns
    -------
    dict
        ``{"median", "min", "max"}`` in seconds.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {
        "median": float(np.median(times)), "min": float(min(times)), "max": float(max(times)),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - non-Unix
        return []


def machine_info() -> dict[str, Any]:
    """Python, numpy, scipy, scikit-learn and Flower versions, CPUs, platform."""
    import scipy
    import sklearn

    info: dict[str, Any] = {
        "python": platform.python_version(), "numpy": np.__version__,
        "scipy": scipy.__version__, "sklearn": sklearn.__version__,
        "cpus": os.cpu_count(), "platform": platform.platform(),
    }
    try:
        import flwr

        info["flwr"] = flwr.__version__
    except ImportError:  # pragma: no cover
        pass
    return info


def thread_limit(threads: str):
    """A threadpoolctl limit: ``"default"`` (none) or a number of BLAS threads."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=None if threads == "default" else int(threads))


def write_result(out: Path, name: str, result: dict[str, Any], markdown: str) -> dict[str, str]:
    """Write ``<out>/<name>.json`` and ``<name>.md``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(result, indent=2, default=jsonable))
    md_path.write_text(markdown)
    return {"json": str(json_path), "markdown": str(md_path)}


def jsonable(obj: Any) -> Any:
    """``json.dumps``'s ``default``: numpy scalars and arrays as Python values."""
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with 2 decimals (``"n/a"`` for ``None``)."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.2f}"



def pss_kib(pid: int) -> int | None:
    """Return the proportional set size of ``pid`` in KiB (``None`` if it is gone).

    Parameters
    ----------
    pid : int
        Process id.

    Returns
    -------
    int or None
        The ``Pss:`` line of ``/proc/<pid>/smaps_rollup``.
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_label(cmdline: Sequence[str]) -> str:
    """Return a short name for a process from its command line.

    Parameters
    ----------
    cmdline : sequence of str
        ``/proc/<pid>/cmdline`` split at NUL bytes.

    Returns
    -------
    str
        ``"ray::ClientAppActor"``-style titles as they are; for ``python script.py ...`` the
        script's file name; otherwise the executable's file name (``"?"`` if empty).
    """
    if not cmdline:
        return "?"
    first = cmdline[0].split()[0] if cmdline[0].split() else cmdline[0]
    if first.startswith("ray::"):
        return first
    name = Path(first).name
    if name.startswith("python") and len(cmdline) > 1:
        rest = [a for a in cmdline[1:] if not a.startswith("-")]
        if rest:
            return Path(rest[0]).name
    return name


class PssSampler(threading.Thread):
    """Sample the summed PSS of processes and all their descendants in the background.

    Parameters
    ----------
    root : int or callable
        The root PID (the benchmark's SuperLink), or a function returning the root PIDs,
        called at every sample (a deployment's SuperLink and SuperNodes).
    interval : float, default 0.5
        Seconds between samples.

    Attributes
    ----------
    peak_kib, last_kib : int
        Largest and latest summed PSS (KiB); :meth:`reset_peak` starts a new peak.
    peak_by_label : dict
        ``{process label: (count, KiB)}`` at the peak sample.
    max_count : dict
        ``{process label: most processes seen at once}`` since the last :meth:`reset_peak`.
    samples : int
        Number of samples taken.
    """

    def __init__(self, root: int | Callable[[], Sequence[int]], interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.roots = root if callable(root) else (lambda pid=int(root): [pid])
        self.interval = float(interval)
        self.peak_kib = self.last_kib = self.samples = 0
        self.peak_by_label: dict[str, list[int]] = {}
        self.max_count: dict[str, int] = {}
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def sample(self) -> int:
        """Take one sample; return its summed PSS in KiB."""
        # Re-read every time: Ray workers retitle themselves (ray::ClientAppActor).
        roots = list(self.roots())
        tree = [info for info in map(processes.proc_info, roots) if info is not None]
        tree += processes.descendants(roots)
        total, by_label = 0, {}
        for info in tree:
            kib = pss_kib(info.pid)
            if kib is None:
                continue
            label = process_label(info.cmdline.split())
            total += kib
            count, size = by_label.get(label, (0, 0))
            by_label[label] = [count + 1, size + kib]
        with self._lock:
            self.samples += 1
            self.last_kib = total
            if total > self.peak_kib:
                self.peak_kib, self.peak_by_label = total, by_label
            for label, (count, _) in by_label.items():
                self.max_count[label] = max(count, self.max_count.get(label, 0))
        return total

    def reset_peak(self) -> None:
        """Forget the peak and the counts (the next sample starts new ones)."""
        with self._lock:
            self.peak_kib, self.peak_by_label, self.max_count = 0, {}, {}

    def run(self) -> None:
        """Sample until :meth:`stop`."""
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._halt.set()
        self.join(timeout=10)


def flower_env(flwr_home: Path, port: int, control_port: int) -> dict[str, str]:
    """Return the environment of the harness' SuperLink and ``flwr`` CLI calls.

    Parameters
    ----------
    flwr_home : pathlib.Path
        The benchmark's own ``FLWR_HOME``.
    port, control_port : int
        The local SuperLink's HTTP and Control API ports (the CLI's ``:local:`` connection
        then talks to the benchmark's SuperLink, not to a shared one).

    Returns
    -------
    dict
        :func:`~simulations.benchmarks.processes.flower_env` with those ports.
    """
    return processes.flower_env(
        flwr_home, FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(port),
        FLWR_LOCAL_CONTROL_API_PORT=str(control_port),
    )


def start_superlink(
    flwr_home: Path, port: int, control_port: int, env: dict[str, str], timeout: float = 30.0
) -> subprocess.Popen:
    """Start a local simulation SuperLink the way ``flwr run`` does, and wait until healthy.

    Parameters
    ----------
    flwr_home : pathlib.Path
        Its ``FLWR_HOME`` (database and log go to ``local-superlink/``).
    port, control_port : int
        HTTP and Control API ports; both must be free.
    env : dict
        Environment (see :func:`flower_env`).
    timeout : float, default 30
        Seconds to wait for ``/health``.

    Returns
    -------
    subprocess.Popen
        The SuperLink process (stop it with :func:`stop_tree`).

    Raises
    ------
    RuntimeError
        If a port is taken or the SuperLink does not come up.
    """
    for p in (port, control_port):
        if processes.port_is_open(p):
            raise RuntimeError(
                f"port {p} is already in use (another SuperLink?); choose another --port"
            )
    run_dir = Path(flwr_home) / "local-superlink"
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        processes.executable("flower-superlink"), "--insecure", "--simulation",
        "--isolation", "subprocess",
        "--control-api-address", f"127.0.0.1:{control_port}", "--host", "127.0.0.1",
        "--port", str(port), "--log-file", str(run_dir / "superlink.log"),
        "--database", str(run_dir / "state.db"), "--disable-runtime-dependency-installation",
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"flower-superlink exited with code {proc.returncode}; see {run_dir}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.2)
    stop_tree(proc.pid)
    raise RuntimeError(f"flower-superlink did not become healthy within {timeout:.0f} s")


def stop_tree(pid: int, timeout: float = 15.0) -> list[int]:
    """Stop ``pid`` and all its descendants, by PID (SIGTERM, then SIGKILL); reap ``pid``.

    Parameters
    ----------
    pid : int
        The root (a process this harness started).
    timeout : float, default 15
        Seconds to wait for the processes to go.

    Returns
    -------
    list of int
        The PIDs of the tree when it was stopped, sorted.
    """
    root = processes.proc_info(pid)
    if root is None:
        return []
    tree = [root, *processes.descendants([pid])]
    processes.stop_processes([root], timeout=timeout)
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return sorted(p.pid for p in tree)


# =============================================================================== rounds
def summarize_history(history: list[dict[str, Any]], skip: int = 1) -> dict[str, Any]:
    """Summarize per-round ``"seconds"`` of a ``history.json``.

    Parameters
    ----------
    history : list of dict
        The per-round records (each with ``"round"`` and ``"seconds"``).
    skip : int, default 1
        Leading rounds left out of the statistics (round 1 includes Ray's start-up and the
        init phase).

    Returns
    -------
    dict
        ``rounds``, ``round1_s``, ``round_seconds`` (all), and the median, mean, min and
        max of rounds ``> skip`` (``None`` if there are none).
    """
    secs = [float(r["seconds"]) for r in history if "seconds" in r]
    rest = secs[skip:]
    out: dict[str, Any] = {
        "rounds": len(history), "round_seconds": secs,
        "round1_s": secs[0] if secs else None,
    }
    for key, fn in (("median", np.median), ("mean", np.mean), ("min", np.min), ("max", np.max)):
        out[f"{key}_s"] = float(fn(rest)) if rest else None
    return out


#: Benchmark labels that are an algorithm with run-config keys: plain federated Lloyd and
#: the same under secure aggregation (``bench rounds --algorithms fkm-lloyd fkm-secure``),
#: keys once per run (the default) or Flower's SecAgg+ per exchange (``fkm-secaggplus``);
#: ``-poll3``: the ServerApp pulls replies every 3 s, as Flower's ``send_and_receive`` does
#: (``poll-interval=3``), against our default 0.1 s in the same benchmark run.
LABEL_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "fkm-lloyd": ("fkm", {"server-update": "lloyd"}),
    "fkm-lloyd-poll3": ("fkm", {"server-update": "lloyd", "poll-interval": 3.0}),
    "fkm-secure": ("fkm", {"server-update": "lloyd", "secure-aggregation": True}),
    "fkm-secure-poll3": ("fkm", {"server-update": "lloyd", "secure-aggregation": True,
                                 "poll-interval": 3.0}),
    "fkm-secaggplus": ("fkm", {"server-update": "lloyd", "secure-aggregation": True,
                               "secagg-keys": "exchange"}),
}


def run_config_algorithm(name: str) -> str:
    """The run-config value of ``algorithm`` for a benchmark label (``echo`` lives here)."""
    if name in LABEL_CONFIGS:
        return LABEL_CONFIGS[name][0]
    return ECHO_ALGORITHM if name == "echo" else name


def toml_value(value: Any) -> str:
    """A run-config value as ``flwr run -c`` takes it (TOML)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


def flwr_run_command(
    app: Path, algorithm: str, clients: int, rounds: int, k: int, samples_per_client: int,
    features: int, out_dir: Path, cpus_per_client: int,
    extra_run_config: dict[str, Any] | None = None,
) -> list[str]:
    """The ``flwr run`` command of one benchmark simulation (blobs, iid, no early stop)."""
    items: dict[str, Any] = {
        "algorithm": run_config_algorithm(algorithm), "dataset": "blobs", "partitioner": "iid",
        "n-samples": samples_per_client * clients, "n-features": features, "centers": k,
        "k": k, "max-rounds": rounds, "tol": -1.0, "min-nodes": clients,
        "out-dir": str(out_dir),
        **LABEL_CONFIGS.get(algorithm, ("", {}))[1],
        # DGC's rounds are 1 (init) + iterations x inner steps, not max-rounds
        **({"iterations": rounds - 1} if algorithm == "dgc" else {}),
        **(extra_run_config or {}),  # (may replace the data set: one value per key)
    }
    run_config = " ".join(f"{key}={toml_value(value)}" for key, value in items.items())
    federation = f"num-supernodes={clients} client-resources-num-cpus={cpus_per_client}"
    return [
        processes.executable("flwr"), "run", str(app), "--stream",
        "--federation-config", federation,
        "--run-config", run_config,
    ]


def run_status(run_id: str | None, env: dict[str, str], app: Path) -> dict[str, Any]:
    """Ask the SuperLink for the status of a run (``flwr run --stream`` exits 0 anyway)."""
    if run_id is None:
        return {"status": "unknown (no run id in the output)"}
    try:
        record = processes.flwr_ls_run(int(run_id), env, app)
    except (OSError, RuntimeError) as ex:
        return {"status": f"unknown ({str(ex).splitlines()[0]})"}
    return {"status": record.get("status"), "status-details": record.get("status-details")}


def run_one(
    *, app: Path, algorithm: str, clients: int, rounds: int, k: int, samples_per_client: int,
    features: int, cpus_per_client: int, out_dir: Path, env: dict[str, str], superlink_pid: int,
    sample_interval: float, timeout: float, extra_run_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one ``flwr run`` simulation while sampling memory; return its measurements.

    Parameters
    ----------
    app : pathlib.Path
        The Flower App (the repository root).
    algorithm : str
        The run config's ``algorithm`` (``"fkm"``, ``"echo"``, ``"feca"``, ...).
    clients, rounds, k, samples_per_client, features, cpus_per_client : int
        The run's size (see :func:`run_rounds`).
    out_dir : pathlib.Path
        The run's ``out-dir`` (``history.json``, ``result.json``) and ``flwr.log``; the
        benchmark's own folder, emptied first (a run refuses an out-dir that holds another
        run's results, and a benchmark is rerun into the same folders).
    env : dict
        Environment of the CLI.
    superlink_pid : int
        Root of the sampled process tree.
    sample_interval : float
        Seconds between memory samples.
    timeout : float
        Seconds before the CLI call is abandoned.
    extra_run_config : dict, optional
        More run-config keys (e.g. DGC's ``graph`` and ``er-p``), appended last.

    Returns
    -------
    dict
        Wall time, per-round seconds (:func:`summarize_history`), ServerApp seconds, peak
        PSS (MiB, and by process at the peak), run status and load averages.
    """
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = flwr_run_command(
        app, algorithm, clients, rounds, k, samples_per_client, features, out_dir,
        cpus_per_client, extra_run_config,
    )
    log = out_dir / "flwr.log"
    sampler = PssSampler(superlink_pid, sample_interval)
    rec: dict[str, Any] = {
        "algorithm": algorithm, "clients": clients, "rounds_requested": rounds,
        "command": cmd, "out_dir": str(out_dir), "load_before": load_average(),
    }
    sampler.start()
    t0 = time.perf_counter()
    try:
        with open(log, "w") as fh:
            proc = subprocess.run(
                cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, text=True,
                cwd=str(app),
            )
        rec["returncode"] = proc.returncode
    except subprocess.TimeoutExpired:
        rec["returncode"] = None
        rec["error"] = f"flwr run did not finish within {timeout:.0f} s"
    rec["wall_s"] = time.perf_counter() - t0
    sampler.stop()
    rec["load_after"] = load_average()
    rec["peak_pss_mib"] = sampler.peak_kib / MIB
    rec["peak_pss_by_process_mib"] = {
        label: {"count": c, "mib": round(kib / MIB, 1)}
        for label, (c, kib) in sorted(sampler.peak_by_label.items(), key=lambda x: -x[1][1])
    }
    rec["memory_samples"] = sampler.samples
    text = log.read_text(errors="replace")
    match = re.search(r"run (?:ID )?(\d{3,})", text)
    rec["run_id"] = match.group(1) if match else None
    rec.update(run_status(rec["run_id"], env, app))
    hist_path, res_path = out_dir / "history.json", out_dir / "result.json"
    if hist_path.exists():
        rec.update(summarize_history(json.loads(hist_path.read_text())))
    # The rounds the strategy planned: ``max-rounds`` for an iterative algorithm, its
    # protocol's fixed count for the others (1 for a one-shot one, 1 + F for masked
    # Algorithm 1), as result.json's diagnostics state it.
    planned = rounds
    if res_path.exists():
        result = json.loads(res_path.read_text())
        rec["serverapp_s"] = result.get("seconds")
        planned = (result.get("diagnostics") or {}).get("num-rounds", rounds)
    rec["rounds_planned"] = planned
    rec["ok"] = (
        hist_path.exists() and rec.get("rounds") == planned
        and str(rec.get("status", "")).startswith("finished:completed")
    )
    if not rec["ok"]:
        rec["log_tail"] = text[-3000:]
    return rec
