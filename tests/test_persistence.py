"""Nothing lost: out-dir checked before round 1, per-round files and checkpoints, failed
runs recorded, interrupted iterative runs resumed bit for bit (in-process App)."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
from flwr.app import MessageType

from flwr_clustering import registry
from flwr_clustering.app.checkpoint import load_checkpoint
from flwr_clustering.app.client_app import app as client_app
from flwr_clustering.app.server_app import run_server
from flwr_clustering.testing import InProcessGrid


class CrashingGrid(InProcessGrid):
    """An in-process grid whose SuperLink goes away at the ``crash_at``-th train exchange."""

    def __init__(self, *args, crash_at: int | None = None, watch=None,
                 error: BaseException | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.crash_at = crash_at
        self.error = error or RuntimeError("SuperLink gone")
        self.train_exchanges = 0
        self.watch = watch  # an out-dir: note what is on disk at every train exchange
        self.on_disk: list[tuple[int, list[str]]] = []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if messages and messages[0].metadata.message_type == MessageType.TRAIN:
            self.train_exchanges += 1
            if self.watch is not None:
                ckpt = self.watch / "checkpoint.json"
                saved = json.loads(ckpt.read_text())["round"] if ckpt.exists() else 0
                rounds = []
                if (self.watch / "centroids.npz").exists():
                    with np.load(self.watch / "centroids.npz") as z:
                        rounds = sorted(f for f in z.files if f.startswith("round_"))
                self.on_disk.append((saved, rounds))
            if self.train_exchanges == self.crash_at:
                raise self.error
        return super().send_and_receive(messages, timeout=timeout)


def _run(rc: dict, nodes: int, crash_at: int | None = None):
    return run_server(CrashingGrid(client_app, nodes, run_config=rc, crash_at=crash_at), rc)


def _read(out_dir) -> dict:
    return json.loads((out_dir / "result.json").read_text())


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if "seconds" not in k}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _assert_same_run(a, b, dir_a, dir_b) -> None:
    """Model, history (but timings), metrics and result files equal, bit for bit."""
    sa, sb = a["strategy"], b["strategy"]
    np.testing.assert_array_equal(a["centroids"], b["centroids"])
    assert len(sa.centroid_history) == len(sb.centroid_history)
    for ca, cb in zip(sa.centroid_history, sb.centroid_history, strict=True):
        np.testing.assert_array_equal(ca, cb)
    assert _without_timings(sa.history) == _without_timings(sb.history)
    assert sa.final_metrics == sb.final_metrics
    assert sa.rng.bit_generator.state == sb.rng.bit_generator.state
    for key, value in sa.model_record().items():
        np.testing.assert_array_equal(value.numpy(), sb.model_record()[key].numpy())
    ra, rb = _read(dir_a), _read(dir_b)
    assert ra["status"] == rb["status"] == "completed"
    for key in ("federated", "federated-on-pooled", "centralized", "rounds", "linear-probe"):
        assert _without_timings(ra.get(key)) == _without_timings(rb.get(key)), key
    assert (_without_timings(json.loads((dir_a / "history.json").read_text()))
            == _without_timings(json.loads((dir_b / "history.json").read_text())))
    with np.load(dir_a / "centroids.npz") as za, np.load(dir_b / "centroids.npz") as zb:
        assert sorted(za.files) == sorted(zb.files)
        for name in za.files:
            np.testing.assert_array_equal(za[name], zb[name])


CASES = {
    "fkm": ({"algorithm": "fkm", "k": 16, "max-rounds": 5, "early-stop": False,
             "min-nodes": 3}, 3),
    # differential privacy: the start's two mechanisms and five rounds, one accountant
    "fkm-dp": ({"algorithm": "fkm", "k": 16, "server-update": "lloyd", "dp-epsilon": 2.0,
                "data-bound": 15.0, "dp-rounds": 5, "max-rounds": 5, "tol": -1.0,
                "scaling": "none", "min-nodes": 3}, 3),
    "ffcm-v2": ({"algorithm": "ffcm", "ffcm-version": 2, "dataset": "iris", "k": 3,
                 "max-rounds": 5, "early-stop": False, "min-nodes": 3}, 3),
    "masked-federated": ({"algorithm": "masked-federated", "dataset": "blobs",
                          "n-samples": 300, "n-features": 6, "centers": 4, "k": 4,
                          "feature-mask": "chain", "federated-rounds": 4, "tol": -1.0,
                          "min-nodes": 3}, 3),
    "dgc": ({"algorithm": "dgc", "dataset": "iris", "k": 3, "iterations": 4,
             "graph": "ring", "rho": 100.0, "min-nodes": 4}, 4),
    "deepfeca": ({"algorithm": "deepfeca", "dataset": "iris", "network": "mlp",
                  "proj-dim": 8, "k": 3, "max-rounds": 4, "local-epochs": 1,
                  "deepfeca-centralized": False, "min-nodes": 3}, 3),
}


def _case(name):
    if name == "deepfeca" and importlib.util.find_spec("torch") is None:
        pytest.skip("DeepFeCA needs torch")
    return CASES[name]


def test_unwritable_out_dir_fails_before_any_message(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rc = {"algorithm": "fkm", "out-dir": str(blocker / "run")}
    grid = InProcessGrid(client_app, 2, run_config=rc)
    with pytest.raises(PermissionError, match="out-dir .*file/run"):
        run_server(grid, rc)
    assert grid.sent == []
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        rc = {"algorithm": "fkm", "out-dir": str(locked)}
        grid = InProcessGrid(client_app, 2, run_config=rc)
        with pytest.raises(PermissionError, match="locked"):
            run_server(grid, rc)
        assert grid.sent == []


def test_crash_at_round_3_leaves_rounds_1_2_and_a_failed_result(tmp_path):
    rc, nodes = _case("fkm")
    rc = {**rc, "out-dir": str(tmp_path / "run")}
    with pytest.raises(RuntimeError, match="SuperLink gone"):
        _run(rc, nodes, crash_at=3)
    out = tmp_path / "run"
    res = _read(out)
    assert res["status"] == "failed" and res["last-round"] == 2
    assert "SuperLink gone" in res["reason"] and res["rounds"] == 2
    with np.load(out / "centroids.npz") as z:
        # in the data's units; the model as computed (scaling='standard') beside them
        assert sorted(z.files) == ["centroids", "round_1", "round_2", "scaled_centroids"]
        np.testing.assert_array_equal(z["centroids"], z["round_2"])
    assert [r["round"] for r in json.loads((out / "history.json").read_text())] == [1, 2]
    ckpt = load_checkpoint(out)
    assert ckpt["round"] == 2 and ckpt["algorithm"] == "fkm" and not ckpt["stopped"]
    assert json.loads((out / "checkpoint.json").read_text())["round"] == 2
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_completed_run_says_so_and_writes_every_round(tmp_path):
    rc, nodes = _case("fkm")
    rc = {**rc, "out-dir": str(tmp_path)}
    grid = CrashingGrid(client_app, nodes, run_config=rc, watch=tmp_path)
    out = run_server(grid, rc)
    # before the train exchange of round r the files of rounds 1 .. r-1 are on disk
    assert grid.on_disk == [(r - 1, [f"round_{i}" for i in range(1, r)]) for r in range(1, 6)]
    assert _read(tmp_path)["status"] == "completed"
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["round"] == 5 and ckpt["stopped"]
    # a completed run has nothing to resume
    with pytest.raises(ValueError, match="completed at round 5"):
        _run({**rc, "resume-from": str(tmp_path)}, nodes)
    assert out["strategy"].history[-1]["round"] == 5


def test_failure_before_round_1_records_last_round_0(tmp_path):
    rc, nodes = _case("fkm")
    rc = {**rc, "out-dir": str(tmp_path)}
    with pytest.raises(RuntimeError, match="SuperLink gone"):
        _run(rc, nodes, crash_at=1)
    res = _read(tmp_path)
    assert res["status"] == "failed" and res["last-round"] == 0 and res["rounds"] == 0


@pytest.mark.parametrize("name", list(CASES))
def test_resume_after_a_crash_equals_an_uninterrupted_run(tmp_path, name):
    rc, nodes = _case(name)
    full = _run({**rc, "out-dir": str(tmp_path / "full")}, nodes)
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="SuperLink gone"):
        _run({**rc, "out-dir": str(crashed)}, nodes, crash_at=3)
    assert _read(crashed)["last-round"] == 2
    # resume in place (the out-dir of the interrupted run)
    resumed = _run({**rc, "out-dir": str(crashed), "resume-from": str(crashed)}, nodes)
    assert _read(crashed)["resumed-after-round"] == 2
    _assert_same_run(full, resumed, tmp_path / "full", crashed)
    if "dp-epsilon" in rc:  # the privacy accountant resumed with the run: the same epsilon
        pa, pb = (json.loads((d / "privacy.json").read_text())
                  for d in (tmp_path / "full", crashed))
        assert pa["epsilon"] == pb["epsilon"] and pa["server-epsilon"] == pb["server-epsilon"]
        assert pa["differential-privacy"] == pb["differential-privacy"]
        assert pa["differential-privacy"]["rounds-run"] == 5
        acc_a, acc_b = full["strategy"].accountant, resumed["strategy"].accountant
        assert acc_a.state_dict() == acc_b.state_dict() and acc_b.num_releases == 7
        assert load_checkpoint(crashed)["state"]["dp_accountant"] == acc_b.state_dict()
    # each client's declared sums came back with the checkpoint: its means stay bounded
    sa, sb = full["strategy"], resumed["strategy"]
    assert sorted(sb.client_moments) == sorted(sa.client_moments)
    # the run agreed its features from the clients' sums (not DeepFeCA's; a DP run sends
    # no feature-moments message)
    if sa.feature_summary is not None and "dp-epsilon" not in rc:
        assert sorted(sa.client_moments) == list(range(nodes))
    for cid, rows in sa.client_moments.items():
        for name in ("count", "mean", "var"):
            np.testing.assert_array_equal(getattr(sb.client_moments[cid], name),
                                          getattr(rows, name))


@pytest.mark.parametrize("node_ids", [[907, 12, 5003, 40], [102, 100, 103, 101]],
                         ids=["new-ids", "ids-of-other-clients"])
def test_dgc_resumes_when_the_supernodes_come_back_under_other_node_ids(tmp_path, node_ids):
    rc, nodes = _case("dgc")
    full = _run({**rc, "out-dir": str(tmp_path / "full")}, nodes)
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="SuperLink gone"):
        _run({**rc, "out-dir": str(crashed)}, nodes, crash_at=3)
    assert load_checkpoint(crashed)["state"]["node_of"] == {i: 100 + i for i in range(4)}
    # the SuperLink restarted: partition-id i is now on node node_ids[i]
    rc_resume = {**rc, "out-dir": str(crashed), "resume-from": str(crashed)}
    grid = CrashingGrid(client_app, nodes, run_config=rc_resume, node_ids=node_ids)
    resumed = run_server(grid, rc_resume)
    sa, sb = full["strategy"], resumed["strategy"]
    assert sb.node_of == dict(enumerate(node_ids))
    steps = [m for m in grid.sent if m.metadata.message_type == MessageType.TRAIN]
    assert {m.metadata.dst_node_id for m in steps} == set(node_ids)
    _assert_same_run(full, resumed, tmp_path / "full", crashed)
    assert len(sa.node_history) == len(sb.node_history) == 5
    for a, b in zip(sa.node_history, sb.node_history, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(sa.node_centres, sb.node_centres)
    with np.load(tmp_path / "full" / "nodes.npz") as za, np.load(crashed / "nodes.npz") as zb:
        np.testing.assert_array_equal(za["centres"], zb["centres"])


def test_resume_refuses_a_different_run_config_naming_the_key(tmp_path):
    rc, nodes = _case("fkm")
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError):
        _run({**rc, "out-dir": str(crashed)}, nodes, crash_at=3)
    rc2 = {**rc, "k": 8, "seed": 1, "resume-from": str(crashed),
           "out-dir": str(tmp_path / "other"), "round-timeout": 5.0}
    grid = InProcessGrid(client_app, nodes, run_config=rc2)
    with pytest.raises(ValueError, match=r"in k \(16 in the checkpoint, 8 now\), seed"):
        run_server(grid, rc2)
    assert grid.sent == []
    rc3 = {**rc, "algorithm": "ffcm", "resume-from": str(crashed)}
    with pytest.raises(ValueError, match="checkpoint is of algorithm 'fkm'"):
        run_server(InProcessGrid(client_app, nodes, run_config=rc3), rc3)
    # out-dir, round-timeout and resume-from may change
    out = _run({**rc, "resume-from": str(crashed), "out-dir": str(tmp_path / "new"),
                "round-timeout": 5.0}, nodes)
    assert out["strategy"].history[-1]["round"] == 5
    with np.load(tmp_path / "new" / "centroids.npz") as z:
        assert len([f for f in z.files if f.startswith("round_")]) == 5


def test_one_shot_algorithm_refuses_resume(tmp_path):
    rc, nodes = _case("fkm")
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError):
        _run({**rc, "out-dir": str(crashed)}, nodes, crash_at=2)
    rc = {"algorithm": "kfed", "k": 4, "resume-from": str(crashed),
          "out-dir": str(tmp_path / "kfed")}
    grid = InProcessGrid(client_app, 2, run_config=rc)
    with pytest.raises(ValueError, match="algorithm 'kfed' cannot resume.*'fkm'"):
        run_server(grid, rc)
    assert grid.sent == []
    rc["resume-from"] = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no checkpoint .*missing"):
        run_server(grid, rc)


def test_state_dict_round_trips_through_a_checkpoint(tmp_path):
    from flwr_clustering.app.checkpoint import pack, unpack

    state = {"a": np.arange(3.0), "inf": float("inf"), "ints": {1: 101, 2: 102},
             "list": [np.ones((2, 2), np.float32), None], "rng":
             np.random.default_rng(5).bit_generator.state}
    arrays: dict = {}
    meta = json.loads(json.dumps(pack(state, arrays)))
    back = unpack(meta, arrays)
    assert back["inf"] == float("inf") and back["ints"] == {1: 101, 2: 102}
    np.testing.assert_array_equal(back["a"], state["a"])
    assert back["list"][0].dtype == np.float32 and back["list"][1] is None
    rng = np.random.default_rng(0)
    rng.bit_generator.state = back["rng"]
    assert rng.random() == np.random.default_rng(5).random()


#: Short runs: the point is the end of the run (its files and plot), not the model.
_SHORT = {"deepfeca": {"max-rounds": 1, "network": "mlp"}, "dgc": {"iterations": 3}}


@pytest.mark.parametrize("algorithm", sorted(registry.names()))
def test_one_feature_data_runs_to_the_end_with_its_plot(tmp_path, algorithm):
    """One-feature files complete for every algorithm, plot included (the plot's
    ``C[:, 1]`` used to fail every such run after its last round, marking it failed)."""
    if algorithm == "deepfeca" and importlib.util.find_spec("torch") is None:
        pytest.skip("DeepFeCA needs the torch extra")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(4):
        x = np.concatenate([rng.normal(c, 1.0, 40) for c in (0.0, 10.0, 20.0)])[:, None]
        paths.append(tmp_path / f"site{i}.npy")
        np.save(paths[-1], x)
    out = tmp_path / "out"
    cfg = {"algorithm": algorithm, "dataset": "local", "k": 3, "out-dir": str(out),
           "min-nodes": 4, **_SHORT.get(algorithm, {})}
    grid = InProcessGrid(client_app, 4, run_config=cfg,
                         node_configs=[{"data-path": str(p), "allow-raw-rows": True}
                                       for p in paths])
    run_server(grid, cfg)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed", result
    assert (out / "clusters.png").stat().st_size > 1000
    with np.load(out / "centroids.npz") as npz:
        assert npz["centroids"].shape[0] == 3 and np.isfinite(npz["centroids"]).all()


@pytest.mark.parametrize(("k", "d", "points_d"), [(1, 5, 5), (3, 1, 1), (4, 8, 1), (2, 2, 2)])
def test_the_plot_draws_any_shape_of_model(tmp_path, k, d, points_d):
    """One centroid in 5-D (one principal component), one feature, centroids in another
    space than the points (DeepFeCA's embedding: the points are left out), plain 2-D."""
    from flwr_clustering.reporting import plot_run

    rng = np.random.default_rng(1)
    path = tmp_path / "p.png"
    plot_run(path, rng.normal(size=(k, d)), [{"round": 1, "shift": 0.5}],
             X=rng.normal(size=(50, points_d)), labels=rng.integers(0, k, 50))
    assert path.stat().st_size > 1000


@pytest.mark.parametrize("damage", ["cut", "garbage", "empty", "no-meta"])
def test_a_damaged_checkpoint_names_the_file_and_the_choices(tmp_path, damage):
    rc, nodes = _case("fkm")
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError):
        _run({**rc, "out-dir": str(crashed)}, nodes, crash_at=3)
    path = crashed / "checkpoint.npz"
    data = path.read_bytes()
    if damage == "cut":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        np.savez(path, other=np.zeros(2))
    rc2 = {**rc, "resume-from": str(crashed), "out-dir": str(tmp_path / "next")}
    grid = InProcessGrid(client_app, nodes, run_config=rc2)
    with pytest.raises(ValueError) as err:
        run_server(grid, rc2)
    message = str(err.value)
    assert f"checkpoint {path} is damaged" in message, message
    assert "Restore it" in message and "without resume-from" in message, message
    assert grid.sent == []


