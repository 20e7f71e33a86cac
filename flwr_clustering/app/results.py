"""Result files of a run, written by the App (strategies write nothing).

:func:`save_results` writes what a finished strategy hands back: the model
(``centroids.npz`` with every round), ``history.json``, ``result.json`` (configuration,
federated metrics, the run's ``diagnostics`` and ``warnings`` (a list of sentences, empty
when nothing is wrong; :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.diagnose`)
and the extras the caller passes, e.g. the centralized baseline),
``clusters.png``, the strategy's ``artifacts()`` (e.g. DGC's ``nodes.npz``, KDC's
``kdc_model.npz``, DeepFeCA's ``model.npz``) and, where the strategy names per-round
series in ``curves``, ``training.png``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..log import logger
from ..reporting import atomic_write_text, plot_curves, save_run, to_jsonable

__all__ = ["save_results"]


def save_results(strategy, out_dir: str | Path, **extra: Any) -> dict[str, str]:
    """Write a finished run's results to ``out_dir``.

    Parameters
    ----------
    strategy : ClusteringStrategy
        A strategy after :meth:`start`.
    out_dir : str or pathlib.Path
        Directory, created if missing.
    **extra
        Merged into ``result.json``; ``X`` and ``labels`` (pooled rows and their
        clusters, simulation only) go to the plot.

    Returns
    -------
    dict
        The written paths by kind.
    """
    X = extra.pop("X", None)
    labels = extra.pop("labels", None)
    if X is not None:
        X = strategy.plot_features(X)
    summary = {
        "algorithm": strategy.name,
        "config": strategy.describe(),
        "rounds": len(strategy.history),
        "seconds": getattr(strategy, "seconds", None),
        "federated": strategy.final_metrics,
        **strategy.result_summary(),
        "diagnostics": getattr(strategy, "diagnostics", {}),
        "warnings": list(getattr(strategy, "warnings", [])),
        **extra,
    }
    paths = save_run(out_dir, strategy.centroids, strategy.centroid_history, strategy.history,
                     summary, X, labels)
    if hasattr(strategy, "privacy_ledger"):
        paths["privacy"] = str(Path(out_dir) / "privacy.json")
        atomic_write_text(paths["privacy"],
                          json.dumps(to_jsonable(strategy.privacy_ledger()), indent=1))
    for filename, arrays in strategy.artifacts().items():
        paths[Path(filename).stem] = str(Path(out_dir) / filename)
        np.savez(paths[Path(filename).stem], **arrays)
    if strategy.curves:
        paths["training"] = str(Path(out_dir) / "training.png")
        plot_curves(paths["training"], strategy.history, strategy.curves,
                    title=f"{strategy.name} training")
    logger.info("results written to %s", out_dir)
    return paths
