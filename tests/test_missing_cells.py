"""Missing cells as sites hold them: the federation's mean, dropped rows, refusals.

``missing='mean'`` must equal scikit-learn's ``SimpleImputer(strategy="mean")`` then
``StandardScaler`` on the pooled rows, and so the run must cluster what the centralized
pipeline clusters; ``missing='drop'`` must equal a run on the complete rows only, bit for
bit, with -1 for the rows left out.
"""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import missing_cell_sites
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_iris, load_wine
from sklearn.impute import SimpleImputer
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from flwr_clustering import FederatedClustering, load_model
from flwr_clustering.app.client_app import app
from flwr_clustering.app.server_app import run_server
from flwr_clustering.data.schema import column_moments, scaling_from_moments
from flwr_clustering.testing import InProcessGrid, run_app


@pytest.mark.parametrize("loader", [load_wine, load_breast_cancer, load_iris])
def test_the_federations_fill_and_scale_equal_simple_imputer_then_standard_scaler(loader):
    frames, _ = missing_cell_sites(loader, n_sites=4, share=0.2)
    parts = [column_moments(f.to_numpy()) for f in frames]
    count, total, sumsq = (np.sum([p[k] for p in parts], axis=0)
                           for k in ("count", "sum", "sumsq"))
    rows = sum(len(f) for f in frames)
    center, scale = scaling_from_moments("standard", count, total, sumsq, rows=rows)
    pooled = pd.concat(frames, ignore_index=True).to_numpy()
    imputer = SimpleImputer(strategy="mean").fit(pooled)
    scaler = StandardScaler().fit(imputer.transform(pooled))
    np.testing.assert_allclose(total / count, imputer.statistics_, rtol=1e-12)
    np.testing.assert_allclose(center, scaler.mean_, rtol=1e-12)
    np.testing.assert_allclose(scale, scaler.scale_, rtol=1e-12)
    # minmax: the mean lies inside the range, so the extremes are the observed ones
    lo = np.nanmin(pooled, axis=0)
    hi = np.nanmax(pooled, axis=0)
    c2, s2 = scaling_from_moments("minmax", count, total, sumsq, lo, hi, rows=rows)
    mm = MinMaxScaler().fit(imputer.transform(pooled))
    np.testing.assert_allclose(c2, mm.data_min_, rtol=1e-12)
    np.testing.assert_allclose(s2, mm.data_range_, rtol=1e-12)


