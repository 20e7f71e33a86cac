"""The weight of a categorical column: each one weighs like one standardised feature.

``categorical-weight='balanced'`` (the default) divides the one-hot features of a column
with level shares ``p_l`` by ``sqrt(sum_l p_l (1 - p_l))``, from the same federated sums as
the scaling; ``'standard'`` keeps the former behaviour (each one-hot feature standardised).
"""

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler

from flwr_clustering import FederatedClustering
from flwr_clustering.data.schema import categorical_scales, one_hot
from flwr_clustering.strategies.features import FeatureOptions


def _frames(n_sites=3, empty=False):
    """Every second wine row, with a 2-level and a 3-level column partly from the class."""
    data = load_wine(as_frame=True)
    frame = data.frame.drop(columns="target").iloc[::2].reset_index(drop=True)
    y = data.target.to_numpy()[::2]
    row = np.arange(len(y))
    frame["smoker"] = np.where((y == 0) ^ (row % 5 == 0), "yes", "no")
    frame["region"] = np.array(["north", "south", "east"])[(y + (row % 7 == 0)) % 3]
    if empty:  # a missing cell is the level 'missing'
        frame["region"] = frame["region"].astype(object).where(row % 4 != 0, None)
    return [frame.iloc[i::n_sites].reset_index(drop=True) for i in range(n_sites)]


def test_two_equal_levels_give_the_square_root_of_a_half():
    np.testing.assert_array_equal(categorical_scales([2], [0.5, 0.5]),
                                  np.full(2, np.sqrt(0.5)))
    # one scale per column, the same for its levels; an unseen level adds nothing
    shares = [0.2, 0.3, 0.5, 0.0, 0.9, 0.1]
    s = categorical_scales([4, 2], shares)
    np.testing.assert_allclose(s[:4], np.sqrt(1 - (0.04 + 0.09 + 0.25)), rtol=1e-15)
    np.testing.assert_allclose(s[4:], np.sqrt(1 - (0.81 + 0.01)), rtol=1e-15)
    # rows without a value (zeros): the sum of the one-hot features' variances
    np.testing.assert_allclose(categorical_scales([2], [0.25, 0.25]),
                               np.sqrt(2 * 0.25 * 0.75), rtol=1e-15)
    # a single observed level: no spread, scale 1 (as a constant feature)
    np.testing.assert_array_equal(categorical_scales([2], [1.0, 0.0]), [1.0, 1.0])


def test_a_balanced_column_contributes_like_one_standardised_feature():
    """The mean squared difference of two rows over a column's one-hot features is 2."""
    rng = np.random.default_rng(0)
    levels = ("a", "b", "c", "d", "other")
    values = rng.choice(["a", "b", "c", "d"], size=4000, p=[0.7, 0.2, 0.07, 0.03])
    X = one_hot(values, levels)
    Z = X / categorical_scales([len(levels)], X.mean(axis=0))
    # over all pairs: sum_ij ||z_i - z_j||^2 / n^2 = 2 * sum of the column variances
    pairs = 2 * Z.var(axis=0).sum()
    assert pairs == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("shares, levels", [([0.5, 0.6], [2]), ([1.5, 0.0], [2]), ([0.5], [2]), ([0.5], [0])])
def test_categorical_scales_refuses_what_does_not_fit(shares, levels):
    with pytest.raises(ValueError, match="categorical_scales"):
        categorical_scales(levels, shares)


def test_an_unknown_weight_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"categorical_weight must be one of \['balanced', "
                                         r"'standard'\], got 'equal'"):
        FeatureOptions("standard", categorical_weight="equal")


