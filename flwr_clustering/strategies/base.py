"""The strategy base every clustering strategy subclasses (layer 3).

:class:`ClusteringStrategy` is small: its options and constructor, and the hooks an
algorithm overrides (listed in its docstring). The Flower plumbing it owns once lives in
parts, one job each, composed here:

=================================================  ==========================================
:mod:`~flwr_clustering.strategies.rounds`          the round driver: ``start``, Flower's
                                                   configure/aggregate methods
:mod:`~flwr_clustering.strategies.exchange`        messages, node sampling and identity,
                                                   reply collection (the ``Reply`` type)
:mod:`~flwr_clustering.strategies.validation`      the rules every reply keeps
:mod:`~flwr_clustering.strategies.ledger`          the privacy ledger
:mod:`~flwr_clustering.strategies.secure_rounds`   secure aggregation's rounds
:mod:`~flwr_clustering.strategies.diagnosis`       the end-of-run checks
:mod:`~flwr_clustering.strategies.state`           the run state and its checkpoint
:mod:`~flwr_clustering.strategies.features`        the features agreed before round 1
:mod:`~flwr_clustering.strategies.split_check`     the split check after the last round
=================================================  ==========================================

An algorithm's strategy declares its options (an :class:`~flwr_clustering.options.Options`
dataclass) and only says what to send and how to aggregate, by calling
:mod:`flwr_clustering.algorithms`. Phases that are not training go as Flower ``QUERY``
messages, the rounds as ``TRAIN`` messages. The strategy writes no file: the App (or the
caller) writes what :meth:`ClusteringStrategy.artifacts` and the history hand back
(:func:`flwr_clustering.app.results.save_results`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..algorithms.upload import claims_of
from ..log import logger
from ..options import Options, option
from ..secure import DEFAULT_SECAGG_KEYS, SECAGG_KEYS, SECAGG_THRESHOLD
from .diagnosis import RunDiagnosis
from .exchange import Exchange, Reply
from .features import FeatureOptions
from .ledger import PrivacyLedger
from .rounds import RoundDriver
from .secure_rounds import SecureRounds
from .split_check import refine_problem
from .state import RunState
from .validation import ReplyValidation

__all__ = ["ClusteringOptions", "ClusteringStrategy", "Reply", "logger"]


@dataclasses.dataclass(frozen=True)
class ClusteringOptions(Options):
    """Options every clustering algorithm has: ``k``."""

    k: int = option(16, minimum=1, help="number of global clusters")


class ClusteringStrategy(RoundDriver, SecureRounds, RunDiagnosis, RunState, ReplyValidation,
                         PrivacyLedger, Exchange, Strategy):
    """Base class of the clustering strategies.

    Parameters
    ----------
    k : int, optional
        Number of global clusters (an option; may also come in ``options``).
    options : Options, optional
        The algorithm's options (an instance of the class attribute ``Options``). Options
        may also be given one by one as keyword arguments (``privacy_threshold=0``); those
        replace the values in ``options``.
    min_nodes : int, default 2
        Nodes to wait for before the first round, and the fewest valid replies a round
        may aggregate; below that the run stops with an error.
    fraction : float, default 1.0
        Fraction of the available nodes asked in each round (at least ``min_nodes``),
        drawn with the strategy's own seeded generator over sorted node ids.
    seed : int, default 0
        Seeds the server generator (``numpy.random.default_rng(seed)``) and is sent to
        the clients, which seed theirs from it and their client id.
    round_timeout : float, default 3600
        Seconds to wait for the replies of one round.
    node_wait_timeout : float, default 600
        Seconds to wait for ``min_nodes`` nodes to connect.
    evaluate : bool, default True
        Run a federated evaluation of the final model (and ask clients for per-round
        statistics where the protocol allows it without extra messages). With ``False``
        the clients still receive the final model (to label their own rows), but send
        no statistics back.
    evaluate_every_round : bool, default False
        Also run a federated evaluation (an ``EVALUATE`` message to every node) after
        every round, as Flower's ``FedAvg`` does; off by default, since the train replies
        of iterative algorithms already carry the previous model's statistics.
    early_stop : bool, default True
        Stop before ``num_rounds`` when the algorithm's own convergence rule says so
        (FKM and FFCM: matched centroid shift at most ``tol``; DGC only with
        ``tol >= 0``). With ``False`` :meth:`start` runs exactly ``num_rounds`` rounds.
    scaling : {"standard", "minmax", "none"} or None, default None
        Agree on the sites' columns by name and scale the features across the sites
        before round 1, from the clients' sums (one more message per node;
        :mod:`~flwr_clustering.strategies.features`); the App and the estimator default to
        ``"standard"``. ``"none"``: columns agreed, rows not scaled, a warning when the
        features' spreads differ by more than 10x. ``None`` (a strategy's default in your
        own ServerApp): no features step, the rows as your clients hold them. The model
        (``centroids``) is in the scaled units; :meth:`in_original_units` maps it back.
    feature_columns : sequence of str or str, optional
        The federation's features, in this order (each site's other columns are ignored).
        Default: every column the sites share, in the order most of them use.
    index_column : str, optional
        A declared identifier column (never a feature).
    categorical_columns : sequence of str or str, optional
        Columns of categories, one-hot encoded with the levels agreed across the sites
        (a level rarer than ``privacy_threshold`` folds into ``other``; a missing cell is
        the level ``missing``).
    missing : {"auto", "mean", "drop", "partial", "refuse"}, default "auto"
        What a missing cell of a numeric feature becomes, with a features step
        (``scaling`` given): the federation's mean of the feature, from the scaling's
        sums (``mean``; ``auto`` for algorithms that need complete rows); the row left
        out of training and labelled -1 (``drop``); the row clustered on its observed
        features (``partial``; ``auto`` for the masked algorithms; FKM with
        ``server_update='lloyd'`` when asked: :attr:`partial_rows`); an error
        (``refuse``). See :mod:`~flwr_clustering.strategies.features`.
    unit_check : {"warn", "refuse", "off"}, default "warn"
        With a features step: warn (or refuse the run) when a site's feature looks
        recorded in other units than the other sites' (plain runs, from their sums).
    categorical_weight : {"balanced", "standard"}, default "balanced"
        With ``scaling='standard'``: ``"balanced"`` scales the one-hot features of each
        categorical column so that the column weighs like one standardised numeric
        feature (:func:`~flwr_clustering.data.schema.categorical_scales`); ``"standard"``
        standardises each one-hot feature like a measurement (a rare level then weighs
        most).
    datetime_columns : sequence of str or str, optional
        Date/time columns to use as features: every client converts them to float seconds
        since 1970-01-01 00:00 UTC (a time without a time zone taken as UTC), whatever
        its file's unit; an undeclared date/time column among the features is refused.
    robust_scaling : bool, default False
        With ``scaling='standard'``: a site whose moments of a numeric feature lie far
        from the median site's is set aside from that feature's mean and scale, and named
        in a warning (:func:`~flwr_clustering.data.schema.robust_moments`). Needs each
        site's sums: not with secure aggregation.
    split_check : bool, default True
        After the last round, check from per-cluster sums whether a cluster looks like
        two groups (two more messages per node; :mod:`~flwr_clustering.strategies.split_check`):
        a poor local optimum, or ``k`` too small. Found: a warning naming
        ``refine_rounds``. Centre-based models only, not with differential privacy.
    refine_rounds : int, default 0
        Refine the final model before its evaluation: up to this many federated Lloyd
        rounds, then split-and-merge repairs of clusters that look like two groups, each
        followed by Lloyd rounds and kept only where the SSE falls. For models that label
        by the nearest centre (not DGC, KDC, DeepFeCA, the masked algorithms), not with
        differential privacy.
    **kwargs
        Options by field name (see the algorithm's ``Options``).

    Notes
    -----
    The round cap is the option ``max_rounds`` of iterative algorithms; a fixed protocol
    returns its round count from :meth:`protocol_rounds` instead. The convergence
    tolerance is the option ``tol`` where the algorithm has one (else never early).

    After :meth:`start`, ``diagnostics`` (a dict) and ``warnings`` (a list of sentences)
    hold the end-of-run checks of :meth:`diagnose`: degenerate results (collapsed, empty or
    NaN centres, the round cap hit, clients withheld or dropped, ...) are detected from
    counts and sums, logged as WARNINGs and named with the option that addresses them.

    The base is composed of parts, one job each, in their own modules:
    :class:`~flwr_clustering.strategies.rounds.RoundDriver` (``start``, the round loop and
    Flower's configure/aggregate methods),
    :class:`~flwr_clustering.strategies.exchange.Exchange` (messages, node identity, reply
    collection), :class:`~flwr_clustering.strategies.validation.ReplyValidation` (the rules
    a reply keeps), :class:`~flwr_clustering.strategies.ledger.PrivacyLedger`,
    :class:`~flwr_clustering.strategies.secure_rounds.SecureRounds`,
    :class:`~flwr_clustering.strategies.diagnosis.RunDiagnosis` and
    :class:`~flwr_clustering.strategies.state.RunState` (reset, checkpoint).

    Methods an algorithm overrides
    ------------------------------
    Always: :meth:`aggregate_payloads` (the valid replies, by client id, to the new model)
    and, for a payload other than a list of arrays, :meth:`parse_payload` (decode and
    validate one upload; raise ``ValueError``). As its protocol needs:

    - what to send: :meth:`train_config`, :meth:`train_arrays`; the model it returns:
      :meth:`model_record`;
    - rounds: :meth:`protocol_rounds` (a fixed protocol), :meth:`round_cap` (the most
      rounds of an iterative one), :meth:`converged`,
      :meth:`shift`; extra exchanges: :meth:`initialize` (before round 1),
      :meth:`prepare_round` (before every round), :meth:`reconnect` (a resumed run);
    - what an upload claims, for the validation rules: the payload says it itself
      (:class:`~flwr_clustering.algorithms.upload.Upload`: counts, means, features), read
      by :meth:`payload_counts`, :meth:`payload_means`, :meth:`payload_features`;
    - secure aggregation: :meth:`aggregate_sums`, :meth:`secure_aggregation_problem`,
      :meth:`secure_round`;
    - raw rows: :meth:`raw_rows_option`;
    - history and results: :meth:`round_info`, :meth:`evaluation_extras`,
      :meth:`diagnostic_extras`, :meth:`artifacts`, :meth:`result_summary`,
      :meth:`describe`; a model that labels rows its own way: :meth:`pooled_labels`,
      :meth:`user_models`, :meth:`scored_user_models`, :meth:`plot_features`;
    - options: :meth:`configure` (attributes derived once from them); a checkpoint with
      more state: :meth:`state_dict` and :meth:`load_state_dict`.

    Protocols of more than one message per round (DGC, KDC, DeepFeCA) also override
    Flower's :meth:`configure_train`/:meth:`aggregate_train` or call
    :meth:`exchange` from their hooks.
    """

    #: Short name used in logs and results.
    name = "clustering"

    #: The algorithm's options dataclass.
    Options: type[Options] = ClusteringOptions

    #: Whether the features are agreed and scaled before round 1
    #: (:mod:`~flwr_clustering.strategies.features`); false for models of raw inputs
    #: (DeepFeCA's images), which :attr:`scales_features_why` explains.
    scales_features: bool = True

    scales_features_why: str = ""

    #: Whether the algorithm clusters a row on its observed features (NaN read as
    #: unobserved: the masked algorithms), the ``missing='auto'`` policy ``partial``;
    #: else its rows must be complete (``auto``: ``mean``).
    reads_missing: bool = False

    #: Whether the algorithm clusters rows with missing cells when ``missing='partial'`` is
    #: asked for (FKM: the partial-distance Lloyd step; ``auto`` stays ``mean``); then
    #: :meth:`partial_rows_problem` names options that cannot.
    partial_rows: bool = False

    def partial_rows_problem(self) -> str | None:
        """Why this run's options cannot cluster rows with missing cells (``None``: they can)."""
        return None

    #: How the model labels a row (``model.json``'s ``labelling``): the nearest centre;
    #: masked algorithms on each row's observed features; KDC its kernel, DeepFeCA its
    #: network (their own artifacts hold those models).
    labelling: str = "nearest-centroid"

    #: Per-round history series the App plots in ``training.png`` (none by default).
    curves: tuple[str, ...] = ()

    #: Whether a search over candidate models (``k='auto'``, several starts) can wrap
    #: this algorithm (:mod:`~flwr_clustering.strategies.choose_k`): one train exchange
    #: per round whose model is centres labelling by the nearest.
    searches_k: bool = False

    #: Whether the algorithm's ``n_init`` option (run-config ``n-init``) is the number of
    #: federated starts of such a search (FKM; scikit-learn's ``n_init``).
    searches_starts: bool = False

    #: Whether :meth:`start` can continue a run from :meth:`state_dict` (``resume=``):
    #: iterative algorithms whose whole between-round state the state dict holds.
    resumable: bool = False

    #: Whether every round needs every client (DGC: each client is a node of the graph
    #: whose neighbours' sums the server relays). The others aggregate whoever replied
    #: validly, at least ``min_nodes``, and name the clients that did not; the
    #: estimator's default ``min_nodes`` is every client only where this is true.
    needs_every_client: bool = False

    #: The options (field names of :attr:`Options`) that address each anomaly of
    #: :meth:`diagnose`; the warnings name their run-config keys. Fields the algorithm
    #: does not have are left out. Anomalies: ``non-finite``, ``fewer-centroids``,
    #: ``collapse``, ``empty``, ``lloyd-gain``, ``round-cap``, ``withheld``, ``dropped``,
    #: ``consensus``, ``cores`` (see :func:`flwr_clustering.diagnostics.warnings_from`).
    advice: dict[str, tuple[str, ...]] = {
        "non-finite": ("k",), "fewer-centroids": ("k",), "collapse": ("k",),
        "empty": ("k",), "round-cap": ("max_rounds", "tol"),
        "withheld": ("privacy_threshold",), "lloyd-gain": ("max_rounds", "tol"),
        "split": ("k",),
    }

    def __init__(
        self,
        k: int | None = None,
        *,
        options: Options | None = None,
        min_nodes: int = 2,
        fraction: float = 1.0,
        seed: int = 0,
        round_timeout: float = 3600.0,
        node_wait_timeout: float = 600.0,
        evaluate: bool = True,
        evaluate_every_round: bool = False,
        early_stop: bool = True,
        secure_aggregation: bool = False,
        secagg_threshold: float = SECAGG_THRESHOLD,
        secagg_keys: str = DEFAULT_SECAGG_KEYS,
        scaling: str | None = None,
        feature_columns: Any = None,
        index_column: str | None = None,
        categorical_columns: Any = None,
        missing: str = "auto",
        unit_check: str = "warn",
        categorical_weight: str = "balanced",
        datetime_columns: Any = None,
        robust_scaling: bool = False,
        split_check: bool = True,
        refine_rounds: int = 0,
        **kwargs: Any,
    ) -> None:
        option_kwargs, unknown = self.Options.split_kwargs(kwargs)
        if unknown:
            names = [f.name for f in dataclasses.fields(self.Options)]
            raise TypeError(f"{type(self).__name__} got unexpected argument(s) "
                            f"{sorted(unknown)}; its options are {names}")
        if isinstance(k, str) or isinstance(option_kwargs.get("k"), str):
            raise ValueError(
                f"k={k or option_kwargs.get('k')!r}: a {type(self).__name__} fits one k; "
                "choosing k is a search over candidates: "
                "flwr_clustering.strategies.choose_k.search_k"
                f"({type(self).__name__}, range(2, 11), ...) (fkm, kfed, feca)")
        if k is not None:
            option_kwargs["k"] = k
        if options is None:
            options = self.Options(**option_kwargs)
        else:
            if not isinstance(options, self.Options):
                raise TypeError(f"options must be {self.Options.__name__}, got "
                                f"{type(options).__name__}")
            if option_kwargs:
                options = dataclasses.replace(options, **option_kwargs)
        if min_nodes < 1:
            raise ValueError(f"min_nodes must be at least 1, got {min_nodes}")
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        self.options = options
        for name, value in options.as_dict().items():
            setattr(self, name, value)
        self.min_nodes = int(min_nodes)
        self.fraction = float(fraction)
        self.seed = int(seed)
        self.tol = float(getattr(options, "tol", -1.0))
        self.round_timeout = float(round_timeout)
        self.node_wait_timeout = float(node_wait_timeout)
        self.evaluate = bool(evaluate)
        self.evaluate_every_round = bool(evaluate_every_round)
        self.early_stop = bool(early_stop)
        self.secure_aggregation = bool(secure_aggregation)
        if not 0.0 < float(secagg_threshold) <= 1.0:
            raise ValueError(f"secagg_threshold must lie in (0, 1], got {secagg_threshold}")
        self.secagg_threshold = float(secagg_threshold)
        if secagg_keys not in SECAGG_KEYS:
            raise ValueError(f"secagg_keys must be one of {SECAGG_KEYS}, got {secagg_keys!r}")
        self.secagg_keys = str(secagg_keys)
        self.split_check = bool(split_check)
        if isinstance(refine_rounds, bool) or int(refine_rounds) != refine_rounds \
                or refine_rounds < 0:
            raise ValueError(f"refine_rounds must be a non-negative integer, got "
                             f"{refine_rounds!r}")
        self.refine_rounds = int(refine_rounds)
        self.feature_options = FeatureOptions.from_values(scaling, feature_columns,
                                                          index_column, categorical_columns,
                                                          missing, unit_check,
                                                          categorical_weight,
                                                          datetime_columns, robust_scaling)
        if self.secure_aggregation and self.feature_options.scaling == "minmax":
            raise ValueError("secure-aggregation=true: scaling='minmax' needs every site's "
                             "minimum and maximum (one row's value each), which secure "
                             "aggregation cannot sum: run with scaling='standard'")
        if self.secure_aggregation and self.feature_options.robust_scaling:
            raise ValueError("secure-aggregation=true: robust-scaling=true needs each site's "
                             "per-feature sums, which secure aggregation hides (the server "
                             "learns only their totals): run with robust-scaling=false "
                             "(unit-check still flags a site in other units)")
        #: What every client said about its columns, ``{client id: columns record}``, when
        #: the caller asked already (the App's data-source check); else :meth:`start` asks.
        self.site_columns: dict[int, Any] | None = None
        if self.secure_aggregation:
            problem = self.secure_aggregation_problem()
            if problem is not None:
                raise ValueError(f"secure-aggregation=true: {problem}")
        self.configure()
        if self.refine_rounds and refine_problem(self) is not None:
            raise ValueError(f"refine-rounds={self.refine_rounds}: {refine_problem(self)}; "
                             "refine-rounds applies to fkm, kfed, feca, mavg and ffcm")
        #: Under secure aggregation the evaluation statistics are summed securely too
        #: (:meth:`secure_evaluation`); no EVALUATE message asks for them.
        self.secure_evaluate = self.secure_aggregation and self.evaluate
        if self.secure_aggregation:
            self.evaluate = False
        fixed = self.protocol_rounds()
        self.max_rounds = int(fixed if fixed is not None else self.round_cap())
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {self.max_rounds}")
        self.reset()

    def configure(self) -> None:
        """Derive attributes from the options (override; called once by ``__init__``)."""

    def round_cap(self) -> int:
        """The most train rounds of an iterative run (default: the option ``max_rounds``)."""
        return int(self.options.max_rounds)

    def protocol_rounds(self) -> int | None:
        """The fixed number of train rounds of the protocol (``None``: iterative).

        One-shot algorithms return 1; :meth:`start` rejects a ``num_rounds`` that does not
        fit a fixed protocol.
        """
        return None

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return the algorithm's configuration for the train messages of a round."""
        return {}

    def train_arrays(self, server_round: int) -> list[np.ndarray]:
        """Return the arrays sent in the train messages (default: current centroids)."""
        return [] if self.centroids is None else [self.centroids]

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> Any:
        """Decode and validate one client's train payload; raise ``ValueError`` if bad."""
        return arrays

    def payload_features(self, payload: Any) -> int | None:
        """Return the feature dimension a payload reveals (``None``: none; its claims)."""
        return claims_of(payload).features

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Return the new global model from the valid replies, sorted by client id."""
        raise NotImplementedError

    def converged(self, server_round: int) -> bool:
        """Return whether to stop after this round (default: one-shot)."""
        return True

    def initialize(self, grid: Grid, timeout: float) -> None:
        """Prepare the first round (e.g. an extra exchange for the initial model).

        Called by :meth:`start` after ``initial_arrays`` are read and before round 1;
        the default does nothing.
        """

    def reconnect(self, grid: Grid, server_round: int, timeout: float) -> None:
        """Find again the nodes a resumed state addresses, before its first round.

        Called by :meth:`start` with ``resume``, after :meth:`load_state_dict` and instead
        of :meth:`initialize`, with the round about to run. The nodes may have come back
        under new Flower node ids (a SuperLink restart): a strategy that keeps node ids
        in its state (the DGC relay) rebuilds them here, e.g. with
        :meth:`identify_clients`. The default does nothing (the base asks the connected
        nodes afresh every round).
        """

    def prepare_round(self, server_round: int, grid: Grid, timeout: float) -> None:
        """An extra exchange before the train messages of every round.

        Called by :meth:`start` before :meth:`configure_train` of each round (DeepFeCA
        clusters the clients' features here, then trains on the result); the default
        does nothing.
        """

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Return extra per-round numbers for the history (override to add)."""
        return {}

    def shift(self, previous: np.ndarray | None, new: np.ndarray) -> float:
        """Return how far the model moved in this round (default: max abs change)."""
        if previous is None or previous.shape != new.shape:
            return float("inf")
        return float(np.abs(new - previous).max())

    def evaluation_extras(self, replies: list[Reply]) -> dict[str, float]:
        """Return protocol-specific metrics of the federated evaluation (override to add)."""
        return {}

    def summary(self) -> None:
        """Log the strategy's configuration (the run's round count, not the option's cap)."""
        described = self.describe()
        if described.get("num_rounds") != described.get("max_rounds"):
            described.pop("max_rounds", None)
        logger.info("%s: %s", type(self).__name__, described)

    def describe(self) -> dict[str, Any]:
        """Return the configuration as a dict (logged and saved with the results)."""
        return {
            "min_nodes": self.min_nodes, "fraction": self.fraction, "seed": self.seed,
            "num_rounds": getattr(self, "num_rounds", self.max_rounds),
            "early_stop": self.early_stop, "evaluate": self.evaluate,
            "evaluate_every_round": self.evaluate_every_round, "tol": self.tol,
            **self.options.as_dict(),
        }

    def model_record(self) -> ArrayRecord:
        """The model as an ``ArrayRecord`` (default: ``centroids``; override to add arrays).

        It is what :meth:`aggregate_train` returns and ``Result.arrays`` holds.
        """
        if self.centroids is None:
            return ArrayRecord()
        return ArrayRecord({"centroids": Array(np.ascontiguousarray(self.centroids))})

    def in_original_units(self, C: np.ndarray | None) -> np.ndarray | None:
        """Centres (or means) of the model's space in the data's own units.

        The model is computed on the federation's scaled features
        (:attr:`feature_transform`); everything a user reads is mapped back with this.
        Unchanged without a scaling.
        """
        if C is None or self.feature_transform is None or not self.feature_transform.scaled:
            return C
        C = np.asarray(C)
        if C.ndim != 2 or C.shape[1] != len(self.feature_transform.features):
            return C  # not in the feature space (e.g. DeepFeCA's network features)
        return self.feature_transform.inverse(C)

    def artifacts(self) -> dict[str, dict[str, np.ndarray]]:
        """Extra result files: ``{file name: {array name: array}}`` (written by the App)."""
        return {}

    def pooled_labels(self, X: np.ndarray) -> np.ndarray | None:
        """Cluster of every pooled row, for a model that labels rows itself (KDC).

        ``None`` (the default) means: the nearest of the model's ``centroids``.
        """
        return None

    def user_models(self) -> np.ndarray | None:
        """Every user's own centres ``(m, k, d)`` where users keep their own (DGC)."""
        return None

    def scored_user_models(self) -> np.ndarray | None:
        """The users' centres the per-user metrics score (default: :meth:`user_models`).

        DGC scores at most ``user-eval-nodes`` users, so both the federated and the
        server-side ``user-*`` metrics summarise the same users.
        """
        return self.user_models()

    def plot_features(self, X: np.ndarray) -> np.ndarray:
        """The rows as the model sees them, for the cluster plot (default: ``X``)."""
        return X

    def result_summary(self) -> dict[str, Any]:
        """Extra entries of ``result.json`` (override to add)."""
        return {}

    def initialize_parameters(self, client_manager):
        """Refuse Flower's legacy server, naming the adapter (legacy Strategy API).

        ``flwr.server.ServerAppComponents(strategy=...)`` calls this first; our strategies
        speak the Message API, and :class:`flwr_clustering.legacy.LegacyStrategy` wraps
        them for the legacy one.
        """
        raise TypeError(
            f"{type(self).__name__} is a Message-API strategy (flwr.serverapp.ServerApp with "
            f"strategy.start(grid=...)); in a legacy ServerAppComponents use "
            f"flwr_clustering.legacy.LegacyStrategy({type(self).__name__}(...))")
