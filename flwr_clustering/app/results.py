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
from ..reporting import atomic_write_text, plot_curves, plot_k_scores, save_run, to_jsonable
from .checkpoint import centroid_arrays

__all__ = ["run_model", "save_results"]


def save_results(strategy, out_dir: str | Path, **extra: Any) -> dict[str, str]:
    """Write a finished run's results to ``out_dir``.

    Parameters
    ----------
    strategy : ClusteringStrategy
        A strategy after :meth:`start`.
    out_dir : str or pathlib.Path
        Directory, created if missing.
    **extra
        Merged into ``result.json``; ``X`` and ``labels`` (pooled rows in the federation's
        features and units, what was clustered, and their clusters; simulation only) go to
        the plot.

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
        "features": getattr(strategy, "feature_summary", None),
        **extra,
    }
    arrays = centroid_arrays(strategy)  # in the data's own units
    rounds = [arrays[f"round_{i + 1}"] for i in range(len(strategy.centroid_history))]
    extra_arrays = {k: v for k, v in arrays.items() if k == "scaled_centroids"}
    # clusters.png: the rows as clustered (``X`` is given in the federation's features and
    # units) with the model as computed, and says so
    transform = strategy.feature_transform
    space = ("" if transform is None else f"scaled rows ({transform.scaling})"
             if transform.scaled else "rows, not scaled")
    paths = save_run(out_dir, arrays.get("centroids"), rounds, strategy.history,
                     summary, X, labels, extra_arrays,
                     plot_centroids=strategy.centroids, space=space,
                     feature_names=None if transform is None else transform.features)
    if hasattr(strategy, "privacy_ledger"):
        paths["privacy"] = str(Path(out_dir) / "privacy.json")
        atomic_write_text(paths["privacy"],
                          json.dumps(to_jsonable(strategy.privacy_ledger()), indent=1))
    paths.update(save_k_scores(strategy, out_dir))
    paths.update(save_data_terms(strategy, out_dir, summary, paths))
    for filename, arrays in strategy.artifacts().items():
        paths[Path(filename).stem] = str(Path(out_dir) / filename)
        np.savez(paths[Path(filename).stem], **arrays)
    if strategy.curves:
        paths["training"] = str(Path(out_dir) / "training.png")
        plot_curves(paths["training"], strategy.history, strategy.curves,
                    title=f"{strategy.name} training")
    logger.info("results written to %s", out_dir)
    return paths


def save_k_scores(strategy, out_dir: str | Path) -> dict[str, str]:
    """A search's scores: ``k_scores.csv`` (one row per ``k``) and ``k_scores.png``.

    Nothing for a run of one model. The columns: ``k``, ``chosen`` (1 on the chosen
    row), the criteria, ``clusters`` (non-empty), ``rows``, ``withheld-rows``, the kept
    start and its seed, ``rounds`` and ``converged``.
    """
    import pandas as pd

    scores = list(getattr(strategy, "k_scores", None) or [])
    search = getattr(strategy, "search", None)
    if not scores or not search:
        return {}
    out = Path(out_dir)
    table = pd.DataFrame(scores)
    table.insert(1, "chosen", (table["k"] == search["k"]).astype(int))
    paths = {"k_scores": str(out / "k_scores.csv"), "k_scores_plot": str(out / "k_scores.png")}
    atomic_write_text(paths["k_scores"], table.to_csv(index=False))
    plot_k_scores(paths["k_scores_plot"], scores, int(search["k"]), str(search["rule"]),
                  title=f"{strategy.name}: choosing k")
    logger.info("k scores of %d candidates: %s", len(scores), paths["k_scores"])
    return paths


def cluster_profile_of(strategy, privacy_threshold: int = 2):
    """The final model's cluster profile in the data's own units (``None`` without one).

    From the final evaluation's per-cluster counts, residual sums and squared residual
    sums (no row). A cluster's mean and spread come from the clients that sent its
    statistics (a client withholds a cluster of fewer than ``privacy-threshold`` rows);
    its size counts every row. Rows per site only where the server saw each client's
    counts (not under secure aggregation). A date feature (``datetime-columns``) has its
    mean in seconds since the epoch and, beside it, as an ISO 8601 UTC time
    (``"<feature> mean (UTC)"``).
    """
    from ..profile import cluster_profile

    stats = list(getattr(strategy, "evaluation_stats", []) or [])
    C = strategy.centroids
    keys = ("cluster-counts", "cluster-residuals", "cluster-sq-residuals")
    if not stats or C is None or np.ndim(C) != 2 or any(
            key not in s for s in stats for key in keys):
        return None
    k, d = np.shape(C)
    total = np.zeros(k)
    n_eff, R, Q = np.zeros(k), np.zeros((k, d)), np.zeros((k, d))
    for s in stats:
        counts = np.asarray(s["cluster-counts"], dtype=np.float64)
        r = np.asarray(s["cluster-residuals"], dtype=np.float64)
        q = np.asarray(s["cluster-sq-residuals"], dtype=np.float64)
        if counts.shape != (k,) or r.shape != (k, d) or q.shape != (k, d):
            return None
        total += counts
        sent = np.isfinite(r).all(axis=1) & np.isfinite(q).all(axis=1)
        n_eff[sent] += counts[sent]
        R[sent] += r[sent]
        Q[sent] += q[sent]
    if not n_eff.any():
        return None  # e.g. masked clients: no cluster has every feature
    transform = strategy.feature_transform
    names = list(transform.features) if transform is not None else [str(j) for j in range(d)]
    if len(names) != d:
        return None
    sites = None
    if len(stats) > 1 and not strategy.summer.sums_only:  # (secure: no site's own)
        sites = {f"client {int(s.get('client-id', i))}": np.asarray(s["cluster-counts"])
                 for i, s in enumerate(stats)}
    scaled = transform is not None and transform.scaled
    profile = cluster_profile(
        n_eff, R, Q, C, names, center=np.asarray(transform.center) if scaled else None,
        scale=np.asarray(transform.scale) if scaled else None, site_counts=sites,
        privacy_threshold=privacy_threshold)
    profile["size"] = total.astype(np.int64)
    profile["fraction"] = total / total.sum() if total.sum() else np.nan
    for name in getattr(transform, "datetimes", ()):  # seconds since the epoch, readable
        import pandas as pd

        mean = f"{name} mean"
        when = pd.to_datetime(profile[mean], unit="s", utc=True, errors="coerce")
        profile.insert(profile.columns.get_loc(mean) + 1, f"{name} mean (UTC)",
                       when.dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return profile


def run_model(strategy, run_config: dict[str, Any]):
    """The model a site keeps (``model.json``) of a finished strategy, or ``None``.

    ``None`` where the model is not centroids (a network) or its names do not fit them.
    Its ``options`` are the run's own settings (:func:`~flwr_clustering.app.config.run_settings`:
    its algorithm's keys and the run-wide ones that matter to it).
    """
    from .. import __version__
    from ..data.schema import FeatureTransform
    from ..model import ClusteringModel
    from .config import run_settings

    C = strategy.centroids
    transform = strategy.feature_transform
    if C is None or np.ndim(C) != 2 or strategy.labelling == "network":
        return None
    names = (transform.features if transform is not None
             else tuple(str(j) for j in range(np.shape(C)[1])))
    if len(names) != np.shape(C)[1]:
        return None
    return ClusteringModel(
        algorithm=strategy.name, k=int(np.shape(C)[0]), feature_names=tuple(names),
        transform=transform if transform is not None else FeatureTransform(names),
        centroids=np.asarray(C, dtype=np.float64),
        options=to_jsonable(run_settings(run_config) if run_config else {}),
        library_version=__version__, labelling=strategy.labelling)


def save_data_terms(strategy, out_dir: str | Path, summary: dict[str, Any],
                    paths: dict[str, str]) -> dict[str, str]:
    """The results in the data's own terms: ``model.json``, the profile, ``report.html``.

    ``model.json`` (:class:`~flwr_clustering.model.ClusteringModel`: feature names, scaling,
    centres in the model's and in the original units) labels new files at any site with
    :func:`flwr_clustering.load_model`; ``profile.csv`` and ``profile.png`` hold the cluster
    profile (:func:`cluster_profile_of`); ``report.html`` is one self-contained page with
    the run's settings (its algorithm's options and the run-wide ones,
    :func:`~flwr_clustering.app.config.run_settings`), the choice of ``k`` of a
    ``k='auto'`` run (its table and ``k_scores.png``, from ``paths``), warnings, profile,
    rows per site and convergence.
    """
    from .. import __version__
    from ..data.site_check import FederationSchema
    from ..profile import plot_profile, write_report
    from .config import run_settings

    out = Path(out_dir)
    written: dict[str, str] = {}
    C = strategy.centroids
    transform = strategy.feature_transform
    run_config = summary.get("run-config") or {}
    settings = run_settings(run_config) if run_config else {}
    threshold = int(run_config.get("privacy-threshold", getattr(strategy, "privacy_threshold",
                                                                 2)))
    model = run_model(strategy, run_config)
    if model is not None:
        written["model"] = str(model.save(out / "model.json"))
    if transform is not None or model is not None:
        # what a site needs to check its file before it joins (python -m flwr_clustering
        # check <file> --schema schema.json): the features, levels, index column, policies
        schema = FederationSchema.from_run(
            transform if transform is not None else model.transform, run_config,
            labelling=strategy.labelling, library_version=__version__)
        written["schema"] = str(schema.save(out / "schema.json"))
    profile = None
    try:
        profile = cluster_profile_of(strategy, threshold)
    except ValueError as ex:  # a profile must not fail a finished run
        logger.warning("no cluster profile: %s", ex)
    images = {"clusters and convergence": paths.get("plot", "")}
    if profile is not None:
        written["profile"] = str(out / "profile.csv")
        profile.to_csv(written["profile"])
        written["profile-plot"] = str(out / "profile.png")
        plot_profile(written["profile-plot"], profile, list(
            transform.features if transform is not None
            else [str(j) for j in range(np.shape(C)[1])]),
            title=f"{strategy.name}: cluster profile")
        images["cluster profile"] = written["profile-plot"]
        logger.info("cluster profile (original units): %s", written["profile"])
    written["report"] = str(out / "report.html")
    settings = {"algorithm": strategy.name, **settings}
    if summary.get("features"):
        settings["features"] = summary["features"].get("features")
        settings["scaling"] = summary["features"].get("scaling")
        missing = missing_cells_line(summary["features"])
        if missing is not None:
            settings["missing cells"] = missing
    write_report(written["report"], title=f"flwr-clustering: {strategy.name}",
                 settings=settings, warnings=summary.get("warnings", []), profile=profile,
                 images=images, history=strategy.history,
                 k_choice=k_choice_of(strategy, paths.get("k_scores_plot")))
    return written


def missing_cells_line(features: dict[str, Any]) -> str | None:
    """The report's line on missing cells: the policy and the rows with a missing cell.

    ``None`` for a run without the features step or before the ``missing`` option.
    """
    policy = features.get("missing")
    if policy is None:
        return None
    incomplete = int(features.get("incomplete-rows") or 0)
    read = int(features.get("rows-read") or 0)
    per_site = ", ".join(f"{site}: {n}" for site, n in
                         (features.get("incomplete-rows-per-site") or {}).items())
    where = f" ({per_site})" if per_site else ""
    if not incomplete:
        return f"{policy}: no row has a missing cell"
    if policy == "drop":
        return (f"drop: {incomplete} of {read} rows have a missing cell and were left out "
                f"(label -1){where}")
    cells = sum((features.get("missing-cells") or {}).values())
    filled = f", {cells} cells filled with the federation's means" if policy == "mean" else ""
    return f"{policy}: {incomplete} of {read} rows had a missing cell{where}{filled}"


def k_choice_of(strategy, figure: str | None = None) -> dict[str, Any] | None:
    """The choice of ``k`` of a search, for the report.

    ``None`` for a run of one model and for a search over starts at one given ``k``
    (``n-init``), which chose no ``k``.

    ``{"k", "rule", "text", "scores", "figure"}``: the chosen ``k``, the rule, one
    sentence (the candidates, the runner-up, the other rules' picks), the candidates'
    scores (one row per ``k``, ``chosen`` marked) and ``k_scores.png``.
    """
    import pandas as pd

    scores = list(getattr(strategy, "k_scores", None) or [])
    search = getattr(strategy, "search", None)
    if not scores or not search or search["k-min"] == search["k-max"]:
        return None
    table = pd.DataFrame(scores)
    table.insert(1, "chosen", np.where(table["k"] == search["k"], "chosen", ""))
    others = ", ".join(f"{rule}: k={k}" for rule, k in (search.get("picks") or {}).items()
                       if rule != search["rule"])
    text = (f"k = {search['k']} chosen by {search['rule']} among k = {search['k-min']}.."
            f"{search['k-max']} ({search['candidates']} candidate models, "
            f"{search['starts']} start(s) per k)")
    if search.get("runner-up") is not None:
        text += f"; runner-up k = {search['runner-up']}"
    if others:
        text += f"; the other rules pick {others}"
    return {"k": int(search["k"]), "rule": str(search["rule"]), "text": text + ".",
            "scores": table, "figure": figure}
