import ast
import logging
import os
from functools import cache
from pathlib import Path

import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("MPLBACKEND", "Agg")

#: What a test module imports (anywhere in its file) when it runs Flower's code: Flower
#: itself, or the library's Flower layer (grids, clients, strategies, the App, the legacy
#: adapter, secure aggregation, the estimator).
FLOWER_MODULES = ("flwr", "flwr_clustering.testing", "flwr_clustering.clients",
                  "flwr_clustering.strategies", "flwr_clustering.app", "flwr_clustering.legacy",
                  "flwr_clustering.secure", "flwr_clustering.estimator")


@cache
def runs_flower(path: Path) -> bool:
    """Whether the test module at ``path`` imports Flower or the library's Flower layer."""
    source = path.read_text()
    if "FederatedClustering" in source:  # the estimator, imported lazily from the package
        return True
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        if any(n == m or n.startswith(m + ".") for n in names for m in FLOWER_MODULES):
            return True
    return False


def pytest_addoption(parser):
    parser.addoption(
        "--flower-only", action="store_true",
        help="run only the test modules that run Flower's code (runs_flower): CI runs the "
             "suite on the oldest Flower the pin allows this way, the pure cores once")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--flower-only"):
        return
    kept, left = [], []
    for item in items:
        (kept if runs_flower(Path(str(item.fspath))) else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


@pytest.fixture(scope="session")
def garst_beta10():
    from flwr_clustering.data.synthetic import garst_beta_split

    return garst_beta_split(10.0)


@pytest.fixture
def log(caplog):
    """``caplog`` with its handler on the library's logger too, capturing from INFO up.

    The records of ``flwr_clustering`` reach the test even where they do not propagate to
    the root logger; a record that also propagates is captured twice.
    """
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO)
    yield caplog
    logger.removeHandler(caplog.handler)


@pytest.fixture(scope="session")
def app_dir(tmp_path_factory):
    """The Flower App's files, copied once per session (``flwr run`` from it is 4-7 s faster).

    :func:`simulations.benchmarks.deployment.app_copy`: Flower's FAB build resolves every
    file under the app folder, the repository's virtualenvs included.
    """
    from simulations.benchmarks.deployment import app_copy

    return app_copy(tmp_path_factory.mktemp("flower-app"))


@pytest.fixture(autouse=True, scope="session")
def _data_cache(tmp_path_factory):
    """The parsed copies of the sites' files (data.site_cache) in a folder of the session,
    not in the user's ``~/.flwr`` (the tests' subprocesses inherit it)."""
    from flwr_clustering.data.site_cache import CACHE_DIR_ENV

    before = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(tmp_path_factory.mktemp("data-cache"))
    yield
    if before is None:
        os.environ.pop(CACHE_DIR_ENV, None)
    else:
        os.environ[CACHE_DIR_ENV] = before
