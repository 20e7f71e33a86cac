"""A real local deployment: one SuperLink and SuperNode processes on 127.0.0.1.

Used by the deployment tests (``pytest -m deployment``) and the fault-injection tests:
every process, port, ``FLWR_HOME`` and database belongs to the caller and is stopped by
pid. SuperNodes can be killed, frozen (SIGSTOP) and restarted one by one, and the
SuperLink can be killed and restarted on the same port and database, so a test can do to
a federation what a crash or a lost machine does.

The CLI (``flwr``) has its own ``FLWR_HOME`` with one connection, :data:`CONNECTION`, to
the SuperLink's Control API.

By default every process runs with ``--insecure``. A production-shaped deployment (TLS,
SuperNode authentication) passes its own command lines instead: ``superlink_args`` (the
SuperLink's argv), ``supernode_args`` (SuperNode ``i``'s argv) and ``cli_config`` (the
CLI's ``config.toml``, whose connection is named ``connection``);
``tests/test_deployment_secure.py`` takes them from the commands of docs/deployment.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .processes import (
    CliResult,
    ManagedProcess,
    descendants,
    executable,
    flower_env,
    flwr_in_process,
    free_ports,
    parse_cli_json,
    parse_run_id,
    port_is_open,
    run_cli,
    stop_managed,
    wait_for_run_finished,
    wait_until,
)

#: The name of the CLI's connection to the local SuperLink.
CONNECTION = "deploy"

#: The polling wait (seconds) of the test deployments (``LocalDeployment.poll_seconds``):
#: Flower's 3-s waits cost a 5-round FKM run on 3 SuperNodes 96-114 s against 77-84 s
#: with 0.2 s (measured 2026-11-27, 2 cores, one run each).
TEST_POLL_SECONDS = 0.2

#: The repository root: the Flower App that ``flwr run .`` builds into a FAB.
REPO_ROOT = Path(__file__).resolve().parents[2]

#: The files of the repository's Flower App that its FAB needs (``pyproject.toml`` names
#: the ServerApp and ClientApp in ``flwr_clustering``).
APP_FILES = ("pyproject.toml", "README.md", "LICENSE", "flwr_clustering")


def app_copy(dest: Path, source: Path = REPO_ROOT) -> Path:
    """Copy the Flower App's own files (:data:`APP_FILES`) to ``dest``; return ``dest``.

    ``flwr run <app>`` builds its FAB by resolving every file under the app folder
    before it applies its exclude patterns (Flower 1.41 and 1.42,
    ``flwr.cli.utils.collect_files``): with this repository's ``.venv`` inside (about
    50,000 files) that costs 4-6 s per ``flwr run``, with CI's two virtualenvs 7.5 s
    (measured 2026-12-07, ``flwr build``; 0.9 s without them). The tests that submit
    many runs submit them from this copy; the README's ``flwr run .`` from the
    repository root stays tested where a test runs it (its first simulation run).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in APP_FILES:
        src = Path(source) / name
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


#: The folder whose ``sitecustomize.py`` shortens Flower's polling waits.
FAST_FLOWER = Path(__file__).resolve().parent / "fast_flower"


