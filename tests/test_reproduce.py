"""The reproduction command (``python -m simulations reproduce | list | bench``), spec 002 §5."""

import json
import sys
import types

import numpy as np
import pytest

from simulations.cli import main
from simulations.framework import (
    ROW_KEYS,
    run_experiment,
    summarize,
)

FAST = ["--runs", "2", "--rounds", "3"]


def _rows(path, runs=2):
    rows = json.loads(path.read_text())
    assert isinstance(rows, list) and rows
    for row in rows:
        assert tuple(row)[: len(ROW_KEYS)] == ROW_KEYS
        assert isinstance(row["ours_mean"], float) and isinstance(row["ours_std"], float)
        assert row["paper"] is None or isinstance(row["paper"], float)
        assert row["runs"] == runs
        assert len(row["scores"]) == runs
    return rows


def _cell(rows, method, setting):
    (row,) = [r for r in rows if r["method"] == method and r["setting"] == setting]
    return row


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("garst-fig1b", "garst-noise", "garst-clusterwise"):
        assert name in out


def test_reproduce_fig1b(tmp_path):
    assert main(["reproduce", "garst-fig1b", *FAST, "--out", str(tmp_path), "-q"]) == 0
    rows = _rows(tmp_path / "garst-fig1b.json")
    assert {r["experiment"] for r in rows} == {"garst-fig1b"}
    assert {r["setting"] for r in rows} == {"beta=0.1", "beta=1", "beta=10"}
    assert {r["method"] for r in rows} == {"central", "fkm", "fkm-paper-code", "kfed"}
    assert len(rows) == 12
    metrics = {r["method"]: r["metric"] for r in rows}
    assert metrics["central"] == "ari" and metrics["fkm"] == metrics["kfed"] == (
        "ari-client-weighted"
    )
    paper = {(r["method"], r["setting"]): r["paper"] for r in rows}
    assert paper[("fkm", "beta=0.1")] == 0.949
    assert paper[("fkm", "beta=1")] == 0.958
    assert paper[("fkm", "beta=10")] == 0.957
    assert paper[("kfed", "beta=0.1")] == 0.643
    assert paper[("kfed", "beta=10")] == 0.841
    assert paper[("central", "beta=1")] == 0.955
    fkm = _cell(rows, "fkm", "beta=1")
    assert fkm["rounds"] == 3 and 1 <= fkm["rounds_mean"] <= 3
    assert set(fkm["ours_by_round"]) <= {"1", "2", "3"}
    assert fkm["paper_by_round"]["100"] == 0.958
    for row in rows:
        assert 0.3 < row["ours_mean"] <= 1.0
    md = (tmp_path / "garst-fig1b.md").read_text()
    for number in ("0.949", "0.958", "0.957", "0.643", "0.735", "0.841", "0.955"):
        assert number in md
    assert "init" in md and "raw" in md  # the paper uploaded raw seeds at init
    assert (tmp_path / "garst-fig1b.png").stat().st_size > 0
    assert (tmp_path / "garst-fig1b-rounds.png").stat().st_size > 0


