"""Driving real Flower processes: environment, ports, ``/proc``, stopping by PID, the CLI.

Used by the benchmarks (:mod:`simulations.benchmarks.bench`: a private simulation
SuperLink, memory of its process tree) and by the integration tests (``flwr run`` on a
private local SuperLink; SuperLink + SuperNodes on 127.0.0.1).

Everything here is Linux-only (it reads ``/proc``), needs no third-party package and
never matches processes by name alone: a process is only ever signalled if it was
started by the caller, descends from such a process, or listens on / connects to a port
the caller picked itself. Every wait has a timeout and raises ``RuntimeError`` with the
captured logs.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Environment set for every Flower subprocess (flower-notes G3, G7, G8).
FLOWER_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "MPLBACKEND": "Agg",
    "PYTHONUNBUFFERED": "1",
}

#: Where a developer's own local SuperLink listens: never inherited by a test's Flower.
_LOCAL_SUPERLINK_PORTS = ("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "FLWR_LOCAL_CONTROL_API_PORT")

#: How much of a log goes into an assertion message.
LOG_TAIL_CHARS = 6000


# --------------------------------------------------------------------------- executables


def venv_bin() -> Path:
    """Return the folder of the running interpreter's scripts (the venv's ``bin``)."""
    return Path(sys.executable).parent


def executable(name: str) -> str:
    """Return the absolute path of a console script installed next to ``sys.executable``."""
    path = venv_bin() / name
    if not path.exists():
        raise FileNotFoundError(f"{name} not found next to {sys.executable} ({path})")
    return str(path)


def flower_env(flwr_home: Path, **extra: str) -> dict[str, str]:
    """Return the environment of a Flower subprocess.

    The current environment, plus :data:`FLOWER_ENV`, the given ``FLWR_HOME`` and
    ``extra``; the venv's ``bin`` goes first on ``PATH`` because Flower itself launches
    ``flower-superlink``, ``flower-superexec``, ``flwr-simulation``, ``flwr-serverapp``
    and ``flwr-clientapp`` by bare name.
    """
    env = dict(os.environ)
    # Never inherit another engineer's local-SuperLink ports or Flower home.
    for key in _LOCAL_SUPERLINK_PORTS:
        env.pop(key, None)
    env.update(FLOWER_ENV)
    env["FLWR_HOME"] = str(flwr_home)
    env["PATH"] = os.pathsep.join([str(venv_bin()), env.get("PATH", "")])
    env.update(extra)
    Path(flwr_home).mkdir(parents=True, exist_ok=True)
    return env


# --------------------------------------------------------------------------- ports


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``n`` distinct TCP ports that were free a moment ago (bound to port 0)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    """Return one free TCP port."""
    return free_ports(1, host)[0]


def port_is_open(port: int, host: str = "127.0.0.1", timeout: float = 0.3) -> bool:
    """Return True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- /proc


@dataclass(frozen=True)
class ProcInfo:
    """One row of the process table (from ``/proc/<pid>/stat`` and ``cmdline``)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_time: int
    cmdline: str

    @property
    def key(self) -> tuple[int, int]:
        """``(pid, start time)``: identifies a process even if its pid is reused later."""
        return (self.pid, self.start_time)


def proc_info(pid: int) -> ProcInfo | None:
    """Return the :class:`ProcInfo` of ``pid``, or None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    rest = stat[stat.rindex(")") + 2 :].split()
    return ProcInfo(
        pid=pid, ppid=int(rest[1]), pgid=int(rest[2]), sid=int(rest[3]), state=rest[0],
        start_time=int(rest[19]), cmdline=cmd.replace(b"\0", b" ").decode(errors="replace").strip(),
    )


def process_table() -> dict[int, ProcInfo]:
    """Return every process of the machine by pid."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = proc_info(int(entry))
            if info is not None:
                table[info.pid] = info
    return table


def is_running(key: tuple[int, int]) -> bool:
    """True if the process ``(pid, start time)`` still exists and is not a zombie."""
    info = proc_info(key[0])
    return info is not None and info.start_time == key[1] and info.state != "Z"


def descendants(root_pids: Iterable[int], table: Mapping[int, ProcInfo] | None = None) -> list[
    ProcInfo
]:
    """Return the live descendants of ``root_pids`` (not the roots themselves)."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    out, todo, seen = [], list(root_pids), set(root_pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                out.append(table[child])
                todo.append(child)
    return out


