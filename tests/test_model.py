"""The model a site keeps: one JSON file, loadable and usable without the server or Flower."""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flwr_clustering
from flwr_clustering.algorithms.lloyd import nearest_labels
from flwr_clustering.algorithms.masked import pooled_masked_squared_distances
from flwr_clustering.data.schema import FeatureTransform, column_moments, scaling_from_moments
from flwr_clustering.model import MODEL_FORMAT, ClusteringModel, load_model


@pytest.fixture(scope="module")
def wine() -> pd.DataFrame:
    from sklearn.datasets import load_wine

    return load_wine(as_frame=True).frame.drop(columns="target")


def _standard(frame: pd.DataFrame) -> FeatureTransform:
    m = column_moments(frame.to_numpy(dtype=np.float64))
    center, scale = scaling_from_moments("standard", m["count"], m["sum"], m["sumsq"])
    return FeatureTransform(tuple(frame.columns), "standard", tuple(center.tolist()),
                            tuple(scale.tolist()))


@pytest.fixture(scope="module")
def model(wine) -> ClusteringModel:
    from sklearn.cluster import KMeans

    t = _standard(wine)
    Z = t.transform(wine.to_numpy())
    C = KMeans(n_clusters=3, n_init=1, random_state=0).fit(Z).cluster_centers_
    return ClusteringModel(algorithm="fkm", k=3, feature_names=tuple(wine.columns), transform=t,
                           centroids=C, options={"k": 3, "scaling": "standard",
                                                 "seed": np.int64(0), "tol": np.float64(1e-4)})


def _masked_model(wine) -> ClusteringModel:
    t = _standard(wine)
    rng = np.random.default_rng(1)
    C = t.transform(wine.to_numpy()[rng.choice(len(wine), 4, replace=False)])
    C[1, [0, 3]] = np.nan  # no contributor of cluster 1 observed features 0 and 3
    C[2, 5] = np.nan
    return ClusteringModel("masked-a", 4, tuple(wine.columns), t, C,
                           labelling="masked-nearest-centroid")


def test_round_trip_keeps_every_field_and_exact_centroids(model, tmp_path):
    path = model.save(tmp_path / "model.json")
    loaded = load_model(path)
    assert loaded == model
    assert loaded.transform == model.transform and loaded.transform.scaling == "standard"
    assert loaded.feature_names == model.feature_names
    assert (loaded.algorithm, loaded.k, loaded.labelling) == ("fkm", 3, "nearest-centroid")
    assert loaded.options == {"k": 3, "scaling": "standard", "seed": 0, "tol": 1e-4}
    assert loaded.library_version == flwr_clustering.__version__
    assert np.array_equal(loaded.centroids, model.centroids)  # bit-identical
    assert np.array_equal(loaded.centroids_original, model.transform.inverse(model.centroids))
    # the readable centroids are the original units, the scaled ones are exact
    data = json.loads(path.read_text())
    assert data["format"] == MODEL_FORMAT
    assert set(data) == {"format", "algorithm", "k", "feature_names", "scaling", "center",
                         "scale", "categories", "missing", "fill", "centroids",
                         "model-centroids", "labelling", "options", "library-version"}
    assert np.array_equal(np.array(data["centroids"]), model.centroids_original)
    assert np.array_equal(np.array(data["model-centroids"]), model.centroids)
    assert not np.allclose(np.array(data["centroids"]), model.centroids)  # really unscaled
    assert path.read_text().startswith('{\n "format"')  # indent=1
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write leaves no temporary file


def test_unscaled_model_round_trips_with_empty_scaling(wine, tmp_path):
    t = FeatureTransform(tuple(wine.columns[:3]))
    C = wine.iloc[:2, :3].to_numpy()
    m = ClusteringModel("lloyd", 2, tuple(wine.columns[:3]), t, C)
    data = m.to_dict()
    assert data["scaling"] == "none" and data["center"] == [] and data["scale"] == []
    assert np.array_equal(m.centroids_original, C)
    loaded = load_model(m.save(tmp_path / "model.json"))
    assert loaded == m and not loaded.transform.scaled