@pytest.mark.parametrize("error", [SystemExit(0), KeyboardInterrupt()])
def test_a_run_stopped_by_the_user_is_recorded_as_stopped(tmp_path, error):
    """``flwr stop`` ends a ServerApp by ``SystemExit`` (its result said reason "0" and
    error-type "SystemExit"); Ctrl-C by ``KeyboardInterrupt``."""
    rc, nodes = _case("fkm")
    out = tmp_path / "out"
    rc = {**rc, "out-dir": str(out)}
    with pytest.raises(type(error)):  # at the third train exchange: after round 2
        run_server(CrashingGrid(client_app, nodes, run_config=rc, crash_at=3, error=error), rc)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "stopped" and result["last-round"] == 2, result
    assert result["reason"] == (f"stopped by the user (flwr stop, Ctrl-C or a signal to the "
                                f"ServerApp) after round 2; resume-from='{out}' continues it")
    assert result["error-type"] == type(error).__name__


# ------------------------------------------------------------ one run per out-dir
def test_a_second_run_into_a_finished_runs_out_dir_is_refused_and_changes_nothing(tmp_path):
    rc, nodes = _case("fkm")
    out = tmp_path / "out"
    rc = {**rc, "out-dir": str(out)}
    _run(rc, nodes)
    assert not (out / ".run.lock").exists()  # released at the end
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    grid = InProcessGrid(client_app, nodes, run_config=rc)
    with pytest.raises(FileExistsError) as err:
        run_server(grid, {**rc, "k": 4})
    message = str(err.value)
    assert f"out-dir '{out}' holds another run's results" in message, message
    assert "fkm, status completed" in message and "nothing was overwritten" in message
    assert "another out-dir" in message and f"resume-from='{out}'" in message
    assert grid.sent == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not (out / ".run.lock").exists()


