"""Paper experiments: definitions, the runner, and the JSON / Markdown / PNG reports (layer 5).

One :class:`Experiment` per figure of a paper: which data and client split, which methods,
how many runs, and the paper's own numbers, copied as data (never computed). The registry
:data:`EXPERIMENTS` maps a name to its definition; a later paper adds its experiments by
calling :func:`register`. The runner uses only the pure loops of layer 1
(:func:`~flwr_clustering.algorithms.fkm.run_fkm`,
:func:`~flwr_clustering.algorithms.kfed.run_kfed`) and the data and metrics of layer 2, which
the Flower tests show equal to the Flower runs.

Garst & Reinders, "Federated K-means clustering" (Sec. 3)
--------------------------------------------------------
``garst-fig1b``
    Fig. 1(b), spec §5.1: base grid (ppc 50, noise 1), 5 clients, beta split, beta in
    {0.1, 1, 10}: central k-means, FKM, FKM as the paper's code ran it, k-FED untuned
    (``K_l = K_g = 16``).
``garst-noise``
    Figs 3(a-c) and 6, spec §5.2 and §5.3: the ppc = 50 rows of the noise sweep, beta in
    {0.1, 1, 10} x noise in {1.0, ..., 1.5}: central, FKM, FKM as the paper's code ran it,
    k-FED untuned; plus FKM's mean ARI by round (Fig. 3(d-f)).
``garst-clusterwise``
    Fig. 4(b), spec §4.2 and §5.4: the cluster-wise split (16/1/3/10/7 clusters per client):
    central, FKM with weighted and with unweighted server seeding, FKM as the paper's code
    ran it, k-FED with ``K_l = 14``; the median and the fraction of runs below 0.9 as well,
    since the paper's FKM result is bimodal.

Scoring (spec §4.4): FKM and k-FED get the sample-weighted mean of the per-client ARIs of
each client's nearest-global-centroid labels (``"ari-client-weighted"`` of
:func:`~flwr_clustering.metrics.aggregate_evaluation_stats`); central k-means gets
``KMeans(16, n_init=10, random_state=seed)``'s ARI on the pooled data (``"ari"``). Run ``r``
uses seed ``seed0 + r`` for every method.

Default protocol: the paper's, 200 runs per setting and R = 100 FKM rounds.

- ``garst-fig1b`` and ``garst-noise`` stop a FKM run early once the Hungarian-matched shift
  of the global centroids is <= ``tol = 1e-6``. The clients' uploads then repeat, and the
  re-seeded server k-means kept returning the same centroids: in 420 runs on these settings
  (noise 1.0, 1.2 and 1.5; ``fkm`` and ``fkm-paper-code``) the early-stopped final ARI was
  identical to that of exactly 100 rounds. Runs stop after 4 to 11 rounds on average, which
  cuts the cost of the noise sweep (18 settings x 200 runs x 4 methods) several-fold.
- ``garst-clusterwise`` runs exactly 100 rounds (``tol = -1``): there the paper-era
  unweighted server seeding can still jump to another optimum at a later re-seed (1 run in
  40 moved by 0.06).

``--tol`` overrides either (``tol < 0``: exactly R rounds).
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

from ..algorithms.feca import run_feca
from ..algorithms.ffcm import run_ffcm
from ..algorithms.fkm import run_fkm
from ..algorithms.kfed import run_kfed
from ..algorithms.mavg import run_mavg
from ..data.synthetic import garst_beta_split, garst_clusterwise
from ..metrics import aggregate_evaluation_stats, local_evaluation_stats
from ..reporting import to_jsonable

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
    "PaperValue",
    "RunOutcome",
    "Setting",
    "client_weighted_ari",
    "register",
    "register_kind",
    "reproduce",
    "run_experiment",
    "run_method",
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

#: Method kinds the runner knows.
KINDS = ("central", "fkm", "kfed", "feca", "mavg", "ffcm")

#: Method kinds added by later papers (:func:`register_kind`): kind ->
#: ``runner(data, k, seed, **options) -> dict`` of metric values (multi-metric experiments).
RUNNERS: dict[str, Callable[..., dict[str, float]]] = {}


def register_kind(kind: str, runner: Callable[..., dict[str, float]]) -> None:
    """Add a method kind whose runner scores a run itself.

    For algorithms whose scores need more than output centroids (e.g. the grouping of the
    clients' local clusters): :func:`run_method` calls ``runner(data, k, seed, **options)``
    instead of a centroid runner and the experiment's ``scorer``, and takes every metric of
    the experiment from the returned dict.

    Parameters
    ----------
    kind : str
        New kind name (not one of :data:`KINDS`, not registered yet).
    runner : callable
        ``runner(data, k, seed, **options) -> dict`` with a value for every metric of the
        experiments that use the kind; ``options`` are the method's options without ``"k"``.

    Raises
    ------
    ValueError
        If the kind exists.
    """
    if kind in KINDS or kind in RUNNERS:
        raise ValueError(f"method kind {kind!r} exists")
    RUNNERS[kind] = runner


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
    kind : {"central", "fkm", "kfed", "feca", "mavg", "ffcm"} or a key of RUNNERS
        Which runner: pooled scikit-learn k-means, or the pure loop of the algorithm
        (:func:`run_fkm`, :func:`run_kfed`, :func:`run_feca`, :func:`run_mavg`,
        :func:`run_ffcm`), or a kind added by :func:`register_kind`.
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
    """

    name: str
    kind: str
    label: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    tolerance: float = 0.02

    def __post_init__(self) -> None:
        if self.kind not in KINDS and self.kind not in RUNNERS:
            raise ValueError(f"method kind must be one of {KINDS + tuple(RUNNERS)}, got "
                             f"{self.kind!r}")

    @property
    def metric(self) -> str:
        """The reported metric: ``"ari"`` (pooled) or ``"ari-client-weighted"``."""
        return "ari" if self.kind == "central" else "ari-client-weighted"


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
        ``(method, setting, metric)``. When empty, the single metric of
        :attr:`Method.metric` (ARI).
    scorer : callable, optional
        ``scorer(data, centroids, k) -> dict`` of metric values (needed with ``metrics``,
        except for methods of a kind added by :func:`register_kind`, which score
        themselves).
    per_run_data : bool
        ``load`` takes a ``seed`` keyword and is called with each run's seed (a new random
        split per run, as the paper's repetitions).
    checks : callable, optional
        ``checks(rows) -> list of dict(claim, holds, detail)``: the paper's claims
        evaluated on our rows, written to the Markdown report and ``<name>.checks.json``.
    lower_is_better : bool
        For the plots' caption only.
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
# Running
# --------------------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """Result of one method on one setting with one seed.

    Attributes
    ----------
    score : float
        The method's metric (:attr:`Method.metric`).
    seconds : float
        Wall time of the run, scoring included.
    rounds : int, optional
        FKM: aggregations performed.
    converged : bool, optional
        FKM: whether it stopped on ``tol`` before the round cap.
    by_round : dict, optional
        FKM: score of ``C_g`` after round ``r`` for the tracked rounds ``r <= R``. After an
        early stop the last ``C_g`` stands for the later rounds (it is a fixed point).
    scores : dict, optional
        Every metric of the experiment's ``scorer`` (multi-metric experiments).
    """

    score: float
    seconds: float = 0.0
    rounds: int | None = None
    converged: bool | None = None
    by_round: dict[int, float] | None = None
    scores: dict[str, float] | None = None


def client_weighted_ari(data: FederatedData, centroids: np.ndarray) -> float:
    """The paper's federated ARI of global centroids (spec §4.4).

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


def run_method(
    experiment: Experiment,
    method: Method,
    data: FederatedData,
    seed: int,
    *,
    rounds: int = DEFAULT_ROUNDS,
    tol: float = DEFAULT_TOL,
) -> RunOutcome:
    """Run one method once and score it as the paper does.

    Parameters
    ----------
    experiment : Experiment
        Gives ``k`` and the tracked rounds.
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
        Score and bookkeeping.
    """
    start = time.perf_counter()
    opts = dict(method.options)
    k = int(opts.pop("k", experiment.k))
    if method.kind in RUNNERS:
        if not experiment.metrics:
            raise ValueError(f"method kind {method.kind!r} needs an experiment with metrics")
        scores = RUNNERS[method.kind](data, k, seed, **opts)
        return RunOutcome(float(scores[experiment.metrics[0]]), time.perf_counter() - start,
                          scores=scores)
    if experiment.scorer is not None:
        centroids = _centroids(method.kind, data, k, seed, opts, rounds=rounds)
        scores = experiment.scorer(data, centroids, k)
        return RunOutcome(float(scores[experiment.metrics[0]]), time.perf_counter() - start,
                          scores=scores)
    if method.kind == "central":
        km = KMeans(k, n_init=opts.get("n_init", 10), random_state=seed).fit(data.X)
        score = float(adjusted_rand_score(data.y, km.labels_))
        return RunOutcome(score, time.perf_counter() - start)
    if method.kind == "kfed":
        centres = run_kfed(data.clients, k, opts.pop("k_local", None), seed=seed, **opts)
        return RunOutcome(client_weighted_ari(data, centres), time.perf_counter() - start)
    result = run_fkm(data.clients, k, seed=seed, max_rounds=rounds, tol=tol, **opts)
    by_round: dict[int, float] = {}
    cache: dict[int, float] = {}
    for r in experiment.track_rounds:
        if r > rounds:
            continue
        i = min(r, len(result.history)) - 1
        if i not in cache:
            cache[i] = client_weighted_ari(data, result.history[i])
        by_round[r] = cache[i]
    final = len(result.history) - 1
    score = cache[final] if final in cache else client_weighted_ari(data, result.centroids)
    return RunOutcome(
        score,
        time.perf_counter() - start,
        rounds=len(result.history),
        converged=result.converged,
        by_round=by_round,
    )


def _centroids(
    kind: str, data: FederatedData, k: int, seed: int, opts: dict[str, Any], *, rounds: int
) -> np.ndarray:
    """The centroids of one method run, from its pure loop (multi-metric experiments)."""
    if kind == "central":
        km = KMeans(k, n_init=opts.get("n_init", 1), random_state=seed).fit(data.X)
        return km.cluster_centers_
    if kind == "kfed":
        return run_kfed(data.clients, k, opts.pop("k_local", None), seed=seed, **opts)
    if kind == "feca":
        return run_feca(data.clients, k, seed=seed, **opts).centroids
    if kind == "mavg":
        # M-Avg matches k centroids per client: a client with fewer points takes no part
        # (the Flower MAvg drops it with a logged reason).
        return run_mavg([X for X in data.clients if len(X) >= k], k, seed=seed, **opts)
    if kind == "ffcm":
        return run_ffcm(data.clients, k, seed=seed, **opts).centroids
    return run_fkm(data.clients, k, seed=seed, max_rounds=rounds, **opts).centroids


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
            for metric in exp.metrics or (m.metric,):
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
    if m.kind == "fkm":
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


# --------------------------------------------------------------------------------------------
# Garst & Reinders, "Federated K-means clustering" (Sec. 3)
# --------------------------------------------------------------------------------------------


def _split(X: np.ndarray, y: np.ndarray, client: np.ndarray) -> FederatedData:
    return FederatedData(X, y, client, n_classes=16)


def garst_beta_data(beta: float, ppc: int = 50, noise: float = 1.0) -> FederatedData:
    """The paper's grid data with the beta split over 5 clients (spec §4.1).

    Parameters
    ----------
    beta : float
        Spread of the split (0.1, 1 or 10).
    ppc : int, default 50
        Points per cluster.
    noise : float, default 1.0
        Cluster standard deviation.

    Returns
    -------
    FederatedData
        Exactly the authors' "abl" partition (``np.random.seed(42)`` stream).
    """
    return _split(*garst_beta_split(beta, ppc=ppc, noise=noise))


def garst_clusterwise_data(ppc: int = 50, noise: float = 1.0) -> FederatedData:
    """The cluster-wise data of Fig. 4 (16/1/3/10/7 clusters per client, spec §4.2).

    Parameters
    ----------
    ppc : int, default 50
        Points per cluster.
    noise : float, default 1.0
        Cluster standard deviation.

    Returns
    -------
    FederatedData
        Client sizes [473, 10, 34, 173, 98].
    """
    return _split(*garst_clusterwise(ppc=ppc, noise=noise))


_BETAS = (0.1, 1.0, 10.0)
_NOISES = (1.0, 1.1, 1.2, 1.3, 1.4, 1.5)
_ROUNDS = (1, 2, 3, 5, 10, 20, 50, 100)


def _beta_label(beta: float) -> str:
    return f"beta={beta:g}"


def _noise_label(beta: float, noise: float) -> str:
    return f"beta={beta:g},noise={noise:.1f}"


_CENTRAL = Method("central", "central",
                  "scikit-learn KMeans(16, n_init=10, random_state=seed) on the pooled data; "
                  "ARI on the pooled data", {"n_init": 10})
_FKM = Method("fkm", "fkm",
              "FKM, this library's defaults: private init (one Lloyd step before the first "
              "upload), weighted server seeding (scikit-learn >= 1.3), p = 2, L = 1, "
              "n_init = 10",
              {"privacy_threshold": 2, "local_iters": 1, "init": "private",
               "seeding": "weighted"})
_FKM_UNWEIGHTED = Method(
    "fkm-unweighted", "fkm",
    "FKM with private init and unweighted server seeding (scikit-learn < 1.3 semantics: "
    "unweighted k-means++ seeds, weighted Lloyd, best weighted inertia of 10)",
    {"privacy_threshold": 2, "local_iters": 1, "init": "private",
     "seeding": "unweighted"})
_FKM_PAPER = Method(
    "fkm-paper-code", "fkm",
    "FKM as the paper's code ran it: raw k-means++ seeds uploaded at init (init='paper'), "
    "unweighted server seeding, counts after a final E-step (recount)",
    {"privacy_threshold": 2, "local_iters": 1, "init": "paper", "seeding": "unweighted",
     "recount": True})


def _kfed(k_local: int) -> Method:
    return Method(
        "kfed", "kfed",
        f"k-FED (Dennis et al. 2021), K_l = {k_local}, one shot; p = 1 like the reference "
        "code the paper ran (no privacy filter: a client with n <= K_l uploads its rows)",
        {"k_local": k_local, "privacy_threshold": 1}, tolerance=0.05)


_GARST_COMMON_NOTES = (
    "Scoring as in the paper (spec §4.4): FKM and k-FED report the per-client ARI of each "
    "client's nearest-global-centroid labels averaged with weights n_i "
    "(`ari-client-weighted`); central k-means reports the ARI on the pooled data (`ari`). "
    "The two are different quantities: a client-weighted ARI can exceed the pooled one.",
    "Data: regenerated exactly (the authors' `np.random.seed(42)` stream); the beta split is "
    "the authors' 'abl' partition, which reproduces their stored client sizes.",
    "FKM init: our default (`init='private'`) runs one Lloyd step before the first upload, so "
    "only means of >= p points leave a client. The paper's code uploaded the raw k-means++ "
    "seeds (data rows) at init; `fkm-paper-code` rows run that, with the paper-era "
    "unweighted server seeding. The paper's FKM number, from the code it ran, is the paper "
    "column of every FKM variant.",
    "FKM rounds: at most R; with tol >= 0 a run stops once the Hungarian-matched shift of "
    "the global centroids is <= tol. The clients' uploads then repeat, and on the beta-split "
    "data the re-seeded server k-means kept returning the same centroids: in 420 runs "
    "(Fig. 1(b) settings, noise 1.2 and 1.5; `fkm` and `fkm-paper-code`) the early-stopped "
    "final ARI was identical to that of exactly 100 rounds (`--tol -1`). On the cluster-wise "
    "data the unweighted seeding of the paper's code can still jump to another optimum at a "
    "later re-seed (1 run in 40 moved by 0.06), so `garst-clusterwise` runs exactly R rounds "
    "by default.",
    "k-FED runs with p = 1, as the authors' k-FED code (no privacy filter); with our library "
    "default p = 2 its mean ARI on beta = 0.1 drops by about 0.02 (singleton local clusters "
    "withheld).",
)


def _fig1b_paper() -> dict[tuple[str, str], PaperValue]:
    fkm = {0.1: (0.949, 0.009, 0.950), 1.0: (0.958, 0.003, None), 10.0: (0.957, 0.008, None)}
    kfed = {0.1: (0.643, 0.078), 1.0: (0.735, 0.058), 10.0: (0.841, 0.056)}
    # Same-partition k-FED (the noise sweep's noise 1.0 column, spec §5.2).
    kfed_same = {0.1: 0.690, 1.0: 0.729, 10.0: 0.852}
    paper: dict[tuple[str, str], PaperValue] = {}
    for beta in _BETAS:
        label = _beta_label(beta)
        conv = dict(zip(_ROUNDS, _CONVERGENCE[(beta, 1.0)], strict=True))
        mean, std, median = fkm[beta]
        for m in ("fkm", "fkm-unweighted", "fkm-paper-code"):
            paper[(m, label)] = PaperValue(mean, std, median, by_round=conv)
        paper[("kfed", label)] = PaperValue(
            *kfed[beta],
            note=f"other split; same split: {kfed_same[beta]:.3f}",
        )
        paper[("central", label)] = PaperValue(0.955, 0.001)
    return paper


#: Spec §5.3: FKM mean ARI by round (r = 1, 2, 3, 5, 10, 20, 50, 100), ppc 50.
_CONVERGENCE: dict[tuple[float, float], tuple[float, ...]] = {
    (0.1, 1.0): (0.950, 0.953, 0.952, 0.952, 0.952, 0.951, 0.950, 0.949),
    (0.1, 1.2): (0.845, 0.870, 0.876, 0.878, 0.880, 0.880, 0.879, 0.880),
    (0.1, 1.5): (0.610, 0.645, 0.662, 0.679, 0.689, 0.693, 0.696, 0.697),
    (1.0, 1.0): (0.946, 0.955, 0.957, 0.958, 0.958, 0.958, 0.958, 0.958),
    (1.0, 1.2): (0.840, 0.871, 0.879, 0.884, 0.886, 0.886, 0.886, 0.886),
    (1.0, 1.5): (0.602, 0.635, 0.655, 0.678, 0.697, 0.705, 0.706, 0.707),
    (10.0, 1.0): (0.940, 0.956, 0.957, 0.957, 0.957, 0.957, 0.957, 0.957),
    (10.0, 1.2): (0.828, 0.870, 0.881, 0.886, 0.887, 0.887, 0.887, 0.887),
    (10.0, 1.5): (0.615, 0.651, 0.670, 0.689, 0.703, 0.707, 0.709, 0.709),
}
#: Spec §5.3, other noise levels at beta = 0.1: round 1 and round 100 only.
_CONVERGENCE_ENDS: dict[tuple[float, float], dict[int, float]] = {
    (0.1, 1.1): {1: 0.907, 100: 0.926},
    (0.1, 1.3): {1: 0.769, 100: 0.834},
    (0.1, 1.4): {1: 0.688, 100: 0.777},
}

#: Spec §5.2, ppc 50 rows: (central, FKM, k-FED) per beta, for noise 1.0 .. 1.5.
_NOISE_TABLE: dict[float, tuple[tuple[float, float, float], ...]] = {
    0.1: ((0.955, 0.949, 0.690), (0.924, 0.926, 0.640), (0.888, 0.880, 0.598),
          (0.840, 0.834, 0.542), (0.785, 0.777, 0.480), (0.725, 0.697, 0.432)),
    1.0: ((0.955, 0.958, 0.729), (0.924, 0.922, 0.703), (0.888, 0.886, 0.650),
          (0.840, 0.844, 0.613), (0.785, 0.786, 0.568), (0.725, 0.707, 0.520)),
    10.0: ((0.955, 0.957, 0.852), (0.924, 0.927, 0.819), (0.888, 0.887, 0.775),
           (0.840, 0.840, 0.729), (0.785, 0.768, 0.680), (0.725, 0.709, 0.607)),
}
#: Spec §5.2: FKM std at beta = 0.1, ppc 50, noise 1.0 .. 1.5.
_NOISE_FKM_STD_B01 = (0.009, 0.002, 0.018, 0.019, 0.031, 0.016)


def _noise_paper() -> dict[tuple[str, str], PaperValue]:
    paper: dict[tuple[str, str], PaperValue] = {}
    for beta, cells in _NOISE_TABLE.items():
        for i, (noise, (central, fkm, kfed)) in enumerate(zip(_NOISES, cells, strict=True)):
            label = _noise_label(beta, noise)
            if (beta, noise) in _CONVERGENCE:
                conv = dict(zip(_ROUNDS, _CONVERGENCE[(beta, noise)], strict=True))
            else:
                conv = _CONVERGENCE_ENDS.get((beta, noise))
            std = _NOISE_FKM_STD_B01[i] if beta == 0.1 else None
            paper[("central", label)] = PaperValue(central)
            for m in ("fkm", "fkm-paper-code"):
                paper[(m, label)] = PaperValue(fkm, std, by_round=conv)
            paper[("kfed", label)] = PaperValue(kfed)
    return paper


def _clusterwise_paper() -> dict[tuple[str, str], PaperValue]:
    fkm = PaperValue(0.902, 0.053, 0.949, frac_below=0.465,
                     by_round={1: 0.856, 2: 0.886, 5: 0.898, 10: 0.901, 100: 0.902})
    return {
        ("central", "cluster-wise"): PaperValue(0.952, 0.001, 0.952),
        ("fkm", "cluster-wise"): fkm,
        ("fkm-unweighted", "cluster-wise"): fkm,
        ("fkm-paper-code", "cluster-wise"): fkm,
        ("kfed", "cluster-wise"): PaperValue(0.863, 0.060, 0.866),
    }


register(Experiment(
    name="garst-fig1b",
    title="Garst & Reinders Fig. 1(b): grid data ppc 50, noise 1, 5 clients, beta split",
    source="Fig. 1(b), re-derived from the authors' result arrays (200 runs, FKM R = 100)",
    k=16,
    load=garst_beta_data,
    settings=tuple(Setting(_beta_label(b), {"beta": b, "ppc": 50, "noise": 1.0},
                           group=f"β={b:g}") for b in _BETAS),
    methods=(_CENTRAL, _FKM, _FKM_PAPER, _kfed(16)),
    paper=_fig1b_paper(),
    notes=_GARST_COMMON_NOTES + (
        "Paper's central and k-FED boxes in Fig. 1(b) come from another random split of the "
        "same 800 points (the 'regular' files, spec §4.1); central does not depend on the "
        "split, k-FED does. The k-FED numbers of the paper on *our* split are the noise-1.0 "
        "column of the noise sweep: 0.690 / 0.729 / 0.852.",
        "FKM by round: the paper's row is spec §5.3 (noise 1.0), the same result arrays as "
        "the Fig. 1(b) FKM boxes.",
    ),
))

register(Experiment(
    name="garst-noise",
    title="Garst & Reinders Figs 3 and 6: noise sweep, ppc 50, 5 clients, beta split",
    source=("Figs 3(a-c) and 6 (means, ppc 50 rows) and 3(d-f) (FKM by round), re-derived "
            "from the authors' result arrays; 200 runs, R = 100"),
    k=16,
    load=garst_beta_data,
    settings=tuple(
        Setting(_noise_label(b, n), {"beta": b, "ppc": 50, "noise": n},
                panel=f"β={b:g}", group=f"{n:.1f}")
        for b in _BETAS for n in _NOISES
    ),
    methods=(_CENTRAL, _FKM, _FKM_PAPER, _kfed(16)),
    paper=_noise_paper(),
    notes=_GARST_COMMON_NOTES + (
        "At high noise our default FKM (`fkm`) scores 0.01-0.02 above the paper while "
        "`fkm-paper-code` matches it, round by round from r = 1: the difference is the "
        "initial upload. Means after one local Lloyd step give the server a better first "
        "C_g than raw k-means++ seeds (the paper's code), and FKM keeps that advantage "
        "(spec §5.6 found init irrelevant at noise 1 only, where both agree).",
        "The paper gives FKM standard deviations for beta = 0.1 only; central's is <= 0.006 "
        "and k-FED's 0.04-0.09 throughout (spec §5.2).",
        "Box-plot x axis: noise (cluster standard deviation); one panel per beta.",
    ),
))

register(Experiment(
    name="garst-clusterwise",
    title="Garst & Reinders Fig. 4(b): cluster-wise split, 16/1/3/10/7 clusters per client",
    source="Fig. 4(b), re-derived from the authors' result arrays (200 runs, FKM R = 100)",
    k=16,
    load=garst_clusterwise_data,
    settings=(Setting("cluster-wise", {"ppc": 50, "noise": 1.0}, group="cluster-wise"),),
    methods=(_CENTRAL, _FKM, _FKM_UNWEIGHTED, _FKM_PAPER, _kfed(14)),
    paper=_clusterwise_paper(),
    frac_threshold=0.9,
    tol=-1.0,
    notes=_GARST_COMMON_NOTES + (
        "The paper's FKM result is bimodal (53.5% of runs >= 0.94, 46.5% < 0.87), hence the "
        "median and the fraction of runs below 0.9. The paper blames initialisation; spec "
        "§2.5 item 5 blames the unweighted server seeding of scikit-learn < 1.3. The three FKM "
        "rows separate the two: in the 200-run default, weighted seeding (`fkm`) never falls "
        "below 0.9, unweighted seeding after the private init (`fkm-unweighted`) does in about "
        "one run in ten, and only the paper's code path, raw-seed init *and* unweighted "
        "seeding (`fkm-paper-code`), gives the paper's bimodal split, mean, median and "
        "by-round curve.",
        "Client 1 holds 10 points of one cluster: FKM seeds 10 singletons and never uploads "
        "(p = 2); k-FED (K_l = 14 >= 10, p = 1) uploads its 10 raw points, as the reference "
        "code does.",
        "k-FED uses the paper's informed K_l = 14 (spec §3.2).",
    ),
))


# Registers the experiments of Xu et al., Maritan & Schenato, Armacki et al. and Zhang et al.;
# imported last, as they use this module.
from . import (  # noqa: E402, F401
    deepfeca_experiments,
    dgc_experiments,
    feca_experiments,
    kdc_experiments,
    masked_experiments,
)
