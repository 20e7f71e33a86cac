"""Dates, booleans and nullable types: one unit at every site, 0/1, NaN (issue 49, item 3).

A Parquet timestamp used to become an integer in each file's own unit (nanoseconds at one
site, milliseconds at another, NaT as -9.2e18); now a date column is refused unless
declared (``datetime-columns``) and, declared, is float seconds since 1970-01-01 UTC at
every site.
"""

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import load_wine

from flwr_clustering import FederatedClustering, load_model
from flwr_clustering.__main__ import main
from flwr_clustering.clients.base import ClusteringClient
from flwr_clustering.clients.statistics import columns_record
from flwr_clustering.data.local_file import read_local_file
from flwr_clustering.data.schema import (
    CONTINUOUS_LEVELS,
    FeatureTable,
    FeatureTransform,
    SchemaError,
    agree_categories,
    agree_schema,
    continuous_columns,
    describe_columns,
    epoch_seconds,
)
from flwr_clustering.data.site_check import check_file, load_schema
from flwr_clustering.testing import run_app

#: Visit times with a fraction of a second, a date before 1970 and a missing one.
VISITS = ["2024-01-01T10:00:00.5", "1969-12-31T23:59:59", "2024-03-05T00:00:00", None]
#: The same instants in seconds since 1970-01-01 UTC, computed by hand.
SECONDS = [1704103200.5, -1.0, 1709596800.0, np.nan]


def _visits(unit):
    return pd.to_datetime(pd.Series(VISITS), format="ISO8601").dt.as_unit(unit)


def _sites(tables):
    return {f"client {i}": describe_columns(t) for i, t in enumerate(tables)}


# ------------------------------------------------------------------------------ Parquet


def test_parquet_timestamps_in_two_units_give_equal_seconds(tmp_path):
    """The bug of issue 49: ns at one site, ms at the other, the same instants."""
    frames = {"ns": pd.DataFrame({"visit": _visits("ns"), "x": [1.0, 2.0, 3.0, 4.0]}),
              "ms": pd.DataFrame({"visit": _visits("ms"), "x": [1.0, 2.0, 3.0, 4.0]})}
    loaded = {}
    for unit, frame in frames.items():
        frame.to_parquet(tmp_path / f"{unit}.parquet", index=False)
        loaded[unit] = read_local_file(tmp_path / f"{unit}.parquet")
    # the raw files do hold other integers: what the loader used to cluster (its
    # pd.to_numeric), a factor of a million apart, and -9.2e18 for the missing date
    raw = [pq.read_table(tmp_path / f"{u}.parquet").column("visit").type for u in ("ns", "ms")]
    assert [t.unit for t in raw] == ["ns", "ms"]
    before = {u: pd.to_numeric(pd.read_parquet(tmp_path / f"{u}.parquet")["visit"]).to_numpy()
              for u in ("ns", "ms")}
    assert before["ns"][0] == 1704103200500000000 and before["ms"][0] == 1704103200500
    assert before["ns"][3] == before["ms"][3] == np.iinfo(np.int64).min
    for unit, file in loaded.items():
        assert file.features == ("x",), unit  # the dates are not a numeric feature
        assert "date column(s) 'visit' (seconds since 1970-01-01 UTC" in file.describe()
        np.testing.assert_array_equal(file.dates["visit"], SECONDS)
    np.testing.assert_array_equal(loaded["ns"].dates["visit"], loaded["ms"].dates["visit"])


def test_parquet_seconds_microseconds_and_time_zones(tmp_path):
    """pyarrow timestamps in s and us, one with a time zone, and date32: one unit."""
    instants = [dt.datetime(2024, 1, 1, 10, 0, 0), None]
    table = pa.table({
        "s": pa.array(instants, pa.timestamp("s")),
        "us": pa.array(instants, pa.timestamp("us")),
        # 11:00 in Amsterdam (UTC+1 in January) is 10:00 UTC
        "amsterdam": pa.array([pd.Timestamp("2024-01-01 11:00", tz="Europe/Amsterdam"),
                               None], pa.timestamp("ms", tz="Europe/Amsterdam")),
        "day": pa.array([dt.date(2024, 1, 1), None], pa.date32()),
        "x": pa.array([1.0, 2.0])})
    pq.write_table(table, tmp_path / "site.parquet")
    dates = read_local_file(tmp_path / "site.parquet").dates
    assert list(dates) == ["s", "us", "amsterdam", "day"]
    for name in ("s", "us", "amsterdam"):
        np.testing.assert_array_equal(dates[name], [1704103200.0, np.nan], err_msg=name)
    np.testing.assert_array_equal(dates["day"], [1704067200.0, np.nan])


