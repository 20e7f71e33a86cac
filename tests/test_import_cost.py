"""Importing the library stays cheap: heavy optional packages load on use, not on import.

Not timed (timings depend on the machine): each test imports in a fresh interpreter and checks
which heavy packages ended up in ``sys.modules``.
"""

import subprocess
import sys

import pytest

HEAVY = ("pandas", "pyarrow", "datasets", "matplotlib")


def _loaded_after(statement: str, modules) -> list[str]:
    code = f"import sys; {statement}; print(' '.join(m for m in {tuple(modules)!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_strategies_and_clients_leave_heavy_packages_out():
    # scikit-learn imports pandas (sklearn.utils.fixes), so it stays out too, and the
    # strategies, the clients and the registry load no torch and no SciPy.
    statement = ("import flwr_clustering.strategies, flwr_clustering.clients; "
                 "from flwr_clustering import registry; registry.names()")
    assert _loaded_after(statement, (*HEAVY, "sklearn", "scipy", "torch")) == []


@pytest.mark.parametrize(
    ("module", "heavy"),
    [
        ("flwr_clustering.data", (*HEAVY, "flwr_datasets", "sklearn")),
        ("flwr_clustering.reporting", (*HEAVY, "sklearn")),
    ],
)
def test_data_and_reporting_leave_heavy_packages_out(module, heavy):
    assert _loaded_after(f"import {module}", heavy) == []


def test_lazy_data_names_still_resolve():
    code = (
        "import sys, flwr_clustering.data as d; "
        "assert 'flwr_datasets' not in sys.modules; "
        "from flwr_clustering.data import FeatureMaskPartitioner; "
        "from flwr_datasets.partitioner import Partitioner; "
        "assert issubclass(FeatureMaskPartitioner, Partitioner); "
        "assert all(hasattr(d, n) for n in d.__all__) and set(d.__all__) <= set(dir(d)); "
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