def test_reproduce_noise(tmp_path):
    # one run per cell: 18 settings x 4 methods
    assert main(["reproduce", "garst-noise", "--runs", "1", "--rounds", "3", "--out",
                 str(tmp_path), "-q", "--no-plot"]) == 0
    rows = _rows(tmp_path / "garst-noise.json", runs=1)
    settings = {f"beta={b},noise={n}" for b in ("0.1", "1", "10")
                for n in ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5")}
    assert {r["setting"] for r in rows} == settings
    assert {r["method"] for r in rows} == {"central", "fkm", "fkm-paper-code", "kfed"}
    assert len(rows) == 72
    assert all(r["paper"] is not None for r in rows)
    paper = {(r["method"], r["setting"]): r["paper"] for r in rows}
    assert paper[("fkm", "beta=0.1,noise=1.5")] == 0.697
    assert paper[("central", "beta=10,noise=1.3")] == 0.840
    assert paper[("kfed", "beta=1,noise=1.2")] == 0.650
    assert _cell(rows, "fkm", "beta=0.1,noise=1.5")["paper_std"] == 0.016
    md = (tmp_path / "garst-noise.md").read_text()
    for number in ("0.697", "0.432", "0.607", "0.725"):
        assert number in md
    assert not (tmp_path / "garst-noise.png").exists()


def test_reproduce_clusterwise(tmp_path):
    assert main(["reproduce", "garst-clusterwise", *FAST, "--out", str(tmp_path), "-q"]) == 0
    rows = _rows(tmp_path / "garst-clusterwise.json")
    assert {r["setting"] for r in rows} == {"cluster-wise"}
    assert {r["method"] for r in rows} == {
        "central", "fkm", "fkm-unweighted", "fkm-paper-code", "kfed"
    }
    assert _cell(rows, "fkm", "cluster-wise")["options"]["seeding"] == "weighted"
    assert _cell(rows, "fkm-unweighted", "cluster-wise")["options"]["seeding"] == "unweighted"
    assert _cell(rows, "kfed", "cluster-wise")["options"]["k_local"] == 14
    fkm = _cell(rows, "fkm", "cluster-wise")
    assert fkm["paper"] == 0.902 and fkm["paper_median"] == 0.949
    assert fkm["paper_frac_below"] == 0.465 and 0.0 <= fkm["ours_frac_below"] <= 1.0
    assert fkm["ours_median"] is not None
    # exactly R rounds by default here (the paper's unweighted seeding can jump late)
    assert fkm["tol"] < 0 and fkm["rounds_mean"] == 3
    md = (tmp_path / "garst-clusterwise.md").read_text()
    for number in ("0.902", "0.949", "0.863", "0.952", "46.5%", "median"):
        assert number in md
    assert (tmp_path / "garst-clusterwise.png").exists()


def test_unknown_experiment_exits_with_message(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "garst-nope", "--out", str(tmp_path)])
    assert exc.value.code != 0
    err = capsys.readouterr().err
    assert "garst-nope" in err and "garst-fig1b" in err
    assert not list(tmp_path.iterdir())


def test_unknown_method_and_bad_runs_exit(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "garst-fig1b", "--methods", "kmedoids", "--out", str(tmp_path)])
    assert exc.value.code != 0
    assert "kmedoids" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["reproduce", "garst-fig1b", "--runs", "0"])
    with pytest.raises(ValueError, match="unknown experiment"):
        run_experiment("nope")


def test_bench_dispatch(monkeypatch, capsys):
    seen = []
    fake = types.ModuleType("simulations.benchmarks.bench")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "simulations.benchmarks.bench", fake)
    assert main(["bench", "client-step", "--out", "x"]) == 0
    assert seen == [["client-step", "--out", "x"]]
    monkeypatch.setitem(sys.modules, "simulations.benchmarks.bench", None)
    assert main(["bench", "rounds"]) == 2
    assert "bench" in capsys.readouterr().err


def test_seeded():
    kwargs = dict(runs=2, rounds=3, methods=["central", "fkm"], settings=["beta=10"])
    a = run_experiment("garst-fig1b", **kwargs)
    b = run_experiment("garst-fig1b", **kwargs)
    for key in a:
        assert [o.score for o in a[key]] == [o.score for o in b[key]]
    c = run_experiment("garst-fig1b", **kwargs, seed=1)
    # run r uses seed + r: seed=1's first run is seed=0's second run
    assert c[("fkm", "beta=10")][0].score == a[("fkm", "beta=10")][1].score


@pytest.mark.slow
def test_independent_of_jobs():
    """Worker processes (spawned: a few seconds of imports each) change nothing."""
    kwargs = dict(runs=3, rounds=3, methods=["central", "fkm", "kfed"], settings=["beta=10"])
    a = run_experiment("garst-fig1b", **kwargs)
    b = run_experiment("garst-fig1b", **kwargs, jobs=2)
    for key in a:
        assert [o.score for o in a[key]] == [o.score for o in b[key]]


