"""Fast pulls (issue 52, item 1): ``FastPulls.send_and_receive`` pushes, then pulls every
``poll-interval`` seconds, instead of Flower's 3 s; a grid without push/pull keeps its own."""

from __future__ import annotations

from uuid import uuid4

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from flwr_clustering import pulls
from flwr_clustering.algorithms.fkm import run_fkm
from flwr_clustering.clients import FedKMeansClient
from flwr_clustering.pulls import FastPulls
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid, client_app_for


class _SlowGrid:
    """Push/pull only: the reply to message ``i`` is there from pull ``ready[i]`` on."""

    def __init__(self, ready: list[int | None]) -> None:
        self.ready = ready
        self.pulls = 0
        self.asked: list[set[str]] = []
        self.replies: dict[str, tuple[int, Message]] = {}

    def push_messages(self, messages):
        ids = []
        for i, msg in enumerate(messages):
            msg.metadata.__dict__["_message_id"] = uuid4().hex
            if self.ready[i] is not None:
                reply = Message(RecordDict({"c": ConfigRecord({"i": i})}), reply_to=msg)
                self.replies[msg.metadata.message_id] = (self.ready[i], reply)
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        self.pulls += 1
        self.asked.append(set(message_ids))
        return [reply for mid, (at, reply) in self.replies.items()
                if mid in message_ids and at <= self.pulls]

    def send_and_receive(self, messages, *, timeout=None):  # pragma: no cover - not used
        raise AssertionError("FastPulls must push and pull, not call this")


def _messages(n: int) -> list[Message]:
    return [Message(RecordDict({"c": ConfigRecord({"phase": "x"})}), dst_node_id=10 + i,
                    message_type=MessageType.QUERY) for i in range(n)]


@pytest.fixture(autouse=True)
def _task():
    """Messages are made inside a task (as the in-process grid's are)."""
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0


@pytest.fixture
def sleeps(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(pulls.time, "sleep", slept.append)
    return slept


def test_replies_are_pulled_every_interval_until_all_came_back(sleeps):
    grid = _SlowGrid([1, 3, 2])
    replies = FastPulls(grid, 0.05).send_and_receive(_messages(3), timeout=60)
    assert sorted(r.content["c"]["i"] for r in replies) == [0, 1, 2]
    assert grid.pulls == 3 and sleeps == [0.05, 0.05]  # Flower's loop: 3 s each
    # each pull asks only for the replies still missing
    assert [len(a) for a in grid.asked] == [3, 2, 1]


def test_a_missing_reply_ends_the_wait_at_the_timeout(sleeps, monkeypatch):
    clock = iter(np.arange(0.0, 100.0, 0.25))
    monkeypatch.setattr(pulls.time, "monotonic", lambda: float(next(clock)))
    grid = _SlowGrid([1, None])
    replies = FastPulls(grid, 0.1).send_and_receive(_messages(2), timeout=1.0)
    assert [r.content["c"]["i"] for r in replies] == [0]
    # no wait past the timeout: every sleep is the interval or what was left of it
    assert sleeps and all(0 < s <= 0.1 for s in sleeps)
    assert grid.pulls == len(sleeps) + 1


def test_the_in_process_grid_keeps_its_own_send_and_receive_and_the_run_is_the_pure_loop():
    rng = np.random.default_rng(0)
    data = [rng.normal(size=(40, 2)) + c for c in (0, 5, 10)]
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 3)
    with pytest.raises(NotImplementedError):  # no push/pull: FastPulls falls back
        grid.push_messages([])
    strategy = FedKMeans(k=3, min_nodes=3, round_timeout=30)
    strategy.start(grid=FastPulls.wrap(grid, 0.05))  # start wraps it again, never nested
    assert len(grid.sent) > 0  # every message went through the in-process grid
    ref = run_fkm(data, 3, seed=0)
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)


def test_wrapping_is_never_nested_and_the_interval_is_checked():
    grid = _SlowGrid([])
    once = FastPulls.wrap(grid, 0.2)
    twice = FastPulls.wrap(once, 0.05)
    assert twice.grid is grid and twice.interval == 0.05
    for bad in (0.0, -1.0, 3.5):
        with pytest.raises(ValueError, match="poll-interval must lie in"):
            FastPulls(grid, bad)
    with pytest.raises(ValueError, match="poll-interval"):
        FedKMeans(k=2, poll_interval=0.0)
