"""Reproduction commands masked-table2..5 (spec 000 §8): registration, row format, the DIM
look-alike's exact rows through the framework, and the communication counts against the
Flower clients' payloads."""

import numpy as np
import pytest

from flwr_clustering.algorithms.masked_federated import run_masked_federated
from flwr_clustering.clients.masked import MaskedFederatedClient, MaskedOneShotClient
from simulations.cli import main
from simulations.framework import (
    EXPERIMENTS,
    ROW_KEYS,
    run_experiment,
    summarize,
)
from simulations.masked import (
    PRIVACY_THRESHOLD,
    masked_federation,
    score_federated,
    score_oneshot,
    uploaded_classes,
)

TABLES = ("masked-table2", "masked-table3", "masked-table4", "masked-table5")


def test_registered_and_listed(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in TABLES:
        assert name in out
        labels = [s.label for s in EXPERIMENTS[name].settings]
        assert labels == ["dim-128 n=10", "digits-037 n=10", "digits-037 n=3",
                          "digits-46 n=10", "digits-46 n=3"]
    assert EXPERIMENTS["masked-table2"].methods[0].options["method"] == "A"
    assert EXPERIMENTS["masked-table3"].methods[0].options["method"] == "B"
    paper = EXPERIMENTS["masked-table3"].paper
    assert paper[("alg1-B", "digits-037 n=3", "E2-accuracy")].mean == 94.59
    assert paper[("alg1-B", "digits-46 n=10", "centralized-accuracy")].mean == 99.90
    assert EXPERIMENTS["masked-table4"].paper[("alg2", "dim-128 n=10", "E4")].mean == 1.0
    assert EXPERIMENTS["masked-table5"].paper[
        ("alg2", "digits-037 n=10", "E3-relative-distance")].mean == 0.062


@pytest.mark.parametrize(("name", "e", "acc"), [("masked-table2", "E1", "E2-accuracy"),
                                                ("masked-table4", "E4", "E5-accuracy")])
def test_dim128_rows_are_exact(name, e, acc):
    exp = EXPERIMENTS[name]
    all_rows = summarize(name, run_experiment(name, runs=1, settings=["dim-128 n=10"]),
                         rounds=1, tol=0, seed=0)
    checks = exp.checks(all_rows)  # every method's rows (table 4 also has alg2-valid-pairs)
    assert len(checks) == 4 * len(exp.methods) and all(c["holds"] for c in checks)
    rows = [r for r in all_rows if r["method"] == exp.methods[0].name]
    assert [r["metric"] for r in rows] == list(exp.metrics)
    for row in rows:
        assert tuple(row)[: len(ROW_KEYS)] == ROW_KEYS
        assert row["setting"] == "dim-128 n=10" and row["runs"] == 1
        assert len(row["scores"]) == 1
    by = {r["metric"]: r for r in rows}
    assert by[e]["ours_mean"] == 1.0 and by[e]["paper"] == 1.0
    assert by[acc]["ours_mean"] == 100.0 and by["centralized-accuracy"]["ours_mean"] == 100.0
    assert by["E3-cosine"]["ours_mean"] == pytest.approx(1.0, abs=1e-12)
    assert by["E3-relative-distance"]["ours_mean"] < 1e-12
    assert by["floats-uploaded"]["ours_mean"] > 0 and by["floats-uploaded"]["paper"] is None


def test_checks_flag_failures():
    rows = [
        {"setting": "dim-128 n=10", "metric": "E1", "scores": [1.0, 0.9], "ours_mean": 0.95},
        {"setting": "digits-46 n=3", "metric": "E2-accuracy", "scores": [90.0],
         "ours_mean": 90.0},
        {"setting": "digits-46 n=3", "metric": "centralized-accuracy", "scores": [99.7],
         "ours_mean": 99.7},
        {"setting": "digits-46 n=3", "metric": "E1", "scores": [1.0], "ours_mean": 1.0},
    ]
    holds = [c["holds"] for c in EXPERIMENTS["masked-table2"].checks(rows)]
    assert holds == [False, False, True]


def test_uploaded_classes_by_hand():
    labels = [np.array([0, 0, 1, 1, 1]), np.array([2, 2, 0])]
    local = [np.array([0, 0, 1, 1, 2]), np.array([1, 1, 0])]
    uploaded = [np.array([0, 1]), np.array([0, 1])]  # client 0's cluster 2 withheld
    assert uploaded_classes(labels, local, uploaded, 3).tolist() == [0, 1, 0, 2]


def _payload_size(arrays):
    return sum(int(np.asarray(a).size) for a in arrays)


def test_communication_counts_equal_the_client_payloads():
    data = masked_federation("digits-46", 3, 1, seed=0)
    k = data.n_classes
    config = {"k-local": k, "k-max": k, "n-init": 10, "privacy-threshold": PRIVACY_THRESHOLD,
              "seed": 0}

    sent = sum(_payload_size(MaskedOneShotClient(X, y, client_id=i).fit([], config)[0])
               for i, (X, y) in enumerate(zip(data.clients, data.labels, strict=True)))
    scores = score_oneshot(data, seed=0, w=2.0, min_size=30, max_size=100)
    assert scores["floats-uploaded"] == sent

    result = run_masked_federated(data.clients, k, method="A", alpha=0.8, rounds=3,
                                  k_local=k, seed=0, privacy_threshold=PRIVACY_THRESHOLD)
    sent = 0
    for i, (X, y) in enumerate(zip(data.clients, data.labels, strict=True)):
        client = MaskedFederatedClient(X, y, client_id=i)
        sent += _payload_size(client.fit([], {**config, "phase": "init"})[0])
        for G in result.history[:-1]:
            sent += _payload_size(client.fit([G], {**config, "phase": "update",
                                                   "evaluate": False})[0])
    scores = score_federated(data, seed=0, method="A", alpha=0.8, rounds=3)
    assert scores["floats-uploaded"] == sent