@pytest.mark.slow
def test_fig1b_reproduces_the_paper():
    """Fig. 1(b) with 100 runs per setting: FKM, k-FED and central against the paper.

    Tolerances: FKM within 0.02 of the paper's means (0.949 / 0.958 / 0.957) and of central,
    k-FED within 0.05 of (0.643 / 0.735 / 0.841).

    Run count from the measured spread (200 runs, seeds 0..199): FKM's std is <= 0.01, so
    its standard error with 100 runs is <= 0.001, far inside 0.02. k-FED's std is 0.06-0.07
    and its 200-run means are 0.664 / 0.723 / 0.844, i.e. 0.021 / 0.012 / 0.003 from the
    paper, so the binding case is beta = 0.1 with a margin of 0.029 to the 0.05 tolerance.
    With 100 runs the standard error is 0.07 / 10 = 0.007, so the margin is about 4 standard
    errors: a change of seeds, platform or library version that only reshuffles the random
    draws fails with probability < 1e-4. (The paper's k-FED boxes come from another split of
    the same points; on our split the paper's k-FED means are 0.690 / 0.729 / 0.852, within
    0.03 of ours.) Takes about 30 s on two busy cores.
    """
    results = run_experiment("garst-fig1b", runs=100, methods=["central", "fkm", "kfed"])
    rows = summarize("garst-fig1b", results, rounds=100, tol=1e-6, seed=0)
    mean = {(r["method"], r["setting"]): r["ours_mean"] for r in rows}
    paper = {(r["method"], r["setting"]): r["paper"] for r in rows}
    for setting in ("beta=0.1", "beta=1", "beta=10"):
        fkm, kfed, central = (mean[(m, setting)] for m in ("fkm", "kfed", "central"))
        assert abs(fkm - paper[("fkm", setting)]) <= 0.02, (setting, fkm)
        assert abs(fkm - central) <= 0.02, (setting, fkm, central)
        assert abs(kfed - paper[("kfed", setting)]) <= 0.05, (setting, kfed)
        assert abs(central - 0.955) <= 0.02, (setting, central)
        assert fkm > kfed
    # k-FED degrades as the split gets less IID; FKM does not
    assert mean[("kfed", "beta=0.1")] < mean[("kfed", "beta=1")] < mean[("kfed", "beta=10")]
    spread = np.ptp([mean[("fkm", s)] for s in ("beta=0.1", "beta=1", "beta=10")])
    assert spread < 0.02


# ------------------------------------------------------------------ Xu et al. (spec 001)


def test_reproduce_feca_ablation_cli(tmp_path):
    assert main(["reproduce", "feca-ablation", "--runs", "2", "--out", str(tmp_path), "-q"]) == 0
    rows = _rows(tmp_path / "feca-ablation.json")
    assert {r["metric"] for r in rows} == {"mse/1e6", "l2/1e4", "k-out"}
    assert {r["setting"] for r in rows} == {"S1 IID", "S1 Dir(0.3)", "S1 Dir(0.1)"}
    assert len(rows) == 3 * 5 * 3
    paper = {(r["method"], r["setting"], r["metric"]): r["paper"] for r in rows}
    assert paper[("feca", "S1 IID", "mse/1e6")] == 6.7
    assert paper[("feca-no-elimination", "S1 IID", "mse/1e6")] == 12977.2
    assert paper[("feca-theoretical", "S1 Dir(0.1)", "l2/1e4")] == 58.9
    # MSE = l2^2 / k for 15 matched centres, run by run (spec §8 item 12)
    by = {(r["method"], r["setting"], r["metric"]): r for r in rows}
    for setting in ("S1 IID", "S1 Dir(0.3)"):
        l2 = np.array(by[("feca", setting, "l2/1e4")]["scores"])
        mse = np.array(by[("feca", setting, "mse/1e6")]["scores"])
        np.testing.assert_allclose(mse, (l2 * 1e4) ** 2 / 15 / 1e6, rtol=1e-12)
    checks = json.loads((tmp_path / "feca-ablation.checks.json").read_text())
    assert len(checks) == 6 and all(isinstance(c["holds"], bool) for c in checks)
    md = (tmp_path / "feca-ablation.md").read_text()
    assert "## mse/1e6" in md and "(6.700)" in md and "The paper's claims" in md


