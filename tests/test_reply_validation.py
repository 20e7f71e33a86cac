"""The server trusts no client's word about itself: replies are validated and bounded.

A client decides its own weight through the counts it reports (FKM's server k-means,
every average) and could send arrays of any size. Every rule is checked on the server,
for every algorithm: the arrays have the protocol's shapes and at most its sizes, counts
are non-negative integers that sum to at most the rows the client reported
(``num-examples``), that row count does not change during the run, and values are finite.
A reply that breaks a rule is dropped with a WARNING naming the client and the rule, and
recorded in the round's history; the run's result is then exactly the run without that
client.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from flwr_clustering import registry
from flwr_clustering.data.synthetic import garst_beta_split
from flwr_clustering.evaluation import check_evaluation_stats, local_evaluation_stats
from flwr_clustering.testing import InProcessGrid, client_app_for

#: Client 1 claims counts 10^9 times its rows; client 3 sends an oversized array.
LIAR, FLOODER = 1, 3
OVERSIZED_ROWS = 1_000_000


def _clients(beta=10.0):
    X, y, c = garst_beta_split(beta)
    return [(X[c == i], y[c == i]) for i in range(5)]


#: For every algorithm whose replies carry counts: which array of a train reply holds
#: them (by phase, when the phases differ), and which holds a (rows, d) matrix.
COUNTS = {
    "fkm": {"counts": 1, "matrix": 0},
    "kfed": {"counts": 1, "matrix": 0},
    "masked-federated": {"counts": 1, "matrix": 0},
    "masked-oneshot": {"counts": 3, "matrix": 1},
    "ffcm": {"counts": 1, "matrix": 0, "moments": {"counts": 0, "matrix": 1}},
}


def _tampered(cls, algorithm, how):
    """A client class of ``algorithm`` whose train replies break one rule (``how``)."""
    class Tampered(cls):
        def fit(self, parameters, config):
            arrays, n, metrics = super().fit(parameters, config)
            where = COUNTS.get(algorithm, {"matrix": 0})
            where = where.get(config.get("phase"), where)
            arrays = [np.array(a, copy=True) for a in arrays]
            if how == "counts":
                c = arrays[where["counts"]]
                arrays[where["counts"]] = c * (10**9 if c.dtype.kind in "iu" else 1e9)
            elif how == "oversized":
                m = arrays[where["matrix"]]
                rows = OVERSIZED_ROWS
                big = np.ones((rows, *m.shape[1:]), dtype=m.dtype)
                # the arrays that go with the matrix row by row grow with it
                arrays = [big if i == where["matrix"] else
                          (np.full((rows, *a.shape[1:]), 2, dtype=a.dtype)
                           if a.ndim >= 1 and len(a) == len(m) else a)
                          for i, a in enumerate(arrays)]
            elif how == "rows":
                n = n + 1 if config.get("phase") not in ("init", "kfed", "feca", "oneshot",
                                                          "moments") else n
            elif how == "fail":
                raise RuntimeError("left out")
            return arrays, n, metrics

    return Tampered


def _run(algorithm, data, bad: dict[int, str | type], caplog=None, scaling=None, **config):
    """Run ``algorithm`` on ``data``; ``bad`` maps a client id to a tampering (a rule it
    breaks, see :func:`_tampered`) or to a client class of its own."""
    spec = registry.get(algorithm)
    by_node = {i: how if isinstance(how, type) else _tampered(spec.client, algorithm, how)
               for i, how in bad.items()}
    cfg = {**spec.options.run_config_defaults(), "k": 16, **config}
    strategy = spec.build_strategy(cfg, min_nodes=3, seed=0, scaling=scaling)
    logger = logging.getLogger("flwr_clustering")
    if caplog is not None:
        logger.addHandler(caplog.handler)
    try:
        strategy.start(grid=InProcessGrid(client_app_for(spec.client, data, by_node=by_node), 5))
    finally:
        if caplog is not None:
            logger.removeHandler(caplog.handler)
    return strategy


@pytest.mark.parametrize("algorithm, config", [
    ("fkm", {"max-rounds": 4, "tol": -1.0}),
    ("fkm", {"max-rounds": 4, "tol": -1.0, "server-update": "lloyd"}),
    ("kfed", {}),
    ("masked-federated", {"federated-rounds": 2, "tol": -1.0}),
    ("masked-oneshot", {}),
    ("ffcm", {"max-rounds": 3, "tol": -1.0}),
])
def test_a_client_claiming_1e9_times_its_rows_and_one_flooding_are_dropped(
        algorithm, config, caplog):
    data = _clients()
    strategy = _run(algorithm, data, {LIAR: "counts", FLOODER: "oversized"}, caplog, **config)
    reference = _run(algorithm, data, {LIAR: "fail", FLOODER: "fail"}, **config)
    # the result is exactly the run of the three other clients
    np.testing.assert_array_equal(strategy.centroids, reference.centroids)
    assert [h["clients"] for h in strategy.history] == [3] * len(strategy.history)
    # each rule broken is logged at WARNING, naming the client ...
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    liar = [w for w in warnings if f"client {LIAR} " in w and "dropping reply" in w]
    flood = [w for w in warnings if f"client {FLOODER} " in w and "dropping reply" in w]
    assert liar and flood, warnings
    assert "more than the" in liar[0] and "rows it reported (num-examples)" in liar[0], liar
    assert any(s in flood[0] for s in ("at most", "more than", "expected k=16")), flood
    # ... and recorded in the history of the round
    absent = {a["client"]: a["reason"] for a in strategy.history[-1]["absent"]}
    assert set(absent) == {LIAR, FLOODER}, absent
    assert "num-examples" in absent[LIAR]


def test_kdc_sample_larger_than_the_site_is_refused():
    """A KDC site's sample may not hold more rows than the site reported."""
    data = _clients()
    cls = registry.get("kdc").client

    class Flooding(cls):
        def fit(self, parameters, config):
            arrays, n, metrics = super().fit(parameters, config)
            if config.get("phase") == "sample":
                arrays = [np.ones((OVERSIZED_ROWS, arrays[0].shape[1]))]
            return arrays, n, metrics

    class Failing(cls):
        def fit(self, parameters, config):
            if config.get("phase") == "sample":
                raise RuntimeError("left out")
            return super().fit(parameters, config)

    runs = [_run("kdc", data, {FLOODER: bad_cls}, **{"sample-size": 400, "ik-t": 50,
                                                    "kdc-auto": False,
                                                    "kdc-step2": "kernel-kmeans"})
            for bad_cls in (Flooding, Failing)]
    assert runs[0].history[0]["clients"] == 4
    reasons = [a["reason"] for a in runs[0].history[0]["absent"]]
    # the train contract's size bound (rows declared x d) drops it before it is parsed
    assert any("broke the reply contract: train:" in r and "more than the phase's bound"
               in r for r in reasons), reasons
    np.testing.assert_array_equal(runs[0].centroids, runs[1].centroids)


