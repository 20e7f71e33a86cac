"""The robust command: one lying site against FKM, with and without robust-trim."""

from __future__ import annotations

import json


def test_robust_bench_writes_the_table_and_the_bound_drops_the_absurd_site(tmp_path):
    from simulations.cli import main

    assert main(["robust", "--seeds", "1", "--data", "iris", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "robust.json").read_text())
    assert {(r["split"], r["case"]) for r in rows} == {
        (s, c) for s in ("iid", "dirichlet") for c in ("honest", "absurd", "shift", "shrink")}
    by = {(r["split"], r["case"], r["robust-trim"]): r for r in rows}
    for split in ("iid", "dirichlet"):
        # 1e30 means: dropped every round, so the model is an honest one
        assert by[(split, "absurd", 0.0)]["dropped"] >= 1
        assert by[(split, "absurd", 0.0)]["ari"] > 0.3
        assert by[(split, "honest", 0.0)]["dropped"] == 0
        assert by[(split, "honest", 0.0)]["sse-ratio"] < 1.5
    assert "| iris, iid | shrink |" in (tmp_path / "robust.md").read_text()
