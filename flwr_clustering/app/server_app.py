"""The ServerApp of the flwr-clustering Flower App.

Builds the strategy named by the run config, runs it on the grid, and writes the
results (centroids, history, metrics, plot) to ``out-dir``. When the data is known to the
server (simulation on a registry dataset, not ``dataset='local'``) it also reports, side
by side, the same metrics for scikit-learn ``KMeans`` on the pooled data with the same
``k`` and seed, and per-round metrics of the federated centroids on the pooled data (for
DGC also every user's own centres: ``user-accuracy-mean`` and the like). With
feature masks (``feature-mask``) the federated centroids are measured on each row's observed
features, and the centralized ``KMeans`` runs on the same rows complete (unmasked).

Nothing is lost (:mod:`flwr_clustering.app.checkpoint`): ``out-dir`` is checked before the
first message; every round writes the model, the history and a checkpoint; a failed run
writes ``result.json`` with ``"status": "failed"``; ``resume-from`` continues an
interrupted iterative run from its checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
from flwr.app import ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from .. import registry
from ..algorithms.lloyd import nearest_labels
from ..algorithms.masked import pooled_masked_squared_distances
from ..data.registry import check_partitioning, feature_names, load_pooled
from ..data.schema import FeatureTable
from ..evaluation import aggregate_evaluation_stats, label_evaluation_stats
from ..log import configure_console, format_metrics, logger
from ..metrics import centralized_metrics, model_contingencies, per_model_metrics
from ..pulls import FastPulls
from .checkpoint import (
    OutDirLock,
    RoundWriter,
    check_out_dir,
    check_resume,
    check_resumed_data,
    load_checkpoint,
    run_files,
    write_failure,
)
from .config import (
    build_strategy,
    dataset_kwargs,
    ignored_keys_warning,
    merged_config,
    results_dir,
)
from .data_source import (
    check_data_sources,
    check_enough_sources,
    check_raw_row_consent,
    describe,
    identical_data_warning,
    query_data_sources,
)
from .paths import check_run_config_algorithm, check_run_config_paths
from .results import save_results

__all__ = ["REFUSALS", "RunRefused", "app", "main", "run_server"]

app = ServerApp()


def run_server(grid: Grid, run_config: dict, *,
               allowed_paths: Iterable[str | os.PathLike] | str | None = None) -> dict:
    """Run one clustering job on ``grid`` and save its results.

    A run refused before round 1 (its run config, its options, a path it may not read,
    the clients' data) says why in one ERROR line and in ``result.json``
    (``"status": "failed"``, ``"refused": true``), also when the refusal comes before the
    strategy exists; only an out-dir that is not this run's (another run's results, or
    one being written) is left untouched.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid (simulation, deployment or in-process).
    run_config : dict
        The run config (missing keys take :data:`~flwr_clustering.app.config.DEFAULTS`).
    allowed_paths : iterable of path-like, str, optional
        The directories whose files the run config may name (DGC's ``graph`` file,
        ``resume-from``); default: the environment variable
        ``FLWR_CLUSTERING_ALLOWED_PATHS`` (:mod:`flwr_clustering.app.paths`).

    Returns
    -------
    dict
        ``{"centroids", "federated", "centralized", "out_dir", "strategy"}``.

    Raises
    ------
    PermissionError
        If ``out-dir`` cannot be created or written (before any message is sent), or the
        run config names a file outside the allowed directories.
    FileExistsError
        If ``out-dir`` holds another run's results (unless ``resume-from`` is that
        directory) or another run is writing there (before any message is sent).
    ValueError
        If the run config is refused (an unknown key, a bad value), or ``resume-from``
        names a checkpoint of another algorithm or run config, or the algorithm cannot
        resume (before any message is sent).
    Exception
        Whatever ended the run, after ``result.json`` recorded it as failed.
    """
    try:  # a module the run config names is checked before anything imports it
        check_run_config_algorithm(dict(run_config or {}).get("algorithm"), allowed_paths)
        cfg = merged_config(run_config)
    except Exception as ex:
        _refused_run_config(run_config, ex)
        _mark_refused(ex)
        raise
    out_dir = results_dir(cfg)
    try:
        check_out_dir(out_dir)
        lock = OutDirLock(out_dir).acquire(cfg)  # one run per out-dir; nothing overwritten
    except Exception as ex:  # the out-dir is not this run's to write: say it, write nothing
        logger.error("run refused before round 1: %s", ex)
        _mark_refused(ex)
        raise
    # a directory that already holds a run's files is the interrupted run being resumed:
    # a refusal before this run starts leaves its result.json as it is
    fresh = not run_files(out_dir)
    strategy = writer = None
    try:
        spec = registry.get(str(cfg["algorithm"]))
        check_run_config_paths(cfg, allowed_paths)
        checkpoint = None
        if cfg["resume-from"]:
            checkpoint = load_checkpoint(cfg["resume-from"])
            check_resume(checkpoint, cfg)
        strategy = build_strategy(cfg)
        writer = RoundWriter(out_dir, cfg, last_round=checkpoint["round"] if checkpoint else 0)
        return _run(grid, cfg, out_dir, spec, strategy, writer, checkpoint)
    except BaseException as ex:  # also an interrupt: record it, then let it end the run
        refused = _refused(ex, strategy)
        if refused:
            _mark_refused(ex)
        if writer is None and not fresh:
            logger.error("run %s before round 1: %s (%s keeps the interrupted run's "
                         "result.json)", "refused" if refused else "failed", ex, out_dir)
            raise
        try:
            write_failure(out_dir, strategy, cfg, ex,
                          writer.last_round if writer is not None else 0, refused=refused)
        except Exception as write_error:  # noqa: BLE001 - the run's own error matters
            logger.error("could not write result.json of the failed run to %s: %s",
                         out_dir, write_error)
        raise
    finally:
        lock.release()


#: The errors with which the App's checks refuse a run (a wrong run config, option, path
#: or data); anything else before round 1 (a lost SuperLink) is a failure.
REFUSALS = (ValueError, PermissionError, FileNotFoundError, FileExistsError)


def _refused(error: BaseException, strategy) -> bool:
    """Whether ``error`` refused the run before its first training round."""
    before = strategy is None or not getattr(strategy, "training_round", 0)
    return before and isinstance(error, REFUSALS)


def _mark_refused(error: BaseException) -> None:
    """Mark ``error`` as a refusal before round 1 (for :func:`main`)."""
    if isinstance(error, REFUSALS):
        try:
            error.refused_before_round_1 = True  # type: ignore[attr-defined]
        except AttributeError:  # an exception class without a __dict__
            pass


def _refused_run_config(run_config: dict, error: Exception) -> None:
    """A run config refused before it could be merged: one ERROR line and ``result.json``.

    ``result.json`` goes to the run config's ``out-dir`` (or a folder of the run's own)
    when that directory can be written and holds no other run's files; otherwise the
    ERROR line alone says it.
    """
    raw = run_config.get("out-dir", "")
    algorithm = run_config.get("algorithm", "fkm")
    named = algorithm if isinstance(algorithm, str) and algorithm in registry.names() else "run"
    if not isinstance(raw, str):
        logger.error("run refused before round 1: %s", error)
        return
    out_dir = results_dir({"out-dir": raw, "algorithm": named})
    try:
        check_out_dir(out_dir)
        lock = OutDirLock(out_dir).acquire({})
    except Exception:  # noqa: BLE001 - not this run's directory: the log says it
        logger.error("run refused before round 1: %s", error)
        return
    try:
        write_failure(out_dir, None, dict(run_config), error, 0, refused=True)
    except Exception as write_error:  # noqa: BLE001 - the refusal matters
        logger.error("run refused before round 1: %s (result.json not written to %s: %s)",
                     error, out_dir, write_error)
    finally:
        lock.release()


class RunRefused(Exception):
    """A run the App refused before round 1 (its reason already logged and written).

    :func:`main` raises it in place of the check's own error, without that error's
    traceback, so that Flower's report of the failed ServerApp ends with the reason.
    """


def _run(grid, cfg, out_dir, spec, strategy, writer, checkpoint) -> dict:
    """The run of :func:`run_server` after its checks (a failure is recorded there)."""
    pooled = complete = None
    # replies pulled every poll-interval s, the data-source check's too (flwr_clustering.pulls)
    grid = FastPulls.wrap(grid, strategy.poll_interval)
    # Wait for min-nodes, then until the count settles: a simulation registers its
    # virtual SuperNodes while the ServerApp starts (flower-notes G1).
    nodes = strategy.wait_for_nodes(grid, settle=1.0)
    num_nodes = len(nodes)
    logger.info("%d node(s) connected (min-nodes=%d)", num_nodes, strategy.min_nodes)
    writer.num_nodes = num_nodes
    if (checkpoint is not None and cfg["dataset"] != "local"
            and checkpoint.get("num-nodes") not in (None, num_nodes)):
        raise ValueError(
            f"resume-from {cfg['resume-from']!r}: the interrupted run had "
            f"{checkpoint['num-nodes']} nodes, {num_nodes} are connected (the simulated "
            "data is split by the node count)")
    if cfg["dataset"] != "local":
        # a split that cannot serve this many clients says so now, naming the ones that can
        check_partitioning(num_nodes, **dataset_kwargs(cfg))
    # Round 0: where every client's data came from (one QUERY message per node). A run
    # config that names another source than the nodes read is refused; pooled side results
    # only where the pooled data is the clients' data.
    sources, absent = query_data_sources(grid, strategy, nodes, moments=checkpoint is None)
    warnings = []  # kept by start() (its reset) for result.json
    if checkpoint is not None:  # the same rows as the interrupted run, and its record kept
        sources, changed = check_resumed_data(checkpoint, sources, str(cfg["resume-from"]),
                                              accept=bool(cfg["resume-changed-data"]))
        warnings += [changed] if changed else []
    writer.data_sources = sources
    # its replies belong to the run's privacy ledger (start() resets the strategy's own)
    strategy.pre_run_ledger = list(strategy.ledger)
    describe(sources)
    ignored = ignored_keys_warning(cfg)
    if ignored is not None:
        logger.warning("%s", ignored)
        warnings.append(ignored)
    same = identical_data_warning(sources)
    if same is not None:
        logger.warning("%s", same)
        warnings.append(same)
    strategy.pre_run_warnings = warnings
    check_enough_sources(strategy, sources, absent, num_nodes)
    not_pooled = check_data_sources(cfg, sources, absent, num_nodes)
    check_raw_row_consent(strategy, sources)
    if not_pooled is not None:
        logger.warning("no pooled or centralized results: %s", not_pooled)
    if cfg["dataset"] != "local" and not_pooled is None:
        # The pooled data of the simulated federation (the cluster-wise split drops rows,
        # so the pooled set depends on the split): num-partitions = connected nodes. With
        # feature masks the pooled rows carry NaN where their client does not look, and the
        # centralized baseline clusters the same rows complete
        # (Maritan & Schenato, Sec. 6.2: centralized k-means on the unmasked data).
        num_partitions = num_nodes
        pooled = load_pooled(num_partitions, **dataset_kwargs(cfg))
        complete = (load_pooled(num_partitions, complete=True, **dataset_kwargs(cfg))
                    if cfg["feature-mask"] != "none" else pooled)
    evaluate_fn = None
    if pooled is not None:
        X_raw, y = pooled
        scaled: dict = {}

        def evaluate_fn(server_round, arrays):
            # the pooled rows in the federation's features and units (agreed in start())
            if "X" not in scaled:
                scaled["X"] = feature_rows(strategy, X_raw, cfg["dataset"])
            X = scaled["X"]
            labels = strategy.pooled_labels(X)
            if labels is not None:  # a model that labels rows itself (KDC)
                stats = label_evaluation_stats(labels, int(strategy.k), y)
                return MetricRecord(aggregate_evaluation_stats([stats]))
            if "centroids" not in arrays:  # round 0 of a model the clients initialise
                return None
            metrics = centralized_metrics(X, arrays["centroids"].numpy(), y)
            # Protocols where every user keeps its own centres (DGC): score each user's.
            models = strategy.scored_user_models()
            if models is not None and y is not None and not np.isnan(X).any():
                metrics.update(per_model_metrics(model_contingencies(X, models, y)))
            return MetricRecord(metrics)

    evaluate_config = None
    if pooled is not None and pooled[1] is not None and strategy.summer.sums_only:
        # a secure evaluation sums equal-width contingency tables: the simulation's classes
        evaluate_config = ConfigRecord({"n-classes": int(np.max(pooled[1])) + 1})
    result = strategy.start(grid=grid, evaluate_fn=evaluate_fn, on_round=writer,
                            evaluate_config=evaluate_config,
                            resume=None if checkpoint is None else checkpoint["state"])
    if writer.write_seconds:
        logger.info("per-round files: %.1f ms per round (mean of %d)",
                    1e3 * float(np.mean(writer.write_seconds)), len(writer.write_seconds))
    centroids = result.arrays["centroids"].numpy()
    extra: dict = {"status": "completed", "run-config": cfg, "data-sources": sources}
    if not_pooled is not None:
        extra["pooled-skipped"] = not_pooled
    if checkpoint is not None:
        extra["resumed-after-round"] = int(checkpoint["round"])
    if pooled is not None and complete is not None:
        X, y = feature_rows(strategy, pooled[0], cfg["dataset"]), pooled[1]
        X_complete = feature_rows(strategy, complete[0], cfg["dataset"])
        from sklearn.cluster import KMeans  # the centralized baseline (simulation only)

        # centralized k-means on the pooled rows in the same features and units (with the
        # default scaling='standard': the standardised pooled rows)
        # (k='auto': the chosen k)
        km = KMeans(int(strategy.k), n_init=10, random_state=int(cfg["seed"])).fit(X_complete)
        extra["centralized"] = centralized_metrics(X_complete, km.cluster_centers_, y)
        labels = strategy.pooled_labels(X)
        if labels is None:
            extra["federated-on-pooled"] = centralized_metrics(X, centroids, y)
            labels = (pooled_masked_squared_distances(X, centroids).argmin(axis=1)
                      if np.isnan(X).any() or np.isnan(centroids).any()
                      else nearest_labels(X, centroids))
        else:
            extra["federated-on-pooled"] = aggregate_evaluation_stats(
                [label_evaluation_stats(labels, int(strategy.k), y)])
        report = spec.pooled_report_fn()
        if report is not None and y is not None:  # e.g. DeepFeCA's linear probe
            extra.update(report(strategy, X, y))
        extra["X"] = X_complete  # the plot: the rows as clustered (scaled), not raw units
        extra["labels"] = labels
        # the federated model on the pooled rows is the strategy's last server evaluation
        # (logged); its comparison, once:
        logger.info("centralized k-means on the pooled rows: %s",
                    format_metrics(extra["centralized"]))
    save_results(strategy, out_dir, **extra)
    return {
        "centroids": centroids, "federated": strategy.final_metrics,
        "centralized": extra.get("centralized"), "out_dir": str(out_dir), "strategy": strategy,
    }


def feature_rows(strategy, X: np.ndarray, dataset: str) -> np.ndarray:
    """Pooled rows of a built-in data set in the federation's features and units.

    The rows are taken as the simulated clients hold them (the data set's own column
    names, :func:`~flwr_clustering.data.registry.feature_names`, or positions) and go
    through the federation's transform as every client's do.
    """
    transform = strategy.feature_transform
    if transform is None or np.ndim(X) != 2:
        return X
    return transform.apply(FeatureTable(np.asarray(X), feature_names(dataset) or ()))


@app.main()
def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point: run the job named by the run config.

    A run refused before round 1 ends with :class:`RunRefused` carrying the reason (already
    one ERROR line and ``result.json``), not with the check's traceback.
    """
    configure_console()
    try:
        run_server(grid, dict(context.run_config))
    except REFUSALS as ex:
        if not getattr(ex, "refused_before_round_1", False):
            raise
        raise RunRefused(f"run refused before round 1: {ex}") from None
