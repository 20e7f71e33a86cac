"""``robust-scaling``: one site's consistent but extreme moments cannot set a feature's scale.

A ``feature-moments`` reply that passes every consistency check (a sum of squares at
least ``sum**2 / count``) can still carry a site's rows as if multiplied by 1e6 on one
feature: the plain scaling then divides that feature by about 1e6 and the clusters lose
it. ``robust_moments`` sets such a site aside per feature (its rows' deviation from the
sites' median mean over 10x the median site's) and scales with the other sites' sums.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.metrics import adjusted_rand_score

import flwr_clustering.clients.phases as client_phases
from flwr_clustering import FederatedClustering, registry
from flwr_clustering.data.registry import split_arrays
from flwr_clustering.data.schema import (
    ROBUST_SCALE_FACTOR,
    column_moments,
    robust_moments,
    robust_scaling_warnings,
    scaling_from_moments,
)
from flwr_clustering.strategies.features import FeatureOptions

SUMS = ("count", "sum", "sumsq")


def _sums(parts):
    return {f"client {i}": tuple(column_moments(p)[k] for k in SUMS)
            for i, p in enumerate(parts)}


def _plain(sites):
    return tuple(np.sum([s[i] for s in sites.values()], axis=0) for i in range(3))


def _poisoned(sites, site, feature, factor):
    """``site``'s sums as if its rows were multiplied by ``factor`` on ``feature``."""
    out = dict(sites)
    count, total, sumsq = (np.array(a, dtype=np.float64) for a in sites[site])
    total[feature] *= factor
    sumsq[feature] *= factor * factor
    out[site] = (count, total, sumsq)
    return out


def _iid(X, n, seed=0):
    return np.array_split(X[np.random.default_rng(seed).permutation(len(X))], n)


def test_identical_sites_give_the_plain_sums_exactly():
    X = load_wine().data[:40]
    sites = _sums([X] * 5)
    found = robust_moments(sites)
    count, total, sumsq = _plain(sites)
    assert found.set_aside == {} and found.unchecked == ()
    np.testing.assert_array_equal(found.total, total)
    np.testing.assert_array_equal(found.sumsq, sumsq)


def test_one_extreme_site_of_five_is_ignored_entirely_whatever_its_size():
    """The result is the other four sites' mean and variance, the same for a site 1e3 or
    1e6 times off (a median of five sites does not move with one of them)."""
    X, _ = load_iris(return_X_y=True)
    sites = _sums(_iid(X, 5))
    others = {s: v for s, v in sites.items() if s != "client 2"}
    c4, t4, q4 = _plain(others)
    count = _plain(sites)[0]
    results = []
    for factor in (1e3, 1e6, -1e6):
        found = robust_moments(_poisoned(sites, "client 2", 2, factor))
        assert list(found.set_aside) == ["client 2"] and list(found.set_aside["client 2"]) == [2]
        assert found.set_aside["client 2"][2] > ROBUST_SCALE_FACTOR
        centre, scale = scaling_from_moments("standard", count, found.total, found.sumsq)
        results.append((centre, scale))
        want = scaling_from_moments("standard", c4, t4, q4)
        np.testing.assert_allclose(centre[2], want[0][2], rtol=1e-12)
        np.testing.assert_allclose(scale[2], want[1][2], rtol=1e-12)
        # the other features keep the plain sums of all five sites
        plain = _plain(sites)
        keep = [0, 1, 3]
        np.testing.assert_array_equal(found.total[keep], plain[1][keep])
        np.testing.assert_array_equal(found.sumsq[keep], plain[2][keep])
    for centre, scale in results[1:]:
        np.testing.assert_allclose(centre, results[0][0], rtol=1e-12)
        np.testing.assert_allclose(scale, results[0][1], rtol=1e-12)


