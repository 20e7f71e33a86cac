"""Differentially private FKM through Flower (in-process grid): the loop, the ledger, the attack."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flwr_clustering.algorithms.dp_lloyd import dp_epsilon, dp_epsilon_of, run_dp_lloyd
from flwr_clustering.algorithms.fkm import FKMOptions
from flwr_clustering.clients import FedKMeansClient
from flwr_clustering.data.synthetic import garst_beta_split
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app

pytest.importorskip("dp_accounting")

DP = {"server_update": "lloyd", "dp_epsilon": 2.0, "dp_delta": 1e-5, "data_bound": 15.0,
      "max_rounds": 6, "dp_rounds": 6, "tol": -1.0}


def _clients():
    X, y, c = garst_beta_split(1.0)
    X = X - X.mean(axis=0)
    return [(X[c == i], y[c == i]) for i in range(5)]


@pytest.mark.parametrize("placement", ["distributed", "central"])
def test_dp_fkm_through_flower_equals_the_loop_and_reports_the_accountants_epsilon(placement):
    data = _clients()
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    strategy = FedKMeans(16, min_nodes=5, seed=3, dp_placement=placement, **DP)
    strategy.start(grid=grid)
    ref = run_dp_lloyd([x for x, _ in data], 16, epsilon=2.0, delta=1e-5, bound=15.0,
                       rounds=6, seed=3, placement=placement)
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)
    ledger = strategy.privacy_ledger()
    # the accountant's epsilon of every mechanism run: the start's two and the six rounds
    mechanisms = ledger["differential-privacy"]["mechanisms"]
    assert [m["phase"] for m in mechanisms] == ["dp-moments", "dp-candidates"] + [
        "dp-update"] * 6
    assert tuple(m["noise-multiplier"] for m in mechanisms) == ref.noise_multipliers
    assert ledger["epsilon"] == ref.epsilon == dp_epsilon_of(ref.noise_multipliers, 1e-5)
    assert 2.0 * (1 - 1e-3) <= ledger["epsilon"] <= 2.0 and ledger["delta"] == 1e-5
    # (the rounds alone would have cost less: the start is paid for)
    assert dp_epsilon(strategy.noise_multiplier, 6, 1e-5) < ledger["epsilon"]
    assert ledger["server-epsilon"] == ref.server_epsilon
    assert ledger["differential-privacy"]["placement"] == placement
    assert ledger["differential-privacy"]["init"] == "moments"
    # the start's replies: noisy statistics, no raw row
    init = [e for e in ledger["messages"] if e["phase"] in ("dp-moments", "dp-candidates")]
    assert len(init) == 10 and all(e["raw-rows"] == 0 for e in init)
    # no exact evaluation statistic left a client: only the noisy sums and counts
    train = [m for m in grid.received if m.metadata.message_type == "train"]
    assert all("stats" not in m.content for m in train)
    assert all(e["phase"] != "evaluate" or e["floats"] == 0 for e in ledger["messages"])


def test_dp_init_random_and_given_centroids_spend_it_all_on_equal_rounds():
    """dp-init='random' (the former start) and given centroids: no init mechanism."""
    from flwr.app import Array, ArrayRecord

    data = _clients()
    strategy = FedKMeans(16, min_nodes=5, seed=3, dp_init="random", **DP)
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    strategy.start(grid=grid)
    ref = run_dp_lloyd([x for x, _ in data], 16, epsilon=2.0, delta=1e-5, bound=15.0,
                       rounds=6, seed=3, init="random")
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)
    ledger = strategy.privacy_ledger()
    assert ledger["epsilon"] == ref.epsilon == dp_epsilon(strategy.noise_multiplier, 6, 1e-5)
    assert ledger["differential-privacy"]["init"] == "random"
    phases = {m.content.config_records["config"].get("phase") for m in grid.sent
              if "config" in m.content.config_records}
    assert not {"dp-moments", "dp-candidates"} & phases
    C0 = np.random.default_rng(9).uniform(-3, 3, size=(16, 2))
    given = FedKMeans(16, min_nodes=5, seed=3, **DP)  # dp-init='moments', but a start given
    given.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5),
                initial_arrays=ArrayRecord({"centroids": Array(C0)}))
    ref = run_dp_lloyd([x for x, _ in data], 16, epsilon=2.0, delta=1e-5, bound=15.0,
                       rounds=6, seed=3, initial=C0)
    np.testing.assert_array_equal(given.centroids, ref.centroids)
    assert given.privacy_ledger()["epsilon"] == ref.epsilon


def test_early_stop_reports_the_epsilon_of_the_mechanisms_run():
    data = _clients()
    strategy = FedKMeans(16, min_nodes=5, **{**DP, "max_rounds": 20, "tol": 1e9})
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    assert len(strategy.history) == 1  # tol 1e9: converged after round 1
    ledger = strategy.privacy_ledger()
    spent = [*strategy.noise_plan[:2], strategy.noise_multiplier]
    assert ledger["epsilon"] == dp_epsilon_of(spent, 1e-5) < 2.0


def test_the_differencing_attack_finds_no_row_in_what_the_dp_server_received():
    from flwr_clustering.algorithms.local_centroids import LocalCentroids
    from simulations.privacy import differencing_attack, recovered_rows

    data = _clients()
    grid = InProcessGrid(client_app_for(FedKMeansClient, data), 5)
    FedKMeans(16, min_nodes=5, **{**DP, "data_bound": 50.0, "max_rounds": 20,
                                  "dp_rounds": 20}).start(grid=grid)
    for cid, (X, _) in enumerate(data):
        rounds = []
        for m in sorted((m for m in grid.received if m.metadata.message_type == "train"
                         and int(m.content["metrics"]["client-id"]) == cid),
                        key=lambda m: int(m.metadata.group_id)):
            sums, counts = m.content["arrays"].to_numpy_ndarrays()
            rounds.append(LocalCentroids(sums / np.maximum(counts, 1e-12)[:, None],
                                         np.rint(counts).astype(np.int64),
                                         np.arange(16, dtype=np.int64)))
        assert len(rounds) == 20
        assert recovered_rows(differencing_attack(rounds), X) == 0


def test_dp_options_are_checked():
    with pytest.raises(ValueError, match="server-update='lloyd'"):
        FKMOptions(dp_epsilon=1.0, data_bound=1.0)
    with pytest.raises(ValueError, match="data-bound > 0"):
        FKMOptions(dp_epsilon=1.0, server_update="lloyd")
    for share in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="dp-init-share must lie strictly between 0 and 1"):
            FKMOptions(dp_epsilon=1.0, server_update="lloyd", data_bound=1.0,
                       dp_init_share=share)
    with pytest.raises(ValueError, match="dp_init must be one of"):
        FKMOptions(dp_epsilon=1.0, server_update="lloyd", data_bound=1.0, dp_init="kmeans++")
    assert not FedKMeans(4).dp and math.isinf(dp_epsilon(0.0, 3, 1e-5))


def test_the_app_writes_the_dp_guarantee_to_privacy_json(tmp_path):
    run_config = {"server-update": "lloyd", "dp-epsilon": 4.0, "data-bound": 20.0,
                  "dp-rounds": 5, "tol": -1.0, "beta": 10.0, "out-dir": str(tmp_path),
                  "scaling": "none"}
    out, _ = run_app(run_config, 5)
    ledger = json.loads((tmp_path / "privacy.json").read_text())
    assert 0 < ledger["epsilon"] <= 4.0 and ledger["differential-privacy"]["rounds-run"] == 5
    # the PLD accountant calibrated it; the RDP figure of the same noise beside it
    dp = ledger["differential-privacy"]
    assert dp["accountant"] == "pld" and ledger["epsilon"] == dp["epsilons"]["pld"]
    assert dp["epsilons"]["rdp"] > 4.0
    assert ledger["server-epsilon"] > ledger["epsilon"]
    assert out["centroids"].shape == (16, 2)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "completed"


def test_a_dp_run_takes_dp_rounds_and_spends_its_budget_on_them(tmp_path):
    """Defaults that work: the App's max-rounds (20) does not split a DP budget 20 ways."""

    run_config = {"server-update": "lloyd", "dp-epsilon": 1.0, "data-bound": 20.0,
                  "tol": -1.0, "beta": 10.0, "out-dir": str(tmp_path), "scaling": "none"}
    run_app(run_config, 5)
    history = json.loads((tmp_path / "history.json").read_text())
    ledger = json.loads((tmp_path / "privacy.json").read_text())
    assert len(history) == 2 and ledger["differential-privacy"]["rounds-run"] == 2
    phases = [m["phase"] for m in ledger["differential-privacy"]["mechanisms"]]
    assert phases == ["dp-moments", "dp-candidates", "dp-update", "dp-update"]
    assert 1.0 * (1 - 1e-3) <= ledger["epsilon"] <= 1.0
    # max-rounds still caps them
    strategy = FedKMeans(16, **{**DP, "max_rounds": 1, "dp_rounds": 4})
    assert strategy.max_rounds == 1 and len(strategy.noise_plan) == 3


