"""Local data files give no silent wrong result: header, index, column selection, NaN.

Each case of the reliability issue has a test: a CSV without a header row (read as data, or
forced), a row index written with the data (``df.to_csv()``, Parquet, NPY/NPZ) refused unless
declared, feature and label columns selected by name, and missing values reported by file,
column and row (or kept, for the masked algorithms).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from flwr_clustering.data import garst_grid, load_local_file
from flwr_clustering.data.local_file import read_local_file


@pytest.fixture(scope="module")
def garst():
    X, y = garst_grid()
    return X, y


def _frame(X, y):
    frame = pd.DataFrame(X, columns=["a", "b"])
    frame["label"] = y
    return frame


# ------------------------------------------------------------------------------------ header


def test_headerless_csv_is_read_as_data(tmp_path, garst, caplog):
    X, y = garst
    path = tmp_path / "noheader.csv"
    _frame(X, y).to_csv(path, header=False, index=False)
    # The integer last column looks like a label: refused, with how to declare it.
    with pytest.raises(ValueError, match=r"noheader.csv: the last column \(2\) of this "
                       r"headerless file holds integers only \(16 distinct values\), like a "
                       r"label column.*label-column=2 or label-column='none'"):
        read_local_file(path)
    with caplog.at_level(logging.INFO, logger="flwr_clustering"):
        loaded = read_local_file(path, label_column="none")
    # All 800 rows (on main the first row became the header: 799 rows), the integer column
    # kept as a feature because the owner said so.
    assert loaded.X.shape == (800, 3) and loaded.header is False
    np.testing.assert_array_equal(loaded.X[:, :2], X)
    assert loaded.y is None and loaded.features == (0, 1, 2)
    messages = [r.getMessage() for r in caplog.records]
    assert any("noheader.csv: the first line holds numbers only" in m for m in messages)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]

    # Declared by position (an int, or a digit string as a node config gives it): no label
    # column clustered.
    for label in (2, "2"):
        X2, y2 = load_local_file(path, label_column=label)
        np.testing.assert_array_equal(X2, X)
        np.testing.assert_array_equal(y2, y)


def test_header_modes_forced(tmp_path):
    path = tmp_path / "numbers.csv"
    path.write_text("1,2\n3,4\n5,6\n")
    X, _ = load_local_file(path)  # auto: no header
    assert X.tolist() == [[1, 2], [3, 4], [5, 6]]
    X, _ = load_local_file(path, header="none")
    assert X.shape == (3, 2)
    X, _ = load_local_file(path, header=False)
    assert X.shape == (3, 2)
    X, _ = load_local_file(path, header="first-row")  # the user says line 1 is a header
    assert X.tolist() == [[3, 4], [5, 6]]
    X, _ = load_local_file(path, header=True)
    assert X.shape == (2, 2)

    named = tmp_path / "named.csv"
    named.write_text("a,b\n1,2\n")
    X, _ = load_local_file(named)  # auto: a header
    assert X.tolist() == [[1, 2]]
    with pytest.raises(ValueError, match=r"named.csv: non-numeric value 'a' in column 0 "
                                         r"\(data row 1, 1-based\)"):
        load_local_file(named, header="none")
    with pytest.raises(ValueError, match=r"numbers.csv: header='yes' is not one of"):
        load_local_file(path, header="yes")

    # A first data row with a missing value is still data.
    gap = tmp_path / "gap.csv"
    gap.write_text("1,,2\n3,4,5\n")
    X, _ = load_local_file(gap)
    assert X.shape == (2, 3) and np.isnan(X[0, 1])


# ------------------------------------------------------------------------------------- index


def test_csv_with_index_refused_then_declared(tmp_path, garst):
    X, y = garst
    path = tmp_path / "indexed.csv"
    _frame(X, y).to_csv(path)  # index=True: a first column 'Unnamed: 0' of 0..799
    with pytest.raises(ValueError, match=r"indexed.csv: column 'Unnamed: 0' looks like a row "
                                         r"index.*index-column='Unnamed: 0'.*feature-columns="):
        load_local_file(path)

    # Declared: dropped, and the data equal the original.
    loaded = read_local_file(path, index_column="Unnamed: 0")
    np.testing.assert_array_equal(loaded.X, X)
    np.testing.assert_array_equal(loaded.y, y)
    assert loaded.index_column == "Unnamed: 0" and loaded.features == ("a", "b")
    # Or the features listed explicitly.
    X2, y2 = load_local_file(path, feature_columns="a,b")
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    # Or kept as a feature on purpose.
    X3, _ = load_local_file(path, index_column="none")
    assert X3.shape == (800, 3) and X3[:, 0].tolist() == list(range(800))
    with pytest.raises(ValueError, match=r"indexed.csv: no index column 'id'; the file's "
                                         r"columns are: 'Unnamed: 0', 'a', 'b', 'label'"):
        load_local_file(path, index_column="id")


def test_first_column_zero_to_n_minus_1_refused(tmp_path, garst):
    X, y = garst
    frame = _frame(X, y)
    frame.insert(0, "row", np.arange(800))
    path = tmp_path / "rows.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"rows.csv: the first column 'row' holds the row "
                                         r"numbers 0..799.*index_column='row'"):
        load_local_file(path)
    X2, y2 = load_local_file(path, index_column="row")
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)

    # The index of a headerless file (to_csv(header=False)) is position 0.
    bare = tmp_path / "bare.csv"
    _frame(X, y).to_csv(bare, header=False)
    with pytest.raises(ValueError, match=r"bare.csv: the first column 0 holds the row numbers"):
        load_local_file(bare)
    X3, y3 = load_local_file(bare, index_column=0, label_column=3)
    np.testing.assert_array_equal(X3, X)
    np.testing.assert_array_equal(y3, y)


def test_parquet_index_cases(tmp_path, garst):
    X, y = garst
    frame = _frame(X, y)

    # pandas' own index round-trips as the DataFrame index, never as a feature.
    kept = tmp_path / "kept.parquet"
    frame.iloc[::2].to_parquet(kept)
    X1, y1 = load_local_file(kept)
    np.testing.assert_array_equal(X1, X[::2])
    np.testing.assert_array_equal(y1, y[::2])

    # An index stored as a column (pyarrow without pandas metadata, or read from a CSV).
    for name in ("__index_level_0__", "Unnamed: 0"):
        path = tmp_path / f"{name.strip('_:').replace(' ', '')}.parquet"
        frame.assign(**{name: np.arange(800)})[[name, "a", "b", "label"]].to_parquet(
            path, index=False)
        with pytest.raises(ValueError, match=f"{path.name}: column '{name}' looks like a row"):
            load_local_file(path)
        X2, y2 = load_local_file(path, index_column=name)
        np.testing.assert_array_equal(X2, X)
        np.testing.assert_array_equal(y2, y)

    # reset_index(): a first column 'index' equal to 0..n-1.
    reset = tmp_path / "reset.parquet"
    frame.reset_index().to_parquet(reset, index=False)
    with pytest.raises(ValueError, match=r"reset.parquet: the first column 'index' holds"):
        load_local_file(reset)
    X3, _ = load_local_file(reset, feature_columns=["a", "b"])
    np.testing.assert_array_equal(X3, X)


def test_npy_npz_index_column(tmp_path, garst):
    X, y = garst
    with_index = np.column_stack([np.arange(800.0), X])
    npy = tmp_path / "indexed.npy"
    np.save(npy, with_index)
    with pytest.raises(ValueError, match=r"indexed.npy: the first column 0 holds the row "
                                         r"numbers 0..799.*index_column=0"):
        load_local_file(npy)
    X1, y1 = load_local_file(npy, index_column=0)
    np.testing.assert_array_equal(X1, X)
    assert y1 is None

    npz = tmp_path / "indexed.npz"
    np.savez(npz, X=with_index, y=y)
    with pytest.raises(ValueError, match="indexed.npz: the first column 0 holds the row numbers"):
        load_local_file(npz)
    X2, y2 = load_local_file(npz, index_column="0")
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    X3, _ = load_local_file(npz, feature_columns=[1, 2])
    np.testing.assert_array_equal(X3, X)


# ----------------------------------------------------------------------------- column choice


def test_feature_and_label_columns_by_name(tmp_path):
    path = tmp_path / "site.csv"
    path.write_text("id,age,income,group,note\n7,30,1.5,1,x\n9,40,2.5,0,y\n8,50,3.5,1,z\n")
    loaded = read_local_file(path, feature_columns="income, age", label_column="group")
    assert loaded.X.tolist() == [[1.5, 30], [2.5, 40], [3.5, 50]]  # in the order given
    assert loaded.y.tolist() == [1, 0, 1] and loaded.label_column == "group"
    assert loaded.features == ("income", "age")
    X, y = load_local_file(path, feature_columns=["age"], label_column=None)
    assert X.tolist() == [[30], [40], [50]] and y is None

    columns = "the file's columns are: 'id', 'age', 'income', 'group', 'note'"
    with pytest.raises(ValueError, match=f"site.csv: unknown feature column 'salary'; {columns}"):
        load_local_file(path, feature_columns="age,salary")
    with pytest.raises(ValueError, match=f"site.csv: no label column 'target'; {columns}"):
        load_local_file(path, feature_columns="age", label_column="target")
    with pytest.raises(ValueError, match="site.csv: feature column 'group' is also the label"):
        load_local_file(path, feature_columns="age,group", label_column="group")
    with pytest.raises(ValueError, match="site.csv: feature column 'age' is listed twice"):
        load_local_file(path, feature_columns="age,age")
    # An unselected non-numeric column is not read; a selected one is an error.
    with pytest.raises(ValueError, match=r"site.csv: non-numeric value 'x' in column 'note'"):
        load_local_file(path, feature_columns="age,note")
    # The default label column may be absent; a label column of NPY positions works too.
    npy = tmp_path / "a.npy"
    np.save(npy, np.array([[1.0, 0], [2.0, 1], [3.0, 1]]))
    assert load_local_file(npy)[1] is None
    X, y = load_local_file(npy, label_column=1)
    assert X.tolist() == [[1], [2], [3]] and y.tolist() == [0, 1, 1]
    with pytest.raises(ValueError, match=r"a.npy: no label column 'target'; the file's "
                                         r"columns are: 0, 1"):
        load_local_file(npy, label_column="target")


# ------------------------------------------------------------------------------------ NaN


def test_nan_named_by_file_column_and_row(tmp_path):
    path = tmp_path / "holes.csv"
    path.write_text("a,b,label\n1,2,0\n3,4,1\n5,,1\n,7,0\n")
    with pytest.raises(ValueError, match=r"holes.csv: missing value \(NaN or empty cell\) in "
                                         r"column 'b' at data row 3 \(1-based, header row not "
                                         r"counted\); 2 missing value\(s\) in 2 column\(s\)"):
        load_local_file(path, allow_nan=False)
    # Kept for the masked algorithms (the default).
    X, y = load_local_file(path, allow_nan=True)
    assert np.isnan(X[2, 1]) and np.isnan(X[3, 0]) and y.tolist() == [0, 1, 1, 0]

    npy = tmp_path / "holes.npy"
    np.save(npy, np.array([[1.0, 2.0, 3.0], [4.0, 5.0, np.nan]]))
    with pytest.raises(ValueError, match=r"holes.npy: missing value .* in column 2 at data "
                                         r"row 2 \(1-based\)"):
        load_local_file(npy, allow_nan=False)
    parquet = tmp_path / "holes.parquet"
    pd.DataFrame({"u": [1.0, np.nan], "v": [1.0, 2.0]}).to_parquet(parquet)
    with pytest.raises(ValueError, match=r"holes.parquet: missing value .* column 'u' at data "
                                         r"row 2"):
        load_local_file(parquet, allow_nan=False)
    # A missing label names its row too.
    bad = tmp_path / "nolabel.csv"
    bad.write_text("a,label\n1,0\n2,\n")
    with pytest.raises(ValueError, match=r"nolabel.csv: label column 'label' must be integers "
                                         r"\(missing or fractional value nan at data row 2"):
        load_local_file(bad)


# ------------------------------------------------------------------------------------- App


def _context(node_config):
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(),
                   run_config={"dataset": "local"})


def test_client_app_reads_the_node_config_file_keys(tmp_path, garst, caplog):
    from flwr_clustering.app.client_app import client_fn

    X, y = garst
    path = tmp_path / "site.csv"
    frame = _frame(X, y).rename(columns={"label": "cls"})
    frame.insert(2, "note", "text")  # an unselected non-numeric column
    frame.to_csv(path)  # with its index
    node_config = {"partition-id": 3, "data-path": str(path), "index-column": "Unnamed: 0",
                   "feature-columns": "a,b", "label-column": "cls", "header": "auto"}
    with caplog.at_level(logging.INFO, logger="flwr_clustering"):
        client = client_fn(_context(node_config))
    np.testing.assert_array_equal(client.X, X)
    np.testing.assert_array_equal(client.y, y)
    assert client.client_id == 3
    logged = [r.getMessage() for r in caplog.records if r.name.endswith("client_app")]
    assert any("site.csv: 800 rows, 2 features [a, b], label column 'cls', index column "
               "'Unnamed: 0' dropped" in m for m in logged)

    # Without the declaration the index is refused, with the client's id in the message.
    with pytest.raises(ValueError, match=r"client 3: .*site.csv: column 'Unnamed: 0' looks "
                                         r"like a row index"):
        client_fn(_context({"partition-id": 3, "data-path": str(path)}))
    # A headerless file with its label column by position (a node config's int).
    bare = tmp_path / "bare.csv"
    _frame(X, y).to_csv(bare, header=False, index=False)
    client = client_fn(_context({"data-path": str(bare), "label-column": 2}))
    np.testing.assert_array_equal(client.X, X)
    np.testing.assert_array_equal(client.y, y)


def test_client_app_missing_file_names_client_and_path(tmp_path):
    from flwr_clustering.app.client_app import client_fn, load_node_file

    missing = tmp_path / "nowhere.csv"
    with pytest.raises(FileNotFoundError, match=f"client 5: data-path '{missing}' of the node "
                                                 "config: no such file"):
        client_fn(_context({"partition-id": 5, "data-path": str(missing)}))
    # allow_nan=False (for the algorithms that need complete rows) names file, column, row.
    holes = tmp_path / "holes.csv"
    holes.write_text("a,b\n1,2\n3,\n")
    with pytest.raises(ValueError, match=r"client 2: .*holes.csv: missing value .* column 'b' "
                                         r"at data row 2"):
        load_node_file({"data-path": str(holes)}, 2, allow_nan=False)
    assert np.isnan(load_node_file({"data-path": str(holes)}, 2).X[1, 1])


@pytest.mark.parametrize("algorithm,refused", [("fkm", True), ("masked-federated", False)])
def test_the_app_refuses_missing_values_only_where_the_algorithm_needs_complete_rows(
        tmp_path, algorithm, refused):
    from flwr_clustering.app.client_app import client_fn

    holes = tmp_path / "holes.csv"
    holes.write_text("a,b,c\n1,2,\n3,4,\n4,7,\n")  # this site does not measure c
    context = _context({"partition-id": 1, "data-path": str(holes)})
    context.run_config.update({"algorithm": algorithm, "missing": "refuse"})
    if refused:
        with pytest.raises(ValueError, match=r"client 1: .*holes.csv: missing value .* column "
                                             r"'c' at data row 1"):
            client_fn(context)
        # the default (missing='auto', here 'mean'): the rows wait for the federation's
        # transform; a phase that needs complete rows before it is refused, naming the fix
        context.run_config.update({"missing": "auto"})
        client = client_fn(context)
        assert client.missing_cells == 3
        with pytest.raises(ValueError, match=r"client 1: its file .*holes.csv has 3 missing "
                                             r"cell\(s\) .* in 'c' \(3\), .*missing='mean'"):
            client.require_complete("round 1 train")
    else:  # the masked algorithms read NaN as an unobserved feature
        client = client_fn(context)
        assert np.isnan(client.X).sum() == 3 and client.mask.tolist() == [True, True, False]


@pytest.mark.parametrize(("text", "line", "why"), [
    # one column written with a decimal comma: pandas made the integer part a row index
    ("value\n-0,80\n-1,32\n", "line 2 has 2 fields ('-0,80') where line 1 has 1 ('value')",
     "decimal comma"),
    # a row longer than the header: pandas dropped its first field and shifted the rest
    ("a,b\n1.5,2.5,3.5\n", "line 2 has 3 fields ('1.5,2.5,3.5') where line 1 has 2", ";"),
    # a trailing separator on the data lines only (pandas dropped it) ...
    ("a,b\n1,2,\n3,4,\n", "line 2 has 3 fields ('1,2,') where line 1 has 2", "at the end"),
    # ... on every line (pandas added an all-NaN column 'Unnamed: 2') ...
    ("a,b,\n1,2,\n3,4,\n", "column 3 has no name and no value on any line", "at the end"),
    # ... and in a headerless file (an all-NaN column 2)
    ("1,2,\n3,4,\n", "column 3 has no name and no value on any line", "at the end"),
    # a longer row further down
    ("a,b\n1,2\n3,4,5\n", "Expected 2 fields in line 3, saw 3", "decimal comma"),
    # ';' between values, ',' as the decimal mark
    ("a;b\n1,5;2,5\n", "line 2 holds a decimal comma", "separated by ';'"),
])
def test_csv_lines_longer_than_the_header_are_refused_naming_the_line(tmp_path, text, line,
                                                                       why):
    path = tmp_path / "site.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_local_file(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and line in message and why in message, message
    assert "to_csv(path, index=False)" in message
    # the reader, too, never infers a row index
    with pytest.raises(ValueError, match="fields|no name|decimal comma"):
        read_local_file(path)


def test_csv_read_as_written_keeps_short_rows_and_every_value(tmp_path):
    path = tmp_path / "site.csv"
    path.write_text("a,b\n-0.80,1\n2.5,\n")  # a short row is a missing value, kept as NaN
    X, _ = load_local_file(path)
    np.testing.assert_array_equal(X, [[-0.80, 1.0], [2.5, np.nan]])


# ------------------------------------------------------------- NPY/NPZ without pandas
def _as_frame_read(path, X, labels, **options):
    """What the loader gave before NPY/NPZ lost pandas: the array as a data frame."""
    from flwr_clustering.data.local_file import _column_list, _select

    options["feature_columns"] = _column_list(path, options.get("feature_columns"))
    loaded = _select(path, pd.DataFrame(X), header=None,
                     **{"label_column": "label", "index_column": None, "allow_nan": True,
                        **options})
    if labels is not None:  # (its label_column names a column of X: refused before)
        import dataclasses

        loaded = dataclasses.replace(loaded, y=labels, label_column="y")
    return loaded


@pytest.mark.parametrize("options", [
    {}, {"label_column": 2}, {"label_column": "2"}, {"feature_columns": "2,0"},
    {"feature_columns": [1]}, {"index_column": 0}, {"index_column": "none"},
    {"label_column": "none"}, {"allow_nan": False}, {"label_column": 1, "index_column": 1},
    {"feature_columns": "0,0"}, {"feature_columns": "5"}, {"label_column": "extra"},
    {"feature_columns": "1", "label_column": 1}, {"index_column": 9},
])
@pytest.mark.parametrize("case", ["plain", "row-numbers", "nan", "fractional-label",
                                  "fortran"])
def test_npy_is_read_without_pandas_as_the_data_frame_read_it(tmp_path, options, case):
    rng = np.random.default_rng(3)
    X = np.round(rng.normal(size=(12, 4)), 3)
    X[:, 2] = rng.integers(0, 3, size=12)
    if case == "row-numbers":
        X[:, 0] = np.arange(12)
    elif case == "nan":
        X[4, 1] = np.nan
    elif case == "fractional-label":
        X[5, 2] = 0.5
    elif case == "fortran":
        X = np.asfortranarray(X)
    path = tmp_path / "site.npy"
    np.save(path, X)
    try:
        expected = _as_frame_read(path, np.asarray(X, dtype=np.float64), None, **options)
    except ValueError as exc:
        with pytest.raises(type(exc)) as got:
            read_local_file(path, **options)
        assert (got.value.public, str(got.value)) == (exc.public, str(exc))
        return
    loaded = read_local_file(path, **options)
    assert loaded.X.dtype == np.float64 and loaded.X.flags.c_contiguous
    assert loaded.X.tobytes() == expected.X.tobytes()
    assert (loaded.y is None) == (expected.y is None)
    if loaded.y is not None:
        assert loaded.y.dtype == np.int64 and np.array_equal(loaded.y, expected.y)
    assert [(type(f), f) for f in loaded.features] == [(type(f), f) for f in expected.features]
    assert (loaded.label_column, loaded.index_column, loaded.header, loaded.text,
            loaded.dates, loaded.notes) == (expected.label_column, expected.index_column,
                                            None, {}, {}, ())


def test_npz_labels_and_a_label_column_as_the_data_frame_read_them(tmp_path):
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(10, 3)), rng.integers(0, 2, size=10)
    path = tmp_path / "site.npz"
    np.savez(path, X=X, y=y)
    loaded = read_local_file(path)
    assert (loaded.label_column, loaded.features) == ("y", (0, 1, 2))
    np.testing.assert_array_equal(loaded.y, y)
    assert loaded.X.tobytes() == X.tobytes()
    with pytest.raises(ValueError, match=r"the archive has labels 'y', so label_column=1 "
                                         "cannot name a column of 'X' as well"):
        read_local_file(path, label_column=1)
