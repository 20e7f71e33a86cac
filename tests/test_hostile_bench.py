"""The hostile command: one hostile party per case against the App, each in its own process."""

from __future__ import annotations

import json


def test_hostile_cases_end_as_the_issue_asks_and_no_secret_reaches_the_server(tmp_path):
    from simulations.cli import main

    cases = ["honest", "cell-in-error", "graph-path", "deep-json", "count-1e9",
             "split-scatter"]
    assert main(["hostile", "--cases", ",".join(cases), "--out", str(tmp_path),
                 "--seconds", "120"]) == 0
    rows = {r["case"]: r for r in json.loads((tmp_path / "hostile.json").read_text())}
    assert set(rows) == set(cases)
    honest = rows["honest"]
    assert honest["ended"] == "completed" and honest["clients"] == 5
    # a name in a numeric column: the site is left out, its cell stays on the site
    cell = rows["cell-in-error"]
    assert cell["ended"] == "completed" and cell["clients"] == 4
    assert cell["secret left"] is False
    assert "site1.csv" in cell["log"][0] and "sepal length (cm)" in cell["log"][0]
    # a run config naming a server file: refused before any message, the file unread
    graph = rows["graph-path"]
    assert graph["ended"] == "refused" and graph["secret left"] is False
    assert "'graph'" in graph["error"] and graph["result.json"]
    # a reply that breaks its phase's contract is dropped, named, and the run goes on
    # with the other four clients; the honest clients' model is the honest one
    for case in ("deep-json", "count-1e9", "split-scatter"):
        row = rows[case]
        assert row["tampered replies"] >= 1, row
        assert row["ended"] == "completed" and row["clients"] == 5, row
        assert any("broke the reply contract" in line for line in row["log"]), row
    # without the liar's sums the scaling is the other four sites': a model as good
    assert rows["count-1e9"]["ari"] > honest["ari"] - 0.1
    assert "| graph-path | refused |" in (tmp_path / "hostile.md").read_text()
