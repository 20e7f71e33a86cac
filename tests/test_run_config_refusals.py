"""What a run config can make the ServerApp do, and refusals that read as refusals.

Issue 50, items 4 and 5 (the App's side): a run config names no file the ServerApp reads
unless the operator allowed its directory; a run refused before round 1 says why in one
ERROR line and in ``result.json`` (also before the strategy exists), lists every client's
reason, and sends nothing after the last round-0 reply (in-process App).
"""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest
from flwr.app import Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flwr_clustering.algorithms.dgc import build_graph, edge_list_graph, ring_graph
from flwr_clustering.app import server_app
from flwr_clustering.app.client_app import app as client_app
from flwr_clustering.app.config import merged_config
from flwr_clustering.app.paths import (
    ALLOWED_PATHS_ENV,
    check_run_config_algorithm,
    check_run_config_paths,
)
from flwr_clustering.app.server_app import RunRefused, run_server
from flwr_clustering.data.local_file import save_local_file
from flwr_clustering.data.registry import load_partition
from flwr_clustering.protocol import FEATURE_MOMENTS_PHASE
from flwr_clustering.strategies.base import ClusteringStrategy
from flwr_clustering.strategies.fkm import FedKMeans
from flwr_clustering.testing import InProcessGrid

RC = {"dataset": "blobs", "n-samples": 120, "centers": 3, "k": 3, "partitioner": "iid",
      "max-rounds": 2, "early-stop": False, "split-check": False}
DGC = {"algorithm": "dgc", "dataset": "blobs", "n-samples": 90, "centers": 3, "k": 3,
       "min-nodes": 3, "iterations": 2, "split-check": False}
SECRET = "name=Ada Lovelace;born=1815-12-10"


@pytest.fixture(autouse=True)
def _no_settle(monkeypatch):
    # an in-process grid has all its nodes at once: skip run_server's 1 s settle only
    wait = ClusteringStrategy.wait_for_nodes
    monkeypatch.setattr(ClusteringStrategy, "wait_for_nodes",
                        lambda self, grid, settle=0.0: wait(self, grid))
    monkeypatch.delenv(ALLOWED_PATHS_ENV, raising=False)


def _result(out_dir) -> dict:
    return json.loads((out_dir / "result.json").read_text())


def _secret_file(directory):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "graph.txt"
    path.write_text(SECRET + "\n")
    return path


def _errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR and r.name.startswith("flwr_clustering")]


