"""FederatedClustering, the scikit-learn entry point: the App's model bit for bit, per algorithm.

The reference for "the same code path as ``flwr run``" is the App itself: its ServerApp
function ``run_server`` and its ClientApp (``flwr_clustering.app.client_app.app``), every
node reading its own data file (``dataset='local'``, ``data-path``), on an in-process grid.
"""

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.datasets import load_wine, make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from flwr_clustering import FederatedClustering, registry
from flwr_clustering.clients import stored_labels
from flwr_clustering.data.local_file import save_local_file
from flwr_clustering.testing import run_app

ROOT = Path(__file__).resolve().parents[1]

#: Small, fast settings per algorithm (estimator keyword -> value).
SMALL = {
    "fkm": dict(max_rounds=5),
    "ffcm": dict(max_rounds=5),
    "dgc": dict(iterations=5, graph="ring"),
    "kdc": dict(sample_size=80, t=20),
    "deepfeca": dict(network="mlp", max_rounds=1, epochs=1, proj_dim=8, centralized=False),
    "masked-federated": dict(federated_rounds=2, k_local=3),
    "masked-oneshot": dict(k_local=3),
}
MASKED = ("masked-federated", "masked-oneshot")


def _blobs(algorithm, n_clients=4):
    X, y = make_blobs(240, n_features=4, centers=3, cluster_std=0.8, random_state=0)
    parts, ys = np.array_split(X, n_clients), np.array_split(y, n_clients)
    if algorithm in MASKED:  # every client misses one feature (NaN), a different one
        parts = [P.copy() for P in parts]
        for i, P in enumerate(parts):
            P[:, (i + 1) % P.shape[1]] = np.nan
    return parts, ys


def _run_config(est):
    """The run config of ``flwr run`` that stands for ``est``'s parameters."""
    return est._run_config(len(est.labels_), est.seed_)


def _app_run(tmp_path, run_config, parts, ys, monkeypatch):
    """The App: run_server + the App's ClientApp, each node reading its own .npz file."""
    from flwr_clustering.strategies.base import ClusteringStrategy

    # run_server waits 1 s for the node count to settle (a simulation's nodes register
    # while it starts); an in-process grid has them all at once: skip the wait only
    wait = ClusteringStrategy.wait_for_nodes
    monkeypatch.setattr(ClusteringStrategy, "wait_for_nodes",
                        lambda self, grid, settle=0.0: wait(self, grid))

    files = []
    for i, (X, y) in enumerate(zip(parts, ys, strict=True)):
        files.append(tmp_path / f"client{i}.npz")
        save_local_file(files[-1], X, y)
    rc = {**run_config, "dataset": "local", "out-dir": str(tmp_path / "out")}
    out, grid = run_app(rc, len(parts),
                        # the estimator's rows are the caller's own: raw-row steps
                        # (KDC's sample) are allowed, as the estimator allows them
                        node_configs=[{"data-path": str(f), "allow-raw-rows": True}
                                      for f in files])
    return out, [stored_labels(grid.contexts[100 + i]) for i in range(len(parts))]


def _without_seconds(record):
    """``record`` without the wall-clock entries (``seconds``, ``seconds-cluster``, ...)."""
    if isinstance(record, dict):
        return {k: _without_seconds(v) for k, v in record.items() if "seconds" not in k}
    if isinstance(record, list):
        return [_without_seconds(v) for v in record]
    return record