def test_epoch_seconds_agree_exactly_in_every_unit():
    stamps = np.array(["2024-01-01T10:00:00.123", "1900-06-01T00:00:00.999", "NaT"],
                      dtype="datetime64[ms]")
    seconds = [epoch_seconds(stamps.astype(f"datetime64[{u}]")) for u in ("ms", "us", "ns")]
    for other in seconds[1:]:
        np.testing.assert_array_equal(other, seconds[0])
    assert seconds[0][0] == 1704103200.123 and np.isnan(seconds[0][2])
    np.testing.assert_array_equal(epoch_seconds(np.array(["2024-01-01"], "datetime64[D]")),
                                  [1704067200.0])


def test_an_undeclared_date_column_is_refused_naming_the_option():
    tables = [FeatureTable.from_frame(pd.DataFrame({"visit_date": _visits(u),
                                                    "x": [0.5, 1.5, 2.5, 3.5]}))
              for u in ("ns", "ms")]
    assert [c.kind for c in describe_columns(tables[0])] == ["numeric", "datetime"]
    with pytest.raises(SchemaError) as err:
        agree_schema(_sites(tables))
    message = str(err.value)
    assert "'visit_date' at client 0, client 1" in message
    assert "-c \"datetime-columns='visit_date'\"" in message
    assert "feature-columns" in message  # the other way out: leave it out
    # listed in feature-columns is not declared either
    with pytest.raises(SchemaError, match="remove them from feature-columns"):
        agree_schema(_sites(tables), feature_columns=["x", "visit_date"])
    # left out, the run goes on without it
    assert agree_schema(_sites(tables), feature_columns=["x"]).features == ("x",)
    # declared: a feature, converted to seconds at each site
    schema = agree_schema(_sites(tables), datetime_columns=["visit_date"])
    assert schema.features == ("x", "visit_date") and schema.datetime == ("visit_date",)
    transform = FeatureTransform(schema.features, datetimes=schema.datetime)
    assert FeatureTransform.from_json(transform.to_json()) == transform
    for table in tables:
        np.testing.assert_array_equal(transform.apply(table)[:, 1], SECONDS)
    # an undeclared transform does not read the dates as numbers either
    with pytest.raises(SchemaError, match="datetime-columns='visit_date'"):
        FeatureTransform(schema.features).apply(tables[0])


def test_a_declared_date_column_that_holds_numbers_or_is_not_a_feature_is_refused():
    tables = [FeatureTable.from_frame(pd.DataFrame({"year": [2020.0, 2021.0], "x": [1.0, 2.0]}))]
    with pytest.raises(SchemaError, match=r"hold numbers: 'year' at client 0.*leave it out of "
                                          "datetime-columns"):
        agree_schema(_sites(tables), datetime_columns=["year"])
    with pytest.raises(SchemaError, match=r"datetime-columns names 'visit', which is not "
                                          "among the federation's features"):
        agree_schema(_sites(tables), datetime_columns=["visit"])
    table = FeatureTable.from_frame(pd.DataFrame({"visit": _visits("ns"), "x": [1.0] * 4}))
    with pytest.raises(SchemaError, match="add it to feature-columns"):
        agree_schema(_sites([table]), feature_columns=["x"], datetime_columns=["visit"])


# ------------------------------------------------------------------------------ CSV


