"""The helpers that drive real Flower processes in the tests, without starting any.

* :func:`~simulations.benchmarks.processes.flwr_in_process` runs a ``flwr`` command in
  this process and returns what the program would print, its ``--format json`` document
  included (Flower prints that to ``sys.__stdout__``, past any capture);
* the test deployments' ``sitecustomize`` shortens exactly Flower's 3-s polling waits,
  and those waits are still in Flower's code (a Flower upgrade that moves them fails
  here, not as slower CI).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

from simulations.benchmarks.deployment import FAST_FLOWER, LocalDeployment
from simulations.benchmarks.processes import flower_env, flwr_in_process, parse_cli_json


def test_flwr_in_process_returns_the_json_the_program_prints(tmp_path):
    env = flower_env(tmp_path / "home")
    (tmp_path / "home" / "config.toml").write_text(
        '[superlink]\ndefault = "x"\n\n[superlink.x]\naddress = "127.0.0.1:9"\ninsecure = true\n')
    real = sys.__stdout__
    res = flwr_in_process(["ls", "missing", "--format", "json"], env, timeout=60)
    assert sys.__stdout__ is real
    doc = parse_cli_json(res.stdout)
    assert doc["success"] is False and "missing" in doc["error-message"], doc


def test_flwr_in_process_runs_a_process_for_a_local_superlink_on_other_ports(tmp_path):
    """Flower reads the local SuperLink's ports at import: other ports need a process."""
    env = flower_env(tmp_path / "home")
    (tmp_path / "home" / "config.toml").write_text(
        '[superlink]\ndefault = "x"\n\n[superlink.x]\naddress = "127.0.0.1:9"\ninsecure = true\n')
    same = flwr_in_process(["ls", "x", "--format", "json"], env, timeout=60)
    env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = "1"
    other = flwr_in_process(["ls", "x", "--format", "json"], env, timeout=60)
    assert same.args[0] == "flwr" and Path(other.args[0]).name == "flwr"
    assert parse_cli_json(same.stdout) == parse_cli_json(other.stdout)


def _sleep_as(module: str, seconds: float, env: dict) -> float:
    code = (f"import time\ng = {{'__name__': {module!r}}}\nt = time.monotonic()\n"
            f"exec('import time; time.sleep({seconds!r})', g)\nprint(time.monotonic() - t)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return float(out.stdout)


def test_the_fast_polling_shortens_only_flowers_polling_waits(tmp_path):
    dep = LocalDeployment(tmp_path, 1, [{}], poll_seconds=0.05)
    env = dep.env(tmp_path / "home")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(FAST_FLOWER)
    assert env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] == "0.05"
    assert _sleep_as("flwr.superlink.grid.http_grid", 3, env) < 1.5
    assert _sleep_as("flwr.supernode.start_client_internal", 3, env) < 1.5
    assert _sleep_as("__main__", 0.6, env) >= 0.6            # any other wait is kept
    assert _sleep_as("flwr.superlink.grid.http_grid", 0.6, env) >= 0.6
    plain = LocalDeployment(tmp_path / "plain", 1, [{}]).env(tmp_path / "home2")
    assert "FLWR_CLUSTERING_TEST_POLL_SECONDS" not in plain


def test_the_shortened_waits_are_still_in_flowers_code():
    import flwr.superlink.grid.http_grid as grid
    import flwr.supernode.start_client_internal as node

    assert "time.sleep(3)" in inspect.getsource(grid.HttpGrid.send_and_receive)
    source = inspect.getsource(node)
    assert "time.sleep(3)" in source and "time.sleep(0.5)" in source