def test_missing_mean_clusters_what_the_centralized_pipeline_clusters():
    frames, ys = missing_cell_sites(load_wine, n_sites=3, share=0.1)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0, server_update="lloyd",
                              max_rounds=50, tol=0.0).fit(frames, ys)
    pooled = pd.concat(frames, ignore_index=True)
    Z = StandardScaler().fit_transform(SimpleImputer(strategy="mean").fit_transform(pooled))
    transform = est.feature_transform_
    assert transform.missing == "mean"
    # the clients' rows are the pipeline's rows
    np.testing.assert_allclose(transform.apply(_table(pooled)), Z, rtol=1e-11, atol=1e-12)
    # the same rows, imputed and scaled centrally, through the same federated run: the same
    # model (the same seed draws the same start from the same rows)
    bounds = np.cumsum([0] + [len(f) for f in frames])
    arrays = [Z[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    ref = FederatedClustering("fkm", n_clusters=3, random_state=0, server_update="lloyd",
                              max_rounds=50, tol=0.0, scaling="none").fit(arrays, ys)
    np.testing.assert_allclose(est.strategy_.centroids, ref.strategy_.centroids, rtol=1e-9,
                               atol=1e-12)
    for a, b in zip(est.labels_, ref.labels_, strict=True):
        np.testing.assert_array_equal(a, b)
    # and a fixed point of scikit-learn's Lloyd on the centralized pipeline's rows
    km = KMeans(3, init=np.asarray(est.strategy_.centroids), n_init=1, max_iter=300,
                tol=0.0).fit(Z)
    np.testing.assert_array_equal(km.labels_, np.concatenate(est.labels_))
    np.testing.assert_allclose(km.cluster_centers_, est.strategy_.centroids, rtol=1e-9,
                               atol=1e-12)
    # every client's fill is the same federation's mean, and it says how much was filled
    [text] = [w for w in est.warnings_ if "missing='mean'" in w]
    missing = pooled.isna().sum()
    for name in pooled.columns:
        assert f"'{name}' {missing[name] / len(pooled):.1%} ({missing[name]} of 178 rows)" in text
    assert f"{int(pooled.isna().any(axis=1).sum())} rows had a missing cell" in text
    # predict fills a new row's missing cells with the same means
    np.testing.assert_array_equal(est.predict(pooled), np.concatenate(est.labels_))


def _table(frame):
    from flwr_clustering.data.schema import FeatureTable

    return FeatureTable.from_frame(frame)


def test_missing_drop_equals_the_run_on_the_complete_rows_and_labels_the_rest_minus_one():
    frames, ys = missing_cell_sites(load_wine, n_sites=3, share=0.03)
    kept = [f.notna().all(axis=1).to_numpy() for f in frames]
    assert all((~k).any() for k in kept)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0, missing="drop").fit(
        frames, ys)
    ref = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(
        [f[k].reset_index(drop=True) for f, k in zip(frames, kept, strict=True)],
        [y[k] for y, k in zip(ys, kept, strict=True)])
    np.testing.assert_array_equal(est.strategy_.centroids, ref.strategy_.centroids)
    assert est.feature_transform_.center == ref.feature_transform_.center
    assert est.feature_transform_.scale == ref.feature_transform_.scale
    for labels, k, ref_labels in zip(est.labels_, kept, ref.labels_, strict=True):
        assert len(labels) == len(k)
        np.testing.assert_array_equal(labels[~k], -1)
        np.testing.assert_array_equal(labels[k], ref_labels)
    assert est.metrics_["num-examples"] == sum(int(k.sum()) for k in kept)
    [text] = [w for w in est.warnings_ if "missing='drop'" in w]
    counts = ", ".join(f"client {i}: {int((~k).sum())}" for i, k in enumerate(kept))
    assert f"({counts})" in text
    result = est.strategy_.feature_summary
    assert result["incomplete-rows-per-site"] == {
        f"client {i}": int((~k).sum()) for i, k in enumerate(kept)}
    # predict: -1 for a row with a missing cell, as at the sites
    for frame, labels in zip(frames, est.labels_, strict=True):
        np.testing.assert_array_equal(est.predict(frame), labels)


def test_missing_cells_are_refused_where_they_cannot_be_handled_honestly():
    frames, _ = missing_cell_sites(load_iris, n_sites=3, share=0.0)
    with pytest.raises(ValueError, match=r"missing must be one of \['auto', 'mean', 'drop', "
                                         r"'partial', 'refuse'\], got 'median'"):
        FederatedClustering("fkm", 3, missing="median").fit(frames)
    # a site whose every row has a missing cell, with missing='drop'
    holes = [f.copy() for f in frames]
    holes[1]["petal width (cm)"] = np.nan
    for min_nodes in (3, 2):  # refused even where the run could go on without the site
        with pytest.raises((RuntimeError, ValueError), match=r"client 1: every one of its 50 "
                                             r"rows has a missing cell, so missing=.drop."):
            FederatedClustering("fkm", 3, missing="drop", min_nodes=min_nodes).fit(holes)
    # a feature no site observes
    for f in holes:
        f["petal width (cm)"] = np.nan
    with pytest.raises(ValueError, match=r"no site observes the feature\(s\) 'petal width "
                                         r"\(cm\)'"):
        FederatedClustering("fkm", 3).fit(holes)
    # more than half missing at every site; one site that records it keeps it
    mostly = [f.copy() for f in frames]
    for f in mostly:
        f.loc[f.index[:30], "sepal width (cm)"] = np.nan
    with pytest.raises(ValueError, match=r"'sepal width \(cm\)' are missing at more than "
                                         r"50% of the rows of every site"):
        FederatedClustering("fkm", 3).fit(mostly)
    mostly[0]["sepal width (cm)"] = frames[0]["sepal width (cm)"]
    FederatedClustering("fkm", 3).fit(mostly)
    # partial needs an algorithm that clusters on observed features (FKM: federated Lloyd)
    with pytest.raises(ValueError, match=r"missing='partial' with fkm: .*server-update='lloyd'"):
        FederatedClustering("fkm", 3, missing="partial").fit(mostly)
    # refuse: the client says where, never a value
    with pytest.raises(ValueError, match=r"client 1 data contains NaN or inf in 30 value"):
        FederatedClustering("fkm", 3, missing="refuse").fit(mostly)


def test_dp_refuses_the_federations_means_and_takes_drop():
    frames, _ = missing_cell_sites(load_iris, n_sites=3, share=0.02)
    dp = {"server_update": "lloyd", "dp_epsilon": 2.0, "dp_delta": 1e-5, "data_bound": 15.0,
          "scaling": "none"}
    with pytest.raises(ValueError, match=r"dp-epsilon > 0 with missing='mean'.*missing='drop'"):
        FederatedClustering("fkm", 3, missing="mean", **dp).fit(frames)
    # the default: a site with missing cells refuses to train on them, naming drop
    with pytest.raises(RuntimeError, match=r"no federation means .*run with missing='drop'"):
        FederatedClustering("fkm", 3, min_nodes=3, **dp).fit(frames)
    est = FederatedClustering("fkm", 3, missing="drop", **dp).fit(frames)
    assert sum(int((lab == -1).sum()) for lab in est.labels_) == sum(
        int(f.isna().any(axis=1).sum()) for f in frames)


def test_a_missing_category_is_its_own_level_through_agreement_one_hot_and_profile():
    frames, ys = missing_cell_sites(load_wine, n_sites=3, share=0.05)
    rng = np.random.default_rng(1)
    for f, y in zip(frames, ys, strict=True):
        f["region"] = np.array(["north", "south", "east"], dtype=object)[y]
        f.loc[rng.random(len(f)) < 0.15, "region"] = None
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              categorical_columns=["region"]).fit(frames, ys)
    assert est.feature_transform_.categories == (
        ("region", ("east", "missing", "north", "south", "other")),)
    pooled = pd.concat(frames, ignore_index=True)
    labels = np.concatenate(est.labels_)
    share = pooled["region"].isna().groupby(labels).mean()
    np.testing.assert_allclose(est.cluster_profile_["region=missing mean"], share,
                               rtol=1e-12, atol=1e-15)
    for frame, lab in zip(frames, est.labels_, strict=True):
        np.testing.assert_array_equal(est.predict(frame), lab)


