"""End-to-end: a ``flwr run`` simulation attached to an EXISTING Ray cluster.

How it works (flwr 1.41, ray 2.55.1): the Ray backend of the simulation runtime calls
``ray.init(runtime_env=..., include_dashboard=False, **init_args)`` without an ``address``
(``flwr/server/superlink/fleet/vce/backend/raybackend.py``), and the federation config has
no address key (``SimulationConfig`` only knows ``init-args-num-cpus/-num-gpus/
-logging-level/-log-to-driver``). So Ray's own discovery decides: ``RAY_ADDRESS`` in the
environment of the ``flwr-simulation`` process, else the address file of the latest
``ray start`` on this machine (``<ray temp dir>/ray_current_cluster``), else a new local
instance. ``flwr-simulation`` inherits its environment from ``flower-superexec``, which
inherits it from ``flower-superlink``, which inherits it from the ``flwr run`` call that
started the local SuperLink daemon: ``RAY_ADDRESS`` must be set when the SuperLink starts
(later ``flwr run`` calls cannot change it).

This module starts a Ray head node on 127.0.0.1 (``ray start --head --block``, free ports,
a private temp dir so that no other ``ray.init()`` on the machine discovers it), runs the
App's default FKM simulation through a private local SuperLink started with
``RAY_ADDRESS=127.0.0.1:<port>``, and the same run through a SuperLink started with
``RAY_ADDRESS=local`` (its own Ray instance, the default behaviour). Every process is
stopped by pid; ``ray stop`` is never used (it kills every Ray process of the machine).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from simulations.benchmarks.processes import (
    CliResult,
    ManagedProcess,
    ProcInfo,
    describe,
    executable,
    flower_env,
    free_ports,
    local_superlink_processes,
    parse_run_id,
    pids_with_port_in_cmdline,
    port_is_open,
    proc_info,
    process_table,
    read_log,
    run_cli,
    stop_processes,
    tail,
    wait_for_run_finished,
    wait_until,
)

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 300.0  # one `flwr run --stream`: 30-45 s on 2 busy cores
NUM_SUPERNODES = 5
HEAD_CPUS = 2  # the external cluster's CPUs: 2 ClientApp actors of 1 CPU each
FEDERATION_CONFIG = f"num-supernodes={NUM_SUPERNODES} client-resources-num-cpus=1"
#: scaling='none': the runs are compared with the pure loop on the raw partitions (the
#: scaled App is tested in-process and in tests/test_deployment_data.py)
RUN_CONFIG = "max-rounds=3 scaling='none'"
#: The address file that a plain `ray.init()` on this machine would read (default temp dir).
DEFAULT_ADDRESS_FILE = (Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp")
                        / "ray" / "ray_current_cluster")
#: `ray start` options that take a port: all of them get free ports, none the defaults.
RAY_PORT_OPTIONS = (
    "port", "node-manager-port", "object-manager-port", "ray-client-server-port",
    "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
    "metrics-export-port",
)
ACTOR_PID = re.compile(r"\(ClientAppActor pid=(\d+)\)")


def _file_state(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def _repo_snapshot() -> dict[str, object]:
    return {
        "entries": sorted(p.name for p in REPO_ROOT.iterdir()),
        "pyproject": (REPO_ROOT / "pyproject.toml").read_text(),
    }


# --------------------------------------------------------------------------- the Ray head


@dataclass
class RayHead:
    """A Ray head node started with ``ray start --head --block`` (the root of its processes)."""

    proc: ManagedProcess
    root: Path  # short private dir under /tmp (Ray's unix sockets need short paths)
    ports: dict[str, int]

    @property
    def address(self) -> str:
        """The GCS address to put in ``RAY_ADDRESS``."""
        return f"127.0.0.1:{self.ports['port']}"

    @property
    def temp_dir(self) -> Path:
        return self.root / "ray"

    def logs_dir(self) -> Path:
        return self.temp_dir / "session_latest" / "logs"

    def jobs(self) -> list[dict]:
        """The cluster's job table (GCS), asked by a short-lived driver of its own."""
        code = (
            "import json, ray\n"
            "ray.init(logging_level='ERROR', log_to_driver=False)\n"
            "jobs = [{k: j.get(k) for k in ('JobID', 'DriverPid', 'IsDead', 'Entrypoint')}\n"
            "        for j in ray._private.state.jobs()]\n"
            "print('JOBS=' + json.dumps(jobs))\n"
            "ray.shutdown()\n"
        )
        env = dict(os.environ, RAY_ADDRESS=self.address, RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0")
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120, cwd=self.root)
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("JOBS=")]
        assert res.returncode == 0 and line, f"{tail(res.stdout + res.stderr)}\n{self.report()}"
        return json.loads(line[0][len("JOBS="):])

    def report(self) -> str:
        return self.proc.report()

    def leftovers(self) -> list[ProcInfo]:
        """Live processes of the head: its session, or naming its temp dir or GCS port."""
        assert self.proc.info is not None
        gcs = f":{self.ports['port']}"
        return [
            p for p in process_table().values()
            if p.state != "Z" and p.pid != os.getpid()
            and (p.sid == self.proc.info.sid or str(self.root) in p.cmdline
                 or re.search(rf"{re.escape(gcs)}(\s|$)", p.cmdline))
        ]


