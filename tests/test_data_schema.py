"""The federation's schema and scaling (flwr_clustering.data.schema): pure, no Flower."""

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from flwr_clustering.data.schema import (
    MIN_ID_ROWS,
    FeatureTable,
    FeatureTransform,
    SchemaError,
    agree_schema,
    column_moments,
    describe_columns,
    looks_like_id_name,
    scaling_from_moments,
    spread_warning,
)


def _wine_sites(n_sites=3, seed=0):
    data = load_wine(as_frame=True)
    frame = data.frame.drop(columns="target")
    idx = np.array_split(np.random.default_rng(seed).permutation(len(frame)), n_sites)
    return [frame.iloc[i].reset_index(drop=True) for i in idx]


def _sites(frames):
    return {f"client {i}": describe_columns(FeatureTable.from_frame(f))
            for i, f in enumerate(frames)}


def test_same_columns_in_another_order_agree_by_name():
    frames = _wine_sites()
    names = list(frames[0].columns)
    frames[1] = frames[1][names[::-1]]
    schema = agree_schema(_sites(frames))
    # two of three sites share the file's order: that order is the federation's
    assert schema.features == tuple(names)
    transform = FeatureTransform(schema.features)
    X1 = transform.apply(FeatureTable.from_frame(frames[1]))
    np.testing.assert_array_equal(X1, frames[1][names].to_numpy())


def test_order_tie_goes_to_the_first_site():
    frames = _wine_sites(2)
    names = list(frames[0].columns)
    frames[0] = frames[0][names[::-1]]
    assert agree_schema(_sites(frames)).features == tuple(names[::-1])


def test_a_renamed_column_is_refused_naming_site_and_spelling():
    frames = _wine_sites()
    frames[2] = frames[2].rename(columns={"hue": "Hue"})
    with pytest.raises(SchemaError) as err:
        agree_schema(_sites(frames))
    text = str(err.value)
    assert "client 2" in text and "'Hue'" in text and "'hue' may be" not in text
    assert "'Hue' may be 'hue'" in text and "feature-columns" in text


def test_a_missing_or_extra_column_is_refused():
    frames = _wine_sites()
    frames[1] = frames[1].drop(columns="proline")
    with pytest.raises(SchemaError, match=r"client 1 lacks 'proline'"):
        agree_schema(_sites(frames))
    frames = _wine_sites()
    frames[0]["site_note"] = 1.5
    with pytest.raises(SchemaError, match=r"client 0 has 'site_note'"):
        agree_schema(_sites(frames))


def test_feature_columns_select_and_order_and_name_missing_ones():
    frames = _wine_sites()
    frames[0]["extra"] = 0.0
    schema = agree_schema(_sites(frames), feature_columns=["proline", "hue"])
    assert schema.features == ("proline", "hue")
    with pytest.raises(SchemaError, match=r"client 1 has no column 'colour'"):
        agree_schema(_sites(frames), feature_columns=["proline", "colour"])


def test_positional_columns_must_agree_on_width():
    a = FeatureTable(np.zeros((40, 3)))
    b = FeatureTable(np.zeros((40, 4)))
    sites = {"client 0": describe_columns(a), "client 1": describe_columns(a),
             "client 2": describe_columns(b)}
    with pytest.raises(SchemaError, match=r"client 2 has 4.*header row"):
        agree_schema(sites)
    sites["client 2"] = describe_columns(a)
    assert agree_schema(sites).features == ("0", "1", "2")


@pytest.mark.parametrize("name", ["patient_id", "PatientID", "id", "record_uuid", "MRN"])
def test_id_named_columns(name):
    assert looks_like_id_name(name)


@pytest.mark.parametrize("name", ["proline", "idle_time", "width", "hidden", "valid"])
def test_feature_names_are_not_ids(name):
    assert not looks_like_id_name(name)