def test_a_site_claiming_tight_rows_and_many_cannot_shrink_the_scale_past_the_floor():
    X, _ = load_iris(return_X_y=True)
    sites = _sums(_iid(X, 5))
    count, total, sumsq = (np.array(a, dtype=np.float64) for a in sites["client 0"])
    centre = np.median([s[1] / s[0] for s in sites.values()], axis=0)
    many = 1e9
    sites["client 0"] = (np.full(4, many), centre * many, centre * centre * many)
    plain_scale = scaling_from_moments("standard", *_plain(sites))[1]
    found = robust_moments(sites)
    assert found.set_aside == {}  # not wide: nothing to set aside ...
    n = _plain(sites)[0]
    scale = scaling_from_moments("standard", n, found.total, found.sumsq)[1]
    r = [np.sqrt(np.maximum(s[2] / s[0] - (s[1] / s[0]) ** 2, 0) + (s[1] / s[0] - centre) ** 2)
         for s in sites.values()]
    floor = np.median(r, axis=0) / ROBUST_SCALE_FACTOR
    assert (plain_scale < floor).all()  # ... but the plain scale collapses
    np.testing.assert_allclose(scale, floor, rtol=1e-9)  # ... and the robust one stops


def test_one_hot_features_keep_the_plain_sums():
    X, _ = load_iris(return_X_y=True)
    sites = _poisoned(_sums(_iid(X, 5)), "client 1", 3, 1e6)
    found = robust_moments(sites, checked=3)
    assert found.set_aside == {}
    np.testing.assert_array_equal(found.sumsq, _plain(sites)[2])


def test_fewer_than_three_sites_fall_back_to_the_plain_sums_with_a_warning():
    X, _ = load_iris(return_X_y=True)
    sites = _poisoned(_sums(_iid(X, 2)), "client 1", 0, 1e6)
    found = robust_moments(sites)
    assert found.set_aside == {} and found.unchecked == (0, 1, 2, 3)
    np.testing.assert_array_equal(found.sumsq, _plain(sites)[2])
    [text] = robust_scaling_warnings(found, ["a", "b", "c", "d"], 2)
    assert text.startswith("robust-scaling: 2 sites sent feature sums; a median of sites "
                           "needs 3 or more, so the scaling is the plain one")
    # a feature observed at two sites only, among five
    sites = _sums(_iid(X, 5))
    for s in ("client 0", "client 1", "client 2"):
        c, t, q = (np.array(a) for a in sites[s])
        c[1] = t[1] = q[1] = 0.0
        sites[s] = (c, t, q)
    found = robust_moments(sites)
    assert found.unchecked == (1,)
    assert robust_scaling_warnings(found, ["a", "b", "c", "d"], 5) == [
        "robust-scaling: 'b' observed at fewer than 3 sites: its scaling is the plain one "
        "(a median of sites needs 3)"]


def test_the_warning_names_the_site_the_feature_and_the_ratio_never_a_value():
    X, _ = load_iris(return_X_y=True)
    sites = _poisoned(_sums(_iid(X, 5)), "client 3", 2, 1e6)
    found = robust_moments(sites)
    [text] = robust_scaling_warnings(found, ["sl", "sw", "pl", "pw"], 5)
    ratio = found.set_aside["client 3"][2]
    assert text.startswith(f"robust-scaling: client 3 set aside from the scaling of 'pl' "
                           f"({ratio:.3g}x): ")
    mean = sites["client 3"][1][2] / sites["client 3"][0][2]
    assert f"{mean:.3g}" not in text and f"{mean:g}" not in text


@pytest.mark.parametrize("name, loader", [("iris", load_iris), ("wine", load_wine),
                                          ("breast cancer", load_breast_cancer),
                                          ("digits", load_digits)])
def test_honest_splits_set_no_site_aside_and_keep_the_plain_scaling(name, loader):
    """Measured: 3, 5 and 10 sites, IID and Dirichlet(0.3): no honest site is set aside,
    so the robust scaling is the plain one exactly (the bound: 0)."""
    X, y = loader(return_X_y=True)
    for n in (3, 5, 10):
        for split in ("iid", "dirichlet"):
            for seed in range(2):
                parts = [p[0] for p in split_arrays(X, y, n, partitioner=split,
                                                    dirichlet_alpha=0.3, seed=seed)]
                sites = _sums(parts)
                found = robust_moments(sites)
                assert found.set_aside == {}, (name, n, split, seed, found.set_aside)
                count, total, sumsq = _plain(sites)
                np.testing.assert_array_equal(
                    scaling_from_moments("standard", count, found.total, found.sumsq),
                    scaling_from_moments("standard", count, total, sumsq))


