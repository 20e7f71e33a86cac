"""No silent wrong result: duplicate client ids, lost nodes, timeouts and k above the data
end the run (or drop the node) with a message that names the client, in-process."""

import logging

import numpy as np
import pytest

from flwr_clustering.clients import FedKMeansClient, client_app
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid, client_app_for


def _data(m=3, n=40, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, 2)) + 3 * i for i in range(m)]


class DroppingGrid(InProcessGrid):
    """Drops the replies of some nodes from ``after`` send on (a timeout, or a lost node)."""

    def __init__(self, *args, drop=(), after=0, **kwargs):
        super().__init__(*args, **kwargs)
        self.drop, self.after, self.sends = set(drop), after, 0

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        self.sends += 1
        if self.sends > self.after:
            replies = [r for r in replies if r.metadata.src_node_id not in self.drop]
        return replies


@pytest.mark.parametrize("shuffle", [0, 1, 2, 3])
def test_duplicate_partition_ids_drop_both_claims_whatever_the_reply_order(shuffle, log):
    """Two nodes claim client id 1 from their first reply: nothing tells the liar, both
    are dropped, named, and the run goes on with the others while min-nodes holds."""
    data = _data(3)
    configs = [{"partition-id": p} for p in (0, 1, 1, 2)]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 4,
                         node_configs=configs, shuffle_seed=shuffle)
    strategy = FedKMeans(4, min_nodes=2, max_rounds=3, tol=-1.0)
    strategy.start(grid=grid)
    assert [h["clients"] for h in strategy.history] == [2, 2, 2]
    absent = {a["node"]: a["reason"] for a in strategy.history[0]["absent"]}
    assert set(absent) == {101, 102}, absent
    assert absent[101] == (
        "claims client id 1, which node 102 also claims in the same exchange, and nothing "
        "tells which holds it: every claim is dropped; give every SuperNode its own "
        "'partition-id' in its node config")
    assert "round 1 train: dropping reply of node 102: it claims client id 1" in log.text
    # the result is the run of the two other clients
    alone = FedKMeans(4, min_nodes=2, max_rounds=3, tol=-1.0)
    alone.start(grid=InProcessGrid(client_app_for(FedKMeansClient, {0: data[0], 2: data[2]}), 2,
                                   node_configs=[{"partition-id": 0}, {"partition-id": 2}]))
    np.testing.assert_array_equal(strategy.centroids, alone.centroids)


def test_duplicate_partition_ids_end_the_run_below_min_nodes():
    data = _data(3)
    configs = [{"partition-id": 0}, {"partition-id": 1}, {"partition-id": 1}]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 3, node_configs=configs)
    with pytest.raises(RuntimeError, match=r"round 1 train: only 1 valid replies, fewer than "
                                           r"min_nodes=2; dropped: node 101 claims client id 1"):
        FedKMeans(4, min_nodes=2, max_rounds=3).start(grid=grid)
    assert len({m.metadata.group_id for m in grid.sent}) == 1  # at the first exchange


class ImpostorGrid(InProcessGrid):
    """Node ``liar``'s replies claim client id ``claims`` from send ``after`` on."""

    def __init__(self, *args, liar, claims, after, **kwargs):
        super().__init__(*args, **kwargs)
        self.liar, self.claims, self.after, self.sends = liar, claims, after, 0

    def send_and_receive(self, messages, *, timeout=None):
        replies = list(super().send_and_receive(messages, timeout=timeout))
        self.sends += 1
        if self.sends > self.after:
            for r in replies:
                if r.metadata.src_node_id == self.liar and not r.has_error():
                    r.content["metrics"]["client-id"] = self.claims
        return replies


def test_a_node_claiming_a_known_client_id_later_is_the_one_dropped(log):
    """The later claim is the liar: dropped and named; the client that held the id stays."""
    grid = ImpostorGrid(client_app_for(FedKMeansClient, _data(3)), 3, liar=102, claims=0, after=1)
    strategy = FedKMeans(4, min_nodes=2, max_rounds=3, tol=-1.0)
    strategy.start(grid=grid)
    assert [h["clients"] for h in strategy.history] == [3, 2, 2]
    (absent,) = strategy.history[1]["absent"]
    assert absent["node"] == 102 and absent["client"] == 2, absent
    assert absent["reason"] == ("claims client id 0, which node 100 holds since an earlier "
                                "reply of the run (the later claim is dropped)")
    assert ("round 2 train: dropping reply of client 2 (node 102): it claims client id 0"
            in log.text)


