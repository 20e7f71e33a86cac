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
from .checkpoint import (
    OutDirLock,
    RoundWriter,
    check_out_dir,
    check_resume,
    check_resumed_data,
    load_checkpoint,
    write_failure,
)
from .config import build_strategy, dataset_kwargs, merged_config, results_dir
from .data_source import (
    check_data_sources,
    check_raw_row_consent,
    describe,
    identical_data_warning,
    query_data_sources,
)
from .results import save_results

__all__ = ["app", "run_server"]

app = ServerApp()


def run_server(grid: Grid, run_config: dict) -> dict:
    """Run one clustering job on ``grid`` and save its results.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid (simulation, deployment or in-process).
    run_config : dict
        The run config (missing keys take :data:`~flwr_clustering.app.config.DEFAULTS`).

    Returns
    -------
    dict
        ``{"centroids", "federated", "centralized", "out_dir", "strategy"}``.

    Raises
    ------
    PermissionError
        If ``out-dir`` cannot be created or written (before any message is sent).
    FileExistsError
        If ``out-dir`` holds another run's results (unless ``resume-from`` is that
        directory) or another run is writing there (before any message is sent).
    ValueError
        If ``resume-from`` names a checkpoint of another algorithm or run config, or the
        algorithm cannot resume (before any message is sent).
    Exception
        Whatever ended the run, after ``result.json`` recorded it as failed.
    """
    cfg = merged_config(run_config)
    out_dir = results_dir(cfg)
    spec = registry.get(str(cfg["algorithm"]))
    checkpoint = None
    if cfg["resume-from"]:
        checkpoint = load_checkpoint(cfg["resume-from"])
        check_resume(checkpoint, cfg)
    check_out_dir(out_dir)
    lock = OutDirLock(out_dir).acquire(cfg)  # one run per out-dir; nothing overwritten
    try:
        strategy = build_strategy(cfg)
        writer = RoundWriter(out_dir, cfg, last_round=checkpoint["round"] if checkpoint else 0)
        try:
            return _run(grid, cfg, out_dir, spec, strategy, writer, checkpoint)
        except BaseException as ex:  # also an interrupt: record it, then let it end the run
            try:
                write_failure(out_dir, strategy, cfg, ex, writer.last_round)
            except Exception as write_error:  # noqa: BLE001 - the run's own error matters
                logger.error("could not write result.json of the failed run to %s: %s",
                             out_dir, write_error)
            raise
    finally:
        lock.release()


def _run(grid, cfg, out_dir, spec, strategy, writer, checkpoint) -> dict:
    """The run of :func:`run_server` after its checks (a failure is recorded there)."""
    pooled = complete = None
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
    sources, absent = query_data_sources(grid, strategy, nodes)
    warnings = []  # kept by start() (its reset) for result.json
    if checkpoint is not None:  # the same rows as the interrupted run, and its record kept
        sources, changed = check_resumed_data(checkpoint, sources, str(cfg["resume-from"]),
                                              accept=bool(cfg["resume-changed-data"]))
        warnings += [changed] if changed else []
    writer.data_sources = sources
    # its replies belong to the run's privacy ledger (start() resets the strategy's own)
    strategy.pre_run_ledger = list(strategy.ledger)
    describe(sources)
    same = identical_data_warning(sources)
    if same is not None:
        logger.warning("%s", same)
        warnings.append(same)
    strategy.pre_run_warnings = warnings
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
    if pooled is not None and pooled[1] is not None and strategy.secure_aggregation:
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
    """ServerApp entry point: run the job named by the run config."""
    configure_console()
    run_server(grid, dict(context.run_config))
