"""Algorithm declarations: :class:`AlgorithmSpec`, :class:`Phase` and :func:`register`.

Each strategy module declares its algorithm here, with one :func:`register` call at its
end. This module holds the declarations and imports no strategy: discovering the built-in
algorithms (importing every strategy module) belongs to :mod:`flwr_clustering.registry`,
which whoever needs the full list (the App's run config, the estimator, the docs) uses.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .options import Options

__all__ = ["COMMON_PROTOCOL", "EVALUATION_METRICS", "EVALUATION_STATS", "AlgorithmSpec", "Phase",
           "register"]

#: The Flower message types a :class:`Phase` may use.
MESSAGE_TYPES = ("train", "query", "evaluate")


@dataclass(frozen=True)
class Phase:
    """One message of an algorithm's protocol and the client's reply (for the docs).

    Attributes
    ----------
    name : str
        The phase: the value of ``config["phase"]`` (the evaluation messages of the base
        strategy carry no phase; their entries are named ``evaluate`` and ``final``).
    message_type : {"train", "query", "evaluate"}
        The Flower message type (``QUERY`` for phases that are not training).
    rounds : str
        When it is sent, e.g. ``"round 0"``, ``"every round"``.
    sends : tuple of str
        The arrays of the message's ``"arrays"`` record, in order, with their shapes.
    config : tuple of str
        Message-config keys beyond the options' keys and the common ``seed``, ``phase``
        and ``evaluate``, described.
    reply_arrays : tuple of str
        The arrays of the reply's ``"arrays"`` record, in order, with their shapes.
    reply_metrics : tuple of str
        Scalars of the reply's ``"metrics"`` record beyond ``num-examples`` and
        ``client-id``.
    reply_stats : tuple of str
        Arrays of the reply's ``"stats"`` record.
    notes : str
        Anything else a client author needs (conditions, privacy, refusals).
    """

    name: str
    message_type: str
    rounds: str
    sends: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    reply_arrays: tuple[str, ...] = ()
    reply_metrics: tuple[str, ...] = ()
    reply_stats: tuple[str, ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
        """Check the message type and that the list fields are tuples of strings."""
        if self.message_type not in MESSAGE_TYPES:
            raise ValueError(f"phase {self.name!r}: message_type must be one of "
                             f"{list(MESSAGE_TYPES)}, got {self.message_type!r}")
        for name in ("sends", "config", "reply_arrays", "reply_metrics", "reply_stats"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"phase {self.name!r}: {name} must be a tuple of strings")
            object.__setattr__(self, name, tuple(value))


#: What :func:`flwr_clustering.evaluation.local_evaluation_stats` puts in the reply's metrics.
EVALUATION_METRICS = (
    "`sse` float: sum of squared distances to the nearest centroid",
    "`silhouette-sum` float: sum of the simplified silhouette values",
    "`ari-local` float: ARI of the local labels (only with ground-truth labels)",
    "`sst-local` float: sum of squares of the local rows about their own mean (for the "
    "pooled total sum of squares of the diagnostics)",
)
#: ... and in its ``stats`` record.
EVALUATION_STATS = (
    "`cluster-counts` (k,) int64: rows nearest to each centroid",
    "`contingency` (k, n_classes) int64: clusters x true classes (only with labels)",
    "`sum-x` (d,) float64: sum of the local rows (with `sst-local`, the pooled total sum "
    "of squares, exactly)",
    "`cluster-residuals` (k, d) float64: per cluster, the sum of (row - centroid) over its "
    "rows (the Lloyd-step check); NaN rows for clusters under the privacy threshold (and "
    "the smallest other one when those hold fewer than privacy-threshold rows together)",
)

#: The messages every algorithm shares (unless its own protocol lists a variant).
COMMON_PROTOCOL: tuple[Phase, ...] = (
    Phase(
        "data-source", "query", "round 0, once, before round 1 (the App's ServerApp); "
        "DGC also before the first round of a resumed run",
        sends=("none",),
        config=("plain runs that declare `feature-columns` (no secure aggregation, DP nor "
                "`categorical-columns`; `fraction` 1): `moments-transform` str, the "
                "declared features (JSON, as `feature-moments`' `feature-transform`), "
                "`scaling` str and `privacy-threshold` int, as `feature-moments` sends",),
        reply_arrays=("none (the reply has no `arrays` record)",),
        reply_stats=("with `moments-transform`: `feature-moments`' statistics, when the "
                     "site's own columns make the declared features (else none)",),
        reply_metrics=(
            "`data-local` int: 1 rows read from a local file (`data-path`), 0 a partition "
            "of a built-in dataset, -1 not said (a client without `data_source`)",
            "`partition-id`, `num-partitions` int: the built-in partition (only then)",
            "`num-features` int: features per row",
            "`data-hash` int: first 8 bytes of sha256 over the float64 rows, "
            "non-negative (below 2**63)",
            "`allow-raw-rows` int: 1 if the node lets raw-row steps send its rows (node "
            "config `allow-raw-rows`; a node reading `data-path` says 0 by default); the App "
            "stops before round 1 when a raw-row setting meets a 0",
        ),
        notes="Answered by the library (`clients.phases`) for every client, without the "
              "algorithm's code; `num-examples` is the row count. The server refuses a run "
              "config that names a built-in dataset while nodes read local files (and "
              "`dataset='local'` while nodes do not), and computes the pooled and "
              "centralized side results only when every client's rows are the server's "
              "partition. A fingerprint, not the rows: it only lets the server check data "
              "it already holds. A resumed DGC run reads only the `client-id` of the "
              "replies: which node holds which client of its graph now "
              "(`ClusteringStrategy.identify_clients`), since the nodes may have come back "
              "under new node ids. The reply also carries a `columns` config record: "
              "`names`, `kinds` (numeric, integer, text, datetime), `unique` (1 where an "
              "integer or text column differs on every row), `rows` and, when the config "
              "asks (`magnitudes`: a secure scaling; with `datetime-columns`, a JSON list, "
              "the declared date columns, whose magnitude is their seconds'), `magnitude` "
              "(per column the power of two above its largest |value|): the server agrees "
              "on the federation's features from them (`data.schema.agree_schema`). With "
              "`moments-transform` the server sends no `feature-moments` exchange when "
              "the features it agrees are those and every node sent the statistics "
              "(`strategies.features.moments_with_columns`; the ledger's phase "
              "`data-source+feature-moments`); else it sends it."),
    Phase(
        "categories", "query", "round 0, with `categorical-columns`, after `data-source`",
        sends=("none",),
        config=("`categorical-columns` str: the declared columns, a JSON list",
                "`privacy-threshold` int"),
        reply_arrays=("none",),
        notes="Answered by the library. The reply's `columns` config record holds "
              "`categories`: a JSON object {column: {value: count}} of the site's values; a "
              "value held by fewer than `privacy-threshold` rows of the site is counted "
              "only under `other`. The server keeps the values with at least "
              "`privacy-threshold` rows in the federation, plus `other` "
              "(`data.schema.agree_categories`). The record's `continuous` (a JSON list) "
              "names the declared columns the site finds continuous (more than 50 distinct "
              "values over more than half its rows; their counts are not sent): the server "
              "refuses the run naming them and the site. Refused under secure aggregation."),
    Phase(
        "feature-moments", "query", "round 0, before round 1, when the run agrees on its "
        "features (a `scaling`, the App's default `standard`, or named columns), unless "
        "its statistics came in the `data-source` replies",
        sends=("none",),
        config=("`feature-transform` str: the agreed features (JSON), which every later "
                "message carries too, scaled once agreed",
                "`scaling` str: standard, minmax or none",
                "`privacy-threshold` int: fewer rows withhold the reply",
                "`moment-exponents` str, secure only: JSON list of per-feature powers of two "
                "the values are divided by", "`moments-secure` bool, secure only"),
        reply_arrays=("secure only: `count`, `sum`, `sumsq` (d,), `rows` (2,) float64 "
                      "(summed by SecAgg+)",),
        reply_stats=("`moment-count`, `moment-sum`, `moment-sumsq` (d,) float64: observed "
                     "values per feature, their sum and sum of squares (with "
                     "`missing='drop'`: of the complete rows)",
                     "`moment-rows` (2,) float64: the rows as read and the rows with a "
                     "missing cell",
                     "`moment-min`, `moment-max` (d,) float64: only with `scaling='minmax'`"),
        notes="Answered by the library (`clients.statistics.feature_moments_arrays`) on the rows "
              "in the agreed features. The server derives the scaling "
              "(`data.schema.scaling_from_moments`); with `none` it only warns when the "
              "spreads differ by more than 10x."),
    Phase(
        "unit-check", "train", "round 0, after `feature-moments`, under secure aggregation "
        "with `scaling='standard'` and `unit-check` not `off`",
        sends=("none",),
        config=("`feature-transform` str: the federation's features with their mean "
                "(`center`) and standard deviation (`scale`)",),
        reply_arrays=("`flags` (d,) float64: 1 where the site's feature looks recorded in "
                      "other units than the federation's, `powers` (d,) float64: that "
                      "power of ten (summed by SecAgg+)",),
        notes="Answered by the library (`data.schema.site_unit_powers`) on the site's rows "
              "in original units. The server learns only how many sites flagged each "
              "feature and the sum of their powers; a flagged site's own log names it."),
    Phase(
        "evaluate", "evaluate", "once, after the last round (strategy option `evaluate`)",
        sends=("`centroids` (k, d) float64: the final global model",),
        config=("no `phase` and no `seed`: what the caller passed as `evaluate_config`, "
                "and `final`, `evaluate`, `profile`",
                "`privacy-threshold` int: the run's minimum count; a client with a "
                "non-empty cluster of fewer rows sends no residual sum",
                "`n-classes` int, optional: width of the contingency table (clients "
                "zero-pad otherwise)"),
        reply_arrays=("none (the reply has no `arrays` record)",),
        reply_metrics=("`loss` float: `sse / n`", *EVALUATION_METRICS),
        reply_stats=EVALUATION_STATS,
        notes="Counts and sums only, never a row: the server sums them into the exact "
              "global SSE, ARI, NMI and purity (`aggregate_evaluation_stats`)."),
    Phase(
        "final", "evaluate", "once, at the end of the run",
        sends=("the final model: the same arrays as the algorithm's evaluation message",),
        config=("`final` bool: true", "`evaluate` bool: whether to reply with statistics",
                "`split-scatter` bool: also reply with the split check's first sums "
                "(see `split-scatter`)",
                "`privacy-threshold` int: the run's minimum count (as in `evaluate`)"),
        reply_arrays=("none",),
        reply_metrics=("with `evaluate` true: as the evaluation message; else only "
                       "`num-examples` and `client-id`",
                       "with `split-scatter`: `split-withheld` int, the phase's `withheld`"),
        reply_stats=("with `evaluate` true: as the evaluation message",
                     "with `split-scatter`: `split-counts`, `split-sums`, `split-scatter` "
                     "as that phase's reply"),
        notes="Delivers the final model to every client; the client labels its rows with "
              "it and keeps the per-row labels locally (they are not sent). When the "
              "split check cannot change the model (no `refine-rounds`, not under secure "
              "aggregation, an algorithm whose final message is its centroids) its first "
              "sums ride in this message: one exchange instead of two, the same sums from "
              "the same nodes (the ledger's phase `evaluate+split-scatter`)."),
    Phase(
        "split-scatter", "query", "after the last round (`split-check`, on by default): in "
        "the `final` message when the check cannot change the model, else before the "
        "final evaluation (with `refine-rounds` also after each refinement stage); TRAIN "
        "through SecAgg+ under secure aggregation",
        sends=("`centroids` (k, d) float64: the model",),
        config=("`privacy-threshold` int: a client with a cluster of fewer rows sends "
                "zeros only (0 under secure aggregation)",),
        reply_arrays=("secure only: the statistics below, in order (summed by SecAgg+)",),
        reply_metrics=("`withheld` int: 1 when the reply is zeros under the privacy "
                       "threshold",),
        reply_stats=("`split-counts` (k,) float64: rows nearest to each centre",
                     "`split-sums` (k, d) float64: their sum",
                     "`split-scatter` (k, d, d) float64: the sum of their outer products"),
        notes="Answered by the library (`clients.statistics.split_check_arrays`) on the client's "
              "complete rows. From the totals the server gets each cluster's mean, "
              "covariance, main axis and SSE (`algorithms.cluster_split.main_axes`, "
              "`scatter_sse`). Refused by a node with `dp-max-epsilon`; not sent in a DP "
              "run."),
    Phase(
        "split-histograms", "query", "right after `split-scatter`",
        sends=("`centroids` (k, d) float64", "`means` (k, d) float64: each cluster's mean",
               "`axes` (k, d) float64: each cluster's main axis (unit; zero: none)",
               "`edges` (k, 25) float64: 24 bins along the axis"),
        config=("`privacy-threshold` int: as `split-scatter`",),
        reply_arrays=("secure only: `split-histograms`",),
        reply_metrics=("`withheld` int: as `split-scatter`",),
        reply_stats=("`split-histograms` (k, 24) float64: per cluster the rows in each bin "
                     "of the projection on its axis",),
        notes="Answered by the library. A cluster whose summed histogram has two modes "
              "with a valley between them is reported (`algorithms.cluster_split.valleys`): "
              "`diagnostics.split-clusters` and a warning naming `refine-rounds`."),
    Phase(
        "refine", "query", "with `refine-rounds` > 0: after the last round, before the "
        "split check's exchanges, at most `refine-rounds` times per refinement stage",
        sends=("`centroids` (k, d) float64: the model to refine",),
        config=("`privacy-threshold` int: a client with a cluster of fewer rows sends "
                "zeros only (0 under secure aggregation)",),
        reply_arrays=("secure only: the statistics below, in order",),
        reply_metrics=("`withheld` int: as `split-scatter`",),
        reply_stats=("`refine-sums` (k, d) float64: per cluster the sum of its rows",
                     "`refine-counts` (k,) float64: its rows",
                     "`refine-sse` (1,) float64: the SSE of the centroids sent"),
        notes="Answered by the library: one federated Lloyd step "
              "(`algorithms.fkm.lloyd_from_totals`); the stage ends at a fixed point."),
    Phase(
        "search", "train", "every round of a search over candidate models (`k='auto'`, or "
        "FKM's `n-init` > 1): the algorithms whose capabilities allow it",
        sends=("every active candidate's arrays of its own train message, in order",),
        config=("`candidates` str: JSON, one entry per active candidate: `config` (its own "
                "train config: `phase`, its options with its `k`, its `seed`) and "
                "`arrays` (how many of the message's arrays are its)",
                "`candidates-strict` bool: under secure aggregation (a client that cannot "
                "answer one candidate fails the whole exchange)"),
        reply_arrays=("`sizes` (c,) int64: the number of arrays answering each candidate "
                      "(-1: it failed)",
                      "then each candidate's reply arrays, as its algorithm's phase"),
        reply_metrics=("`raw-rows` int: summed over the candidates",
                       "`candidate-<i>-<key>`: candidate i's other metrics"),
        notes="Answered by the library (`clients.candidates.fit_candidates`): each "
              "candidate goes to the client's own `fit` as a message of its own. A "
              "candidate's failure (its reason in the reply's `candidate-errors` config "
              "record) leaves the client out of that candidate only. Under secure "
              "aggregation the reply is summed by SecAgg+ as the algorithm's secure phase."),
    Phase(
        "k-moments", "query", "after a search's last round, before the split check; TRAIN "
        "through SecAgg+ under secure aggregation",
        sends=("every scored candidate's `centroids` (k_c, d) float64, in order",),
        config=("`candidate-count` int: the candidates",
                "`privacy-threshold` int: a cluster of fewer rows at the client is withheld "
                "(0 under secure aggregation)"),
        reply_arrays=("per candidate: `counts` (k_c,), `sums` (k_c, d), `sse` (k_c,): "
                      "squared distances to the centre, `silhouette` (k_c,): simplified "
                      "silhouette values, `withheld` (1,): rows of withheld clusters; "
                      "all float64, every row to its nearest centre",),
        notes="Answered by the library (`clients.candidates.score_arrays`, "
              "`algorithms.choose_k.client_moments`); the server sums the replies (or "
              "receives their secure sum) and gets each cluster's mean. A plain reply "
              "with a cluster of fewer than privacy-threshold rows, counts above its rows, "
              "a wrong shape or a non-finite value is dropped with the reason "
              "(`strategies.choose_k.CandidateSearch._parse_scores`)."),
    Phase(
        "k-spreads", "query", "right after `k-moments`",
        sends=("every scored candidate's `centroids`, then every candidate's clusters' "
               "`means` (k_c, d) float64",),
        config=("`candidate-count` int", "`privacy-threshold` int: as `k-moments`"),
        reply_arrays=("per candidate `spreads` (k_c,) float64: the sum of the Euclidean "
                      "distances of each cluster's rows to its mean",),
        notes="Answered by the library (`algorithms.choose_k.client_spreads`). With "
              "`k-moments` the totals give every candidate's SSE, simplified silhouette, "
              "Calinski-Harabasz and Davies-Bouldin (`algorithms.choose_k.candidate_scores`)."),
    Phase(
        "secure-evaluate", "train", "with secure-aggregation (and `evaluate`): after the "
        "last round, in place of the evaluation's statistics (then `final` without them, "
        "unless this message delivered the model)",
        sends=("`centroids` (k, d) float64: the model",),
        config=("`n-classes` int, optional: the contingency table's width",
                "`final` bool, optional: true when every node is asked (`fraction` 1) and "
                "the algorithm's final message is its centroids: the client labels its "
                "rows as for `final`, and no `final` message follows if every node "
                "answered"),
        reply_arrays=("`head` (5,) float64: rows, SSE, silhouette sum, has labels (0/1), "
                      "sum of squares of the rows",
                      "`cluster-counts` (k,) float64", "`sum-x` (d,) float64",
                      "`cluster-residuals` (k, d) float64: nothing withheld (only totals "
                      "reach the server)",
                      "`contingency` (k, n-classes) float64: only with `n-classes` (zeros "
                      "from a client without labels)"),
        notes="Answered by the library (`clients.statistics.secure_evaluation_arrays`) through "
              "secure aggregation (`upload` and `unmask` messages, or SecAgg+'s four, as "
              "FKM's `secure-update`): the server "
              "receives the federation's totals only and computes the metrics of "
              "`evaluate` from them, except `ari-client-weighted` (per client)."),
)


def resolve(path: str) -> Any:
    """The object a dotted path names: ``"package.module:Attribute"`` (imported now).

    Raises
    ------
    ValueError
        If the path has no ``:``, or the module or its attribute cannot be imported.
    """
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{path!r} is not a dotted path 'package.module:Attribute'")
    try:
        value = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as ex:
        raise ValueError(f"cannot import {path!r}: {ex}") from ex
    return value


def dotted_path(obj: Any) -> str:
    """The ``"module:QualifiedName"`` of a class or function (for listings)."""
    return f"{obj.__module__}:{obj.__qualname__}"


class _ClassRef:
    """A spec field holding a class or its dotted path; reading it gives the class.

    A dataclass field whose default is this descriptor (Python's "descriptor-typed
    fields"): ``AlgorithmSpec(strategy="pkg.mod:Cls")`` stores the path, and
    ``spec.strategy`` imports the class on first read and keeps it. The path as declared
    is ``spec.strategy_path``.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, spec: Any, owner: type | None = None) -> type:
        if spec is None:
            raise AttributeError(self.name)  # no default: the field is required
        value = spec.__dict__[f"_{self.name}"]
        if isinstance(value, str):
            value = resolve(value)
            if not isinstance(value, type):
                raise ValueError(f"algorithm {spec.name!r}: {self.name} {value!r} is not a "
                                 "class")
            spec.__dict__[f"_{self.name}"] = value
        return value

    def __set__(self, spec: Any, value: type | str) -> None:
        if not isinstance(value, type | str):
            raise TypeError(f"{self.name} must be a class or a 'module:Class' path, got "
                            f"{type(value).__name__}")
        if f"_{self.name}" in spec.__dict__:
            raise AttributeError(f"cannot assign to field {self.name!r}")  # frozen
        spec.__dict__[f"_{self.name}"] = value
        spec.__dict__[f"_{self.name}_path"] = (value if isinstance(value, str)
                                               else dotted_path(value))