class RestartGrid(InProcessGrid):
    """After send ``after`` every node is back under a new node id (a SuperLink restart)."""

    def __init__(self, *args, after, **kwargs):
        super().__init__(*args, **kwargs)
        self.after, self.sends = after, 0

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        self.sends += 1
        if self.sends == self.after:
            self.contexts = {node + 500: ctx for node, ctx in self.contexts.items()}
        return replies


def test_a_supernode_back_under_a_new_node_id_keeps_its_client_id(log):
    """A known client id from a new node while its old node is gone: a reconnect, kept."""
    grid = RestartGrid(client_app_for(FedKMeansClient, _data(3)), 3, after=1)
    strategy = FedKMeans(4, min_nodes=3, max_rounds=3, tol=-1.0)
    strategy.start(grid=grid)
    assert [h["clients"] for h in strategy.history] == [3, 3, 3]
    assert {strategy.client_of[n] for n in (600, 601, 602)} == {0, 1, 2}
    assert "claims client id" not in log.text


def test_a_dropped_reply_names_client_node_and_timeout(log):
    grid = DroppingGrid(client_app_for(FedKMeansClient, _data(3)), 3, drop={102}, after=1)
    strategy = FedKMeans(4, min_nodes=2, max_rounds=3, tol=-1.0, round_timeout=5)
    strategy.start(grid=grid)
    assert "round 2 train: client 2 (node 102) did not reply within round-timeout=5 s" in log.text
    assert [h["clients"] for h in strategy.history] == [3, 2, 2]


def test_the_timeout_named_is_the_one_start_waits(log):
    grid = DroppingGrid(client_app_for(FedKMeansClient, _data(3)), 3, drop={102}, after=1)
    strategy = FedKMeans(4, min_nodes=2, max_rounds=2, tol=-1.0, round_timeout=5)
    strategy.start(grid=grid, timeout=7)
    assert "round 2 train: client 2 (node 102) did not reply within round-timeout=7 s" in log.text
    # a new run forgets the clients of the last one
    log.clear()
    strategy.start(grid=DroppingGrid(client_app_for(FedKMeansClient, _data(3)), 3, drop={102}))
    assert "round 1 train: node 102 did not reply within round-timeout=5 s" in log.text


def test_a_node_that_never_replied_is_named_by_node_id(log):
    grid = DroppingGrid(client_app_for(FedKMeansClient, _data(3)), 3, drop={101})
    FedKMeans(4, min_nodes=2, max_rounds=1, round_timeout=5).start(grid=grid)
    assert "round 1 train: node 101 did not reply within round-timeout=5 s" in log.text


class UnavailableGrid(InProcessGrid):
    """From ``after`` sends on, the SuperLink answers for node ``lost`` (no heartbeat).

    Flower's SuperLink makes that error reply itself: its source is the SuperLink's node
    id (1), not the lost node's; only ``reply_to_message_id`` tells which message it
    answers.
    """

    def __init__(self, *args, lost, after, **kwargs):
        super().__init__(*args, **kwargs)
        self.lost, self.after, self.sends = lost, after, 0

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import Error, Message

        replies = super().send_and_receive(messages, timeout=timeout)
        self.sends += 1
        if self.sends <= self.after:
            return replies
        out = []
        for reply in replies:
            if reply.metadata.src_node_id == self.lost:
                ins = next(m for m in self.sent
                           if m.metadata.message_id == reply.metadata.reply_to_message_id)
                reply = Message(Error(code=5, reason="Node Unavailable"), reply_to=ins)
                reply.metadata.__dict__["_src_node_id"] = 1  # the SuperLink's node id
                assert reply.metadata.src_node_id == 1
            out.append(reply)
        return out


def test_a_node_the_superlink_reports_unavailable_is_named_and_recorded(log):
    grid = UnavailableGrid(client_app_for(FedKMeansClient, _data(3)), 3, lost=102, after=1)
    strategy = FedKMeans(4, min_nodes=2, max_rounds=3, tol=-1.0, round_timeout=5)
    strategy.start(grid=grid)
    assert "round 2 train: client 2 (node 102) failed: Node Unavailable" in log.text
    assert "node 1 " not in log.text
    assert [h["clients"] for h in strategy.history] == [3, 2, 2]
    assert "absent" not in strategy.history[0]
    assert strategy.history[1]["absent"] == [
        {"client": 2, "node": 102, "reason": "failed: Node Unavailable"}]


