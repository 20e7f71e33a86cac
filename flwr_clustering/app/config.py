"""Run-config handling of the Flower App: defaults, strategy and client factories.

The keys are kebab-case, as in ``[tool.flwr.app.config]`` of ``pyproject.toml``;
``flwr run . -c "algorithm='kfed' k=8"`` overrides them. Every default comes from one
declaration: the App's own keys (:class:`AppOptions`), the data keys
(:class:`DataOptions`) and every registered algorithm's options
(:mod:`flwr_clustering.registry`); a test checks that ``pyproject.toml`` agrees.
In-process runs (``run_simulation``, :class:`~flwr_clustering.testing.InProcessGrid`)
may see an empty run config, so every key has a default here.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import registry
from ..algorithms.choose_k import DEFAULT_RULE, RULES
from ..data.shapes import SHAPES
from ..options import Options, option
from ..run_options import RunOptions, is_auto_k

__all__ = [
    "AppOptions",
    "DataOptions",
    "build_client",
    "build_strategy",
    "dataset_kwargs",
    "default_run_config",
    "merged_config",
    "results_dir",
    "run_dtype",
    "run_settings",
]


def _k_auto(cfg: Mapping[str, Any]) -> bool:
    return is_auto_k(cfg.get("k"))


def _built_in(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("dataset") != "local"


def _dataset(*names: str):
    return lambda cfg: cfg.get("dataset") in names


@dataclass(frozen=True)
class AppOptions(RunOptions):
    """The App's run-config keys (all algorithms).

    The strategy's own keys (``min-nodes``, ``seed``, ``scaling``, ``secagg-threshold``,
    ...) are :class:`~flwr_clustering.run_options.RunOptions`, the declaration the
    strategy's constructor checks its arguments with; this class adds the App's.
    """

    algorithm: str = option("fkm", help="a registered algorithm, or 'module:ATTRIBUTE' of an "
                            "AlgorithmSpec")
    out_dir: str = option("", help="results directory (absolute; empty: "
                          "~/flwr-clustering-results/<algorithm>-<time>)")
    resume_from: str = option("", help="continue the interrupted iterative run whose "
                              "out-dir (absolute) holds checkpoint.npz; empty: a new run")
    resume_changed_data: bool = option(False, help="resume-from: go on although a client's "
                                       "rows differ from the interrupted run's (warned and "
                                       "recorded; false: refused, naming the client)",
                                       when=lambda cfg: bool(cfg.get("resume-from")))
    feature_columns: str = option("", help="the federation's features, comma-separated, in "
                                  "this order (each site's other columns are ignored); empty: "
                                  "every column the sites share")
    index_column: str = option("", help="an identifier column at the sites (never a "
                               "feature); empty: none (an undeclared one is refused)")
    categorical_columns: str = option("", help="columns of categories (text or codes), "
                                      "comma-separated: one-hot encoded with the levels "
                                      "agreed across the sites (rarer than "
                                      "privacy-threshold: 'other')")
    datetime_columns: str = option("", help="date/time columns used as features, "
                                   "comma-separated: converted to seconds since "
                                   "1970-01-01 UTC at every site (an undeclared date "
                                   "column is refused)")
    k_min: int = option(2, minimum=1, help="k='auto': the smallest candidate k", when=_k_auto)
    k_max: int = option(10, minimum=1, help="k='auto': the largest candidate k", when=_k_auto)
    k_rule: str = option(DEFAULT_RULE, choices=RULES, help="k='auto': how k is chosen from "
                         "the candidates' scores (the best simplified silhouette, "
                         "Calinski-Harabasz or Davies-Bouldin, or the SSE's knee); see "
                         "docs/choosing.md", when=_k_auto)


@dataclass(frozen=True)
class DataOptions(Options):
    """The data keys: which built-in data set a simulated client loads, and its split.

    A SuperNode with a ``data-path`` in its node config reads its own file instead.
    """

    int_ceiling = None  # data-seed is any integer; sizes of generated data sets are free

    dataset: str = option("garst-grid", help="a registry data set, or 'local'")
    partitioner: str = option("iid", help="iid, dirichlet, cluster-wise, sorted, or the data "
                              "set's natural split", when=_built_in)
    beta: float = option(0.1, help="Garst spatial split parameter",
                         when=_dataset("garst-grid"))
    ppc: int = option(50, minimum=1, help="points per cluster of the Garst grid",
                      when=_dataset("garst-grid", "garst-clusterwise"))
    noise: float = option(1.0, help="Garst grid noise",
                          when=_dataset("garst-grid", "garst-clusterwise"))
    dirichlet_alpha: float = option(0.5, help="Dirichlet partitioner concentration",
                                    when=lambda cfg: _built_in(cfg)
                                    and cfg.get("partitioner") == "dirichlet")
    n_samples: int = option(1000, minimum=1, help="blobs: rows",
                            when=_dataset("blobs", *SHAPES))
    n_features: int = option(2, minimum=1, help="blobs: features", when=_dataset("blobs"))
    centers: int = option(16, minimum=1, help="blobs: centres", when=_dataset("blobs"))
    cluster_std: float = option(1.0, help="blobs: spread", when=_dataset("blobs"))
    data_seed: int = option(0, minimum=0, help="data generation and partitioning seed (an "
                            "integer >= 0)", when=_built_in)
    feature_mask: str = option("none", help="feature masks of the clients (masked algorithms)",
                               when=_built_in)
    mask_overlap: float = option(0.3, help="feature-mask overlap",
                                 when=lambda cfg: _built_in(cfg)
                                 and cfg.get("feature-mask") == "chain")
    mask_shared: float = option(0.1, help="feature-mask shared fraction",
                                when=lambda cfg: _built_in(cfg)
                                and cfg.get("feature-mask") == "shared")


def default_run_config() -> dict[str, Any]:
    """The complete default run config: App keys, data keys, every algorithm's keys."""
    # the algorithm first (the reports list the keys in this order), then the App's keys
    out = {"algorithm": AppOptions.algorithm, **AppOptions.run_config_defaults(),
           **DataOptions.run_config_defaults()}
    for key, value in registry.run_config_defaults().items():
        if key in out and out[key] != value:
            raise ValueError(f"run-config key {key!r}: default {value!r} of an algorithm "
                             f"clashes with the App's {out[key]!r}")
        out[key] = value
    return out


