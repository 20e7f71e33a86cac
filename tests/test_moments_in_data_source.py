"""The feature moments in the ``data-source`` reply (issue 52, item 2: one exchange fewer).

A plain run that declares its ``feature-columns`` asks every site for its feature moments
in the ``data-source`` query (``strategies.features.moments_with_columns``) and sends no
``feature-moments`` exchange. Each test runs the same federation twice: as it runs now,
and with the merge switched off (``features._MERGE_MOMENTS``, the two exchanges it
replaces), and asserts the same model, scaling and history bit for bit, and the same
refusals.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from flwr.app import Array
from sklearn.datasets import load_wine, make_blobs

import flwr_clustering.strategies.features as features
from flwr_clustering import FederatedClustering
from flwr_clustering.clients import FedKMeansClient, client_app
from flwr_clustering.data.schema import FeatureTable, SchemaError
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid

WINE = load_wine(as_frame=True)


def _sites(n=3, seed=0, dates=False, holes=0.0):
    """Wine as ``n`` DataFrame sites, its columns in another order at site 1, an id."""
    frame = WINE.frame.drop(columns="target")
    rng = np.random.default_rng(seed)
    idx = np.array_split(rng.permutation(len(frame)), n)
    out = []
    for i, rows in enumerate(idx):
        site = frame.iloc[rows].reset_index(drop=True)
        if holes:
            for c in ("alcohol", "hue"):
                site.loc[rng.random(len(site)) < holes, c] = np.nan
        site.insert(0, "patient_id", np.arange(len(site)) + 1000 * (i + 1))
        if dates:
            site["visit"] = pd.Timestamp("2024-01-01") + pd.to_timedelta(
                rng.integers(0, 400, len(site)), unit="D")
        if i == 1:  # the columns in another order at one site
            site = site[list(reversed(site.columns))]
        out.append(site)
    return out


def _fit(monkeypatch, merge, frames, **params):
    monkeypatch.setattr(features, "_MERGE_MOMENTS", merge)
    return FederatedClustering("fkm", n_clusters=3, random_state=0, **params).fit(frames)


def _history(est):
    return [{k: v for k, v in h.items() if k != "seconds"} for h in est.history_]


def _phases(est):
    return [e["phase"] for e in est.strategy_.ledger]


DECLARED = ["proline", "alcohol", "hue", "color_intensity", "flavanoids"]


@pytest.mark.parametrize("params, sites", [
    ({}, {}),
    ({"scaling": "minmax"}, {}),
    ({"scaling": "none"}, {}),
    ({"missing": "mean"}, {"holes": 0.2}),
    ({"missing": "drop"}, {"holes": 0.1}),
    ({"robust_scaling": True}, {"n": 4}),
    ({"datetime_columns": ["visit"]}, {"dates": True}),
    ({"dtype": "float32"}, {}),
])
def test_the_merged_run_is_the_two_exchange_run_bit_for_bit(monkeypatch, params, sites):
    frames = _sites(**sites)
    if sites.get("n") == 4:  # one site's proline in other units: robust scaling's case
        frames[3]["proline"] = frames[3]["proline"] * 1e3
    declared = DECLARED + (["visit"] if sites.get("dates") else [])
    params = {"feature_columns": declared, "index_column": "patient_id", **params}
    merged = _fit(monkeypatch, True, frames, **params)
    two = _fit(monkeypatch, False, frames, **params)
    # one exchange fewer: the moments came with the columns
    assert "feature-moments" in _phases(two) and "feature-moments" not in _phases(merged)
    assert _phases(merged).count("data-source+feature-moments") == len(frames)
    assert "data-source+feature-moments" not in _phases(two)
    # the same model, scaling, labels, history and warnings, exactly
    assert merged.feature_transform_ == two.feature_transform_
    assert merged.feature_transform_.features == tuple(declared)
    np.testing.assert_array_equal(merged.cluster_centers_, two.cluster_centers_)
    assert merged.cluster_centers_.dtype == two.cluster_centers_.dtype
    for a, b in zip(merged.labels_, two.labels_, strict=True):
        np.testing.assert_array_equal(a, b)
    assert _history(merged) == _history(two)
    assert merged.metrics_ == two.metrics_ and merged.warnings_ == two.warnings_
    assert merged.strategy_.feature_summary == two.strategy_.feature_summary
    # what the server keeps of each site: its sums and rows (they bound its means later)
    assert merged.strategy_.rules.client_rows == two.strategy_.rules.client_rows
    assert merged.strategy_.rules.client_read_rows == two.strategy_.rules.client_read_rows
    for cid, sums in two.strategy_.client_sums.items():
        for a, b in zip(merged.strategy_.client_sums[cid], sums, strict=True):
            np.testing.assert_array_equal(a, b)
    # the ledger: the same floats per client (the moments, under data-source), one reply
    # fewer each
    m, t = (e.strategy_.privacy_ledger()["clients"] for e in (merged, two))
    assert {c: v["floats"] for c, v in m.items()} == {c: v["floats"] for c, v in t.items()}
    assert {c: v["replies"] + 1 for c, v in m.items()} == {c: v["replies"]
                                                           for c, v in t.items()}


def test_a_run_that_declares_no_columns_keeps_the_two_exchanges(monkeypatch):
    est = _fit(monkeypatch, True, [f[DECLARED] for f in _sites()])
    assert "feature-moments" in _phases(est)
    assert "data-source+feature-moments" not in _phases(est)


def test_a_categorical_run_keeps_the_moments_phase(monkeypatch):
    frames = _sites()
    for f in frames:
        f["grade"] = np.where(f["alcohol"] > 13, "high", "low")
    est = _fit(monkeypatch, True, frames, index_column="patient_id",
               feature_columns=DECLARED, categorical_columns=["grade"])
    assert "data-source+feature-moments" not in _phases(est)
    assert "feature-moments" in _phases(est) and "categories" in _phases(est)


@pytest.mark.parametrize("options, merges", [
    ({}, True),
    ({"scaling": None}, True),  # columns named, rows not scaled: the spread check's sums
    ({"feature_columns": None}, False),  # the features come from the sites' columns
    ({"categorical_columns": ("grade",)}, False),  # the levels are agreed first
    ({"secure_aggregation": True, "server_update": "lloyd"}, False),  # summed securely
    ({"dp_epsilon": 1.0, "server_update": "lloyd", "data_bound": 5.0, "scaling": "none",
      "missing": "drop"}, False),  # no sums at all
    ({"fraction": 0.5}, False),  # the phase's nodes are drawn from the sampling generator
    ({"index_column": "a"}, False),  # refused by the schema before any sum
    ({"feature_columns": ("a", "a")}, False),
    ({"datetime_columns": ("d",)}, False),  # a date column outside the features
    ({"missing": "partial"}, False),  # refused for the algorithm after the schema
])
def test_the_predicate(options, merges):
    kwargs = {"scaling": "standard", "feature_columns": ("a", "b"), **options}
    strategy = FedKMeans(3, min_nodes=2, seed=0, **kwargs)
    transform = features.moments_with_columns(strategy)
    assert (transform is not None) == merges
    config = features.data_source_config(strategy)
    assert ("moments-transform" in config) == merges
    if merges:
        assert transform.features == ("a", "b") and not transform.scaled
        assert config["scaling"] == (kwargs["scaling"] or "none")
        assert config["privacy-threshold"] == strategy.privacy_threshold


# --------------------------------------------------------------- the App, counted


def _app_run(monkeypatch, tmp_path, merge, name):
    from flwr_clustering.app.client_app import app
    from flwr_clustering.app.server_app import run_server
    from simulations.benchmarks.exchanges import _CountingGrid

    monkeypatch.setattr(features, "_MERGE_MOMENTS", merge)
    rc = {"algorithm": "fkm", "min-nodes": 3, "feature-columns": "1,0", "max-rounds": 3,
          "out-dir": str(tmp_path / name)}
    grid = _CountingGrid(app, 3, run_config=rc)
    return run_server(grid, rc), grid.exchanges


def test_the_app_sends_one_exchange_fewer_for_the_same_model(monkeypatch, tmp_path):
    import json

    merged, sent = _app_run(monkeypatch, tmp_path, True, "merged")
    two, sent_two = _app_run(monkeypatch, tmp_path, False, "two")
    before = [p for rnd, _, p in sent if rnd == 0]
    assert before == ["data-source"]
    assert [p for rnd, _, p in sent_two if rnd == 0] == ["data-source", "feature-moments"]
    assert len(sent) == len(sent_two) - 1
    assert [x for x in sent if x[0] > 0] == [x for x in sent_two if x[0] > 0]
    np.testing.assert_array_equal(merged["centroids"], two["centroids"])
    a, b = merged["strategy"], two["strategy"]
    assert a.feature_transform == b.feature_transform
    assert a.feature_transform.features == ("1", "0")
    assert ([{k: v for k, v in h.items() if k != "seconds"} for h in a.history]
            == [{k: v for k, v in h.items() if k != "seconds"} for h in b.history])
    assert merged["federated"] == two["federated"]
    # privacy.json lists the moments under data-source (the App's check, before the run)
    ledger = json.loads((tmp_path / "merged" / "privacy.json").read_text())
    carried = [m for m in ledger["messages"] if "feature-moments" in m["phase"]]
    assert [(m["round"], m["phase"], m["floats"]) for m in carried] == [
        (0, "data-source+feature-moments", 3 * 2 + 2)] * 3
    assert "feature-moments" not in {m["phase"] for m in ledger["messages"]}


# --------------------------------------------------------------- refusals, both ways


def _both(monkeypatch, frames, **params):
    """The outcome of the merged and the two-exchange run: each its result or error."""
    out = []
    for merge in (True, False):
        try:
            out.append(_fit(monkeypatch, merge, frames, **params))
        except Exception as ex:  # noqa: BLE001 - compared below
            out.append(ex)
    return out


def test_a_site_without_a_declared_column_is_refused_as_before(monkeypatch):
    frames = _sites()
    frames[2] = frames[2].drop(columns="hue")
    merged, two = _both(monkeypatch, frames, feature_columns=DECLARED,
                        index_column="patient_id")
    assert isinstance(merged, SchemaError) and str(merged) == str(two)
    assert "client 2 has no column 'hue'" in str(merged)


def test_unit_check_refuse_holds_on_the_merged_path(monkeypatch):
    frames = _sites()
    frames[2]["proline"] = frames[2]["proline"] * 1e-3
    merged, two = _both(monkeypatch, frames, feature_columns=DECLARED,
                        index_column="patient_id", unit_check="refuse")
    assert isinstance(merged, ValueError) and str(merged) == str(two)
    assert "unit-check='refuse': client 2's 'proline' is about 1/1000" in str(merged)


def test_a_site_under_the_privacy_threshold_withholds_its_sums_as_before(monkeypatch):
    """Site 2 has fewer rows than privacy-threshold: it sends no moments with its columns
    (the server asks in the feature-moments phase, where it withholds them as before)."""
    frames = _sites(n=2)
    frames.append(frames[1].iloc[:15].copy())
    merged, two = _both(monkeypatch, frames, feature_columns=DECLARED,
                        index_column="patient_id", privacy_threshold=20)
    # the other sites sent theirs with their columns; not every site did, so the server
    # asked in the feature-moments phase (the same sums again: the ledger lists both)
    assert [e["client"] for e in merged.strategy_.ledger
            if e["phase"] == "data-source+feature-moments"] == [0, 1]
    assert _phases(merged).count("feature-moments") == 2  # client 2's failed
    assert any("feature scaling without client 2" in w and "privacy threshold" in w
               for w in merged.warnings_)
    assert merged.feature_transform_ == two.feature_transform_
    np.testing.assert_array_equal(merged.cluster_centers_, two.cluster_centers_)
    assert _history(merged) == _history(two) and merged.warnings_ == two.warnings_


def test_a_site_whose_sums_overflow_fails_as_before(monkeypatch):
    """A column whose sum of squares overflows float64 at one site: no moments with its
    columns; the feature-moments phase names the column (never a value), as before."""
    frames = _sites()
    frames[1]["proline"] = frames[1]["proline"] * 1e160
    with pytest.warns(UserWarning, match="built without 1 of 3 clients"):
        merged, two = _both(monkeypatch, frames, feature_columns=DECLARED,
                            index_column="patient_id")
    assert [e["client"] for e in merged.strategy_.ledger
            if e["phase"] == "data-source+feature-moments"] == [0, 2]
    [text] = [w for w in merged.warnings_ if w.startswith("feature scaling without")]
    assert "client 1 (node 101) (failed: client 1: column 'proline': its sum of squares " \
           "overflows float64" in text and "e+16" not in text  # named, never its value
    assert merged.warnings_ == two.warnings_ and _history(merged) == _history(two)
    np.testing.assert_array_equal(merged.cluster_centers_, two.cluster_centers_)


# --------------------------------------------------------------- a hostile merged reply


HOSTILE, NODE = 1, 101


class _TamperDataSource(InProcessGrid):
    """Node ``NODE``'s ``data-source`` replies pass through ``tamper``."""

    def __init__(self, *args, tamper, **kwargs):
        super().__init__(*args, **kwargs)
        self.tamper, self.tampered = tamper, 0

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = super().send_and_receive(messages, timeout=timeout)
        if not any(dict(m.content["config"]).get("phase") == "data-source"
                   for m in messages):
            return replies
        out = []
        for r in replies:
            if r.metadata.src_node_id == NODE and not r.has_error() and "stats" in r.content:
                r = self.tamper(r)
                self.tampered += 1
            out.append(r)
        return out