def _unit_sites(factor, seed=0, alpha=None):
    data = load_wine(as_frame=True)
    frame, y = data.frame.drop(columns="target"), data.target.to_numpy()
    rng = np.random.default_rng(seed)
    idx = np.array_split(rng.permutation(len(frame)), 3)
    frames = [frame.iloc[i].reset_index(drop=True) for i in idx]
    frames[2]["proline"] = frames[2]["proline"] * factor
    return frames, [y[i] for i in idx]


def test_a_site_in_other_units_is_named_with_the_feature_and_the_factor():
    frames, ys = _unit_sites(1e-3)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(frames, ys)
    [text] = [w for w in est.warnings_ if "unit mismatch" in w]
    assert text.startswith("client 2's 'proline' is about 1/1000 of the other sites' (mean 0.")
    with pytest.raises(ValueError, match=r"unit-check='refuse': client 2's 'proline' is about "
                                         r"1/1000"):
        FederatedClustering("fkm", n_clusters=3, unit_check="refuse").fit(frames)
    off = FederatedClustering("fkm", n_clusters=3, unit_check="off").fit(frames)
    assert not any("unit mismatch" in w for w in off.warnings_)
    # a site whose values are 1000 times larger is named too
    frames, _ = _unit_sites(1e3)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(frames)
    assert any(w.startswith("client 2's 'proline' is about 1000 of") for w in est.warnings_)


def test_the_app_fills_missing_cells_from_csv_and_parquet_files_as_the_estimator_does(
        tmp_path):
    frames, ys = missing_cell_sites(load_wine, n_sites=3, share=0.08)
    for f, y in zip(frames, ys, strict=True):
        f["smoker"] = np.where(y == 0, "yes", "no").astype(object)
        f.loc[f.index[::7], "smoker"] = None  # empty cells in the text column too
    configs = []
    for i, frame in enumerate(frames):  # two CSV files and one Parquet file
        path = tmp_path / (f"s{i}.parquet" if i == 2 else f"s{i}.csv")
        if i == 2:
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
          "categorical-columns": "smoker", "out-dir": str(tmp_path / "run")}
    out, _ = run_app(rc, 3, node_configs=configs)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              categorical_columns=["smoker"]).fit(frames)
    np.testing.assert_allclose(out["centroids"], est.strategy_.centroids, rtol=1e-12,
                               atol=1e-12)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "completed"
    assert result["features"]["missing"] == "mean"
    assert result["features"]["rows-read"] == sum(len(f) for f in frames)
    assert result["features"]["missing-cells"] == {
        name: int(n) for name, n in pd.concat(frames).drop(columns="smoker").isna().sum().items()
        if n}
    assert any("missing='mean'" in w for w in result["warnings"])
    # the report says how many rows had a missing cell, per site
    incomplete = [int(f.drop(columns="smoker").isna().any(axis=1).sum()) for f in frames]
    report = (tmp_path / "run" / "report.html").read_text()
    assert (f"mean: {sum(incomplete)} of {sum(len(f) for f in frames)} rows had a missing "
            f"cell (client 0: {incomplete[0]}, client 1: {incomplete[1]}, client 2: "
            f"{incomplete[2]})") in report
    # the saved model fills a new file's missing cells with the same means
    model = load_model(tmp_path / "run" / "model.json")
    assert model.transform.missing == "mean" and model.transform.fill == \
        est.feature_transform_.fill
    for i, frame in enumerate([pd.read_csv(configs[0]["data-path"]),
                               pd.read_csv(configs[1]["data-path"]),
                               pd.read_parquet(configs[2]["data-path"])]):
        np.testing.assert_array_equal(model.predict(frame), est.labels_[i])
        np.testing.assert_array_equal(model.predict(frame), est.predict(frame))


