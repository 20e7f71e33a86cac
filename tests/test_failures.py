"""No silent wrong result: duplicate client ids, lost nodes, timeouts and k above the data
end the run (or drop the node) with a message that names the client, in-process."""

import logging

import numpy as np
import pytest

from flwr_clustering.clients import FedKMeansClient, client_app
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid


def _data(m=3, n=40, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, 2)) + 3 * i for i in range(m)]


def _app(data, client_cls=FedKMeansClient):
    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        return client_cls(data[i], client_id=i)

    return client_app(client_fn)


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


@pytest.fixture
def log(caplog):
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO)
    yield caplog
    logger.removeHandler(caplog.handler)


@pytest.mark.parametrize("shuffle", [0, 1, 2, 3])
def test_duplicate_partition_ids_end_the_run_whatever_the_reply_order(shuffle):
    data = _data(3)
    configs = [{"partition-id": 0}, {"partition-id": 1}, {"partition-id": 1}]
    grid = InProcessGrid(_app(data), 3, node_configs=configs, shuffle_seed=shuffle)
    with pytest.raises(RuntimeError) as info:
        FedKMeans(4, min_nodes=2, max_rounds=3).start(grid=grid)
    assert str(info.value) == (
        "round 1 train: duplicate client ids: client id 1 is claimed by nodes 101, 102. "
        "Every SuperNode needs its own client id: give each a unique 'partition-id' in its "
        "node config (flower-supernode --node-config \"partition-id=N ...\")")
    assert len({m.metadata.group_id for m in grid.sent}) == 1  # at the first exchange


def test_a_dropped_reply_names_client_node_and_timeout(log):
    grid = DroppingGrid(_app(_data(3)), 3, drop={102}, after=1)
    strategy = FedKMeans(4, min_nodes=2, max_rounds=3, tol=-1.0, round_timeout=5)
    strategy.start(grid=grid)
    assert "round 2 train: client 2 (node 102) did not reply within round-timeout=5 s" in log.text
    assert [h["clients"] for h in strategy.history] == [3, 2, 2]


def test_a_node_that_never_replied_is_named_by_node_id(log):
    grid = DroppingGrid(_app(_data(3)), 3, drop={101})
    FedKMeans(4, min_nodes=2, max_rounds=1, round_timeout=5).start(grid=grid)
    assert "round 1 train: node 101 did not reply within round-timeout=5 s" in log.text


def test_too_few_replies_after_a_timeout_name_the_timeout_and_the_missing_clients():
    grid = DroppingGrid(_app(_data(3)), 3, drop={101, 102}, after=1)
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
    grid = InProcessGrid(_app(_data(3), _FailingSecondRound), 3)
    with pytest.raises(RuntimeError) as info:
        FedKMeans(4, min_nodes=3, max_rounds=3, tol=-1.0).start(grid=grid)
    assert "round 2 train: client 1 (node 101) failed: client 1: disk on fire" in log.text
    assert str(info.value) == (
        "round 2 train: only 2 valid replies, fewer than min_nodes=3; dropped: client 1 "
        "(node 101) failed: client 1: disk on fire")


def _dgc_app(data):
    from flwr_clustering.clients.dgc import DGCClient

    return _app(data, DGCClient)


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
