"""No cell leaves a site in an error (issue 50, item 3), and the loader's errors name the
fix (item 6): a client's error reply names the file, the column, the row and the kind of
problem, never the value or the line; the whole message stays in the site's own log."""

import logging

import numpy as np
import pytest

from flwr_clustering.clients import FedKMeansClient
from flwr_clustering.clients.errors import error_reasons
from flwr_clustering.data.local_file import load_local_file, read_local_file, save_local_file
from flwr_clustering.data.schema import SiteDataError
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid


def _good_csv(path, seed):
    rng = np.random.default_rng(seed)
    lines = ["age,weight,label"] + [f"{a:.3f},{w:.3f},{i % 2}" for i, (a, w) in
                                     enumerate(rng.normal(50, 5, (40, 2)))]
    path.write_text("\n".join(lines) + "\n")


def _run_with_bad_site(tmp_path, bad_text):
    """Two good sites and one whose file is ``bad_text``: the server's error, as raised."""
    from flwr_clustering.app.client_app import app as client

    configs = []
    for i in range(3):
        path = tmp_path / f"site{i}.csv"
        if i == 2:
            path.write_text(bad_text)
        else:
            _good_csv(path, i)
        configs.append({"data-path": str(path)})
    grid = InProcessGrid(client, 3, run_config={"dataset": "local"}, node_configs=configs)
    with pytest.raises(RuntimeError) as info:
        FedKMeans(2, min_nodes=3).start(grid=grid)
    return str(info.value)


def _rows(values, column="age"):
    """A CSV whose column ``column`` holds ``values`` (the others numbers), 40 rows."""
    rest = [v for v in ("age", "weight") if v != column]
    lines = [f"{column},{rest[0]},label"]
    lines += [f"{v},{60 + i % 7},{i % 2}" for i, v in enumerate(values)]
    return "\n".join(lines) + "\n"