@pytest.mark.parametrize("algorithm, config, rows", [
    ("feca", {}, "more than k'"),
    ("mavg", {}, "exactly"),
])
def test_oversized_uploads_of_algorithms_without_counts_are_dropped(algorithm, config, rows,
                                                                   monkeypatch):
    # 2,000 rows keep within the train contract's size bound: the parser's rule drops it
    # (a million rows: the contract, test_kdc_sample_larger_than_the_site_is_refused)
    monkeypatch.setitem(globals(), "OVERSIZED_ROWS", 2_000)
    data = _clients()
    strategy = _run(algorithm, data, {FLOODER: "oversized"}, **config)
    reference = _run(algorithm, data, {FLOODER: "fail"}, **config)
    np.testing.assert_array_equal(strategy.centroids, reference.centroids)
    (absent,) = strategy.history[0]["absent"]
    assert absent["client"] == FLOODER and "centroids" in absent["reason"], absent
    assert rows in absent["reason"], absent


def test_a_client_whose_row_count_changes_is_dropped(caplog):
    data = _clients()
    strategy = _run("fkm", data, {LIAR: "rows"}, caplog, **{"max-rounds": 3, "tol": -1.0})
    # round 1 (init) reports the true rows; from round 2 on the client says one more
    assert [h["clients"] for h in strategy.history] == [5, 4, 4]
    (absent,) = strategy.history[1]["absent"]
    assert absent["client"] == LIAR
    assert "row count changed" in absent["reason"], absent
    assert "round 2 train: dropping reply of client 1" in caplog.text