def _socket_inodes_on_port(port: int, listening_only: bool) -> set[str]:
    """Return the inodes of TCP sockets bound to local ``port`` (listening ones if asked)."""
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            parts = line.split()
            local_port = int(parts[1].rsplit(":", 1)[1], 16)
            if local_port == port and (not listening_only or parts[3] == "0A"):
                inodes.add(parts[9])
    return inodes


def pids_listening_on(port: int) -> list[int]:
    """Return the pids holding a listening TCP socket on ``port`` (like ``ss -ltnp``)."""
    inodes = _socket_inodes_on_port(port, listening_only=True)
    if not inodes:
        return []
    targets = {f"socket:[{i}]" for i in inodes}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in targets:
                    pids.append(int(entry))
                    break
            except (FileNotFoundError, PermissionError, ProcessLookupError, OSError):
                continue
    return sorted(pids)


def pids_with_port_in_cmdline(port: int, table: Mapping[int, ProcInfo] | None = None) -> list[
    ProcInfo
]:
    """Return Flower processes whose command line names ``127.0.0.1:<port>`` or ``--port <port>``.

    The ports are chosen by the caller, so this finds exactly the SuperLink, SuperExec,
    ``flwr-simulation`` / ``flwr-serverapp`` / ``flwr-clientapp`` processes of one test
    federation, including orphans whose parent already died.
    """
    table = process_table() if table is None else table
    pattern = re.compile(rf"(127\.0\.0\.1:{port}|--port {port})(\s|$)")
    return [
        info for info in table.values()
        if pattern.search(info.cmdline) and re.search(r"fl(owe)?r", info.cmdline)
        and info.state != "Z" and info.pid != os.getpid()
    ]


def private_local_superlink(flwr_home: Path) -> tuple[dict[str, str], int]:
    """The environment of ``flwr run`` for a private local SuperLink, and its HTTP port.

    :func:`flower_env` with its own ``FLWR_HOME`` and free ports for the local SuperLink
    that the first ``flwr run`` starts (never a developer's on 39091); stop it with
    :func:`local_superlink_processes` and :func:`stop_processes`.
    """
    http_port, control_port = free_ports(2)
    env = flower_env(flwr_home, FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(http_port),
                     FLWR_LOCAL_CONTROL_API_PORT=str(control_port))
    return env, http_port


def local_superlink_processes(http_port: int,
                              table: Mapping[int, ProcInfo] | None = None) -> list[ProcInfo]:
    """The local SuperLink listening on ``http_port`` and every process naming that port."""
    table = process_table() if table is None else table
    procs = [table[p] for p in pids_listening_on(http_port) if p in table]
    return procs + pids_with_port_in_cmdline(http_port, table)


# --------------------------------------------------------------------------- stopping