def test_an_out_dir_being_written_refuses_a_second_run(tmp_path):
    import socket
    import subprocess
    import sys

    rc, nodes = _case("fkm")
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".run.lock").write_text(json.dumps(
            {"pid": holder.pid, "host": socket.gethostname(), "started": "2026-11-27"}))
        grid = InProcessGrid(client_app, nodes, run_config={**rc, "out-dir": str(out)})
        with pytest.raises(FileExistsError, match=rf"being written by another run \(process "
                                                  rf"{holder.pid} on "):
            run_server(grid, {**rc, "out-dir": str(out)})
        assert grid.sent == [] and (out / ".run.lock").exists()  # not taken from a live run
    finally:
        holder.kill()
        holder.wait()


def _killed_run(tmp_path):
    """What a SIGKILL after round 2 leaves: the rounds, the checkpoint, a lock naming a
    process that no longer exists, no result.json. Returns (run config, nodes, out, pid)."""
    import socket
    import subprocess
    import sys

    rc, nodes = _case("fkm")
    out = tmp_path / "out"
    rc = {**rc, "out-dir": str(out)}
    with pytest.raises(RuntimeError):
        _run(rc, nodes, crash_at=3)
    (out / "result.json").unlink()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / ".run.lock").write_text(json.dumps(
        {"pid": dead.pid, "host": socket.gethostname(), "started": "2026-11-27 12:00:00 UTC"}))
    return rc, nodes, out, dead.pid