def test_a_dgc_node_that_breaks_a_rule_stops_the_run_naming_it():
    """DGC needs every node of its graph: a bad reply cannot be left out, the run stops."""
    data = _clients()
    with pytest.raises(RuntimeError, match=r"client 3 .*invalid reply|client 3 .*malformed|"
                                           r"client 3 .*broke the reply contract"):
        _run("dgc", data, {FLOODER: "oversized"}, iterations=2)


# ----------------------------------------------------------------- evaluation statistics


def _stats(n_rows=50, k=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, 2))
    C = X[:k]
    y = rng.integers(0, 3, n_rows)
    return local_evaluation_stats(X, C, y)


def test_honest_evaluation_statistics_pass():
    check_evaluation_stats(_stats(), k_max=4, n_features=2)


@pytest.mark.parametrize("key, value, rule", [
    ("cluster-counts", lambda s: s["cluster-counts"] * 10**9, "more than the client's"),
    ("cluster-counts", lambda s: s["cluster-counts"].astype(float) + 0.5, "integers"),
    ("cluster-counts", lambda s: -s["cluster-counts"], "non-negative"),
    ("contingency", lambda s: s["contingency"] * 10**9, "more than the client's"),
    ("contingency", lambda s: np.ones((OVERSIZED_ROWS, 3), dtype=np.int64), "cluster rows"),
    ("cluster-residuals", lambda s: np.ones((OVERSIZED_ROWS, 2)), "one per cluster"),
    ("sum-x", lambda s: np.ones(7), "features"),
    ("sse", lambda s: float("inf"), "finite"),
    ("silhouette-sum", lambda s: 1e12, "silhouettes"),
    ("num-examples", lambda s: -1, "non-negative integer"),
])
def test_evaluation_statistics_that_break_a_rule_are_refused(key, value, rule):
    stats = _stats()
    stats[key] = value(stats)
    with pytest.raises(ValueError, match=rule):
        check_evaluation_stats(stats, k_max=4, n_features=2)


def test_a_client_inflating_its_evaluation_counts_is_left_out_of_the_metrics(caplog):
    data = _clients()
    cls = registry.get("fkm").client

    class Inflating(cls):
        def evaluate(self, parameters, config):
            loss, n, stats = super().evaluate(parameters, config)
            stats["contingency"] = stats["contingency"] * 10**9
            return loss, n, stats

    strategy = _run("fkm", data, {LIAR: Inflating}, caplog, **{"max-rounds": 2})
    assert strategy.final_metrics["num-examples"] == sum(
        len(x) for i, (x, _) in enumerate(data) if i != LIAR)
    assert "evaluate: dropping reply of client 1" in caplog.text
    assert "contingency counts" in caplog.text


#: Which array of a train reply holds the means (or the sums behind them), by phase.
MEANS = {"masked-oneshot": 1, "ffcm": {"moments": None, None: 0}}


