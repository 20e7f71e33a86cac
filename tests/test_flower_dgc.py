"""DGC through Flower (in-process grid): the relay reproduces the pure loop exactly."""

import json

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.metrics import adjusted_rand_score

from flwr_clustering.algorithms.dgc import assign, build_graph, initial_centres, run_dgc
from flwr_clustering.app.checkpoint import pack, unpack
from flwr_clustering.clients import client_app
from flwr_clustering.clients.dgc import DGCClient
from flwr_clustering.metrics import hungarian_accuracy, sse
from flwr_clustering.strategies.dgc import DGC
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app


def _users(m=10, seed=0):
    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(y == c)) for c in range(3)]
    return [(X[idx], y[idx]) for idx in
            (np.concatenate([p[5 * i:5 * (i + 1)] for p in per_class]) for i in range(m))]


@pytest.mark.parametrize("loss,graph,S,init", [("kmeans", "ring", 1, "kmeans"),
                                                ("huber", "erdos-renyi", 2, "random"),
                                                ("logistic", "star", 1, "random")])
def test_relay_equals_the_pure_loop_bit_for_bit(loss, graph, S, init):
    parts = _users()
    data = [X for X, _ in parts]
    T = 6
    strategy = DGC(3, loss=loss, rho=10.0, graph=graph, iterations=T, inner_steps=S,
                   init=init, min_nodes=10, seed=4)
    grid = InProcessGrid(client_app_for(DGCClient, parts), 10, shuffle_seed=2)
    strategy.start(grid=grid)
    assert len(strategy.history) == 1 + T * S  # init round + T S steps
    A = build_graph(graph, 10, seed=4)
    ref = run_dgc(data, A, initial_centres(data, 3, seed=4, scheme=init), loss=loss,
                  rho=10.0, iterations=T, inner_steps=S)
    for t in range(T + 1):
        np.testing.assert_array_equal(strategy.node_history[t * S], ref.history[t])
    # the relay's J_rho at every iteration start equals the pure loop's
    costs = [h["cost"] for h in strategy.history[1:]][::S]
    np.testing.assert_allclose(costs, ref.costs[:T], rtol=1e-12)
    # every step message carries only K x d matrices: own centres, neighbour sum, and the
    # anchor only at an iteration's later inner steps; the history counts them
    sizes = {}
    for msg in grid.sent:
        if msg.metadata.message_type == "train":
            arrays = msg.content["arrays"].to_numpy_ndarrays()
            assert all(a.shape == (3, 4) for a in arrays)
            sizes.setdefault(msg.metadata.group_id, []).append(len(arrays))
    for h in strategy.history[1:]:
        first = (h["round"] - 2) % S == 0
        assert sizes[str(h["round"])] == [2 if first else 3] * 10
        assert h["messages"] == 20 and h["floats-up"] == 10 * 12
        assert h["floats-down"] == (2 if first else 3) * 10 * 12
        assert h["p2p-floats"] == np.count_nonzero(A) * 12


def test_a_missing_node_stops_the_run_with_a_clear_error():
    parts = _users()

    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        if i == 3:
            return DGCClient(np.full((15, 4), np.nan), client_id=i)  # a broken node
        return DGCClient(*parts[i], client_id=i)

    strategy = DGC(3, iterations=2, min_nodes=9)
    with pytest.raises(RuntimeError, match=r"client ids must be 0\.\.9; missing: client 3; "
                                            r"without a valid reply: client 3 \(node 103\) failed"):
        strategy.start(grid=InProcessGrid(client_app(client_fn), 10))


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="loss"):
        DGC(3, loss="hinge")
    with pytest.raises(ValueError, match="rho"):
        DGC(3, rho=0.5)
    with pytest.raises(ValueError, match="fraction"):
        DGC(3, fraction=0.5)
    with pytest.raises(ValueError, match="init"):
        DGC(3, init="kmeans++")