def test_an_id_column_is_refused_unless_declared_or_listed():
    frames = _wine_sites()
    rng = np.random.default_rng(1)
    for f in frames:
        f.insert(0, "patient_id", rng.integers(2e9, 8e9, len(f)))
    with pytest.raises(SchemaError, match=r"'patient_id' look like identifiers.*index-column"):
        agree_schema(_sites(frames))
    schema = agree_schema(_sites(frames), index_column="patient_id")
    assert "patient_id" not in schema.features and len(schema.features) == 13
    listed = agree_schema(_sites(frames), feature_columns=["patient_id", "hue"])
    assert listed.features == ("patient_id", "hue")


def test_unique_integers_without_an_id_name_are_an_id_only_at_large_sites():
    frames = _wine_sites()
    for f in frames:
        f["code"] = np.arange(len(f)) * 7 + 1000
    with pytest.raises(SchemaError, match="'code'"):
        agree_schema(_sites(frames))
    small = [f.iloc[: MIN_ID_ROWS - 1] for f in frames]
    assert "code" in agree_schema(_sites(small)).features


def test_wine_and_breast_cancer_raw_columns_are_not_ids():
    for loader in (load_wine, load_breast_cancer):
        frame = loader(as_frame=True).frame.drop(columns="target")
        for n_sites in (3, 5, 10):
            idx = np.array_split(np.random.default_rng(0).permutation(len(frame)), n_sites)
            sites = _sites([frame.iloc[i] for i in idx])
            assert len(agree_schema(sites).features) == frame.shape[1]


def test_a_text_column_is_refused_naming_it():
    frames = _wine_sites()
    for f in frames:
        f["city"] = np.where(np.arange(len(f)) % 2, "Leiden", "Delft")
    with pytest.raises(SchemaError, match=r"text column.*'city' at client 0, client 1"):
        agree_schema(_sites(frames))
    assert "city" not in agree_schema(
        _sites(frames), feature_columns=list(frames[0].columns[:-1])).features


