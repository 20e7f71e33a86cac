"""``python -m simulations choose-k --quick``: the benchmark runs and writes its tables."""

import json
import logging

from simulations.choose_k import RULES, main, summarize


def test_the_quick_benchmark_writes_its_tables(tmp_path):
    level = logging.getLogger("flwr_clustering").level
    assert main(["--quick", "--algorithms", "fkm", "--out", str(tmp_path)]) == 0
    assert logging.getLogger("flwr_clustering").level == level  # restored
    result = json.loads((tmp_path / "choose_k.json").read_text())
    rows = result["rows"]
    assert {r["data"] for r in rows} == {"iris", "blobs4"}
    assert all("error" not in r for r in rows)
    blobs = next(r for r in rows if r["data"] == "blobs4" and r["variant"] == "fkm")
    # four well-separated blobs: every rule and the centralized silhouette find 4
    assert blobs["central-silhouette"] == 4 and blobs["k"] == 4
    assert set(blobs["picks"]) == set(RULES)
    assert blobs["single-rounds"] >= 1 and blobs["bytes-per-client"] > 0
    text = (tmp_path / "choose_k.md").read_text()
    for heading in ("## Agreement", "## Cost of k='auto'", "## n-init"):
        assert heading in text


def test_summarize_counts_agreement_per_rule():
    base = {"data": "d", "split": "iid", "seed": 0, "true-k": 3, "central-silhouette": 3,
            "central-calinski-harabasz": 4, "central-davies-bouldin": 3}
    rows = [{**base, "variant": "fkm", "k": 3,
             "picks": {"silhouette": 3, "calinski-harabasz": 4, "davies-bouldin": 2,
                       "sse-knee": 3}},
            {**base, "seed": 1, "variant": "fkm", "k": 2,
             "picks": {"silhouette": 2, "calinski-harabasz": 3, "davies-bouldin": 3,
                       "sse-knee": 3}}]
    table = {r["rule"]: r for r in summarize(rows)["agreement"]}
    assert table["silhouette"]["central-silhouette"] == "50 % (1/2)"
    assert table["calinski-harabasz"]["central-same-criterion"] == "50 % (1/2)"
    assert table["davies-bouldin"]["true-k"] == "50 % (1/2)"
    assert table["sse-knee"]["true-k"] == "100 % (2/2)"
