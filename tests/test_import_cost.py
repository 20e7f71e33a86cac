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
        # what a SuperNode's fresh process per message imports first (issue 52, item 3)
        ("flwr_clustering.app.client_app", (*HEAVY, "flwr_datasets", "sklearn", "scipy")),
    ],
)
def test_data_and_reporting_leave_heavy_packages_out(module, heavy):
    assert _loaded_after(f"import {module}", heavy) == []


def test_the_client_app_loads_no_strategy():
    # a SuperNode starts a process per message: the server's side stays out of it
    assert _loaded_after("import flwr_clustering.app.client_app",
                         ("flwr_clustering.strategies", "flwr_clustering.app.server_app")) == []


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


@pytest.mark.slow
def test_a_message_loads_only_what_its_algorithm_and_file_need(tmp_path):
    """One message in a fresh process, as a SuperNode runs it (issue 52, item 3): an .npz
    file never imports pandas, FKM no scikit-learn (SciPy: its exact distances, cdist);
    a CSV imports pandas to parse it, and the next message's process reads the parsed copy
    without it."""
    import os
    import pickle

    from simulations.benchmarks import site_message

    files = site_message.make_files(tmp_path / "data", rows=200)
    env = {**os.environ, site_message.CACHE_ENV: str(tmp_path / "cache")}
    loaded = {}
    for fmt in ("npz", "csv"):
        recorded = site_message.record_messages(files[fmt], tmp_path / f"run-{fmt}")
        for name, (msg, ctx) in recorded.items():
            spec = tmp_path / f"{fmt}-{name}.pkl"
            spec.write_bytes(pickle.dumps((pickle.dumps(msg), pickle.dumps(ctx))))
            for state in ("cold",) if fmt == "npz" else ("cold", "warm"):
                if state == "cold":
                    for entry in (tmp_path / "cache").glob("*"):
                        entry.unlink()
                result = site_message.run_worker(spec, env)
                assert result["error"] is None, result
                loaded[fmt, name, state] = result["loaded"]
    assert loaded["npz", "data-source", "cold"] == []
    assert loaded["npz", "fkm-update", "cold"] == ["scipy"]
    assert "pandas" in loaded["csv", "data-source", "cold"]
    assert "sklearn" not in loaded["csv", "fkm-update", "cold"]
    assert loaded["csv", "data-source", "warm"] == []
    assert loaded["csv", "fkm-update", "warm"] == ["scipy"]