def test_predict_dataframe_by_name_ignores_extra_columns(model, wine, caplog):
    rng = np.random.default_rng(0)
    order = list(rng.permutation(wine.columns))
    assert order != list(wine.columns)
    frame = wine[order].assign(patient_id=np.arange(len(wine)) + 1000)
    with caplog.at_level(logging.INFO, logger="flwr_clustering.model"):
        labels = model.predict(frame)
    assert "patient_id" in caplog.text
    in_order = wine[list(model.feature_names)].to_numpy()
    expected = nearest_labels(model.transform.transform(in_order), model.centroids)
    assert labels.dtype == np.int64 and labels.shape == (len(wine),)
    assert np.array_equal(labels, expected)
    assert len(np.unique(labels)) == 3
    assert np.array_equal(model.predict(in_order), labels)
    # the scaling is applied: labelling the raw rows directly gives other labels
    assert not np.array_equal(nearest_labels(in_order, model.centroids), labels)


def test_predict_numeric_text_column_and_integer_columns(model, wine):
    frame = wine.astype({"proline": "int64"}).astype({"alcohol": str})
    expected = model.predict(wine.astype({"proline": "int64"}))
    assert np.array_equal(model.predict(frame), expected)
    frame.loc[5, "alcohol"] = "n/a"
    with pytest.raises(ValueError, match="'alcohol'.*text"):
        model.predict(frame)


def test_predict_refuses_missing_columns_wrong_width_and_nan(model, wine):
    with pytest.raises(ValueError, match=r"lack column\(s\) \['hue'\].*features are"):
        model.predict(wine.drop(columns="hue"))
    with pytest.raises(ValueError, match=r"12 columns, the model 13"):
        model.predict(wine.to_numpy()[:, :12])
    with pytest.raises(ValueError, match="2-D"):
        model.predict(wine.to_numpy()[0])
    bad = wine.copy()
    bad.loc[7, "magnesium"] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf.*row 7, column 'magnesium'"):
        model.predict(bad)
    with pytest.raises(ValueError, match="NaN or inf"):
        model.predict(bad.to_numpy())


def test_predict_empty_input(model, wine):
    for empty in (wine.iloc[:0], np.empty((0, 13)), []):
        out = model.predict(empty)
        assert out.dtype == np.int64 and out.shape == (0,)


def test_masked_labelling_uses_observed_features(wine, tmp_path):
    m = _masked_model(wine)
    X = wine.to_numpy(dtype=np.float64).copy()
    X[::2, [1, 4, 6]] = np.nan  # half of the rows: a site that does not observe 3 features
    X[1::4, 0] = np.nan
    labels = m.predict(X)
    expected = pooled_masked_squared_distances(m.transform.transform(X), m.centroids).argmin(1)
    assert np.array_equal(labels, expected)
    assert len(np.unique(labels)) > 1
    # the rows' NaN entries matter: imputing them by zero in the scaled space changes labels
    Z0 = np.nan_to_num(m.transform.transform(X))
    assert not np.array_equal(
        pooled_masked_squared_distances(Z0, m.centroids).argmin(1), labels)
    loaded = load_model(m.save(tmp_path / "model.json"))
    assert np.array_equal(loaded.predict(pd.DataFrame(X, columns=m.feature_names)), labels)
    X[3] = np.nan
    with pytest.raises(ValueError, match="observe no feature"):
        m.predict(X)


def test_nan_centroids_are_strict_json_null(wine, tmp_path):
    m = _masked_model(wine)
    path = m.save(tmp_path / "model.json")
    text = path.read_text()
    assert "null" in text and "NaN" not in text

    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    data = json.loads(text, parse_constant=refuse)
    assert data["model-centroids"][1][0] is None and data["centroids"][2][5] is None
    loaded = load_model(path)
    assert np.array_equal(np.isnan(loaded.centroids), np.isnan(m.centroids))
    assert np.array_equal(loaded.centroids, m.centroids, equal_nan=True)
    assert np.isnan(loaded.centroids_original[1, 3])