# ------------------------------------------------------------------ the Flower run


def _lying_moments(monkeypatch, liar: int, feature: int, factor: float = 1e6):
    """Client ``liar``'s feature-moments reply: the sum of squares of ``feature`` x factor**2
    (a consistent reply: it passes sumsq >= sum**2 / count)."""
    honest = client_phases.feature_moments_arrays

    def lying(client, config):
        arrays = honest(client, config)
        if client.client_id == liar:
            arrays = [np.array(a, dtype=np.float64) for a in arrays]
            arrays[2][feature] *= factor * factor
        return arrays

    monkeypatch.setattr(client_phases, "feature_moments_arrays", lying)


def _wine_sites(seed=2):
    X, y = load_wine(return_X_y=True)
    idx = np.array_split(np.random.default_rng(seed).permutation(len(X)), 5)
    return [X[i] for i in idx], [y[i] for i in idx]


def _ari(parts, ys, robust, seed=2):
    est = FederatedClustering("fkm", n_clusters=3, random_state=seed,
                              robust_scaling=robust).fit(parts, ys)
    labels = np.concatenate([est.predict(p) for p in parts])
    return adjusted_rand_score(np.concatenate(ys), labels), est


def test_a_site_whose_proline_sums_are_1e12_moves_the_plain_model_not_the_robust_one(
        monkeypatch, caplog):
    """Wine over 5 sites (IID), FKM on the in-process grid; client 2 sends its sums of
    squares of proline x1e12. Measured (seed 2): ARI 0.864 honest, 0.726 plain, 0.864
    robust (tolerance 0.02 of the honest run)."""
    parts, ys = _wine_sites()
    honest, plain_est = _ari(parts, ys, False)
    robust_honest, robust_est = _ari(parts, ys, True)
    assert robust_honest == honest  # nothing set aside: the same scaling, the same model
    np.testing.assert_array_equal(robust_est.strategy_.feature_transform.scale,
                                  plain_est.strategy_.feature_transform.scale)
    assert not any("robust-scaling" in w for w in robust_est.warnings_)
    _lying_moments(monkeypatch, liar=2, feature=12)
    plain, _ = _ari(parts, ys, False)
    with caplog.at_level(logging.WARNING, logger="flwr_clustering"):
        robust, est = _ari(parts, ys, True)
    assert plain < honest - 0.1, (honest, plain)
    assert abs(robust - honest) <= 0.02, (honest, robust)
    [text] = [w for w in est.warnings_ if w.startswith("robust-scaling:")]
    assert text.startswith("robust-scaling: client 2 set aside from the scaling of '12' (")  # proline
    assert text in caplog.text
    assert est.strategy_.robust_set_aside == {"client 2": ["12"]}
    assert est.strategy_.feature_summary["robust-scaling"] == {"set-aside": {"client 2": ["12"]}}
    # the scale of proline is the four other sites'
    others = np.vstack([p for i, p in enumerate(parts) if i != 2])
    scale = est.strategy_.feature_transform.scale[12]
    assert scale == pytest.approx(others[:, 12].std(), rel=1e-9)


# ------------------------------------------------------------------ the refusals


