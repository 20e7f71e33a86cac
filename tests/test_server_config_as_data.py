"""Nothing a server sends makes a client open a path or run code.

The run config reaches every ClientApp from whoever submitted the run, and every message
carries the strategy's config: both are parsed as data. Paths come only from the node
config (``data-path``); option values are typed and bounded; an algorithm given by module
path is imported on a node that reads its own file only when the node config allows it.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, MessageType, RecordDict

from flwr_clustering.app.client_app import app, client_fn
from flwr_clustering.data.local_file import save_local_file
from flwr_clustering.options import INT_CEILING
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid


def _context(run_config, node_config=None):
    return Context(run_id=1, node_id=100, node_config={"partition-id": 0,
                                                       "num-partitions": 2,
                                                       **(node_config or {})},
                   state=RecordDict(), run_config=run_config)


@pytest.mark.parametrize("dataset", ["/etc/passwd", "../../data/site0.csv",
                                     "file:///etc/hosts"])
def test_a_path_like_dataset_is_refused_not_opened(dataset, monkeypatch):
    opened = []
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a) or 1 / 0)
    monkeypatch.setattr(np, "load", lambda *a, **k: opened.append(a) or 1 / 0)
    with pytest.raises(ValueError, match=r"client 0: the run config's dataset=.* is not a "
                                         r"built-in data set.*never opens a path.*data-path"):
        client_fn(_context({"dataset": dataset}))
    assert opened == []


def test_a_huge_k_in_the_run_config_is_refused_by_the_client():
    with pytest.raises(ValueError, match=rf"k must be at most {INT_CEILING}, got 10+"):
        client_fn(_context({"k": 10**12}))


def test_a_huge_k_in_a_message_gets_an_error_reply_naming_it():
    """A message config (not only the run config) is parsed with the same bounds."""
    grid = InProcessGrid(app, 2)
    for phase, mtype in (("init", MessageType.TRAIN), ("kfed", MessageType.TRAIN)):
        msg = grid.create_message(
            RecordDict({"arrays": ArrayRecord([]),
                        "config": ConfigRecord({"phase": phase, "k": 10**12, "seed": 0})}),
            mtype, 100, "1")
        (reply,) = grid.send_and_receive([msg])
        assert reply.has_error()
        assert f"k must be at most {INT_CEILING}" in reply.error.reason
        assert reply.error.reason.startswith("client 0")


def test_every_integer_option_is_bounded():
    from flwr_clustering import registry

    checked = 0
    for name in registry.names(listed_only=False):
        options = registry.get(name).options
        for key, f in options.fields_by_key().items():
            if f.type not in (int, "int") or f.metadata.get("choices"):
                continue
            with pytest.raises(ValueError, match="at most"):
                options.from_config({key: 10**12})
            checked += 1
    assert checked > 30, checked


def test_a_strategy_cannot_be_built_with_a_huge_k():
    with pytest.raises(ValueError, match="k must be at most"):
        FedKMeans(10**9)


def _evil_module(tmp_path, monkeypatch, name="evil_algorithm_xyz"):
    """A module whose import leaves a mark (what a server could try to make a node run)."""
    (tmp_path / f"{name}.py").write_text(
        "import os\nos.environ['EVIL_ALGORITHM_IMPORTED'] = '1'\n"
        "from flwr_clustering.registry import get\nSPEC = get('fkm')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("EVIL_ALGORITHM_IMPORTED", raising=False)
    monkeypatch.delitem(sys.modules, name, raising=False)
    return f"{name}:SPEC"


def test_a_node_with_its_own_data_imports_no_module_the_server_names(tmp_path, monkeypatch):
    import os

    algorithm = _evil_module(tmp_path, monkeypatch)
    data = tmp_path / "site0.npz"
    save_local_file(data, np.random.default_rng(0).normal(size=(40, 2)))
    node = {"data-path": str(data)}
    with pytest.raises(ValueError, match=r"imports no module named by the server.*"
                                         r"allow-algorithms='evil_algorithm_xyz:SPEC'"):
        client_fn(_context({"algorithm": algorithm, "dataset": "local"}, node))
    assert "EVIL_ALGORITHM_IMPORTED" not in os.environ
    assert "evil_algorithm_xyz" not in sys.modules
    # the data owner allows it by name: then it loads
    client = client_fn(_context({"algorithm": algorithm, "dataset": "local"},
                                {**node, "allow-algorithms": f"other:X, {algorithm}"}))
    assert os.environ.get("EVIL_ALGORITHM_IMPORTED") == "1"
    assert len(client.X) == 40


def test_a_simulated_node_may_load_a_module_algorithm(tmp_path, monkeypatch):
    """No data-path: a built-in partition, as in simulation (the echo benchmark)."""
    import os

    algorithm = _evil_module(tmp_path, monkeypatch, "simulated_algorithm_xyz")
    client_fn(_context({"algorithm": algorithm}))
    assert os.environ.get("EVIL_ALGORITHM_IMPORTED") == "1"