def _signal(key: tuple[int, int], sig: int) -> None:
    if is_running(key):
        try:
            os.kill(key[0], sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_processes(
    roots: Sequence[ProcInfo], timeout: float = 20.0, grace: float = 10.0
) -> list[ProcInfo]:
    """Stop ``roots`` and every process below them, by pid; return the survivors.

    The whole tree is snapshotted first. Then every root gets SIGTERM (Flower's
    SuperLink/SuperNode terminate their SuperExec themselves on SIGTERM), after ``grace``
    seconds every remaining member of the snapshot gets SIGKILL, and the function waits up
    to ``timeout`` seconds for all of them to disappear. A process counts as gone once it
    no longer exists or is a zombie. Recorded start times protect against reused pids.
    """
    table = process_table()
    members = {r.key: r for r in roots if is_running(r.key)}
    for info in descendants([r.pid for r in members.values()], table):
        members.setdefault(info.key, info)
    for root in roots:
        _signal(root.key, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(is_running(k) for k in members):
        time.sleep(0.2)
    # Anything the roots started after the snapshot, while shutting down.
    for info in descendants([k[0] for k in members if is_running(k)]):
        members.setdefault(info.key, info)
    for key in members:
        _signal(key, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(is_running(k) for k in members):
        time.sleep(0.2)
    return [info for key, info in members.items() if is_running(key)]


def describe(procs: Iterable[ProcInfo]) -> str:
    """Return one line per process (pid, state and command line) for messages."""
    return "\n".join(f"  pid {p.pid} [{p.state}] {p.cmdline[:200]}" for p in procs) or "  (none)"


# --------------------------------------------------------------------------- processes


def tail(text: str, n: int = LOG_TAIL_CHARS) -> str:
    """Return the last ``n`` characters of ``text``."""
    return text if len(text) <= n else "...\n" + text[-n:]


def read_log(path: Path) -> str:
    """Return a log file's text ('' if missing)."""
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


@dataclass
class ManagedProcess:
    """A long-running Flower process started by the caller, with its output in a log file."""

    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    popen: subprocess.Popen | None = field(default=None, repr=False)
    info: ProcInfo | None = None

    def start(self) -> ManagedProcess:
        """Start the process in its own session (so it has its own process group)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(
                self.args, env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.info = proc_info(self.popen.pid)
        if self.info is None:  # died at once; keep a record anyway
            self.info = ProcInfo(self.popen.pid, os.getpid(), self.popen.pid, self.popen.pid,
                                 "X", -1, " ".join(self.args))
        return self

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        """The process output so far."""
        return read_log(self.log_path)

    def report(self) -> str:
        """Name, exit status and log tail, for assertion messages."""
        status = "running" if self.alive() else f"exited with {self.popen.returncode}"
        return f"--- {self.name} (pid {self.pid}, {status}) log:\n{tail(self.log())}"


def stop_managed(procs: Sequence[ManagedProcess], timeout: float = 20.0,
                 grace: float = 10.0) -> list[ProcInfo]:
    """Stop processes the caller started and their descendants; reap them; return the survivors.

    ``timeout`` and ``grace`` are :func:`stop_processes`'.
    """
    roots = [p.info for p in procs if p.popen is not None and p.info is not None]
    survivors = stop_processes(roots, timeout=timeout, grace=grace)
    for p in procs:
        if p.popen is not None:
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    return survivors


# --------------------------------------------------------------------------- CLI calls


@dataclass
class CliResult:
    """Outcome of one ``flwr`` CLI call."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        """Stdout and stderr together."""
        return self.stdout + ("\n[stderr]\n" + self.stderr if self.stderr else "")

    def report(self) -> str:
        """Command, exit code and output tail, for assertion messages."""
        return (
            f"$ {' '.join(self.args)}\n(exit {self.returncode}, {self.seconds:.1f} s)\n"
            f"{tail(self.output)}"
        )


def _text(context: str | Callable[[], str]) -> str:
    return context() if callable(context) else context


def run_cli(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float,
    context: str | Callable[[], str] = "",
) -> CliResult:
    """Run a CLI command to completion; on timeout kill its process group and raise.

    ``context`` (text, or a function returning it, for example the server logs at the
    time of failure) is appended to the failure message.
    """
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(args), env=dict(env), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        raise RuntimeError(
            f"timed out after {timeout:.0f} s: $ {' '.join(args)}\n{tail(out + err)}\n"
            f"{_text(context)}"
        ) from None
    return CliResult(list(args), proc.returncode, out, err, time.monotonic() - t0)


def flwr_in_process(
    args: Sequence[str], env: Mapping[str, str], timeout: float = 60.0,
    context: str | Callable[[], str] = "",
) -> CliResult:
    """Run one ``flwr`` CLI command inside this process (Typer's ``CliRunner``).

    ``args`` without the program name, e.g. ``["ls", "deploy", "--format", "json"]``;
    ``env`` must hold the CLI's ``FLWR_HOME``. The same command line as the ``flwr``
    program, for a few milliseconds instead of a new Python process (about 2.3 s of CPU
    each, measured 2026-11-27): the tests that wait for a run poll its status this way,
    so that the polling does not take a core away from the run it waits for. Commands
    that a test checks as a user types them (``flwr run``, the guides' blocks) run as
    processes (:func:`run_cli`). Raises ``RuntimeError`` if the call has not returned
    within ``timeout`` seconds.
    """
    import threading

    from flwr.cli import constant
    from flwr.cli.app import app
    from typer.testing import CliRunner

    # Flower reads the local SuperLink's ports once, when ``flwr.cli`` is imported: a
    # call for a local SuperLink on other ports (each simulation test starts its own)
    # runs as a process, which reads them from ``env`` (CI 2026-11-27: in process it
    # asked the first test's SuperLink, "Run ID not found")
    imported = (str(constant.LOCAL_SUPERLINK_HTTP_API_PORT), str(constant.LOCAL_CONTROL_API_PORT))
    wanted = (env.get(_LOCAL_SUPERLINK_PORTS[0], "39091"),
              env.get(_LOCAL_SUPERLINK_PORTS[1], "39093"))
    if wanted != imported:
        return run_cli([executable("flwr"), *args], env, Path.cwd(), timeout, context)

    # the environment's Flower keys for the call (None: unset during the call)
    keys = ("FLWR_HOME", *FLOWER_ENV, *_LOCAL_SUPERLINK_PORTS)
    call_env = {k: env.get(k) for k in keys}
    outcome: dict[str, Any] = {}

    def call() -> None:
        # ``--format json`` prints to ``sys.__stdout__`` (past any capture): catch it too
        real, sys.__stdout__ = sys.__stdout__, io.StringIO()
        try:
            outcome["result"] = CliRunner().invoke(app, list(args), env=call_env)
        finally:
            outcome["json"], sys.__stdout__ = sys.__stdout__.getvalue(), real

    t0 = time.monotonic()
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    shown = ["flwr", *args]
    if "result" not in outcome:
        raise RuntimeError(f"timed out after {timeout:.0f} s (in process): $ {' '.join(shown)}"
                           f"\n{_text(context)}")
    res = outcome["result"]
    return CliResult(shown, res.exit_code, outcome["json"] + res.stdout, res.stderr,
                     time.monotonic() - t0)


_RUN_ID = re.compile(r"Successfully started run (\d+)")


def parse_run_id(output: str) -> int:
    """Return the run id printed by ``flwr run`` ("Successfully started run <id>")."""
    ids = _RUN_ID.findall(output)
    if len(ids) != 1:
        raise RuntimeError(f"expected one 'Successfully started run <id>' line:\n{tail(output)}")
    return int(ids[0])


def parse_cli_json(output: str) -> Any:
    """Parse the JSON document that a ``flwr ... --format json`` call prints."""
    start = output.find("{")
    if start < 0:
        raise ValueError(f"no JSON object in CLI output:\n{tail(output)}")
    return json.loads(output[start:])


def flwr_ls_run(
    run_id: int, env: Mapping[str, str], cwd: Path, connection: str | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Return the ``flwr ls --run-id <id> --format json`` record of one run.

    Called in this process (:func:`flwr_in_process`); ``cwd`` does not matter to
    ``flwr ls`` and is kept for the callers of :func:`wait_for_run_finished`.
    """
    args = ["ls"] + ([connection] if connection else [])
    args += ["--run-id", str(run_id), "--format", "json"]
    res = flwr_in_process(args, env, timeout)
    try:
        doc = parse_cli_json(res.stdout)
    except ValueError as exc:
        raise RuntimeError(f"{exc}\n{res.report()}") from None
    runs = [r for r in doc.get("runs", []) if str(r.get("run-id")) == str(run_id)]
    if res.returncode != 0 or not doc.get("success") or len(runs) != 1:
        raise RuntimeError(f"flwr ls did not report run {run_id}:\n{res.report()}")
    return runs[0]


def wait_for_run_finished(
    run_id: int, env: Mapping[str, str], cwd: Path, connection: str | None = None,
    timeout: float = 120.0, context: str | Callable[[], str] = "",
) -> dict[str, Any]:
    """Poll ``flwr ls`` until the run's status starts with ``finished``; return its record.

    ``flwr run --stream`` can return a moment before the SuperLink records the final status.
    """
    deadline = time.monotonic() + timeout
    record: dict[str, Any] = {}
    while time.monotonic() < deadline:
        record = flwr_ls_run(run_id, env, cwd, connection)
        if str(record.get("status", "")).startswith("finished"):
            return record
        time.sleep(1.0)
    raise RuntimeError(
        f"run {run_id} not finished after {timeout:.0f} s; last record: {record}\n"
        f"{_text(context)}"
    )


def wait_until(predicate, timeout: float, interval: float = 0.5, message=lambda: "") -> None:
    """Poll ``predicate()`` until it is truthy, else raise ``RuntimeError`` with ``message()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise RuntimeError(f"condition not met after {timeout:.0f} s\n{message()}")