def test_the_flower_app_runs_dgc_from_the_run_config(tmp_path):
    import json

    from flwr_clustering.data import load_partition

    rc = {"algorithm": "dgc", "dataset": "iris", "partitioner": "iid", "k": 3,
          "min-nodes": 5, "graph": "ring", "rho": 100.0, "iterations": 50,
          "node-init": "random", "out-dir": str(tmp_path / "dgc"), "scaling": "none"}
    out, _ = run_app(rc, 5)
    strategy = out["strategy"]
    assert len(strategy.history) == 51 and strategy.history[-1]["consensus"] > 0
    data = [load_partition(i, 5, dataset="iris", partitioner="iid")[0] for i in range(5)]
    ref = run_dgc(data, build_graph("ring", 5), initial_centres(data, 3, scheme="random"),
                  rho=100.0, iterations=50)
    np.testing.assert_array_equal(strategy.node_centres, ref.centres)
    with np.load(tmp_path / "dgc" / "nodes.npz") as nodes:
        np.testing.assert_array_equal(nodes["centres"], ref.centres)
        np.testing.assert_array_equal(nodes["adjacency"], build_graph("ring", 5))
    saved = json.loads((tmp_path / "dgc" / "result.json").read_text())
    assert saved["federated"]["accuracy"] > 0.85 and saved["centralized"]["accuracy"] > 0.85
    # per-user accuracy (each user's own centres): federated from summed tables, exactly
    # what labelling the pooled rows directly gives; "local" on the user's own rows
    labels = [load_partition(i, 5, dataset="iris", partitioner="iid")[1] for i in range(5)]
    X, y = np.vstack(data), np.concatenate(labels)
    joint = [hungarian_accuracy(y, assign(X, C)) for C in ref.centres]
    local = [hungarian_accuracy(y_i, assign(X_i, C))
             for X_i, y_i, C in zip(data, labels, ref.centres, strict=True)]
    fed = saved["federated"]
    assert fed["user-accuracy-mean"] == pytest.approx(np.mean(joint), abs=1e-15)
    assert fed["user-accuracy-min"] == pytest.approx(min(joint), abs=1e-15)
    assert fed["user-local-accuracy-mean"] == pytest.approx(np.mean(local), abs=1e-15)
    assert fed["user-ari-mean"] == pytest.approx(
        np.mean([adjusted_rand_score(y, assign(X, C)) for C in ref.centres]), abs=1e-12)
    assert fed["user-sse-mean"] == pytest.approx(np.mean([sse(X, C) for C in ref.centres]))
    # and the per-round server-side scoring of the same users agrees at the last round
    rounds = json.loads((tmp_path / "dgc" / "history.json").read_text())
    last = rounds[-1]["server-metrics"]
    assert last["user-accuracy-mean"] == pytest.approx(np.mean(joint), abs=1e-15)
    assert all("user-accuracy-mean" in r["server-metrics"] for r in rounds)