CASES = {
    # a name in a numeric column
    "text cell": (_rows(["34"] + ["John Smith"] + [str(30 + i) for i in range(38)]),
                  "John Smith", ["site2.csv", "non-numeric value", "column 'age'",
                                 "data row 2, 1-based"]),
    # a birth date in a numeric column
    "date cell": (_rows([str(30 + i) for i in range(5)] + ["1984-03-12"]
                        + [str(30 + i) for i in range(34)]),
                  "1984-03-12", ["site2.csv", "non-numeric value", "column 'age'",
                                 "data row 6, 1-based"]),
    # a malformed line (a row longer than the header): its fields are cells
    "malformed line": ("age,weight,label\n51.25,73.5,1,9321.77\n50.0,70.0,0\n",
                       "9321.77", ["site2.csv", "line 2 has 4 fields where line 1 has 3",
                                   "decimal comma"]),
    # an identifier in the label column
    "identifier": ("age,weight,label\n" + "".join(
        f"{30 + i},{60 + i},{'MRN-004211' if i == 7 else i % 2}\n" for i in range(40)),
        "MRN-004211", ["site2.csv", "non-numeric value", "label column 'label'",
                       "data row 8, 1-based"]),
    # a categorical level held by one row (under any privacy threshold) in a column of
    # codes
    "rare level": ("age,region,label\n" + "".join(
        f"{30 + i},{'Atlantis' if i == 11 else 1 + i % 3},{i % 2}\n" for i in range(40)),
        "Atlantis", ["site2.csv", "non-numeric value", "column 'region'",
                     "data row 12, 1-based"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_sites_error_reaches_the_server_without_the_cell(case, tmp_path, log):
    text, value, named = CASES[case]
    message = _run_with_bad_site(tmp_path, text)
    reasons = [r.getMessage() for r in log.records  # the server's log
               if not r.name.startswith("flwr_clustering.clients")]
    said = [r for r in reasons if "client 2 (node 102) failed" in r]
    assert said, reasons
    for text_out in (message, *said):
        assert "client 2: " in text_out
        for part in named:
            assert part in text_out, (part, text_out)
        assert value not in text_out, text_out
        assert str(tmp_path) not in text_out  # the file by its name, not the site's folders
    # the site's own log keeps the whole message, with the cell
    node_side = [r.getMessage() for r in log.records
                 if r.name == "flwr_clustering.clients.handlers" and r.levelno == logging.WARNING]
    assert node_side and all(value in m and str(tmp_path / "site2.csv") in m
                             for m in node_side), node_side


def test_result_json_of_a_refused_run_holds_no_cell(tmp_path, log):
    """The App's result.json and the server's log name the file, column and row only."""
    from flwr_clustering.app.client_app import app as client
    from flwr_clustering.app.server_app import run_server

    configs = []
    for i in range(3):
        path = tmp_path / f"site{i}.csv"
        if i == 1:
            path.write_text(CASES["text cell"][0])
        else:
            _good_csv(path, i)
        configs.append({"data-path": str(path)})
    run_config = {"dataset": "local", "k": 2, "min-nodes": 3,
                  "out-dir": str(tmp_path / "out")}
    grid = InProcessGrid(client, 3, run_config=run_config, node_configs=configs)
    with pytest.raises(Exception):  # noqa: B017, PT011 - refused (which error: other tests)
        run_server(grid, run_config)
    result = (tmp_path / "out" / "result.json").read_text()
    assert "John Smith" not in result and "failed" in result
    server_side = [r.getMessage() for r in log.records
                   if not r.name.startswith("flwr_clustering.clients")]
    assert not [m for m in server_side if "John Smith" in m], server_side
    assert [m for m in server_side if "site1.csv: non-numeric value in column 'age'" in m]


def test_a_foreign_exception_sends_its_type_and_the_phase_only():
    """``float('John Smith')`` in our own code: NumPy's/Python's words quote the cell."""
    try:
        np.asarray([["1.5", "John Smith"]], dtype=object).astype(np.float64)
    except ValueError as ex:
        public, detail, vetted = error_reasons(ex, 4, "round 1 query (data-source)")
    assert public == ("client 4: ValueError while answering round 1 query (data-source) "
                      "(the detail is in the site's log)")
    assert "John Smith" in detail and not vetted


def test_our_own_messages_and_site_data_errors_are_sent_as_written():
    err = SiteDataError("site.csv: non-numeric value in column 'a' (data row 2, 1-based)",
                        "/data/site.csv: non-numeric value 'Jo' in column 'a' (data row 2)")
    public, detail, vetted = error_reasons(err.prefixed("client 1: "), 1, "round 1")
    assert public == "client 1: site.csv: non-numeric value in column 'a' (data row 2, 1-based)"
    assert detail == "client 1: /data/site.csv: non-numeric value 'Jo' in column 'a' (data row 2)"
    assert vetted
    try:  # a message of ours, raised by a raise statement of the package
        FedKMeansClient(np.zeros((0, 2)), client_id=3)
    except ValueError as ex:
        public, detail, vetted = error_reasons(ex, 3, "round 1")
    assert vetted and public == detail and "Jo" not in public


def test_the_handler_sends_the_public_message_and_logs_the_detail(tmp_path, log):
    """Calling the handler directly: a client_fn whose file has a name in a number column."""
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

    from flwr_clustering.clients import handle_query
    from flwr_clustering.protocol import DATA_SOURCE_PHASE

    path = tmp_path / "ward7.csv"
    path.write_text("age,weight\n34,70\nJane Doe,80\n")

    def client_fn(context):
        X, _ = load_local_file(path)
        return FedKMeansClient(X, client_id=5)

    msg = Message(RecordDict({"config": ConfigRecord({"phase": DATA_SOURCE_PHASE})}),
                  dst_node_id=1, message_type=MessageType.QUERY)
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 5}, state=RecordDict(),
                      run_config={})
    reply = handle_query(msg, context, client_fn)
    assert reply.has_error()
    assert reply.error.reason == (
        "client 5: ward7.csv: non-numeric value in column 'age' (data row 2, 1-based), 1 "
        "such cell(s): a column of numbers holds text; fix or empty those cells, or leave "
        "the column out of the features")
    logged = [r.getMessage() for r in log.records if r.name == "flwr_clustering.clients.handlers"]
    assert any("'Jane Doe'" in m and str(path) in m for m in logged), logged


def test_the_legacy_client_raises_the_public_message(tmp_path, log):
    from flwr_clustering.clients.legacy import LegacyClient

    class Refusing(FedKMeansClient):
        def fit(self, parameters, config):
            raise SiteDataError("site.csv: non-numeric value in column 'a' (data row 2)",
                                "/srv/site.csv: non-numeric value 'Jane Doe' in column 'a'")

    client = LegacyClient(Refusing(np.ones((4, 2)), client_id=2))
    with pytest.raises(RuntimeError) as info:
        client.fit([], {"phase": "init"})
    assert str(info.value) == ("client 2: site.csv: non-numeric value in column 'a' (data "
                               "row 2) (SiteDataError)")
    assert any("Jane Doe" in r.getMessage() for r in log.records)


def test_the_site_check_prints_no_line_of_a_malformed_file(tmp_path, capsys):
    from flwr_clustering.__main__ import main

    path = tmp_path / "site.csv"
    path.write_text("a,b\n1.5,2.5,777.125\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 2 has 3 fields where line 1 has 2" in err and "777.125" not in err


# ------------------------------------------------------------------ errors that name the fix


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_csv_separated_by_semicolons_or_tabs_is_read_when_every_line_agrees(tmp_path, sep):
    X = np.array([[1.5, -2.25], [3.0, 4.125], [0.5, 7.0]])
    comma = tmp_path / "comma.csv"
    save_local_file(comma, X, np.array([0, 1, 0]))
    other = tmp_path / "other.csv"
    other.write_text(comma.read_text().replace(",", sep))
    a, b = read_local_file(comma), read_local_file(other)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y) and a.features == b.features


@pytest.mark.parametrize(("sep", "name"), [(";", "';'"), ("\t", "tabs")])
def test_a_csv_separated_by_semicolons_or_tabs_that_disagree_is_refused_naming_it(
        tmp_path, sep, name):
    path = tmp_path / "site.csv"
    path.write_text(sep.join(["a", "b"]) + "\n" + sep.join(["1.5", "2.5"]) + "\n"
                    + sep.join(["3.5", "4.5", "8.5"]) + "\n")
    with pytest.raises(SiteDataError) as info:
        load_local_file(path)
    assert info.value.public == (
        f"site.csv: the values are separated by {name}, and line 3 has 3 fields where line "
        "1 has 2: write it with ',' between values and '.' as the decimal mark (pandas: "
        "to_csv(path, index=False))")
    comma = tmp_path / "comma.csv"
    comma.write_text("a;b\n1,5;2,5\n")  # a decimal comma: refused, not guessed
    with pytest.raises(SiteDataError, match="separated by ';' and line 2 holds a decimal "
                                            "comma .*'.' as the decimal mark"):
        load_local_file(comma)


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".csv", ".parquet"])
def test_an_empty_file_is_refused_naming_it(tmp_path, suffix):
    path = tmp_path / f"site{suffix}"
    path.write_bytes(b"")
    with pytest.raises(SiteDataError) as info:
        load_local_file(path)
    assert info.value.public.startswith(f"site{suffix}: file is empty (0 bytes): write the "
                                        "site's rows into it")


