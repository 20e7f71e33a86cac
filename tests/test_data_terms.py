"""Results in the data's terms: the profile, model.json and report.html of a run.

The profile is computed from the clients' per-cluster sums (no row) and must equal pandas'
groupby on the pooled rows; the model a site keeps must label rows as the clients did.
"""

import json
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_wine

from flwr_clustering import FederatedClustering, load_model
from flwr_clustering.app.client_app import app
from flwr_clustering.app.server_app import run_server
from flwr_clustering.data.local_file import save_local_file
from flwr_clustering.testing import InProcessGrid, run_app


def _frames(loader, n_sites=3, seed=0):
    data = loader(as_frame=True)
    frame = data.frame.drop(columns="target")
    idx = np.array_split(np.random.default_rng(seed).permutation(len(frame)), n_sites)
    return ([frame.iloc[i].reset_index(drop=True) for i in idx],
            [data.target.to_numpy()[i] for i in idx])


def _groupby(frames, labels):
    pooled = pd.concat(frames, ignore_index=True)
    by = pooled.groupby(np.concatenate(labels))
    return pooled, by.mean(), by.std(ddof=0), by.size()


@pytest.mark.parametrize("loader, k", [(load_wine, 3), (load_breast_cancer, 2)])
def test_the_estimators_profile_equals_pandas_groupby_in_original_units(loader, k):
    frames, ys = _frames(loader)
    frames[1] = frames[1][frames[1].columns[::-1]]  # a site with its own column order
    est = FederatedClustering("fkm", n_clusters=k, random_state=0).fit(frames, labels=ys)
    profile = est.cluster_profile_
    pooled, mean, std, size = _groupby([f[est.feature_names_in_] for f in frames], est.labels_)
    assert list(profile.index) == list(range(k))
    np.testing.assert_array_equal(profile["size"].to_numpy(), size.reindex(range(k)).to_numpy())
    for name in est.feature_names_in_:
        np.testing.assert_allclose(profile[f"{name} mean"], mean[name], rtol=1e-12)
        np.testing.assert_allclose(profile[f"{name} std"], std[name], rtol=1e-9, atol=1e-12)
    # rows per client, as the clients labelled them
    for i, labels in enumerate(est.labels_):
        counts = np.bincount(labels, minlength=k)
        np.testing.assert_array_equal(profile[f"rows at client {i}"].fillna(-1).to_numpy(),
                                      np.where((counts > 0) & (counts < 2), -1, counts))


def test_a_small_count_at_a_site_is_suppressed():
    data = load_wine(as_frame=True)
    frame, y = data.frame.drop(columns="target"), data.target.to_numpy()
    by_class = [np.flatnonzero(y == c) for c in range(3)]
    # each site holds one class and a few rows of another: clusters of 2-3 rows there
    sites = [np.r_[by_class[0], by_class[2][:3]], by_class[1],
             np.r_[by_class[2][3:], by_class[0][:2]]]
    frames = [frame.iloc[i].reset_index(drop=True) for i in sites]
    # (a threshold of 3: at 5 every site but one withholds all its clusters' sums, since
    # its small clusters hold fewer than 5 rows together, and there is no profile)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0, privacy_threshold=3)
    est.fit(frames, labels=[y[i] for i in sites])
    counts = [np.bincount(lab, minlength=3) for lab in est.labels_]
    table = np.array([est.cluster_profile_[f"rows at client {i}"].to_numpy() for i in range(3)])
    small = np.array([(c > 0) & (c < 3) for c in counts])
    assert small.any()
    assert np.isnan(table[small]).all() and not np.isnan(table[~small]).any()


def test_the_app_writes_model_profile_and_report_in_the_files_terms(tmp_path):
    frames, ys = _frames(load_wine)
    configs = []
    for i, (frame, y) in enumerate(zip(frames, ys, strict=True)):
        f = frame.copy()
        if i == 1:
            f = f[f.columns[::-1]]
        f.insert(0, "patient_id", 2_000_000_000 + np.arange(len(f)) * 7919 + i)
        f["label"] = y
        path = tmp_path / f"site{i}.csv"
        f.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
          "index-column": "patient_id", "out-dir": str(tmp_path / "run")}
    grid = InProcessGrid(app, 3, run_config=rc, node_configs=configs)
    run_server(grid, rc)
    out = tmp_path / "run"
    result = json.loads((out / "result.json").read_text())
    names = list(frames[0].columns)
    assert result["features"]["features"] == names and result["features"]["scaling"] == "standard"
    assert result["warnings"] == []
    model = load_model(out / "model.json")
    assert list(model.feature_names) == names
    npz = np.load(out / "centroids.npz")
    np.testing.assert_allclose(npz["centroids"], model.centroids_original, rtol=1e-12)
    np.testing.assert_array_equal(npz["scaled_centroids"], model.centroids)
    # a site labels its own file (extra columns, its own order) as the clients did
    from flwr_clustering.clients import stored_labels

    for i in range(3):
        frame = pd.read_csv(configs[i]["data-path"])
        np.testing.assert_array_equal(model.predict(frame),
                                      stored_labels(grid.contexts[100 + i]))
    labels = [stored_labels(grid.contexts[100 + i]) for i in range(3)]
    profile = pd.read_csv(out / "profile.csv", index_col="cluster")
    _, mean, std, size = _groupby(frames, labels)
    for name in names:
        np.testing.assert_allclose(profile[f"{name} mean"], mean[name], rtol=1e-12)
    np.testing.assert_array_equal(profile["size"], size)
    report = (out / "report.html").read_text()
    assert "proline" in report and "http://" not in report and "https://" not in report
    assert (out / "profile.png").stat().st_size > 0