def test_csv_dates_declared_are_parsed_to_seconds(tmp_path):
    path = tmp_path / "site.csv"
    path.write_text("x,visit,other\n"
                    "1.5,2024-01-01T10:00:00.5,03/05/2024\n"
                    "2.5,1969-12-31 23:59:59,01/01/1970\n"
                    "3.5,2024-03-05,\n"
                    "4.5,,03/05/2024\n")
    table = read_local_file(path).table()
    assert set(table.text) == {"visit", "other"}  # text as read
    # ISO 8601 text reads as dates: an undeclared one is refused as a date, not as text
    kinds = {c.name: c.kind for c in describe_columns(table)}
    assert kinds == {"x": "numeric", "visit": "datetime", "other": "text"}
    with pytest.raises(SchemaError, match="datetime-columns='visit'"):
        agree_schema(_sites([table]), feature_columns=["x", "visit"])
    # a DataFrame's ISO text with empty and missing cells reads as dates too
    frame = pd.DataFrame({"x": [0.5, 1.5, 2.5], "d": ["2024-01-01", "", None]})
    assert [c.kind for c in describe_columns(FeatureTable.from_frame(frame))] == [
        "numeric", "datetime"]
    np.testing.assert_array_equal(FeatureTable.from_frame(frame).seconds("d"),
                                  [1704067200.0, np.nan, np.nan])
    # other text: refused as text, the message says how to declare dates too
    with pytest.raises(SchemaError, match=r"text column\(s\).*'other'.*categorical-columns"
                                          r".*datetime-columns='other'"):
        agree_schema(_sites([table]), feature_columns=["x", "other"])
    schema = agree_schema(_sites([table]), datetime_columns=["visit", "other"])
    assert schema.datetime == ("visit", "other")
    X = FeatureTransform(schema.features, datetimes=schema.datetime).apply(table)
    np.testing.assert_array_equal(X[:, 1], SECONDS)  # the empty cell is a missing one
    # not ISO: one format for the column, as pandas reads it (month first)
    np.testing.assert_array_equal(X[:, 2], [1709596800.0, 0.0, np.nan, 1709596800.0])


def test_a_csv_cell_that_is_not_a_date_is_refused_by_row_never_by_value(tmp_path):
    path = tmp_path / "site.csv"
    path.write_text("x,visit\n1,2024-01-01\n2,2024-01-02\n3,secret-value\n4,2024-01-04\n")
    table = read_local_file(path).table()
    transform = FeatureTransform(("x", "visit"), datetimes=("visit",))
    with pytest.raises(SchemaError) as err:
        transform.apply(table)
    message = str(err.value)
    assert "column 'visit'" in message and "data row 3 (1-based)" in message
    assert "1 such cell" in message and "secret" not in message


# ------------------------------------------------------------------ booleans, nullables


def test_booleans_are_0_1_and_nullable_missing_values_are_nan(tmp_path):
    frame = pd.DataFrame({
        "flag": np.array([True, False, True]),                        # numpy bool
        "maybe": pd.array([True, pd.NA, False], dtype="boolean"),     # pandas boolean
        "count": pd.array([3, pd.NA, 5], dtype="Int64"),              # nullable integer
        "small": pd.array([pd.NA, 1, 2], dtype="Int32"),
        "wait": pd.to_timedelta(["1.5s", None, "2min"]),              # a duration
        "x": [0.5, 1.5, 2.5]})
    expected = {"flag": [1.0, 0.0, 1.0], "maybe": [1.0, np.nan, 0.0],
                "count": [3.0, np.nan, 5.0], "small": [np.nan, 1.0, 2.0],
                "wait": [1.5, np.nan, 120.0]}
    table = FeatureTable.from_frame(frame)
    assert table.X.dtype == np.float64 and not table.text and not table.dates
    for name, values in expected.items():
        np.testing.assert_array_equal(table.values(name), values, err_msg=name)
    # the same through Parquet (pandas' nullable types round-trip), and a plain Parquet
    # bool with nulls (read by pandas as objects)
    frame.to_parquet(tmp_path / "a.parquet", index=False)
    pq.write_table(pa.table({"b": pa.array([True, None, False]), "x": [1.0, 2.0, 3.0]}),
                   tmp_path / "b.parquet")
    a = read_local_file(tmp_path / "a.parquet").table()
    for name, values in expected.items():
        np.testing.assert_array_equal(a.values(name), values, err_msg=name)
    np.testing.assert_array_equal(read_local_file(tmp_path / "b.parquet").table().values("b"),
                                  [1.0, np.nan, 0.0])