def test_nodes_file_is_in_the_data_units_with_the_apps_default_scaling(tmp_path):
    """With scaling='standard' every node computes on the scaled rows; nodes.npz gives its
    centres back in the data's units (the pure loop's, mapped back) and as computed."""
    from flwr_clustering.data import load_partition

    rc = {"algorithm": "dgc", "dataset": "iris", "partitioner": "iid", "k": 3,
          "min-nodes": 3, "graph": "ring", "rho": 100.0, "iterations": 3,
          "node-init": "random", "out-dir": str(tmp_path / "dgc")}
    out, _ = run_app(rc, 3)
    transform = out["strategy"].feature_transform
    assert transform.scaling == "standard"
    center, scale = np.asarray(transform.center), np.asarray(transform.scale)
    data = [(load_partition(i, 3, dataset="iris", partitioner="iid")[0] - center) / scale
            for i in range(3)]
    ref = run_dgc(data, build_graph("ring", 3), initial_centres(data, 3, scheme="random"),
                  rho=100.0, iterations=3)
    with np.load(tmp_path / "dgc" / "nodes.npz") as nodes:
        np.testing.assert_allclose(nodes["scaled_centres"], ref.centres, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(nodes["centres"],
                                      nodes["scaled_centres"] * scale + center)
    # the centres are in iris's centimetres: inside the pooled rows' range per feature
    pooled = np.vstack([load_partition(i, 3, dataset="iris", partitioner="iid")[0]
                        for i in range(3)])
    with np.load(tmp_path / "dgc" / "nodes.npz") as nodes:
        assert np.all(nodes["centres"] >= pooled.min(0) - 1e-9)
        assert np.all(nodes["centres"] <= pooled.max(0) + 1e-9)


def test_scored_users_are_all_up_to_the_limit_then_evenly_spaced():
    from flwr_clustering.algorithms.dgc import scored_users

    assert scored_users(5, 100).tolist() == [0, 1, 2, 3, 4]
    assert scored_users(1000, 100).tolist() == np.linspace(0, 999, 100).round().tolist()
    assert scored_users(7, 3).tolist() == [0, 3, 6] and scored_users(7, 0).size == 0


def test_per_user_metrics_score_only_user_eval_nodes_users_each_node_labels_with_its_own(
        tmp_path):
    """m = 6 nodes, ``user-eval-nodes`` 3: the metrics equal scoring users 0, 2, 5 on the
    pooled rows directly; every node still labels its rows with its own centres; only the
    scored users' centres went out."""
    from flwr_clustering.app.client_app import app as app_client
    from flwr_clustering.app.server_app import run_server
    from flwr_clustering.clients import stored_labels
    from flwr_clustering.data import load_partition

    m = 6
    rc = {"algorithm": "dgc", "dataset": "iris", "partitioner": "iid", "k": 3,
          "min-nodes": m, "graph": "ring", "rho": 100.0, "iterations": 10,
          "user-eval-nodes": 3, "out-dir": str(tmp_path / "dgc")}
    grid = InProcessGrid(app_client, m, run_config=rc)
    strategy = run_server(grid, rc)["strategy"]
    ids = strategy.scored_ids().tolist()
    assert ids == [0, 2, 5]
    # the nodes cluster the federation's scaled rows (scaling='standard')
    scaled = strategy.feature_transform.transform
    parts = [(scaled(X_i), y_i) for X_i, y_i in (
        load_partition(i, m, dataset="iris", partitioner="iid") for i in range(m))]
    X, y = np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    centres = strategy.node_centres
    joint = [hungarian_accuracy(y, assign(X, centres[i])) for i in ids]
    local = [hungarian_accuracy(parts[i][1], assign(parts[i][0], centres[i])) for i in ids]
    fed = json.loads((tmp_path / "dgc" / "result.json").read_text())["federated"]
    assert fed["user-eval-nodes"] == 3
    assert fed["user-accuracy-mean"] == pytest.approx(np.mean(joint), abs=1e-15)
    assert fed["user-accuracy-min"] == pytest.approx(min(joint), abs=1e-15)
    assert fed["user-local-accuracy-mean"] == pytest.approx(np.mean(local), abs=1e-15)
    assert fed["user-sse-mean"] == pytest.approx(np.mean([sse(X, centres[i]) for i in ids]))
    # the server-side scoring (pooled rows) summarises the same users; every node's
    # centres stay in user_models() (the estimator's user_centers_, nodes.npz)
    last = json.loads((tmp_path / "dgc" / "history.json").read_text())[-1]["server-metrics"]
    assert last["user-accuracy-mean"] == pytest.approx(np.mean(joint), abs=1e-15)
    assert strategy.user_models().shape == (m, 3, 4)
    assert strategy.scored_user_models().shape == (3, 3, 4)
    evaluate = [msg for msg in grid.sent if msg.metadata.message_type == "evaluate"]
    assert evaluate and all(msg.content["arrays"]["1"].numpy().shape == (3, 3, 4)
                            for msg in evaluate)
    for i, (X_i, _) in enumerate(parts):
        np.testing.assert_array_equal(stored_labels(grid.contexts[100 + i]),
                                      assign(X_i, centres[i]))


def test_client_labels_and_scores_its_rows_locally():
    X = np.vstack([np.zeros((10, 2)), [[9.0, 9.0]]])
    client = DGCClient(X, client_id=0)
    out = client.label_and_score(np.array([[0.0, 0.0], [1.0, 1.0]]), fraction=1 / 11)
    assert out["outliers"].tolist() == [False] * 10 + [True]
    assert out["scores"][-1] == pytest.approx(np.hypot(8.0, 8.0))


def test_client_evaluation_scores_every_nodes_centres_and_rejects_a_bad_stack():
    X, y = _users(m=2)[0]
    client = DGCClient(X, y, client_id=1)
    models = np.stack([X[:3], X[3:6]])
    _, n, stats = client.evaluate([models.mean(axis=0), models, X[:3]], {"n-classes": 3})
    assert n == 15 and stats["model-contingency"].shape == (2, 3, 3)
    assert stats["model-sse"][0] == pytest.approx(sse(X, X[:3]))
    with pytest.raises(ValueError, match="node centres"):
        client.evaluate([models.mean(axis=0), models[:, :2]], {})


def test_optional_tolerance_stops_when_no_node_moves():
    parts = _users()
    full = DGC(3, rho=10.0, iterations=300, min_nodes=10)
    full.start(grid=InProcessGrid(client_app_for(DGCClient, parts), 10))
    moves = [np.abs(b - a).max() for a, b in zip(full.node_history, full.node_history[1:],
                                                  strict=False)]
    tol = 1e-3
    stop = next(t for t, mv in enumerate(moves, start=2) if mv <= tol)  # the round
    early = DGC(3, rho=10.0, iterations=300, min_nodes=10, tol=tol)
    early.start(grid=InProcessGrid(client_app_for(DGCClient, parts), 10))
    assert len(early.history) == stop < 301
    np.testing.assert_array_equal(early.node_centres, full.node_history[stop - 1])


RESUMED = {"rho": 10.0, "iterations": 4, "inner_steps": 2, "min_nodes": 10, "seed": 4}


def _interrupted(parts, after=3, **options):
    """The state (through a checkpoint's JSON) of a run whose SuperLink went after ``after``."""
    saved = {}

    def on_round(strategy, rnd):
        if rnd == after:
            arrays: dict = {}
            meta = json.loads(json.dumps(pack(strategy.state_dict(), arrays)))
            saved["state"] = unpack(meta, arrays)
            raise RuntimeError("SuperLink gone")

    with pytest.raises(RuntimeError, match="SuperLink gone"):
        DGC(3, **options).start(grid=InProcessGrid(client_app_for(DGCClient, parts), 10),
                                on_round=on_round)
    return saved["state"]


def _without_seconds(history):
    return [{k: v for k, v in h.items() if k != "seconds"} for h in history]


def test_resume_finds_the_clients_under_new_node_ids_and_equals_an_uninterrupted_run():
    parts = _users()
    full = DGC(3, **RESUMED)
    full.start(grid=InProcessGrid(client_app_for(DGCClient, parts), 10))
    state = _interrupted(parts, **RESUMED)
    assert state["node_of"] == {i: 100 + i for i in range(10)}
    # the SuperLink restarted: the same clients, other Flower node ids (not in client order)
    ids = [int(n) for n in np.random.default_rng(1).permutation(np.arange(5000, 5010))]
    grid = InProcessGrid(client_app_for(DGCClient, parts), 10, node_ids=ids, shuffle_seed=3)
    resumed = DGC(3, **RESUMED)
    result = resumed.start(grid=grid, resume=state)
    assert resumed.node_of == dict(enumerate(ids))
    # one data-source QUERY per node before the first step, then steps to the new ids
    kinds = [m.metadata.message_type for m in grid.sent]
    # (and the split check's two QUERY exchanges after the last step)
    assert kinds[:10] == ["query"] * 10 and "query" not in kinds[10:-30]
    assert kinds[-30:] == ["query"] * 20 + ["evaluate"] * 10
    assert {m.metadata.dst_node_id for m in grid.sent if m.metadata.message_type == "train"
            } == set(ids)
    assert resumed.client_of == {n: i for i, n in enumerate(ids)}
    assert len(resumed.node_history) == len(full.node_history) == 1 + 4 * 2
    for a, b in zip(full.node_history, resumed.node_history, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(resumed.node_centres, full.node_centres)
    np.testing.assert_array_equal(resumed.centroids, full.centroids)
    np.testing.assert_array_equal(result.arrays["node-centres"].numpy(), full.node_centres)
    assert _without_seconds(resumed.history) == _without_seconds(full.history)
    assert resumed.final_metrics == full.final_metrics


def test_resume_refuses_a_missing_or_duplicated_client_naming_it():
    parts = _users()
    state = _interrupted(parts, **RESUMED)
    # client 3's SuperNode did not come back; the nine others did, under new ids
    back = [p for p in range(10) if p != 3]
    grid = InProcessGrid(client_app_for(DGCClient, parts), 9, node_ids=range(700, 709),
                         node_configs=[{"partition-id": p} for p in back])
    with pytest.raises(RuntimeError, match=r"DGC cannot resume: the graph's clients are "
                                            r"0\.\.9; missing: client 3; the connected nodes "
                                            r"hold client ids 0, 1, 2, 4, 5, 6, 7, 8, 9"):
        DGC(3, **{**RESUMED, "min_nodes": 9}).start(grid=grid, resume=state)
    assert all(m.metadata.message_type == "query" for m in grid.sent)
    # a node that came back with another node's partition-id: both claims are dropped,
    # both nodes named (nothing tells which holds client 5), and DGC cannot resume
    grid = InProcessGrid(client_app_for(DGCClient, parts), 10, node_ids=range(700, 710),
                         node_configs=[{"partition-id": 5 if p == 3 else p} for p in range(10)])
    with pytest.raises(RuntimeError, match=r"missing: client 3, client 5; .* node 703 claims "
                                           r"client id 5, which node 705 also claims"):
        DGC(3, **RESUMED).start(grid=grid, resume=state)
    assert all(m.metadata.message_type == "query" for m in grid.sent)


def test_a_node_answering_as_another_client_stops_the_run():
    parts = _users()
    strategy = DGC(3, **RESUMED)
    strategy.load_state_dict(_interrupted(parts, **RESUMED))
    # the relay's map no longer matches the nodes (ids reused, and no reconnect)
    strategy.node_of[1], strategy.node_of[2] = strategy.node_of[2], strategy.node_of[1]
    grid = InProcessGrid(client_app_for(DGCClient, parts), 10)
    replies = grid.send_and_receive(strategy.configure_train(4, None, None, grid))
    with pytest.raises(RuntimeError, match=r"node 101 answered as client 1 but was sent "
                                           r"client 2's centres"):
        strategy.aggregate_train(4, replies)


def test_the_default_rho_adapts_and_the_relay_still_equals_the_loop(tmp_path):
    # Issue 38: rho = 0 (the default) is adapted at the init round from the graph and the
    # largest node; every step message carries it; the relay equals run_dgc's default.
    from flwr_clustering.algorithms.dgc import adaptive_rho

    parts = _users(m=5)
    data = [X for X, _ in parts]
    strategy = DGC(3, iterations=8, min_nodes=5, seed=1)
    assert strategy.rho == 0
    grid = InProcessGrid(client_app_for(DGCClient, parts), 5)
    strategy.start(grid=grid)
    ring = build_graph("ring", 5)
    expected = adaptive_rho(ring, "kmeans", max(len(X) for X in data))
    assert strategy.rho_used == expected > 10
    rhos = {m.content["config"]["rho"] for m in grid.sent
            if m.metadata.message_type == "train" and m.content["config"].get("phase") == "step"}
    assert rhos == {expected}
    ref = run_dgc(data, ring, initial_centres(data, 3, seed=1), iterations=8)
    assert ref.rho == expected
    np.testing.assert_array_equal(strategy.node_centres, ref.centres)
    # the state carries it: a resumed run steps with the same rho
    arrays: dict = {}
    state = unpack(json.loads(json.dumps(pack(strategy.state_dict(), arrays))), arrays)
    again = DGC(3, iterations=8, min_nodes=5, seed=1)
    again.load_state_dict(state)
    assert again.rho_used == expected
    # a checkpoint written before rho was recorded: the explicit rho, or a clear refusal
    old = {key: value for key, value in state.items() if key != "rho"}
    explicit = DGC(3, rho=10.0, iterations=8, min_nodes=5, seed=1)
    explicit.load_state_dict(old)
    assert explicit.rho_used == 10.0
    with pytest.raises(ValueError, match="does not record the rho"):
        DGC(3, iterations=8, min_nodes=5, seed=1).load_state_dict(old)
    with pytest.raises(ValueError, match="rho must be 0"):
        DGC(3, rho=0.5)