#: How a model may label rows (:attr:`Capabilities.labels`): the nearest centre, the
#: nearest on each row's observed features, a kernel's or a network's own rule.
LABELS = ("nearest-centroid", "masked-nearest-centroid", "kernel", "network")


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm can do, declared as data on its :class:`AlgorithmSpec`.

    The App, the estimator, the refusals that name "the algorithms that can" and the
    docs read these, without importing a strategy; ``tests/test_algorithm_specs.py``
    checks every built-in declaration against its strategy class (the class attributes
    ``labelling``, ``resumable``, ``searches_k``, ``searches_starts``,
    ``needs_every_client``; secure aggregation, refinement and the legacy API by trying
    them), so the data cannot drift from the code.

    Attributes
    ----------
    labels : str
        How the final model labels a row (the strategy's ``labelling``): one of
        :data:`LABELS`, or an algorithm's own rule (its model then lives in its own result
        files, which :meth:`flwr_clustering.model.ClusteringModel.predict` names).
    resume : bool
        Whether a run continues from its checkpoint (``resume-from``; the strategy's
        ``resumable``).
    choose_k : bool
        Whether ``k='auto'`` runs a search over candidate models (``searches_k``).
    starts : bool
        Whether ``n-init`` > 1 runs that many federated starts (``searches_starts``).
    needs_every_client : bool
        Whether every round needs every client (DGC's graph).
    secure : dict or None
        The option values (field names of the options) under which the algorithm runs
        under secure aggregation: ``{}`` with any options, ``None`` never.
    secure_note : str
        What stays outside secure aggregation (masked-federated's round 1).
    secure_phases : dict
        The phases the algorithm sends under another name through secure aggregation,
        ``{plain name: secure name}``; ``None`` for a phase that cannot go through it
        (FKM's ``init``, whose k-means++ seeds only a plain exchange can carry). The
        secure exchange sends every other phase under its own name.
    dp : bool
        Whether it has differential privacy (a ``dp_epsilon`` option).
    refine : bool or None
        Whether ``refine-rounds`` applies (``None``: not declared).
    legacy : bool or None
        Whether :class:`flwr_clustering.legacy.LegacyStrategy` runs it on Flower's legacy
        Strategy API (``None``: not declared).
    """

    labels: str = "nearest-centroid"
    resume: bool = False
    choose_k: bool = False
    starts: bool = False
    needs_every_client: bool = False
    secure: dict[str, Any] | None = None
    secure_note: str = ""
    secure_phases: dict[str, str | None] = field(default_factory=dict)
    dp: bool = False
    refine: bool | None = None
    legacy: bool | None = None

    def __post_init__(self) -> None:
        """Check the labelling and the secure options."""
        if not isinstance(self.labels, str) or not self.labels:
            raise ValueError(f"labels must be a non-empty string (the built-in rules: "
                             f"{list(LABELS)}), got {self.labels!r}")
        if self.secure is not None and not isinstance(self.secure, dict):
            raise TypeError("secure must be a dict of option values or None")

    @classmethod
    def of_strategy(cls, strategy: type) -> Capabilities:
        """What a strategy class's attributes say (a spec that declares none).

        Secure aggregation, refinement and the legacy API are found by trying them: the
        result says ``None`` (secure: never) for them.
        """
        options = getattr(strategy, "Options", None)
        names = {f.name for f in dataclasses.fields(options)} if options else set()
        return cls(labels=str(getattr(strategy, "labelling", "nearest-centroid")),
                   resume=bool(getattr(strategy, "resumable", False)),
                   choose_k=bool(getattr(strategy, "searches_k", False)),
                   starts=bool(getattr(strategy, "searches_starts", False)),
                   needs_every_client=bool(getattr(strategy, "needs_every_client", False)),
                   dp="dp_epsilon" in names)


@dataclass(frozen=True)
class AlgorithmSpec:
    """Everything the App and the runners need to know about one algorithm.

    Attributes
    ----------
    name : str
        The run-config value of ``algorithm``.
    strategy : type or str
        The :class:`~flwr_clustering.strategies.base.ClusteringStrategy` subclass, or its
        dotted path ``"package.module:Class"`` (imported on first read; reading
        ``spec.strategy`` gives the class, ``spec.strategy_path`` the path).
    client : type or str
        The :class:`~flwr_clustering.clients.base.ClusteringClient` subclass, or its
        dotted path (as ``strategy``).
    options : type
        The :class:`~flwr_clustering.options.Options` dataclass (run-config keys,
        defaults, validation, message config).
    loop : callable, optional
        The pure reference loop (no Flower), ``loop(clients, k, ...)``.
    summary : str
        One line for listings.
    pooled_report : callable or str, optional
        ``pooled_report(strategy, X, y) -> dict``: extra results of a simulation whose
        pooled data the server knows (e.g. DeepFeCA's linear probe); the App calls it. A
        ``"module:function"`` string is imported when the App needs it (side runs live in
        the App's layer, above the strategies).
    listed : bool
        ``False`` for helpers that are not algorithms (left out of listings).
    extra : dict
        Anything else an algorithm wants to declare.
    protocol : tuple of Phase
        The algorithm's messages in the order they are sent (the docs' phases table);
        the shared evaluation and final messages are in :data:`COMMON_PROTOCOL`.
    can : Capabilities, optional
        What it can do (:class:`Capabilities`); not given: what the strategy class's
        attributes say (:meth:`Capabilities.of_strategy`, which imports it). Read
        :attr:`capabilities`.
    guide : str
        Its docs page, relative to ``docs/`` (e.g. ``"algorithms/fkm.md"``).
    """

    name: str
    strategy: type | str = _ClassRef()  # type: ignore[assignment]
    client: type | str = _ClassRef()  # type: ignore[assignment]
    options: type[Options]
    loop: Callable[..., Any] | None = None
    summary: str = ""
    pooled_report: Callable[..., dict[str, Any]] | str | None = None
    listed: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    protocol: tuple[Phase, ...] = ()
    can: Capabilities | None = None
    guide: str = ""

    def __repr__(self) -> str:
        """The name and the dotted paths (importing nothing)."""
        return (f"AlgorithmSpec(name={self.name!r}, strategy={self.strategy_path!r}, "
                f"client={self.client_path!r}, options={self.options.__name__})")

    @property
    def strategy_path(self) -> str:
        """The strategy's dotted path (as declared, or of the class given)."""
        return self.__dict__["_strategy_path"]

    @property
    def client_path(self) -> str:
        """The client's dotted path (as declared, or of the class given)."""
        return self.__dict__["_client_path"]

    @property
    def capabilities(self) -> Capabilities:
        """What the algorithm can do: :attr:`can`, or its strategy class's attributes."""
        return self.can if self.can is not None else Capabilities.of_strategy(self.strategy)

    def pooled_report_fn(self) -> Callable[..., dict[str, Any]] | None:
        """The ``pooled_report`` hook as a callable (imported if given as a string)."""
        hook = self.pooled_report
        return resolve(hook) if isinstance(hook, str) else hook

    def build_strategy(self, run_config: dict[str, Any], **base: Any):
        """The strategy configured from a (merged) run config.

        Parameters
        ----------
        run_config : dict
            Kebab-keyed configuration; the algorithm's keys are read, others ignored.
        **base
            :class:`~flwr_clustering.strategies.base.ClusteringStrategy` arguments
            (``min_nodes``, ``seed``, ``round_timeout``, ...).
        """
        return self.strategy(options=self.options.from_config(run_config, run_config_only=True),
                             **base)


_REGISTRY: dict[str, AlgorithmSpec] = {}
#: Algorithms loaded by module path (not listed, not part of the App's default keys).
_LOADED: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add an algorithm to the registry (a name may be registered once).

    Raises
    ------
    ValueError
        If the name is taken by another declaration, or if one of its run-config keys has
        a different default in an already registered algorithm (the App's run config is
        flat: one default per key).
    """
    old = _REGISTRY.get(spec.name)
    if old is not None and old.strategy_path != spec.strategy_path:
        raise ValueError(f"algorithm {spec.name!r} is already registered "
                         f"({old.strategy_path})")
    defaults = spec.options.run_config_defaults()
    for other in _REGISTRY.values():
        if other.name == spec.name:
            continue
        for key, value in other.options.run_config_defaults().items():
            if key in defaults and defaults[key] != value:
                raise ValueError(
                    f"run-config key {key!r} has default {defaults[key]!r} in {spec.name!r} "
                    f"but {value!r} in {other.name!r}; a shared key needs one default "
                    "(use auto=... for a per-algorithm value)")
    _REGISTRY[spec.name] = spec
    return spec