# ------------------------------------------------------------------ continuous categories


def test_a_continuous_categorical_column_is_refused_naming_it_and_the_site():
    rng = np.random.default_rng(0)
    n = 200
    frame = pd.DataFrame({"income": rng.normal(3000, 500, n).round(2),
                          "region": rng.choice(["north", "south"], n),
                          "code": rng.integers(0, CONTINUOUS_LEVELS + 5, n)})
    table = FeatureTable.from_frame(frame)
    # 200 distinct incomes: continuous; 2 regions: categories; 55 codes over 200 rows:
    # more than 50 distinct values, but not over half the rows: categories
    assert continuous_columns(table, ["income", "region", "code"]) == ["income"]
    small = FeatureTable.from_frame(frame.iloc[:40])  # 40 distinct values: not > 50
    assert continuous_columns(small, ["income"]) == []
    with pytest.raises(SchemaError) as err:
        agree_categories({"client 0": {}, "client 2": {}}, ["income"], 2,
                         continuous={"client 2": ["income"]})
    message = str(err.value)
    assert "'income' at client 2" in message and "categorical-columns" in message
    assert "3000" not in message and "." not in message.split("(")[0]


def test_a_continuous_categorical_column_is_refused_by_the_run():
    frames = _wine_frames()
    with pytest.raises(SchemaError, match=r"continuous column\(s\): 'proline' at client 0, "
                                          r"client 1, client 2.*categorical_columns"):
        FederatedClustering("fkm", n_clusters=3, random_state=0,
                            categorical_columns=["proline"]).fit(frames)


# ------------------------------------------------------------------ the estimator


def _wine_frames():
    data = load_wine(as_frame=True)
    frame = data.frame.drop(columns="target")[["alcohol", "malic_acid", "color_intensity",
                                                "proline"]]
    idx = np.array_split(np.random.default_rng(0).permutation(len(frame)), 3)
    return [frame.iloc[i].reset_index(drop=True) for i in idx]


def _with_dates(frames):
    """A date column in another unit at every site (ns, ms, a time zone), and its seconds."""
    rng = np.random.default_rng(1)
    dated, by_hand = [], []
    for i, frame in enumerate(frames):
        # visits over 2020-2024, to the millisecond; by hand: milliseconds / 1000
        ms = 1577836800_000 + rng.integers(0, 5 * 365 * 86400 * 1000, len(frame))
        seconds = ms / 1000
        stamps = pd.to_datetime(ms, unit="ms").as_unit("ms")
        if i == 0:
            stamps = stamps.as_unit("ns")
        elif i == 2:  # the same instants, in Tokyo's local time
            stamps = stamps.tz_localize("UTC").tz_convert("Asia/Tokyo")
        dated.append(frame.assign(visit=stamps))
        by_hand.append(frame.assign(visit=seconds))
    return dated, by_hand


