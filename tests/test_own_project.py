"""docs/own-project.md as written: a user's own Flower project, built and run with `flwr run`.

The page's blocks tagged ``<!-- own-project: NAME -->`` are the project's files (NAME is the
path) and the commands (``run``). This test writes the files into an empty folder (with
the ``LICENSE`` and the empty ``__init__.py`` the page lists), runs the ``run`` block's
lines with bash but its ``pip install`` of this library (installed already), on a private
local SuperLink (free ports, its own ``FLWR_HOME``), and checks that the run completed,
that the strategy's progress reached the console without any logging setup, and that the
ServerApp wrote the model. The SuperLink that ``flwr run`` leaves running is stopped by pid.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from simulations.benchmarks.processes import (
    describe,
    local_superlink_processes,
    parse_run_id,
    private_local_superlink,
    run_cli,
    stop_processes,
    wait_for_run_finished,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = Path(__file__).resolve().parent.parent / "docs" / "own-project.md"
_BLOCK = re.compile(r"<!-- own-project: (\S+) -->\s*```[a-z]*\n(.*?)```", re.S)


def blocks() -> dict[str, str]:
    found = _BLOCK.findall(PAGE.read_text())
    names = [name for name, _ in found]
    assert len(names) == len(set(names)), names
    # the run block is indented inside a list item
    return {name: "\n".join(line.removeprefix("   ") for line in code.splitlines()) + "\n"
            for name, code in found}


def test_the_page_has_the_project_and_its_commands():
    assert set(blocks()) == {"pyproject.toml", "my_clustering/server_app.py",
                             "my_clustering/client_app.py", "run"}


def test_an_own_project_runs_on_its_first_flwr_run(tmp_path):
    project = tmp_path / "my-clustering"
    (project / "my_clustering").mkdir(parents=True)
    (project / "LICENSE").write_text("Copyright the consortium.\n")
    (project / "my_clustering" / "__init__.py").write_text("")
    commands = []
    for name, text in blocks().items():
        if name == "run":
            installs = [x for x in text.splitlines() if x.startswith("pip install")]
            assert len(installs) == 1 and "flwr-clustering" in installs[0], text
            commands = [x for x in text.splitlines() if x.strip() and x not in installs]
        else:
            (project / name).write_text(text)
    assert commands[-1] == "flwr run . --stream", commands

    env, http_port = private_local_superlink(tmp_path / "flwr-home")
    # flower_env disables the runtime install itself: the page's export must do it here
    env.pop("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION")
    try:
        run = run_cli(["bash", "-euo", "pipefail", "-c", "\n".join(commands)], env, project,
                      600.0)
        print(f"the own project's first flwr run: {run.seconds:.1f} s")
        assert run.returncode == 0, run.report()
        status = wait_for_run_finished(parse_run_id(run.output), env, tmp_path, timeout=120,
                                       context=run.report)
        assert status["status"] == "finished:completed", (status, run.report())
        lines = re.sub(r"\x1b\[[0-9;]*m", "", run.output).splitlines()
        # the strategy's progress, as Flower's own strategies', with no logging set up
        assert any(x.startswith("INFO :      [ROUND 1/20]") for x in lines), run.output
        assert any(re.match(r"INFO :      fkm (finished|converged)", x) for x in lines), run.output
        written = list((tmp_path).rglob("centroids.npy"))
        assert len(written) == 1, (written, run.report())
        print(f"the ServerApp wrote {written[0].relative_to(tmp_path)}")
        centroids = np.load(written[0])
        assert centroids.shape == (16, 2) and np.all(np.isfinite(centroids))
    finally:
        survivors = stop_processes(local_superlink_processes(http_port), timeout=20.0)
        assert not survivors, describe(survivors)
