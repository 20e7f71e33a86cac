"""The algorithm registry: one declaration per algorithm, read by the App and the runners.

Each algorithm is declared once, with :func:`~flwr_clustering.algorithm_specs.register`,
at the end of its strategy module (``flwr_clustering/strategies/<name>.py``)::

    register(AlgorithmSpec(
        name="fkm", strategy=FedKMeans, client=FedKMeansClient, options=FKMOptions,
        loop=run_fkm, summary="federated k-means (Garst & Reinders 2023)"))

The App's ServerApp and ClientApp, its run-config defaults and the reproductions look
algorithms up here; nothing dispatches on algorithm names with if-chains. Adding an
algorithm takes its three modules (``algorithms/x.py`` with the pure steps, the loop and
the options dataclass; ``clients/x.py``; ``strategies/x.py`` with the registration),
tests and docs.

An algorithm that lives outside the package (a user's own, or the benchmarks' echo
strategy) is named in the run config as ``"package.module:ATTRIBUTE"``, where the
attribute is an :class:`AlgorithmSpec`; :func:`get` imports it on first use.

Each declaration may describe its message protocol with :class:`Phase` entries (what every
message carries and what the client replies); :data:`COMMON_PROTOCOL` holds the messages
every algorithm shares. ``python -m simulations docs`` renders them, with the options
tables, into ``docs/protocol.md``.

This module finds the built-in algorithms (it imports every strategy module, which
registers its own) and looks them up; the declarations themselves
(:class:`~flwr_clustering.algorithm_specs.AlgorithmSpec`, ``Phase``, ``register``) live in
:mod:`flwr_clustering.algorithm_specs`, which imports no strategy.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from . import strategies
from .algorithm_specs import (
    _LOADED,
    _REGISTRY,
    COMMON_PROTOCOL,
    EVALUATION_METRICS,
    EVALUATION_STATS,
    AlgorithmSpec,
    Phase,
    register,
)

__all__ = ["COMMON_PROTOCOL", "EVALUATION_METRICS", "EVALUATION_STATS", "AlgorithmSpec",
           "Phase", "get", "names", "register", "run_config_defaults", "searchers",
           "specs_key"]

_BUILTINS_LOADED = False


def _load_builtins() -> None:
    """Import every module of :mod:`flwr_clustering.strategies` (they register)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for mod in pkgutil.iter_modules(strategies.__path__):
        if mod.name != "base":
            importlib.import_module(f"{strategies.__name__}.{mod.name}")


def get(name: str) -> AlgorithmSpec:
    """Return the declaration of an algorithm.

    Parameters
    ----------
    name : str
        A registered name (``"fkm"``, ``"feca"``, ...) or ``"module:ATTRIBUTE"`` naming an
        :class:`AlgorithmSpec` outside the package (imported on first use; its keys join
        the run config of the runs that name it).

    Raises
    ------
    ValueError
        If there is no such algorithm.
    """
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _LOADED:
        return _LOADED[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            spec = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as ex:
            raise ValueError(f"cannot load algorithm {name!r}: {ex}") from ex
        if not isinstance(spec, AlgorithmSpec):
            raise ValueError(f"{name!r} is a {type(spec).__name__}, not an AlgorithmSpec")
        _LOADED[name] = spec
        return spec
    raise ValueError(f"unknown algorithm {name!r}; choose from {names()} or give "
                     "'module:ATTRIBUTE' of an AlgorithmSpec")


def specs_key() -> tuple[tuple[str, int], ...]:
    """What is registered now, as a hashable key (names and spec identities) for caches."""
    _load_builtins()
    return tuple(sorted((n, id(s)) for n, s in _REGISTRY.items()))


def names(*, listed_only: bool = True) -> list[str]:
    """The registered algorithm names, sorted (``listed_only``: without helpers)."""
    _load_builtins()
    return sorted(n for n, s in _REGISTRY.items() if s.listed or not listed_only)


def run_config_defaults() -> dict[str, Any]:
    """Every registered algorithm's run-config keys and defaults, merged."""
    _load_builtins()
    out: dict[str, Any] = {}
    for name in sorted(_REGISTRY):
        out.update(_REGISTRY[name].options.run_config_defaults())
    return out


def searchers() -> list[str]:
    """The registered algorithms a search over candidates can wrap (``k='auto'``).

    Those whose strategy sets ``searches_k``
    (:mod:`flwr_clustering.strategies.choose_k`).
    """
    return [n for n in names() if getattr(get(n).strategy, "searches_k", False)]