def test_robust_scaling_is_refused_where_it_cannot_work():
    for scaling in ("minmax", "none", None):
        with pytest.raises(ValueError, match=r"robust-scaling=true with scaling=.*run with "
                                             r"scaling='standard'"):
            FeatureOptions(scaling=scaling, robust_scaling=True)
    spec = registry.get("fkm")
    with pytest.raises(ValueError, match=r"secure-aggregation=true: robust-scaling=true needs "
                                         r"each site's per-feature sums.*robust-scaling=false"):
        spec.build_strategy(spec.options.run_config_defaults(), min_nodes=3, seed=0,
                            scaling="standard", robust_scaling=True, secure_aggregation=True)
    from flwr_clustering.app.config import build_strategy

    with pytest.raises(ValueError, match="secure-aggregation=true: robust-scaling=true"):
        build_strategy({"robust-scaling": True, "secure-aggregation": True})
    with pytest.raises(ValueError, match="robust-scaling=true with scaling='minmax'"):
        build_strategy({"robust-scaling": True, "scaling": "minmax"})
    assert build_strategy({"robust-scaling": True}).feature_options.robust_scaling


def test_a_dp_run_refuses_robust_scaling_before_any_sum_is_sent():
    parts, ys = _wine_sites()
    with pytest.raises(ValueError, match=r"dp-epsilon > 0 with robust-scaling=true: .*"
                                         r"robust-scaling=false"):
        FederatedClustering("fkm", n_clusters=3, robust_scaling=True, server_update="lloyd",
                            dp_epsilon=4.0, data_bound=2000.0).fit(parts)


def test_the_app_sets_the_site_aside_names_it_in_result_json_and_fills_from_the_others(
        tmp_path, monkeypatch):
    """The run-config key on the App's path (CSV files at five sites, ``missing='mean'``):
    the fill of a missing proline cell is the kept sites' mean, not the liar's."""
    import json

    from flwr_clustering.testing import run_app

    frame = load_wine(as_frame=True).frame.drop(columns="target")
    idx = np.array_split(np.random.default_rng(0).permutation(len(frame)), 5)
    frames = [frame.iloc[i].reset_index(drop=True) for i in idx]
    frames[0].loc[[1, 4], "proline"] = np.nan
    configs = []
    for i, part in enumerate(frames):
        path = tmp_path / f"s{i}.csv"
        part.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    _lying_moments(monkeypatch, liar=2, feature=list(frame.columns).index("proline"))
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3, "max-rounds": 3,
          "split-check": False, "robust-scaling": True, "missing": "mean",
          "out-dir": str(tmp_path / "run")}
    run_app(rc, 5, node_configs=configs)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    features = result["features"]
    assert features["robust-scaling"] == {"set-aside": {"client 2": ["proline"]}}
    assert any(w.startswith("robust-scaling: client 2 set aside from the scaling of "
                            "'proline' (") for w in result["warnings"])
    j = features["features"].index("proline")
    kept = pd.concat([f for i, f in enumerate(frames) if i != 2])["proline"]
    assert features["fill"][j] == pytest.approx(kept.mean(), rel=1e-12)
    assert features["center"][j] == pytest.approx(kept.mean(), rel=1e-12)
    # alcohol, where no site is set aside: every site's sums
    assert features["center"][0] == pytest.approx(frame["alcohol"].mean(), rel=1e-12)


def test_the_command_writes_the_table_and_finds_the_liar_on_every_feature(tmp_path):
    """``python -m simulations robust-scaling`` on iris, one seed: client 2 set aside on
    each of the 4 features it poisons, no site in the honest runs."""
    import json

    from simulations.cli import main

    assert main(["robust-scaling", "--seeds", "1", "--data", "iris",
                 "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "robust_scaling.json").read_text())
    by = {(r["split"], r["case"], r["robust-scaling"]): r for r in rows}
    for split in ("iid", "dirichlet"):
        assert by[(split, "honest", True)]["set-aside"] == 0
        assert by[(split, "honest", True)]["ari"] == by[(split, "honest", False)]["ari"]
        for case in ("sumsq", "rows"):
            assert by[(split, case, True)]["set-aside"] == 4
            assert by[(split, case, False)]["set-aside"] == 0
    honest = by[("iid", "honest", False)]["ari"]
    assert by[("iid", "sumsq", False)]["worst-ari"] < honest - 0.05
    assert by[("iid", "sumsq", True)]["worst-ari"] > honest - 0.01
    assert "| iris, iid | sumsq |" in (tmp_path / "robust_scaling.md").read_text()