def __getattr__(name: str) -> Any:
    # DEFAULTS is generated on first use (it needs the registry).
    if name == "DEFAULTS":
        return default_run_config()
    raise AttributeError(name)


def merged_config(run_config: dict[str, Any] | None) -> dict[str, Any]:
    """Return the default run config overridden by ``run_config``.

    Parameters
    ----------
    run_config : dict or None
        ``context.run_config``.

    Returns
    -------
    dict
        The complete configuration.

    Raises
    ------
    ValueError
        On an unknown key or algorithm, or a value of the wrong type.
    """
    run_config = dict(run_config or {})
    try:  # every message of a run merges the same run config: once per process
        key = (tuple(sorted(run_config.items())), registry.specs_key())
        hash(key)
    except TypeError:  # an unhashable value: merge (and fail) without the cache
        return _merge(run_config)
    if key not in _MERGED:
        if len(_MERGED) >= 64:
            _MERGED.clear()
        _MERGED[key] = _merge(run_config)
    return dict(_MERGED[key])


#: merged run configs of this process, by (run config items, registered algorithms)
_MERGED: dict[tuple, dict[str, Any]] = {}


def _merge(run_config: dict[str, Any]) -> dict[str, Any]:
    cfg = default_run_config()
    # an algorithm loaded by module path brings its own keys
    spec = registry.get(str(run_config.get("algorithm", cfg["algorithm"])))
    for key, value in spec.options.run_config_defaults().items():
        cfg.setdefault(key, value)
    unknown = [key for key in run_config if key not in cfg]
    if unknown:
        raise ValueError("; ".join(_unknown_key(str(key), cfg) for key in unknown))
    cfg.update(run_config)
    # the App's and the strategy's keys (RunOptions: the constructor's own rules and words)
    AppOptions.from_config(cfg)
    ks = search_ks(cfg, spec)
    # a bad option value is an error here (k='auto': every option at the largest k)
    spec.options.from_config(cfg if ks is None else {**cfg, "k": ks[-1]},
                             run_config_only=True)
    if ks is not None and cfg.get("resume-from"):
        raise ValueError("resume-from: a search over candidates (k='auto' or n-init > 1) "
                         "keeps no checkpoint; start a new run")
    if str(cfg.get("dtype", "float64")) != "float64" and not _has_dtype(spec):
        able = [n for n in registry.names() if _has_dtype(registry.get(n))] or ["none"]
        raise ValueError(f"dtype={cfg['dtype']!r}: algorithm {spec.name!r} computes in "
                         f"float64 only (dtype float32: {', '.join(able)}); leave dtype "
                         "at 'float64'")
    DataOptions.from_config(cfg)
    return cfg