def test_too_few_replies_after_a_timeout_name_the_timeout_and_the_missing_clients():
    grid = DroppingGrid(client_app_for(FedKMeansClient, _data(3)), 3, drop={101, 102}, after=1)
    with pytest.raises(RuntimeError) as info:
        FedKMeans(4, min_nodes=2, max_rounds=3, tol=-1.0, round_timeout=5).start(grid=grid)
    assert str(info.value) == (
        "round 2 train: 1 of 3 nodes replied within round-timeout=5 s; missing: client 1 "
        "(node 101), client 2 (node 102); only 1 valid replies, fewer than min_nodes=2")


class _FailingSecondRound(FedKMeansClient):
    def fit(self, parameters, config):
        if parameters and self.client_id == 1:
            raise RuntimeError("disk on fire")
        return super().fit(parameters, config)


def test_a_failing_client_is_named_with_its_reason(log):
    grid = InProcessGrid(client_app_for(_FailingSecondRound, _data(3)), 3)
    with pytest.raises(RuntimeError) as info:
        FedKMeans(4, min_nodes=3, max_rounds=3, tol=-1.0).start(grid=grid)
    # a user's own exception may quote a cell: the server hears its type and the phase,
    # the site's log keeps the message (a client sends its own words by raising a
    # SiteDataError with a public message)
    said = "client 1: RuntimeError while answering round 2 train (update) (the detail is in " \
           "the site's log)"
    assert f"round 2 train: client 1 (node 101) failed: {said}" in log.text
    assert str(info.value) == (
        "round 2 train: only 2 valid replies, fewer than min_nodes=3; dropped: client 1 "
        f"(node 101) failed: {said}")
    node_side = [r for r in log.records if r.name == "flwr_clustering.clients.handlers"
                 and r.levelno >= logging.WARNING]
    # (each record twice: the fixture's handler and caplog's own)
    assert {r.getMessage() for r in node_side} == {"client 1: disk on fire (RuntimeError)"}
    assert all(r.exc_info is not None for r in node_side)  # with its traceback


def _dgc_app(data):
    from flwr_clustering.clients.dgc import DGCClient

    return client_app_for(DGCClient, data)


def test_dgc_refuses_a_graph_whose_high_numbered_node_did_not_answer_at_init():
    from flwr_clustering.strategies.dgc import DGC

    grid = DroppingGrid(_dgc_app(_data(4)), 4, drop={103})
    with pytest.raises(RuntimeError) as info:
        DGC(2, iterations=2, min_nodes=2, round_timeout=5).start(grid=grid)
    assert str(info.value) == (
        "round 1 DGC init: 4 node(s) were asked, so the graph's client ids must be 0..3; "
        "missing: client 3; without a valid reply: node 103 did not reply within "
        "round-timeout=5 s; DGC needs every node of the graph in every round")


def test_dgc_stops_naming_a_node_lost_mid_run():
    from flwr_clustering.strategies.dgc import DGC

    grid = DroppingGrid(_dgc_app(_data(4)), 4, drop={102}, after=2)
    strategy = DGC(2, iterations=4, min_nodes=2, round_timeout=5)
    with pytest.raises(RuntimeError) as info:
        strategy.start(grid=grid)
    assert str(info.value) == (
        "round 3: DGC lost client 2 (node 102) did not reply within round-timeout=5 s; every "
        "node of the graph must answer every round (the relay cannot route a lost node's "
        "centres to its neighbours)")
    assert len(strategy.history) == 2


def _run_app(algorithm, k, rows, **run_config):
    from flwr_clustering.app.config import build_client, build_strategy, merged_config

    rng = np.random.default_rng(0)
    data = [rng.normal(size=(n, 3)) + i for i, n in enumerate(rows)]
    cfg = merged_config({"algorithm": algorithm, "k": k, "min-nodes": len(rows), **run_config})

    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        return build_client(cfg, data[i], None, i)

    build_strategy(cfg).start(grid=InProcessGrid(client_app(client_fn), len(rows)))


@pytest.mark.parametrize("algorithm", ["fkm", "feca", "ffcm", "masked-federated",
                                       "masked-oneshot", "dgc", "kdc"])
