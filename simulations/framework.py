"""The reproduction framework: experiment definitions, the method registry, the run loop, reports.

One :class:`Experiment` per figure or table of a paper: which data and client split, which
methods, how many runs, and the paper's own numbers, copied as data (never computed). The
registry :data:`EXPERIMENTS` maps a name to its definition; each paper module of
:mod:`simulations` (``garst``, ``feca``, ``deepfeca``, ``masked``, ``dgc``, ``kdc``) adds its
experiments by calling :func:`register` when it is imported, and :mod:`simulations` imports
them all. This module imports none of them.

A :class:`Method` names its ``kind``, a key of the one method registry :data:`RUNNERS`
(kind -> :data:`Runner`). The kinds of the library's centroid algorithms are registered here:
``central`` (scikit-learn k-means on the pooled data) and the pure loops of layer 1,
``fkm`` (:func:`~flwr_clustering.algorithms.fkm.run_fkm`), ``kfed``
(:func:`~flwr_clustering.algorithms.kfed.run_kfed`), ``feca``, ``mavg`` and ``ffcm``, which the
Flower tests show equal to the Flower runs; the loops are taken from the algorithm registry
(:mod:`flwr_clustering.registry`), the same declaration the App reads. A paper module adds
its own kinds with
:func:`register_runner`, usually through :func:`self_scoring` (a function that runs and scores
a method and returns every metric of the experiment).

:func:`reproduce` runs an experiment (:func:`run_experiment`), turns the runs into result rows
(:func:`summarize`) and writes ``<out>/<name>.json``, ``<name>.md`` (ours against the paper's),
``<name>.checks.json`` (the paper's claims evaluated on our rows, where the experiment has
``checks``) and PNG plots.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits

from flwr_clustering import registry
from flwr_clustering.evaluation import aggregate_evaluation_stats, local_evaluation_stats
from flwr_clustering.reporting import to_jsonable

__all__ = [
    "DEFAULT_ROUNDS",
    "DEFAULT_RUNS",
    "DEFAULT_TOL",
    "EXPERIMENTS",
    "ROW_KEYS",
    "RUNNERS",
    "Experiment",
    "FederatedData",
    "Method",
    "MethodRun",
    "PaperValue",
    "RunOutcome",
    "Runner",
    "Setting",
    "client_weighted_ari",
    "register",
    "register_runner",
    "reproduce",
    "run_experiment",
    "run_method",
    "self_scoring",
    "summarize",
    "write_markdown",
    "write_plots",
]

logger = logging.getLogger(__name__)

#: Runs per setting by default: the paper's 200 (spec §4.4).
DEFAULT_RUNS = 200
#: FKM round cap by default: the paper's HPC runs behind Figs 1b, 3, 4 and 6 used 100.
DEFAULT_ROUNDS = 100
#: FKM early stop: Hungarian-matched shift of ``C_g`` at or below this (``< 0`` disables).
DEFAULT_TOL = 1e-6

#: Keys every result row has (more may follow).
ROW_KEYS = ("experiment", "method", "setting", "metric", "ours_mean", "ours_std", "paper", "runs")

# --------------------------------------------------------------------------------------------
# Definitions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FederatedData:
    """Client arrays of one setting, plus the pooled data for the centralized baseline.

    Attributes
    ----------
    X : numpy.ndarray of shape (n, d)
        Pooled data in the generator's order.
    y : numpy.ndarray of shape (n,)
        True labels, integers in ``[0, n_classes)``.
    client : numpy.ndarray of shape (n,)
        Client index of every row.
    n_classes : int
        Number of true classes (the width of the contingency tables).
    centers : numpy.ndarray of shape (k, d), optional
        The true cluster centres, where the generator knows them.
    """

    X: np.ndarray
    y: np.ndarray
    client: np.ndarray
    n_classes: int
    centers: np.ndarray | None = None

    @property
    def n_clients(self) -> int:
        """Number of clients (``client.max() + 1``)."""
        return int(self.client.max()) + 1 if self.client.size else 0

    @property
    def clients(self) -> list[np.ndarray]:
        """``X_i`` of every client, in client-id order."""
        return [self.X[self.client == i] for i in range(self.n_clients)]

    @property
    def labels(self) -> list[np.ndarray]:
        """True labels of every client, in client-id order."""
        return [self.y[self.client == i] for i in range(self.n_clients)]


@dataclass(frozen=True)
class Setting:
    """One data configuration of an experiment.

    Attributes
    ----------
    label : str
        Unique within the experiment; the ``"setting"`` of the result rows
        (e.g. ``"beta=0.1,noise=1.2"``).
    params : dict
        Keyword arguments of the experiment's data loader.
    panel : str
        Plot panel the setting belongs to (e.g. ``"beta=0.1"``).
    group : str
        Tick label of the setting inside its panel (e.g. ``"1.2"``).
    """

    label: str
    params: dict[str, Any] = field(default_factory=dict)
    panel: str = ""
    group: str = ""


@dataclass(frozen=True)
class Method:
    """One clustering method with fixed options.

    Attributes
    ----------
    name : str
        Short name, the ``"method"`` of the result rows (e.g. ``"fkm-unweighted"``).
    kind : str
        Which runner: a key of :data:`RUNNERS`, e.g. ``"central"`` (scikit-learn k-means on
        the pooled data), ``"fkm"``, ``"kfed"``, ``"feca"``, ``"mavg"``, ``"ffcm"`` (the pure
        loops :func:`run_fkm`, :func:`run_kfed`, :func:`run_feca`, :func:`run_mavg`,
        :func:`run_ffcm`) or a kind a paper module added with :func:`register_runner`.
    label : str
        Human-readable description for the Markdown table.
    options : dict
        Keyword arguments of the runner (:func:`run_fkm`: ``init``, ``seeding``,
        ``recount``, ``privacy_threshold``, ...; :func:`run_kfed`: ``k_local``,
        ``privacy_threshold``; ...); for
        ``"central"``: ``n_init``. ``"k"`` overrides the experiment's ``k``.
    tolerance : float
        How far from the paper's mean the reproduction may be before the Markdown table
        flags the difference.

    Raises
    ------
    ValueError
        If ``kind`` is not registered (register a paper's runners before its methods).
    """

    name: str
    kind: str
    label: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    tolerance: float = 0.02

    def __post_init__(self) -> None:
        if self.kind not in RUNNERS:
            raise ValueError(f"method kind must be one of {tuple(RUNNERS)}, got {self.kind!r}")


@dataclass(frozen=True)
class PaperValue:
    """The paper's result for one (method, setting), as published (spec §5).

    Attributes
    ----------
    mean : float
        Mean over the paper's runs.
    std : float, optional
        Standard deviation over runs, where the spec gives it.
    median : float, optional
        Median over runs, where the spec gives it.
    frac_below : float, optional
        Fraction of runs below the experiment's ``frac_threshold``.
    by_round : dict, optional
        Mean by FKM round (round -> mean).
    note : str
        Where the number comes from, if that needs saying.
    """

    mean: float
    std: float | None = None
    median: float | None = None
    frac_below: float | None = None
    by_round: dict[int, float] | None = None
    note: str = ""


@dataclass(frozen=True)
class Experiment:
    """A paper experiment: data, split, methods, runs and the paper's numbers.

    Attributes
    ----------
    name : str
        Registry key and output file stem (``<out>/<name>.json``).
    title : str
        One line: paper, figure, data.
    source : str
        Where the paper's numbers are documented (spec file and section).
    k : int
        Number of global clusters.
    load : callable
        ``load(**setting.params) -> FederatedData``; must be deterministic.
    settings : tuple of Setting
        The data configurations.
    methods : tuple of Method
        The methods, in table order.
    paper : dict
        ``(method name, setting label) -> PaperValue``; missing pairs have no paper value.
    notes : tuple of str
        Markdown bullet points (protocol details, deviations, known differences).
    frac_threshold : float, optional
        When set, rows also report the fraction of runs with a score below it.
    track_rounds : tuple of int
        FKM rounds at which the mean ARI is also reported (those ``<= R``).
    tol : float
        Default FKM early-stop tolerance of this experiment (``< 0``: exactly ``R``
        rounds).
    metrics : tuple of str
        When set, every run is scored by ``scorer`` and the rows report these metrics
        (one row per method, setting and metric); the paper's numbers are then keyed
        ``(method, setting, metric)``. When empty, the single metric the runner reports
        (:attr:`RunOutcome.metric`: an ARI).
    scorer : callable, optional
        ``scorer(data, centroids, k) -> dict`` of metric values (needed with ``metrics``,
        except for methods whose runner scores itself, see :func:`self_scoring`).
    per_run_data : bool
        ``load`` takes a ``seed`` keyword and is called with each run's seed (a new random
        split per run, as the paper's repetitions).
    checks : callable, optional
        ``checks(rows) -> list of dict(claim, holds, detail)``: the paper's claims
        evaluated on our rows, written to the Markdown report and ``<name>.checks.json``.
    """

    name: str
    title: str
    source: str
    k: int
    load: Callable[..., FederatedData]
    settings: tuple[Setting, ...]
    methods: tuple[Method, ...]
    paper: dict[tuple[str, str], PaperValue] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    frac_threshold: float | None = None
    track_rounds: tuple[int, ...] = (1, 2, 3, 5, 10, 20, 50, 100)
    tol: float = DEFAULT_TOL
    metrics: tuple[str, ...] = ()
    scorer: Callable[[FederatedData, np.ndarray, int], dict[str, float]] | None = None
    per_run_data: bool = False
    checks: Callable[[Sequence[dict[str, Any]]], list[dict[str, Any]]] | None = None

    def method(self, name: str) -> Method:
        """Return the method called ``name``.

        Parameters
        ----------
        name : str
            A method name of this experiment.

        Returns
        -------
        Method
            The definition.

        Raises
        ------
        ValueError
            If the experiment has no such method.
        """
        for m in self.methods:
            if m.name == name:
                return m
        raise ValueError(
            f"experiment {self.name!r} has no method {name!r}; "
            f"methods: {', '.join(m.name for m in self.methods)}"
        )

    def setting(self, label: str) -> Setting:
        """Return the setting labelled ``label``.

        Parameters
        ----------
        label : str
            A setting label of this experiment.

        Returns
        -------
        Setting
            The definition.

        Raises
        ------
        ValueError
            If the experiment has no such setting.
        """
        for s in self.settings:
            if s.label == label:
                return s
        raise ValueError(f"experiment {self.name!r} has no setting {label!r}")


#: Registry: experiment name -> definition.
EXPERIMENTS: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add an experiment to :data:`EXPERIMENTS`.

    Parameters
    ----------
    experiment : Experiment
        The definition; its name must be new.

    Returns
    -------
    Experiment
        The same object (so this can wrap a constructor call).

    Raises
    ------
    ValueError
        If the name is taken, or setting labels / method names repeat.
    """
    if experiment.name in EXPERIMENTS:
        raise ValueError(f"an experiment named {experiment.name!r} is already registered")
    labels = [s.label for s in experiment.settings]
    names = [m.name for m in experiment.methods]
    if len(set(labels)) != len(labels) or len(set(names)) != len(names):
        raise ValueError(f"experiment {experiment.name!r} repeats a setting label or method name")
    EXPERIMENTS[experiment.name] = experiment
    return experiment


# --------------------------------------------------------------------------------------------
# Methods: the one registry, kind -> runner
# --------------------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """Result of one method on one setting with one seed.

    Attributes
    ----------
    score : float
        The value of ``metric``.
    seconds : float
        Wall time of the run, scoring included (set by :func:`run_method`).
    rounds : int, optional
        FKM: aggregations performed.
    converged : bool, optional
        FKM: whether it stopped on ``tol`` before the round cap.
    by_round : dict, optional
        FKM: score of ``C_g`` after round ``r`` for the tracked rounds ``r <= R``. After an
        early stop the last ``C_g`` stands for the later rounds (it is a fixed point).
    scores : dict, optional
        Every metric of the experiment (multi-metric experiments).
    metric : str, default "ari-client-weighted"
        What ``score`` is: the result rows' metric when the experiment lists no ``metrics``
        (``"ari"`` for central k-means on the pooled data), else the experiment's first.
    """

    score: float
    seconds: float = 0.0
    rounds: int | None = None
    converged: bool | None = None
    by_round: dict[int, float] | None = None
    scores: dict[str, float] | None = None
    metric: str = "ari-client-weighted"


def client_weighted_ari(data: FederatedData, centroids: np.ndarray) -> float:
    """The paper's federated ARI of global centroids (Garst & Reinders, Sec. 4).

    Each client labels its points by the nearest global centroid and computes its own ARI;
    the result is ``sum_i n_i ARI_i / sum_i n_i``, through the additive evaluation statistics
    of :mod:`flwr_clustering.metrics`.

    Parameters
    ----------
    data : FederatedData
        Client arrays and labels.
    centroids : numpy.ndarray of shape (k, d)
        Global centroids.

    Returns
    -------
    float
        The sample-weighted mean of the per-client ARIs.
    """
    stats = [
        local_evaluation_stats(X_i, centroids, y_i, data.n_classes)
        for X_i, y_i in zip(data.clients, data.labels, strict=True)
    ]
    return float(aggregate_evaluation_stats(stats)["ari-client-weighted"])


@dataclass(frozen=True)
class MethodRun:
    """One run of one method: everything a :data:`Runner` gets.

    Attributes
    ----------
    experiment : Experiment
        Gives the metrics, the ``scorer`` and the tracked FKM rounds.
    method : Method
        What runs.
    data : FederatedData
        The setting's data (of this run's seed when the experiment has ``per_run_data``).
    k : int
        ``method.options["k"]`` if set, else the experiment's ``k``.
    seed : int
        The run's seed (the same for every method of a run).
    options : dict
        The method's options without ``"k"``: the runner's keyword arguments (a fresh copy).
    rounds : int
        FKM round cap ``R`` (``--rounds``).
    tol : float
        FKM early-stop tolerance (``< 0``: exactly ``R`` rounds).
    """

    experiment: Experiment
    method: Method
    data: FederatedData
    k: int
    seed: int
    options: dict[str, Any]
    rounds: int = DEFAULT_ROUNDS
    tol: float = DEFAULT_TOL

    def outcome(self, scores: dict[str, float]) -> RunOutcome:
        """Return the outcome of a run scored on every metric of the experiment.

        Parameters
        ----------
        scores : dict
            A value for every metric of the experiment.

        Returns
        -------
        RunOutcome
            ``score`` is the first metric's value.
        """
        metric = self.experiment.metrics[0]
        return RunOutcome(float(scores[metric]), scores=scores, metric=metric)

    def score(self, centroids: np.ndarray) -> RunOutcome:
        """Score output centroids: with the experiment's ``scorer``, else the client-weighted ARI.

        Parameters
        ----------
        centroids : numpy.ndarray of shape (k', d)
            The method's global centroids.

        Returns
        -------
        RunOutcome
            Every metric of the experiment, or :func:`client_weighted_ari`.
        """
        if self.experiment.scorer is None:
            return RunOutcome(client_weighted_ari(self.data, centroids))
        return self.outcome(self.experiment.scorer(self.data, centroids, self.k))


#: A method kind's runner: ``runner(run) -> RunOutcome``, one run, scored.
Runner = Callable[[MethodRun], RunOutcome]

#: The method registry: kind (:attr:`Method.kind`) -> runner. The library's centroid
#: algorithms are registered below; paper modules add theirs with :func:`register_runner`.
RUNNERS: dict[str, Runner] = {}


def register_runner(kind: str, runner: Runner) -> Runner:
    """Add a method kind to :data:`RUNNERS`.

    Parameters
    ----------
    kind : str
        New kind name (the :attr:`Method.kind` of the methods that run it).
    runner : Runner
        ``runner(run: MethodRun) -> RunOutcome``; :func:`self_scoring` makes one from a
        function that returns every metric.

    Returns
    -------
    Runner
        The same runner.

    Raises
    ------
    ValueError
        If the kind exists.
    """
    if kind in RUNNERS:
        raise ValueError(f"method kind {kind!r} exists")
    RUNNERS[kind] = runner
    return runner


def self_scoring(score: Callable[..., dict[str, float]]) -> Runner:
    """Make a runner of a function that runs a method and scores it itself.

    For algorithms whose scores need more than output centroids (e.g. the grouping of the
    clients' local clusters): the experiment's ``scorer`` is not used, and every metric of
    the experiment comes from the returned dict.

    Parameters
    ----------
    score : callable
        ``score(data, k, seed, **options) -> dict`` with a value for every metric of the
        experiments that use it; ``options`` are the method's options without ``"k"``.

    Returns
    -------
    Runner
        Raises ``ValueError`` when run for an experiment without ``metrics``.
    """

    def run(run: MethodRun) -> RunOutcome:
        if not run.experiment.metrics:
            raise ValueError(f"method kind {run.method.kind!r} needs an experiment with metrics")
        return run.outcome(score(run.data, run.k, run.seed, **run.options))

    return run


def _run_central(run: MethodRun) -> RunOutcome:
    """``central``: scikit-learn k-means on the pooled data (``n_init`` from the options).

    Without a ``scorer``, the ARI of its labels on the pooled data (``"ari"``).
    """
    km = KMeans(run.k, n_init=run.options.get("n_init", 10), random_state=run.seed)
    km.fit(run.data.X)
    if run.experiment.scorer is not None:
        return run.score(km.cluster_centers_)
    return RunOutcome(float(adjusted_rand_score(run.data.y, km.labels_)), metric="ari")


def _run_fkm(run: MethodRun) -> RunOutcome:
    """``fkm``: :func:`run_fkm` for at most ``rounds`` rounds with early stop at ``tol``.

    Without a ``scorer``, also the score after each of the experiment's tracked rounds.
    """
    data = run.data
    result = registry.get("fkm").loop(data.clients, run.k, seed=run.seed,
                                      max_rounds=run.rounds, tol=run.tol, **run.options)
    if run.experiment.scorer is not None:
        return run.score(result.centroids)
    by_round: dict[int, float] = {}
    cache: dict[int, float] = {}
    for r in run.experiment.track_rounds:
        if r > run.rounds:
            continue
        i = min(r, len(result.history)) - 1
        if i not in cache:
            cache[i] = client_weighted_ari(data, result.history[i])
        by_round[r] = cache[i]
    final = len(result.history) - 1
    score = cache[final] if final in cache else client_weighted_ari(data, result.centroids)
    return RunOutcome(score, rounds=len(result.history), converged=result.converged,
                      by_round=by_round)


def _loop_runner(name: str, *, min_rows_k: bool = False) -> Runner:
    """A runner of the pure loop that the registry declares for ``name``.

    The loop (``run_kfed``, ``run_feca``, ``run_mavg``, ``run_ffcm``) gets the clients, ``k``,
    the run's seed and the method's options; its centroids are scored. ``min_rows_k``: only
    clients with at least ``k`` points take part (M-Avg matches ``k`` centroids per client;
    the Flower MAvg drops a smaller client with a logged reason).
    """

    def run(r: MethodRun) -> RunOutcome:
        clients = r.data.clients
        if min_rows_k:
            clients = [X for X in clients if len(X) >= r.k]
        result = registry.get(name).loop(clients, r.k, seed=r.seed, **r.options)
        return r.score(getattr(result, "centroids", result))

    run.__doc__ = f"``{name}``: the registry's pure loop of {name!r}, scored."
    return run


for _kind, _runner in (("central", _run_central), ("fkm", _run_fkm),
                       ("kfed", _loop_runner("kfed")), ("feca", _loop_runner("feca")),
                       ("mavg", _loop_runner("mavg", min_rows_k=True)),
                       ("ffcm", _loop_runner("ffcm"))):
    register_runner(_kind, _runner)


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def run_method(
    experiment: Experiment,
    method: Method,
    data: FederatedData,
    seed: int,
    *,
    rounds: int = DEFAULT_ROUNDS,
    tol: float = DEFAULT_TOL,
) -> RunOutcome:
    """Run one method once with its kind's runner (:data:`RUNNERS`) and score it.

    Parameters
    ----------
    experiment : Experiment
        Gives ``k``, the metrics and the tracked rounds.
    method : Method
        What to run.
    data : FederatedData
        The setting's data.
    seed : int
        The run's seed (the same for every method of a run).
    rounds : int, default DEFAULT_ROUNDS
        FKM round cap ``R``.
    tol : float, default DEFAULT_TOL
        FKM early-stop tolerance (``< 0``: exactly ``R`` rounds).

    Returns
    -------
    RunOutcome
        Score and bookkeeping; ``seconds`` is the wall time of the runner.
    """
    start = time.perf_counter()
    options = dict(method.options)
    k = int(options.pop("k", experiment.k))
    run = MethodRun(experiment, method, data, k, seed, options, rounds=rounds, tol=tol)
    outcome = RUNNERS[method.kind](run)
    outcome.seconds = time.perf_counter() - start
    return outcome


@lru_cache(maxsize=32)
def _load(experiment_name: str, setting_label: str, seed: int | None = None) -> FederatedData:
    exp = EXPERIMENTS[experiment_name]
    params = exp.setting(setting_label).params
    return exp.load(**params) if seed is None else exp.load(seed=seed, **params)


def _run_task(task: tuple) -> tuple[int, dict[str, RunOutcome]]:
    """One seed of one setting, every selected method (picklable for worker processes)."""
    name, label, method_names, seed, rounds, tol = task
    exp = EXPERIMENTS[name]
    data = _load(name, label, seed if exp.per_run_data else None)
    out = {
        m: run_method(exp, exp.method(m), data, seed, rounds=rounds, tol=tol)
        for m in method_names
    }
    return seed, out


def _limit_threads() -> None:  # pragma: no cover - runs in worker processes
    threadpool_limits(1)


def run_experiment(
    name: str,
    *,
    runs: int = DEFAULT_RUNS,
    rounds: int = DEFAULT_ROUNDS,
    tol: float | None = None,
    seed: int = 0,
    methods: Sequence[str] | None = None,
    settings: Sequence[str] | None = None,
    jobs: int = 1,
    progress_every: float = 10.0,
) -> dict[tuple[str, str], list[RunOutcome]]:
    """Run an experiment: every selected method on every selected setting, ``runs`` times.

    Parameters
    ----------
    name : str
        A key of :data:`EXPERIMENTS`.
    runs : int, default DEFAULT_RUNS
        Runs per (method, setting); run ``r`` uses seed ``seed + r`` for every method.
    rounds : int, default DEFAULT_ROUNDS
        FKM round cap ``R``.
    tol : float, optional
        FKM early-stop tolerance (``< 0``: exactly ``R`` rounds); default: the
        experiment's :attr:`Experiment.tol`.
    seed : int, default 0
        Seed of run 0.
    methods : sequence of str, optional
        Subset of the experiment's methods (default: all).
    settings : sequence of str, optional
        Subset of the setting labels (default: all).
    jobs : int, default 1
        Worker processes; results do not depend on it. Every process (this one included,
        for the duration of the call) limits BLAS/OpenMP to one thread: the data sets are
        tiny, and multithreaded Lloyd iterations only spin-wait on a loaded machine (10x
        slower measured on two busy cores).
    progress_every : float, default 10.0
        Seconds between progress log lines within a setting.

    Returns
    -------
    dict
        ``(method name, setting label) -> [RunOutcome per run]``, runs in seed order.

    Raises
    ------
    ValueError
        On an unknown experiment, method or setting, or ``runs``/``rounds``/``jobs`` < 1.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; available: {', '.join(EXPERIMENTS)}")
    if runs < 1 or rounds < 1 or jobs < 1:
        raise ValueError(f"runs, rounds and jobs must be >= 1, got {runs}, {rounds}, {jobs}")
    exp = EXPERIMENTS[name]
    tol = exp.tol if tol is None else tol
    method_names = [exp.method(m).name for m in methods] if methods else [
        m.name for m in exp.methods
    ]
    labels = [exp.setting(s).label for s in settings] if settings else [
        s.label for s in exp.settings
    ]
    seeds = list(range(seed, seed + runs))
    results: dict[tuple[str, str], list[RunOutcome]] = {}
    pool = None
    limits = threadpool_limits(1)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(
            jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_limit_threads
        )
    try:
        for label in labels:
            tasks = [(name, label, tuple(method_names), s, rounds, tol) for s in seeds]
            done: dict[int, dict[str, RunOutcome]] = {}
            start = last = time.perf_counter()
            logger.info("%s %s: 0/%d runs", name, label, runs)
            outputs: Iterable = (
                pool.map(_run_task, tasks, chunksize=max(1, runs // (8 * jobs)))
                if pool is not None
                else map(_run_task, tasks)
            )
            for s, out in outputs:
                done[s] = out
                now = time.perf_counter()
                if now - last >= progress_every and len(done) < runs:
                    last = now
                    logger.info("%s %s: %d/%d runs (%.0f s)", name, label, len(done), runs,
                                now - start)
            logger.info("%s %s: %d/%d runs (%.1f s)", name, label, runs, runs,
                        time.perf_counter() - start)
            for m in method_names:
                results[(m, label)] = [done[s][m] for s in seeds]
    finally:
        if pool is not None:
            pool.shutdown()
        limits.restore_original_limits()
    return results


def _stat(values: np.ndarray, fn: Callable[[np.ndarray], Any]) -> float | None:
    return float(fn(values)) if values.size else None


def summarize(
    name: str,
    results: dict[tuple[str, str], list[RunOutcome]],
    *,
    rounds: int,
    tol: float,
    seed: int,
) -> list[dict[str, Any]]:
    """Turn run outcomes into result rows (the JSON output).

    Parameters
    ----------
    name : str
        The experiment.
    results : dict
        Output of :func:`run_experiment`.
    rounds, tol, seed
        The protocol, recorded in the FKM rows.

    Returns
    -------
    list of dict
        One row per (setting, method), in definition order, with the keys of
        :data:`ROW_KEYS` first, then: ``ours_median``, ``ours_min``, ``ours_max``,
        ``paper_std``, ``paper_median``, ``paper_note``, ``method_label``, ``options``,
        ``params``, ``seeds`` (first and last), ``seconds_mean``, ``tolerance``, ``scores``
        (every run); for FKM also ``rounds`` (the cap), ``tol``, ``rounds_mean``,
        ``converged_frac``, ``ours_by_round`` and ``paper_by_round``; with a
        ``frac_threshold``, ``frac_threshold``, ``ours_frac_below`` and
        ``paper_frac_below``. The standard deviation is over runs with ``ddof = 0``.
    """
    exp = EXPERIMENTS[name]
    rows = []
    for s in exp.settings:
        for m in exp.methods:
            outcomes = results.get((m.name, s.label))
            if outcomes is None:
                continue
            for metric in exp.metrics or (outcomes[0].metric,):
                if exp.metrics:
                    values = [o.scores[metric] for o in outcomes]
                    paper = exp.paper.get((m.name, s.label, metric))
                else:
                    values = [o.score for o in outcomes]
                    paper = exp.paper.get((m.name, s.label))
                rows.append(_row(name, exp, m, s, metric, outcomes,
                                 np.array(values, dtype=float), paper,
                                 rounds=rounds, tol=tol, seed=seed))
    return rows


def _row(
    name: str,
    exp: Experiment,
    m: Method,
    s: Setting,
    metric: str,
    outcomes: Sequence[RunOutcome],
    scores: np.ndarray,
    paper: PaperValue | None,
    *,
    rounds: int,
    tol: float,
    seed: int,
) -> dict[str, Any]:
    """One result row (see :func:`summarize`)."""
    row: dict[str, Any] = {
        "experiment": name,
        "method": m.name,
        "setting": s.label,
        "metric": metric,
        "ours_mean": _stat(scores, np.mean),
        "ours_std": _stat(scores, np.std),
        "paper": None if paper is None else paper.mean,
        "runs": len(outcomes),
        "ours_median": _stat(scores, np.median),
        "ours_min": _stat(scores, np.min),
        "ours_max": _stat(scores, np.max),
        "paper_std": None if paper is None else paper.std,
        "paper_median": None if paper is None else paper.median,
        "paper_note": "" if paper is None else paper.note,
        "method_label": m.label or m.name,
        "options": dict(m.options),
        "params": dict(s.params),
        "seeds": [seed, seed + len(outcomes) - 1],
        "seconds_mean": float(np.mean([o.seconds for o in outcomes])),
        "tolerance": m.tolerance,
    }
    if exp.frac_threshold is not None:
        row["frac_threshold"] = exp.frac_threshold
        row["ours_frac_below"] = float(np.mean(scores < exp.frac_threshold))
        row["paper_frac_below"] = None if paper is None else paper.frac_below
    if all(o.rounds is not None for o in outcomes):  # FKM
        by_round: dict[int, float] = {}
        for r in exp.track_rounds:
            vals = [o.by_round[r] for o in outcomes if o.by_round and r in o.by_round]
            if len(vals) == len(outcomes):
                by_round[r] = float(np.mean(vals))
        row.update(
            rounds=rounds,
            tol=tol,
            rounds_mean=float(np.mean([o.rounds for o in outcomes])),
            converged_frac=float(np.mean([bool(o.converged) for o in outcomes])),
            ours_by_round=by_round,
            paper_by_round=None if paper is None or paper.by_round is None
            else dict(paper.by_round),
        )
    row["scores"] = scores.tolist()
    return row


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------


def _by_round(row: dict[str, Any], key: str) -> dict[int, float]:
    """A row's ``ours_by_round`` / ``paper_by_round`` with int keys (JSON makes them str)."""
    return {int(r): v for r, v in (row.get(key) or {}).items()}


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _pm(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "–"
    return _fmt(mean) if std is None else f"{_fmt(mean)} ± {_fmt(std)}"


def write_markdown(
    path: str | Path, name: str, rows: Sequence[dict[str, Any]], meta: dict[str, Any]
) -> None:
    """Write the Markdown report: ours (mean ± std over runs) against the paper's mean.

    Parameters
    ----------
    path : path-like
        Output file.
    name : str
        The experiment.
    rows : sequence of dict
        Output of :func:`summarize`.
    meta : dict
        Protocol and environment: ``runs``, ``rounds``, ``tol``, ``seed``, ``seconds``,
        ``cpu_seconds``, ``jobs``, ``load`` (1-minute load average at start and end) and
        ``versions``.
    """
    exp = EXPERIMENTS[name]
    if exp.metrics:
        Path(path).write_text(_pivot_markdown(exp, rows, meta), encoding="utf-8")
        return
    frac = exp.frac_threshold
    lines = [
        f"# `{name}`: {exp.title}",
        "",
        f"Paper numbers: {exp.source}. Ours: {meta['runs']} runs per cell (seeds "
        f"{meta['seed']}..{meta['seed'] + meta['runs'] - 1}, run r uses the same seed for "
        f"every method), FKM at most R = {meta['rounds']} rounds"
        + (f" with early stop at matched centroid shift <= {meta['tol']:g}" if meta["tol"] >= 0
           else " (no early stop)")
        + f", K = {exp.k}.",
        "",
        f"Wall time {meta['seconds']:.0f} s, CPU time {meta['cpu_seconds']:.0f} s "
        f"({meta['jobs']} process{'es' if meta['jobs'] > 1 else ''}, one thread each; "
        f"1-min load average {_fmt(meta['load'][0], 1)} at start, {_fmt(meta['load'][1], 1)} "
        f"at end, on {os.cpu_count()} CPUs). {meta['versions']}.",
        "",
        "Δ = ours − paper; ⚠ marks |Δ| above the method's tolerance (central and FKM 0.02, "
        "k-FED 0.05). Standard deviations are over runs (ddof 0).",
        "",
    ]
    header = ["setting", "method", "metric", "ours mean ± std", "ours median",
              "paper mean ± std", "Δ"]
    if frac is not None:
        header += [f"runs < {frac:g}: ours / paper"]
    header += ["FKM rounds (mean)"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        paper = row["paper"]
        delta = None if paper is None or row["ours_mean"] is None else row["ours_mean"] - paper
        flag = " ⚠" if delta is not None and abs(delta) > row["tolerance"] + 1e-12 else ""
        paper_cell = _pm(paper, row.get("paper_std"))
        if row.get("paper_median") is not None:
            paper_cell += f" (median {_fmt(row['paper_median'])})"
        if row.get("paper_note"):
            paper_cell += f" [{row['paper_note']}]"
        cells = [
            row["setting"],
            row["method"],
            row["metric"],
            _pm(row["ours_mean"], row["ours_std"]),
            _fmt(row.get("ours_median")),
            paper_cell,
            "–" if delta is None else f"{delta:+.3f}{flag}",
        ]
        if frac is not None:
            theirs = row.get("paper_frac_below")
            cells.append(f"{row['ours_frac_below']:.1%} / "
                         + ("–" if theirs is None else f"{theirs:.1%}"))
        cells.append(_fmt(row.get("rounds_mean"), 1) if "rounds_mean" in row else "")
        lines.append("| " + " | ".join(cells) + " |")
    conv = [r for r in rows if r.get("ours_by_round")]
    if conv:
        rs = sorted({int(k) for r in conv for k in r["ours_by_round"]})
        lines += [
            "",
            "## FKM mean ARI by round: ours (paper)",
            "",
            "| setting | method | " + " | ".join(f"r={r}" for r in rs) + " |",
            "|---|---|" + "---|" * len(rs),
        ]
        for row in conv:
            paper_by, ours_by = _by_round(row, "paper_by_round"), _by_round(row, "ours_by_round")
            cells = []
            for r in rs:
                ours = ours_by.get(r)
                theirs = paper_by.get(r)
                cell = _fmt(ours)
                if theirs is not None:
                    cell += f" ({_fmt(theirs)})"
                cells.append(cell)
            lines.append(f"| {row['setting']} | {row['method']} | " + " | ".join(cells) + " |")
    lines += ["", "## Methods", ""]
    for m in exp.methods:
        if any(r["method"] == m.name for r in rows):
            lines.append(f"- `{m.name}`: {m.label}")
    if exp.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in exp.notes]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _pivot_markdown(exp: Experiment, rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Report of a multi-metric experiment: one methods x settings table per metric."""
    lines = [
        f"# `{exp.name}`: {exp.title}",
        "",
        f"Paper numbers: {exp.source}. Ours: {meta['runs']} runs per cell (seeds "
        f"{meta['seed']}..{meta['seed'] + meta['runs'] - 1}; run r uses the same seed for every "
        "method" + (" and draws a new client split" if exp.per_run_data else "") + ").",
        "",
        f"Wall time {meta['seconds']:.0f} s, CPU time {meta['cpu_seconds']:.0f} s "
        f"({meta['jobs']} process{'es' if meta['jobs'] > 1 else ''}, one thread each; "
        f"1-min load average {_fmt(meta['load'][0], 1)} at start, {_fmt(meta['load'][1], 1)} "
        f"at end, on {os.cpu_count()} CPUs). {meta['versions']}.",
        "",
        "Cells: ours mean ± std over runs (ddof 0), the paper's mean (± std where published) "
        "in brackets.",
    ]
    by_key = {(r["method"], r["setting"], r["metric"]): r for r in rows}
    settings = [s for s in exp.settings if any(r["setting"] == s.label for r in rows)]
    methods = [m for m in exp.methods if any(r["method"] == m.name for r in rows)]
    for metric in exp.metrics:
        if not any(r["metric"] == metric for r in rows):
            continue
        lines += ["", f"## {metric}", "",
                  "| method | " + " | ".join(s.label for s in settings) + " |",
                  "|---|" + "---|" * len(settings)]
        for m in methods:
            cells = []
            for s in settings:
                row = by_key.get((m.name, s.label, metric))
                if row is None:
                    cells.append("")
                    continue
                cell = _pm(row["ours_mean"], row["ours_std"])
                if row["paper"] is not None:
                    cell += f" ({_pm(row['paper'], row.get('paper_std'))})"
                cells.append(cell)
            lines.append(f"| {m.name} | " + " | ".join(cells) + " |")
    checks = meta.get("checks") or []
    if checks:
        lines += ["", "## The paper's claims on our numbers", ""]
        lines += [f"- {'✅' if c['holds'] else '❌'} {c['claim']}: {c['detail']}" for c in checks]
    lines += ["", "## Methods", ""]
    lines += [f"- `{m.name}`: {m.label}" for m in methods]
    if exp.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in exp.notes]
    return "\n".join(lines) + "\n"


def write_plots(path: str | Path, name: str, rows: Sequence[dict[str, Any]]) -> list[str]:
    """Box plots of the per-run scores, like the paper's figures, and FKM convergence.

    Writes ``path`` (one panel per setting panel, boxes per method and setting, the paper's
    means as red bars) and, when FKM rows carry means by round, ``<stem>-rounds.png``
    (ours solid, the paper's dashed).

    Parameters
    ----------
    path : path-like
        The box-plot PNG.
    name : str
        The experiment.
    rows : sequence of dict
        Output of :func:`summarize` (needs ``scores``).

    Returns
    -------
    list of str
        The written files.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    exp = EXPERIMENTS[name]
    metric = exp.metrics[0] if exp.metrics else "ARI"
    if exp.metrics:
        rows = [r for r in rows if r["metric"] == metric]
    by_key = {(r["method"], r["setting"]): r for r in rows}
    methods = [m for m in exp.methods if any(r["method"] == m.name for r in rows)]
    settings = [s for s in exp.settings if any(r["setting"] == s.label for r in rows)]
    panels = list(dict.fromkeys(s.panel for s in settings))
    colors = plt.get_cmap("tab10").colors
    per_panel = len(methods) * len(settings) / len(panels)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(max(8.0, (1.0 + 0.55 * per_panel) * len(panels) ** 0.8), 4.8),
        squeeze=False, sharey=True,
    )
    width = 0.8 / len(methods)
    for ax, panel in zip(axes[0], panels, strict=True):
        in_panel = [s for s in settings if s.panel == panel]
        for j, m in enumerate(methods):
            offset = (j - (len(methods) - 1) / 2) * width
            data, pos, paper_pos, paper_val = [], [], [], []
            for i, s in enumerate(in_panel):
                row = by_key.get((m.name, s.label))
                if row is None:
                    continue
                data.append(row["scores"])
                pos.append(i + offset)
                if row["paper"] is not None:
                    paper_pos.append(i + offset)
                    paper_val.append(row["paper"])
            if not data:
                continue
            bp = ax.boxplot(data, positions=pos, widths=width * 0.85, patch_artist=True,
                            manage_ticks=False, flierprops={"markersize": 2})
            for box in bp["boxes"]:
                box.set_facecolor(colors[j % len(colors)])
                box.set_alpha(0.7)
            for med in bp["medians"]:
                med.set_color("black")
            if paper_val:
                ax.scatter(paper_pos, paper_val, marker="_", s=300, color="red", zorder=5,
                           linewidths=2)
        ax.set_xticks(range(len(in_panel)), [s.group or s.label for s in in_panel])
        ax.set_xlim(-0.6, len(in_panel) - 0.4)
        ax.set_title(panel)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(metric)
    handles = [Patch(color=colors[j % len(colors)], alpha=0.7, label=m.name)
               for j, m in enumerate(methods)]
    handles.append(plt.Line2D([], [], color="red", marker="_", linestyle="", markersize=14,
                              markeredgewidth=2, label="paper mean"))
    ncol = min(len(handles), 6)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, fontsize=9)
    fig.suptitle(f"{name}: {exp.title}", fontsize=9)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(handles) / ncol), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written = [str(path)]

    conv = [r for r in rows if r.get("ours_by_round")]
    if conv:
        setting_of = {s.label: s for s in settings}
        conv_panels = list(dict.fromkeys(setting_of[r["setting"]].panel for r in conv))
        fig, axes = plt.subplots(1, len(conv_panels), figsize=(5.0 * len(conv_panels), 4.2),
                                 squeeze=False, sharey=True)
        for ax, panel in zip(axes[0], conv_panels, strict=True):
            lines = [r for r in conv if setting_of[r["setting"]].panel == panel]
            in_panel = list(dict.fromkeys(r["setting"] for r in lines))
            method_names = list(dict.fromkeys(r["method"] for r in lines))
            drawn = set()  # the paper's curve is drawn once per setting
            for i, row in enumerate(lines):
                # colour by setting when the panel has several, else by method
                idx = in_panel.index(row["setting"]) if len(in_panel) > 1 else i
                color = colors[idx % len(colors)]
                s = setting_of[row["setting"]]
                tag = f"{row['method']} {s.group or s.label}".strip()
                ours_by = _by_round(row, "ours_by_round")
                rs = sorted(ours_by)
                marker = "o^vd"[method_names.index(row["method"]) % 4]
                ax.plot(rs, [ours_by[r] for r in rs], f"{marker}-", color=color,
                        markersize=3, label=tag)
                paper_by = _by_round(row, "paper_by_round")
                prs = sorted(paper_by)
                if prs and row["setting"] not in drawn:
                    drawn.add(row["setting"])
                    ax.plot(prs, [paper_by[r] for r in prs], "s--",
                            color=color if len(in_panel) > 1 else "black", markersize=3,
                            alpha=0.7, label=f"paper {s.group or s.label}")
            ax.set_xscale("log")
            ax.set_xlabel("round")
            ax.set_title(panel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="lower right")
        axes[0][0].set_ylabel("mean ARI (client-weighted)")
        fig.suptitle(f"{name}: FKM by round, ours solid, paper dashed", fontsize=10)
        fig.tight_layout()
        conv_path = Path(path).with_name(Path(path).stem + "-rounds.png")
        fig.savefig(conv_path, dpi=110)
        plt.close(fig)
        written.append(str(conv_path))
    return written


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        return None


def _versions() -> str:
    import sklearn

    return (f"Python {platform.python_version()}, NumPy {np.__version__}, "
            f"scikit-learn {sklearn.__version__}")


def reproduce(
    name: str,
    out: str | Path = "results",
    *,
    runs: int = DEFAULT_RUNS,
    rounds: int = DEFAULT_ROUNDS,
    tol: float | None = None,
    seed: int = 0,
    methods: Sequence[str] | None = None,
    jobs: int = 1,
    plot: bool = True,
) -> dict[str, Any]:
    """Run an experiment and write ``<out>/<name>.json``, ``.md`` and the PNG plots.

    The Markdown file records the wall time, the CPU time and the 1-minute load average at
    start and end, since wall times on a shared machine mean little on their own.

    Parameters
    ----------
    name : str
        A key of :data:`EXPERIMENTS`.
    out : path-like, default "results"
        Output directory (created if missing).
    runs, rounds, tol, seed, methods, jobs
        As in :func:`run_experiment`.
    plot : bool, default True
        Whether to write the PNG files.

    Returns
    -------
    dict
        ``"rows"`` (the JSON rows), ``"files"`` (written paths), ``"seconds"`` and
        ``"checks"`` (the paper's claims evaluated on the rows, if the experiment has any).
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; available: {', '.join(EXPERIMENTS)}")
    tol = EXPERIMENTS[name].tol if tol is None else tol
    start, cpu_start, load_start = time.perf_counter(), _cpu_seconds(), _load_average()
    results = run_experiment(name, runs=runs, rounds=rounds, tol=tol, seed=seed,
                             methods=methods, jobs=jobs)
    rows = summarize(name, results, rounds=rounds, tol=tol, seed=seed)
    seconds = time.perf_counter() - start
    cpu_seconds = _cpu_seconds() - cpu_start
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(to_jsonable(rows), indent=1) + "\n", encoding="utf-8")
    meta = dict(runs=runs, rounds=rounds, tol=tol, seed=seed, seconds=seconds,
                cpu_seconds=cpu_seconds, jobs=jobs, load=(load_start, _load_average()),
                versions=_versions())
    exp = EXPERIMENTS[name]
    files = [str(json_path), str(md_path)]
    if exp.checks is not None:
        meta["checks"] = exp.checks(rows)
        checks_path = out_dir / f"{name}.checks.json"
        checks_path.write_text(json.dumps(to_jsonable(meta["checks"]), indent=1) + "\n",
                               encoding="utf-8")
        files.append(str(checks_path))
        for c in meta["checks"]:
            logger.info("%s %s: %s", "holds:" if c["holds"] else "FAILS:", c["claim"],
                        c["detail"])
    write_markdown(md_path, name, rows, meta)
    if plot:
        files += write_plots(out_dir / f"{name}.png", name, rows)
    return {"rows": rows, "files": files, "seconds": seconds, "checks": meta.get("checks", [])}