def _blob_app(parts):
    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        client = FedKMeansClient(parts[i], client_id=i)
        client.feature_table = FeatureTable(parts[i], names=("a", "b", "c"))
        return client
    return client_app(client_fn)


def _stat(key, fn):
    def tamper(reply):
        a = reply.content["stats"][key].numpy().copy()
        reply.content["stats"][key] = Array(np.ascontiguousarray(fn(a)))
        return reply
    return tamper


@pytest.mark.parametrize("tamper, rule", [
    (_stat("moment-sumsq", lambda a: -a), "data-source: moment-sumsq is negative"),
    (_stat("moment-count", lambda a: np.full_like(a, 1e9)),
     "data-source: moment-count holds a count above the 150 rows the client declared"),
    (_stat("moment-sum", lambda a: a * np.nan),
     "data-source: moment-sum holds a value that is not finite"),
    (_stat("moment-rows", lambda a: a + np.r_[1.0, 0.0]),
     "data-source: moment-rows' rows read differ from the rows the client declared (in "
     "data-source, else its num-examples)"),
    (_stat("moment-count", lambda a: a[:2]),
     "data-source: moment-count has shape (2,), the contract (3,)"),
])
def test_a_hostile_merged_reply_breaks_the_contract_and_is_dropped(tamper, rule, caplog):
    X, _ = make_blobs(600, n_features=3, centers=3, random_state=0)
    parts = [X[i::4] * [1, 10, 100] for i in range(4)]
    grid = _TamperDataSource(_blob_app(parts), 4, tamper=tamper)
    strategy = FedKMeans(3, min_nodes=3, seed=0, max_rounds=3, tol=-1.0, split_check=False,
                         scaling="standard", feature_columns=("c", "a", "b"))
    with caplog.at_level(logging.WARNING):
        strategy.start(grid=grid)
    assert grid.tampered == 1
    dropped = [r.getMessage() for r in caplog.records
               if f"data-source: dropping reply of client {HOSTILE} (node {NODE})"
               in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].endswith(f"it broke the reply contract: {rule}")
    assert "1e+09" not in caplog.text and "1000000000" not in caplog.text
    # no moments of a dropped reply are used: the server asked in their own phase
    phases = [e["phase"] for e in strategy.ledger]
    assert phases.count("feature-moments") == 4
    assert strategy.feature_transform.features == ("c", "a", "b")
    assert [h["clients"] for h in strategy.history] == [4, 4, 4]


