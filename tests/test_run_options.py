"""One rule, one place (issue 51): the options of a run besides its algorithm's are declared
once (:class:`flwr_clustering.run_options.RunOptions`), and every door refuses a bad value
with the same words: the strategy's constructor, the App's run config
(:func:`~flwr_clustering.app.config.merged_config`) and the estimator."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from flwr_clustering.app.config import AppOptions, build_strategy, merged_config
from flwr_clustering.estimator import FederatedClustering
from flwr_clustering.run_options import RunOptions, is_auto_k, scaling_problem
from flwr_clustering.secure.session import SecureSession
from flwr_clustering.secure.sums import secagg_threshold_problem
from flwr_clustering.strategies.base import ClusteringStrategy
from flwr_clustering.strategies.choose_k import search_k
from flwr_clustering.strategies.features import FeatureOptions
from flwr_clustering.strategies.fkm import FedKMeans

SECURE = {"server_update": "lloyd", "secure_aggregation": True}
SECURE_RC = {"server-update": "lloyd", "secure-aggregation": True}
NO_DOOR = None  # the door has no such parameter

# (case, constructor kwargs, run config, estimator kwargs, the message, exactly)
CASES = [
    ("k=0", {"k": 0}, {"k": 0}, {"n_clusters": 0},
     "k must be at least 1, got 0 (run-config key 'k')"),
    ("k='x'", {"k": "x"}, {"k": "x"}, {"n_clusters": "x"},
     "k must be an integer, got 'x' (run-config key 'k')"),
    ("k='auto' to one strategy", {"k": "auto"}, NO_DOOR, NO_DOOR,
     "k='auto': a FedKMeans fits one k; choosing k is a search over candidates: "
     "flwr_clustering.strategies.choose_k.search_k(FedKMeans, range(2, 11), ...) "
     "(feca, fkm, kfed)"),
    ("scaling='bogus'", {"scaling": "bogus"}, {"scaling": "bogus"}, {"scaling": "bogus"},
     "scaling must be one of ['standard', 'minmax', 'none'], got 'bogus' "
     "(run-config key 'scaling')"),
    ("secagg-threshold=0", {**SECURE, "secagg_threshold": 0},
     {**SECURE_RC, "secagg-threshold": 0}, NO_DOOR,
     "secagg_threshold must lie in (0, 1], got 0.0 (run-config key 'secagg-threshold')"),
    ("secagg-threshold=1.5", {**SECURE, "secagg_threshold": 1.5},
     {**SECURE_RC, "secagg-threshold": 1.5}, NO_DOOR,
     "secagg_threshold must lie in (0, 1], got 1.5 (run-config key 'secagg-threshold')"),
    ("minmax under secure aggregation", {**SECURE, "scaling": "minmax"},
     {**SECURE_RC, "scaling": "minmax"}, NO_DOOR,
     "secure-aggregation=true: scaling='minmax' needs every site's minimum and maximum "
     "(one row's value each), which secure aggregation cannot sum: run with "
     "scaling='standard'"),
    ("robust scaling under secure aggregation",
     {**SECURE, "scaling": "standard", "robust_scaling": True},
     {**SECURE_RC, "robust-scaling": True}, NO_DOOR,
     "secure-aggregation=true: robust-scaling=true needs each site's per-feature sums, "
     "which secure aggregation hides (the server learns only their totals): run with "
     "robust-scaling=false (unit-check still flags a site in other units)"),
    ("robust scaling with minmax", {"scaling": "minmax", "robust_scaling": True},
     {"scaling": "minmax", "robust-scaling": True},
     {"scaling": "minmax", "robust_scaling": True},
     "robust-scaling=true with scaling='minmax': the robust rule sets aside a site's means "
     "and spreads, which only scaling='standard' uses: run with scaling='standard', or "
     "robust-scaling=false"),
    ("refine-rounds=-1", {"refine_rounds": -1}, {"refine-rounds": -1}, {"refine_rounds": -1},
     "refine_rounds must be at least 0, got -1 (run-config key 'refine-rounds')"),
    ("min-nodes=0", {"min_nodes": 0}, {"min-nodes": 0}, {"min_nodes": 0},
     "min_nodes must be at least 1, got 0 (run-config key 'min-nodes')"),
    ("fraction=0", {"fraction": 0}, NO_DOOR, NO_DOOR, "fraction must lie in (0, 1], got 0.0"),
    ("poll-interval=0", {"poll_interval": 0}, {"poll-interval": 0}, NO_DOOR,
     "poll_interval must lie in (0, 3] seconds (Flower's own wait is 3), got 0.0 "
     "(run-config key 'poll-interval')"),
]


def _parts() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(size=(20, 2)) for _ in range(3)]


@pytest.mark.parametrize("case, ctor, run_config, est, message", CASES,
                         ids=[c[0] for c in CASES])
def test_every_door_refuses_a_bad_value_with_the_same_words(case, ctor, run_config, est,
                                                             message):
    ctor = {"k": 4, **ctor}
    k = ctor.pop("k")
    with pytest.raises(ValueError) as err:
        FedKMeans(k, **ctor)
    assert str(err.value) == message
    if run_config is not NO_DOOR:
        with pytest.raises(ValueError) as err:  # the App refuses it as it parses the config
            merged_config(run_config)
        assert str(err.value) == message
    if est is not NO_DOOR:
        est = {"n_clusters": 3, **est}
        with pytest.raises(ValueError) as err:  # before any message: no federated run
            FederatedClustering("fkm", **est).fit(_parts())
        assert str(err.value) == message


def test_the_app_reuses_the_strategys_declaration():
    run_keys = RunOptions.fields_by_key(run_config_only=True)
    assert issubclass(AppOptions, RunOptions)
    assert {key: f.default for key, f in run_keys.items()} \
        == {key: AppOptions.run_config_defaults()[key] for key in run_keys}
    # every declared field is a keyword of the strategy's constructor, and the App hands
    # the strategy every run-config field (plus its column lists)
    params = inspect.signature(ClusteringStrategy.__init__).parameters
    assert {f.name for f in dataclasses.fields(RunOptions)} <= set(params)
    strategy = build_strategy(merged_config({"min-nodes": 3, "seed": 7, "refine-rounds": 2,
                                             "secagg-threshold": 0.8, "split-check": False,
                                             "round-timeout": 30.0}))
    assert (strategy.min_nodes, strategy.seed, strategy.refine_rounds) == (3, 7, 2)
    assert (strategy.secagg_threshold, strategy.split_check, strategy.round_timeout) \
        == (0.8, False, 30.0)
    assert strategy.feature_options.scaling == "standard"  # the App's default
    assert FedKMeans(4).feature_options.scaling is None  # the constructor's: no step


def test_the_threshold_rule_is_flowers_and_the_protocols_keep_it():
    assert [secagg_threshold_problem(t) is None
            for t in (0.0, 1e-9, 0.6, 1.0, 1.0 + 1e-9, float("nan"))] \
        == [False, True, True, True, False, False]
    with pytest.raises(ValueError) as err:
        SecureSession(threshold=0)
    assert str(err.value) == "threshold must lie in (0, 1], got 0"
    assert merged_config({"secagg-threshold": 1.0})["secagg-threshold"] == 1.0


def test_the_features_step_keeps_the_declarations_rules():
    with pytest.raises(ValueError) as err:
        FeatureOptions(scaling="bogus")
    assert str(err.value) == CASES[3][4]
    assert scaling_problem(None, True, False).startswith(
        "robust-scaling=true with scaling=None")
    assert scaling_problem("standard", True, False) is None
    assert scaling_problem("minmax", False, False) is None
    assert scaling_problem(None, False, True) is None


def test_k_auto_is_one_test_and_a_search_checks_each_k_as_the_options_do():
    assert [is_auto_k(v) for v in ("auto", " AUTO ", "Auto", "x", 3, None)] \
        == [True, True, True, False, False, False]
    with pytest.raises(ValueError) as err:
        search_k(FedKMeans, [2, 2.5])
    assert str(err.value) == "k must be an integer, got 2.5 (run-config key 'k')"
    assert search_k(FedKMeans, [4, 2, 2.0, 3], min_nodes=2).candidate_ks == [2, 3, 4]
    with pytest.raises(ValueError, match=r"k-min <= k-max.*got k-min=5, k-max=3"):
        merged_config({"k": "auto", "k-min": 5, "k-max": 3})
    with pytest.raises(ValueError) as err:  # k-min's own bound: its declaration's words
        merged_config({"k": "auto", "k-min": 0})
    assert str(err.value) == "k_min must be at least 1, got 0 (run-config key 'k-min')"
