"""The snippets of the README and of the docs run as written, through an in-process grid.

A snippet is a ```python block right after a ``<!-- readme-test: TAG -->`` line, in README.md
or in a page under docs/; a snippet that moves between pages moves with its test.
"""

import re
from pathlib import Path

import numpy as np
from flwr.app import Context, RecordDict

from flwr_clustering.algorithms.fkm import run_fkm
from flwr_clustering.data import load_partition
from flwr_clustering.testing import InProcessGrid

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FECA_GUIDE = DOCS / "algorithms" / "feca.md"
MASKED_GUIDE = DOCS / "algorithms" / "masked.md"
DEEPFECA_GUIDE = DOCS / "algorithms" / "deepfeca.md"
TESTING_GUIDE = DOCS / "testing.md"
_TAG = r"<!-- readme-test: ([\w-]+) -->\n```python\n(.*?)```"


def snippet(path, tag):
    """The snippet tagged ``tag`` in the Markdown file ``path``."""
    found = [code for t, code in re.findall(_TAG, Path(path).read_text(), re.S) if t == tag]
    assert len(found) == 1, f"{path.relative_to(ROOT)} has {len(found)} snippets tagged {tag}"
    return found[0]


def _run(path, tag, ns):
    exec(compile(snippet(path, tag), f"{path.relative_to(ROOT)}:{tag}", "exec"), ns)


def test_readme_server_and_client_snippets_run(capsys):
    server_ns, client_ns = {}, {}
    _run(README, "server", server_ns)
    _run(README, "client", client_ns)
    grid = InProcessGrid(client_ns["app"], 2)  # Flower's default local federation
    server_ns["app"](grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                   run_config={}))
    out = capsys.readouterr().out
    assert "centroids: (16, 2)" in out
    ari = float(re.search(r"'ari': ([0-9.]+)", out).group(1))
    assert ari > 0.9
    # ... and it is the same computation as the pure loop
    clients = [load_partition(i, 2, dataset="garst-grid", partitioner="iid")[0]
               for i in range(2)]
    ref = run_fkm(clients, 16, seed=0, max_rounds=20)
    sent = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    np.testing.assert_array_equal(sent[-1].content["arrays"].to_numpy_ndarrays()[0], ref.centroids)


def test_readme_commands_are_the_ci_commands():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev,torch]" && pytest -n 2\n' in text
    # CI runs the same two steps, timing each (install, then the default suite)
    lines = [line.strip() for line in ci.splitlines()]
    install = lines.index('pip install -e ".[dev,torch]"')
    assert "pytest -n 2" in lines[install + 1:]
    assert "pip install -e . && " in text and "flwr run . --stream" in text


def test_docs_feca_snippet_runs_and_equals_the_pure_loop(capsys):
    from flwr_clustering.algorithms.feca import run_feca

    ns = {}
    _run(FECA_GUIDE, "feca", ns)
    out = capsys.readouterr().out
    assert "FeCA: (15, 2) NMI" in out
    assert float(re.search(r"NMI ([0-9.]+)", out).group(1)) > 0.8
    clients = [load_partition(i, 10, dataset="sset-1", partitioner="dirichlet",
                              dirichlet_alpha=0.3)[0] for i in range(10)]
    np.testing.assert_array_equal(ns["centroids"], run_feca(clients, 15).centroids)


def test_docs_masked_snippet_runs_and_is_exact(capsys):
    ns = {}
    _run(MASKED_GUIDE, "masked", ns)
    assert "Algorithm 2: (16, 128) accuracy 1.0" in capsys.readouterr().out
    from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot

    clients = [load_partition(i, 10, dataset="dim-128", feature_mask="shared")[0]
               for i in range(10)]
    np.testing.assert_array_equal(ns["centroids"], run_masked_oneshot(clients, 16).centroids)


def test_docs_deepfeca_snippet_runs_and_equals_the_pure_loop(capsys):
    import pytest

    pytest.importorskip("torch")
    from flwr_clustering.algorithms.deepfeca import TrainOptions, run_deepfeca

    ns = {}
    _run(DEEPFECA_GUIDE, "deepfeca", ns)
    out = capsys.readouterr().out
    assert re.search(r"DeepFeCA: 17 weight arrays, C\* \((\d+), 32\)", out), out
    clients = [load_partition(i, 5, dataset="digits", partitioner="iid")[0] for i in range(5)]
    ref = run_deepfeca(clients, 30, rounds=2, options=TrainOptions(epochs=1))
    np.testing.assert_array_equal(ns["result"].arrays["centroids"].numpy(), ref.centroids)
    assert all(np.array_equal(a, b) for a, b in zip(ns["weights"], ref.weights, strict=True))


def test_docs_testing_snippet_runs_the_shared_helpers(capsys, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "mkdtemp", lambda: str(tmp_path / "out"))
    _run(TESTING_GUIDE, "testing", {})  # asserts FKM's run equals its pure loop itself
    assert "k-FED through the App: (3, 2) clients 2" in capsys.readouterr().out
    assert (tmp_path / "out" / "result.json").is_file()


def test_every_tagged_snippet_is_tested():
    # A new or moved snippet needs its test here: the tags found must be the ones tested above.
    # (the estimator's snippets: tests/test_estimator.py; the legacy one: tests/test_legacy.py)
    tested = {(README, "server"), (README, "client"), (FECA_GUIDE, "feca"),
              (MASKED_GUIDE, "masked"), (DEEPFECA_GUIDE, "deepfeca"), (TESTING_GUIDE, "testing"),
              (README, "estimator"), (DOCS / "estimator.md", "estimator"),
              (DOCS / "legacy.md", "legacy")}
    found = {(path, tag) for path in [README, *sorted(DOCS.rglob("*.md"))]
             for tag, _ in re.findall(_TAG, path.read_text(), re.S)}
    assert found == tested
