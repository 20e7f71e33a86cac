"""FKM under secure aggregation or DP asks every site's ``data-source`` once (issue 52).

Its start needs the clients count and the feature width (the DP noise's calibration, the
secure moments' start); it collects the replies of the query made before round 1 (the
App's check, or the features step's) again instead of asking every node a second time.
Each run here is compared with the same run forced to ask twice, as before
(``known_data_sources`` patched to know nothing): the same model bit for bit, the same
clients count, absent nodes, node identities, declared rows and privacy guarantee; the
ledger short of the second query's replies only.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from flwr_clustering.app.client_app import app
from flwr_clustering.app.server_app import run_server
from flwr_clustering.clients import FedKMeansClient
from flwr_clustering.data.synthetic import garst_beta_split
from flwr_clustering.protocol import DATA_SOURCE_PHASE
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.strategies import fkm as fkm_module
from flwr_clustering.testing import client_app_for
from simulations.benchmarks.exchanges import _CountingGrid

SECURE = {"server-update": "lloyd", "secure-aggregation": True, "max-rounds": 3,
          "tol": -1.0, "min-nodes": 3}
DP = {"server-update": "lloyd", "dp-epsilon": 2.0, "data-bound": 20.0, "dp-rounds": 3,
      "max-rounds": 3, "tol": -1.0, "scaling": "none", "min-nodes": 3}


class _Grid(_CountingGrid):
    """The benchmark's counting grid; the nodes in ``silent`` never answer ``data-source``."""

    def __init__(self, *args, silent: tuple[int, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.silent = set(silent)

    def send_and_receive(self, messages, *, timeout=None):  # noqa: D102
        messages = list(messages)
        replies = list(super().send_and_receive(messages, timeout=timeout))
        if messages and self.exchanges[-1][2] == DATA_SOURCE_PHASE:
            replies = [r for r in replies if int(r.metadata.src_node_id) not in self.silent]
        return replies

    def phases(self) -> Counter:
        """Exchanges per phase, counted as ``bench exchanges`` counts them."""
        return Counter(phase for _, _, phase in self.exchanges)


def _ask_twice(monkeypatch) -> None:
    """The start before issue 52: no reply known, so it asks every node again."""
    monkeypatch.setattr(fkm_module, "known_data_sources", lambda strategy: None)


def _app_run(tmp_path, run_config, *, twice: bool, silent=(), nodes: int = 4):
    rc = {**run_config, "out-dir": str(tmp_path / ("twice" if twice else "once"))}
    grid = _Grid(app, nodes, run_config=rc, silent=silent)
    with pytest.MonkeyPatch.context() as mp:
        if twice:
            _ask_twice(mp)
        out = run_server(grid, rc)
    return out["strategy"], grid


def _without_seconds(history):
    return [{k: v for k, v in h.items() if k != "seconds"} for h in history]


def _assert_same_run(once, twice):
    """Bit for bit the same model and run state; the ledger short of the second query."""
    np.testing.assert_array_equal(once.centroids, twice.centroids)
    assert len(once.centroid_history) == len(twice.centroid_history)
    for a, b in zip(once.centroid_history, twice.centroid_history, strict=True):
        np.testing.assert_array_equal(a, b)
    assert _without_seconds(once.history) == _without_seconds(twice.history)
    assert once.final_metrics == twice.final_metrics
    assert once.n_features == twice.n_features
    assert once.shared_start["clients"] == twice.shared_start["clients"]
    # the marks the second query left on the run: who is who, who is absent and why, the
    # rows each client declared (its later replies are bounded by them)
    assert once.client_of == twice.client_of
    assert once.run_absent == twice.run_absent
    assert once.rules.client_rows == twice.rules.client_rows
    # the ledger: the App's check's replies once, the second query's not at all
    assert once.ledger.before_run == twice.ledger.before_run
    assert any(e["phase"] == DATA_SOURCE_PHASE for e in once.ledger.before_run)
    assert list(once.ledger) == [e for e in twice.ledger if e["phase"] != DATA_SOURCE_PHASE]
    assert once.ledger.secure_totals == twice.ledger.secure_totals
    ledger_once, ledger_twice = once.privacy_ledger(), twice.privacy_ledger()
    for key in ("epsilon", "delta", "server-epsilon", "differential-privacy"):
        assert ledger_once.get(key) == ledger_twice.get(key), key


@pytest.mark.parametrize("silent", [(), (103,)], ids=["all", "a-node-silent"])
@pytest.mark.parametrize("kind", ["secure", "dp"])
def test_the_apps_fkm_asks_data_source_once_and_runs_as_when_it_asked_twice(
        tmp_path, kind, silent):
    """A node that never answers ``data-source`` is left out of the count either way."""
    if kind == "dp":
        pytest.importorskip("dp_accounting")
    rc = SECURE if kind == "secure" else DP
    once, grid_once = _app_run(tmp_path, rc, twice=False, silent=silent)
    twice, grid_twice = _app_run(tmp_path, rc, twice=True, silent=silent)
    assert grid_once.phases()[DATA_SOURCE_PHASE] == 1
    assert grid_twice.phases()[DATA_SOURCE_PHASE] == 2
    assert grid_once.phases() == grid_twice.phases() - Counter({DATA_SOURCE_PHASE: 1})
    _assert_same_run(once, twice)
    assert once.shared_start["clients"] == 4 - len(silent)
    if silent:  # named absent by the check (the start does not ask again)
        assert any(who.startswith("client 3") or "node 103" in who
                   for who in once.run_absent), once.run_absent
    if kind == "dp":
        assert once.dp_clients == twice.dp_clients == 4 - len(silent)
        assert (once.accountant.state_dict() == twice.accountant.state_dict())
        dp = once.privacy_ledger()["differential-privacy"]
        assert dp["mechanisms"] == twice.privacy_ledger()["differential-privacy"]["mechanisms"]


def test_a_secure_search_over_k_asks_data_source_once(tmp_path):
    """k='auto': the first candidate's start collects the App's replies (``shared_start``)."""
    rc = {**SECURE, "k": "auto", "k-min": 2, "k-max": 4, "max-rounds": 2}
    once, grid_once = _app_run(tmp_path, rc, twice=False, nodes=3)
    twice, grid_twice = _app_run(tmp_path, rc, twice=True, nodes=3)
    assert grid_once.phases()[DATA_SOURCE_PHASE] == 1
    assert grid_twice.phases()[DATA_SOURCE_PHASE] == 2
    assert once.k == twice.k
    np.testing.assert_array_equal(once.centroids, twice.centroids)
    for a, b in zip(once.candidates, twice.candidates, strict=True):
        np.testing.assert_array_equal(a.centroids, b.centroids)
        assert a.rules.client_rows == b.rules.client_rows
    assert once.client_of == twice.client_of and once.run_absent == twice.run_absent
    assert list(once.ledger) == [e for e in twice.ledger if e["phase"] != DATA_SOURCE_PHASE]


def _clients():
    X, y, c = garst_beta_split(1.0)
    return [(X[c == i], y[c == i]) for i in range(5)]


def _own_run(*, twice: bool, **options):
    """A user's own ServerApp: ``strategy.start`` on the grid, without the App's check."""
    grid = _Grid(client_app_for(FedKMeansClient, _clients()), 5)
    strategy = FedKMeans(16, min_nodes=4, seed=2, server_update="lloyd", tol=-1.0,
                         max_rounds=3, split_check=False, **options)
    with pytest.MonkeyPatch.context() as mp:
        if twice:
            _ask_twice(mp)
        strategy.start(grid=grid)
    return strategy, grid


def test_a_users_own_serverapp_asks_once_when_the_features_step_asked():
    """With a scaling the features step asks ``data-source`` itself; the start reuses it."""
    once, grid_once = _own_run(twice=False, secure_aggregation=True, scaling="standard")
    twice, grid_twice = _own_run(twice=True, secure_aggregation=True, scaling="standard")
    assert grid_once.phases()[DATA_SOURCE_PHASE] == 1
    assert grid_twice.phases()[DATA_SOURCE_PHASE] == 2
    np.testing.assert_array_equal(once.centroids, twice.centroids)
    assert once.client_of == twice.client_of and once.run_absent == twice.run_absent
    assert once.rules.client_rows == twice.rules.client_rows
    # the features step's query is in the run's ledger once; the start's is gone
    assert sum(e["phase"] == DATA_SOURCE_PHASE for e in once.ledger) == 5
    asked = [i for i, e in enumerate(twice.ledger) if e["phase"] == DATA_SOURCE_PHASE]
    assert len(asked) == 10
    assert list(once.ledger) == [e for i, e in enumerate(twice.ledger) if i not in asked[5:]]


def test_without_a_known_reply_or_with_sampled_nodes_the_start_asks():
    """No features step (no scaling): the start's query is the run's only one. With
    ``fraction < 1`` the start's query samples its nodes from the sampling generator,
    which the rounds' samples follow: it is kept, so that the model is today's."""
    plain, grid = _own_run(twice=False, secure_aggregation=True)
    assert grid.phases()[DATA_SOURCE_PHASE] == 1
    assert plain.shared_start["clients"] == 5
    pytest.importorskip("dp_accounting")
    dp = {"dp_epsilon": 2.0, "data_bound": 20.0, "dp_rounds": 3, "scaling": "none"}
    sampled, grid = _own_run(twice=False, fraction=0.8, **dp)
    assert grid.phases()[DATA_SOURCE_PHASE] == 2  # the features step's, the start's
    # the start's sample (max(min-nodes, 0.8 x 5) nodes), not the features step's five
    assert sampled.dp_clients == 4
    assert [h["clients"] for h in sampled.history] == [4, 4, 4]