def _assert_same_run(est, out, app_labels):
    """Estimator and App: model, labels, metrics and history bit for bit."""
    app = out["strategy"]
    # the model (the App's run_server centroids) is in the federation's scaled units;
    # cluster_centers_ is that model in the data's own units
    np.testing.assert_array_equal(est.strategy_.centroids, out["centroids"])
    assert est.feature_transform_ == app.feature_transform
    original = (out["centroids"] if est.feature_transform_ is None
                else est.feature_transform_.inverse(out["centroids"]))
    np.testing.assert_array_equal(est.cluster_centers_,
                                  np.asarray(original, dtype=est.cluster_centers_.dtype))
    mine, theirs = est.strategy_.model_record(), app.model_record()
    assert list(mine) == list(theirs)
    for key in mine:  # every array of the model (KDC's kernel, DeepFeCA's weights, ...)
        np.testing.assert_array_equal(mine[key].numpy(), theirs[key].numpy(), err_msg=key)
    for i, (a, b) in enumerate(zip(est.labels_, app_labels, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"labels of client {i}")
    np.testing.assert_equal(est.metrics_, out["federated"])
    np.testing.assert_equal(_without_seconds(est.history_), _without_seconds(app.history))


def test_wine_fkm_equals_the_app_and_clusters_as_well_as_kmeans(tmp_path, monkeypatch):
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    order = np.random.default_rng(0).permutation(len(X))  # IID split into 4 clients
    parts = [X[i] for i in np.array_split(order, 4)]
    ys = [y[i] for i in np.array_split(order, 4)]

    est = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(parts, labels=ys)

    out, app_labels = _app_run(tmp_path, _run_config(est), parts, ys, monkeypatch)
    _assert_same_run(est, out, app_labels)
    assert est.cluster_centers_.shape == (3, 13) and est.n_features_in_ == 13
    assert est.n_clients_ == 4 and 1 <= est.n_iter_ == len(est.history_) <= 20
    for i, P in enumerate(parts):
        np.testing.assert_array_equal(est.labels_[i], est.predict(P))
    # as good as centralized k-means on the pooled rows, give or take a little
    fed = adjusted_rand_score(np.concatenate(ys), np.concatenate(est.labels_))
    central = adjusted_rand_score(y, KMeans(3, n_init=10, random_state=0).fit_predict(X))
    assert fed >= 0.9 * central, (fed, central)
    assert est.metrics_["ari"] == pytest.approx(fed, abs=1e-12)  # exact federated ARI
    assert est.user_centers_ is None
    # a fitted estimator pickles (e.g. for joblib)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict(X), est.predict(X))


@pytest.mark.parametrize("algorithm", registry.names())
def test_every_algorithm_equals_the_app_and_predict_matches_the_clients(tmp_path, monkeypatch,
                                                                     algorithm):
    if algorithm == "deepfeca":
        pytest.importorskip("torch")
    parts, ys = _blobs(algorithm)
    est = FederatedClustering(algorithm, n_clusters=3, random_state=0,
                              **SMALL.get(algorithm, {}))
    assert est.fit(parts, ys) is est

    out, app_labels = _app_run(tmp_path, _run_config(est), parts, ys, monkeypatch)
    _assert_same_run(est, out, app_labels)

    assert len(est.labels_) == len(parts)
    for i, P in enumerate(parts):
        assert est.labels_[i].shape == (len(P),) and est.labels_[i].dtype == np.int64
        # every client labels its rows as predict(rows, client=i) does
        np.testing.assert_array_equal(est.predict(P, client=i), est.labels_[i])
        if algorithm == "dgc":
            # DGC: node i labels with its OWN centres; predict(X) uses the network mean
            # (both nearest in the federation's scaled units, where the model lives)
            Z = est.feature_transform_.transform(P)
            own_scaled = est.strategy_.user_models()[i]
            np.testing.assert_array_equal(est.user_centers_[i],
                                          est.feature_transform_.inverse(own_scaled))
            own = ((Z[:, None, :] - own_scaled[None]) ** 2).sum(-1).argmin(1)
            np.testing.assert_array_equal(est.labels_[i], own)
            mean = ((Z[:, None, :] - est.strategy_.centroids[None]) ** 2).sum(-1).argmin(1)
            np.testing.assert_array_equal(est.predict(P), mean)
        else:  # one global model: the client changes nothing
            np.testing.assert_array_equal(est.predict(P), est.labels_[i])
    if algorithm == "dgc":
        assert est.user_centers_.shape == (4, 3, 4)
        np.testing.assert_allclose(est.user_centers_.mean(axis=0), est.cluster_centers_,
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(est.strategy_.user_models().mean(axis=0),
                                   est.strategy_.centroids, rtol=0, atol=1e-12)
    else:
        assert est.user_centers_ is None
    assert est.fit_predict(parts, ys) is est.labels_
    assert est.metrics_["num-examples"] == sum(len(P) for P in parts)


def test_get_set_params_and_clone_carry_the_algorithm_options():
    est = FederatedClustering("fkm", 3, random_state=1, max_rounds=5, tol=1e-3)
    params = est.get_params()
    assert params == {"algorithm": "fkm", "n_clusters": 3, "random_state": 1,
                      "min_nodes": None, "early_stop": True, "evaluate": True,
                      "scaling": "standard", "feature_columns": None,
                      "index_column": None, "categorical_columns": None,
                      "missing": "auto", "unit_check": "warn",
                      "categorical_weight": "balanced",
                      "datetime_columns": None, "robust_scaling": False,
                      "split_check": True, "refine_rounds": 0, "k_min": 2, "k_max": 10,
                      "k_rule": "silhouette",
                      "max_rounds": 5, "tol": 1e-3}
    copy = clone(est)
    assert copy is not est and copy.get_params() == params
    assert "max_rounds=5" in repr(est)

    assert est.set_params(max_rounds=7, n_clusters=4) is est
    assert est.get_params()["max_rounds"] == 7 and est.n_clusters == 4
    # switching algorithm: None drops an option the new algorithm lacks
    est.set_params(algorithm="kfed", max_rounds=None, tol=None, k_local=6)
    assert clone(est).get_params()["k_local"] == 6

    with pytest.raises(TypeError, match=r"unknown option\(s\) \['maxrounds'\].*max_rounds"):
        FederatedClustering("fkm", 3, maxrounds=5)
    with pytest.raises(TypeError, match="n_clusters"):
        FederatedClustering("kdc", k=3)
    with pytest.raises(TypeError, match="random_state"):
        FederatedClustering("fkm", seed=3)
    before = est.get_params()
    with pytest.raises(TypeError, match="psi"):  # a KDC option, not k-FED's
        est.set_params(psi=8)
    with pytest.raises(TypeError, match=r"\['tol'\]"):  # the switch leaves tol=None: fine;
        est.set_params(algorithm="feca", tol=1e-3)  # but feca has no tol
    assert est.get_params() == before  # a refused set_params changes nothing


def test_bad_values_are_the_options_errors_at_fit():
    parts, _ = _blobs("fkm")
    with pytest.raises(ValueError, match="max_rounds must be at least 1"):
        FederatedClustering("fkm", 3, max_rounds=0).fit(parts)
    with pytest.raises(ValueError, match="server_update must be one of"):
        FederatedClustering("fkm", 3, server_update="mean").fit(parts)
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        FederatedClustering("nope", 3).fit(parts)
    with pytest.raises(ValueError, match="k must be an integer"):
        FederatedClustering("fkm", 2.5).fit(parts)
    with pytest.raises(TypeError, match="RandomState or Generator"):
        FederatedClustering("fkm", 3, random_state=np.random.RandomState(0)).fit(parts)
    with pytest.raises(ValueError, match="min_nodes must be between 1 and the number of"):
        FederatedClustering("fkm", 3, min_nodes=5).fit(parts)


def test_random_state_changes_the_result_and_none_draws_a_seed():
    X, _ = make_blobs(200, centers=3, random_state=1)
    parts = np.array_split(X, 4)
    fit = {s: FederatedClustering("fkm", 8, random_state=s, max_rounds=3).fit(parts)
           for s in (0, 1)}
    again = FederatedClustering("fkm", 8, random_state=0, max_rounds=3).fit(parts)
    np.testing.assert_array_equal(fit[0].cluster_centers_, again.cluster_centers_)
    assert not np.array_equal(fit[0].cluster_centers_, fit[1].cluster_centers_)
    # NumPy scalars (a parameter grid's values) are fine
    same = FederatedClustering("fkm", np.int64(8), random_state=np.int64(0),
                               max_rounds=np.int64(3), early_stop=np.bool_(True)).fit(parts)
    np.testing.assert_array_equal(same.cluster_centers_, again.cluster_centers_)
    est = FederatedClustering("fkm", 8, random_state=None, max_rounds=3).fit(parts)
    redo = FederatedClustering("fkm", 8, random_state=est.seed_, max_rounds=3).fit(parts)
    np.testing.assert_array_equal(est.cluster_centers_, redo.cluster_centers_)


def test_evaluate_false_gives_the_same_model_without_metrics():
    parts, ys = _blobs("fkm")
    a = FederatedClustering("fkm", 3).fit(parts, ys)
    b = FederatedClustering("fkm", 3, evaluate=False).fit(parts, ys)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    for la, lb in zip(a.labels_, b.labels_, strict=True):
        np.testing.assert_array_equal(la, lb)
    assert "ari" in a.metrics_ and b.metrics_ == {}


def test_predict_before_fit_and_bad_input():
    est = FederatedClustering("fkm", 3)
    with pytest.raises(NotFittedError):
        est.predict(np.zeros((2, 4)))
    parts, _ = _blobs("fkm")
    with pytest.raises(ValueError, match="list of 2-D arrays, one per client; got one array"):
        est.fit(np.vstack(parts))
    with pytest.raises(ValueError, match="partitions is empty"):
        est.fit([])
    with pytest.raises(ValueError, match=r"partitions\[1\] must be a 2-D array"):
        est.fit([parts[0], parts[1][0]])
    with pytest.raises(ValueError, match=r"partitions\[1\] has 3 features, partitions\[0\] has 4"):
        est.fit([parts[0], parts[1][:, :3]])
    with pytest.raises(ValueError, match=r"partitions\[1\] is empty"):
        est.fit([parts[0], parts[1][:0]])
    bad = [P.copy() for P in parts]
    bad[2][0, 1] = np.nan
    with pytest.raises(ValueError, match="client 2 data contains NaN"):
        clone(est).set_params(missing="refuse").fit(bad)
    with pytest.raises(ValueError, match=r"labels\[0\] has shape"):
        est.fit(parts, [np.zeros(3, int)] * 4)
    est.fit(parts)
    assert not hasattr(FederatedClustering("fkm", 3), "labels_")
    with pytest.raises(ValueError, match="X has 2 features, but FederatedClustering is "
                                         "fitted with 4"):
        est.predict(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN or inf"):
        est.predict(np.full((1, 4), np.inf))
    # missing='mean' (the default): a new row's missing cell is the federation's mean
    mean = np.asarray(est.feature_transform_.fill)
    np.testing.assert_array_equal(est.predict(np.full((1, 4), np.nan)), est.predict(mean[None]))
    with pytest.raises(ValueError, match=r"client must be a client index in \[0, 4\)"):
        est.predict(parts[0], client=4)
    assert "labels_" not in clone(est).__dict__  # clone gives an unfitted estimator


def test_importing_the_package_stays_cheap_and_the_name_resolves():
    code = ("import sys, flwr_clustering as fc; "
            "print(' '.join(m for m in ('sklearn', 'flwr', 'scipy') if m in sys.modules)); "
            "assert 'FederatedClustering' in dir(fc); "
            "from flwr_clustering import FederatedClustering; "
            "print(FederatedClustering.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["", "flwr_clustering.estimator"]


def _snippets(path, tag):
    pattern = r"<!-- readme-test: ([\w-]+) -->\n```python\n(.*?)```"
    return [code for t, code in re.findall(pattern, path.read_text(), re.S) if t == tag]


def test_docs_snippet_runs(capsys):
    (code,) = _snippets(ROOT / "docs" / "estimator.md", "estimator")
    exec(compile(code, "docs/estimator.md:estimator", "exec"), {})
    out = capsys.readouterr().out
    assert float(re.search(r"ARI ([0-9.]+)", out).group(1)) > 0.8


def test_readme_snippet_runs(capsys):
    (code,) = _snippets(ROOT / "README.md", "estimator")
    exec(compile(code, "README.md:estimator", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("(3, 13) ARI ")
    assert float(re.search(r"ARI ([0-9.]+)", out).group(1)) > 0.8


# ------------------------------------------------- real data: DataFrames, names, scaling
WINE_SIZES = (59, 66, 53)


def _wine_frames(reverse_site_1=True):
    """Wine in raw units as 3 sites' DataFrames (59/66/53 rows), site 1's columns reversed."""
    wine = load_wine(as_frame=True)
    order = np.random.default_rng(0).permutation(len(wine.data))
    idx = np.split(order, np.cumsum(WINE_SIZES)[:-1])
    frames = [wine.data.iloc[i].reset_index(drop=True) for i in idx]
    if reverse_site_1:
        frames[1] = frames[1][frames[1].columns[::-1]]
    return wine.data, wine.target.to_numpy(), idx, frames


@pytest.fixture(scope="module")
def wine_fit():
    """FKM on the raw wine frames (default scaling='standard'), fitted once per module."""
    df, y, idx, frames = _wine_frames()
    est = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(frames)
    return df, y, idx, frames, est


def test_dataframes_are_matched_by_name_scaled_and_reported_in_raw_units(wine_fit):
    df, y, idx, frames, est = wine_fit
    assert [len(f) for f in frames] == list(WINE_SIZES)
    assert list(frames[1].columns) == list(df.columns[::-1])
    # the federation's order is the one most sites use: the original one
    assert isinstance(est.feature_names_in_, np.ndarray) and est.feature_names_in_.dtype == object
    assert list(est.feature_names_in_) == list(df.columns) and est.n_features_in_ == 13
    assert est.scaling_ == "standard" and est.feature_transform_.scaling == "standard"
    assert est.feature_transform_.features == tuple(df.columns)
    # the federation's scaling is StandardScaler's on the pooled rows
    scaler = StandardScaler().fit(df)
    np.testing.assert_allclose(est.feature_transform_.center, scaler.mean_, rtol=1e-12)
    np.testing.assert_allclose(est.feature_transform_.scale, scaler.scale_, rtol=1e-12)
    # the model lives in the scaled units; cluster_centers_ in the data's own units
    np.testing.assert_array_equal(est.cluster_centers_,
                                  est.feature_transform_.inverse(est.strategy_.centroids))
    assert est.cluster_centers_.dtype == np.float64 and est.cluster_centers_.shape == (3, 13)
    proline = est.cluster_centers_[:, list(df.columns).index("proline")]
    assert np.all((proline >= df["proline"].min()) & (proline <= df["proline"].max()))
    assert proline.max() > 500  # mg/l, not z-scores
    # clusters as well as centralized k-means on the standardised pooled rows
    fed = adjusted_rand_score(np.concatenate([y[i] for i in idx]), np.concatenate(est.labels_))
    central = adjusted_rand_score(
        y, KMeans(3, n_init=10, random_state=0).fit_predict(scaler.transform(df)))
    assert fed >= central - 0.05, (fed, central)
    # a client labelled its rows as predict does, whatever the frame's column order
    for i, frame in enumerate(frames):
        np.testing.assert_array_equal(est.predict(frame), est.labels_[i])
        np.testing.assert_array_equal(est.predict(frame, client=i), est.labels_[i])
        shuffled = frame[frame.columns[np.random.default_rng(i).permutation(13)]]
        np.testing.assert_array_equal(est.predict(shuffled), est.labels_[i])
    assert est.predict(frames[0].iloc[:0]).shape == (0,)
    # a fitted estimator pickles with its transform and names
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(frames[2]), est.labels_[2])


def test_the_sites_column_order_does_not_change_the_clustering(wine_fit):
    *_, est = wine_fit
    _, _, _, frames = _wine_frames(reverse_site_1=False)
    same = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(frames)
    assert list(same.feature_names_in_) == list(est.feature_names_in_)
    np.testing.assert_array_equal(same.cluster_centers_, est.cluster_centers_)
    for a, b in zip(same.labels_, est.labels_, strict=True):
        np.testing.assert_array_equal(a, b)


def test_scaling_none_warns_about_the_widest_feature_and_minmax_works():
    _, _, _, frames = _wine_frames()
    raw = FederatedClustering("fkm", n_clusters=3, random_state=0, scaling="none").fit(frames)
    assert raw.scaling_ == "none" and not raw.feature_transform_.scaled
    hits = [w for w in raw.warnings_ if "'proline'" in w and "scaling='standard'" in w]
    assert len(hits) == 1, raw.warnings_
    np.testing.assert_array_equal(raw.cluster_centers_, raw.strategy_.centroids)
    mm = FederatedClustering("fkm", n_clusters=3, random_state=0, scaling="minmax",
                             max_rounds=5).fit(frames)
    assert mm.scaling_ == "minmax" and not any("scaling='none'" in w for w in mm.warnings_)
    pooled = np.vstack([f[list(mm.feature_names_in_)].to_numpy() for f in frames])
    np.testing.assert_array_equal(mm.feature_transform_.center, pooled.min(axis=0))
    for i, frame in enumerate(frames):
        np.testing.assert_array_equal(mm.predict(frame), mm.labels_[i])
        np.testing.assert_array_equal(raw.predict(frame), raw.labels_[i])


def test_an_identifier_column_must_be_declared(wine_fit):
    *_, idx, frames, plain = wine_fit
    ids = 2_000_000_000 + np.random.default_rng(1).permutation(178) * 33_000_000  # 2e9..8e9
    with_ids = [f.assign(patient_id=ids[i]) for f, i in zip(frames, idx, strict=True)]
    with pytest.raises(ValueError, match=r"(?s)'patient_id'.*index-column") as info:
        FederatedClustering("fkm", n_clusters=3, random_state=0).fit(with_ids)
    assert type(info.value).__name__ == "SchemaError"  # the strategy's, not a RuntimeError
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              index_column="patient_id").fit(with_ids)
    assert "patient_id" not in est.feature_names_in_ and est.n_features_in_ == 13
    assert est._run_config(3, 0)["index-column"] == "patient_id"
    for i, frame in enumerate(with_ids):  # the index is ignored; the clustering is the same
        np.testing.assert_array_equal(est.labels_[i], plain.labels_[i])
        np.testing.assert_array_equal(est.predict(frame), est.labels_[i])
    with pytest.raises(ValueError, match=r"column\(s\) \['extra'\].*not fitted with"):
        est.predict(with_ids[0].assign(extra=1.0))


def test_a_renamed_column_names_the_site():
    _, _, _, frames = _wine_frames()
    frames[1] = frames[1].rename(columns={"hue": "Hue"})
    with pytest.raises(ValueError, match=r"client 1.*'Hue'"):
        FederatedClustering("fkm", n_clusters=3, random_state=0).fit(frames)


def test_a_text_column_is_refused_unless_left_out_of_feature_columns(wine_fit):
    df, _, _, frames, plain = wine_fit
    regions = np.array(["north", "south", "east"])
    texts = [f.assign(region=regions[np.arange(len(f)) % 3]) for f in frames]
    with pytest.raises(ValueError, match="text column.*'region'"):
        FederatedClustering("fkm", n_clusters=3, random_state=0).fit(texts)
    numeric = list(df.columns)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              feature_columns=numeric).fit(texts)
    assert list(est.feature_names_in_) == numeric
    assert est._run_config(3, 0)["feature-columns"] == ",".join(numeric)
    for i, frame in enumerate(texts):  # the other columns are ignored, by fit and predict
        np.testing.assert_array_equal(est.labels_[i], plain.labels_[i])
        np.testing.assert_array_equal(est.predict(frame.assign(note="x")), est.labels_[i])
    # a column mixing numbers and text is named with its row
    bad = [f.copy() for f in frames]
    bad[2]["hue"] = bad[2]["hue"].astype(object)
    bad[2].loc[4, "hue"] = "n/a"
    with pytest.raises(ValueError, match=r"partitions\[2\].*'n/a'.*'hue'.*row 5"):
        FederatedClustering("fkm", n_clusters=3).fit(bad)


def test_predict_aligns_dataframes_and_warns_on_arrays(wine_fit):
    *_, frames, est = wine_fit
    with pytest.raises(ValueError, match=r"lacks the feature column\(s\) \['hue'\]"):
        est.predict(frames[0].drop(columns="hue"))
    with pytest.raises(ValueError, match=r"column\(s\) \['color'\].*not fitted with"):
        est.predict(frames[0].assign(color=1.0))
    rows = frames[0][list(est.feature_names_in_)].to_numpy()
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        labels = est.predict(rows)
    np.testing.assert_array_equal(labels, est.labels_[0])
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="X has 12 features"):
        est.predict(rows[:, :12])
    # fitted on arrays: no feature names, and a DataFrame is read by position
    parts = [f[list(est.feature_names_in_)].to_numpy() for f in frames]
    arr = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(parts)
    assert not hasattr(arr, "feature_names_in_") and arr.n_features_in_ == 13
    assert arr.feature_transform_.features == tuple(str(j) for j in range(13))
    for a, b in zip(arr.labels_, est.labels_, strict=True):  # same columns by position
        np.testing.assert_array_equal(a, b)
    with pytest.warns(UserWarning, match="X has feature names, but"):
        np.testing.assert_array_equal(arr.predict(frames[0][list(est.feature_names_in_)]),
                                      est.labels_[0])
    # a refit on arrays drops the names of a fit on DataFrames
    est2 = clone(est).fit(frames)
    assert hasattr(est2, "feature_names_in_")
    assert not hasattr(est2.fit(parts), "feature_names_in_")


def test_dataframes_with_float32_and_masked_algorithms_predict_as_the_clients():
    _, _, _, frames = _wine_frames()
    f32 = FederatedClustering("fkm", n_clusters=3, random_state=0, dtype="float32",
                              max_rounds=5).fit(frames)
    assert f32.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(
        f32.cluster_centers_,
        f32.feature_transform_.inverse(f32.strategy_.centroids).astype(np.float32))
    for i, frame in enumerate(frames):
        np.testing.assert_array_equal(f32.predict(frame), f32.labels_[i])
    # masked: each site misses one feature (NaN); NaN stays NaN through the scaling
    masked = [f.copy() for f in frames]
    for i, f in enumerate(masked):
        f[["ash", "hue", "magnesium"][i]] = np.nan
    est = FederatedClustering("masked-oneshot", n_clusters=3, random_state=0,
                              k_local=3).fit(masked)
    assert list(est.feature_names_in_) == list(frames[0].columns)
    for i, frame in enumerate(masked):
        np.testing.assert_array_equal(est.predict(frame, client=i), est.labels_[i])
    np.testing.assert_array_equal(np.isnan(est.cluster_centers_),
                                  np.isnan(est.strategy_.centroids))


def test_dataframe_input_errors():
    _, _, _, frames = _wine_frames()
    with pytest.raises(ValueError, match=r"mixes DataFrames \(partitions\[0\]\) and arrays "
                                         r"\(partitions\[1\]\)"):
        FederatedClustering("fkm", 3).fit([frames[0], frames[1].to_numpy()])
    with pytest.raises(ValueError, match=r"partitions\[1\] is empty"):
        FederatedClustering("fkm", 3).fit([frames[0], frames[1].iloc[:0]])
    with pytest.raises(ValueError, match=r"labels\[0\] has shape"):
        FederatedClustering("fkm", 3).fit(frames, [np.zeros(3, int)] * 3)
    with pytest.raises(ValueError, match="must be a list of column names"):
        FederatedClustering("fkm", 3, feature_columns="hue,ash").fit(frames)
    with pytest.raises(ValueError, match="scaling must be one of"):
        FederatedClustering("fkm", 3, scaling="zscore").fit(frames)
    with pytest.raises(ValueError, match="'deepfeca' takes its rows as they are"):
        FederatedClustering("deepfeca", 3).fit(frames)


def test_get_params_and_clone_carry_the_feature_parameters():
    est = FederatedClustering("fkm", 3, scaling="minmax", feature_columns=["a", "b"],
                              index_column="id", max_rounds=5)
    params = est.get_params()
    assert {k: params[k] for k in ("scaling", "feature_columns", "index_column")} == {
        "scaling": "minmax", "feature_columns": ["a", "b"], "index_column": "id"}
    assert "max_rounds" in params and "scaling" not in est.algorithm_options
    copy = clone(est)
    assert copy.get_params() == params and copy.feature_columns is not est.feature_columns
    assert est.set_params(scaling="none", feature_columns=None) is est
    assert est.scaling == "none" and est.feature_columns is None
    assert est.algorithm_options == {"max_rounds": 5}
    rc = est.set_params(feature_columns=("a", "b")).set_params(
        index_column=None)._run_config(2, 0)
    assert (rc["scaling"], rc["feature-columns"], rc["index-column"]) == ("none", "a,b", "")


def _doc_snippet(path, tag):
    pattern = r"<!-- estimator-test: ([\w-]+) -->\n```python\n(.*?)```"
    return [code for t, code in re.findall(pattern, path.read_text(), re.S) if t == tag]


def test_docs_dataframe_snippet_runs(capsys):
    (code,) = _doc_snippet(ROOT / "docs" / "estimator.md", "dataframes")
    ns = {}
    exec(compile(code, "docs/estimator.md:dataframes", "exec"), ns)
    first, second, third = capsys.readouterr().out.splitlines()[:3]
    assert first.startswith("13 proline standard ARI ")
    assert float(re.search(r"ARI ([0-9.]+)", first).group(1)) > 0.8
    assert "patient_id" not in ns["est"].feature_names_in_
    labels = ns["est"].predict(ns["frames"][0])
    np.testing.assert_array_equal(labels, ns["est"].labels_[0])


@pytest.mark.parametrize("algorithm", ["mavg", "kfed", "feca", "fkm"])
def test_a_minority_that_withholds_is_named_and_the_fit_completes_with_the_rest(algorithm):
    # Issue 38: a site too small for the privacy threshold (3 rows, k = 3) withholds its
    # reply; with min_nodes = every client the fit failed. The default is a majority.
    from sklearn.datasets import make_blobs

    from flwr_clustering.estimator import default_min_nodes

    X, _ = make_blobs(603, n_features=2, centers=3, random_state=0)
    parts = [X[:150], X[150:300], X[300:450], X[450:600], X[600:]]
    withholds = algorithm in ("mavg", "kfed")  # they upload per-cluster values
    if withholds:  # a model without a site is never silent, logging configured or not
        with pytest.warns(UserWarning, match=r"built without 1 of 5 clients \(client 4"):
            est = FederatedClustering(algorithm, n_clusters=3).fit(parts)
    else:
        est = FederatedClustering(algorithm, n_clusters=3).fit(parts)
        assert not est.diagnostics_.get("absent")
    assert default_min_nodes(algorithm, 5) == 3
    assert est.cluster_centers_.shape == (3, 2) and np.isfinite(est.cluster_centers_).all()
    if withholds:
        assert [h["clients"] for h in est.history_] == [4]
        assert any("client 4 (node" in w and "without them" in w for w in est.warnings_), (
            est.warnings_)
    # every site, the small one too, receives the model and labels its own rows
    assert [len(labels) for labels in est.labels_] == [150, 150, 150, 150, 3]
    # an explicit min_nodes of every client still stops the fit, naming the site
    if withholds:
        with pytest.raises(RuntimeError, match=r"client 4 \(node 104\)"):
            FederatedClustering(algorithm, n_clusters=3, min_nodes=5).fit(parts)


def test_a_majority_is_required_and_dgc_needs_every_client():
    from sklearn.datasets import make_blobs

    from flwr_clustering.estimator import default_min_nodes

    assert [default_min_nodes("mavg", n) for n in (1, 2, 3, 4, 5, 10)] == [1, 2, 2, 3, 3, 6]
    assert default_min_nodes("dgc", 5) == 5
    X, _ = make_blobs(309, n_features=2, centers=3, random_state=0)
    # 3 of 5 sites too small: fewer valid replies than a majority, the fit fails naming them
    parts = [X[:150], X[150:300], X[300:303], X[303:306], X[306:]]
    with pytest.raises(RuntimeError, match="only 2 valid replies, fewer than min_nodes=3"):
        FederatedClustering("mavg", n_clusters=3).fit(parts)
    est = FederatedClustering("dgc", n_clusters=3, iterations=2).fit(parts[:3] + [X[:150]])
    assert est.strategy_.min_nodes == 4