def _absurd_means(cls, value=1e30, algorithm=None):
    """A client of ``cls`` that replaces the means of its train replies by ``value``,
    counts unchanged (finite, well-shaped: only its own sums tell the lie); with
    ``value=None`` it fails those replies instead (the reference run)."""
    class Absurd(cls):
        def fit(self, parameters, config):
            arrays, n, metrics = super().fit(parameters, config)
            where = MEANS.get(algorithm, 0)
            if isinstance(where, dict):
                where = where.get(config.get("phase"), where[None])
            if where is None:
                return arrays, n, metrics
            if value is None:
                raise RuntimeError("left out")
            arrays = [np.array(a, copy=True) for a in arrays]
            if algorithm == "masked-federated":  # sums: the mean of the observed is the lie
                arrays[0][:] = value * arrays[1]
            else:
                arrays[where][:] = value
            return arrays, n, metrics

    return Absurd


@pytest.mark.parametrize("algorithm, config", [
    ("fkm", {"max-rounds": 4, "tol": -1.0}),
    ("fkm", {"max-rounds": 4, "tol": -1.0, "server-update": "lloyd"}),
    ("kfed", {}),
    ("feca", {}),
    ("mavg", {}),
    ("ffcm", {"max-rounds": 3, "tol": -1.0}),
    ("masked-federated", {"federated-rounds": 2, "tol": -1.0, "k": 4}),
    ("masked-oneshot", {"k": 4}),
])
@pytest.mark.parametrize("value", [1e30, 40.0])
def test_a_mean_its_own_rows_cannot_have_is_dropped(algorithm, config, value, caplog):
    """One client of five sends means of 1e30 (or 40 standard deviations out) with honest
    counts: each reply is dropped, naming the client, and the model is exactly the run
    without its train replies (it still declared its sums: the same scaling)."""
    data = _clients()
    cls = registry.get(algorithm).client
    strategy = _run(algorithm, data, {LIAR: _absurd_means(cls, value, algorithm)}, caplog,
                    scaling="standard", **config)
    reference = _run(algorithm, data, {LIAR: _absurd_means(cls, None, algorithm)},
                     scaling="standard", **config)
    np.testing.assert_array_equal(strategy.centroids, reference.centroids)
    assert [h["clients"] for h in strategy.history] == [4] * len(strategy.history)
    absent = {a["client"]: a["reason"] for a in strategy.history[-1]["absent"]}
    assert set(absent) == {LIAR}, absent
    assert "cannot come from its rows" in absent[LIAR], absent
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"client {LIAR} " in w and "cannot come from its rows" in w
               for w in warnings), warnings


def test_honest_clients_pass_the_mean_bound_at_every_round():
    data = _clients()
    strategy = _run("fkm", data, {}, scaling="standard", **{"max-rounds": 6, "tol": -1.0})
    assert [h["clients"] for h in strategy.history] == [5] * 6
    assert len(strategy.client_moments) == 5


@pytest.mark.parametrize("algorithm, config", [
    ("feca", {}), ("mavg", {}), ("ffcm", {"max-rounds": 4, "tol": -1.0}),
    ("masked-federated", {"federated-rounds": 3, "tol": -1.0}), ("masked-oneshot", {}),
])
def test_honest_clients_with_missing_features_pass_the_mean_bound(algorithm, config):
    """Skewed sites, each missing one of three features (the masked algorithms; the
    others get every feature): no honest reply is dropped, all clients' sums bound."""
    from sklearn.datasets import make_blobs
    X, y = make_blobs(1000, n_features=3, centers=4, cluster_std=[0.5, 1.0, 2.0, 0.3],
                      random_state=3)
    order = np.argsort(X[:, 0] + 0.5 * np.random.default_rng(0).normal(size=len(X)))
    data = []
    for i, idx in enumerate(np.array_split(order, 5)):
        Xi = X[idx] * [1.0, 100.0, 0.01]
        if algorithm.startswith("masked"):
            Xi[:, i % 3] = np.nan
        data.append((Xi, y[idx]))
    strategy = _run(algorithm, data, {}, scaling="standard", **{"k": 4, **config})
    assert len(strategy.client_moments) == 5
    assert all(h["clients"] == 5 and not h.get("absent") for h in strategy.history), [
        h.get("absent") for h in strategy.history]
