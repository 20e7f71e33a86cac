"""Algorithms declared as data (issue 51, item 4): the specs of ``flwr_clustering.specs``.

The registry lists the algorithms and their capabilities from the declarations alone (no
strategy, no client imported); every declaration's dotted paths resolve; and what it
declares it can do agrees with its strategy class, so the data cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from flwr_clustering import model, registry
from flwr_clustering.algorithm_specs import AlgorithmSpec, Capabilities, resolve
from flwr_clustering.algorithms.fkm import FKMOptions
from flwr_clustering.specs import BUILTINS

ROOT = Path(__file__).resolve().parents[1]
NAMES = [spec.name for spec in BUILTINS]


def test_listing_the_algorithms_imports_no_strategy_no_client_and_no_flower():
    code = (
        "import sys\n"
        "from flwr_clustering import registry\n"
        "names = registry.names()\n"
        "caps = [registry.get(n).capabilities for n in names]\n"
        "registry.run_config_defaults(); registry.secure_modes(); registry.searchers()\n"
        "repr([registry.get(n) for n in names])\n"
        "print(len(names))\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(("
        "'flwr_clustering.strategies', 'flwr_clustering.clients')) or m == 'flwr')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split("\n")
    assert out[0] == str(len(BUILTINS))
    assert out[1] == ""


def test_the_registry_holds_the_declarations():
    assert set(NAMES) <= set(registry.names()) and len(set(NAMES)) == len(BUILTINS) == 10
    assert all(registry.get(spec.name) is spec for spec in BUILTINS)


@pytest.mark.parametrize("spec", BUILTINS, ids=NAMES)
def test_every_dotted_path_resolves_to_the_algorithms_classes(spec):
    from flwr_clustering.clients.base import ClusteringClient
    from flwr_clustering.strategies.base import ClusteringStrategy

    assert spec.strategy_path.startswith("flwr_clustering.strategies.")
    assert spec.client_path.startswith("flwr_clustering.clients.")
    strategy, client = resolve(spec.strategy_path), resolve(spec.client_path)
    assert spec.strategy is strategy and spec.client is client
    assert issubclass(strategy, ClusteringStrategy) and issubclass(client, ClusteringClient)
    assert strategy.name == spec.name
    assert strategy.Options is spec.options
    assert (ROOT / "docs" / spec.guide).is_file()


@pytest.mark.parametrize("spec", BUILTINS, ids=NAMES)
def test_the_declared_capabilities_are_the_strategy_classes(spec):
    from flwr_clustering.legacy import legacy_problem
    from flwr_clustering.strategies.split_check import refine_problem

    can = spec.can
    assert can is not None, "a built-in algorithm declares its capabilities"
    derived = Capabilities.of_strategy(spec.strategy)
    for name in ("labels", "resume", "choose_k", "starts", "needs_every_client", "dp"):
        assert getattr(can, name) == getattr(derived, name), name
    assert can.labels == spec.strategy.labelling
    assert can.refine == (refine_problem(spec.strategy) is None)
    assert can.legacy == (legacy_problem(spec.strategy) is None)
    # what predict() cannot do, it says where the run keeps the model
    assert can.labels in model.LABELLINGS or can.labels in model._ARTIFACTS


@pytest.mark.parametrize("spec", BUILTINS, ids=NAMES)
def test_the_declared_secure_options_are_the_ones_the_strategy_accepts(spec):
    if spec.name == "deepfeca":  # its strategy builds its network first (the torch extra)
        pytest.importorskip("torch")
    secure = spec.can.secure
    if secure is None:
        with pytest.raises(ValueError, match="secure-aggregation=true"):
            spec.strategy(secure_aggregation=True)
        return
    strategy = spec.strategy(secure_aggregation=True, **secure)
    assert strategy.secure_aggregation_problem() is None
    defaults = spec.options()
    if any(getattr(defaults, k) != v for k, v in secure.items()):
        with pytest.raises(ValueError, match="secure-aggregation=true"):
            spec.strategy(secure_aggregation=True)


def test_the_lists_of_the_refusals_come_from_the_declarations():
    assert registry.searchers() == ["feca", "fkm", "kfed"]
    assert registry.able("resume") == ["deepfeca", "dgc", "ffcm", "fkm", "masked-federated"]
    assert registry.listing("refine") == "feca, ffcm, fkm, kfed, mavg"
    assert registry.secure_modes().startswith(
        "ffcm with ffcm-version=1, fkm with server-update='lloyd', masked-federated (")
    from flwr_clustering.strategies.kfed import KFed

    with pytest.raises(ValueError, match="secure modes: ffcm with ffcm-version=1, fkm with "):
        KFed(k=3, secure_aggregation=True)
    with pytest.raises(ValueError, match=r"refine-rounds applies to feca, ffcm, fkm, kfed, mavg$"):
        registry.get("dgc").strategy(refine_rounds=2)


def test_a_spec_may_name_its_classes_by_path_and_resolves_them_on_first_read():
    spec = AlgorithmSpec(name="by-path", strategy="flwr_clustering.strategies.kfed:KFed",
                         client="flwr_clustering.clients.kfed:KFedClient",
                         options=FKMOptions)
    assert "strategies" not in repr(spec).split("strategy=")[0]
    assert spec.strategy_path == "flwr_clustering.strategies.kfed:KFed"
    assert spec.strategy is registry.get("kfed").strategy
    assert spec.capabilities.choose_k is True  # undeclared: the class's attributes
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.strategy = "x:y"  # type: ignore[misc]
    bad = AlgorithmSpec(name="bad", strategy="flwr_clustering.strategies.kfed:Nope",
                        client="flwr_clustering.clients.kfed:KFedClient", options=FKMOptions)
    with pytest.raises(ValueError, match="cannot import 'flwr_clustering.strategies.kfed:Nope'"):
        bad.strategy  # noqa: B018
    with pytest.raises(ValueError, match="not a dotted path"):
        resolve("flwr_clustering.strategies.kfed.KFed")
    with pytest.raises(ValueError, match="labels must be a non-empty string"):
        Capabilities(labels="")