def test_feca_scorer_on_the_true_centres():
    from simulations.feca import centroid_scores, sset_federated

    data = sset_federated(1, "Dir(0.3)", seed=3)
    assert data.n_clients == 10 and len(data.X) == 5000
    scores = centroid_scores(data, data.centers, 15)
    assert scores["l2/1e4"] == 0.0 and scores["mse/1e6"] == 0.0 and scores["k-out"] == 15
    assert scores["purity"] > 0.98 and scores["nmi"] > 0.95  # S1: ~99 % nearest-centre
    # Drop a centre and move another: l2 counts the 14 matched pairs only.
    est = data.centers[1:].copy()
    est[0] += [3e4, 4e4]
    scores = centroid_scores(data, est, 15)
    assert scores["l2/1e4"] == pytest.approx(5.0) and scores["k-out"] == 14
    assert scores["mse/1e6"] == pytest.approx(5e4**2 / 14 / 1e6)


@pytest.mark.slow
def test_feca_s1_reproduces_the_paper():
    """S1 look-alike, 10 runs (the paper's count): FeCA's Table 1/4/5/9 numbers on S1 IID.

    Tolerances from the paper's spread: FeCA's ℓ2 ÷1e4 within 0.3 of 1.0 (paper std 0.1;
    ours 1.09 ± 0.1 measured, seeds 0-9) and M-Avg's within two paper standard deviations
    (7.2 ± 4.3; ours 12.0); purity within 0.03 of 0.99 (ours 0.992). Table 5's claim
    "orders of magnitude" as MSE without elimination >= 100x with it (ours x214, the
    paper's x1937). Table 9's flatness on the medians over M = 2, 5, 10, 20 (a single
    failed run of ten moves a mean; ours 0.86-1.23). About 20 s.
    """
    rows = summarize("feca-table1", run_experiment(
        "feca-table1", runs=10, settings=["S1 IID"], methods=["feca", "mavg", "kfed-k5"]),
        rounds=1, tol=0, seed=0)
    cell = {(r["method"], r["metric"]): r for r in rows}
    assert abs(cell[("feca", "l2/1e4")]["ours_mean"] - 1.0) <= 0.3
    assert abs(cell[("mavg", "l2/1e4")]["ours_mean"] - 7.2) <= 2 * 4.3
    assert cell[("feca", "l2/1e4")]["ours_mean"] < cell[("mavg", "l2/1e4")]["ours_mean"]
    assert cell[("feca", "l2/1e4")]["ours_mean"] < cell[("kfed-k5", "l2/1e4")]["ours_mean"]

    rows = summarize("feca-table4", run_experiment(
        "feca-table4", runs=10, settings=["S1 IID"], methods=["feca"]), rounds=1, tol=0, seed=0)
    (purity,) = [r for r in rows if r["metric"] == "purity"]
    assert abs(purity["ours_mean"] - 0.99) <= 0.03

    rows = summarize("feca-ablation", run_experiment(
        "feca-ablation", runs=10, settings=["S1 IID"],
        methods=["feca", "feca-no-elimination"]), rounds=1, tol=0, seed=0)
    mse = {r["method"]: r["ours_mean"] for r in rows if r["metric"] == "mse/1e6"}
    assert mse["feca-no-elimination"] >= 100 * mse["feca"]

    settings = ["M=2", "M=5", "M=10", "M=20"]
    rows = summarize("feca-clients", run_experiment(
        "feca-clients", runs=10, settings=settings, methods=["feca"]), rounds=1, tol=0, seed=0)
    medians = [r["ours_median"] for r in rows if r["metric"] == "l2/1e4"]
    assert len(medians) == 4 and max(medians) <= 1.5 * min(medians)