def test_a_cut_npy_is_refused_naming_the_file_and_the_fix(tmp_path):
    path = tmp_path / "site.npy"
    np.save(path, np.ones((10, 3)))
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(SiteDataError) as info:
        load_local_file(path)
    assert info.value.public == ("site.npy: cannot read as a NumPy .npy array (a cut or "
                                 "overwritten file, or another format): save the rows with "
                                 "numpy.save(path, X)")


def test_a_header_that_names_a_column_twice_is_refused_naming_it(tmp_path):
    path = tmp_path / "site.csv"
    path.write_text("f0,f1,f0\n1,2,3\n4,5,6\n")
    with pytest.raises(SiteDataError) as info:
        load_local_file(path)
    assert info.value.public == ("site.csv: the header names a column twice: 'f0' (columns "
                                 "1, 3): give each column its own name (or drop the copy) "
                                 "before the run")


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_complex_arrays_are_refused_naming_the_fix(tmp_path, suffix):
    path = tmp_path / f"site{suffix}"
    X = np.ones((5, 2)) + 1j
    if suffix == ".npy":
        np.save(path, X)
    else:
        np.savez(path, X=X)
    with pytest.raises(SiteDataError) as info:
        load_local_file(path)
    assert "hold complex numbers (dtype complex128)" in info.value.public
    assert "numpy.column_stack([X.real, X.imag])" in info.value.public