def _unknown_key(key: str, cfg: dict[str, Any]) -> str:
    """The refusal of an unknown run-config key, naming the nearest known one."""
    near = difflib.get_close_matches(key, list(cfg), n=1)
    if not near:  # "seed_" or "MIN_NODES": the same key in another spelling
        canonical = {k.replace("-", "").lower(): k for k in cfg}
        found = canonical.get(key.replace("-", "").replace("_", "").lower())
        near = [found] if found else []
    hint = (f"did you mean {near[0]!r}?" if near else
            "docs/configuration.md lists every key")
    return f"unknown run-config key {key!r}: {hint}"


def run_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The run config of one run's own keys, for its report and ``model.json``.

    The App's keys (:class:`AppOptions`), the data keys (:class:`DataOptions`) and the
    keys of the run's algorithm as its registration declares them
    (``registry.get(algorithm).options``), each where it matters to this run (its
    declaration's ``when``: ``k-min`` only with ``k='auto'``, ``beta`` only on
    ``garst-grid``, no built-in data key of a ``dataset='local'`` run), in the run
    config's order; never the keys only other algorithms have (a merged run config holds
    every registered algorithm's).

    Parameters
    ----------
    cfg : dict
        A merged run config (:func:`merged_config`).

    Returns
    -------
    dict
        The subset of ``cfg``.
    """
    spec = registry.get(str(cfg.get("algorithm", AppOptions.algorithm)))
    keys = {*AppOptions.keys_of_run(cfg), *DataOptions.keys_of_run(cfg),
            *spec.options.keys_of_run(cfg)}
    return {key: value for key, value in cfg.items() if key in keys}


def ignored_keys_warning(cfg: dict[str, Any]) -> str | None:
    """A warning naming the run-config keys set away from their default that this run ignores.

    A merged run config holds every registered algorithm's keys; a key that does not apply
    to this run (another algorithm's, such as ``graph`` in an FKM run, or one whose
    declaration's ``when`` excludes this run, such as ``k-min`` without ``k='auto'``) but
    was given a value other than its default was most likely meant for this run: it is
    named, not silently ignored. ``None`` when there is none.

    Parameters
    ----------
    cfg : dict
        A merged run config (:func:`merged_config`).
    """
    used = run_settings(cfg)
    defaults = default_run_config()
    ignored = sorted(key for key, value in cfg.items()
                     if key not in used and key in defaults and value != defaults[key])
    if not ignored:
        return None
    algorithm = str(cfg.get("algorithm", AppOptions.algorithm))
    return (f"run-config key(s) {', '.join(map(repr, ignored))} set but not used by this run "
            f"(algorithm {algorithm!r}, dataset {cfg.get('dataset')!r}, k {cfg.get('k')!r}): "
            "they are ignored; docs/configuration.md says which algorithm or setting each "
            "key belongs to")


def search_ks(cfg: dict[str, Any], spec=None) -> list[int] | None:
    """The candidate ``k`` of a search, or ``None`` for a run of one model.

    ``k='auto'``: ``k-min..k-max``; a given ``k`` with ``n-init`` above 1 (FKM's
    federated starts): ``[k]``. Refuses an algorithm that cannot search, naming those that
    can, and differential privacy.
    """
    spec = registry.get(str(cfg["algorithm"])) if spec is None else spec
    auto = is_auto_k(cfg.get("k"))
    starts = int(cfg.get("n-init", 0) or 0) if spec.capabilities.starts else 1
    if not auto and starts <= 1:
        return None
    # the strategy side, imported on use: a client's process (one per message on a
    # deployment) loads no strategy
    from ..strategies.choose_k import search_problem

    problem = search_problem(spec.strategy, dp=float(cfg.get("dp-epsilon", 0) or 0) > 0)
    if problem is not None:
        what = "k='auto'" if auto else f"n-init={starts}"
        raise ValueError(f"{what}: {problem}; k='auto' and n-init starts take "
                         f"{', '.join(registry.searchers())}")
    if not auto:  # k parsed as the algorithm's options parse it
        return [int(spec.options.from_config(cfg, run_config_only=True).k)]
    app = AppOptions.from_config(cfg)  # k-min and k-max are each at least 1
    k_min, k_max = app.k_min, app.k_max
    if not k_min <= k_max <= 1000:
        raise ValueError(f"k='auto' needs 1 <= k-min <= k-max <= 1000, got k-min={k_min}, "
                         f"k-max={k_max}")
    return list(range(k_min, k_max + 1))


def _has_dtype(spec: registry.AlgorithmSpec) -> bool:
    return "dtype" in spec.options.run_config_defaults()


def run_dtype(cfg: dict[str, Any]) -> str:
    """The type the clients of a merged run config hold their rows in (``dtype``)."""
    spec = registry.get(str(cfg["algorithm"]))
    return str(cfg.get("dtype", "float64")) if _has_dtype(spec) else "float64"


def results_dir(cfg: dict[str, Any]) -> Path:
    """Return the absolute output directory of a run.

    ``out-dir`` if set (made absolute), else a folder of the run's own:
    ``~/flwr-clustering-results/<algorithm>-<UTC timestamp>`` (``-2``, ``-3``, ... added
    when a run of the same second has it).
    """
    if cfg.get("out-dir"):
        return Path(str(cfg["out-dir"])).expanduser().resolve()
    stamp = np.datetime64("now").astype(str).replace(":", "").replace("-", "")
    name = str(cfg["algorithm"]).rpartition(":")[2].lower()
    base = Path.home() / "flwr-clustering-results" / f"{name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


#: The App's comma-separated column lists, passed to the strategy as they are (its
#: constructor also takes lists).
_COLUMN_LISTS = ("feature_columns", "index_column", "categorical_columns", "datetime_columns")


def build_strategy(cfg: dict[str, Any], **overrides: Any):
    """Build the strategy named by ``cfg["algorithm"]`` from a merged run config.

    Parameters
    ----------
    cfg : dict
        Output of :func:`merged_config`.
    **overrides
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` arguments that have no
        run-config key (e.g. ``evaluate=False``, ``node_wait_timeout``).

    Returns
    -------
    ClusteringStrategy
        The registered strategy with the algorithm's options read from ``cfg``.
    """
    app = AppOptions.from_config(cfg)
    spec = registry.get(app.algorithm)
    # the strategy's run-config keys, as the declaration it checks them with lists them
    base = {f.name: getattr(app, f.name)
            for f in RunOptions.fields_by_key(run_config_only=True).values()}
    base.update({name: getattr(app, name) for name in _COLUMN_LISTS}, **overrides)
    ks = search_ks(cfg, spec)
    if ks is None:
        return spec.build_strategy(cfg, **base)
    options = [spec.options.from_config({**cfg, "k": k}, run_config_only=True) for k in ks]
    starts = int(options[0].n_init) if spec.capabilities.starts else 1
    from ..strategies.choose_k import search_strategy  # the strategy side, on use

    return search_strategy(spec.strategy, options, starts=starts, rule=app.k_rule, **base)


def build_client(cfg: dict[str, Any], X: np.ndarray, y: np.ndarray | None, client_id: int):
    """Build the NumPyClient of ``cfg["algorithm"]`` around local data.

    Parameters
    ----------
    cfg : dict
        Output of :func:`merged_config`.
    X, y : numpy.ndarray
        Local data and optional labels.
    client_id : int
        Stable client id.

    Returns
    -------
    ClusteringClient
        The client class registered with the algorithm.
    """
    spec = registry.get(str(cfg["algorithm"]))
    # rows with missing cells wait for the federation's transform to fill or drop them
    # (the run's missing option); with missing='refuse' they are an error here
    kwargs: dict[str, Any] = {"missing_cells": cfg.get("missing", "auto") != "refuse"}
    if _has_dtype(spec):  # the rows are converted once, on arrival
        kwargs["dtype"] = run_dtype(cfg)
    return spec.client(X, y, client_id=client_id, **kwargs)


def dataset_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    """Return the keyword arguments of :func:`flwr_clustering.data.registry.load_partition`."""
    data = DataOptions.from_config(cfg)
    kwargs = data.as_dict()
    kwargs["seed"] = kwargs.pop("data_seed")
    return kwargs
