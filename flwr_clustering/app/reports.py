"""Side runs of the App on pooled data (simulation only), named by the registry's hooks."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..algorithms.deepfeca import linear_probe, run_deepfeca
from ..log import logger

__all__ = ["deepfeca_linear_probe"]


def deepfeca_linear_probe(strategy, X: np.ndarray, y: np.ndarray, *,
                          test_size: float = 0.25) -> dict[str, Any]:
    """Linear-probe accuracy of DeepFeCA's federated, random and centralized networks.

    Simulation only (the server knows the pooled rows and labels). The rows are split
    into a stratified probe-training and held-out part (``test_size``, the run seed);
    the networks saw the held-out rows without labels during training.
    """
    from sklearn.model_selection import train_test_split

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, stratify=y,
                                          random_state=strategy.seed)
    threads = strategy.train_opts.threads
    report = {
        "federated": linear_probe(strategy.model, strategy.spec, Xtr, ytr, Xte, yte,
                                  threads=threads),
        "random-network": linear_probe(strategy.initial_model, strategy.spec, Xtr, ytr, Xte,
                                       yte, threads=threads),
    }
    if strategy.options.centralized:
        t0 = time.monotonic()
        central = run_deepfeca([X], strategy.k, rounds=len(strategy.history),
                               labeller=strategy.labeller, spec=strategy.spec,
                               options=strategy.train_opts, k_local=strategy.k_local,
                               seed=strategy.seed,
                               privacy_threshold=strategy.privacy_threshold,
                               mavg_reference=strategy.mavg_reference)
        report["centralized"] = linear_probe(central.weights, strategy.spec, Xtr, ytr, Xte,
                                             yte, threads=threads)
        report["centralized-seconds"] = time.monotonic() - t0
    logger.info("linear probe (top-1 on %d held-out rows): %s", len(yte),
                ", ".join(f"{k} {v:.4f}" for k, v in report.items()))
    return {"linear-probe": report}