def test_k_above_the_federation_rows_is_said_in_those_words(algorithm):
    with pytest.raises(ValueError, match=r"the federation holds 30 rows \(sum of num-examples "
                                         r"of its 3 clients\), fewer than k=40"):
        _run_app(algorithm, 40, [10, 10, 10])


@pytest.mark.parametrize("algorithm, says", [
    ("kfed", "client {i} has 10 rows, not more than k'=40"),
    ("mavg", "client {i} has 10 rows, fewer than k=40"),
])
def test_k_above_every_clients_rows_names_each_client(algorithm, says):
    """Clients that need k rows fail before the server learns any size: each one says it."""
    with pytest.raises(RuntimeError) as info:
        _run_app(algorithm, 40, [10, 10, 10])
    for i in range(3):
        assert f"client {i} (node {100 + i}) failed: " + says.format(i=i) in str(info.value)


@pytest.mark.parametrize("algorithm, says", [
    ("fkm", "client 0 has 10 rows, fewer than k=16: it seeds 10 local clusters"),
    ("feca", "client 0 has 10 rows, fewer than k'=16: it runs 10 clusters"),
    ("kfed", "client 0 (node 100) failed: client 0 has 10 rows, not more than k'=16"),
    ("mavg", "client 0 (node 100) failed: client 0 has 10 rows, fewer than k=16"),
])
def test_k_above_one_clients_rows_is_said_in_those_words(algorithm, says, log):
    try:
        _run_app(algorithm, 16, [10, 40, 40], **{"min-nodes": 1})
    except RuntimeError:
        pass  # M-Avg: the other clients may withhold too (privacy threshold)
    assert says in log.text


def test_masked_federated_with_fewer_local_centroids_than_k_says_so():
    with pytest.raises(ValueError, match=r"the clients sent \d+ local centroids in all "
                                         r"\(client 0: \d+, client 1: \d+, client 2: \d+\), "
                                         r"fewer than k=16"):
        _run_app("masked-federated", 16, [10, 40, 40], scaling="none")


def test_a_missing_data_path_is_logged_on_the_node_and_named_by_the_server(tmp_path, log):
    from flwr_clustering.app.client_app import app as client
    from flwr_clustering.data.local_file import save_local_file

    configs = []
    for i, x in enumerate(_data(3)):
        path = tmp_path / f"site{i}.npy"
        if i != 2:
            save_local_file(path, x)
        configs.append({"data-path": str(path)})
    grid = InProcessGrid(client, 3, run_config={"dataset": "local"}, node_configs=configs)
    with pytest.raises(RuntimeError) as info:
        FedKMeans(4, min_nodes=3).start(grid=grid)
    said = f"client 2: data-path '{tmp_path / 'site2.npy'}' of the node config: no such file"
    # the SuperNode logs it (its ClientApp's warning) ...
    node_side = [r.getMessage() for r in log.records
                 if r.name == "flwr_clustering.clients.handlers"]
    assert f"{said} (FileNotFoundError)" in node_side
    # ... and the server names the client and its node
    assert f"round 1 train: client 2 (node 102) failed: {said}" in log.text
    assert f"dropped: client 2 (node 102) failed: {said}" in str(info.value)


@pytest.mark.parametrize("scaling", ["standard", "none"])
def test_data_whose_squares_overflow_names_the_column_and_the_fix(scaling):
    """Values near 1e200 were taken for identifiers (every float64 above 2**53 is whole)
    and then ended in "sse must be finite" with no word about the data's scale."""
    import pandas as pd

    from flwr_clustering.data.schema import FeatureTable, describe_columns
    from flwr_clustering.estimator import FederatedClustering

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 1.0, (100, 2)) for c in (0.0, 10.0)])
    X[:, 1] *= 1e200
    assert [c.kind for c in describe_columns(FeatureTable(X, ("dose", "count")))] == [
        "numeric", "numeric"]
    parts = [pd.DataFrame(p, columns=["dose", "count"]) for p in np.array_split(X, 3)]
    with pytest.raises(RuntimeError) as err:
        FederatedClustering("fkm", n_clusters=2, scaling=scaling).fit(parts)
    message = str(err.value)
    # the server hears the column and the fix; the largest value (one row's) stays on
    # the site (its log: test_site_errors)
    assert "client 0: column 'count': its sum of squares overflows float64" in message, message
    assert "Rescale that column" in message and "2.2e+200" not in message, message