def test_the_estimator_with_a_declared_date_column_equals_seconds_by_hand():
    dated, by_hand = _with_dates(_wine_frames())
    assert [str(f["visit"].dtype) for f in dated] == [
        "datetime64[ns]", "datetime64[ms]", "datetime64[ms, Asia/Tokyo]"]
    with pytest.raises(SchemaError, match=r"'visit' at client 0, client 1, client 2.*"
                                          r"datetime-columns='visit'.*datetime_columns"):
        FederatedClustering("fkm", n_clusters=3, random_state=0).fit(dated)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              datetime_columns=["visit"]).fit(dated)
    ref = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(by_hand)
    assert list(est.feature_names_in_) == list(ref.feature_names_in_)
    assert est.feature_transform_.datetimes == ("visit",)
    assert est.feature_transform_.center == ref.feature_transform_.center
    assert est.feature_transform_.scale == ref.feature_transform_.scale
    np.testing.assert_array_equal(est.strategy_.centroids, ref.strategy_.centroids)
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)
    for mine, theirs in zip(est.labels_, ref.labels_, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    # a date feature reads in seconds since the epoch (the profile too)
    visit = list(est.feature_names_in_).index("visit")
    assert np.all((est.cluster_centers_[:, visit] > 1.5e9)
                  & (est.cluster_centers_[:, visit] < 1.8e9))
    profile = est.cluster_profile_
    assert "visit mean" in profile.columns
    # beside the seconds, the mean visit as an ISO 8601 UTC time
    columns = list(profile.columns)
    assert columns[columns.index("visit mean") + 1] == "visit mean (UTC)"
    for seconds, text in zip(profile["visit mean"], profile["visit mean (UTC)"], strict=True):
        whole = dt.datetime.fromtimestamp(int(np.floor(seconds)), dt.UTC)  # to the second
        assert text == whole.strftime("%Y-%m-%dT%H:%M:%SZ")
    # predict reads the dates of a new frame, in any unit
    for i, frame in enumerate(dated):
        np.testing.assert_array_equal(est.predict(frame), est.labels_[i])


def test_the_app_reads_parquet_and_csv_dates_as_the_estimator(tmp_path):
    dated, _ = _with_dates(_wine_frames())
    configs = []
    for i, frame in enumerate(dated):
        if i == 1:  # a CSV site: the dates as ISO 8601 text
            path = tmp_path / "s1.csv"
            frame.assign(visit=frame["visit"].dt.strftime("%Y-%m-%dT%H:%M:%S.%f")).to_csv(
                path, index=False)
        else:
            path = tmp_path / f"s{i}.parquet"
            frame.to_parquet(path, index=False)
        configs.append({"data-path": str(path)})
    est = FederatedClustering("fkm", n_clusters=3, random_state=0,
                              datetime_columns=["visit"]).fit(dated)
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
          "datetime-columns": "visit", "out-dir": str(tmp_path / "run")}
    out, _ = run_app(rc, 3, node_configs=configs)
    np.testing.assert_allclose(out["centroids"], est.strategy_.centroids, rtol=1e-12,
                               atol=1e-12)
    # the model a site keeps reads the dates of a new frame as the clients did
    model = load_model(tmp_path / "run" / "model.json")
    assert model.transform.datetimes == ("visit",)
    for i, frame in enumerate(dated):
        np.testing.assert_array_equal(model.predict(frame), est.labels_[i])
    # a site's own check accepts each file against the run's schema.json
    schema = load_schema(tmp_path / "run" / "schema.json")
    assert schema.datetimes == ("visit",)
    for config in configs:
        report = check_file(config["data-path"], schema)
        assert report.accepted, report.problems
        assert "date columns: 'visit'" in report.lines()
        assert [c.role for c in report.columns if c.name == "visit"] == ["feature"]


def test_a_sites_check_refuses_dates_as_the_server_does(tmp_path):
    frame = _wine_frames()[0].assign(visit=_with_dates(_wine_frames())[0][0]["visit"])
    frame.to_parquet(tmp_path / "site.parquet", index=False)
    alone = check_file(tmp_path / "site.parquet")
    assert not alone.accepted
    assert "-c \"datetime-columns='visit'\"" in alone.problems[0]
    assert check_file(tmp_path / "site.parquet", datetime_columns=["visit"]).accepted
    path = str(tmp_path / "site.parquet")
    assert main(["check", path]) == 1
    assert main(["check", path, "--datetime-columns", "visit"]) == 0
    # a CSV whose declared date column has a cell that is not a date: its row, not its value
    text = frame.assign(visit=frame["visit"].dt.strftime("%Y-%m-%d").astype(object))
    text.loc[4, "visit"] = "unknown-visit"
    text.to_csv(tmp_path / "site.csv", index=False)
    report = check_file(tmp_path / "site.csv", datetime_columns=["visit"])
    assert not report.accepted
    assert any("data row 5 (1-based)" in p for p in report.problems)
    assert not any("unknown-visit" in line for line in report.lines())