def test_a_killed_runs_out_dir_is_marked_interrupted_then_resumed(tmp_path):
    rc, nodes, out, pid = _killed_run(tmp_path)
    with pytest.raises(FileExistsError, match="status interrupted"):
        run_server(InProcessGrid(client_app, nodes, run_config=rc), rc)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "interrupted" and result["last-round"] == 2, result
    assert f"process {pid} on " in result["reason"]
    assert not (out / ".run.lock").exists()
    resumed = _run({**rc, "resume-from": str(out)}, nodes)
    assert resumed["strategy"].history[-1]["round"] == 5
    assert json.loads((out / "result.json").read_text())["status"] == "completed"


def test_inspecting_a_killed_runs_out_dir_marks_it_interrupted(tmp_path, capsys):
    """`python -m flwr_clustering status` on what a SIGKILL leaves marks it on disk."""
    import socket

    from flwr_clustering.__main__ import main

    rc, nodes, out, pid = _killed_run(tmp_path)
    assert main(["status", str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"{out}: interrupted, round 2" in printed, printed
    assert "when the out-dir was inspected" in printed and f"resume-from='{out}'" in printed
    assert f"process {pid} on " in printed
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "interrupted" and result["last-round"] == 2
    assert not (out / ".run.lock").exists()
    # a live holder is running, untouched; a completed run is reported as it is
    (out / "result.json").unlink()
    (out / ".run.lock").write_text(json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "started": "now"}))
    assert main(["status", str(out)]) == 0
    assert "running, round 2" in capsys.readouterr().out
    assert not (out / "result.json").exists()
    (out / ".run.lock").unlink()
    resumed = _run({**rc, "resume-from": str(out)}, nodes)
    assert resumed["strategy"].history[-1]["round"] == 5
    assert main(["status", str(out)]) == 0
    assert "completed" in capsys.readouterr().out
    assert main(["status", str(tmp_path / "nothing")]) == 2


