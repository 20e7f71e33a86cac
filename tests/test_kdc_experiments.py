"""Reproduction commands kdc-equivalence, kdc-shapes, kdc-runtime (spec 004 §5, §6, §8):
registration, the splits, the scoring by hand, exact distributed = centralized on reduced runs,
the timed protocol, and checks that fail on failing rows."""

import json
import math

import numpy as np
import pytest

from flwr_clustering.algorithms.kdc import run_kdc
from simulations.cli import main
from simulations.framework import (
    EXPERIMENTS,
    ROW_KEYS,
    run_experiment,
    summarize,
)
from simulations.kdc import (
    KDCData,
    clustering_scores,
    kdc_federation,
    load_dataset,
    sample_size,
    score_coreset,
    score_equivalence,
    score_kdc,
    score_kmeans,
    score_runtime_coreset,
    score_runtime_kdc,
    score_runtime_kmeans,
    split_sites,
    timed_kdc,
)

NAMES = ("kdc-equivalence", "kdc-shapes", "kdc-runtime")


def test_registered_and_listed(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out
        exp = EXPERIMENTS[name]
        assert exp.per_run_data and exp.checks is not None and exp.metrics
        assert not exp.paper  # no cell has a paper value (other data)
    eq = EXPERIMENTS["kdc-equivalence"]
    assert len(eq.settings) == 12 and eq.metrics[0] == "agreement"
    assert {s.params["how"] for s in eq.settings} == {"even", "unbalanced", "by-cluster"}
    assert {s.params["r"] for s in eq.settings} == {2, 20}
    assert [m.name for m in eq.methods] == ["kdc-kbcc", "kdc-kkm", "kdc-kbcc-inne"]
    shapes = EXPERIMENTS["kdc-shapes"]
    assert [s.label for s in shapes.settings] == ["moons", "circles", "aniso", "varied", "digits"]
    assert {"kdc-kbcc", "kdc-kkm", "coreset-km", "kmeans"} <= {m.name for m in shapes.methods}
    rt = EXPERIMENTS["kdc-runtime"]
    assert [s.params["n"] for s in rt.settings] == [10**4, 10**5, 10**6]
    assert rt.metrics[0] == "seconds" and "speedup" in rt.metrics


def test_splits_and_loader():
    y = np.repeat([0, 1, 2], [40, 35, 25])
    rng = np.random.default_rng(0)
    even = split_sites(y, 20, "even", rng)
    assert sorted(np.concatenate(even).tolist()) == list(range(100))
    assert {len(p) for p in even} == {5}
    uneven = split_sites(y, 20, "unbalanced", rng)
    assert len(uneven[0]) == 50 and sum(len(p) for p in uneven[1:]) == 50
    assert sorted(np.concatenate(uneven).tolist()) == list(range(100))
    assert max(len(p) for p in uneven[1:]) - min(len(p) for p in uneven[1:]) <= 1
    by = split_sites(y, 20, "by-cluster", rng)
    assert sorted(np.concatenate(by).tolist()) == list(range(100))
    assert [int(np.unique(y[p])[0]) for p in by] == [i % 3 for i in range(20)]
    assert all(len(np.unique(y[p])) == 1 for p in by)
    with pytest.raises(ValueError, match="r >= k"):
        split_sites(y, 2, "by-cluster", rng)
    with pytest.raises(ValueError):
        split_sites(y, 4, "sorted", rng)

    d = kdc_federation("aniso", "by-cluster", 20, n=300, seed=3)
    X, y = load_dataset("aniso", 300, 3)
    assert isinstance(d, KDCData) and d.n_classes == 3 and d.n_clients == 20
    assert np.array_equal(np.sort(d.X, axis=0), np.sort(X, axis=0))
    assert np.array_equal(np.concatenate(d.clients), d.X)  # rows grouped by site, in order
    assert all(len(np.unique(y_i)) == 1 for y_i in d.labels)
    assert [len(X_i) for X_i in kdc_federation("moons", "unbalanced", 20, n=300).clients][0] == 150
    assert kdc_federation("digits", "even", 2).X.shape == (1797, 64)
    assert sample_size(1500, "0.3n") == 450 and sample_size(1797, "0.3n") == 539
    assert sample_size(1500, "min(n,10000)") == 1500
    assert sample_size(10**6, "min(n,10000)") == 10_000


def test_clustering_scores_by_hand():
    y = np.array([0, 0, 1, 1])
    assert clustering_scores(y, np.array([1, 1, 0, 0])) == {"nmi": 1.0, "ari": 1.0}
    s = clustering_scores(y, np.array([0, 1, 0, 1]))  # independent of the truth
    assert s["nmi"] == pytest.approx(0.0, abs=1e-12) and s["ari"] == pytest.approx(-0.5)
    # two far-apart blobs over 4 sites: every baseline recovers them exactly
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 0.1, (40, 2)), rng.normal(10, 0.1, (40, 2))])
    y = np.repeat([0, 1], 40)
    d = KDCData(X, y, np.repeat(np.arange(4), 20), n_classes=2)  # sites 0-1 blob 0, 2-3 blob 1
    for score in (score_kmeans(d, seed=1), score_coreset(d, seed=1),
                  score_kdc(d, seed=1, psi=8, tau=0.5)):
        assert score["nmi"] == pytest.approx(1.0) and score["ari"] == pytest.approx(1.0)
    assert math.isnan(score_kmeans(d)["psi"])


