"""The server knows where the clients' data came from (issue "no silent wrong result", 2).

Round 0 of the App is one ``QUERY`` message per node, phase ``data-source``: the run is
refused when the run config names another source than the nodes read, and the pooled /
centralized side results are computed only when the pooled data is the clients' data.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from flwr_clustering.app.client_app import app as client_app
from flwr_clustering.app.server_app import run_server
from flwr_clustering.clients.integrity import data_hash
from flwr_clustering.data.local_file import save_local_file
from flwr_clustering.data.registry import load_partition
from flwr_clustering.protocol import DATA_SOURCE_PHASE
from flwr_clustering.strategies.base import ClusteringStrategy
from flwr_clustering.testing import InProcessGrid

RC = {"dataset": "blobs", "n-samples": 120, "centers": 3, "k": 3, "partitioner": "iid",
      "max-rounds": 2, "early-stop": False}


@pytest.fixture(autouse=True)
def _no_settle(monkeypatch):
    # an in-process grid has all its nodes at once: skip run_server's 1 s settle only
    wait = ClusteringStrategy.wait_for_nodes
    monkeypatch.setattr(ClusteringStrategy, "wait_for_nodes",
                        lambda self, grid, settle=0.0: wait(self, grid))


def _files(tmp_path, n):
    paths = []
    for i in range(n):
        X, y = load_partition(i, n, dataset="blobs", n_samples=120, centers=3,
                              partitioner="iid")
        paths.append(tmp_path / f"client{i}.npz")
        save_local_file(paths[-1], X * 2.0 + 1.0, y)  # the user's own rows
    return paths


def _result(out_dir):
    return json.loads((out_dir / "result.json").read_text())


def test_built_in_config_with_nodes_reading_files_is_refused_before_round_1(tmp_path):
    files = _files(tmp_path, 3)
    rc = {**RC, "out-dir": str(tmp_path / "out")}
    # nodes 0 and 2 read files; node 1 loads its built-in partition
    grid = InProcessGrid(client_app, 3, run_config=rc,
                         node_configs=[{"data-path": str(files[0])}, {},
                                       {"data-path": str(files[2])}])
    with pytest.raises(ValueError, match=r"clients 0, 2 read local files .*"
                                         r"dataset='blobs'.*dataset='local'"):
        run_server(grid, rc)
    assert [m.metadata.message_type for m in grid.sent] == ["query"] * 3  # no TRAIN
    assert all(m.content["config"]["phase"] == DATA_SOURCE_PHASE for m in grid.sent)
    assert _result(tmp_path / "out")["status"] == "failed"


def test_local_config_with_a_node_without_data_path_is_refused(tmp_path):
    files = _files(tmp_path, 2)
    rc = {**RC, "dataset": "local", "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 3, run_config=rc,
                         node_configs=[{"data-path": str(files[0])},
                                       {"data-path": str(files[1])}, {}])
    with pytest.raises(ValueError,
                       match=r"dataset='local' but client 2 \(node 102\) has no data-path"):
        run_server(grid, rc)
    assert {m.metadata.message_type for m in grid.sent} == {"query"}


def test_matching_built_in_run_records_sources_and_pooled_results(tmp_path):
    rc = {**RC, "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 3, run_config=rc)
    out = run_server(grid, rc)
    assert out["centralized"] is not None
    result = _result(tmp_path / "out")
    assert "centralized" in result and "federated-on-pooled" in result
    assert "pooled-skipped" not in result
    sources = result["data-sources"]
    assert [s["client-id"] for s in sources] == [0, 1, 2]
    for i, s in enumerate(sources):
        X, _ = load_partition(i, 3, dataset="blobs", n_samples=120, centers=3,
                              partitioner="iid")
        assert s["source"] == "built-in" and s["matches-server"]
        assert (s["rows"], s["features"], s["hash"]) == (len(X), X.shape[1], data_hash(X))
        assert (s["partition-id"], s["num-partitions"]) == (i, 3)


def test_a_client_with_another_partition_gives_no_pooled_results(tmp_path, caplog):
    # node 2 was started with num-partitions=4 (a stale node config): its rows are not the
    # server's partition 2 of 3; the run goes on, the side results are not computed
    rc = {**RC, "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 3, run_config=rc,
                         node_configs=[{}, {}, {"num-partitions": 4}])
    with caplog.at_level("WARNING"):
        out = run_server(grid, rc)
    assert out["centralized"] is None
    result = _result(tmp_path / "out")
    assert result["status"] == "completed"
    assert "centralized" not in result and "federated-on-pooled" not in result
    why = result["pooled-skipped"]
    assert "client 2" in why and "num-partitions=4" in why
    assert [s["matches-server"] for s in result["data-sources"]] == [True, True, False]
    assert any("no pooled or centralized results" in r.getMessage() for r in caplog.records)


def test_the_data_source_phase_does_not_change_the_numbers(tmp_path):
    # same run with and without the phase (the strategy alone, no App): same centroids
    from flwr_clustering.app.config import build_strategy, merged_config
    from flwr_clustering.app.data_source import query_data_sources

    rc = {**RC, "out-dir": str(tmp_path / "out")}
    cfg = merged_config(rc)
    ref = build_strategy(cfg).start(grid=InProcessGrid(client_app, 3, run_config=rc))
    strategy = build_strategy(cfg)
    grid = InProcessGrid(client_app, 3, run_config=rc)
    sources, absent = query_data_sources(grid, strategy, grid.get_node_ids())
    assert len(sources) == 3 and absent == {}
    got = strategy.start(grid=grid)
    np.testing.assert_array_equal(got.arrays["centroids"].numpy(),
                                  ref.arrays["centroids"].numpy())
