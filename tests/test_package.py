"""The built package: its description, its sdist, and README's quick start from the wheel.

Run by ``.ci/package`` after ``python -m build`` and ``twine check --strict``, with
``FLWR_CLUSTERING_DIST`` naming the folder of the built wheel and sdist (skipped without
it: building needs a tool environment of its own, see ``.ci/package``). The quick start
installs the wheel into a fresh virtualenv and runs the library's own App from a folder
that holds only docs/own-project.md's ``package-app`` block and a LICENSE, so every line of
our code the run executes comes from the wheel.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from email import message_from_bytes
from pathlib import Path

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

REPO = Path(__file__).resolve().parent.parent
DIST = os.environ.get("FLWR_CLUSTERING_DIST")

pytestmark = [
    pytest.mark.package,
    pytest.mark.skipif(not DIST, reason="FLWR_CLUSTERING_DIST not set: run .ci/package"),
]

#: Flower's own WARNING lines on every simulation of a Flower App (Flower's quick start's
#: too), which no code of an App runs early enough to change: the notice of the default
#: federation's size (``flwr/simulation/app.py``) and the runtime install keeping the
#: running Flower (``Skipping `flwr` dependency``).
FLOWER_NOTICES = ("Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.",
                  "Skipping `flwr` dependency from app requirements")

_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
_PATH = re.compile(r"`((?:docs|tests)/[\w./-]+\.(?:md|py))(?:#[\w-]+)?`")
_BLOCK = re.compile(r"<!-- package-app: (\S+) -->\s*```[a-z]*\n(.*?)```", re.S)


def _one(pattern: str) -> Path:
    found = sorted(Path(DIST).glob(pattern))
    assert len(found) == 1, (pattern, found)
    return found[0]


def _metadata() -> tuple:
    wheel = _one("flwr_clustering-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = message_from_bytes(zf.read(name))
        return msg, zf.namelist()


def test_the_description_is_readme_with_no_relative_link():
    msg, _ = _metadata()
    assert msg["Description-Content-Type"].startswith("text/markdown")
    text = msg.get_payload()
    assert text.startswith("# flwr-clustering\n")
    assert "pip install -e . && flwr run . --stream" in text  # README's quick start
    links = _LINK.findall(text)
    assert links, "README has links"
    relative = [target for _, target in links if not target.startswith(("http://", "https://"))]
    assert not relative, relative
    # README names the pages of the repository by their path, and the sdist has each
    readme_paths = set(_PATH.findall((REPO / "README.md").read_text()))
    assert "docs/index.md" in readme_paths
    with tarfile.open(_one("flwr_clustering-*.tar.gz")) as tf:
        in_sdist = {"/".join(n.split("/")[1:]) for n in tf.getnames()}
    for path in readme_paths:
        assert f"`{path}" in text, path
        assert path in in_sdist, path


def test_the_version_is_declared_once():
    msg, names = _metadata()
    declared = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert msg["Version"] == declared.group(1)
    assert f"## {declared.group(1)}" in (REPO / "CHANGELOG.md").read_text()
    assert any(n.startswith("flwr_clustering/app/server_app.py") for n in names)
    assert not any(n.startswith(("simulations/", "tests/")) for n in names), names


def test_the_quick_start_runs_from_the_wheel(tmp_path):
    wheel = _one("flwr_clustering-*.whl")
    venv = tmp_path / "user-venv"
    # uv (a dependency of Flower's, its runtime installs use it) makes the fresh virtualenv
    # and installs the wheel with its dependencies from the package index: the same
    # install as pip's (which compiles the bytecode too), 118 s -> 35 s here (without
    # the bytecode the run took 74 s instead of 32)
    uv = Path(sys.executable).parent / "uv"
    for args in (["venv", "--quiet", "--python", sys.executable, str(venv)],
                 ["pip", "install", "--quiet", "--compile-bytecode",
                  "--python", str(venv / "bin" / "python"), str(wheel)]):
        done = subprocess.run([str(uv), *args], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr

    blocks = dict(_BLOCK.findall((REPO / "docs" / "own-project.md").read_text()))
    assert set(blocks) == {"pyproject.toml"}, set(blocks)
    app = tmp_path / "clustering-app"
    app.mkdir()
    (app / "pyproject.toml").write_text(blocks["pyproject.toml"])
    (app / "LICENSE").write_text("Copyright the consortium.\n")

    home = tmp_path / "home"
    home.mkdir()
    env, http_port = private_local_superlink(tmp_path / "flwr-home")
    env.update(HOME=str(home), VIRTUAL_ENV=str(venv),
               PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    env.pop("PYTHONPATH", None)  # nothing of the repository on the run's path
    try:
        run = run_cli(["flwr", "run", ".", "--stream"], env, app, 600.0)
        print(f"the quick start from the wheel: {run.seconds:.1f} s, "
              f"{len(run.output.splitlines())} console lines")
        assert run.returncode == 0, run.report()
        status = wait_for_run_finished(parse_run_id(run.output), env, tmp_path, timeout=120,
                                       context=run.report)
        assert status["status"] == "finished:completed", (status, run.report())
        out_dirs = sorted((home / "flwr-clustering-results").glob("fkm-*"))
        assert len(out_dirs) == 1, (out_dirs, run.report())
        result = json.loads((out_dirs[0] / "result.json").read_text())
        assert result["status"] == "completed" and result["algorithm"] == "fkm", result
        # the run's code came from the wheel: the App folder holds no Python at all, and
        # the package the App imported is the user venv's
        assert not list(app.rglob("*.py"))
        site = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import flwr_clustering; print(flwr_clustering.__file__)"],
                              capture_output=True, text=True, check=True, env=env, cwd=app)
        assert site.stdout.startswith(str(venv)), site.stdout
        # clean output: nothing of ours looks like a failure, no line twice
        lines = [x for x in re.sub(r"\x1b\[[0-9;]*m", "", run.output).splitlines()
                 if x.strip() and x.strip() != "INFO :"]
        assert len(lines) == len(set(lines)), [x for x in set(lines) if lines.count(x) > 1]
        alarming = [x for x in lines if re.search(r"WARNING|ERROR|Traceback|failed", x)
                    and not any(notice in x for notice in FLOWER_NOTICES)]
        assert not alarming, alarming
    finally:
        survivors = stop_processes(local_superlink_processes(http_port), timeout=20.0)
        assert not survivors, describe(survivors)