def test_equivalence_is_exact_on_reduced_settings():
    for how, r in (("by-cluster", 20), ("unbalanced", 5), ("even", 2)):
        d = kdc_federation("moons", how, r, n=400, seed=1)
        for step2, variant in (("kbcc", "anne"), ("kernel-kmeans", "anne"), ("kbcc", "inne")):
            s = score_equivalence(d, seed=1, step2=step2, variant=variant, psi=16, tau=0.5)
            assert s["agreement"] == 1.0, (how, step2, variant)
            assert s["nmi-distributed"] == s["nmi-central"]
            assert s["upload-rows"] == 120
        if how == "unbalanced":
            assert s["upload-largest-site"] == 60  # the half-site uploads half of B
    # label-free parameters, through the runner: rows, the check holds
    rows = summarize("kdc-equivalence", run_experiment(
        "kdc-equivalence", runs=1, settings=["aniso by-cluster r=20"], methods=["kdc-kbcc"]),
        rounds=1, tol=0, seed=0)
    assert [r["metric"] for r in rows] == list(EXPERIMENTS["kdc-equivalence"].metrics)
    for row in rows:
        assert tuple(row)[: len(ROW_KEYS)] == ROW_KEYS and row["paper"] is None
    by = {r["metric"]: r["ours_mean"] for r in rows}
    assert by["agreement"] == 1.0 and by["upload-rows"] == 450 and by["psi"] in (4, 8, 16, 32, 64)
    (check,) = EXPERIMENTS["kdc-equivalence"].checks(rows)
    assert check["holds"], check


def test_timed_protocol_is_run_kdc():
    d = kdc_federation("moons", "unbalanced", 4, n=1200, seed=2)
    run = timed_kdc(d.clients, 2, s=300, psi=16, tau=0.5, seed=2)
    ref = run_kdc(d.clients, 2, s=300, psi=16, tau=0.5, seed=2, auto=False)
    assert np.array_equal(run["B"], ref.B)
    for a, b in zip(run["labels"], ref.labels, strict=True):
        assert np.array_equal(a, b)
    assert run["coordinator"] > 0 and min(run["assign"]) > 0
    assert run["distributed"] == pytest.approx(
        max(run["stats"]) + max(run["sample"]) + run["coordinator"] + max(run["assign"]))
    assert run["largest-site"] < run["distributed"]


def test_runtime_scorers_on_a_tiny_n():
    d = kdc_federation("moons", "even", 4, n=2000, seed=0)
    dist = score_runtime_kdc(d, seed=0)
    cen = score_runtime_kdc(d, seed=0, role="central")  # the same timed run, cached
    assert dist["seconds"] > 0 and cen["seconds"] > 0 and dist["site-seconds"] > 0
    assert dist["speedup"] == pytest.approx(cen["seconds"] / dist["seconds"])
    assert dist["agreement"] == 1.0 and cen["nmi"] == dist["nmi"] > 0.9
    assert math.isnan(cen["speedup"])
    d1 = kdc_federation("moons", "even", 4, n=2000, seed=1)  # odd seed: central timed first
    assert score_runtime_kdc(d1, seed=1)["agreement"] == 1.0
    for score in (score_runtime_kmeans(d, seed=0), score_runtime_coreset(d, seed=0)):
        assert score["seconds"] > 0 and 0 <= score["nmi"] <= 1
        assert math.isnan(score["speedup"])
    with pytest.raises(ValueError):
        score_runtime_kdc(d, role="site")


