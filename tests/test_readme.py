"""The README's snippets run as written, through an in-process grid."""

import re
from pathlib import Path

import numpy as np
from flwr.app import Context, RecordDict

from flwr_clustering.algorithms.fkm import run_fkm
from flwr_clustering.data import load_partition
from flwr_clustering.testing import InProcessGrid

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippet(tag):
    text = README.read_text()
    match = re.search(rf"<!-- readme-test: {tag} -->\n```python\n(.*?)```", text, re.S)
    assert match, f"README has no snippet tagged {tag}"
    return match.group(1)


def test_readme_server_and_client_snippets_run(capsys):
    server_ns, client_ns = {}, {}
    exec(compile(_snippet("server"), "README-server", "exec"), server_ns)
    exec(compile(_snippet("client"), "README-client", "exec"), client_ns)
    grid = InProcessGrid(client_ns["app"], 5)
    server_ns["app"](grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                   run_config={}))
    out = capsys.readouterr().out
    assert "centroids: (16, 2)" in out
    ari = float(re.search(r"'ari': ([0-9.]+)", out).group(1))
    assert ari > 0.9
    # ... and it is the same computation as the pure loop
    clients = [load_partition(i, 5, dataset="garst-grid", beta=1.0)[0] for i in range(5)]
    ref = run_fkm(clients, 16, seed=0, max_rounds=20)
    sent = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    np.testing.assert_array_equal(sent[-1].content["arrays"].to_numpy_ndarrays()[0], ref.centroids)


def test_readme_commands_are_the_ci_commands():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev,torch]" && pytest' in text
    assert 'pip install -e ".[dev,torch]" && pytest' in ci
    assert "pip install -e . && " in text and "flwr run . --stream" in text


def test_readme_feca_snippet_runs_and_equals_the_pure_loop(capsys):
    from flwr_clustering.algorithms.feca import run_feca

    ns = {}
    exec(compile(_snippet("feca"), "README-feca", "exec"), ns)
    out = capsys.readouterr().out
    assert "FeCA: (15, 2) NMI" in out
    assert float(re.search(r"NMI ([0-9.]+)", out).group(1)) > 0.8
    clients = [load_partition(i, 10, dataset="sset-1", partitioner="dirichlet",
                              dirichlet_alpha=0.3)[0] for i in range(10)]
    np.testing.assert_array_equal(ns["centroids"], run_feca(clients, 15).centroids)


def test_readme_masked_snippet_runs_and_is_exact(capsys):
    ns = {}
    exec(compile(_snippet("masked"), "README-masked", "exec"), ns)
    assert "Algorithm 2: (16, 128) accuracy 1.0" in capsys.readouterr().out
    from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot

    clients = [load_partition(i, 10, dataset="dim-128", feature_mask="shared")[0]
               for i in range(10)]
    np.testing.assert_array_equal(ns["centroids"], run_masked_oneshot(clients, 16).centroids)


def test_readme_deepfeca_snippet_runs_and_equals_the_pure_loop(capsys):
    import pytest

    pytest.importorskip("torch")
    from flwr_clustering.algorithms.deepfeca import TrainOptions, run_deepfeca

    ns = {}
    exec(compile(_snippet("deepfeca"), "README-deepfeca", "exec"), ns)
    out = capsys.readouterr().out
    assert re.search(r"DeepFeCA: 17 weight arrays, C\* \((\d+), 32\)", out), out
    clients = [load_partition(i, 5, dataset="digits", partitioner="iid")[0] for i in range(5)]
    ref = run_deepfeca(clients, 30, rounds=2, options=TrainOptions(epochs=1))
    np.testing.assert_array_equal(ns["result"].arrays["centroids"].numpy(), ref.centroids)
    assert all(np.array_equal(a, b) for a, b in zip(ns["weights"], ref.weights, strict=True))