def test_mixed_numbers_and_text_name_the_row():
    frame = pd.DataFrame({"a": ["1.5", "2.5", "n/a?"], "b": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"'n/a\?' in column 'a' \(data row 3"):
        FeatureTable.from_frame(frame)


@pytest.mark.parametrize("loader", [load_wine, load_breast_cancer])
def test_federated_standard_scaling_equals_standard_scaler(loader):
    X = loader(return_X_y=True)[0]
    parts = np.array_split(X[np.random.default_rng(0).permutation(len(X))], 4)
    moments = [column_moments(p) for p in parts]
    total = {k: sum(m[k] for m in moments) for k in ("count", "sum", "sumsq")}
    center, scale = scaling_from_moments("standard", total["count"], total["sum"],
                                         total["sumsq"])
    ref = StandardScaler().fit(X)
    np.testing.assert_allclose(center, ref.mean_, rtol=1e-12, atol=0)
    np.testing.assert_allclose(scale, ref.scale_, rtol=1e-12, atol=0)
    transform = FeatureTransform(tuple(map(str, range(X.shape[1]))), "standard",
                                 tuple(center), tuple(scale))
    np.testing.assert_allclose(transform.transform(X), ref.transform(X), rtol=0, atol=1e-12)
    np.testing.assert_allclose(transform.inverse(transform.transform(X)), X, rtol=1e-13)


def test_federated_minmax_equals_minmax_scaler():
    X = load_wine(return_X_y=True)[0]
    parts = np.array_split(X, 3)
    m = [column_moments(p) for p in parts]
    lo = np.min([x["min"] for x in m], axis=0)
    hi = np.max([x["max"] for x in m], axis=0)
    count = sum(x["count"] for x in m)
    center, scale = scaling_from_moments("minmax", count, 0 * count, 0 * count, lo, hi)
    ref = MinMaxScaler().fit(X)
    t = FeatureTransform(tuple(map(str, range(X.shape[1]))), "minmax", tuple(center),
                         tuple(scale))
    np.testing.assert_allclose(t.transform(X), ref.transform(X), atol=1e-14)


def test_moments_skip_nan_and_constant_features_keep_scale_one():
    X = np.array([[1.0, 5.0, np.nan], [3.0, 5.0, 2.0], [np.nan, 5.0, 4.0]])
    m = column_moments(X)
    np.testing.assert_array_equal(m["count"], [2, 3, 2])
    center, scale = scaling_from_moments("standard", m["count"], m["sum"], m["sumsq"])
    np.testing.assert_allclose(center, [2.0, 5.0, 3.0])
    np.testing.assert_allclose(scale, [1.0, 1.0, 1.0])
    # a feature no site observes (masked data) is left as it is
    center, scale = scaling_from_moments("standard", np.array([0.0, 2.0]), np.array([0, 4.0]),
                                         np.array([0, 10.0]))
    np.testing.assert_array_equal(center, [0.0, 2.0])
    np.testing.assert_array_equal(scale, [1.0, 1.0])


def test_dates_and_categories_are_not_numbers():
    frame = pd.DataFrame({"when": pd.to_datetime(["2024-01-01", "2024-02-01"]),
                          "kind": pd.Categorical(["a", "b"]), "x": [1.0, 2.0]})
    table = FeatureTable.from_frame(frame)
    assert table.names == ("x",) and set(table.text) == {"kind"}
    # dates are neither numbers nor text: seconds since the epoch, a feature if declared
    assert list(table.dates) == ["when"]
    assert table.dates["when"].tolist() == [1704067200.0, 1706745600.0]


def test_spread_warning_names_the_widest_feature():
    X = load_wine(return_X_y=True)[0]
    names = list(load_wine().feature_names)
    m = column_moments(X)
    text = spread_warning(m["count"], m["sum"], m["sumsq"], names)
    assert text is not None and "'proline'" in text and "scaling='standard'" in text
    Z = StandardScaler().fit_transform(X)
    m = column_moments(Z)
    assert spread_warning(m["count"], m["sum"], m["sumsq"], names) is None


def test_transform_json_round_trips_exactly_and_refuses_garbage():
    t = FeatureTransform(("a", "b"), "standard", (0.1 + 0.2, 1e-300), (3.0, 1 / 3))
    assert FeatureTransform.from_json(t.to_json()) == t
    with pytest.raises(ValueError, match="malformed"):
        FeatureTransform.from_json('{"features": 3}')
    with pytest.raises(ValueError, match="positive"):
        FeatureTransform(("a",), "standard", (0.0,), (0.0,))


def test_table_columns_refuse_missing_and_text():
    table = FeatureTable.from_frame(pd.DataFrame({"a": [1.0, 2.0], "t": ["x", "y"]}))
    assert table.all_names == ("a", "t")
    with pytest.raises(SchemaError, match="text"):
        table.columns(["t"])
    with pytest.raises(SchemaError, match=r"no column\(s\) \['b'\]"):
        table.columns(["b"])
    assert table.columns(["a"]) is table.X  # the matrix itself: no copy


def test_unnamed_sites_beside_named_ones_are_taken_by_position_with_a_note():
    named = FeatureTable(np.zeros((40, 2)), ("x0", "x1"))
    unnamed = FeatureTable(np.ones((40, 2)))
    sites = {"client 0": describe_columns(named), "client 1": describe_columns(unnamed),
             "client 2": describe_columns(named)}
    schema = agree_schema(sites)
    assert schema.features == ("x0", "x1")
    assert "client 1 has files without column names" in schema.notes[0]
    assert FeatureTransform(schema.features).apply(unnamed) is unnamed.X
    sites["client 1"] = describe_columns(FeatureTable(np.ones((40, 3))))
    with pytest.raises(SchemaError, match=r"client 1 has a file without column names.*3 "
                                          r"columns.*header row"):
        agree_schema(sites)


def test_categories_rare_values_never_leave_a_site_and_fold_into_other():
    from flwr_clustering.data.schema import (
        OTHER,
        agree_categories,
        category_counts,
        one_hot,
    )

    a = FeatureTable.from_frame(pd.DataFrame({"x": np.arange(6.0),
                                              "city": ["A", "A", "B", "B", "C", None]}))
    b = FeatureTable.from_frame(pd.DataFrame({"x": np.arange(4.0), "city": ["A", "D", "D", "C"]}))
    counts = {"client 0": category_counts(a, ["city"], 2),
              "client 1": category_counts(b, ["city"], 2)}
    # "C" (one row at each site), client 0's single missing cell (the level "missing")
    # and client 1's single "A" are sent only as "other"
    assert counts["client 0"] == {"city": {"A": 2, "B": 2, OTHER: 2}}
    assert counts["client 1"] == {"city": {"D": 2, OTHER: 2}}
    # no value reaches 3 rows in the federation: only the "other" level remains
    assert agree_categories(counts, ["city"], 3) == (("city", (OTHER,)),)
    levels = dict(agree_categories(counts, ["city"], 2))["city"]
    assert levels == ("A", "B", "D", OTHER)
    encoded = one_hot(b.values("city"), levels)
    np.testing.assert_array_equal(encoded, [[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0],
                                            [0, 0, 0, 1]])
    # a missing cell is "other" where the federation agreed on no "missing" level...
    np.testing.assert_array_equal(one_hot(a.values("city"), levels)[-1], [0, 0, 0, 1])


def test_a_missing_category_is_a_level_of_its_own():
    from flwr_clustering.data.schema import (
        MISSING_LEVEL,
        agree_categories,
        category_counts,
        one_hot,
    )

    a = FeatureTable.from_frame(pd.DataFrame({"x": np.arange(5.0),
                                              "smoker": ["yes", None, "no", None, np.nan]}))
    b = FeatureTable.from_frame(pd.DataFrame({"x": np.arange(3.0),
                                              "smoker": ["no", "yes", None]}))
    counts = {"client 0": category_counts(a, ["smoker"], 1),
              "client 1": category_counts(b, ["smoker"], 1)}
    assert counts["client 0"] == {"smoker": {"yes": 1, MISSING_LEVEL: 3, "no": 1}}
    levels = dict(agree_categories(counts, ["smoker"], 2))["smoker"]
    assert levels == (MISSING_LEVEL, "no", "yes", "other")
    # ... and its own level where it did: never a row of zeros
    encoded = one_hot(a.values("smoker"), levels)
    np.testing.assert_array_equal(encoded.sum(axis=1), 1)
    np.testing.assert_array_equal(encoded[:, 0], [0, 1, 0, 1, 1])


def test_declared_categorical_columns_leave_the_numeric_schema():
    frames = _wine_sites()
    for f in frames:
        f["city"] = np.where(np.arange(len(f)) % 2, "Leiden", "Delft")
    schema = agree_schema(_sites(frames), categorical_columns=["city"])
    assert "city" not in schema.features and schema.categorical == ("city",)
    frames[2] = frames[2].drop(columns="city")
    with pytest.raises(SchemaError, match=r"client 2 has no column 'city'"):
        agree_schema(_sites(frames), categorical_columns=["city"])


def test_sites_that_standardised_their_own_files_are_named():
    from flwr_clustering.data.schema import self_scaled_warning

    frames = _wine_sites()
    own = {f"client {i}": tuple(column_moments(StandardScaler().fit_transform(f))[k]
                                for k in ("count", "sum", "sumsq"))
           for i, f in enumerate(frames)}
    assert "standardised their own files" in self_scaled_warning(own)
    # R's scale() divides by the sample standard deviation: caught too
    sample = {site: (c, s, q * (c - 1) / c) for site, (c, s, q) in own.items()}
    assert self_scaled_warning(sample) is not None
    raw = {f"client {i}": tuple(column_moments(f.to_numpy())[k]
                                for k in ("count", "sum", "sumsq"))
           for i, f in enumerate(frames)}
    assert self_scaled_warning(raw) is None
    # the federation's own standardisation: the pooled rows, not each site's
    pooled = StandardScaler().fit(pd.concat(frames))
    fed = {f"client {i}": tuple(column_moments(pooled.transform(f))[k]
                                for k in ("count", "sum", "sumsq"))
           for i, f in enumerate(frames)}
    assert self_scaled_warning(fed) is None