def _row(method, setting, metric, mean, scores=None):
    return {"method": method, "setting": setting, "metric": metric, "ours_mean": mean,
            "scores": [mean] if scores is None else scores, "runs": 1}


def test_checks_flag_failures():
    eq = EXPERIMENTS["kdc-equivalence"]
    rows = [_row("kdc-kbcc", "moons even r=2", "agreement", 1.0, [1.0, 1.0]),
            _row("kdc-kbcc", "moons even r=20", "agreement", 0.9995, [1.0, 0.999])]
    (check,) = eq.checks(rows)
    assert not check["holds"] and "moons even r=20: min 0.999000 (1 of 2 runs" in check["detail"]
    rows[1]["scores"] = [1.0, float("nan")]  # no parameters found: not a pass
    assert not eq.checks(rows)[0]["holds"]
    rows[1]["scores"] = [1.0, 1.0]
    assert eq.checks(rows)[0]["holds"]

    shapes = EXPERIMENTS["kdc-shapes"]
    rows = [_row("kdc-kbcc", "moons", "nmi", 0.6), _row("kmeans", "moons", "nmi", 0.7),
            _row("coreset-km", "moons", "nmi", 0.4), _row("kdc-kkm", "moons", "nmi", 0.3)]
    beats, kkm = shapes.checks(rows)
    assert not beats["holds"] and "kmeans 0.700 (-0.100)" in beats["detail"]
    assert kkm["holds"]
    rows[0]["ours_mean"] = float("nan")  # every run failed: the check fails
    assert not any(c["holds"] for c in shapes.checks(rows))
    rows[0]["ours_mean"] = 0.8
    assert all(c["holds"] for c in shapes.checks(rows))

    rt = EXPERIMENTS["kdc-runtime"]
    rows = [_row("kdc-kbcc", "n=10^5", "speedup", 1.1, [1.3, 0.9]),
            _row("kdc-kbcc", "n=10^5", "seconds", 2.0),
            _row("kdc-kbcc", "n=10^5", "site-seconds", 3.0),
            _row("kdc-kbcc-central", "n=10^5", "seconds", 2.2),
            _row("kdc-kbcc", "n=10^5", "agreement", 1.0, [1.0, 1.0]),
            _row("kdc-kbcc", "n=10^4", "speedup", 0.5)]  # n < 10^5: no (b) check
    checks = rt.checks(rows)
    assert [c["holds"] for c in checks] == [False, False, True]
    assert "runs 0.90-1.30" in checks[0]["detail"]
    # Fig. 7: super-linear growth and a k-means faster than the distributed KDC both fail
    rows = [_row("kdc-kbcc", "n=10^4", "seconds", 1.0), _row("kdc-kbcc", "n=10^6", "seconds", 500.0),
            _row("kmeans", "n=10^6", "seconds", 2.0)]
    slope, kmeans = rt.checks(rows)
    assert not slope["holds"] and "slope 1.35" in slope["detail"]
    assert not kmeans["holds"] and "250.0x" in kmeans["detail"]
    rows[1]["ours_mean"] = 1.5
    assert all(c["holds"] for c in rt.checks(rows))


def test_shapes_through_the_command(tmp_path):
    assert main(["reproduce", "kdc-shapes", "--runs", "1", "--methods", "kdc-kbcc", "kmeans",
                 "--out", str(tmp_path), "-q", "--no-plot"]) == 0
    rows = json.loads((tmp_path / "kdc-shapes.json").read_text())
    assert len(rows) == 5 * 2 * 4
    nmi = {(r["setting"], r["method"]): r["ours_mean"] for r in rows if r["metric"] == "nmi"}
    for s in ("moons", "circles"):  # non-convex: far above k-means
        assert nmi[(s, "kdc-kbcc")] > nmi[(s, "kmeans")] + 0.3
    checks = json.loads((tmp_path / "kdc-shapes.checks.json").read_text())
    assert len(checks) == 5  # no kernel k-means or coreset rows: one check per set
    md = (tmp_path / "kdc-shapes.md").read_text()
    assert "## nmi" in md and "| kdc-kbcc |" in md and "The paper's claims" in md
