"""The algorithm registry: one declaration per algorithm, read by the App and the runners.

Each built-in algorithm is declared once, as data, in :mod:`flwr_clustering.specs`::

    FKM = AlgorithmSpec(
        name="fkm", strategy="flwr_clustering.strategies.fkm:FedKMeans",
        client="flwr_clustering.clients.fkm:FedKMeansClient", options=FKMOptions,
        loop=run_fkm, summary="federated k-means (Garst & Reinders 2023)",
        can=Capabilities(resume=True, choose_k=True, ...))

The strategy and the client are named by dotted path and imported on first read
(``spec.strategy``, ``spec.client``): this module imports the declarations only, so
listing the algorithms and their capabilities (:func:`names`, :func:`able`) loads no
strategy and no client. The App's ServerApp and ClientApp, its run-config defaults, the
estimator and the reproductions look algorithms up here; nothing dispatches on algorithm
names with if-chains, and the refusals that name "the algorithms that can" read the
declared :class:`~flwr_clustering.algorithm_specs.Capabilities`. Adding an algorithm takes
its science module (``algorithms/x.py``: the steps, the loop, the options), its strategy
and client modules and its declaration in :mod:`flwr_clustering.specs` (see
``docs/extending.md``).

An algorithm that lives outside the package (a user's own, or the benchmarks' echo
strategy) is named in the run config as ``"package.module:ATTRIBUTE"``, where the
attribute is an :class:`AlgorithmSpec`; :func:`get` imports it on first use. A program
may also :func:`register` its own declaration under a name.

Each declaration may describe its message protocol with :class:`Phase` entries (what every
message carries and what the client replies); :data:`COMMON_PROTOCOL` holds the messages
every algorithm shares. ``python -m simulations docs`` renders them, with the options
tables and the capabilities, into ``docs/protocol.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .algorithm_specs import (
    _LOADED,
    _REGISTRY,
    COMMON_PROTOCOL,
    EVALUATION_METRICS,
    EVALUATION_STATS,
    AlgorithmSpec,
    Capabilities,
    Phase,
    register,
    resolve,
)
from .specs import BUILTINS

__all__ = ["COMMON_PROTOCOL", "EVALUATION_METRICS", "EVALUATION_STATS", "AlgorithmSpec",
           "Capabilities", "Phase", "able", "get", "listing", "names", "register",
           "run_config_defaults", "searchers", "secure_modes", "specs_key"]

_BUILTINS_LOADED = False


def _load_builtins() -> None:
    """Register the declarations of :data:`flwr_clustering.specs.BUILTINS` (once)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for spec in BUILTINS:
        register(spec)


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
        try:
            spec = resolve(name)
        except ValueError as ex:
            raise ValueError(f"cannot load algorithm {name!r}: {ex.__cause__ or ex}") from ex
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


def able(capability: str) -> list[str]:
    """The listed algorithms whose declared capability ``capability`` is true.

    Parameters
    ----------
    capability : str
        A field of :class:`~flwr_clustering.algorithm_specs.Capabilities`: ``"resume"``,
        ``"choose_k"``, ``"starts"``, ``"dp"``, ``"refine"``, ``"legacy"``,
        ``"needs_every_client"``, or ``"secure"`` (those that run under secure
        aggregation with some options).
    """
    if capability == "secure":
        return [n for n in names() if get(n).capabilities.secure is not None]
    return [n for n in names() if getattr(get(n).capabilities, capability)]


def listing(capability: str) -> str:
    """:func:`able` as text for messages and help: ``"fkm, kfed, feca"``."""
    return ", ".join(able(capability)) or "none"


def secure_modes() -> str:
    """The algorithms that run under secure aggregation, each with the options it needs.

    For example ``"fkm with server-update='lloyd', ffcm with ffcm-version=1,
    masked-federated (round 1 ... runs in the clear)"``.
    """
    out = []
    for name in able("secure"):
        spec = get(name)
        can = spec.capabilities
        keys = {f.name: spec.options.key_of(f) for f in dataclasses.fields(spec.options)}
        text = name + "".join(
            (" with " if i == 0 else " and ") + f"{keys.get(field, field)}={value!r}"
            for i, (field, value) in enumerate(can.secure.items()))
        out.append(text + (f" ({can.secure_note})" if can.secure_note else ""))
    return ", ".join(out) or "none"


def searchers() -> list[str]:
    """The registered algorithms a search over candidates can wrap (``k='auto'``).

    Those whose declaration says ``choose_k``
    (:mod:`flwr_clustering.strategies.choose_k`).
    """
    return able("choose_k")
