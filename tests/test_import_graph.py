"""Imports point one way (issue 35, item 2): no import cycle among the benchmarks and
reproductions of ``simulations/`` nor in the library ``flwr_clustering/``, counting imports
inside functions too (an import there hides a cycle, it does not remove it); and the layers
import downward: the client adapter knows neither the legacy adapter nor secure
aggregation, and the module that holds the algorithms' declarations imports no strategy."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str, root: Path) -> dict[str, Path]:
    out = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name:
                found.add(target)
    return found


def cycles(package: str, root: Path = ROOT) -> list[list[str]]:
    """The groups of modules of ``package`` (under ``root``) that import each other."""
    known = _modules(package, root)
    names = sorted(known)
    index = {n: i for i, n in enumerate(names)}
    edges = [(index[a], index[b]) for a in names for b in _imported(a, known[a], known)]
    if not edges:
        return []
    rows, cols = zip(*edges, strict=True)
    graph = csr_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(names),) * 2)
    _, labels = connected_components(graph, directed=True, connection="strong")
    groups = [[names[i] for i in np.flatnonzero(labels == c)] for c in np.unique(labels)]
    return [g for g in groups if len(g) > 1]


def test_the_graph_sees_a_cycle_through_an_import_inside_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert cycles("pkg", tmp_path) == [["pkg.a", "pkg.b"]]


def test_simulations_has_no_import_cycle():
    assert cycles("simulations") == []


def test_the_library_has_no_import_cycle():
    assert cycles("flwr_clustering") == []


def _imports_of(module: str) -> set[str]:
    known = _modules("flwr_clustering", ROOT)
    return _imported(module, known[module], known)


#: The client adapter's modules: the handlers and what answers a message below them.
CLIENT_ADAPTER_MODULES = ("handlers", "phases", "statistics", "integrity", "messages",
                          "labels", "candidates", "errors")


def test_the_client_adapter_knows_neither_the_legacy_adapter_nor_secure_aggregation():
    for name in ("base", *CLIENT_ADAPTER_MODULES):
        below = _imports_of(f"flwr_clustering.clients.{name}")
        assert not below & {"flwr_clustering.legacy", "flwr_clustering.secure",
                            "flwr_clustering.clients.adapter",
                            "flwr_clustering.clients.legacy"}, name
        assert not any(m.startswith("flwr_clustering.strategies") for m in below), name
    # the plugins sit above what they wrap: the ClientApp builder composes the two
    assert {"flwr_clustering.clients.handlers", "flwr_clustering.secure"} <= _imports_of(
        "flwr_clustering.clients.adapter")
    assert not any(m.startswith("flwr_clustering.clients")
                   for m in _imports_of("flwr_clustering.secure"))


def test_the_client_base_imports_nothing_that_answers_a_message():
    """The client base is below the adapter: the adapter answers with any NumPyClient."""
    below = _imports_of("flwr_clustering.clients.base")
    assert not below & {f"flwr_clustering.clients.{m}" for m in CLIENT_ADAPTER_MODULES}
    assert "flwr_clustering.clients.base" not in set().union(
        *(_imports_of(f"flwr_clustering.clients.{m}") for m in CLIENT_ADAPTER_MODULES))


def test_the_declarations_and_the_registry_import_no_strategy_and_strategies_no_client():
    # the algorithms are declared as data (flwr_clustering/specs.py, by dotted path): the
    # registry imports the declarations only, and no strategy imports a client
    for name in ("flwr_clustering.algorithm_specs", "flwr_clustering.specs",
                 "flwr_clustering.registry"):
        assert not any(m.startswith(("flwr_clustering.strategies", "flwr_clustering.clients"))
                       for m in _imports_of(name)), name
    strategies = [m for m in _modules("flwr_clustering", ROOT)
                  if m.startswith("flwr_clustering.strategies.")]
    assert len(strategies) > 10
    for name in strategies:
        imported = _imports_of(name)
        assert not any(m.startswith("flwr_clustering.clients") for m in imported), name


def test_the_flower_only_selection_keeps_the_flower_layer_and_leaves_the_pure_cores():
    from conftest import runs_flower

    tests = ROOT / "tests"
    assert runs_flower(tests / "test_flower_layer.py")
    assert runs_flower(tests / "test_strategy_parts.py")
    assert runs_flower(tests / "test_estimator.py")
    assert not runs_flower(tests / "test_metrics.py")
    assert not runs_flower(tests / "test_algorithms_fkm.py")