def node_config(values: dict[str, Any]) -> str:
    """Format a SuperNode's ``--node-config`` (TOML values: strings in single quotes)."""
    parts = []
    for key, value in values.items():
        if isinstance(value, str | Path):
            if "'" in str(value):
                raise ValueError(f"node-config value of {key!r} contains a single quote")
            parts.append(f"{key}='{value}'")
        elif isinstance(value, bool):
            parts.append(f"{key}={str(value).lower()}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


@dataclass
class LocalDeployment:
    """The processes, ports and folders of one local deployment.

    Parameters
    ----------
    tmp : Path
        The folder that holds every home, database and log.
    num_nodes : int
        How many SuperNode slots (ports) to reserve.
    node_configs : list of dict
        The node config of each SuperNode (``partition-id``, ``data-path``, ...).
    superlink_args : list of str, optional
        The SuperLink's whole argv (program first, e.g. from :func:`executable`); by default
        an ``--insecure`` SuperLink on ``127.0.0.1:link_port`` with its database in its home.
        It must listen on ``127.0.0.1:link_port`` (the start waits for that port).
    supernode_args : callable, optional
        ``supernode_args(i)`` is SuperNode ``i``'s whole argv; by default an ``--insecure``
        SuperNode with ``node_configs[i]`` on ``node_ports[i]``.
    cli_config : str, optional
        The text of the CLI's ``config.toml``; by default one insecure connection,
        ``connection``, to ``127.0.0.1:link_port``.
    connection : str
        The name of the CLI's connection that :meth:`online_nodes`, :meth:`submit`,
        :meth:`finished` and :meth:`run_log` use.
    cwd : Path, optional
        The working folder of every process (relative paths in the argvs); ``tmp`` by default.
    poll_seconds : float, optional
        Shorten Flower's polling waits to this many seconds in every process (the tests
        use :data:`TEST_POLL_SECONDS`): the 3-s waits written into Flower 1.41's SuperNode
        and ServerApp loops (``simulations/benchmarks/fast_flower/sitecustomize.py``)
        and the SuperExec's task polling
        (``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``, Flower's own setting). ``None`` (the
        default, and every benchmark) runs Flower as it ships.
    app : Path
        The Flower App that the callers submit (``submit(dep.app, ...)``): the repository
        root by default; the tests pass a copy of its files (:func:`app_copy`).

    The ports are reserved before the argvs are needed: build ``superlink_args`` and
    ``cli_config`` after construction from ``link_port`` (then :meth:`configure_cli`), or
    make the ports first with :func:`free_ports` and pass ``link_port`` / ``node_ports``.
    """

    tmp: Path
    num_nodes: int
    node_configs: list[dict[str, Any]]
    link_port: int = 0
    node_ports: list[int] = field(default_factory=list)
    superlink_args: list[str] | None = None
    supernode_args: Callable[[int], list[str]] | None = None
    cli_config: str | None = None
    connection: str = CONNECTION
    cwd: Path | None = None
    poll_seconds: float | None = None
    app: Path = REPO_ROOT
    superlink: ManagedProcess | None = None
    supernodes: dict[int, ManagedProcess] = field(default_factory=dict)
    #: Every process ever started (restarts included), for stopping and logs.
    started: list[ManagedProcess] = field(default_factory=list)
    cli_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.link_port:
            self.link_port, *self.node_ports = free_ports(self.num_nodes + 1)
        elif len(self.node_ports) < self.num_nodes:
            raise ValueError(f"{self.num_nodes} SuperNodes but node_ports={self.node_ports}")
        self.cwd = self.cwd or self.tmp
        self.cli_env = flower_env(self.tmp / "cli-home")
        self.configure_cli(self.cli_config)

    def configure_cli(self, text: str | None = None, connection: str | None = None) -> None:
        """Write the CLI's ``config.toml`` (``None``: one insecure connection to the SuperLink)."""
        if connection is not None:
            self.connection = connection
        if text is None:
            text = (f'[superlink]\ndefault = "{self.connection}"\n\n'
                    f'[superlink.{self.connection}]\naddress = "127.0.0.1:{self.link_port}"\n'
                    "insecure = true\n")
        self.cli_config = text
        (Path(self.cli_env["FLWR_HOME"]) / "config.toml").write_text(text)

    # ------------------------------------------------------------------ processes
    def env(self, flwr_home: Path) -> dict[str, str]:
        """The environment of one process: :func:`flower_env`, shorter polls if set."""
        if self.poll_seconds is None:
            return flower_env(flwr_home)
        path = os.pathsep.join(p for p in [str(FAST_FLOWER), os.environ.get("PYTHONPATH")] if p)
        return flower_env(flwr_home, PYTHONPATH=path,
                          FLWR_CLUSTERING_TEST_POLL_SECONDS=str(self.poll_seconds),
                          FLWR_SUPEREXEC_TASK_POLL_INTERVAL=str(self.poll_seconds))

    def start_superlink(self, timeout: float = 60.0) -> ManagedProcess:
        """Start (or restart) the SuperLink on its ports and database; wait for its ports."""
        home = self.tmp / "superlink-home"
        n = sum(p.name.startswith("superlink") for p in self.started)
        args = self.superlink_args or [
            executable("flower-superlink"), "--insecure",
            "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(self.link_port),
            "--database", str(home / "state.db")]
        proc = ManagedProcess(
            f"superlink#{n}", list(args), self.env(home),
            self.tmp / "logs" / f"superlink{n}.log", cwd=self.cwd,
        ).start()
        self.superlink = proc
        self.started.append(proc)
        wait_until(lambda: port_is_open(self.link_port) or not proc.alive(), timeout,
                   message=self.logs)
        if not proc.alive():
            raise RuntimeError(f"the SuperLink exited at start\n{self.logs()}")
        return proc

    def start_supernode(self, i: int) -> ManagedProcess:
        """Start (or restart) SuperNode ``i`` with its node config (or ``supernode_args(i)``)."""
        n = sum(p.name.startswith(f"supernode{i}#") for p in self.started)
        if self.supernode_args is not None:
            args = self.supernode_args(i)
        else:
            args = [executable("flower-supernode"), "--insecure",
                    "--superlink", f"127.0.0.1:{self.link_port}",
                    "--host", "127.0.0.1", "--port", str(self.node_ports[i]),
                    "--node-config", node_config(self.node_configs[i])]
        proc = ManagedProcess(
            f"supernode{i}#{n}", list(args), self.env(self.tmp / f"supernode{i}-home"),
            self.tmp / "logs" / f"supernode{i}-{n}.log", cwd=self.cwd,
        ).start()
        self.supernodes[i] = proc
        self.started.append(proc)
        return proc

    def start_process(self, name: str, args: list[str], cwd: Path | None = None,
                      env: dict[str, str] | None = None) -> ManagedProcess:
        """Start one more process (e.g. a SuperNode that must be refused), outside the slots.

        It gets its own ``FLWR_HOME`` and log, is not one of :attr:`supernodes` (so
        :meth:`wait_online` does not require it to live), and :meth:`stop` stops it by pid.
        """
        if name.startswith("superlink"):
            raise ValueError(f"{name!r}: names starting with 'superlink' are the SuperLink's")
        n = sum(p.name.startswith(f"{name}#") for p in self.started)
        proc = ManagedProcess(
            f"{name}#{n}", list(args), env or self.env(self.tmp / f"{name}-home"),
            self.tmp / "logs" / f"{name}-{n}.log", cwd=cwd or self.cwd,
        ).start()
        self.started.append(proc)
        return proc

    def start(self) -> LocalDeployment:
        """Start the SuperLink and every SuperNode."""
        self.start_superlink()
        for i in range(self.num_nodes):
            self.start_supernode(i)
        return self

    def kill(self, proc: ManagedProcess) -> None:
        """Kill one process and everything below it at once (SIGKILL: a crash)."""
        for pid in [proc.pid, *[d.pid for d in descendants([proc.pid])]]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def shut_down(self, proc: ManagedProcess, grace: float = 15.0) -> list:
        """Stop one process as its owner would (SIGTERM); return what survived ``grace`` s.

        A SuperNode stopped so deactivates its node at the SuperLink on its way out, so
        the SuperLink lists it offline at once (a killed one stays "online" until its
        heartbeat lapses, 2 x 30 s). What still runs after ``grace`` seconds is killed.
        """
        return stop_managed([proc], timeout=grace + 5.0, grace=grace)

    @staticmethod
    def pause(proc: ManagedProcess, resume: bool = False) -> None:
        """Freeze (SIGSTOP) or thaw (SIGCONT) one process, as a hung machine would."""
        os.kill(proc.pid, signal.SIGCONT if resume else signal.SIGSTOP)

    @property
    def processes(self) -> list[ManagedProcess]:
        """Every process started, the SuperLink's last (SuperNodes and others first)."""
        links = [p for p in self.started if p.name.startswith("superlink")]
        return [*[p for p in self.started if p not in links], *links]

    def logs(self) -> str:
        """Every process log, for assertion messages."""
        return "\n".join(p.report() for p in self.processes)

    def stop(self, grace: float = 3.0) -> list:
        """Stop every process started (and its children) by pid; return the survivors.

        SIGTERM first, SIGKILL for what still runs ``grace`` seconds later (a SuperNode's
        SuperExec outlives its SIGTERM by about 10 s; nothing of a test deployment needs
        a clean shutdown: its state is thrown away).
        """
        for p in self.processes:  # a frozen process ignores SIGTERM until thawed
            if p.alive():
                try:
                    self.pause(p, resume=True)
                except ProcessLookupError:
                    pass
        return stop_managed(self.processes, timeout=20.0, grace=grace)

    # ------------------------------------------------------------------------ CLI
    def cli(self, *args: str, timeout: float = 60.0, cwd: Path | None = None) -> CliResult:
        """Run ``flwr <args>`` with the CLI's own FLWR_HOME."""
        return run_cli([executable("flwr"), *args], self.cli_env, cwd or self.tmp, timeout,
                       context=self.logs)

    def online_nodes(self) -> list[dict]:
        """The SuperNodes that ``flwr supernode list`` reports online."""
        return [n for n in self.supernode_list() if n.get("status") == "online"]

    def supernode_list(self) -> list[dict]:
        """Every SuperNode ``flwr supernode list`` reports (any status; [] if it fails)."""
        res = flwr_in_process(["supernode", "list", self.connection, "--format", "json"],
                              self.cli_env)
        if res.returncode != 0:
            return []
        try:
            return parse_cli_json(res.stdout).get("nodes", [])
        except ValueError:
            return []

    def wait_online(self, n: int, timeout: float = 120.0) -> None:
        """Wait until ``n`` SuperNodes are online (raise if a process died)."""
        wait_until(lambda: len(self.online_nodes()) >= n
                   or not all(p.alive() for p in [self.superlink, *self.supernodes.values()]),
                   timeout=timeout, interval=1.0, message=self.logs)
        assert all(p.alive() for p in [self.superlink, *self.supernodes.values()]), self.logs()

    def submit(self, app: Path, run_config: str, stream: bool = False,
               timeout: float = 300.0) -> tuple[int, CliResult]:
        """``flwr run <app> deploy [--stream] --run-config ...``; return (run id, CLI result)."""
        args = ["run", str(app), self.connection, *(["--stream"] if stream else []),
                "--run-config", run_config]
        res = self.cli(*args, timeout=timeout, cwd=app)
        if res.returncode != 0:
            raise RuntimeError(f"flwr run failed\n{res.report()}\n{self.logs()}")
        return parse_run_id(res.output), res

    def finished(self, run_id: int, timeout: float = 300.0) -> dict[str, Any]:
        """Wait until the run has finished; return its ``flwr ls`` record."""
        return wait_for_run_finished(run_id, self.cli_env, self.tmp, connection=self.connection,
                                     timeout=timeout, context=self.logs)

    def run_log(self, run_id: int, timeout: float = 60.0) -> str:
        """The ServerApp's log of a run (``flwr log <id>``, without following it)."""
        res = flwr_in_process(["log", str(run_id), self.connection, "--show"], self.cli_env,
                              timeout=timeout)
        return res.output


def read_json(path: Path) -> Any:
    """Load a JSON file."""
    return json.loads(Path(path).read_text())


def round_seconds(out_dir: Path) -> list[float]:
    """The seconds of every finished round of a run (``seconds`` in its ``history.json``)."""
    return [float(h["seconds"]) for h in read_json(Path(out_dir) / "history.json")]


def wait_for_file(path: Path, timeout: float, message=lambda: "") -> float:
    """Wait until ``path`` exists; return the time it appeared (``time.monotonic``)."""
    wait_until(lambda: Path(path).exists(), timeout, interval=0.2, message=message)
    return time.monotonic()