def test_scaling_none_warns_and_keeps_raw_units(tmp_path):
    frames, _ = _frames(load_wine)
    for i, frame in enumerate(frames):
        save_local_file(tmp_path / f"s{i}.npy", frame.to_numpy())
    configs = [{"data-path": str(tmp_path / f"s{i}.npy")} for i in range(3)]
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3, "scaling": "none",
          "out-dir": str(tmp_path / "run")}
    run_app(rc, 3, node_configs=configs)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert any("'12'" in w and "scaling='standard'" in w for w in result["warnings"])
    assert result["features"]["features"] == [str(j) for j in range(13)]
    npz = np.load(tmp_path / "run" / "centroids.npz")
    assert "scaled_centroids" not in npz.files


def _with_region(frames, ys):
    out = []
    for frame, y in zip(frames, ys, strict=True):
        f = frame.copy()
        f["region"] = np.array(["north", "south", "east"])[y]
        out.append(f)
    out[0].loc[0, "region"] = "island"  # one row: never a level (privacy threshold)
    return out


def test_a_categorical_column_is_one_hot_encoded_with_the_federations_levels(tmp_path):
    frames, ys = _frames(load_wine)
    frames = _with_region(frames, ys)
    with pytest.raises(ValueError, match=r"'region'.*categorical-columns"):
        FederatedClustering("fkm", n_clusters=3, random_state=0).fit(frames)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              categorical_columns=["region"]).fit(frames, labels=ys)
    levels = ["region=east", "region=north", "region=south", "region=other"]
    assert list(est.feature_names_in_[-4:]) == levels
    assert est.strategy_.feature_transform.categories == (
        ("region", ("east", "north", "south", "other")),)
    for i, frame in enumerate(frames):
        np.testing.assert_array_equal(est.predict(frame), est.labels_[i])
    # the profile's one-hot means are the clusters' shares of each region
    pooled = pd.concat(frames, ignore_index=True)
    labels = np.concatenate(est.labels_)
    for level in ("east", "north", "south"):
        share = pooled.groupby(labels)["region"].apply(lambda s, v=level: (s == v).mean())
        np.testing.assert_allclose(est.cluster_profile_[f"region={level} mean"], share,
                                   rtol=1e-12, atol=1e-15)
    # the App, each site reading its CSV with the text column: the same model
    configs = []
    for i, frame in enumerate(frames):
        path = tmp_path / f"s{i}.csv"
        frame.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
          "categorical-columns": "region", "out-dir": str(tmp_path / "run")}
    out, _ = run_app(rc, 3, node_configs=configs)
    np.testing.assert_allclose(out["centroids"], est.strategy_.centroids, rtol=1e-12,
                               atol=1e-12)
    model = load_model(tmp_path / "run" / "model.json")
    np.testing.assert_array_equal(model.predict(pd.read_csv(configs[2]["data-path"])),
                                  est.labels_[2])
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["features"]["categorical-columns"] == {
        "region": ["east", "north", "south", "other"]}


def test_sites_that_standardised_their_own_files_make_the_run_warn():
    from sklearn.preprocessing import StandardScaler

    frames, ys = _frames(load_wine)
    own = [pd.DataFrame(StandardScaler().fit_transform(f), columns=f.columns) for f in frames]
    est = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(own, labels=ys)
    assert any("standardised their own files" in w for w in est.warnings_)
    raw = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(frames, labels=ys)
    assert not any("standardised their own files" in w for w in raw.warnings_)


def _run_builtin(tmp_path, name, monkeypatch=None, positional=False, **extra):
    """An App run on a built-in data set; ``positional``: its columns named 0, 1, ..."""
    if positional:  # the partitions as they were held before they kept their names
        from flwr_clustering.app import client_app as client_module
        from flwr_clustering.app import server_app as server_module

        monkeypatch.setattr(client_module, "feature_names", lambda dataset: None)
        monkeypatch.setattr(server_module, "feature_names", lambda dataset: None)
    rc = {"algorithm": "fkm", "k": 3, "dataset": "wine", "partitioner": "iid",
          "min-nodes": 3, "out-dir": str(tmp_path / name), **extra}
    run_app(rc, 3)
    if positional:
        monkeypatch.undo()
    return tmp_path / name


