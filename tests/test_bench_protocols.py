"""Fast correctness tests of the ``protocols`` benchmark (DGC's relay, KDC's sites).

No timing assertions: the numbers live in the benchmark's results, never in unit tests.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

from flwr_clustering.algorithms.dgc import build_graph
from simulations.benchmarks import protocols

M, P, T, S, K, D = 8, 0.5, 3, 2, 4, 3


@pytest.fixture(scope="module")
def dgc():
    return protocols.bench_dgc_relay(M, P, iterations=T, inner_steps=S, k=K,
                                     samples_per_node=30, features=D, repeats=1,
                                     profile=False)


@pytest.fixture(scope="module")
def kdc():
    return protocols.bench_kdc_sites((2, 3), 3000, k=3, features=3, sample_size=600)


def test_the_relay_is_the_pure_loop_on_the_projects_er_graph(dgc):
    A = build_graph("erdos-renyi", M, p=P, seed=0)
    assert connected_components(A, directed=False)[0] == 1
    edges = int(np.count_nonzero(A)) // 2
    g = dgc["graph"]
    assert (g["nodes"], g["edges"], g["edge_probability"]) == (M, edges, P)
    assert g["average_degree"] == pytest.approx(2 * edges / M)
    assert g["max_degree"] == int(A.sum(axis=1).max())
    # the Flower run ended where run_dgc ends, on this very graph
    assert dgc["core_equals_strategy"] is True
    assert dgc["strategy"]["step_rounds"] == list(range(2, 2 + T * S))


def test_counted_relay_messages_and_the_p2p_equivalent(dgc):
    edges, kd = dgc["graph"]["edges"], K * D
    cm = dgc["communication"]
    assert cm["steps"] == T * S == len(cm["per_step"])
    # counted on the grid: one message down and one reply up per node and step
    assert cm["relay_messages_per_step"] == [2 * M] == [cm["relay_messages_expected_2m"]]
    for step in cm["per_step"]:
        assert step["messages_down"] == step["messages_up"] == M
        # own centres + neighbour sum, and the anchor at the later inner steps
        assert step["floats_down"] == (2 if step["first_inner_step"] else 3) * M * kd
        assert step["floats_up"] == M * kd
        assert step["bytes_down"] == 8 * step["floats_down"]
        # the strategy's own per-round statement agrees with the count
        assert step["stated_messages"] == step["messages_down"] + step["messages_up"]
        assert (step["stated_floats_down"], step["stated_floats_up"]) == (
            step["floats_down"], step["floats_up"])
        assert step["stated_p2p_messages"] == 2 * edges
    assert [s["first_inner_step"] for s in cm["per_step"]] == [True, False] * T
    assert cm["p2p_messages_per_step"] == 2 * edges
    assert cm["p2p_floats_per_step"] == 2 * edges * kd
    assert cm["busiest_p2p_node_floats"] == 2 * dgc["graph"]["max_degree"] * kd
    assert cm["busiest_relay_server_floats"] == 4 * M * kd  # 3 m kd down + m kd up
    # the init round: no arrays down, every node's centres up; the final delivery once
    assert cm["init_round"]["messages_down"] == cm["init_round"]["messages_up"] == M
    assert cm["init_round"]["floats_down"] == 0 and cm["init_round"]["floats_up"] == M * kd
    assert cm["final_evaluate"]["messages_down"] == M


def test_core_timings_are_recorded(dgc):
    core = dgc["core"]
    assert core["pooled_rows"] == 30 * M
    assert core["step_s"] > 0 and core["lloyd_sklearn_s"] > 0 and core["iteration_s"] > 0
    assert dgc["strategy"]["median_s"] > 0


def test_kdc_per_site_statistics_are_consistent(kdc):
    assert [r["sites"] for r in kdc["rows"]] == [2, 3]
    assert kdc["data"]["rows"] == 3000
    for row in kdc["rows"]:
        assert "error" not in row, row.get("error")
        (run,) = row["runs"]
        r = row["sites"]
        for key in ("site_s", "stats_s", "sample_s", "assign_s"):
            assert len(run[key]) == r and all(x > 0 for x in run[key])
        assert run["site_s"] == pytest.approx(
            np.add(np.add(run["stats_s"], run["sample_s"]), run["assign_s"]).tolist())
        assert row["largest_site_s"] == row["largest_site_min_s"] == max(run["site_s"])
        assert row["smallest_site_s"] <= row["median_site_s"] <= row["largest_site_s"]
        assert row["server_s"] > 0 and row["central_s"] > 0
        assert row["distributed_s"] >= row["server_s"] + row["largest_assign_s"]
        assert row["central_with_step1_s"] >= row["central_s"]
        # every row labelled once, and exactly as the centralized run labels it
        assert row["labelled_rows"] == 3000 and row["labels_equal"] is True
        assert row["sample_rows"] == 600
        assert row["ratio_central_to_largest_site"] == pytest.approx(
            row["central_s"] / row["largest_site_s"])
        assert row["rows_per_site_min"] + row["rows_per_site_max"] >= 2 * (3000 // r)


def test_counting_grid_counts_what_it_delivers():
    from flwr_clustering.app.client_app import app as client_app
    from flwr_clustering.app.config import build_strategy, merged_config

    rc = {"algorithm": "fkm", "dataset": "blobs", "partitioner": "iid", "n-samples": 90,
          "n-features": 2, "centers": 3, "k": 3, "max-rounds": 2, "tol": -1.0, "min-nodes": 3}
    grid = protocols.CountingGrid(client_app, 3, run_config=rc)
    build_strategy(merged_config(rc)).start(grid=grid)
    per_round = grid.per_round("train")
    assert sorted(per_round) == [1, 2]
    for row in per_round.values():
        assert row["messages-down"] == row["messages-up"] == 3
    total = sum(e["messages"] for e in grid.tally.values())
    assert total == len(grid.sent) + len(grid.received)


def test_main_writes_json_and_markdown(tmp_path):
    code = protocols.main([
        "--nodes", "6", "--edge-probability", "0.6", "--iterations", "3", "--k", "3",
        "--samples-per-node", "20", "--repeats", "1", "--sites", "2", "--total-rows", "2000",
        "--kdc-k", "3", "--kdc-features", "3", "--sample-size", "500", "--out", str(tmp_path),
    ])
    assert code == 0
    result = json.loads((tmp_path / "protocols.json").read_text())
    assert result["benchmark"] == "protocols"
    assert result["dgc"][0]["graph"]["nodes"] == 6
    assert result["dgc"][0]["strategy"]["components"]  # the profiled step rounds
    assert result["kdc"]["rows"][0]["sites"] == 2
    md = (tmp_path / "protocols.md").read_text()
    assert "## DGC on an Erdős–Rényi graph" in md and "## KDC" in md
    assert "| 6 | 0.6 |" in md and "| 2 | 1000 |" in md


def test_ray_command_passes_the_graph_through(tmp_path):
    from simulations.benchmarks import common

    cmd = common.flwr_run_command(tmp_path, "dgc", 100, 11, 16, 100, 2, tmp_path / "run", 1,
                                  protocols.dgc_run_config(0.3, seed=2))
    rc = cmd[cmd.index("--run-config") + 1]
    for part in ("algorithm='dgc'", "graph='erdos-renyi'", "er-p=0.3", "seed=2",
                 "iterations=10", "min-nodes=100", "n-samples=10000"):
        assert part in rc.split(), part
    assert "num-supernodes=100" in cmd[cmd.index("--federation-config") + 1]


def test_add_parser_registers_the_subcommand():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    protocols.add_parser(sub)
    args = parser.parse_args(["protocols", "--sites", "10", "100", "--quick", "--out", "x"])
    assert args.command == "protocols" and args.func is protocols._cmd_protocols
    assert args.sites == [10, 100] and args.edge_probability == [0.3] and args.nodes == 100