@pytest.mark.parametrize("empty", [False, True])
def test_the_one_hot_scales_equal_the_formula_on_the_pooled_rows(empty):
    frames = _frames(empty=empty)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0, max_rounds=5,
                              categorical_columns=["smoker", "region"]).fit(frames)
    transform = est.strategy_.feature_transform
    pooled = pd.concat(frames, ignore_index=True)
    numeric = list(transform.numeric_features)
    reference = StandardScaler().fit(pooled[numeric].to_numpy())
    np.testing.assert_allclose(transform.scale[:len(numeric)], reference.scale_, rtol=1e-12)
    start = len(numeric)
    for column, levels in transform.categories:
        X = one_hot(pooled[column].to_numpy(dtype=object), levels)
        p = X.mean(axis=0)
        s = np.sqrt(np.sum(p * (1 - p)))
        block = slice(start, start + len(levels))
        np.testing.assert_allclose(transform.scale[block], s, rtol=1e-12, atol=0)
        np.testing.assert_allclose(transform.center[block], p, rtol=1e-12, atol=1e-15)
        start += len(levels)
    assert est.strategy_.feature_summary["categorical-weight"] == "balanced"
    assert ("region", ("east", "missing", "north", "south", "other") if empty
            else ("east", "north", "south", "other")) in transform.categories


def test_minmax_and_none_leave_the_one_hot_features_zero_or_one():
    frames = _frames()
    kw = dict(n_clusters=3, random_state=0, max_rounds=5,
              categorical_columns=["smoker", "region"])
    none = FederatedClustering("fkm", scaling="none", **kw).fit(frames)
    assert not none.strategy_.feature_transform.scaled
    transform = FederatedClustering("fkm", scaling="minmax", **kw).fit(
        frames).strategy_.feature_transform
    d, n = len(transform.numeric_features), len(transform.features)
    # 'other' holds no row: a constant feature, centre 0, scale 1 as well
    assert transform.center[d:] == (0.0,) * (n - d) and transform.scale[d:] == (1.0,) * (n - d)


# FKM on _frames() with categorical_columns=["smoker", "region"], random_state=0,
# max_rounds=20, before categorical-weight existed (each one-hot feature standardised)
_BEFORE_LABELS = ["111111111100000000000022222222", "111111111100000000000022222222",
                  "11111111110200000020022222222"]
_BEFORE_CENTROID_0 = [-0.8766412138756747, -0.369691462382711, -0.5507970824100323,
                      0.18719630085125868, -0.4947377128273591, -0.018896071468641758,
                      0.012278093442946954, -0.05740804174671332, -0.02331849031650773,
                      -0.8702780236048101, 0.3306240906036486, 0.25540992433751575,
                      -0.7377020116362232, 0.4537061051638517, -0.4537061051638517, 0.0,
                      -0.44250337994617267, -0.6775074858941582, 1.0560094165693603, 0.0]


def test_the_standard_weight_gives_the_former_result():
    frames = _frames()
    kw = dict(n_clusters=3, random_state=0, max_rounds=20,
              categorical_columns=["smoker", "region"])
    est = FederatedClustering("fkm", categorical_weight="standard", **kw).fit(frames)
    assert ["".join(map(str, labels)) for labels in est.labels_] == _BEFORE_LABELS
    np.testing.assert_allclose(est.strategy_.centroids[0], _BEFORE_CENTROID_0, rtol=0,
                               atol=1e-12)
    # its one-hot scales: StandardScaler of the pooled one-hot features
    pooled = pd.concat(frames, ignore_index=True)
    transform = est.strategy_.feature_transform
    blocks = [one_hot(pooled[c].to_numpy(dtype=object), levels)
              for c, levels in transform.categories]
    d = len(transform.numeric_features)
    np.testing.assert_allclose(transform.scale[d:], StandardScaler().fit(
        np.hstack(blocks)).scale_, rtol=1e-12)
    balanced = FederatedClustering("fkm", **kw).fit(frames)
    assert not np.allclose(balanced.strategy_.feature_transform.scale[d:], transform.scale[d:])


def test_categorical_columns_stay_refused_under_secure_aggregation(tmp_path):
    from flwr_clustering.testing import run_app

    configs = []
    for i, frame in enumerate(_frames()):
        path = tmp_path / f"s{i}.csv"
        frame.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
          "server-update": "lloyd", "secure-aggregation": True,
          "categorical-columns": "smoker,region", "out-dir": str(tmp_path / "run")}
    with pytest.raises(ValueError, match="categorical-columns needs each site's category"):
        run_app(rc, 3, node_configs=configs)