# ------------------------------------------------------------- paths a run config names
@pytest.mark.parametrize("graph", ["/etc/passwd", "/proc/self/environ", "secret"])
def test_a_graph_file_outside_the_allowed_paths_is_refused_before_any_message(
        tmp_path, caplog, graph):
    if graph == "secret":
        graph = str(_secret_file(tmp_path / "files"))
    rc = {**DGC, "graph": graph, "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 3, run_config=rc)
    with caplog.at_level(logging.INFO), pytest.raises(PermissionError) as err:
        run_server(grid, rc)
    message = str(err.value)
    assert message.startswith("run-config key 'graph': ")
    assert "'0-1,1-2,2-0'" in message and ALLOWED_PATHS_ENV in message
    assert grid.sent == []  # nothing read, nothing sent
    result = _result(tmp_path / "out")
    assert result["status"] == "failed" and result["refused"] is True
    assert result["reason"] == message and result["error-type"] == "PermissionError"
    written = (tmp_path / "out" / "result.json").read_text() + caplog.text
    assert "root:" not in written and "PATH=" not in written and "Lovelace" not in written
    assert _errors(caplog) == [f"run refused before round 1: {message} (written to "
                               f"{tmp_path / 'out' / 'result.json'})"]


def test_an_allowed_graph_file_is_read_and_a_bad_one_named_without_its_content(tmp_path):
    allowed = tmp_path / "graphs"
    secret = _secret_file(allowed)
    rc = {**DGC, "graph": str(secret), "out-dir": str(tmp_path / "bad")}
    with pytest.raises(ValueError) as err:
        run_server(InProcessGrid(client_app, 3, run_config=rc), rc, allowed_paths=[allowed])
    assert str(err.value).startswith(f"graph file {str(secret)!r} is not an adjacency matrix")
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert "Lovelace" not in (tmp_path / "bad" / "result.json").read_text()
    good = allowed / "ring.txt"
    np.savetxt(good, ring_graph(3), fmt="%d")
    rc = {**DGC, "graph": str(good), "out-dir": str(tmp_path / "good")}
    out = run_server(InProcessGrid(client_app, 3, run_config=rc), rc,
                     allowed_paths=str(allowed))
    np.testing.assert_array_equal(out["strategy"].adjacency, ring_graph(3))


def test_the_environment_allows_a_directory_and_a_link_out_of_it_is_refused(
        tmp_path, monkeypatch):
    allowed = tmp_path / "graphs"
    allowed.mkdir()
    inside = allowed / "ring.npy"
    np.save(inside, ring_graph(3))
    link = allowed / "link.txt"
    link.symlink_to(_secret_file(tmp_path / "elsewhere"))
    monkeypatch.setenv(ALLOWED_PATHS_ENV, f"{tmp_path / 'other'}:{allowed}")
    check_run_config_paths(merged_config({**DGC, "graph": str(inside)}))
    check_run_config_paths(merged_config({**DGC, "graph": str(allowed / ".." / "graphs"
                                                                / "ring.npy")}))
    for outside in (link, allowed / ".." / "elsewhere" / "graph.txt"):
        with pytest.raises(PermissionError, match="run-config key 'graph': .*allowed "
                                                  "directories are .*graphs"):
            check_run_config_paths(merged_config({**DGC, "graph": str(outside)}))
    # the key only matters to DGC: another algorithm never reads it
    check_run_config_paths(merged_config({"graph": "/etc/passwd"}))


def test_resume_from_is_confined_to_the_allowed_directories_once_the_operator_sets_them(
        tmp_path):
    cfg = merged_config({"resume-from": str(tmp_path / "run")})
    check_run_config_paths(cfg)  # no allow-list: an App checkpoint anywhere, as before
    check_run_config_paths(cfg, [tmp_path])
    with pytest.raises(PermissionError, match="run-config key 'resume-from': .* outside"):
        check_run_config_paths(cfg, [tmp_path / "runs"])


def test_an_inline_edge_list_is_a_graph(tmp_path):
    A = edge_list_graph("0-1, 1-2,2-0", 3)
    np.testing.assert_array_equal(A, np.ones((3, 3)) - np.eye(3))
    np.testing.assert_array_equal(build_graph("0-1,1-2", 3), build_graph("1-0,2-1,", 3))
    for text, match in [("0-1,1-3", "edge 1-3: the federation has 3 nodes"),
                        ("0-0,0-1,1-2", "not its own neighbour"),
                        ("0-1", "not connected over the 3 nodes")]:
        with pytest.raises(ValueError, match=match):
            edge_list_graph(text, 3)
    rc = {**DGC, "graph": "0-1,1-2", "out-dir": str(tmp_path / "path")}
    out = run_server(InProcessGrid(client_app, 3, run_config=rc), rc)
    np.testing.assert_array_equal(out["strategy"].adjacency, edge_list_graph("0-1,1-2", 3))
    with np.load(tmp_path / "path" / "nodes.npz") as nodes:
        np.testing.assert_array_equal(nodes["adjacency"], edge_list_graph("0-1,1-2", 3))


def test_a_python_program_is_its_own_operator_and_reads_its_graph_file(tmp_path):
    path = tmp_path / "ring.txt"
    np.savetxt(path, ring_graph(4), fmt="%d")
    np.testing.assert_array_equal(build_graph(str(path), 4), ring_graph(4))


# ----------------------------------------------------------- the run config's own keys
@pytest.mark.parametrize("key, value", [("seed", -5), ("data-seed", -1)])
def test_a_negative_seed_is_refused_naming_the_key_and_the_out_dir_says_so(
        tmp_path, key, value):
    rc = {**RC, key: value, "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 2, run_config=rc)
    with pytest.raises(ValueError) as err:
        run_server(grid, rc)
    assert str(err.value).endswith(f"must be at least 0, got {value} (run-config key "
                                   f"{key!r})")
    assert grid.sent == []
    result = _result(tmp_path / "out")
    assert result["refused"] is True and result["reason"] == str(err.value)
    assert result["run-config"][key] == value


def test_an_unknown_key_names_the_nearest_known_one(tmp_path, caplog):
    rc = {**RC, "seeed": 1, "min_nodes": 2, "out-dir": str(tmp_path / "out")}
    with caplog.at_level(logging.INFO), pytest.raises(ValueError) as err:
        run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    assert str(err.value) == ("unknown run-config key 'seeed': did you mean 'seed'?; unknown "
                              "run-config key 'min_nodes': did you mean 'min-nodes'?")
    assert _result(tmp_path / "out")["reason"] == str(err.value)
    assert len(_errors(caplog)) == 1
    with pytest.raises(ValueError, match="'qqqq': docs/configuration.md lists every key"):
        merged_config({"qqqq": 1})


@pytest.mark.parametrize("extra, match", [
    ({"secure-aggregation": True, "secagg-threshold": 1.5},
     r"secagg_threshold must lie in \(0, 1\], got 1.5 \(run-config key 'secagg-threshold'\)"),
    ({"secure-aggregation": True, "algorithm": "kfed"},
     "secure-aggregation=true: kfed's server step"),
])
def test_secure_aggregation_refusals_leave_a_result_not_an_empty_out_dir(tmp_path, extra,
                                                                         match):
    rc = {**RC, **extra, "out-dir": str(tmp_path / "out")}
    with pytest.raises(ValueError, match=match):
        run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["result.json"]
    result = _result(tmp_path / "out")
    assert result["refused"] is True and result["last-round"] == 0


def test_the_corrected_run_may_use_the_refused_runs_out_dir(tmp_path):
    rc = {**RC, "seed": -5, "out-dir": str(tmp_path / "out")}
    with pytest.raises(ValueError, match="seed"):
        run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    rc["seed"] = 5
    run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    result = _result(tmp_path / "out")
    assert result["status"] == "completed" and "refused" not in result
    # a completed run's out-dir stays refused to the next run
    with pytest.raises(FileExistsError, match="holds another run's results"):
        run_server(InProcessGrid(client_app, 2, run_config=rc), rc)


def test_a_module_algorithm_from_outside_the_app_is_refused_before_it_is_imported(
        tmp_path, monkeypatch):
    import os
    import sys

    code = tmp_path / "code"
    code.mkdir()
    (code / "server_side_xyz.py").write_text(
        "import os\nos.environ['SERVER_SIDE_XYZ_IMPORTED'] = '1'\n"
        "from flwr_clustering.registry import get\nSPEC = get('fkm')\n")
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delenv("SERVER_SIDE_XYZ_IMPORTED", raising=False)
    monkeypatch.delitem(sys.modules, "server_side_xyz", raising=False)
    rc = {**RC, "algorithm": "server_side_xyz:SPEC", "out-dir": str(tmp_path / "out")}
    with pytest.raises(PermissionError, match=r"run-config key 'algorithm'.*"
                                              r"'server_side_xyz'.*not part of this App"):
        run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    assert "SERVER_SIDE_XYZ_IMPORTED" not in os.environ
    assert "server_side_xyz" not in sys.modules
    assert _result(tmp_path / "out")["refused"] is True
    # an installed package is no part of the App either (numpy lies in the virtualenv)
    with pytest.raises(PermissionError, match="'numpy'"):
        check_run_config_algorithm("numpy:ndarray")
    # the App's own code (as `flwr run .` packs it) and the operator's directories load
    check_run_config_algorithm("simulations.benchmarks.echo:ECHO")
    rc["out-dir"] = str(tmp_path / "allowed")
    run_server(InProcessGrid(client_app, 2, run_config=rc), rc, allowed_paths=[str(code)])
    assert os.environ.get("SERVER_SIDE_XYZ_IMPORTED") == "1"
    assert _result(tmp_path / "allowed")["status"] == "completed"


def test_a_key_set_for_another_algorithm_is_named_not_silently_ignored(tmp_path, caplog):
    rc = {**RC, "algorithm": "fkm", "max-rounds": 2, "graph": "star", "k-min": 3,
          "out-dir": str(tmp_path / "out")}
    with caplog.at_level(logging.WARNING, logger="flwr_clustering"):
        run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    [warning] = [w for w in _result(tmp_path / "out")["warnings"] if "not used" in w]
    assert "'graph', 'k-min'" in warning and "algorithm 'fkm'" in warning
    assert any("'graph', 'k-min'" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)
    # the keys of the run's own algorithm and data set are no such keys
    rc = {**RC, "out-dir": str(tmp_path / "plain")}
    run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    assert not [w for w in _result(tmp_path / "plain")["warnings"] if "not used" in w]


def test_a_failure_after_round_1_is_no_refusal(tmp_path):
    class Broken(InProcessGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages and messages[0].metadata.group_id == "2":
                raise ValueError("lost in round 2")
            return super().send_and_receive(messages, timeout=timeout)

    rc = {**RC, "out-dir": str(tmp_path / "out")}
    with pytest.raises(ValueError, match="lost in round 2"):
        run_server(Broken(client_app, 2, run_config=rc), rc)
    result = _result(tmp_path / "out")
    assert result["status"] == "failed" and "refused" not in result


# --------------------------------------------------------------- every client's reason
def _bad_sites(tmp_path, n, good=()):
    configs = []
    for i in range(n):
        path = tmp_path / f"site{i}.csv"
        if i in good:
            X, y = load_partition(i, n, dataset="blobs", n_samples=120, centers=3,
                                  partitioner="iid")
            save_local_file(path.with_suffix(".npz"), X, y)
            path = path.with_suffix(".npz")
        else:
            path.write_text("")  # an empty file: refused by its client
        configs.append({"data-path": str(path)})
    return configs


def test_every_failing_client_is_named_with_its_own_reason_and_nothing_more_is_sent(
        tmp_path, caplog):
    configs = _bad_sites(tmp_path, 3)
    rc = {**RC, "dataset": "local", "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 3, run_config=rc, node_configs=configs)
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO), pytest.raises(ValueError) as err:
        run_server(grid, rc)
    seconds = time.monotonic() - t0
    message = str(err.value)
    assert message.startswith("round 0: 0 of 3 node(s) described their data, fewer than "
                              "min-nodes=2: client 0 (node 100) failed: ")
    for i in range(3):
        assert f"client {i} (node {100 + i}) failed: " in message
        assert f"site{i}.csv" in message
    assert "scaling='none'" not in message and "lower min-nodes" not in message
    # the three round-0 queries, then nothing: no wait, no further phase
    assert [m.metadata.message_type for m in grid.sent] == ["query"] * 3
    assert seconds < 5
    assert _result(tmp_path / "out")["reason"] == message
    assert [e for e in _errors(caplog) if "refused" in e] == [
        f"run refused before round 1: {message} (written to "
        f"{tmp_path / 'out' / 'result.json'})"]


def test_fewer_than_min_nodes_described_never_goes_past_round_0(tmp_path):
    configs = _bad_sites(tmp_path, 3, good=(0, 2))
    rc = {**RC, "dataset": "local", "min-nodes": 3, "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 3, run_config=rc, node_configs=configs)
    with pytest.raises(ValueError) as err:
        run_server(grid, rc)
    message = str(err.value)
    assert message.startswith("round 0: 2 of 3 node(s) described their data, fewer than "
                              "min-nodes=3: client 1 (node 101) failed: ")
    assert message.endswith("or lower min-nodes (run config 'min-nodes') to run without "
                            "them")
    assert {m.metadata.message_type for m in grid.sent} == {"query"}
    # with min-nodes=2 the same federation runs without client 1, named
    rc = {**rc, "min-nodes": 2, "out-dir": str(tmp_path / "two")}
    out = run_server(InProcessGrid(client_app, 3, run_config=rc, node_configs=configs), rc)
    assert out["strategy"].feature_summary["sites"] == 2


class Silent(InProcessGrid):
    """Every reply of round 0 lost: a round-timeout too short for the sites."""

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if messages and messages[0].metadata.group_id == "0":
            self.sent.extend(messages)
            return []
        return super().send_and_receive(messages, timeout=timeout)


def test_a_too_short_round_timeout_is_named_as_the_cause(tmp_path):
    rc = {**RC, "round-timeout": 0.5, "out-dir": str(tmp_path / "out")}
    with pytest.raises(ValueError) as err:
        run_server(Silent(client_app, 2, run_config=rc), rc)
    assert str(err.value) == (
        "round 0: 0 of 2 node(s) described their data, fewer than min-nodes=2: node 100 did "
        "not reply within round-timeout=0.5 s; node 101 did not reply within "
        "round-timeout=0.5 s. To go on: raise round-timeout (a site that reads a large file "
        "needs longer) or check the nodes that did not reply")


def test_a_strategy_started_on_its_own_lists_the_clients_reasons(tmp_path):
    configs = _bad_sites(tmp_path, 2)
    grid = InProcessGrid(client_app, 2, run_config={"dataset": "local"},
                         node_configs=configs)
    with pytest.raises(ValueError) as err:
        FedKMeans(k=3, min_nodes=2, scaling="standard").start(grid=grid)
    message = str(err.value)
    assert message.startswith("round 0: 0 client(s) described their data, fewer than "
                              "min-nodes=2: client 0 (node 100) failed: ")
    assert "client 1 (node 101) failed: " in message and "scaling='none'" not in message


def _columnless_app() -> ClientApp:
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        return Message(RecordDict({"metrics": MetricRecord({"client-id": pid,
                                                            "num-examples": 10})}),
                       reply_to=msg)

    return app


def test_clients_that_answer_without_columns_keep_the_scaling_advice():
    grid = InProcessGrid(_columnless_app(), 2)
    with pytest.raises(ValueError) as err:
        FedKMeans(k=3, min_nodes=2, scaling="standard").start(grid=grid)
    assert str(err.value) == (
        "scaling='standard': client(s) 0, 1 answered without describing their columns "
        "(clients that are not flwr-clustering's ClusteringClient): run with scaling='none'")


# ------------------------------------------------------------------ the ServerApp's main
def test_main_ends_a_refused_run_with_its_reason_not_a_traceback(tmp_path, caplog):
    rc = {**DGC, "graph": "/etc/passwd", "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client_app, 3, run_config=rc)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                      run_config=rc)
    with caplog.at_level(logging.INFO), pytest.raises(RunRefused) as err:
        server_app.main(grid, context)
    reason = _result(tmp_path / "out")["reason"]
    assert str(err.value) == f"run refused before round 1: {reason}"
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert len(_errors(caplog)) == 1 and reason in _errors(caplog)[0]


def test_main_lets_a_failure_after_round_1_through(tmp_path):
    class Lost(InProcessGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages and messages[0].metadata.group_id == "2":
                raise RuntimeError("SuperLink gone")
            return super().send_and_receive(messages, timeout=timeout)

    rc = {**RC, "out-dir": str(tmp_path / "out")}
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                      run_config=rc)
    with pytest.raises(RuntimeError, match="SuperLink gone"):
        server_app.main(Lost(client_app, 2, run_config=rc), context)


class FailsMoments(InProcessGrid):
    """Node 101's feature-moments reply is an error (its file became unreadable)."""

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        out = []
        for reply in replies:
            phase = None
            if not reply.has_error():
                sent = next(m for m in self.sent
                            if m.metadata.message_id == reply.metadata.reply_to_message_id)
                phase = sent.content["config"].get("phase")
            if phase == FEATURE_MOMENTS_PHASE and reply.metadata.src_node_id == 101:
                reply = Message(Error(code=0, reason="client 1: site1.csv: unreadable"),
                                reply_to=sent)
            out.append(reply)
        return out


def test_a_client_failing_its_feature_sums_below_min_nodes_stops_at_round_0(tmp_path):
    rc = {**RC, "min-nodes": 3, "out-dir": str(tmp_path / "out")}
    grid = FailsMoments(client_app, 3, run_config=rc)
    with pytest.raises(ValueError) as err:
        run_server(grid, rc)
    assert str(err.value).startswith(
        "round 0 feature-moments: 2 client(s) sent their feature sums, fewer than "
        "min-nodes=3 with the ones that withheld them: client 1 (node 101) failed: client 1: "
        "site1.csv: unreadable. Fix those sites")
    assert {m.metadata.message_type for m in grid.sent} == {"query"}
    assert _result(tmp_path / "out")["refused"] is True
    # with min-nodes=2 the run goes on, scaled from the other sites' sums, and says so
    rc = {**rc, "min-nodes": 2, "out-dir": str(tmp_path / "two")}
    out = run_server(FailsMoments(client_app, 3, run_config=rc), rc)
    assert any(w.startswith("feature scaling without client 1 (node 101)")
               for w in out["strategy"].warnings)


def test_a_refused_run_config_without_out_dir_says_so_in_a_folder_of_its_own(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    rc = {"algorithm": "x:../../escape", "seed": 1}
    with pytest.raises(ValueError, match="cannot load algorithm 'x:../../escape'"):
        run_server(InProcessGrid(client_app, 2, run_config=rc), rc)
    (folder,) = (tmp_path / "flwr-clustering-results").iterdir()
    assert folder.name.startswith("run-")  # an unknown algorithm names no folder
    result = _result(folder)
    assert result["refused"] is True and result["run-config"] == rc
    # an out-dir that is not a string names no directory: the ERROR line alone says it
    with pytest.raises(ValueError, match="out_dir must be a string"):
        run_server(InProcessGrid(client_app, 2), {"out-dir": 5})
    assert len(list((tmp_path / "flwr-clustering-results").iterdir())) == 1


def test_a_refused_resumption_leaves_the_interrupted_runs_result_as_it_is(tmp_path, caplog):
    class Crash(InProcessGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages and messages[0].metadata.group_id == "2":
                raise RuntimeError("SuperLink gone")
            return super().send_and_receive(messages, timeout=timeout)

    run = tmp_path / "run"
    rc = {**RC, "max-rounds": 4, "out-dir": str(run)}
    with pytest.raises(RuntimeError):
        run_server(Crash(client_app, 2, run_config=rc), rc)
    before = (run / "result.json").read_text()
    assert json.loads(before)["last-round"] == 1
    resume = {**rc, "k": 4, "resume-from": str(run)}
    with caplog.at_level(logging.INFO), pytest.raises(ValueError, match=r"in k \(3 in the "):
        run_server(InProcessGrid(client_app, 2, run_config=resume), resume)
    assert (run / "result.json").read_text() == before
    assert any(e.startswith("run refused before round 1: ") and
               e.endswith(f"({run} keeps the interrupted run's result.json)")
               for e in _errors(caplog))