def _write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_bad_files_are_named(model, tmp_path):
    good = model.to_dict()
    with pytest.raises(FileNotFoundError, match="nothere.json"):
        load_model(tmp_path / "nothere.json")
    path = _write(tmp_path / "text.json", "k,3\n")
    with pytest.raises(ValueError, match=r"text\.json.*not JSON"):
        load_model(path)
    path = _write(tmp_path / "other.json", {**good, "format": "someone-else/2"})
    with pytest.raises(ValueError, match=r"other\.json.*'someone-else/2'"):
        load_model(path)
    path = _write(tmp_path / "noformat.json", {"centroids": good["centroids"]})
    with pytest.raises(ValueError, match=r"noformat\.json.*'format'"):
        load_model(path)
    path = _write(tmp_path / "nokey.json", {k: v for k, v in good.items() if k != "scaling"})
    with pytest.raises(ValueError, match=r"nokey\.json.*\['scaling'\]"):
        load_model(path)
    path = _write(tmp_path / "list.json", [1, 2])
    with pytest.raises(ValueError, match=r"list\.json"):
        load_model(path)
    edited = {**good, "centroids": [[v + 1.0 for v in row] for row in good["centroids"]]}
    with pytest.raises(ValueError, match="edited"):
        load_model(_write(tmp_path / "edited.json", edited))
    names = {**good, "feature_names": good["feature_names"][:-1]}
    with pytest.raises(ValueError, match=r"names\.json.*for 12 features"):
        load_model(_write(tmp_path / "names.json", names))


def test_invalid_models_are_refused(model):
    t, C, names = model.transform, model.centroids, model.feature_names
    with pytest.raises(ValueError, match="k = 4 but there are 3"):
        ClusteringModel("fkm", 4, names, t, C)
    with pytest.raises(ValueError, match="12 feature names"):
        ClusteringModel("fkm", 3, names[:-1], t, C)
    with pytest.raises(ValueError, match="2-D"):
        ClusteringModel("fkm", 3, names, t, C[0])
    nan = C.copy()
    nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ClusteringModel("fkm", 3, names, t, nan)
    with pytest.raises(ValueError, match="options"):
        ClusteringModel("fkm", 3, names, t, C, options={"f": object()})
    other = FeatureTransform(tuple(reversed(names)), t.scaling, t.center, t.scale)
    with pytest.raises(ValueError, match="transform's features"):
        ClusteringModel("fkm", 3, names, other, C)


def test_kernel_labelling_is_stored_but_not_predicted(model, wine, tmp_path):
    kdc = ClusteringModel("kdc", 3, model.feature_names, model.transform, model.centroids,
                          labelling="kernel")
    loaded = load_model(kdc.save(tmp_path / "model.json"))
    assert loaded == kdc and loaded.labelling == "kernel"
    assert "kdc" in repr(loaded) and "kernel" in loaded.describe()
    with pytest.raises(ValueError, match=r"'kdc'.*kdc_model\.npz"):
        loaded.predict(wine)


def test_model_module_does_not_import_flower_or_pandas():
    code = ("import sys, flwr_clustering.model; "
            "print('flwr' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]
    # and its own imports: the standard library, NumPy and the package at the top level,
    # pandas (and the package) only inside functions
    source = Path(flwr_clustering.__file__).with_name("model.py").read_text()
    top, inner = set(), set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""])
            (top if node in tree.body else inner).update(m.split(".")[0] for m in mods)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert top - stdlib == {"numpy", "flwr_clustering"}
    assert inner - stdlib <= {"pandas", "flwr_clustering"} and "pandas" in inner


def test_a_model_with_categorical_columns_predicts_from_a_dataframe(tmp_path):
    from flwr_clustering.data.schema import FeatureTable, one_hot_name

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=40), "city": rng.choice(["a", "b"], 40)})
    levels = ("a", "b", "other")
    features = ("x", *(one_hot_name("city", v) for v in levels))
    transform = FeatureTransform(features, "standard", (0.5, 0.4, 0.6, 0.0),
                                 (2.0, 0.5, 0.5, 1.0), (("city", levels),))
    centroids = np.array([[0.0, 1.0, -1.0, 0.0], [0.0, -1.0, 1.0, 0.0]])
    model = ClusteringModel(algorithm="fkm", k=2, feature_names=features, transform=transform,
                            centroids=centroids)
    loaded = load_model(model.save(tmp_path / "model.json"))
    assert loaded.transform.categories == (("city", levels),)
    expected = nearest_labels(transform.apply(FeatureTable.from_frame(frame)), centroids)
    shuffled = frame[["city", "x"]].assign(patient_id=np.arange(40))
    np.testing.assert_array_equal(loaded.predict(shuffled), expected)
    np.testing.assert_array_equal(expected, (frame["city"] == "b").to_numpy().astype(int))
    with pytest.raises(ValueError, match="city"):
        loaded.predict(frame[["x"]])
    with pytest.raises(ValueError, match="DataFrame"):
        loaded.predict(frame[["x"]].to_numpy())