def test_an_index_column_that_no_site_has_is_refused_naming_it():
    from flwr_clustering.data.schema import ColumnInfo, SchemaError, agree_schema

    sites = {f"client {i}": [ColumnInfo("patient_id", "integer", True, 40),
                             ColumnInfo("age", "numeric", False, 40)] for i in range(2)}
    with pytest.raises(SchemaError) as info:
        agree_schema(sites, index_column="patientid")
    assert str(info.value).startswith(
        "index-column names 'patientid', which no site has ('patientid' may be "
        "'patient_id'); the sites' columns are 'patient_id', 'age': check the name, or "
        "leave index-column out of the run config")
    # the same with feature-columns and with categorical columns beside
    with pytest.raises(SchemaError, match="index-column names 'pid', which no site has"):
        agree_schema(sites, index_column="pid", feature_columns=["age"])
    assert agree_schema(sites, index_column="patient_id").features == ("age",)


def test_the_estimator_refuses_duplicated_column_names_naming_them():
    import pandas as pd

    from flwr_clustering.estimator import FederatedClustering

    rng = np.random.default_rng(0)
    good = pd.DataFrame(rng.normal(size=(30, 3)), columns=["a", "b", "c"])
    bad = pd.DataFrame(rng.normal(size=(30, 3)), columns=["a", "b", "a"])
    with pytest.raises(ValueError) as info:
        FederatedClustering("fkm", n_clusters=2).fit([good, bad])
    assert str(info.value) == (
        "partitions[1]: column name(s) 'a' appear twice (positions 'a': 0, 2): give each "
        "column its own name (frame.columns.duplicated() finds the copies; "
        "frame.loc[:, ~frame.columns.duplicated()] drops them)")


@pytest.mark.parametrize("frames", [False, True])
def test_the_estimator_refuses_complex_input_naming_the_fix(frames):
    import pandas as pd

    from flwr_clustering.estimator import FederatedClustering

    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(30, 2)) for _ in range(2)]
    parts[1] = parts[1] + 1j
    if frames:
        parts = [pd.DataFrame(p, columns=["a", "b"]) for p in parts]
    with pytest.raises(ValueError) as info:
        FederatedClustering("fkm", n_clusters=2).fit(parts)
    where = ("partitions[1]: column 'a' holds complex numbers (dtype complex128)" if frames
             else "partitions[1] holds complex numbers")
    assert str(info.value).startswith(f"{where}: clustering needs real numbers"), info.value
    assert "numpy.column_stack([X.real, X.imag])" in str(info.value)
    # and at prediction
    model = FederatedClustering("fkm", n_clusters=2, random_state=0).fit(
        [np.real(p) if not frames else p.apply(np.real) for p in parts])
    with pytest.raises(ValueError, match="X holds complex numbers|holds complex numbers"):
        model.predict(parts[1])