def test_the_clients_noise_is_the_plan_of_the_rounds_the_server_runs():
    """max-rounds 20 and the default dp-rounds 2: every client calibrates for 2 rounds."""
    data = _clients()
    options = {**DP, "max_rounds": 20}
    options.pop("dp_rounds")
    strategy = FedKMeans(16, min_nodes=5, seed=3, **options)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    ref = run_dp_lloyd([x for x, _ in data], 16, epsilon=2.0, delta=1e-5, bound=15.0,
                       rounds=2, seed=3)
    assert len(strategy.history) == 2
    np.testing.assert_array_equal(strategy.centroids, ref.centroids)
    assert strategy.privacy_ledger()["epsilon"] == ref.epsilon


def _app_run(tmp_path, node_configs, **config):
    run_config = {"beta": 10.0, "out-dir": str(tmp_path), "min-nodes": 4, **config}
    return run_app(run_config, 5, node_configs=node_configs)


def test_a_node_can_require_dp_up_to_an_epsilon(tmp_path):
    """Node config dp-max-epsilon: the data owner's ceiling, not the server's word."""
    strict = [{"dp-max-epsilon": 1.0}] + [{}] * 4
    dp = {"server-update": "lloyd", "data-bound": 20.0, "max-rounds": 3, "dp-rounds": 3,
          "tol": -1.0, "scaling": "none"}
    # a DP run within the ceiling: all five take part
    out, _ = _app_run(tmp_path / "a", strict, **{**dp, "dp-epsilon": 1.0})
    history = json.loads((tmp_path / "a" / "history.json").read_text())
    assert [h["clients"] for h in history] == [5, 5, 5]
    # above the ceiling, or without DP: node 0 refuses every train message, naming the key
    for name, extra in (("b", {**dp, "dp-epsilon": 4.0}), ("c", {"max-rounds": 2})):
        out, grid = _app_run(tmp_path / name, strict, **extra)
        history = json.loads((tmp_path / name / "history.json").read_text())
        assert all(h["clients"] == 4 for h in history)
        reasons = {m.error.reason for m in grid.received if m.has_error()}
        assert any(r.startswith("client 0: this node accepts differential privacy with "
                                "epsilon at most 1") and "dp-max-epsilon" in r
                   for r in reasons), reasons