def test_secure_aggregation_sums_the_missing_cells_counts_and_gives_the_plain_fill(tmp_path):
    frames, _ = missing_cell_sites(load_iris, n_sites=3, share=0.1)
    configs = []
    for i, frame in enumerate(frames):
        path = tmp_path / f"s{i}.csv"
        frame.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    base = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
            "server-update": "lloyd", "max-rounds": 3, "split-check": False}
    runs = {}
    for secure in (False, True):
        rc = {**base, "secure-aggregation": secure, "out-dir": str(tmp_path / f"run{secure}")}
        run_app(rc, 3, node_configs=configs)
        runs[secure] = json.loads((tmp_path / f"run{secure}" / "result.json").read_text())
    plain, secure = runs[False]["features"], runs[True]["features"]
    # the secure sums are of values rounded to fixed-point digits (below each feature's
    # power of two): the means within about 1e-12 of the plain ones, not bit for bit; the
    # spread from sumsq / n - mean**2 loses a further mean**2 / var (about 50 on iris)
    np.testing.assert_allclose(secure["fill"], plain["fill"], rtol=1e-11)
    np.testing.assert_allclose(secure["center"], plain["center"], rtol=1e-11)
    np.testing.assert_allclose(secure["scale"], plain["scale"], rtol=1e-9)
    assert secure["missing-cells"] == plain["missing-cells"]
    assert secure["incomplete-rows"] == plain["incomplete-rows"] > 0
    assert secure["incomplete-rows-per-site"] == {}  # only the federation's totals


def test_under_secure_aggregation_each_site_checks_its_units_and_the_server_counts(tmp_path):
    frames, _ = _unit_sites(1e-3)
    configs = []
    for i, frame in enumerate(frames):
        path = tmp_path / f"s{i}.csv"
        frame.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    base = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
            "server-update": "lloyd", "max-rounds": 2, "split-check": False,
            "secure-aggregation": True}
    rc = {**base, "out-dir": str(tmp_path / "run")}
    grid = InProcessGrid(app, 3, run_config=rc, node_configs=configs)
    run_server(grid, rc)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    [text] = [w for w in result["warnings"] if "unit mismatch" in w]
    assert text.startswith("1 site's 'proline' is about 1/1000 of the federation's")
    ledger = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert [t["phase"] for t in ledger["secure-totals"]][:2] == ["feature-moments",
                                                                  "unit-check"]
    # only the totals reached the server: no plain reply of the unit check
    assert not [m for m in ledger["messages"] if m["phase"] == "unit-check"]
    rc = {**base, "unit-check": "refuse", "out-dir": str(tmp_path / "refused")}
    with pytest.raises(ValueError, match=r"unit-check='refuse': 1 site's 'proline'"):
        run_app(rc, 3, node_configs=configs)
    # sites in the same units: no flag, no warning
    frames, _ = _unit_sites(1.0)
    for i, frame in enumerate(frames):  # new files (a process caches what it read)
        frame.to_csv(tmp_path / f"same{i}.csv", index=False)
        configs[i] = {"data-path": str(tmp_path / f"same{i}.csv")}
    rc = {**base, "out-dir": str(tmp_path / "same")}
    run_app(rc, 3, node_configs=configs)
    result = json.loads((tmp_path / "same" / "result.json").read_text())
    assert not [w for w in result["warnings"] if "unit mismatch" in w]