def test_the_default_out_dir_is_a_folder_of_the_runs_own(tmp_path, monkeypatch):
    from flwr_clustering.app.config import results_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    first = results_dir({"algorithm": "fkm", "out-dir": ""})
    first.mkdir(parents=True)
    second = results_dir({"algorithm": "fkm", "out-dir": ""})
    assert second != first and second.parent == first.parent
    assert second.name.startswith(first.name)


# ------------------------------------------------------- the data a run keeps using
class ChangingGrid(InProcessGrid):
    """An in-process grid whose node ``node`` file is rewritten before the ``at``-th train
    exchange (values +50), and read again as a fresh ClientApp process would."""

    def __init__(self, *args, path=None, at=3, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.path, self.at, self.train_exchanges = path, at, 0

    def send_and_receive(self, messages, *, timeout=None):
        from flwr_clustering.data.site_cache import clear_memory_cache

        messages = list(messages)
        if messages and messages[0].metadata.message_type == MessageType.TRAIN:
            self.train_exchanges += 1
            if self.train_exchanges == self.at:
                np.save(self.path, np.load(self.path) + 50.0)
                clear_memory_cache()  # every deployment message is a fresh process
        return super().send_and_receive(messages, timeout=timeout)


def _two_blob_sites(tmp_path, rows_per_blob: int) -> list:
    """Three sites' .npy files, each two blobs (0 and 5) of ``rows_per_blob`` rows."""
    rng = np.random.default_rng(0)
    paths = [tmp_path / f"site{i}.npy" for i in range(3)]
    for path in paths:
        np.save(path, np.vstack([rng.normal(c, 0.5, (rows_per_blob, 2)) for c in (0.0, 5.0)]))
    return paths


def test_a_file_changed_during_the_run_is_refused_by_its_client(tmp_path):
    paths = _two_blob_sites(tmp_path, 60)
    out = tmp_path / "out"
    cfg = {"algorithm": "fkm", "dataset": "local", "k": 2, "out-dir": str(out),
           "min-nodes": 2, "max-rounds": 5, "tol": -1.0, "scaling": "none"}
    grid = ChangingGrid(client_app, 3, run_config=cfg, path=paths[1], at=3,
                        node_configs=[{"data-path": str(p)} for p in paths])
    result = run_server(grid, cfg)
    history = json.loads((out / "history.json").read_text())
    assert [h["clients"] for h in history] == [3, 3, 2, 2, 2], history
    reason = {a["client"]: a["reason"] for a in history[2]["absent"]}[1]
    assert f"its file {paths[1]} changed during the run" in reason, reason
    assert "not the 120 rows" in reason and "Restore the file" in reason, reason
    # the model never saw the shifted rows (near 50-55)
    assert np.abs(result["centroids"]).max() < 10, result["centroids"]


def test_identical_files_on_several_nodes_are_named(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    paths = [tmp_path / f"site{i}.npy" for i in range(4)]
    for i, p in enumerate(paths):
        np.save(p, X if i in (0, 2, 3) else X + 1.0)
    out = tmp_path / "out"
    cfg = {"algorithm": "fkm", "dataset": "local", "k": 2, "out-dir": str(out),
           "min-nodes": 4, "max-rounds": 2}
    run_server(InProcessGrid(client_app, 4, run_config=cfg,
                             node_configs=[{"data-path": str(p)} for p in paths]), cfg)
    warnings = json.loads((out / "result.json").read_text())["warnings"]
    same = [w for w in warnings if w.startswith("identical data")]
    assert len(same) == 1 and "clients 0, 2, 3 hold the same 60 rows" in same[0], warnings


def test_resume_on_changed_data_is_refused_naming_the_client(tmp_path):
    from flwr_clustering.data.site_cache import clear_memory_cache

    paths = _two_blob_sites(tmp_path, 100)
    out = tmp_path / "out"
    cfg = {"algorithm": "fkm", "dataset": "local", "k": 2, "out-dir": str(out),
           "min-nodes": 3, "max-rounds": 5, "tol": -1.0}
    nodes = [{"data-path": str(p)} for p in paths]
    with pytest.raises(RuntimeError):
        run_server(CrashingGrid(client_app, 3, run_config=cfg, node_configs=nodes,
                                crash_at=3), cfg)
    original = np.load(paths[2])
    np.save(paths[2], original[:150])  # the file cut from 200 to 150 rows
    clear_memory_cache()
    resume = {**cfg, "resume-from": str(out)}
    grid = InProcessGrid(client_app, 3, run_config=resume, node_configs=nodes)
    with pytest.raises(ValueError) as err:
        run_server(grid, resume)
    message = str(err.value)
    assert "the data changed since the interrupted run: client 2 has 150 rows" in message
    assert "the interrupted run had 200" in message and "Restore those files" in message
    # nothing after round 0: the record of the interrupted run is still on disk
    assert json.loads((out / "checkpoint.json").read_text())["round"] == 2
    np.save(paths[2], original)
    clear_memory_cache()
    run_server(InProcessGrid(client_app, 3, run_config=resume, node_configs=nodes), resume)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed"
    assert [s["rows"] for s in result["data-sources"]] == [200, 200, 200]


def test_resume_changed_data_goes_on_knowingly_and_records_both(tmp_path, caplog):
    """resume-changed-data=true: a WARNING naming the client, the interrupted run's record
    kept with the rows at resume beside it, and the changed client's sums dropped (its
    new means are not held to its old rows' bound), the others' kept."""
    import logging

    from flwr_clustering.data.site_cache import clear_memory_cache

    paths = _two_blob_sites(tmp_path, 100)
    out = tmp_path / "out"
    cfg = {"algorithm": "fkm", "dataset": "local", "k": 2, "out-dir": str(out),
           "min-nodes": 3, "max-rounds": 5, "tol": -1.0}
    nodes = [{"data-path": str(p)} for p in paths]
    with pytest.raises(RuntimeError):
        run_server(CrashingGrid(client_app, 3, run_config=cfg, node_configs=nodes,
                                crash_at=3), cfg)
    np.save(paths[2], np.load(paths[2])[:150] + 0.5)
    clear_memory_cache()
    resume = {**cfg, "resume-from": str(out), "resume-changed-data": True}
    logging.getLogger("flwr_clustering").addHandler(caplog.handler)
    try:
        done = run_server(InProcessGrid(client_app, 3, run_config=resume, node_configs=nodes),
                          resume)
    finally:
        logging.getLogger("flwr_clustering").removeHandler(caplog.handler)
    assert "going on as resume-changed-data=true asks: client 2 has 150 rows" in caplog.text
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed" and result["resumed-after-round"] == 2
    sources = {s["client-id"]: s for s in result["data-sources"]}
    assert [sources[i]["rows"] for i in range(3)] == [200, 200, 200]
    assert sources[2]["at-resume"]["rows"] == 150 and "at-resume" not in sources[0]
    assert any("resume-changed-data=true" in w and "client 2" in w
               for w in result["warnings"]), result["warnings"]
    strategy = done["strategy"]
    assert sorted(strategy.client_moments) == [0, 1]
    assert [h["clients"] for h in strategy.history] == [3] * 5