def test_a_dp_run_sends_no_statistic_outside_the_guarantee(tmp_path):
    """The scaling's per-feature sums and the category counts carry no noise: a DP run
    refuses them before round 1 (the App's default scaling='standard' included) and, with
    scaling='none', agrees on the columns by name only (no feature-moments message)."""
    from flwr_clustering.app.client_app import app
    from flwr_clustering.app.server_app import run_server

    base = {"server-update": "lloyd", "dp-epsilon": 4.0, "data-bound": 20.0,
            "max-rounds": 2, "tol": -1.0, "beta": 10.0}
    for scaling in ("standard", "minmax"):
        rc = {**base, "scaling": scaling, "out-dir": str(tmp_path / scaling)}
        grid = InProcessGrid(app, 5, run_config=rc)
        with pytest.raises(ValueError, match="dp-epsilon > 0 with scaling=.*scaling='none'"):
            run_server(grid, rc)
        phases = {m.content.config_records["config"].get("phase") for m in grid.sent
                  if "config" in m.content.config_records}
        assert "data-source" in phases  # (the names were asked: metadata)
        assert "feature-moments" not in phases and not {"update", "dp-update"} & phases
    rc = {**base, "scaling": "none", "out-dir": str(tmp_path / "none")}
    grid = InProcessGrid(app, 5, run_config=rc)
    run_server(grid, rc)
    phases = [m.content.config_records["config"].get("phase") for m in grid.sent
              if "config" in m.content.config_records]
    assert "dp-update" in phases
    assert "feature-moments" not in phases and "categories" not in phases
    ledger = json.loads((tmp_path / "none" / "privacy.json").read_text())
    assert "feature-moments" not in json.dumps(ledger)
    result = json.loads((tmp_path / "none" / "result.json").read_text())
    assert result["features"]["features"] == ["0", "1"]
    assert result["features"]["scaling"] == "none"
    assert any("in their own units, unchecked" in w for w in result["warnings"])


