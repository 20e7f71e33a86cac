"""Run-config handling of the Flower App: defaults, strategy and client factories.

The keys are kebab-case, as in ``[tool.flwr.app.config]`` of ``pyproject.toml``;
``flwr run . -c "algorithm='kfed' k=8"`` overrides them. In-process runs
(``run_simulation``, :class:`~flwr_clustering.testing.InProcessGrid`) may see an empty
run config, so every key has a default here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..algorithms.deepfeca import TrainOptions
from ..clients import (
    DeepFeCAClient,
    DGCClient,
    FeCAClient,
    FedKMeansClient,
    FFCMClient,
    KDCClient,
    KFedClient,
    MaskedFederatedClient,
    MaskedOneShotClient,
    MAvgClient,
)
from ..clients.base import ClusteringClient
from ..clients.echo import EchoClient
from ..strategies import (
    DGC,
    FFCM,
    KDC,
    DeepFeCA,
    FeCA,
    FedKMeans,
    KFed,
    MaskedFederated,
    MaskedOneShot,
    MAvg,
)
from ..strategies.base import ClusteringStrategy
from ..strategies.echo import Echo

__all__ = ["ALGORITHMS", "DEFAULTS", "build_client", "build_strategy", "merged_config"]

#: Default run config (mirrors ``[tool.flwr.app.config]``).
DEFAULTS: dict[str, Any] = {
    "algorithm": "fkm",
    "k": 16,
    "max-rounds": 20,
    "tol": 1e-6,
    "min-nodes": 5,
    "seed": 0,
    "privacy-threshold": 2,
    "local-iterations": 0,
    "server-seeding": "weighted",
    "init": "private",
    "server-update": "kmeans",
    "k-local": 0,
    "std-mode": "rms",
    "radius": "empirical",
    "eliminate": True,
    "local-init": "k-means++",
    "n-init": 0,
    "mavg-reference": "first",
    "ffcm-version": 1,
    "fuzzifier": 2.0,
    "method": "B",
    "alpha": 0.8,
    "federated-rounds": 3,
    "local-algorithm": "kmeans",
    "force-w": 2.0,
    "proxy-min": 30,
    "proxy-max": 100,
    "force-normalize": "literal",
    "loss": "kmeans",
    "rho": 10.0,
    "graph": "ring",
    "er-p": 0.3,
    "iterations": 100,
    "inner-steps": 1,
    "delta": 1.0,
    "node-init": "kmeans",
    "sample-size": 10000,
    "psi": 16,
    "ik-t": 100,
    "tau": 0.5,
    "kdc-auto": True,
    "kdc-step2": "kbcc",
    "ik-variant": "anne",
    "normalize": True,
    "return-labels": False,
    "pseudo-labels": "feca",
    "network": "cnn",
    "input-shape": "",
    "proj-dim": 32,
    "local-epochs": 5,
    "batch-size": 32,
    "learning-rate": 0.05,
    "temperature": 0.1,
    "augment": True,
    "torch-threads": 1,
    "deepfeca-centralized": True,
    "dataset": "garst-grid",
    "partitioner": "natural",
    "beta": 0.1,
    "ppc": 50,
    "noise": 1.0,
    "dirichlet-alpha": 0.5,
    "n-samples": 1000,
    "n-features": 2,
    "centers": 16,
    "cluster-std": 1.0,
    "data-seed": 0,
    "feature-mask": "none",
    "mask-overlap": 0.3,
    "mask-shared": 0.1,
    "out-dir": "",
    "round-timeout": 600.0,
}

#: Default of ``local-iterations`` (run-config value 0) per algorithm: FKM's paper uses one
#: Lloyd step per round, the masked federated rounds a few warm-started steps (spec 000 §3.1).
LOCAL_ITERATIONS: dict[str, int] = {"fkm": 1, "echo": 1, "masked-federated": 10}

#: Default of ``n-init`` (run-config value 0) per algorithm: FeCA and M-Avg rely on single-start
#: local optima (spec 001 A4); the masked algorithms choose K_i from well-fitted clusterings.
N_INIT: dict[str, int] = {"feca": 1, "mavg": 1, "masked-federated": 10, "masked-oneshot": 10}

#: Algorithm name -> (strategy class, client class).
ALGORITHMS: dict[str, tuple[type[ClusteringStrategy], type[ClusteringClient]]] = {
    "fkm": (FedKMeans, FedKMeansClient),
    "kfed": (KFed, KFedClient),
    "feca": (FeCA, FeCAClient),
    "mavg": (MAvg, MAvgClient),
    "ffcm": (FFCM, FFCMClient),
    "masked-federated": (MaskedFederated, MaskedFederatedClient),
    "masked-oneshot": (MaskedOneShot, MaskedOneShotClient),
    "dgc": (DGC, DGCClient),
    "kdc": (KDC, KDCClient),
    "deepfeca": (DeepFeCA, DeepFeCAClient),
    # Benchmark only: FedKMeans' messages without computation (simulations/bench.py).
    "echo": (Echo, EchoClient),
}


def merged_config(run_config: dict[str, Any] | None) -> dict[str, Any]:
    """Return ``DEFAULTS`` overridden by ``run_config`` (unknown keys are rejected).

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
        On an unknown key or algorithm.
    """
    cfg = dict(DEFAULTS)
    for key, value in dict(run_config or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"unknown run-config key {key!r}; valid keys: {sorted(DEFAULTS)}")
        cfg[key] = value
    if cfg["algorithm"] not in ALGORITHMS:
        raise ValueError(
            f"unknown algorithm {cfg['algorithm']!r}; choose from {sorted(ALGORITHMS)}"
        )
    return cfg


def results_dir(cfg: dict[str, Any]) -> Path:
    """Return the absolute output directory of a run.

    ``out-dir`` if set (made absolute), else
    ``~/flwr-clustering-results/<algorithm>-<UTC timestamp>``.
    """
    if cfg.get("out-dir"):
        return Path(str(cfg["out-dir"])).expanduser().resolve()
    stamp = np.datetime64("now").astype(str).replace(":", "").replace("-", "")
    return Path.home() / "flwr-clustering-results" / f"{cfg['algorithm']}-{stamp}"


def build_strategy(cfg: dict[str, Any], out_dir: str | None = None) -> ClusteringStrategy:
    """Build the strategy named by ``cfg["algorithm"]`` from a merged run config.

    Parameters
    ----------
    cfg : dict
        Output of :func:`merged_config`.
    out_dir : str, optional
        Where the strategy saves its results.

    Returns
    -------
    ClusteringStrategy
        ``FedKMeans``, ``KFed``, ``FeCA``, ``MAvg``, ``FFCM``, ``MaskedFederated`` or
        ``MaskedOneShot``.
    """
    common = dict(
        min_nodes=int(cfg["min-nodes"]), seed=int(cfg["seed"]),
        round_timeout=float(cfg["round-timeout"]), out_dir=out_dir,
    )
    # 0 means "the algorithm's default" for these two keys.
    local_iterations = int(cfg["local-iterations"]) or LOCAL_ITERATIONS.get(cfg["algorithm"], 1)
    n_init = int(cfg["n-init"]) or N_INIT.get(cfg["algorithm"], 1)
    if cfg["algorithm"] == "masked-federated":
        return MaskedFederated(
            int(cfg["k"]), method=str(cfg["method"]), alpha=float(cfg["alpha"]),
            federated_rounds=int(cfg["federated-rounds"]), k_local=int(cfg["k-local"]) or None,
            local_iterations=local_iterations, privacy_threshold=int(cfg["privacy-threshold"]),
            n_init=n_init, local_algorithm=str(cfg["local-algorithm"]), tol=float(cfg["tol"]),
            **common,
        )
    if cfg["algorithm"] == "masked-oneshot":
        return MaskedOneShot(
            int(cfg["k"]), k_local=int(cfg["k-local"]) or None, w=float(cfg["force-w"]),
            min_size=int(cfg["proxy-min"]), max_size=int(cfg["proxy-max"]),
            normalize=str(cfg["force-normalize"]),
            privacy_threshold=int(cfg["privacy-threshold"]), n_init=n_init,
            local_algorithm=str(cfg["local-algorithm"]), **common,
        )
    if cfg["algorithm"] == "dgc":
        return DGC(
            int(cfg["k"]), loss=str(cfg["loss"]), rho=float(cfg["rho"]),
            graph=str(cfg["graph"]), iterations=int(cfg["iterations"]),
            inner_steps=int(cfg["inner-steps"]), delta=float(cfg["delta"]),
            init=str(cfg["node-init"]), er_p=float(cfg["er-p"]),
            privacy_threshold=int(cfg["privacy-threshold"]), **common,
        )
    if cfg["algorithm"] == "kdc":
        return KDC(
            int(cfg["k"]), sample_size=int(cfg["sample-size"]), psi=int(cfg["psi"]),
            t=int(cfg["ik-t"]), tau=float(cfg["tau"]), auto=bool(cfg["kdc-auto"]),
            step2=str(cfg["kdc-step2"]), variant=str(cfg["ik-variant"]),
            normalize=bool(cfg["normalize"]), return_labels=bool(cfg["return-labels"]),
            **common,
        )
    if cfg["algorithm"] == "deepfeca":
        return DeepFeCA(
            int(cfg["k"]), labeller=str(cfg["pseudo-labels"]), network=str(cfg["network"]),
            input_shape=str(cfg["input-shape"]), proj_dim=int(cfg["proj-dim"]),
            options=TrainOptions(
                epochs=int(cfg["local-epochs"]), batch_size=int(cfg["batch-size"]),
                lr=float(cfg["learning-rate"]), temperature=float(cfg["temperature"]),
                augment=bool(cfg["augment"]), threads=int(cfg["torch-threads"])),
            k_local=int(cfg["k-local"]) or None, privacy_threshold=int(cfg["privacy-threshold"]),
            mavg_reference=str(cfg["mavg-reference"]),
            centralized=bool(cfg["deepfeca-centralized"]), max_rounds=int(cfg["max-rounds"]),
            **common,
        )
    if cfg["algorithm"] == "fkm":
        return FedKMeans(
            int(cfg["k"]), privacy_threshold=int(cfg["privacy-threshold"]),
            local_iterations=local_iterations,
            server_seeding=str(cfg["server-seeding"]),
            init=str(cfg["init"]), server_update=str(cfg["server-update"]),
            max_rounds=int(cfg["max-rounds"]), tol=float(cfg["tol"]), **common,
        )
    if cfg["algorithm"] == "echo":
        return Echo(
            int(cfg["k"]), privacy_threshold=int(cfg["privacy-threshold"]),
            local_iterations=local_iterations, init=str(cfg["init"]),
            max_rounds=int(cfg["max-rounds"]), tol=float(cfg["tol"]), **common,
        )
    k_local = int(cfg["k-local"]) or None  # 0: the same as k
    if cfg["algorithm"] == "feca":
        return FeCA(
            int(cfg["k"]), k_local=k_local, std_mode=str(cfg["std-mode"]),
            radius=str(cfg["radius"]), eliminate=bool(cfg["eliminate"]),
            privacy_threshold=int(cfg["privacy-threshold"]), init=str(cfg["local-init"]),
            n_init=n_init, **common,
        )
    if cfg["algorithm"] == "ffcm":
        return FFCM(
            int(cfg["k"]), version=int(cfg["ffcm-version"]), fuzzifier=float(cfg["fuzzifier"]),
            privacy_threshold=int(cfg["privacy-threshold"]), max_rounds=int(cfg["max-rounds"]),
            tol=float(cfg["tol"]), **common,
        )
    if cfg["algorithm"] == "mavg":
        return MAvg(
            int(cfg["k"]), reference=str(cfg["mavg-reference"]),
            privacy_threshold=int(cfg["privacy-threshold"]), init=str(cfg["local-init"]),
            n_init=n_init, **common,
        )
    return KFed(int(cfg["k"]), k_local=k_local,
                privacy_threshold=int(cfg["privacy-threshold"]), **common)


def build_client(
    cfg: dict[str, Any], X: np.ndarray, y: np.ndarray | None, client_id: int
) -> ClusteringClient:
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
        The client class paired with the strategy in :data:`ALGORITHMS`.
    """
    return ALGORITHMS[cfg["algorithm"]][1](X, y, client_id=client_id)


def dataset_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    """Return the keyword arguments of :func:`flwr_clustering.data.registry.load_partition`."""
    return dict(
        dataset=str(cfg["dataset"]), partitioner=str(cfg["partitioner"]),
        dirichlet_alpha=float(cfg["dirichlet-alpha"]), seed=int(cfg["data-seed"]),
        ppc=int(cfg["ppc"]), noise=float(cfg["noise"]), beta=float(cfg["beta"]),
        n_samples=int(cfg["n-samples"]), n_features=int(cfg["n-features"]),
        centers=int(cfg["centers"]), cluster_std=float(cfg["cluster-std"]),
        feature_mask=str(cfg["feature-mask"]), mask_overlap=float(cfg["mask-overlap"]),
        mask_shared=float(cfg["mask-shared"]),
    )
