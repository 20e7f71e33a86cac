"""Fast correctness tests of the benchmark code paths and of the echo strategy/client.

No timing assertions here: speed and memory goals live in
``simulations/benchmarks/bench.py`` and its results, never in unit tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import MessageType
from sklearn.datasets import make_blobs

from flwr_clustering import registry
from flwr_clustering.app.client_app import app as client_app
from flwr_clustering.app.config import build_strategy, merged_config
from flwr_clustering.app.server_app import run_server
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid
from simulations.benchmarks import bench, common, processes
from simulations.benchmarks.echo import ECHO, ECHO_ALGORITHM, ECHO_COUNT, Echo, EchoClient

K = 4
N_CLIENTS = 3


def _run_config(algorithm: str, tmp_path: Path, rounds: int = 3) -> dict:
    return {
        "algorithm": common.run_config_algorithm(algorithm), "dataset": "blobs",
        "partitioner": "iid", "n-samples": 60 * N_CLIENTS, "n-features": 3, "centers": K, "k": K,
        "max-rounds": rounds, "tol": -1.0, "min-nodes": N_CLIENTS,
        "out-dir": str(tmp_path / algorithm),
    }


def _run(algorithm: str, tmp_path: Path, rounds: int = 3) -> tuple[InProcessGrid, dict]:
    rc = _run_config(algorithm, tmp_path, rounds)
    grid = InProcessGrid(client_app, N_CLIENTS, run_config=rc)
    return grid, run_server(grid, rc)


def _train_pairs(grid: InProcessGrid):
    """(sent, reply) pairs of train messages, in sending order."""
    by_id = {m.metadata.message_id: m for m in grid.sent}
    pairs = [(by_id[r.metadata.reply_to_message_id], r) for r in grid.received]
    return [(s, r) for s, r in pairs if s.metadata.message_type == MessageType.TRAIN]


# ------------------------------------------------------------------------------- echo
def test_echo_is_registered_in_the_app():
    # echo is not part of the library: the App loads it by module path
    assert "echo" not in registry.names(listed_only=False)
    spec = registry.get(ECHO_ALGORITHM)
    assert spec is ECHO and (spec.strategy, spec.client) == (Echo, EchoClient)
    cfg = merged_config({"algorithm": ECHO_ALGORITHM, "k": 7, "max-rounds": 4, "tol": -1.0})
    strategy = build_strategy(cfg)
    assert isinstance(strategy, Echo)
    assert (strategy.k, strategy.max_rounds, strategy.tol) == (7, 4, -1.0)


def test_echo_train_config_is_fedkmeans_config():
    fkm = FedKMeans(5, privacy_threshold=3, local_iterations=2, init="paper", recount=True)
    echo = Echo(5, privacy_threshold=3, local_iterations=2, init="paper", recount=True)
    assert echo.train_config(1) == fkm.train_config(1)
    assert echo.train_config(1)["phase"] == "init"
    fkm.centroids = echo.centroids = np.zeros((5, 2))
    assert echo.train_config(2) == fkm.train_config(2)
    assert echo.train_config(2)["phase"] == "update"


def test_echo_rejects_bad_arguments():
    with pytest.raises(ValueError, match="k must be"):
        Echo(0)
    with pytest.raises(ValueError, match="init must be"):
        Echo(3, init="nope")


def test_echo_exchanges_the_same_messages_as_fkm(tmp_path):
    fkm_grid, _ = _run("fkm", tmp_path)
    echo_grid, _ = _run("echo", tmp_path)
    fkm_pairs, echo_pairs = _train_pairs(fkm_grid), _train_pairs(echo_grid)
    assert len(fkm_pairs) == len(echo_pairs) == 3 * N_CLIENTS
    for (fs, fr), (es, er) in zip(fkm_pairs, echo_pairs, strict=True):
        # Down: same config, same array shapes (round 1: none; then C_g of (k, d)).
        assert dict(es.content["config"]) == dict(fs.content["config"])
        f_down = fs.content["arrays"].to_numpy_ndarrays()
        e_down = es.content["arrays"].to_numpy_ndarrays()
        assert [a.shape for a in e_down] == [a.shape for a in f_down]
        assert es.metadata.group_id == fs.metadata.group_id
        # Up: [means (k_i, d), counts (k_i,), index (k_i,)]; echo sends k_i = k (the bound).
        assert not er.has_error() and not fr.has_error()
        f_up = fr.content["arrays"].to_numpy_ndarrays()
        e_up = er.content["arrays"].to_numpy_ndarrays()
        assert len(e_up) == len(f_up) == 3
        assert e_up[0].shape[1] == f_up[0].shape[1] == 3
        assert len(f_up[0]) <= len(e_up[0]) == K
        assert [a.dtype for a in e_up] == [a.dtype for a in f_up]
        assert (e_up[1] == ECHO_COUNT).all()
        # Same metrics and statistics payload (keys, dtypes, shapes).
        assert set(er.content["metrics"]) == set(fr.content["metrics"])
        assert ("stats" in er.content) == ("stats" in fr.content)
        if "stats" in fr.content:
            f_st = {k: (v.numpy().shape, v.numpy().dtype) for k, v in fr.content["stats"].items()}
            e_st = {k: (v.numpy().shape, v.numpy().dtype) for k, v in er.content["stats"].items()}
            assert e_st == f_st


def test_echo_echoes_and_records_round_seconds(tmp_path):
    _, out = _run("echo", tmp_path, rounds=4)
    history = json.loads((tmp_path / "echo" / "history.json").read_text())
    assert [r["round"] for r in history] == [1, 2, 3, 4]
    assert all(r["seconds"] >= 0 for r in history)
    assert [r["shift"] for r in history[1:]] == [0.0, 0.0, 0.0]
    # Round 1: the placeholder means of the lowest client id (row j is all j), then kept.
    expected = np.repeat(np.arange(K, dtype=float)[:, None], 3, axis=1)
    np.testing.assert_array_equal(out["centroids"], expected)
    assert out["federated"]["num-examples"] == 60 * N_CLIENTS


def test_echo_client_phases_and_evaluate():
    X = np.random.default_rng(0).normal(size=(10, 2))
    y = np.arange(10) % 3
    client = EchoClient(X, y, client_id=4)
    (means, counts, index), n, metrics = client.fit([], {"phase": "init", "k": 16})
    assert means.shape == (10, 2) and n == 10 and metrics == {}
    assert (index == -1).all() and (counts == ECHO_COUNT).all()
    C = np.ones((5, 2))
    (means, counts, index), _, metrics = client.fit([C], {"phase": "update", "k": 5})
    np.testing.assert_array_equal(means, C)
    np.testing.assert_array_equal(index, np.arange(5))
    assert metrics["cluster-counts"].shape == (5,)
    assert metrics["contingency"].shape == (5, 3)
    _, _, metrics = client.fit([C], {"phase": "update", "evaluate": False})
    assert metrics == {}
    loss, n, stats = client.evaluate([C], {"n-classes": 4})
    assert (loss, n) == (0.0, 10) and stats["contingency"].shape == (5, 4)
    with pytest.raises(ValueError, match="client 4: unknown echo phase"):
        client.fit([C], {"phase": "bogus"})
    with pytest.raises(ValueError, match="features"):
        client.fit([np.ones((5, 3))], {"phase": "update"})


# ------------------------------------------------------------------- bench: compute
def test_time_call_counts_calls():
    calls = []
    t = common.time_call(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5
    assert 0 <= t["min"] <= t["median"] <= t["max"]


def _client_step_calls() -> list[int]:
    """Count what one fkm_client_update really does, for the breakdown's 'calls per step'."""
    from unittest import mock

    from flwr_clustering.algorithms import fkm, lloyd

    X, _ = make_blobs(300, centers=4, n_features=3, random_state=0)
    C = X[:4].copy()
    calls = {"check_X": 0, "labels": 0, "sums": 0}

    real_check, real_sums = lloyd.check_data, lloyd.cluster_sums
    real_labels, real_unchecked = lloyd.nearest_labels, lloyd.nearest_labels_unchecked

    def check(A, *a, **kw):
        calls["check_X"] += np.shape(A) == X.shape
        return real_check(A, *a, **kw)

    def count(key, fn):
        def wrapped(*a, **kw):
            calls[key] += 1
            return fn(*a, **kw)
        return wrapped

    with mock.patch.object(lloyd, "check_data", check), \
            mock.patch.object(fkm, "check_data", check), \
            mock.patch.object(fkm, "nearest_labels", count("labels", real_labels)), \
            mock.patch.object(lloyd, "nearest_labels", count("labels", real_labels)), \
            mock.patch.object(fkm, "nearest_labels_unchecked", count("labels", real_unchecked)), \
            mock.patch.object(lloyd, "cluster_sums", count("sums", real_sums)):
        fkm.fkm_client_update(X, C, privacy_threshold=2, local_iters=1)
    return [1, calls["check_X"], 0, calls["labels"], calls["sums"]]