def test_a_deeply_nested_model_json_is_refused_as_not_a_model(tmp_path):
    from flwr_clustering.data.site_check import load_schema
    from flwr_clustering.model import load_model

    path = tmp_path / "model.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError) as info:
        load_model(path)
    assert str(info.value) == (
        f"{str(path)!r} is not a model file of flwr_clustering: its JSON nests deeper than "
        "Python reads (a model.json is a few levels deep): give the model.json that a run "
        "wrote")
    with pytest.raises(ValueError, match="neither a schema.json nor a model.json of "
                                         "flwr_clustering: its JSON nests deeper"):
        load_schema(path)


def test_a_foreign_error_while_reading_a_nodes_file_sends_no_cell(tmp_path, monkeypatch):
    """pandas' own words (an out-of-range date, a parse error) may quote a cell."""
    from flwr_clustering.app import client_app as app_module
    from flwr_clustering.data.site_cache import clear_memory_cache

    def foreign(path, **options):
        raise ValueError("Out of bounds nanosecond timestamp: 2999-01-01 00:00:00")

    monkeypatch.setattr(app_module, "read_local_file", foreign)
    clear_memory_cache()
    path = tmp_path / "ward.parquet"
    with pytest.raises(SiteDataError) as info:
        app_module.load_node_file({"data-path": str(path)}, 3)
    clear_memory_cache()
    assert info.value.public == ("client 3: ward.parquet: ValueError while reading the file "
                                 "(the detail is in the site's log)")
    assert "2999-01-01" in info.value.detail


def test_a_failed_candidate_of_a_search_sends_no_cell():
    from flwr_clustering.clients.candidates import fit_candidates

    client = FedKMeansClient(np.ones((6, 2)), client_id=1)

    def step(params, config):
        float("Jane Doe")  # a foreign error quoting a cell

    config = {"candidates": '[{"arrays": 0, "config": {}}]'}
    _, _, _, errors = fit_candidates(client, step, [], config)
    assert errors == {"0": "client 1: ValueError while answering candidate 0 (the detail "
                           "is in the site's log)"}


def test_a_site_of_text_columns_only_is_refused_by_the_schema_not_by_its_hash(tmp_path):
    """Rows without a numeric column (a ';' file read as one text column, before) failed
    the data-source reply with 'memoryview: cannot cast view ...'."""
    from flwr_clustering.app.client_app import app as client
    from flwr_clustering.app.server_app import run_server
    from flwr_clustering.clients.integrity import data_hash
    from flwr_clustering.data.schema import SchemaError

    X = np.arange(6.0).reshape(3, 2)
    assert data_hash(X) == data_hash(X.copy()) != data_hash(X[:, ::-1].copy())
    assert isinstance(data_hash(np.zeros((3, 0))), int)
    configs = []
    for i in range(3):
        path = tmp_path / f"site{i}.csv"
        if i == 2:
            path.write_text("name\n" + "".join(f"person{j}\n" for j in range(40)))
        else:
            _good_csv(path, i)
        configs.append({"data-path": str(path)})
    run_config = {"dataset": "local", "k": 2, "min-nodes": 3, "out-dir": str(tmp_path / "o")}
    grid = InProcessGrid(client, 3, run_config=run_config, node_configs=configs)
    with pytest.raises(SchemaError, match="client 2 lacks 'age', 'weight' and has 'name'"):
        run_server(grid, run_config)


def test_a_site_data_error_keeps_both_messages_through_pickling():
    import pickle

    from flwr_clustering.data.local_file import MalformedCsvError

    for cls in (SiteDataError, MalformedCsvError):
        back = pickle.loads(pickle.dumps(cls("a.csv: line 2", "/x/a.csv: line 2 ('1,2,3')")))
        assert type(back) is cls
        assert (back.public, back.detail) == ("a.csv: line 2", "/x/a.csv: line 2 ('1,2,3')")