def test_a_dp_only_node_refuses_the_unnoised_features_statistics(tmp_path):
    """A node with dp-max-epsilon refuses the feature-moments query of a run without DP
    (its sums would leave without noise); the run scales from the other sites' sums."""
    strict = [{"dp-max-epsilon": 1.0}] + [{}] * 4
    out, grid = _app_run(tmp_path, strict, **{"max-rounds": 2})
    reasons = {m.error.reason for m in grid.received if m.has_error()}
    assert any("feature-moments phase sends statistics without noise" in r
               for r in reasons), reasons
    assert out["strategy"].feature_summary["sites"] == 4


def test_a_dp_only_node_refuses_algorithms_without_dp(tmp_path):
    strict = [{"dp-max-epsilon": 1.0}] + [{}] * 4
    out, grid = _app_run(tmp_path, strict, algorithm="kfed")
    reasons = {m.error.reason for m in grid.received if m.has_error()}
    assert any("takes part only in differentially private runs" in r
               and "algorithm='kfed'" in r for r in reasons), reasons
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "completed" and result["federated"]["num-examples"] < 800


def test_a_missing_client_makes_its_round_cost_more_and_the_ledger_says_so(caplog):
    """Distributed noise: a dropped client's share of the noise is missing from the totals."""
    import logging

    from flwr_clustering.algorithms.dp_lloyd import dp_epsilon_of

    data = _clients()

    class Dropping(FedKMeansClient):
        def fit(self, parameters, config):
            if int(config.get("dp-round", 0)) == 2:
                raise RuntimeError("gone for a round")
            return super().fit(parameters, config)

    strategy = FedKMeans(16, min_nodes=4, **{**DP, "max_rounds": 3})
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy.start(grid=InProcessGrid(
            client_app_for(FedKMeansClient, data, by_node={4: Dropping}), 5))
    finally:
        logger.removeHandler(caplog.handler)
    z = strategy.noise_multiplier
    zs = [h["dp-noise-multiplier"] for h in strategy.history]
    assert zs == [z, z * math.sqrt(4 / 5), z]
    ledger = strategy.privacy_ledger()
    init = list(strategy.noise_plan[:2])
    assert ledger["epsilon"] == dp_epsilon_of(init + zs, 1e-5) > dp_epsilon_of(
        init + [z] * 3, 1e-5)
    assert "only 4 of 5 clients' noise is in the totals" in caplog.text


def test_a_client_missing_from_the_start_makes_it_cost_more_and_the_ledger_says_so():
    data = _clients()

    class Silent(FedKMeansClient):
        def fit(self, parameters, config):
            if config.get("phase") == "dp-moments":
                raise RuntimeError("not now")
            return super().fit(parameters, config)

    strategy = FedKMeans(16, min_nodes=4, **{**DP, "max_rounds": 2})
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data, by_node={0: Silent}),
                                      5))
    ledger = strategy.privacy_ledger()
    mechanisms = ledger["differential-privacy"]["mechanisms"]
    planned = strategy.noise_plan
    assert mechanisms[0]["clients"] == 4 and mechanisms[1]["clients"] == 5
    assert mechanisms[0]["noise-multiplier"] == planned[0] * math.sqrt(4 / 5)
    assert ledger["epsilon"] == dp_epsilon_of(
        [m["noise-multiplier"] for m in mechanisms], 1e-5) > 2.0  # over the target
    assert any("round 0 dp-moments: only 4 of 5" in w for w in strategy.run_warnings)


def test_a_dp_start_drowned_in_noise_says_so():
    data = _clients()  # 800 rows: at epsilon 0.05 with bound 15 the count's noise is larger
    small = FedKMeans(16, min_nodes=5, seed=3, **{**DP, "dp_epsilon": 0.05})
    small.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    assert any("the start and the rounds are mostly noise" in w for w in small.run_warnings)
    large = FedKMeans(16, min_nodes=5, seed=3, **{**DP, "dp_epsilon": 50.0, "data_bound": 3.0})
    large.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
    assert not any("mostly noise" in w for w in large.run_warnings)



