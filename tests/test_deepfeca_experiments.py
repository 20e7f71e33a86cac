"""Reproduction command deepfeca-digits (spec 001 §2.6, Table 3 on offline digits): registration,
the loader's held-out rows, the wiring of the runners (T from the method options, not from
--rounds), one short real run, and checks that fail on failing rows."""

from dataclasses import replace

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from simulations.deepfeca import (
    ROUNDS,
    TEST_CLIENT,
    K,
    digits_federated,
    few_shot_rows,
    held_out,
    labelled,
    score_random,
)
from simulations.framework import EXPERIMENTS, RUNNERS, run_method

NAME = "deepfeca-digits"
METHODS = ["deepfeca", "deepfeca-mavg", "deepfeca-kfed", "centralized", "random"]
METRICS = ("linear-probe", "probe-5-shot", "nmi", "seconds")


def _rowset(X):
    return {row.tobytes() for row in np.ascontiguousarray(X)}


def test_registered():
    exp = EXPERIMENTS[NAME]
    assert [m.name for m in exp.methods] == METHODS
    assert all(m.kind in RUNNERS for m in exp.methods)
    assert [s.label for s in exp.settings] == ["IID", "Dir(0.3)", "Dir(0.1)"]
    assert exp.metrics == METRICS and exp.k == K == 30
    assert exp.per_run_data and exp.checks is not None and not exp.paper
    opts = {m.name: m.options for m in exp.methods}
    for name in METHODS[:4]:
        assert opts[name]["rounds"] == ROUNDS == 20
    assert opts["deepfeca-mavg"]["privacy_threshold"] == 1
    assert opts["deepfeca-kfed"]["k_local"] == 5
    assert opts["deepfeca-kfed"]["privacy_threshold"] == 1
    assert any("53.6" in n and "80.9" in n for n in exp.notes)


def test_loader_holds_out_test_rows():
    X, y = load_digits(return_X_y=True)
    X_train, X_test, _, y_test = train_test_split(X, y, test_size=0.25, stratify=y,
                                                  random_state=0)
    d = digits_federated("Dir(0.3)", seed=0)
    assert len(d.X) == 1797 and d.X.shape[1] == 64 and d.n_classes == 10
    test = d.client == TEST_CLIENT
    assert TEST_CLIENT == -1 and test.sum() == len(X_test) == 450
    Xh, yh = held_out(d)
    np.testing.assert_array_equal(Xh, X_test)
    np.testing.assert_array_equal(yh, y_test)
    # FederatedData.clients iterates range(n_clients): the held-out rows are in no client.
    assert d.n_clients == 10
    client_rows = np.concatenate(d.clients)
    assert len(client_rows) + len(Xh) == 1797
    assert not _rowset(client_rows) & _rowset(Xh)
    assert _rowset(client_rows) == _rowset(X_train)
    assert sum(len(yi) for yi in d.labels) == 1347
    Xl, yl = labelled(d)
    np.testing.assert_array_equal(Xl, client_rows)
    np.testing.assert_array_equal(yl, np.concatenate(d.labels))
    # Same seed, same split; another seed, another split (Dirichlet).
    again = digits_federated("Dir(0.3)", seed=0)
    np.testing.assert_array_equal(again.X, d.X)
    np.testing.assert_array_equal(again.client, d.client)
    other = digits_federated("Dir(0.3)", seed=1)
    assert [len(c) for c in other.clients] != [len(c) for c in d.clients]
    np.testing.assert_array_equal(held_out(other)[0], X_test)  # the test rows are fixed
    iid = digits_federated("IID", seed=0)
    assert {len(c) for c in iid.clients} <= {134, 135}
    with pytest.raises(ValueError, match="split"):
        digits_federated("Dir(1)")


def test_few_shot_rows():
    y = np.repeat(np.arange(10), 20)
    rows = few_shot_rows(y, 5, 0)
    assert len(rows) == 50 and np.all(np.bincount(y[rows]) == 5)
    assert len(np.unique(rows)) == 50 and np.all(np.diff(rows) > 0)
    np.testing.assert_array_equal(rows, few_shot_rows(y, 5, 0))
    assert not np.array_equal(rows, few_shot_rows(y, 5, 1))


def _fake_run(calls):
    """A stand-in for run_deepfeca that records its arguments and returns θ̄_0."""
    from flwr_clustering.algorithms.deepfeca import DeepFeCAResult, initial_weights

    def run(clients, k, **kwargs):
        calls.append({"sizes": [len(c) for c in clients], "k": k, **kwargs})
        w = initial_weights(kwargs["spec"], kwargs["seed"])
        return DeepFeCAResult(w, np.empty((0, 32)), [], w)

    return run