def test_dominant_categories_needs_pure_clusters_that_split_the_levels():
    from flwr_clustering.diagnostics import dominant_categories

    cats = [("sex", ("f", "m", "other")), ("region", ("e", "w", "other"))]
    shares = np.array([[0.95, 0.05, 0.0, 0.5, 0.5, 0.0],
                       [0.02, 0.98, 0.0, 0.4, 0.6, 0.0],
                       [0.91, 0.09, 0.0, 0.97, 0.03, 0.0]])
    assert dominant_categories(cats, shares, [10, 10, 10]) == {"sex": [0.95, 0.98, 0.91]}
    # a cluster at 90% or less: not pure
    mixed = shares.copy()
    mixed[2, :2] = [0.9, 0.1]
    assert dominant_categories(cats, mixed, [10, 10, 10]) == {}
    # pure, but all in the same level: the column does not split the clusters
    same = shares.copy()
    same[1, :2] = [0.93, 0.07]
    assert dominant_categories(cats, same, [10, 10, 10]) == {}
    # an empty cluster or one whose shares are unknown is left out
    unknown = shares.copy()
    unknown[2] = np.nan
    assert dominant_categories(cats, unknown, [10, 10, 10]) == {"sex": [0.95, 0.98]}
    assert dominant_categories(cats, shares, [10, 0, 10]) == {}


def _warned(est):
    return [w for w in est.warnings_ if "the clusters follow the categorical column" in w]


def test_a_category_that_decides_the_clusters_is_warned_about():
    rng = np.random.default_rng(1)
    # measurements without groups, a 3-level column: the clusters can only be its levels
    n = 300
    frame = pd.DataFrame(rng.normal(size=(n, 4)), columns=list("abcd"))
    frame["site_kind"] = np.array(["x", "y", "z"])[rng.integers(0, 3, n)]
    frames = [frame.iloc[i::3].reset_index(drop=True) for i in range(3)]
    est = FederatedClustering("fkm", n_clusters=3, random_state=0, categorical_weight="standard",
                              categorical_columns=["site_kind"]).fit(frames)
    warned = _warned(est)
    assert len(warned) == 1 and "'site_kind'" in warned[0]
    assert "categorical-weight='balanced'" in warned[0]
    assert set(est.strategy_.diagnostics["categorical-dominance"]) == {"site_kind"}
    # no level (a value of the data) in the sentence
    assert not any(f"'{v}'" in warned[0] for v in "xyz")


def test_wine_measurements_with_an_unrelated_category_are_not_warned_about():
    data = load_wine(as_frame=True)
    frame = data.frame.drop(columns="target")
    frame["sex"] = np.where(np.random.default_rng(2).random(len(frame)) < 0.5, "f", "m")
    frames = [frame.iloc[i::3].reset_index(drop=True) for i in range(3)]
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              categorical_columns=["sex"]).fit(frames)
    assert _warned(est) == []
    assert est.strategy_.diagnostics["categorical-dominance"] == {}
    plain = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(
        [f.drop(columns="sex") for f in frames])
    assert _warned(plain) == [] and "categorical-dominance" not in plain.strategy_.diagnostics


def test_the_categorical_benchmark_writes_its_table(tmp_path):
    from simulations import categorical
    from simulations.cli import main

    frame, y, _ = categorical.datasets()["iris"]
    data = frame.copy()
    data["code"] = categorical.derived_column("noise", frame, y, np.random.default_rng(0))
    Z = categorical.central_rows(data, list(frame.columns), "code", "balanced")
    # the one-hot block's total variance is one standardised feature's
    assert Z.shape[1] == 4 + 6 + 1  # 6 levels and the empty cell
    assert Z[:, 4:].var(axis=0).sum() == pytest.approx(1.0, rel=1e-12)
    assert main(["categorical", "--seeds", "1", "--clients", "3", "--data", "iris",
                 "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "categorical.json").read_text())
    assert len(rows) == 1 + 2 * len(categorical.CASES)
    assert all(-1 <= r["fkm-ari"] <= 1 and -1 <= r["kmeans-ari"] <= 1 for r in rows)
    table = (tmp_path / "categorical.md").read_text()
    assert table.count("\n| iris |") == len(categorical.CASES)
