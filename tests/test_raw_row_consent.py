"""The data owner decides whether raw rows leave a node (node config ``allow-raw-rows``).

A few settings send raw rows by design (FKM ``init='paper'``, DGC ``node-init='random'``,
masked ``local-algorithm='kmedoids'``, KDC's sample and its model, which holds every
site's sample). A node that reads its own file refuses them unless its node config says
``allow-raw-rows=true``; the App stops before round 1, naming the clients and the option;
and every node logs what each of its replies carried, raw rows included.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from flwr_clustering.app.client_app import app as client_app
from flwr_clustering.app.server_app import run_server
from flwr_clustering.clients import FedKMeansClient, KDCClient
from flwr_clustering.data.local_file import save_local_file
from flwr_clustering.data.synthetic import garst_beta_split
from flwr_clustering.testing import InProcessGrid, run_app


def _files(tmp_path, allow=None):
    X, y, c = garst_beta_split(10.0)
    nodes = []
    for i in range(5):
        path = tmp_path / f"site{i}.npz"
        save_local_file(path, X[c == i], y[c == i])
        node = {"data-path": str(path)}
        if allow is not None and allow[i] is not None:
            node["allow-raw-rows"] = allow[i]
        nodes.append(node)
    return nodes, [X[c == i] for i in range(5)]


@pytest.mark.parametrize("algorithm, option, extra", [
    ("fkm", "init='paper'", {"init": "paper"}),
    ("dgc", "node-init='random'", {"node-init": "random", "iterations": 1}),
    ("masked-federated", "local-algorithm='kmedoids'", {"local-algorithm": "kmedoids"}),
    ("kdc", "algorithm='kdc'", {"sample-size": 400, "kdc-auto": False,
                                 "kdc-step2": "kernel-kmeans", "ik-t": 50}),
])
def test_a_node_with_its_own_file_refuses_raw_rows_before_round_1(tmp_path, algorithm,
                                                                    option, extra):
    nodes, _ = _files(tmp_path, allow=[True, None, True, False, True])
    run_config = {"algorithm": algorithm, "dataset": "local", "min-nodes": 3,
                  "out-dir": str(tmp_path / "out"), **extra}
    grid = InProcessGrid(client_app, 5, run_config=run_config, node_configs=nodes)
    with pytest.raises(PermissionError) as err:
        run_server(grid, run_config)
    message = str(err.value)
    assert message.startswith(f"{option} sends raw rows, and clients 1, 3 do not allow")
    assert "allow-raw-rows=true" in message
    # no training message left the server: only the data-source queries
    assert {m.metadata.message_type for m in grid.sent} == {"query"}
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "failed" and "allow-raw-rows" in result["reason"]


def test_with_every_owner_agreeing_the_raw_rows_are_sent_and_logged(tmp_path, caplog):
    nodes, parts = _files(tmp_path, allow=[True] * 5)
    run_config = {"algorithm": "fkm", "init": "paper", "dataset": "local", "max-rounds": 2,
                  "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 5, run_config=run_config, node_configs=nodes)
    with caplog.at_level(logging.INFO, logger="flwr_clustering"):
        run_server(grid, run_config)
    # the rows in the federation's scaled units (scaling='standard'; the server knows
    # the scaling, so a scaled row is a raw row)
    features = json.loads((tmp_path / "out" / "result.json").read_text())["features"]
    center, scale = np.asarray(features["center"]), np.asarray(features["scale"])
    rows = {tuple(r) for X in parts for r in (X - center) / scale}
    seeds = [m.content["arrays"].to_numpy_ndarrays()[0] for m in grid.received
             if m.metadata.message_type == "train" and m.metadata.group_id == "1"]
    assert seeds and all(tuple(r) in rows for s in seeds for r in s)  # they are raw rows
    # every node logged what it sent: 16 raw rows in round 1, none after
    sent = [r.getMessage() for r in caplog.records if "sent " in r.getMessage()
            and r.getMessage().startswith("client ")]
    round1 = [s for s in sent if "round 1 train (init)" in s]
    assert len(round1) == 5 and all(s.endswith("16 raw rows") for s in round1), round1
    later = [s for s in sent if "round 2 train" in s or "evaluate" in s]
    assert later and all(s.endswith(" 0 raw rows") for s in later), later


def test_nodes_without_a_file_hold_public_partitions_and_may_send_rows(tmp_path):
    """Simulated nodes (built-in partitions) allow raw rows unless their config says no."""
    run_config = {"algorithm": "fkm", "init": "paper", "max-rounds": 1, "beta": 10.0,
                  "out-dir": str(tmp_path / "a")}
    run_app(run_config, 5)
    refusing = [{"allow-raw-rows": False}] + [{}] * 4
    run_config = {**run_config, "out-dir": str(tmp_path / "b")}
    with pytest.raises(PermissionError, match="client 0 does not allow raw rows"):
        run_app(run_config, 5, node_configs=refusing)


def test_the_client_itself_refuses_whatever_the_server_does():
    """A server that skips the App's check still gets an error reply, not rows."""
    X, y, c = garst_beta_split(10.0)
    client = FedKMeansClient(X[c == 0], client_id=0)
    client.allow_raw_rows = False
    with pytest.raises(PermissionError, match=r"client 0: init='paper' would send the "
                                              r"k-means\+\+ seeds.*allow-raw-rows=true"):
        client.fit([], {"phase": "init", "init": "paper", "k": 16, "seed": 0})
    # the private init sends means, and is allowed
    arrays, n, metrics = client.fit([], {"phase": "init", "k": 16, "seed": 0})
    assert "raw-rows" not in metrics and len(arrays[0]) > 0
    kdc = KDCClient(X[c == 0], client_id=0)
    kdc.allow_raw_rows = False
    for phase in ("sample", "assign"):
        with pytest.raises(PermissionError, match="KDC"):
            kdc.fit([], {"phase": phase, "size": 10, "seed": 0})


def test_a_bad_allow_raw_rows_value_is_an_error(tmp_path):
    from flwr_clustering.app.client_app import node_flag

    assert node_flag({"allow-raw-rows": "true"}, "allow-raw-rows", default=False) is True
    assert node_flag({}, "allow-raw-rows", default=False) is False
    with pytest.raises(ValueError, match="allow-raw-rows must be true or false"):
        node_flag({"allow-raw-rows": "yes please"}, "allow-raw-rows", default=False)