@pytest.fixture(scope="module")
def ray_head():
    address_file_before = _file_state(DEFAULT_ADDRESS_FILE)
    root = Path(tempfile.mkdtemp(prefix="flwr-ray-", dir="/tmp"))
    ports = dict(zip(RAY_PORT_OPTIONS, free_ports(len(RAY_PORT_OPTIONS)), strict=True))
    args = [executable("ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
            f"--num-cpus={HEAD_CPUS}", "--num-gpus=0", "--include-dashboard=false",
            "--disable-usage-stats", f"--temp-dir={root / 'ray'}"]
    args += [f"--{name}={port}" for name, port in ports.items()]
    env = dict(os.environ, RAY_TMPDIR=str(root))
    env.pop("RAY_ADDRESS", None)
    head = RayHead(ManagedProcess("ray-head", args, env, root / "ray-head.log", cwd=root).start(),
                   root, ports)
    try:
        # `ray start` prints "Ray runtime started" and only then writes its address file:
        # wait for the file, not the line (on a loaded machine the two are seconds apart).
        address_file = head.temp_dir / "ray_current_cluster"
        wait_until(lambda: address_file.is_file() or not head.proc.alive(),
                   timeout=120, message=head.report)
        assert head.proc.alive() and port_is_open(ports["port"]), head.report()
        assert "Ray runtime started" in head.proc.log(), head.report()
        # The address file went into the private temp dir, not /tmp/ray: no other
        # `ray.init()` on the machine (another test's simulation) attaches to this head.
        assert address_file.is_file()
        assert _file_state(DEFAULT_ADDRESS_FILE) == address_file_before
        yield head
    finally:
        survivors = stop_processes([head.proc.info], timeout=30.0, grace=15.0)
        try:
            head.proc.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        left = head.leftovers()
        shutil.rmtree(root, ignore_errors=True)
        assert not survivors, f"Ray head processes still running:\n{describe(survivors)}"
        assert not left, f"Ray head processes still running:\n{describe(left)}"
        assert not port_is_open(ports["port"]), f"GCS port {ports['port']} still open"
        assert _file_state(DEFAULT_ADDRESS_FILE) == address_file_before


# --------------------------------------------------------------------------- SuperLinks


@dataclass
class Run:
    cli: CliResult
    run_id: int
    status: dict
    out_dir: Path


@dataclass
class LocalSuperLink:
    """A private local SuperLink (own FLWR_HOME and ports), started by its first `flwr run`."""

    tmp: Path
    http_port: int
    env: dict[str, str]
    seen: dict[tuple[int, int], ProcInfo] = field(default_factory=dict)

    def log(self) -> str:
        path = Path(self.env["FLWR_HOME"]) / "local-superlink" / "superlink.log"
        return f"--- local SuperLink log:\n{tail(read_log(path))}"

    def remember_processes(self) -> None:
        for info in local_superlink_processes(self.http_port):
            self.seen.setdefault(info.key, info)

    def run(self, name: str, federation_config: str = FEDERATION_CONFIG) -> Run:
        out_dir = self.tmp / f"out-{name}"
        cli = run_cli(
            [executable("flwr"), "run", ".", "--stream", "--federation-config",
             federation_config, "--run-config", f"{RUN_CONFIG} out-dir='{out_dir}'"],
            self.env, REPO_ROOT, RUN_TIMEOUT, context=self.log,
        )
        self.remember_processes()
        print(f"flwr run ({name}): {cli.seconds:.1f} s")
        assert cli.returncode == 0, f"{cli.report()}\n{self.log()}"
        run_id = parse_run_id(cli.output)
        status = wait_for_run_finished(run_id, self.env, self.tmp, timeout=120.0,
                                       context=lambda: f"{cli.report()}\n{self.log()}")
        return Run(cli, run_id, status, out_dir)

    def stop(self) -> list[ProcInfo]:
        self.remember_processes()
        return stop_processes([i for i in self.seen.values() if proc_info(i.pid)], timeout=20.0)


@pytest.fixture(scope="module")
def superlinks(ray_head, tmp_path_factory):
    """Factory of private local SuperLinks; all stopped by pid (before the Ray head)."""
    before = _repo_snapshot()
    links: list[LocalSuperLink] = []

    def make(name: str, ray_address: str) -> LocalSuperLink:
        tmp = tmp_path_factory.mktemp(f"superlink-{name}")
        http_port, control_port = free_ports(2)
        env = flower_env(tmp / "flwr-home", RAY_ADDRESS=ray_address,
                         FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(http_port),
                         FLWR_LOCAL_CONTROL_API_PORT=str(control_port))
        links.append(LocalSuperLink(tmp, http_port, env))
        return links[-1]

    try:
        yield make
    finally:
        survivors = [p for link in links for p in link.stop()]
        left = [p for link in links for p in pids_with_port_in_cmdline(link.http_port)]
        assert not survivors, f"still running after stop:\n{describe(survivors)}"
        assert not left, f"still running after stop:\n{describe(left)}"
        assert _repo_snapshot() == before, "flwr run changed the repo root"


@pytest.fixture(scope="module")
def attached(superlinks, ray_head):
    """A local SuperLink started with RAY_ADDRESS=<the head>, and its FKM run."""
    link = superlinks("attached", ray_head.address)
    jobs_before = ray_head.jobs()
    return link, link.run("fkm-attached"), jobs_before


@pytest.fixture(scope="module")
def baseline(superlinks, attached):
    """The same run with its own Ray instance (RAY_ADDRESS=local: never attach)."""
    link = superlinks("own-ray", "local")
    return link, link.run("fkm-own-ray")


# --------------------------------------------------------------------------- tests


def _finished_ok(run: Run, link: LocalSuperLink) -> dict:
    assert run.status["status"] == "finished:completed", (
        f"run {run.run_id}: {run.status['status']} ({run.status.get('status-details')})\n"
        f"{run.cli.report()}\n{link.log()}"
    )
    result_file = run.out_dir / "result.json"
    assert result_file.is_file(), run.cli.report()
    return json.loads(result_file.read_text())


def test_attached_run_completes_and_equals_own_ray_run(attached, baseline):
    link, run, _ = attached
    res = _finished_ok(run, link)
    own_link, own_run = baseline
    own_res = _finished_ok(own_run, own_link)
    assert res["algorithm"] == own_res["algorithm"] == "fkm"
    assert res["rounds"] == own_res["rounds"] == 3
    assert res["federated"]["num-examples"] == 800
    history = json.loads((run.out_dir / "history.json").read_text())
    assert [h["clients"] for h in history] == [NUM_SUPERNODES] * 3, history
    with np.load(run.out_dir / "centroids.npz") as a, np.load(own_run.out_dir /
                                                              "centroids.npz") as b:
        assert a.files == b.files
        for name in a.files:  # the final model and every round's centroids, bit for bit
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        centroids = a["centroids"]
    # ... and both equal the pure loop.
    from flwr_clustering.algorithms.fkm import run_fkm
    from flwr_clustering.app.config import dataset_kwargs, merged_config
    from flwr_clustering.data.registry import load_partition

    cfg = merged_config({})
    data = [load_partition(i, NUM_SUPERNODES, **dataset_kwargs(cfg))[0]
            for i in range(NUM_SUPERNODES)]
    ref = run_fkm(data, 16, seed=0, max_rounds=3, tol=1e-6)
    np.testing.assert_allclose(centroids, ref.centroids, rtol=0, atol=1e-9)


def test_attached_run_used_the_external_cluster(attached, baseline, ray_head):
    link, run, jobs_before = attached
    own_link, _ = baseline
    _finished_ok(run, link)
    jobs = ray_head.jobs()

    def flower_jobs(port: int, table: list[dict]) -> list[dict]:
        return [j for j in table if "flwr-simulation" in (j["Entrypoint"] or "")
                and f"--runtime-api-address 127.0.0.1:{port}" in j["Entrypoint"]]

    # The cluster's job table gained exactly one driver: the attached SuperLink's
    # flwr-simulation process, which disconnected (ray.shutdown) when the run ended.
    assert not flower_jobs(link.http_port, jobs_before), jobs_before
    mine = flower_jobs(link.http_port, jobs)
    assert len(mine) == 1, json.dumps(jobs, indent=1)
    assert mine[0]["IsDead"] is True, mine
    # The run with its own Ray instance never touched the external cluster.
    assert not flower_jobs(own_link.http_port, jobs), json.dumps(jobs, indent=1)
    assert not [j for j in jobs if "flwr-simulation" in (j["Entrypoint"] or "")
                and j not in mine], json.dumps(jobs, indent=1)

    # The ClientApp actors whose logs Flower streamed ran as workers of this head: their
    # worker log files (named after the job and the pid; Flower logs to stderr) are in
    # the head's session.
    actor_pids = set(ACTOR_PID.findall(run.cli.output))
    assert actor_pids, run.cli.report()
    job_id = mine[0]["JobID"]
    worker_logs = sorted(ray_head.logs_dir().glob(f"worker-*-{job_id}-*.out"))
    worker_pids = {p.stem.rsplit("-", 1)[1] for p in worker_logs}
    assert actor_pids <= worker_pids, (actor_pids, [p.name for p in worker_logs])
    # Flower sized its actor pool from the external cluster's CPUs (2 x 1 CPU).
    assert len(worker_pids) == HEAD_CPUS, [p.name for p in worker_logs]
    actor_text = "".join(p.with_suffix(ext).read_text(errors="replace")
                         for p in worker_logs for ext in (".out", ".err"))
    assert "round 3" in actor_text and "client 0" in actor_text, tail(actor_text)

    # The external cluster outlived the run.
    assert ray_head.proc.alive() and port_is_open(ray_head.ports["port"]), ray_head.report()


def test_init_args_num_cpus_is_refused_when_attached(attached, ray_head):
    """Ray refuses num_cpus / num_gpus for a driver that connects to a cluster: the run
    fails at start-up (and `flwr run --stream` still exits 0, so ask `flwr ls`)."""
    link, _, _ = attached
    run = link.run("fkm-init-args", f"{FEDERATION_CONFIG} init-args-num-cpus={HEAD_CPUS}")
    assert run.status["status"] == "finished:failed", run.status
    assert ("When connecting to an existing cluster, num_cpus and num_gpus must not be "
            "provided") in run.cli.output, run.cli.report()
    assert not (run.out_dir / "result.json").exists()
    assert ray_head.proc.alive() and port_is_open(ray_head.ports["port"]), ray_head.report()
