"""Fault injection on a real deployment: SuperLink and SuperNode processes on 127.0.0.1.

What a crash, a lost machine or a hung one does to a federation, done to real processes:

* a SuperNode whose CSV was written with its row index is refused, by file and column,
  until its node config declares the index; a headerless CSV is read as data;
* a SuperNode killed mid-run (SIGKILL): with ``min-nodes`` allowing it the run finishes,
  the rounds without it name it (client id) in the history, and restarted it rejoins;
* a frozen SuperNode (SIGSTOP): its round ends within ``round-timeout`` without it;
* the SuperLink killed after round 3 (its ServerApp with it): restarted on its database,
  ``resume-from`` finishes the run, and the result equals an uninterrupted run bit for bit
  (the same App on the same files in-process: every round's model, history and metrics).

Every process, port and folder belongs to the test and is stopped by pid at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulations.benchmarks.deployment import TEST_POLL_SECONDS, LocalDeployment, read_json
from simulations.benchmarks.processes import describe, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.deployment]

NUM_CLIENTS = 3
#: Long enough for a normal deployment round on a busy 2-core box (7-15 s measured).
ROUND_TIMEOUT = 30.0


def _garst_parts():
    from flwr_clustering.data.synthetic import GARST_OBSERVERS, garst_beta_split

    X, y, client = garst_beta_split(10.0, observers=GARST_OBSERVERS[:NUM_CLIENTS])
    return [(X[client == i], y[client == i]) for i in range(NUM_CLIENTS)]


def _history(out_dir: Path) -> list[dict]:
    try:
        return read_json(out_dir / "history.json")
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def _wait_rounds(dep: LocalDeployment, out_dir: Path, n: int, timeout: float = 300.0) -> float:
    """Wait until ``n`` rounds are on disk; return the time (``time.monotonic``)."""
    wait_until(lambda: len(_history(out_dir)) >= n or (out_dir / "result.json").exists(),
               timeout, interval=0.2, message=dep.logs)
    assert len(_history(out_dir)) >= n, (read_json(out_dir / "result.json"), dep.logs())
    return time.monotonic()


@pytest.fixture
def deployments(tmp_path, app_dir):
    made: list[LocalDeployment] = []

    def make(name: str, configs: list[dict]) -> LocalDeployment:
        dep = LocalDeployment(tmp_path / name, len(configs), configs,
                              poll_seconds=TEST_POLL_SECONDS, app=app_dir)
        made.append(dep)
        return dep.start()

    yield make
    for dep in made:
        survivors = dep.stop()
        assert not survivors, f"still running after stop:\n{describe(survivors)}"


def test_local_file_checks_a_lost_a_restarted_and_a_frozen_supernode(tmp_path, deployments):
    parts = _garst_parts()
    data = tmp_path / "data"
    data.mkdir()
    # client 0: a CSV without a header row, its label the last column (declared by position)
    frame0 = pd.DataFrame(parts[0][0]).assign(label=parts[0][1])
    frame0.to_csv(data / "client0.csv", header=False, index=False)
    # client 1: a CSV written with pandas' default index (an "Unnamed: 0" column)
    frame1 = pd.DataFrame(parts[1][0], columns=["x0", "x1"]).assign(label=parts[1][1])
    frame1.to_csv(data / "client1.csv")
    np.savez(data / "client2.npz", X=parts[2][0], y=parts[2][1])
    configs = [
        {"partition-id": 0, "num-partitions": 3, "data-path": data / "client0.csv",
         "label-column": "2"},
        {"partition-id": 1, "num-partitions": 3, "data-path": data / "client1.csv"},
        {"partition-id": 2, "num-partitions": 3, "data-path": data / "client2.npz"},
    ]
    dep = deployments("faults", configs)
    dep.wait_online(NUM_CLIENTS)

    # 1. The undeclared index column is refused on its SuperNode; the run fails, naming
    #    the client, the file, the column and the node-config key; result.json says so.
    refused = tmp_path / "refused"
    run_id, _ = dep.submit(dep.app, f"dataset='local' min-nodes=3 max-rounds=2 "
                                      f"out-dir='{refused}'")
    record = dep.finished(run_id)
    assert record["status"] == "finished:failed", (record, dep.logs())
    result = read_json(refused / "result.json")
    assert result["status"] == "failed"
    assert "client 1" in result["reason"] and "client1.csv" in result["reason"], result
    assert "'Unnamed: 0'" in result["reason"] and "index-column" in result["reason"], result

    # The owner declares the index: SuperNode 1 is stopped (SIGTERM, as its owner would:
    # it deactivates its node at the SuperLink on its way out; a killed one would stay
    # "online" until its heartbeat lapsed, 2 x 30 s) and restarts with it.
    before = {n["node-id"] for n in dep.online_nodes()}
    t_stop = time.monotonic()
    assert not dep.shut_down(dep.supernodes[1]), dep.logs()
    configs[1]["index-column"] = "Unnamed: 0"
    dep.start_supernode(1)
    wait_until(lambda: len(ids := {n["node-id"] for n in dep.online_nodes()}) == 3
               and ids - before, 180, 1.0, dep.logs)
    print(f"SuperNode stopped and restarted -> 3 nodes online: "
          f"{time.monotonic() - t_stop:.1f} s")

    # 2. A run that loses a SuperNode, gets it back and then waits out a frozen one.
    out = tmp_path / "run"
    run_id, _ = dep.submit(
        dep.app, f"dataset='local' min-nodes=2 max-rounds=10 early-stop=false "
                   f"split-check=false "
                   f"round-timeout={ROUND_TIMEOUT} out-dir='{out}'")
    _wait_rounds(dep, out, 2)
    dep.kill(dep.supernodes[2])
    t_kill = time.monotonic()
    t_next = _wait_rounds(dep, out, 3)
    print(f"SuperNode killed -> next completed round: {t_next - t_kill:.1f} s "
          f"(round-timeout {ROUND_TIMEOUT:g} s)")
    dep.start_supernode(2)
    wait_until(lambda: any(h["clients"] == 3 for h in _history(out)[3:])
               or (out / "result.json").exists(), 300, 0.5, dep.logs)
    back = next(h["round"] for h in _history(out)[3:] if h["clients"] == 3)
    dep.pause(dep.supernodes[1])
    t_freeze = time.monotonic()
    frozen_round = back + 1
    t_after = _wait_rounds(dep, out, frozen_round)
    dep.pause(dep.supernodes[1], resume=True)
    print(f"SuperNode frozen -> next completed round: {t_after - t_freeze:.1f} s")

    record = dep.finished(run_id, timeout=600)
    assert record["status"] == "finished:completed", (record, dep.logs())
    result = read_json(out / "result.json")
    history = _history(out)
    assert result["status"] == "completed" and result["rounds"] == len(history) == 10
    log = dep.run_log(run_id)

    # The headerless CSV was read as data (301 rows, not 300) and the index dropped.
    sources = {s["client-id"]: s for s in result["data-sources"]}
    assert [(sources[i]["rows"], sources[i]["features"]) for i in range(3)] == [
        (len(X), 2) for X, _ in parts]

    # Rounds 1-2: all three clients. Round 3: client 2 is gone, named by its client id
    # (a round-timeout, or the SuperLink's "Node Unavailable" once its heartbeat lapsed).
    assert [h["clients"] for h in history[:2]] == [3, 3]
    assert "absent" not in history[0] and "absent" not in history[1]
    assert history[2]["clients"] == 2
    assert [a["client"] for a in history[2]["absent"]] == [2], history[2]
    lost = history[2]["absent"][0]["reason"]
    assert (f"round-timeout={ROUND_TIMEOUT:g} s" in lost or "Node Unavailable" in lost), lost
    assert "client 2 (node" in log and "node 1 failed" not in log, log
    # Every round until it is back misses client 2 (and only it); then it rejoined.
    for h in history[2:back - 1]:
        assert h["clients"] == 2 and 2 in [a["client"] for a in h["absent"]], h
    assert history[back - 1]["clients"] == 3
    # The frozen SuperNode's round ended within round-timeout without client 1 (the killed
    # SuperNode's old node id may still be listed too, until its heartbeat lapses).
    frozen = history[frozen_round - 1]
    assert frozen["clients"] == 2, frozen
    reasons = {a["client"]: a["reason"] for a in frozen["absent"]}
    assert reasons[1] == f"did not reply within round-timeout={ROUND_TIMEOUT:g} s", frozen
    assert set(reasons) <= {1, 2}, frozen
    assert frozen["seconds"] < ROUND_TIMEOUT + 10, frozen
    # Thawed, it answers again: the last round and the final evaluation have every row.
    assert history[-1]["clients"] == 3, history[-1]
    assert result["federated"]["num-examples"] == sum(len(X) for X, _ in parts) == 800
    assert result["federated"]["ari"] > 0.8, result["federated"]


@pytest.mark.parametrize(("algorithm", "overrides", "kill_after"), [
    # killed after round 2 of 4: two rounds from the checkpoint, two after the resume
    ("fkm", {"max-rounds": 4, "early-stop": False}, 2),
    # DGC: 1 init round + iterations x inner steps; the relay's per-node messages
    ("dgc", {"iterations": 3, "rho": 10.0}, 2),
])
def test_superlink_killed_then_resumed_equals_an_uninterrupted_run(
        tmp_path, deployments, algorithm, overrides, kill_after):
    from flwr_clustering.app.client_app import app
    from flwr_clustering.app.server_app import run_server
    from flwr_clustering.data.local_file import save_local_file
    from flwr_clustering.testing import InProcessGrid

    configs = []
    for i, (X, y) in enumerate(_garst_parts()):
        path = tmp_path / f"client{i}.npz"
        save_local_file(path, X, y)
        configs.append({"partition-id": i, "num-partitions": 3, "data-path": path})
    dep = deployments("link", configs)
    # (the split check, after the last round, is tested on a deployment elsewhere)
    run_config = {"algorithm": algorithm, "dataset": "local", "min-nodes": 3, **overrides,
                  "round-timeout": 120.0, "split-check": False}
    base = " ".join(f"{key}={value!r}" if isinstance(value, str) else
                    f"{key}={str(value).lower()}" for key, value in run_config.items())

    # The uninterrupted run: the same App on the same files and node configs, in-process
    # (the deployment equals it bit for bit; seconds instead of the deployment's minute).
    whole = tmp_path / "uninterrupted"
    rc = {**run_config, "out-dir": str(whole)}
    run_server(InProcessGrid(app, NUM_CLIENTS, run_config=rc,
                             node_configs=[{**c, "data-path": str(c["data-path"])}
                                           for c in configs]), rc)
    assert read_json(whole / "result.json")["status"] == "completed"
    dep.wait_online(NUM_CLIENTS)

    out = tmp_path / "interrupted"
    dep.submit(dep.app, f"{base} out-dir='{out}'")
    _wait_rounds(dep, out, kill_after)
    dep.kill(dep.superlink)  # the ServerApp dies with it
    t_kill = time.monotonic()
    assert not (out / "result.json").exists()
    assert len(_history(out)) == kill_after
    dep.start_superlink()
    dep.wait_online(NUM_CLIENTS)
    print(f"{algorithm}: SuperLink killed after round {kill_after}, back with "
          f"{NUM_CLIENTS} SuperNodes online after {time.monotonic() - t_kill:.1f} s")
    run_id, _ = dep.submit(dep.app, f"{base} out-dir='{out}' resume-from='{out}'")
    assert dep.finished(run_id, timeout=600)["status"] == "finished:completed", dep.logs()

    # Bit for bit: every round's model, the history (but its wall times), the metrics.
    a, b = read_json(whole / "result.json"), read_json(out / "result.json")
    assert b["resumed-after-round"] == kill_after and b["rounds"] == a["rounds"]
    assert a["federated"] == b["federated"]
    for name in ["centroids.npz"] + (["nodes.npz"] if algorithm == "dgc" else []):
        with np.load(whole / name) as x, np.load(out / name) as y:
            assert x.files == y.files, name
            for key in x.files:
                np.testing.assert_array_equal(x[key], y[key], err_msg=f"{name}:{key}")

    def strip(history):
        return [{k: v for k, v in h.items() if k != "seconds"} for h in history]

    assert strip(_history(whole)) == strip(_history(out))