def test_dates_go_through_secure_aggregation(tmp_path):
    """The secure sums' fixed-point range holds seconds since the epoch (~2**31)."""
    dated, by_hand = _with_dates(_wine_frames())
    configs = []
    for i, frame in enumerate(dated):
        # CSV files whose dates are not ISO 8601 (so not told as dates in round 0): the
        # declaration reaches the clients with the data-source query, for their magnitude
        path = tmp_path / f"s{i}.csv"
        utc = pd.to_datetime(frame["visit"], utc=True)  # text without a zone: UTC
        frame.assign(visit=utc.dt.strftime("%m/%d/%Y %H:%M:%S.%f")).to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    rc = {"algorithm": "fkm", "k": 3, "dataset": "local", "min-nodes": 3,
          "datetime-columns": "visit", "secure-aggregation": True, "server-update": "lloyd",
          "max-rounds": 2, "tol": -1.0, "out-dir": str(tmp_path / "run")}
    out, _ = run_app(rc, 3, node_configs=configs)
    transform = out["strategy"].feature_transform
    pooled = pd.concat(by_hand, ignore_index=True)[list(transform.features)]
    np.testing.assert_allclose(transform.center, pooled.mean(), rtol=1e-9)
    np.testing.assert_allclose(transform.scale, pooled.std(ddof=0), rtol=1e-6)


def test_a_date_columns_magnitude_is_of_its_seconds():
    """Secure aggregation's fixed-point range: a date's magnitude is its seconds' (2**31)."""
    frame = pd.DataFrame({"x": [0.5, 3.0], "visit": _visits("ms")[:2],
                          "iso": ["2024-01-01", "2024-03-05"], "note": ["a", "b"]})
    client = ClusteringClient(np.array([[0.5], [3.0]]))
    client.feature_table = FeatureTable.from_frame(frame)
    record = columns_record(client, magnitudes=True)
    assert list(record["names"]) == ["x", "iso", "note", "visit"]
    assert list(record["kinds"]) == ["numeric", "datetime", "text", "datetime"]
    assert list(record["magnitude"]) == [2, 31, 0, 31]


def test_nullable_columns_reach_the_run_as_missing_cells():
    """Int64 and boolean columns with pd.NA fit as the same rows with NaN (missing='mean')."""
    rng = np.random.default_rng(2)
    nullable, plain = [], []
    for frame in _wine_frames():
        proline = frame["proline"].round().astype("Int64")
        bright = pd.Series(pd.array(frame["color_intensity"] > 5, dtype="boolean"))
        proline[rng.random(len(frame)) < 0.1] = pd.NA
        bright[rng.random(len(frame)) < 0.1] = pd.NA
        nullable.append(frame.assign(proline=proline, bright=bright))
        plain.append(frame.assign(proline=proline.astype("float64"),
                                  bright=bright.astype("float64")))
    assert all(p["proline"].isna().any() and p["bright"].isna().any() for p in plain)
    est = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(nullable)
    ref = FederatedClustering("fkm", n_clusters=3, random_state=0).fit(plain)
    # the missing cells were filled with the federation's means, as NaN would be
    assert est.feature_transform_.missing == "mean" and len(est.feature_transform_.fill) == 5
    assert est.feature_transform_ == ref.feature_transform_
    np.testing.assert_array_equal(est.strategy_.centroids, ref.strategy_.centroids)


def test_dates_under_differential_privacy_are_seconds_too():
    """A DP run sends no per-site statistic of the dates: it only converts them."""
    dated, by_hand = _with_dates(_wine_frames())
    dp = {"server_update": "lloyd", "dp_epsilon": 2.0, "dp_delta": 1e-5, "scaling": "none",
          "data_bound": 2e9, "random_state": 0}
    est = FederatedClustering("fkm", 3, datetime_columns=["visit"], **dp).fit(dated)
    ref = FederatedClustering("fkm", 3, **dp).fit(by_hand)
    assert est.feature_transform_.datetimes == ("visit",)
    np.testing.assert_array_equal(est.strategy_.centroids, ref.strategy_.centroids)
    # the DP start takes the agreed width, not a site's own column count (a column left
    # out with feature_columns used to stop the run: 'expected ... of shape (5,)')
    extra = [f.assign(extra=np.arange(len(f)) * 0.5) for f in by_hand]
    sub = FederatedClustering("fkm", 3, feature_columns=list(by_hand[0].columns),
                              **dp).fit(extra)
    np.testing.assert_array_equal(sub.strategy_.centroids, ref.strategy_.centroids)