# --------------------------------------------------------------- the App on local files


def _files(tmp_path, frames):
    configs = []
    for i, frame in enumerate(frames):
        path = tmp_path / f"site{i}.csv"
        frame.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    return configs


_LOCAL = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3, "max-rounds": 3,
          "feature-columns": ",".join(DECLARED), "index-column": "patient_id",
          "missing": "drop"}


def test_local_files_give_the_same_model_with_one_exchange_fewer(monkeypatch, tmp_path):
    from flwr_clustering.testing import run_app

    configs = _files(tmp_path, _sites(holes=0.05))
    runs = {}
    for merge in (True, False):
        monkeypatch.setattr(features, "_MERGE_MOMENTS", merge)
        out, grid = run_app({**_LOCAL, "out-dir": str(tmp_path / f"run-{merge}")}, 3,
                            node_configs=configs)
        runs[merge] = out, [dict(m.content["config"]).get("phase") for m in grid.sent]
    (merged, sent), (two, sent_two) = runs[True], runs[False]
    assert sent_two.count("feature-moments") == 3 and "feature-moments" not in sent
    assert len(sent) == len(sent_two) - 3  # one message per node fewer
    np.testing.assert_array_equal(merged["centroids"], two["centroids"])
    assert merged["strategy"].feature_transform == two["strategy"].feature_transform
    assert merged["federated"] == two["federated"]


def test_a_refused_run_lists_the_sums_it_received_in_its_ledger(monkeypatch, tmp_path):
    """Site 2's file lacks a declared column: the run is refused at the schema, after the
    other sites sent their sums with their columns; privacy.json says so."""
    import json

    from flwr_clustering.testing import run_app

    frames = _sites()
    frames[2] = frames[2].drop(columns="hue")
    configs = _files(tmp_path, frames)
    monkeypatch.setattr(features, "_MERGE_MOMENTS", True)
    with pytest.raises(SchemaError, match="client 2 has no column 'hue'"):
        run_app({**_LOCAL, "out-dir": str(tmp_path / "refused")}, 3, node_configs=configs)
    ledger = json.loads((tmp_path / "refused" / "privacy.json").read_text())
    assert [(m["client"], m["phase"], m["floats"]) for m in ledger["messages"]
            if "feature-moments" in m["phase"]] == [(0, "data-source+feature-moments", 17),
                                                    (1, "data-source+feature-moments", 17)]