def test_a_built_in_data_set_keeps_its_feature_names_and_its_numbers(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    panels = []
    savefig = Figure.savefig

    def spy(fig, *args, **kwargs):  # every figure's panels: (title, x label, y label)
        panels.extend((ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes)
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    from flwr_clustering import reporting

    drawn = {}
    plot_run = reporting.plot_run

    def plot_spy(path, centroids, history, X=None, labels=None, title="", **kwargs):
        drawn.update(centroids=np.asarray(centroids), X=X, **kwargs)
        return plot_run(path, centroids, history, X, labels, title, **kwargs)

    monkeypatch.setattr(reporting, "plot_run", plot_spy)
    out = _run_builtin(tmp_path, "named")
    names = [str(f) for f in load_wine().feature_names]
    result = json.loads((out / "result.json").read_text())
    assert "proline" in result["features"]["features"]
    assert result["features"]["features"] == names
    assert list(load_model(out / "model.json").feature_names) == names
    profile = pd.read_csv(out / "profile.csv", index_col="cluster")
    assert [c[:-len(" mean")] for c in profile.columns if c.endswith(" mean")] == names
    report = (out / "report.html").read_text()
    assert "<tr><td>proline</td>" in report
    # clusters.png: the scaled rows (what was clustered), projected by PCA, and says so
    clusters = [p for p in panels if p[0].startswith("clusters")]
    assert clusters == [("clusters, scaled rows (standard), PCA of the rows", "PC 1", "PC 2")]
    npz = np.load(out / "centroids.npz")
    np.testing.assert_array_equal(drawn["centroids"], npz["scaled_centroids"])
    X = load_wine().data  # the pooled rows, standardised with the federation's sums
    assert drawn["X"].shape == X.shape
    np.testing.assert_allclose(drawn["X"].mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(drawn["X"].std(axis=0), 1, rtol=1e-12)
    assert drawn["feature_names"] == tuple(names) and drawn["space"].startswith("scaled")
    # the names change no number: the same run with the columns named by position
    plain = _run_builtin(tmp_path, "positional", monkeypatch, positional=True)
    before = json.loads((plain / "result.json").read_text())
    assert before["features"]["features"] == [str(j) for j in range(13)]
    for key in ("federated", "centralized", "federated-on-pooled", "data-sources"):
        assert result[key] == before[key]
    a, b = np.load(out / "centroids.npz"), np.load(plain / "centroids.npz")
    assert a.files == b.files
    for key in a.files:
        np.testing.assert_array_equal(a[key], b[key])


def test_the_report_lists_the_runs_algorithm_options_only(tmp_path):
    from flwr_clustering import registry
    from flwr_clustering.app.config import AppOptions, DataOptions, merged_config

    out = _run_builtin(tmp_path, "run")
    cfg = merged_config(json.loads((out / "result.json").read_text())["run-config"])
    report = (out / "report.html").read_text()
    settings = report.split("<h2>Settings</h2>", 1)[1].split("<h2>", 1)[0]
    shown = set(re.findall(r"<tr><td>([^<]*)</td>", settings))
    fkm = registry.get("fkm").options
    run_wide = {*AppOptions.run_config_defaults(), *DataOptions.run_config_defaults()}
    others = {key for name in registry.names(listed_only=False)
              for key in registry.get(name).options.run_config_defaults()}
    others -= {*fkm.run_config_defaults(), *run_wide}
    assert others and not shown & others  # no key that only another algorithm has
    # the keys that matter to this run, by their declarations: k, not k-min (k='auto' only)
    of_run = {*AppOptions.keys_of_run(cfg), *DataOptions.keys_of_run(cfg),
              *fkm.keys_of_run(cfg)}
    assert shown == of_run | {"features", "missing cells"}  # and the agreed features
    assert {"k", "dataset", "scaling", "privacy-threshold"} <= shown
    assert not {"k-min", "beta", "dp-delta"} & shown
    model = json.loads((out / "model.json").read_text())
    assert set(model["options"]) == of_run


def test_a_key_is_listed_where_the_run_uses_it():
    from flwr_clustering.app.config import merged_config, run_settings

    plain = run_settings(merged_config({"algorithm": "fkm", "dataset": "local"}))
    assert not {"k-min", "secagg-keys", "dp-delta", "dp-accountant", "robust-trim",
                "partitioner"} & set(plain)
    auto = run_settings(merged_config({"algorithm": "fkm", "k": "auto", "dataset": "blobs",
                                       "secure-aggregation": True,
                                       "server-update": "lloyd"}))
    assert {"k-min", "k-max", "k-rule", "secagg-keys", "robust-trim", "centers"} <= set(auto)
    dp = run_settings(merged_config({"algorithm": "fkm", "dp-epsilon": 1.0,
                                     "server-update": "lloyd", "data-bound": 5.0}))
    assert {"dp-delta", "data-bound", "dp-rounds", "dp-accountant"} <= set(dp)


def test_feature_columns_of_a_built_in_data_set_by_name(tmp_path):
    # the pooled rows are taken by name as the clients' are (before: positions, and the
    # server failed after the last round on 13 pooled columns for 2 features)
    out = _run_builtin(tmp_path, "two", **{"feature-columns": "proline,alcohol"})
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed"
    assert result["features"]["features"] == ["proline", "alcohol"]
    assert result["centralized"]["num-examples"] == 178
    assert result["federated-on-pooled"]["ari"] == pytest.approx(result["federated"]["ari"])