def test_client_step_subcommand_writes_json_and_markdown(tmp_path):
    argv = ["client-step", "--sizes", "300", "--dims", "2", "3", "--k", "4",
            "--repeats", "1", "--threads", "default", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    result = json.loads((tmp_path / "client_step.json").read_text())
    assert len(result["rows"]) == 4
    for row in result["rows"]:
        assert row["ours_s"] > 0 and row["sklearn_s"] > 0
        assert row["ratio"] == pytest.approx(row["ours_s"] / row["sklearn_s"])
    assert [r["calls_per_step"] for r in result["breakdown"]] == _client_step_calls()
    assert all(r["seconds"] > 0 for r in result["breakdown"])
    assert result["profile"] and all(0 <= r["share"] <= 1 for r in result["profile"])
    md = (tmp_path / "client_step.md").read_text()
    assert "| 300 | 3 | 4 | 1 |" in md and "cProfile" in md


def test_server_step_subcommand(tmp_path):
    argv = ["server-step", "--clients", "2", "3", "--k", "4", "--repeats", "1",
            "--threads", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    rows = json.loads((tmp_path / "server_step.json").read_text())["rows"]
    assert [(r["clients"], r["points"]) for r in rows] == [(2, 8), (3, 12)]
    assert "| 3 | 12 | 1 |" in (tmp_path / "server_step.md").read_text()


# ------------------------------------------------------------------- bench: rounds
def test_summarize_history_skips_round_one():
    hist = [{"round": i + 1, "seconds": s} for i, s in enumerate([9.0, 0.2, 0.4, 0.3])]
    s = common.summarize_history(hist)
    assert s["rounds"] == 4 and s["round1_s"] == 9.0
    assert s["median_s"] == pytest.approx(0.3)
    assert (s["min_s"], s["max_s"]) == (0.2, 0.4)
    assert common.summarize_history(hist[:1])["median_s"] is None


def test_rounds_table_and_markdown():
    def run(alg, clients, median, ok=True):
        return {
            "algorithm": alg, "clients": clients, "ok": ok, "median_s": median,
            "min_s": median, "max_s": median, "round1_s": 9.0, "serverapp_s": 10.0,
            "wall_s": 20.0, "peak_pss_mib": 1000.0, "round_seconds": [9.0, median],
            "load_before": [1.0], "load_after": [1.0], "status": "finished:completed",
        }

    runs = [run("fkm", 10, 0.3), run("echo", 10, 0.2), run("fkm", 10, 0.5),
            run("echo", 10, 0.2), run("fkm", 100, 1.0, ok=False), run("echo", 100, 0.5)]
    table = bench.rounds_table(runs)
    assert [r["clients"] for r in table] == [10, 100]
    assert table[0]["fkm"]["round_s"] == pytest.approx(0.4)
    assert table[0]["ratio"] == pytest.approx(2.0)
    assert table[1]["fkm"]["round_s"] is None and table[1]["ratio"] is None
    params = {"samples_per_client": 100, "features": 2, "k": 16, "rounds": 5,
              "cpus_per_client": 1, "repeats": 2}
    md = bench.rounds_markdown({"params": params, "table": table, "runs": runs})
    assert "| 10 | 0.400 | 0.200 | 2.00 |" in md
    assert "Failed runs (excluded): fkm@100" in md
    assert "| fkm | 10 | 9.000, 0.300 | 10.00 | 20.0 | 1000 |" in md  # per-run row


def test_flwr_run_command_follows_the_brief(tmp_path):
    cmd = common.flwr_run_command(
        tmp_path, "echo", clients=100, rounds=5, k=16, samples_per_client=100, features=2,
        out_dir=tmp_path / "o", cpus_per_client=1,
    )
    assert cmd[1:4] == ["run", str(tmp_path), "--stream"]
    fed = cmd[cmd.index("--federation-config") + 1]
    assert fed == "num-supernodes=100 client-resources-num-cpus=1"
    rc = cmd[cmd.index("--run-config") + 1].split()
    for item in (f"algorithm='{ECHO_ALGORITHM}'", "dataset='blobs'", "partitioner='iid'", "n-samples=10000",
                 "k=16", "max-rounds=5", "tol=-1.0", "min-nodes=100"):
        assert item in rc
    assert not any(item.startswith("iterations=") for item in rc)
    # DGC runs 1 init round + `iterations` steps: the same total round count
    cmd = common.flwr_run_command(
        tmp_path, "dgc", clients=10, rounds=5, k=16, samples_per_client=100, features=2,
        out_dir=tmp_path / "o", cpus_per_client=1,
    )
    assert "iterations=4" in cmd[cmd.index("--run-config") + 1].split()


def test_rounds_run_config_values_are_parsed_and_reach_the_command(tmp_path):
    parsed = {k: bench._parse_value(v) for k, v in
              (item.split("=", 1) for item in ["network=mlp", "local-epochs=1",
                                               "learning-rate=0.05", "augment=false"])}
    assert parsed == {"network": "mlp", "local-epochs": 1, "learning-rate": 0.05,
                      "augment": False}
    cmd = common.flwr_run_command(
        tmp_path, "deepfeca", clients=10, rounds=1, k=4, samples_per_client=10, features=2,
        out_dir=tmp_path / "o", cpus_per_client=1,
        extra_run_config={**parsed, "dataset": "garst-grid"},
    )
    rc = cmd[cmd.index("--run-config") + 1].split()
    assert {"network='mlp'", "local-epochs=1", "learning-rate=0.05", "augment=false"} <= set(rc)
    assert "dataset='garst-grid'" in rc and "dataset='blobs'" not in rc  # one value per key


def test_flower_env_uses_private_ports(tmp_path):
    env = common.flower_env(tmp_path, 40001, 40003)
    assert env["FLWR_HOME"] == str(tmp_path)
    assert env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] == "40001"
    assert env["FLWR_LOCAL_CONTROL_API_PORT"] == "40003"
    assert env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1"


def test_start_superlink_refuses_a_busy_port(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RuntimeError, match="already in use"):
            common.start_superlink(tmp_path, port, port + 2, dict(os.environ))


def test_process_label():
    assert common.process_label(["ray::ClientAppActor.run"]) == "ray::ClientAppActor.run"
    assert common.process_label(["/v/bin/python3", "-u", "/x/dashboard.py", "--a"]) == "dashboard.py"
    assert common.process_label(["/v/bin/python3", "/v/bin/flower-superlink", "--insecure"]) == (
        "flower-superlink"
    )
    assert common.process_label(["/usr/lib/ray/raylet", "--x"]) == "raylet"
    assert common.process_label([]) == "?"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_process_tree_pss_and_stop(tmp_path):
    # A shell with a background child: the tree is ours, so stopping it is allowed.
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        for _ in range(50):
            if processes.descendants([proc.pid]):
                break
            time.sleep(0.05)
        kids = processes.descendants([proc.pid])
        assert kids and proc.pid in [p.pid for p in processes.descendants([os.getpid()])]
        assert common.pss_kib(os.getpid()) > 0
        sampler = common.PssSampler(proc.pid, interval=0.05)
        total = sampler.sample()
        assert total > 0 and sampler.peak_kib == total and sampler.samples == 1
        assert sum(c for c, _ in sampler.peak_by_label.values()) == 1 + len(kids)
        stopped = common.stop_tree(proc.pid, timeout=5)
        assert set(stopped) == {proc.pid, *(p.pid for p in kids)}
        proc.wait(timeout=5)
        assert all(not processes.is_running((p.pid, p.start_time)) for p in kids)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert common.pss_kib(2**22 + 12345) is None


def test_inprocess_subcommand_attributes_time(tmp_path):
    argv = ["inprocess", "--clients", "3", "--rounds", "3", "--k", "4",
            "--samples-per-client", "30", "--threads", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    rows = json.loads((tmp_path / "inprocess.json").read_text())["rows"]
    by_alg = {r["algorithm"]: r for r in rows}
    assert set(by_alg) == {"fkm", "echo"}
    assert all(r["rounds"] == 3 and r["median_s"] is not None for r in rows)
    fkm, echo = by_alg["fkm"]["components"], by_alg["echo"]["components"]
    assert "server: fkm_server_aggregate (weighted k-means)" in fkm
    assert "client: fkm_client_update" in fkm
    assert "client: EchoClient.fit" in echo and "client: fkm_client_update" not in echo
    assert "| 3 | echo |" in (tmp_path / "inprocess.md").read_text()


def test_large_client_cases_measure_their_own_step():
    """bench large-client: the on-the-fly data, and each case's record (small sizes)."""
    from simulations.benchmarks import large_client

    X, y = large_client.generate(3000, 4, 3, seed=1)
    X2, y2 = large_client.generate(3000, 4, 3, seed=1)
    np.testing.assert_array_equal(X, X2)
    assert X.flags.c_contiguous and X.dtype == np.float64 and set(np.unique(y)) == {0, 1, 2}
    # the blobs are real clusters: each row is nearer its own blob's mean than another's
    means = np.array([X[y == j].mean(axis=0) for j in range(3)])
    assert (np.argmin(((X[:, None] - means[None]) ** 2).sum(-1), axis=1) == y).mean() > 0.95
    for case in ("fkm-step", "evaluate", "masked-update", "masked-evaluate"):
        rec = large_client.run_case(case, 3000, 4, 3, threads=1)
        assert rec["case"] == case and rec["data_mib"] == round(3000 * 4 * 8 / 2**20, 1)
        assert rec["peak_mib"] >= rec["rss_before_mib"] > 0 and rec["seconds"] > 0
        assert rec["peak_over_data"] == pytest.approx(rec["peak_mib"] / (3000 * 4 * 8 / 2**20),
                                                      rel=1e-3)
    with pytest.raises(ValueError, match="unknown case"):
        large_client.run_case("nope", 10, 2, 2, threads=1)
    text = large_client.markdown({"rows": 3000, "features": 4, "k": 3, "cpus": 2,
                                  "load": [0.5, 0, 0], "runs": [rec],
                                  "ratios": {"fkm-step / sklearn-step (threads=1)": 0.5}})
    assert "| masked-evaluate | 1 |" in text and "0.5" in text


def test_lloyd_step_and_data_build_benchmarks_measure_what_they_say(tmp_path):
    from simulations.benchmarks import perf

    argv = ["lloyd-step", "--shapes", "3000x3x4", "--repeats", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    rows = json.loads((tmp_path / "lloyd_step.json").read_text())["rows"]
    assert [row["dtype"] for row in rows] == ["float64", "float32"]  # both types, one run
    for row in rows:
        assert row["labels_equal_cdist"] and (row["n"], row["d"], row["k"]) == (3000, 3, 4)
        assert row["step_over_gemm"] == pytest.approx(row["lloyd_step_s"] / row["gemm_s"])
    assert "| float32 | 1 |" in (tmp_path / "lloyd_step.md").read_text()
    built = perf.bench_data_build(builds=[("garst-grid", "iid", 5, {})], repeats=1)
    (b,) = built["builds"]
    assert b["rows_client_0"] == 160 and 0 < b["build_s"] and 0 < b["import_s"]
    assert built["client_app_import_s"] > 0


def test_reply_check_benchmark_times_every_phase_of_honest_replies(tmp_path):
    argv = ["reply-check", "--d", "3", "--number", "5", "--out", str(tmp_path)]
    assert bench.main(argv) == 0  # every honest reply passes its contract (else it raises)
    rows = json.loads((tmp_path / "reply_check.json").read_text())["rows"]
    assert [r["phase"] for r in rows] == ["data-source", "feature-moments", "k-moments",
                                          "split-scatter", "evaluate", "train (fkm)"]
    assert all(r["d"] == 3 and r["us"] > 0 for r in rows)
    assert "| feature-moments |" in (tmp_path / "reply_check.md").read_text()


def test_dtype_benchmark_compares_float32_with_float64_on_the_same_clients():
    from simulations.benchmarks import perf

    result = perf.bench_dtype(cases=perf.DTYPE_CASES[:1], seeds=[0], shape=(2000, 3, 4),
                              repeats=1)
    (row,) = result["quality"]
    # the paper's beta-0.1 grid: both types find its 16 clusters
    assert row["ari_float64"] > 0.9 and abs(row["ari_float32"] - row["ari_float64"]) < 0.02
    assert row["sse_rel_diff"] == pytest.approx(row["sse_float32"] / row["sse_float64"] - 1)
    speed = result["speed"]
    assert speed["rows_float32_mib"] == pytest.approx(speed["rows_float64_mib"] / 2)
    assert "| float32 |" in perf._dtype_markdown(result)


def test_site_message_table_shows_before_and_after():
    from simulations.benchmarks import site_message

    def row(scale, loaded):
        return {"format": "csv", "message": "fkm-update", "cache": "warm", "rows": 5000,
                "repeats": 1, "flower_s": 1.0, "ours_s": 0.2 * scale, "read_s": 0.3 * scale,
                "compute_s": 0.1, "total_s": 1.0 + 0.5 * scale + 0.1, "second_s": 0.004,
                "loaded": loaded}

    after = {"rows": [row(0.5, ["scipy"])], "repeats": 1, "load_before": [],
             "load_after": []}
    before = {"rows": [row(1.0, ["pandas", "scipy"])]}
    md = site_message.site_message_markdown(after, before)
    line = next(x for x in md.splitlines() if x.startswith("| csv | fkm-update | warm |"))
    assert line == ("| csv | fkm-update | warm | 1.000 -> 1.000 | 0.200 -> 0.100 | "
                    "0.300 -> 0.150 | 0.100 -> 0.100 | 1.600 -> 1.350 | 0.600 -> 0.350 | "
                    "0.004 -> 0.004 | pandas, scipy -> scipy |")


def test_exchanges_per_run_are_counted_and_named(tmp_path):
    """``bench exchanges``: every round trip of a run, by phase (issue 52's baseline)."""
    from simulations.benchmarks.exchanges import bench_exchanges, exchanges_markdown

    rows = bench_exchanges(tmp_path, cases=(("kfed", {"algorithm": "kfed"}),
                                            ("fkm", {"algorithm": "fkm", "max-rounds": 3,
                                                     "early-stop": False})))
    kfed, fkm = rows
    # one-shot: the data-source check and the features' moments, the round, the final
    # model's delivery carrying the split check's first sums, and the check's second
    assert kfed["before"] == {"data-source": 1, "feature-moments": 1}
    assert kfed["rounds_part"] == {"kfed": 1, "evaluate+split-scatter": 1,
                                   "split-histograms": 1}
    assert (kfed["rounds"], kfed["total"]) == (1, 5)
    assert fkm["rounds"] == 3 and fkm["rounds_part"]["init"] == 1
    assert fkm["rounds_part"]["update"] == 2 and fkm["total"] == 2 + 3 + 2
    table = exchanges_markdown({"nodes": 3, "rows": rows})
    assert "| kfed | 1 | 5 | data-source, feature-moments |" in table


def _stat(pid, comm, state, ppid, utime, stime, cutime, cstime, start=100):
    """A /proc/<pid>/stat line (proc(5)): fields 1-22, then two more."""
    mid = " ".join(["0"] * 5)  # flags, minflt, cminflt, majflt, cmajflt (fields 9-13)
    return (f"{pid} ({comm}) {state} {ppid} 0 0 0 -1 {mid} {utime} {stime} {cutime} "
            f"{cstime} 20 0 1 0 {start} 1000 10 0")


def test_parse_stat_reads_cpu_fields_and_a_comm_with_spaces():
    from simulations.benchmarks.supernodes import parse_stat

    row = parse_stat(7, _stat(7, "flwr clientapp)", "Z", 3, 250, 50, 12, 8, start=555), 100.0)
    assert (row.pid, row.ppid, row.state, row.comm, row.start_time) == (
        7, 3, "Z", "flwr clientapp)", 555)
    assert row.own_s == 3.0 and row.reaped_s == 0.2


def _tree(apps):
    """SuperLink 1 -> SuperExec 2 -> apps; ``apps``: {pid: (state, own ticks)}; 2 reaped some."""
    from simulations.benchmarks.supernodes import parse_stat

    rows = [_stat(1, "flower-superlin", "S", 0, 40, 10, 0, 0),
            _stat(2, "flower-superexe", "S", 1, 5, 5, apps.pop("reaped", 0), 0)]
    rows += [_stat(pid, "flwr-serverapp", state, 2, ticks, 0, 0, 0)
             for pid, (state, ticks) in apps.items()]
    rows.append(_stat(9, "unrelated", "S", 0, 999, 999, 999, 999))
    return {int(r.split()[0]): parse_stat(int(r.split()[0]), r, 10.0) for r in rows}


def test_tree_cpu_counts_reaped_and_zombie_apps_once():
    from simulations.benchmarks.supernodes import cpu_delta, tree_cpu

    # before: a zombie of the last run (30 ticks) waits to be reaped
    before = tree_cpu(_tree({5: ("Z", 30)}), [1])
    assert before["apps_s"] == 3.0 and before["apps"] == 1
    assert before["names"] == {"root": ["flower-superlin"], "middle": ["flower-superexe"],
                               "apps": ["flwr-serverapp"]}
    # after: it was reaped (30 ticks moved to cutime), this run's app (70 ticks) is a zombie
    # and another (20) was reaped too: this run's apps used 90 ticks = 9 s
    after = tree_cpu(_tree({"reaped": 50, 6: ("Z", 70)}), [1])
    delta = cpu_delta(before, after)
    assert delta["apps_s"] == 9.0
    assert delta["root_s"] == 0.0 and delta["middle_s"] == 0.0
    # a replaced SuperExec: the apps' CPU is unknown, not wrong
    other = dict(after)
    other["middle"] = [(2, 101)]
    assert cpu_delta(before, other)["apps_s"] is None


def test_node_messages_counts_one_run_from_a_supernode_log():
    from simulations.benchmarks.supernodes import node_messages

    log = "\n".join([
        "\x1b[92mINFO \x1b[0m:      [RUN 11, ROUND 0]",
        "\x1b[92mINFO \x1b[0m:      Receiving: query message (ID: aa)",
        "INFO :      Sending: query message (ID: bb)",
        "INFO :      [RUN 22, ROUND 1]",
        "INFO :      Receiving: train message (ID: cc)",
        "INFO :      [RUN 22, ROUND 1]",
        "INFO :      Sending: train message (ID: dd)",
        "INFO :      [RUN 22, ROUND 2]",
        "INFO :      Receiving: train message (ID: ee)",
        "INFO :      [RUN 22, ROUND 2]",
        "INFO :      Receiving: evaluate message (ID: ff)",
    ])
    assert node_messages(log, 22) == {"train": 2, "evaluate": 1}
    assert node_messages(log, 11) == {"query": 1}
    assert node_messages(log, 33) == {}


def test_run_costs_and_the_table_report_exchanges_and_cpu():
    from simulations.benchmarks.supernodes import run_costs, supernodes_markdown, supernodes_table

    link = {"root_s": 1.5, "middle_s": 0.5, "apps_s": 6.0}
    nodes = {"root_s": 3.0, "middle_s": 1.0, "apps_s": 60.0}
    costs = run_costs(3, [{"train": 4, "query": 1}, {"train": 4, "query": 1}], link, nodes)
    assert costs["exchanges"] == 5 and costs["messages"] == 10
    assert costs["messages_by_type"] == {"train": 8, "query": 2}
    assert costs["cpu_per_message_s"] == 6.0
    assert costs["superlink_cpu_per_round_s"] == 0.5
    assert costs["serverapp_cpu_per_round_s"] == 2.0
    assert costs["supernode_cpu_per_round_s"] == 1.0
    # nodes that disagree: no exchange count; an unknown CPU stays unknown
    odd = run_costs(3, [{"train": 4}, {"train": 3}], link, {**nodes, "apps_s": None})
    assert odd["exchanges"] is None and odd["cpu_per_message_s"] is None
    run = {"algorithm": "fkm-lloyd", "ok": True, "repeat": 0, "median_s": 2.0,
           "round_seconds": [3.0, 2.0, 2.0], **costs}
    table = supernodes_table([run, {**run, **run_costs(3, [{"train": 7}] * 2, link,
                                                        {**nodes, "apps_s": 28.0})}],
                             ["fkm-lloyd"])
    row = table["fkm-lloyd"]
    assert row["exchanges"] == 6.0 and row["cpu_per_message_s"] == 4.0
    assert row["superlink_cpu_per_round_s"] == 0.5
    result = {"params": {"nodes": 2, "samples_per_node": 50, "features": 2, "k": 16,
                         "rounds": 3, "repeats": 1, "algorithms": ["fkm-lloyd"]},
              "runs": [run], "table": table}
    md = supernodes_markdown(result)
    assert "| exchanges | CPU / message (s) | SuperLink CPU / round (s) |" in md
    assert "| 6 | 4.00 | 0.500 | 2.000 |" in md
    assert "| 5 ({'train': 8, 'query': 2}) | 60.0 | 1.50 / 0.50 / 6.00 | 3.00 / 1.00 |" in md


def test_the_protocol_pages_exchange_counts_are_what_a_run_sends(tmp_path):
    """docs/protocol.md's before/after table (``EXCHANGES_BEFORE_AFTER``): its "after"
    column is what the App sends now, counted again for the cases that run in seconds."""
    from simulations.benchmarks.exchanges import (
        CASES,
        EXCHANGES_BEFORE_AFTER,
        bench_exchanges,
    )

    assert [c for c, _ in CASES] == list(EXCHANGES_BEFORE_AFTER)
    cheap = ("fkm", "fkm feature-columns", "fkm secure", "kfed", "ffcm", "kdc")
    rows = bench_exchanges(tmp_path, cases=[c for c in CASES if c[0] in cheap])
    assert {r["case"]: r["total"] for r in rows} == {
        c: EXCHANGES_BEFORE_AFTER[c][1] for c in cheap}
    assert all(after <= before for before, after in EXCHANGES_BEFORE_AFTER.values())