def test_the_ledger_states_the_pld_epsilon_beside_the_rdp_one_and_rdp_calibration_stays():
    """dp-accountant: 'pld' (default) calibrates less noise; 'rdp' is the former run."""
    from flwr_clustering.algorithms.dp_lloyd import dp_noise_plan

    data = _clients()
    runs = {}
    for method in ("pld", "rdp"):
        strategy = FedKMeans(16, min_nodes=5, seed=3, dp_accountant=method, **DP)
        strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), 5))
        ref = run_dp_lloyd([x for x, _ in data], 16, epsilon=2.0, delta=1e-5, bound=15.0,
                           rounds=6, seed=3, accountant=method)
        np.testing.assert_array_equal(strategy.centroids, ref.centroids)
        ledger = strategy.privacy_ledger()
        dp = ledger["differential-privacy"]
        assert dp["accountant"] == method and dp["epsilons"] == ref.epsilons
        assert ledger["epsilon"] == dp["epsilons"][method] == ref.epsilon
        assert 2.0 * (1 - 1e-3) <= ledger["epsilon"] <= 2.0
        # the accountant composed every mechanism listed, as it ran
        assert strategy.accountant.core.events == [
            (m["noise-multiplier"], 1) for m in dp["mechanisms"]]
        assert strategy.noise_plan == dp_noise_plan(2.0, 1e-5, 6, accountant=method)
        runs[method] = strategy
    pld, rdp = runs["pld"], runs["rdp"]
    # the same guarantee with less noise; the RDP figure of the PLD run's noise is above 2
    assert pld.noise_multiplier / rdp.noise_multiplier == pytest.approx(0.928, abs=2e-3)
    assert pld.privacy_ledger()["differential-privacy"]["epsilons"]["rdp"] > 2.0


def test_the_accountant_follows_flowers_privacy_accountant_protocol():
    from flwr.serverapp import GaussianPrivacyEvent, PrivacyAccountant, SamplingMethod

    from flwr_clustering.strategies.dp_accountant import FlowerPrivacyAccountant

    strategy = FedKMeans(16, min_nodes=5, seed=3, **DP)
    strategy.start(grid=InProcessGrid(client_app_for(FedKMeansClient, _clients()), 5))
    acc = strategy.accountant
    assert isinstance(acc, FlowerPrivacyAccountant)
    members = {name for name in vars(PrivacyAccountant) if not name.startswith("_")}
    assert members == {"config", "num_releases", "compose", "get_epsilon", "get_delta",
                       "get_privacy_spent", "would_exceed", "state_dict", "load_state_dict"}
    assert all(hasattr(acc, name) for name in members)
    assert acc.config.sampling_method is SamplingMethod.NO_AMPLIFICATION
    assert acc.config.target_delta == 1e-5 and acc.config.max_epsilon == 2.0
    spent = acc.get_privacy_spent()
    assert spent.epsilon == strategy.privacy_ledger()["epsilon"] and spent.delta == 1e-5
    assert spent.num_releases == acc.num_releases == 8 and spent.accounting_method == "pld"
    assert acc.get_delta(spent.epsilon) <= 1e-5 * (1 + 1e-6)
    # one more round of the same noise would break the budget; nothing is composed by asking
    event = GaussianPrivacyEvent(strategy.noise_multiplier, 1, 1)
    assert acc.would_exceed(event) and not acc.would_exceed(event, max_epsilon=100.0)
    assert acc.num_releases == 8
    # the state: JSON, restored into a fresh accountant of the run, composes on alike
    state = json.loads(json.dumps(acc.state_dict()))
    fresh = FlowerPrivacyAccountant("pld", 1e-5, 2.0)
    fresh.load_state_dict(state)
    assert fresh.get_epsilon(1e-5) == spent.epsilon
    fresh.compose(event)
    acc.compose(event)
    assert fresh.state_dict() == acc.state_dict() and fresh.get_epsilon(1e-5) == \
        acc.get_epsilon(1e-5)
    with pytest.raises(ValueError, match="this run's accountant is 'rdp'"):
        FlowerPrivacyAccountant("rdp", 1e-5, 2.0).load_state_dict(state)
    with pytest.raises(ValueError, match="configuration"):
        FlowerPrivacyAccountant("pld", 1e-6, 2.0).load_state_dict(state)
    with pytest.raises(ValueError, match="population_size"):
        acc.compose(GaussianPrivacyEvent(1.0, 1, 5))