def test_runners_take_t_from_the_method_options(monkeypatch):
    pytest.importorskip("torch")
    import flwr_clustering.algorithms.deepfeca as deepfeca
    import simulations.deepfeca as module

    calls = []
    monkeypatch.setattr(deepfeca, "run_deepfeca", _fake_run(calls))
    # The scoring is tested on a real run below; here only the wiring.
    monkeypatch.setattr(module, "representation_scores",
                        lambda *a: {"linear-probe": 1.0, "probe-5-shot": 2.0, "nmi": 0.5})
    exp = EXPERIMENTS[NAME]
    data = digits_federated("Dir(0.1)", seed=2)
    for name in METHODS[:4]:
        out = run_method(exp, exp.method(name), data, 2, rounds=3)  # --rounds 3: FKM's cap
        assert set(out.scores) == set(METRICS)
    by = dict(zip(METHODS[:4], calls, strict=True))
    assert all(c["rounds"] == 20 and c["k"] == 30 and c["seed"] == 2 for c in calls)
    assert [by[m]["labeller"] for m in METHODS[:4]] == ["feca", "mavg", "kfed", "feca"]
    assert by["deepfeca"]["privacy_threshold"] == 2
    assert by["deepfeca-mavg"]["privacy_threshold"] == 1
    assert by["deepfeca-kfed"]["k_local"] == 5 and by["deepfeca-kfed"]["privacy_threshold"] == 1
    assert all(c["options"].batch_size == 32 and c["options"].epochs == 5 for c in calls)
    assert by["deepfeca"]["sizes"] == [len(c) for c in data.clients]
    assert by["centralized"]["sizes"] == [1347]
    assert all(c["spec"].input_shape == (1, 8, 8) and c["spec"].name == "cnn" for c in calls)


def test_one_round_and_random_runner():
    pytest.importorskip("torch")
    exp = EXPERIMENTS[NAME]
    data = digits_federated("IID", seed=0)
    opts = {**exp.method("deepfeca").options, "rounds": 1}
    # The registered runner of kind "deepfeca", through run_method (one round instead of T).
    scores = run_method(exp, replace(exp.method("deepfeca"), options=opts), data, 0).scores
    assert set(scores) == set(METRICS)
    assert 50 < scores["linear-probe"] <= 100  # chance is 10 %
    assert 10 < scores["probe-5-shot"] <= 100
    assert 0 < scores["nmi"] <= 1
    assert scores["seconds"] > 0
    rand = score_random(data, K, 0)
    assert rand == score_random(data, K, 0)
    assert rand["seconds"] == 0.0 and 50 < rand["linear-probe"] <= 100 and 0 < rand["nmi"] <= 1
    assert rand != score_random(data, K, 1)  # another network, another 5-shot draw
    assert scores != {**rand, "seconds": scores["seconds"]}  # one round changed the network


def _rows(values):
    """Hand-made result rows: {metric: {setting: {method: mean}}}."""
    return [{"experiment": NAME, "method": m, "setting": s, "metric": metric,
             "ours_mean": v, "ours_std": 0.0, "paper": None, "runs": 3}
            for metric, settings in values.items() for s, ms in settings.items()
            for m, v in ms.items()]


def test_checks_hold_and_fail():
    checks = EXPERIMENTS[NAME].checks
    good = {"deepfeca": 90.0, "deepfeca-mavg": 85.0, "deepfeca-kfed": 80.0,
            "centralized": 95.0, "random": 70.0}
    settings = ("IID", "Dir(0.3)", "Dir(0.1)")
    rows = _rows({metric: {s: dict(good) for s in settings}
                  for metric in ("linear-probe", "probe-5-shot", "nmi")})
    out = checks(rows)
    assert len(out) == 12 and all(c["holds"] for c in out)
    assert all(set(c) == {"claim", "holds", "detail"} for c in out)
    assert sum("probe-5-shot" in c["claim"] for c in out) == 6
    assert "90.00" in out[0]["detail"] and "85.00" in out[0]["detail"]

    bad = {
        "IID": {**good, "deepfeca-kfed": 90.5},                 # (a) fails, (b) holds
        "Dir(0.3)": {**good, "random": 82.0},                   # (a) holds, (b) fails
        "Dir(0.1)": {**good, "deepfeca": 69.0},                 # both fail
    }
    out = checks(_rows({"linear-probe": bad, "probe-5-shot": {s: good for s in settings}}))
    holds = {(c["claim"].split(":")[0], "random" in c["claim"]): c["holds"] for c in out}
    assert holds == {
        ("IID, linear-probe", False): False, ("IID, linear-probe", True): True,
        ("Dir(0.3), linear-probe", False): True, ("Dir(0.3), linear-probe", True): False,
        ("Dir(0.1), linear-probe", False): False, ("Dir(0.1), linear-probe", True): False,
        **{(f"{s}, probe-5-shot", r): True for s in settings for r in (False, True)},
    }
    # A tie is not a win.
    tie = checks(_rows({"linear-probe": {"IID": {**good, "deepfeca-mavg": 90.0}}}))
    assert [c["holds"] for c in tie] == [False, True]
