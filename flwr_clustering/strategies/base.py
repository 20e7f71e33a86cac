"""The strategy base every clustering strategy subclasses (layer 3).

:class:`ClusteringStrategy` is a Flower ``Strategy`` (and nothing else): its options and
constructor, the round loop (``start`` and Flower's configure/aggregate methods), and the
hooks an algorithm overrides (listed in its docstring). What it does besides is done by
objects it holds, each with one job and explicit inputs:

=====================================================  =====================================
``record``: :class:`~.state.RunRecord`                  the run's state (model, history,
                                                        generators, features); the
                                                        checkpoint saves its ``state_dict``
``exchanger``: :class:`~.exchange.Exchange`             messages, node sampling and
                                                        identity, reply collection:
                                                        ``send(...) -> Collected``
``summer``: :class:`~flwr_clustering.secure.exchange.   the exchange that sums a phase:
SecureExchange`, or the ``exchanger``                   chosen once per run (secure or
                                                        plain), the same call
``rules``: :class:`~.validation.ReplyRules`             the rules every reply keeps (and
                                                        each client's declared rows, sums)
``ledger``: :class:`~.ledger.Ledger`                    what every client sent; its own
                                                        ``state_dict``
``nodes``: :class:`~flwr_clustering.replies.NodeBook`   which client each node holds, who
                                                        was absent
=====================================================  =====================================

The reply contracts (:mod:`~.contracts`, one per phase) are checked by the exchange before
anything of a reply is used; the end-of-run checks are pure functions
(:mod:`~.diagnosis`); the features agreed before round 1 (:mod:`~.features`) and the split
check after the last round (:mod:`~.split_check`) are functions of the strategy.

An algorithm's strategy declares its options (an :class:`~flwr_clustering.options.Options`
dataclass) and only says what to send and how to aggregate, by calling
:mod:`flwr_clustering.algorithms`. Phases that are not training go as Flower ``QUERY``
messages, the rounds as ``TRAIN`` messages. The strategy writes no file: the App (or the
caller) writes what :meth:`ClusteringStrategy.artifacts` and the history hand back
(:func:`flwr_clustering.app.results.save_results`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from .. import registry
from ..algorithms.upload import claims_of
from ..evaluation import EVALUATION_STATS, aggregate_evaluation_stats
from ..log import format_metrics, logger, show_progress
from ..options import Options, option
from ..protocol import (
    SECURE_EVALUATE_PHASE,
    SPLIT_CHECK_KEYS,
    SPLIT_IN_EVALUATION_KEY,
    SPLIT_SCATTER_PHASE,
    SPLIT_WITHHELD_KEY,
)
from ..pulls import DEFAULT_POLL_INTERVAL, FastPulls
from ..run_options import RunOptions, refuse_k_auto
from ..secure import DEFAULT_SECAGG_KEYS, SECAGG_THRESHOLD
from ..secure.exchange import SecureExchange, evaluation_stats
from .diagnosis import RunSummary, diagnosis_warnings, run_diagnostics
from .exchange import Collected, Exchange, NodeBook, Reply, RunView
from .features import FeatureOptions, prepare_features
from .ledger import Ledger
from .rounds import log_server_evaluation
from .split_check import refine_problem, run_split_check, split_check_problem
from .state import InRecord, RunRecord
from .validation import ReplyRules

__all__ = ["ClusteringOptions", "ClusteringStrategy", "Reply", "logger"]


@dataclasses.dataclass(frozen=True)
class ClusteringOptions(Options):
    """Options every clustering algorithm has: ``k``."""

    k: int = option(16, minimum=1, help="number of global clusters")


class ClusteringStrategy(Strategy):
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

    The base holds objects of one job each (see the module): ``record`` (the run's state),
    ``exchanger`` and ``summer`` (the plain exchange, and the one that sums: the secure
    exchange under secure aggregation, else the plain one), ``rules``,
    ``ledger`` and ``nodes``; :meth:`reset` makes them afresh for every run.

    The algorithm contract
    ----------------------
    An algorithm's strategy declares :attr:`Options` and overrides these hooks (Flower's
    ``Strategy`` documents its methods the same way). The client's step is the paired
    ``NumPyClient``'s ``fit`` for the phase :meth:`train_config` names.

    ``configure() -> None``
        Derive attributes from ``self.options`` once (called by ``__init__``).
    ``protocol_rounds() -> int | None``
        A fixed protocol's round count (one-shot: 1), ``None`` for an iterative one (its
        cap: ``max_rounds``).
    ``initialize(grid, timeout) -> None``
        The first model, when the clients make it: an extra exchange before round 1
        (:meth:`exchange`, :meth:`secure_exchange`). A resumed run calls
        ``reconnect(grid, round, timeout)`` instead.
    ``train_config(round) -> dict`` and ``train_arrays(round) -> list[ndarray]``
        What round ``round`` sends every sampled node (default arrays: the model).
    ``parse_payload(round, arrays) -> payload``
        Decode and check one client's upload (raise ``ValueError``: the reply is dropped,
        its reason logged). What an upload claims (its counts, means, feature count), for
        the rules every reply keeps, the payload says itself
        (:class:`~flwr_clustering.algorithms.upload.Upload`'s ``claims()``).
    ``aggregate_payloads(round, replies) -> ndarray``
        The next model from the valid replies (:class:`~flwr_clustering.replies.Reply`,
        by client id), by calling the algorithm's server step.
    ``aggregate_sums(round, totals) -> ndarray``
        The same from a secure round's totals (only algorithms whose spec declares a
        secure mode).
    ``converged(round) -> bool``
        Whether to stop after ``round`` (default: one-shot); ``shift(previous, new)`` is
        how far a round moved the model.
    ``model_record() -> ArrayRecord``
        The final model (default: ``centroids``); ``artifacts()`` extra result files.
    ``state_dict() -> dict`` / ``load_state_dict(state)``
        Between-round state beyond the base's, for the checkpoint and ``resume``.

    Optional, as a protocol needs: ``prepare_round`` (an exchange before every round),
    ``round_info``, ``evaluation_extras``, ``diagnostic_extras``, ``result_summary``,
    ``describe`` (numbers for the history and results), ``pooled_labels``,
    ``user_models``, ``scored_user_models``, ``plot_features`` (a model that labels rows
    its own way), ``raw_rows_option``, ``partial_rows_problem``,
    ``secure_aggregation_problem``, ``secure_round`` (what a configuration cannot do).
    Protocols of more than one message per round (DGC, KDC, DeepFeCA) also override
    Flower's :meth:`configure_train`/:meth:`aggregate_train`.
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
        poll_interval: float = DEFAULT_POLL_INTERVAL,
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
        refuse_k_auto(type(self).__name__, k if k is not None else option_kwargs.get("k"))
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
        # every rule of these options, in the words the App's run config uses
        run = RunOptions(
            min_nodes=min_nodes, fraction=fraction, seed=seed, round_timeout=round_timeout,
            poll_interval=poll_interval, node_wait_timeout=node_wait_timeout, evaluate=evaluate,
            evaluate_every_round=evaluate_every_round, early_stop=early_stop,
            secure_aggregation=secure_aggregation, secagg_threshold=secagg_threshold,
            secagg_keys=secagg_keys, scaling=scaling, missing=missing, unit_check=unit_check,
            categorical_weight=categorical_weight, robust_scaling=robust_scaling,
            split_check=split_check, refine_rounds=refine_rounds)
        self.options = options
        for name, value in options.as_dict().items():
            setattr(self, name, value)
        self.min_nodes, self.fraction, self.seed = run.min_nodes, run.fraction, run.seed
        self.tol = float(getattr(options, "tol", -1.0))
        self.round_timeout, self.node_wait_timeout = run.round_timeout, run.node_wait_timeout
        self.poll_interval = run.poll_interval
        self.evaluate, self.evaluate_every_round = run.evaluate, run.evaluate_every_round
        self.early_stop, self.secure_aggregation = run.early_stop, run.secure_aggregation
        self.secagg_threshold, self.secagg_keys = run.secagg_threshold, run.secagg_keys
        self.split_check, self.refine_rounds = run.split_check, run.refine_rounds
        self.feature_options = FeatureOptions.from_values(run.scaling, feature_columns,
                                                          index_column, categorical_columns,
                                                          run.missing, run.unit_check,
                                                          run.categorical_weight,
                                                          datetime_columns, run.robust_scaling)
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
                             f"refine-rounds applies to {registry.listing('refine')}")
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

    #: Appended to the refusal of a ``k`` above the federation's rows.
    k_hint: str = ""

    # -- the run's state: a RunRecord; these attributes are its fields -------------------
    rng = InRecord()
    centroids = InRecord()
    centroid_history = InRecord()
    history = InRecord()
    final_metrics = InRecord()
    n_features = InRecord()
    last_shift = InRecord()
    num_rounds = InRecord()
    stopped = InRecord()
    training_round = InRecord()
    feature_transform = InRecord()
    feature_summary = InRecord()
    robust_set_aside = InRecord()
    evaluation_stats = InRecord()
    split_result = InRecord()
    run_warnings = InRecord()
    diagnostics = InRecord()
    warnings = InRecord()

    def reset(self) -> None:
        """Start a run afresh (called by ``__init__`` and at the start of :meth:`start`).

        A new :class:`~flwr_clustering.strategies.state.RunRecord` (the generators from
        ``seed``), :class:`~flwr_clustering.strategies.ledger.Ledger`,
        :class:`~flwr_clustering.replies.NodeBook` and
        :class:`~flwr_clustering.strategies.validation.ReplyRules`, and the exchanges
        built on them (:attr:`exchanger`; :attr:`summer`, the secure exchange under secure
        aggregation, else the plain one).
        """
        self.record = RunRecord.new(self.seed, getattr(self, "pre_run_warnings", []))
        self.record.num_rounds = self.max_rounds
        self.ledger = Ledger()
        self.ledger.before_run = list(getattr(self, "pre_run_ledger", []))
        self.nodes = NodeBook()
        self.rules = ReplyRules()
        self._expect_stats = True
        #: the nodes in the last secure evaluation's totals
        self._secure_evaluated: set[int] = set()
        #: the last evaluation's replies that carried the split check's sums
        self._split_replies: list[Reply] = []
        self._start_exchanges(self.round_timeout)

    def _start_exchanges(self, timeout: float) -> None:
        """The run's exchanges, with ``timeout`` (chosen once per run: plain, or secure)."""
        self.exchanger = Exchange(
            seed=self.seed, min_nodes=self.min_nodes, fraction=self.fraction,
            node_wait_timeout=self.node_wait_timeout, timeout=timeout,
            sample_rng=self.record.sample_rng, nodes=self.nodes, ledger=self.ledger,
            view=self._view, check=self.check_reply, rows_of=self.rules.rows_of,
            counts_of=self.payload_counts, features_of=self.payload_features,
            k_hint=self.k_hint)
        self.summer = (SecureExchange(self.exchanger, threshold=self.secagg_threshold,
                                      keys=self.secagg_keys, phases=self.secure_phases())
                       if self.secure_aggregation else self.exchanger)

    def secure_phases(self) -> dict[str, str | None]:
        """The phases this algorithm sends under another name securely (its spec's)."""
        try:
            return dict(registry.get(self.name).can.secure_phases)
        except ValueError:  # a strategy no spec declares: every phase keeps its name
            return {}

    def _view(self) -> RunView:
        """What the exchange reads of the run (a ``RunView``)."""
        transform = self.record.feature_transform
        d = len(transform.features) if transform is not None else self.record.n_features
        k = getattr(self, "k", None)
        C = self.record.centroids
        return RunView(features_json=self.record.feature_json,
                       d=None if d is None else int(d), n_features=self.record.n_features,
                       k=int(k) if isinstance(k, int | np.integer) else None,
                       model=tuple(int(v) for v in np.shape(C)) if np.ndim(C) == 2 else None)

    def state_dict(self) -> dict[str, Any]:
        """The run state after a round: what :meth:`load_state_dict` needs to continue.

        The record's (:meth:`~flwr_clustering.strategies.state.RunRecord.state_dict`),
        the ledger's and the reply rules' state dicts in one dict; subclasses with more
        between-round state extend it (and :meth:`load_state_dict`). The values are the
        run's own objects, not copies: serialise the dict before the next round.
        """
        return {**self.record.state_dict(), **self.ledger.state_dict(),
                **self.rules.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the run state of :meth:`state_dict` (after :meth:`reset`)."""
        self.record.load_state_dict(state)
        self.ledger.load_state_dict(state)
        self.rules.load_state_dict(state, self.record.feature_transform)

    def adopt_model(self, model) -> np.ndarray:
        """Make ``model`` the run's model (float64), after a train or a secure round.

        Its shift from the previous model (:meth:`shift`) goes in ``last_shift``, the
        model in ``centroid_history``.
        """
        new = np.asarray(model, dtype=np.float64)
        return self.record.adopt_model(new, self.shift(self.record.centroids, new))

    # -- the exchange (messages, node identity, reply collection) ------------------------
    @property
    def client_of(self) -> dict[int, int]:
        """``{node id: client id}``, learned from the replies of the run so far."""
        return self.nodes.client_of

    def who(self, node: int) -> str:
        """``"client 3 (node 123)"``, or ``"node 123"`` while its client id is unknown."""
        return self.nodes.who(node)

    def wait_for_nodes(self, grid: Grid, *, settle: float = 0.0) -> list[int]:
        """Block until ``min_nodes`` nodes are connected (:meth:`Exchange.wait_for_nodes`)."""
        return self.exchanger.wait_for_nodes(grid, settle=settle)

    def sample_nodes(self, grid: Grid) -> list[int]:
        """The nodes of a round, drawn with the run's seeded sampling generator."""
        return self.exchanger.sample_nodes(grid)

    def records(self, arrays_list, config: dict[str, Any]) -> dict[str, Any]:
        """A message's content, with the federation's features (:meth:`Exchange.records`)."""
        return self.exchanger.records(arrays_list, config)

    message = staticmethod(Exchange.message)

    def _messages(self, server_round, arrays_list, config, grid, message_type) -> list[Message]:
        return self.exchanger.broadcast(server_round, arrays_list, config, grid, message_type)

    def sent(self, messages: list[Message], timeout: float | None = None) -> list[Message]:
        """Note where ``messages`` go, for :meth:`collect` (:meth:`Exchange.sent`)."""
        return self.exchanger.sent(messages, timeout)

    def exchange(self, grid: Grid, server_round: int, phase: str,
                 arrays: list[np.ndarray] | tuple = (), config: dict[str, Any] | None = None,
                 **options: Any) -> Collected:
        """Send one phase of the protocol; the valid replies by client id, and who is absent.

        :meth:`Exchange.send <flwr_clustering.strategies.exchange.Exchange.send>`'s call
        (``per_node``, ``message_type``, ``parse``, ``min_replies``, ``timeout``).
        """
        return self._adopt(self.exchanger.send(grid, server_round, phase, arrays, config,
                                               **options))

    def collect(self, server_round: int, replies, parse=None, kind: str = "train",
                min_replies: int | None = None) -> Collected:
        """Decode, check and order the replies of the messages last sent.

        :meth:`Exchange.collect <flwr_clustering.strategies.exchange.Exchange.collect>`.
        """
        return self._adopt(self.exchanger.collect(server_round, replies, parse, kind,
                                                  min_replies))

    def _adopt(self, collected: Collected) -> Collected:
        """Take the feature dimension an exchange agreed on; return what it collected."""
        if collected.n_features is not None:
            self.record.n_features = collected.n_features
        return collected

    def identify_clients(self, grid: Grid, server_round: int,
                         timeout: float | None = None) -> Collected:
        """Ask every connected node which client it holds (:meth:`Exchange.identify_clients`)."""
        return self._adopt(self.exchanger.identify_clients(grid, server_round, timeout))

    def secure_exchange(self, grid: Grid, server_round: int, phase: str,
                        arrays: list[np.ndarray] | tuple = (),
                        config: dict[str, Any] | None = None, *,
                        timeout: float | None = None):
        """One exchange summed under secure aggregation; return its ``SecureSum``.

        :meth:`SecureExchange.send <flwr_clustering.secure.exchange.SecureExchange.send>`.
        """
        if not self.summer.sums_only:
            raise RuntimeError(f"{self.name}: secure_exchange without secure aggregation")
        collected = self._adopt(self.summer.send(grid, server_round, phase, arrays, config,
                                                 timeout=timeout))
        return collected.totals

    def sum_phase(self, grid: Grid, server_round: int, phase: str,
                  arrays: list[np.ndarray] | tuple = (), config: dict[str, Any] | None = None,
                  *, parts, **options: Any) -> Collected:
        """One phase whose statistics the server needs only summed over the clients.

        Sent through :attr:`summer`, chosen once per run: under secure aggregation the
        server learns only the federation's totals; else the plain exchange sums each
        valid reply's ``parts(reply)`` in client-id order. Either way the sums are in the
        returned ``Collected.totals`` (``sums``, ``nodes``); the plain exchange's replies
        are in the list too (a secure one has none). ``options`` are the plain exchange's
        (``parse``, ``min_replies``, ``timeout``; a secure exchange reads only ``timeout``).
        """
        name = self.summer.phase(phase)
        if name is None:
            raise RuntimeError(f"{self.name}: phase {phase!r} cannot go through this run's "
                               "exchange (its spec's secure_phases)")
        return self._adopt(self.summer.send(grid, server_round, name, arrays, config,
                                            parts=parts, **options))

    # -- what an upload claims, and the rules a reply keeps ------------------------------
    def payload_counts(self, payload: Any) -> np.ndarray | None:
        """The row counts an upload claims (``None``: none; the ledger's ``min-count``).

        Read from the upload (:class:`~flwr_clustering.algorithms.upload.Upload`):
        :meth:`check_reply` refuses counts that are negative or sum to more than the rows
        the client reported (``num-examples``).
        """
        return claims_of(payload).counts

    def payload_means(self, payload: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """The local means an upload claims and the rows behind each (``None``: none)."""
        return claims_of(payload).means_and_rows()

    def payload_features(self, payload: Any) -> int | None:
        """The feature dimension a payload reveals (``None``: none)."""
        return claims_of(payload).features

    def check_reply(self, kind: str, client_id: int, metrics: dict[str, Any], payload: Any,
                    stats: dict[str, Any]) -> None:
        """Refuse a reply that breaks the run's rules (``ValueError``).

        :meth:`ReplyRules.check <flwr_clustering.strategies.validation.ReplyRules.check>`
        with what the upload claims (:meth:`payload_counts`, :meth:`payload_means`) and
        the run's features, model and ``k``.
        """
        view = self._view()
        self.rules.check(kind, client_id, metrics, stats,
                         counts=None if payload is None else self.payload_counts(payload),
                         means=None if payload is None else self.payload_means(payload),
                         transform=self.record.feature_transform, model=view.model,
                         k=getattr(self, "k", None))

    def privacy_ledger(self) -> dict[str, Any]:
        """What the clients sent in this run, as the server received it (``privacy.json``).

        :meth:`Ledger.report <flwr_clustering.strategies.ledger.Ledger.report>` of the
        run's ledger.
        """
        return self.ledger.report(secure_aggregation=self.summer.sums_only,
                                  privacy_threshold=getattr(self, "privacy_threshold", None),
                                  raw_rows_setting=self.raw_rows_option())

    def raw_rows_option(self) -> str | None:
        """The setting of this run that sends raw rows, if any (``"init='paper'"``).

        The App stops before round 1 when a node refuses raw rows (node config
        ``allow-raw-rows``) and this is not ``None``; the clients refuse the step anyway.
        """
        return None

    @property
    def secure_totals(self) -> list[dict[str, Any]]:
        """One entry per secure exchange: what the server learned (the ledger's)."""
        return self.ledger.secure_totals

    @property
    def run_absent(self) -> dict[str, str]:
        """``{client: reason}`` of every client without a valid reply in the run."""
        return self.nodes.run_absent

    @run_absent.setter
    def run_absent(self, value: dict[str, str]) -> None:
        self.nodes.run_absent = dict(value)

    @property
    def client_rows(self):
        """The reply rules' row counts (:attr:`ReplyRules.client_rows`)."""
        return self.rules.client_rows

    @property
    def client_sums(self):
        """Each client's declared per-feature sums (:attr:`ReplyRules.client_sums`)."""
        return self.rules.client_sums

    @property
    def client_moments(self):
        """The bounds of each client's means (:attr:`ReplyRules.client_moments`)."""
        return self.rules.client_moments

    # -- the round loop (Flower's Strategy API) -----------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """Build one train message per sampled node (Flower Strategy API)."""
        cfg = {
            **dict(config or {}),
            **self.train_config(server_round),
            "seed": self.seed,
            "evaluate": self.evaluate,
        }
        return self._messages(
            server_round, self.train_arrays(server_round), cfg, grid, MessageType.TRAIN
        )

    def aggregate_train(
        self, server_round: int, replies
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate replies, aggregate them into new centroids (Flower Strategy API)."""
        replies = list(replies)
        valid = self.collect(server_round, replies, lambda a: self.parse_payload(server_round, a))
        stats = [r.stats for r in valid if "sse" in r.stats]
        if stats and self.history:
            # Train replies of round r evaluate the model broadcast in round r, i.e. the
            # result of round r - 1 (the paper's scoring, no extra message).
            self.history[-1]["metrics"] = aggregate_evaluation_stats(stats)
        new = self.adopt_model(self.aggregate_payloads(server_round, valid))
        record = {
            "round": server_round,
            "clients": len(valid),
            "dropped": len(replies) - len(valid),
            "num-centroids": int(len(new)),
            "shift": self.last_shift,
            **self.round_info(server_round, valid),
        }
        if valid.absent:  # the nodes asked that sent no valid reply, and why
            record["absent"] = [
                {"client": self.client_of.get(node), "node": node, "reason": why}
                for node, why in valid.absent.items()]
        # clients that withheld their reply under the privacy threshold ("dropped" counts
        # every reply without a valid payload; the reasons are in ``diagnostics["absent"]``)
        withheld = sum("privacy" in why for why in valid.absent.values())
        if withheld:
            record["withheld"] = int(withheld)
        if any("withheld" in r.metrics for r in valid):  # clients that report it (FeCA)
            record["withheld-centroids"] = int(sum(int(r.metrics.get("withheld", 0))
                                                   for r in valid))
        self.history.append(record)
        logger.info(
            "round %d: %d clients, %d centroids, shift %.3g",
            server_round, len(valid), len(new), self.last_shift,
        )
        metrics = {k: v for k, v in record.items() if isinstance(v, int | float) and v is not None}
        return self.model_record(), MetricRecord(
            {k: (v if np.isfinite(v) else -1.0) for k, v in metrics.items()}
        )

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """Build one evaluate message per sampled node carrying the current centroids.

        :meth:`start` puts ``final`` (the last message of the run: clients keep the model
        and label their rows) and ``evaluate`` (reply with statistics) in ``config``.
        """
        if self.centroids is None:
            return []
        return self._messages(
            server_round, [self.centroids], dict(config or {}), grid, MessageType.EVALUATE
        )

    def aggregate_evaluate(self, server_round: int, replies) -> MetricRecord | None:
        """Aggregate the clients' additive statistics into exact global metrics.

        A reply without the clustering statistics (``num-examples``, ``sse``,
        ``silhouette-sum``; e.g. from a user's own ``@app.evaluate()`` handler that sends
        only a loss) is left out of the metrics with a warning. Returns ``None`` when no
        reply carries statistics (e.g. the final message of a run with ``evaluate=False``).
        """
        valid = self.collect(server_round, replies, kind="evaluate")
        # the split check's sums of a final evaluation that asked for them: kept for the
        # check, out of the evaluation's statistics
        split = SPLIT_CHECK_KEYS[SPLIT_SCATTER_PHASE]
        self._split_replies = [r for r in valid if all(key in r.stats for key in split)]
        valid = [dataclasses.replace(r, stats={k: v for k, v in r.stats.items()
                                               if k not in split and k != SPLIT_WITHHELD_KEY})
                 for r in valid]
        with_stats = []
        for r in valid:
            missing = [key for key in EVALUATION_STATS if key not in r.stats]
            if not missing:
                with_stats.append(r)
            elif self._expect_stats:
                logger.warning(
                    "round %d evaluate: client %d sent no clustering statistics (lacks %s); "
                    "left out of the metrics", server_round, r.client_id, missing)
        if not with_stats:
            self.evaluation_stats = []  # the diagnostics must not read an older evaluation
            return None
        metrics = aggregate_evaluation_stats([r.stats for r in with_stats])
        metrics.update(self.evaluation_extras(with_stats))
        self.evaluation_stats = [r.stats for r in with_stats]
        if self.history:
            self.history[-1]["metrics"] = metrics
        self.final_metrics = metrics
        logger.info("round %d evaluation: %s", server_round, format_metrics(metrics))
        return MetricRecord({k: float(v) for k, v in metrics.items()})

    def initial_centroids(self, initial_arrays: ArrayRecord | None) -> np.ndarray | None:
        """The starting centroids in ``initial_arrays`` (Flower's ``start`` argument).

        The array under ``"centroids"``, else the only array of the record whatever its
        key (``ArrayRecord([C0])``, FedAvg's usual form, has key ``"0"``); ``None`` for an
        empty record. Several arrays and none named ``"centroids"`` is an error.
        """
        if initial_arrays is None or len(initial_arrays) == 0:
            return None
        if "centroids" in initial_arrays:
            array = initial_arrays["centroids"]
        elif len(initial_arrays) == 1:
            array = next(iter(initial_arrays.values()))
        else:
            raise ValueError(
                f"initial_arrays has {len(initial_arrays)} arrays "
                f"({', '.join(map(repr, initial_arrays))}) and none named 'centroids': pass "
                "the initial centroids alone (ArrayRecord([C0])) or under the key 'centroids'")
        C = np.asarray(array.numpy(), dtype=np.float64)
        if C.ndim != 2 or not np.isfinite(C).all():
            raise ValueError(f"the initial centroids must be a finite 2-D array, got shape "
                             f"{C.shape}")
        return C

    def evaluation_config(self, config: ConfigRecord | None = None, *, final: bool
                          ) -> ConfigRecord:
        """An ``EVALUATE`` exchange's config: ``config``, ``final``, ``evaluate``, the threshold.

        A per-round evaluation always asks for statistics; the final message (the model's
        delivery to every node) asks for them only with ``evaluate``. Sets what
        :meth:`aggregate_evaluate` expects back.
        """
        self._expect_stats = (self.evaluate or not final) and not self.summer.sums_only
        # the final evaluation also asks for the per-cluster spreads (the cluster profile);
        # the run's minimum count withholds a small cluster's sums, as in every phase
        return ConfigRecord({**dict(config or {}), "final": final,
                             "evaluate": self._expect_stats,
                             "profile": bool(final and self._expect_stats),
                             "privacy-threshold": int(getattr(self, "privacy_threshold", 2))})

    def scatter_in_final_evaluation(self) -> bool:
        """Whether the split check's ``split-scatter`` sums ride in the final evaluation.

        One exchange instead of two, with the same sums from the same nodes: only when the
        check cannot change the model (``refine_rounds=0``), can run on it, the final
        evaluation sends every node the centroids alone (the base's
        :meth:`configure_evaluate`) and the server sees each reply (not under secure
        aggregation, whose check sums each phase in a secure exchange). With ``fraction``
        < 1 the nodes are the same: the check restores the sampling generator, so the
        final evaluation always asked the nodes of ``split-scatter``.
        """
        return bool(self.split_check and not self.refine_rounds
                    and not self.summer.sums_only
                    and type(self).configure_evaluate is ClusteringStrategy.configure_evaluate
                    and split_check_problem(self) is None)

    def _client_evaluation(self, grid: Grid, server_round: int, arrays: ArrayRecord,
                           evaluate_config: ConfigRecord | None, *, final: bool,
                           timeout: float, split_scatter: bool = False
                           ) -> MetricRecord | None:
        """One ``EVALUATE`` exchange (per round, or the final model's delivery).

        Under secure aggregation the statistics come from :meth:`secure_evaluation`, and
        only the final model goes out in an ``EVALUATE`` message (without statistics).
        With ``split_scatter`` the message also asks for the split check's first sums
        (:meth:`scatter_in_final_evaluation`), kept for the check.
        """
        self._split_replies = []
        if self.summer.sums_only:
            metrics = None
            # the secure evaluation of the final model delivers it too when it reaches
            # every node (no sampling; the base's final message: the centroids alone)
            delivers = (final and self.exchanger.fraction >= 1.0 and type(self)
                        .configure_evaluate is ClusteringStrategy.configure_evaluate)
            self._secure_evaluated = set()
            if self.secure_evaluate and self.centroids is not None:
                cfg = {**dict(evaluate_config or {}), "profile": bool(final),
                       **({"final": True} if delivers else {})}
                metrics = self.secure_evaluation(grid, server_round, ConfigRecord(cfg),
                                                 timeout)
            if delivers and self._secure_evaluated and self._secure_evaluated >= set(
                    self.exchanger.wait_for_nodes(grid)):
                logger.info("round %d: every node received the final model in the secure "
                            "evaluation", server_round)
            elif final:
                cfg = self.evaluation_config(evaluate_config, final=True)
                messages = self.configure_evaluate(server_round, arrays, cfg, grid)
                if messages:
                    self.aggregate_evaluate(server_round, list(grid.send_and_receive(
                        messages, timeout=timeout)))
            if metrics is not None:  # (the final delivery above must not clear them)
                self.evaluation_stats = [self._secure_stats]
                self.final_metrics = metrics
                if self.history:
                    self.history[-1]["metrics"] = metrics
            return None if metrics is None else MetricRecord(
                {k: float(v) for k, v in metrics.items()})
        cfg = self.evaluation_config(evaluate_config, final=final)
        if split_scatter:
            cfg = ConfigRecord({**dict(cfg), SPLIT_IN_EVALUATION_KEY: True})
        messages = self.configure_evaluate(server_round, arrays, cfg, grid)
        if not messages:
            return None
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        return self.aggregate_evaluate(server_round, replies)

    def finish_training(self, grid: Grid, server_round: int, timeout: float) -> bool:
        """After the last round, before the split check and the final evaluation.

        Returns whether the run's model changed. The default does nothing (``False``); a
        search over candidate models scores them and makes the chosen one the run's model
        here (:mod:`~flwr_clustering.strategies.choose_k`).
        """
        return False

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn=None,
        on_round=None,
        resume: dict[str, Any] | None = None,
        should_stop=None,
    ) -> Result:
        """Run the protocol, with the contract of Flower's ``Strategy.start``.

        Round ``r`` of ``num_rounds``: the train exchange (:meth:`configure_train`,
        :meth:`aggregate_train`); a federated evaluation when ``evaluate_every_round``;
        ``evaluate_fn(r, arrays)``. ``evaluate_fn(0, initial_arrays)`` runs before round 1.
        After the last round every node receives the final model in an ``EVALUATE``
        message with ``final=True`` (statistics only with ``evaluate``), so that clients
        can label their own rows.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid of the ServerApp.
        initial_arrays : ArrayRecord, optional
            Starting centroids: the array under ``"centroids"``, or the record's only
            array whatever its key (:meth:`initial_centroids`). Algorithms that initialise on
            the clients (FKM's default) do not need them.
        num_rounds : int, optional
            Number of rounds (default ``max_rounds``). With ``early_stop`` (the default) the
            run stops earlier when the algorithm converges; the log says which. A fixed
            protocol accepts only its own round count.
        timeout : float, optional
            Seconds to wait for the replies of a round; defaults to ``round_timeout``.
        train_config, evaluate_config : ConfigRecord, optional
            Extra configuration merged into the messages.
        evaluate_fn : callable, optional
            ``evaluate_fn(round, arrays) -> MetricRecord | None``, a server-side
            evaluation before round 1 (round 0) and after every round.
        on_round : callable, optional
            ``on_round(strategy, round)``, called after every completed round (its
            aggregation, its evaluations and ``evaluate_fn``), with ``strategy.stopped``
            true after the last one: the App writes the round's files and checkpoint
            (:meth:`state_dict`) here. An exception in it ends the run.
        resume : dict, optional
            A :meth:`state_dict` of an interrupted run of the same configuration: the run
            continues with the next round, skipping :meth:`initialize` and the round-0
            ``evaluate_fn`` (their results are in the state), after :meth:`reconnect`
            (which finds nodes that came back under new node ids); ``num_rounds``
            defaults to the state's. Only for a :attr:`resumable` strategy.
        should_stop : callable, optional
            ``should_stop(round, result) -> bool``, Flower 1.43's early stop: called at the
            end of every round that is not already the last (after its evaluations and
            ``evaluate_fn``), with the results so far. ``True`` makes that round the last:
            the model is finished and delivered to every node as after the last round
            (``evaluate_fn`` runs again only if that changed the model).

        Returns
        -------
        flwr.serverapp.strategy.Result
            ``arrays`` (the model, :meth:`model_record`), per-round train info, federated
            evaluation metrics by round, and ``evaluate_fn``'s metrics by round.

        Raises
        ------
        ValueError
            If ``num_rounds < 1``, does not fit a fixed protocol, ``initial_arrays``
            holds several arrays without ``"centroids"``, or ``resume`` is given to a
            strategy that cannot resume or holds a finished run.

        Notes
        -----
        The progress (waiting for nodes, ``[ROUND r/N]``, the end, warnings) reaches the
        console as ``FedAvg``'s does, through Flower's console handler, unless the program
        configured logging itself (:func:`flwr_clustering.log.show_progress`).
        """
        show_progress()
        fixed = self.protocol_rounds()
        if num_rounds is not None:
            if isinstance(num_rounds, bool) or int(num_rounds) != num_rounds:
                raise ValueError(f"num_rounds must be an integer, got {num_rounds!r}")
            if int(num_rounds) < 1:
                raise ValueError(f"num_rounds must be at least 1, got {num_rounds}")
            if fixed is not None and int(num_rounds) != fixed:
                raise ValueError(
                    f"{type(self).__name__} is a fixed protocol of {fixed} round(s); "
                    f"num_rounds={num_rounds} does not fit (leave it out)")
        self.reset()
        # replies pulled every poll_interval s (Flower's send_and_receive waits 3 s)
        grid = FastPulls.wrap(grid, self.poll_interval)
        timeout = self.round_timeout if timeout is None else float(timeout)
        self._start_exchanges(timeout)  # chosen once per run: plain, or secure as well
        first_round = 1
        if resume is not None:
            if not self.resumable:
                raise ValueError(f"{type(self).__name__} cannot resume a run: only iterative "
                                 "algorithms keep their whole state in a checkpoint")
            self.load_state_dict(resume)
            first_round = int(resume["round"]) + 1
            if num_rounds is None:
                num_rounds = self.num_rounds
            if self.stopped or first_round > int(num_rounds):
                raise ValueError(f"nothing to resume: the run ended at round "
                                 f"{first_round - 1} of {num_rounds}")
        num_rounds = self.max_rounds if num_rounds is None else int(num_rounds)
        self.num_rounds = num_rounds
        initial = None if resume is not None else self.initial_centroids(initial_arrays)
        if initial is not None:
            self.centroids = initial
        self.summary()
        stop_rule = ("stops early when converged" if self.early_stop and fixed is None
                     and num_rounds > 1 else "runs every round")
        logger.info("%s: %d round(s) (%s); %s", self.name, num_rounds,
                    "the protocol's" if fixed is not None else "num_rounds", stop_rule)
        t0 = time.monotonic()
        #: the training round under way (0: before round 1, the checks and round-0 phases)
        self.training_round = 0
        if resume is None:  # a resumed run keeps the features of its checkpoint
            prepare_features(self, grid, timeout)
        result = Result()
        arrays = initial_arrays if initial_arrays is not None else ArrayRecord()
        if resume is not None:  # initialize and round 0 ran before the interruption
            arrays = self.model_record()
            logger.info("%s: resuming after round %d of %d", self.name, first_round - 1,
                        num_rounds)
        elif evaluate_fn is not None:
            server_metrics = evaluate_fn(0, arrays)
            if server_metrics is not None:
                result.evaluate_metrics_serverapp[0] = server_metrics
                logger.info("[ROUND 0/%d] server evaluation: %s", num_rounds,
                            format_metrics(dict(server_metrics)))
        if resume is None:
            self.initialize(grid, timeout)
        else:  # the nodes may have reconnected under new node ids
            self.reconnect(grid, first_round, timeout)
        for rnd in range(first_round, num_rounds + 1):
            logger.info("[ROUND %d/%d]", rnd, num_rounds)
            self.training_round = rnd
            t_round = time.monotonic()
            self.prepare_round(rnd, grid, timeout)
            if self.summer.sums_only and self.secure_round(rnd):
                arrays, train_metrics = self.secure_train(rnd, grid, train_config, timeout)
            else:
                replies = grid.send_and_receive(
                    self.configure_train(rnd, arrays, train_config, grid), timeout=timeout
                )
                arrays, train_metrics = self.aggregate_train(rnd, list(replies))
            self.history[-1]["seconds"] = time.monotonic() - t_round
            result.arrays = arrays
            result.train_metrics_clientapp[rnd] = train_metrics
            stop = rnd == num_rounds
            if not stop and self.early_stop and self.converged(rnd):
                logger.info("[ROUND %d/%d] converged: stopping early (early_stop=True)",
                            rnd, num_rounds)
                stop = True
            evaluated = False
            if not stop and should_stop is not None:
                # Flower's should_stop sees the round's evaluations: they run first
                if self.evaluate_every_round:
                    self._client_evaluation(grid, rnd, arrays, evaluate_config, final=False,
                                            timeout=timeout)
                self._server_evaluation(evaluate_fn, rnd, num_rounds, arrays, result)
                evaluated = True
                if should_stop(rnd, result):
                    logger.info("[ROUND %d/%d] should_stop: stopping early", rnd, num_rounds)
                    stop = True
            changed = merged = False
            if stop:
                changed = self.finish_training(grid, rnd, timeout)
                # the split check's first sums ride in the final evaluation when the check
                # cannot change the model; else the check (and refinement) runs first
                merged = self.scatter_in_final_evaluation()
                if not merged:
                    self._split_check(grid, rnd, timeout)
                changed = changed or bool(self.refine_rounds)
                if changed:  # the chosen or refined model is the round's
                    arrays = result.arrays = self.model_record()
            if stop or (self.evaluate_every_round and not evaluated):
                self._client_evaluation(grid, rnd, arrays, evaluate_config, final=stop,
                                        timeout=timeout, split_scatter=merged)
            if merged:
                self._split_check(grid, rnd, timeout, scatter=self._split_replies)
            if stop:
                self.diagnose()
            if not evaluated or changed:
                self._server_evaluation(evaluate_fn, rnd, num_rounds, arrays, result)
            self.stopped = stop
            if on_round is not None:
                on_round(self, rnd)
            if stop:
                break
        last = self.history[-1]["round"]
        for record in self.history:
            if "metrics" in record:
                result.evaluate_metrics_clientapp[record["round"]] = MetricRecord(
                    {k: float(v) for k, v in record["metrics"].items()}
                )
        result.arrays = self.model_record()
        self.seconds = time.monotonic() - t0
        logger.info("%s finished: %d of %d rounds in %.2f s", self.name, last, num_rounds,
                    self.seconds)
        return result

    def _server_evaluation(self, evaluate_fn, rnd: int, num_rounds: int, arrays: ArrayRecord,
                           result: Result) -> None:
        """``evaluate_fn(rnd, arrays)``, logged and kept in the result and the history."""
        if evaluate_fn is None:
            return
        server_metrics = evaluate_fn(rnd, arrays)
        if server_metrics is not None:
            result.evaluate_metrics_serverapp[rnd] = server_metrics
            self.history[-1]["server-metrics"] = dict(server_metrics)
            log_server_evaluation(rnd, num_rounds, dict(server_metrics),
                                  self.history[-1].get("metrics"))

    # -- secure aggregation's rounds ----------------------------------------------------
    #: Whether the secure evaluation's row sums and residual sums give the pooled total
    #: sum of squares and the Lloyd-step check (not for rows with unobserved features).
    secure_row_moments = True

    def secure_round(self, server_round: int) -> bool:
        """Whether round ``server_round`` runs under secure aggregation (with the option).

        Every round by default; a protocol whose first round needs individual uploads
        (the masked Algorithm 1's grouping) runs that one in the clear and says so.
        """
        return True

    def secure_aggregation_problem(self) -> str | None:
        """Why this configuration cannot run under secure aggregation (``None``: it can).

        Secure aggregation gives the server only the sum of the clients' replies; a
        server step that needs each client's own upload cannot use it.
        """
        return (f"{self.name}'s server step needs each client's own upload, which secure "
                f"aggregation hides from it; secure modes: {registry.secure_modes()}")

    def aggregate_sums(self, server_round: int, totals) -> np.ndarray:
        """The new model from a secure round's totals.

        ``totals`` is a :class:`~flwr_clustering.secure.SecureSum` (its ``sums``).
        """
        raise NotImplementedError(f"{self.name} has no secure aggregation")

    def secure_train(self, server_round: int, grid: Grid, config: ConfigRecord | None,
                     timeout: float) -> tuple[ArrayRecord, MetricRecord]:
        """A training round under secure aggregation: one secure exchange, the new model."""
        cfg = {**dict(config or {}), **self.train_config(server_round), "evaluate": False}
        phase = self.summer.phase(str(cfg.pop("phase")))
        if phase is None:
            raise RuntimeError(f"{self.name}: round {server_round}'s phase cannot go "
                               "through secure aggregation (its spec's secure_phases)")
        collected = self._adopt(self.summer.send(grid, server_round, phase,
                                                 self.train_arrays(server_round), cfg,
                                                 timeout=timeout))
        totals = collected.totals
        new = self.adopt_model(self.aggregate_sums(server_round, totals))
        record = {
            "round": server_round, "clients": len(totals.nodes),
            "dropped": len(totals.failed), "num-centroids": int(len(new)),
            "shift": self.last_shift, "secure-aggregation": True,
            "sum-error-bound": totals.error_bound,
            **self.round_info(server_round, collected),
        }
        if collected.absent:
            record["absent"] = [
                {"client": self.client_of.get(node), "node": node, "reason": why}
                for node, why in collected.absent.items()]
        self.history.append(record)
        logger.info("round %d: %d clients (secure aggregation), %d centroids, shift %.3g",
                    server_round, len(totals.nodes), len(new), self.last_shift)
        metrics = {k: v for k, v in record.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        return self.model_record(), MetricRecord(
            {k: (v if np.isfinite(v) else -1.0) for k, v in metrics.items()})

    def secure_evaluation(self, grid: Grid, server_round: int,
                          config: ConfigRecord | None, timeout: float) -> dict[str, float]:
        """The federated evaluation's statistics, summed under secure aggregation.

        One secure exchange (:func:`~flwr_clustering.clients.statistics.secure_evaluation_arrays`):
        the server learns the federation's rows, SSE, silhouette sum, cluster counts, sum
        and sum of squares of the rows, per-cluster residual sums and (with ``n-classes``
        in ``config`` and labels on every client) the contingency table, never one
        client's. The metrics are :func:`~flwr_clustering.evaluation.aggregate_evaluation_stats`
        of the totals, without ``ari-client-weighted`` (it needs each client's ARI).
        """
        cfg = {k: v for k, v in dict(config or {}).items() if k not in ("phase", "seed")}
        totals = self.secure_exchange(grid, server_round, SECURE_EVALUATE_PHASE,
                                      [self.centroids], cfg, timeout=timeout)
        self._secure_evaluated = {int(n) for n in totals.nodes}
        stats, labelled = evaluation_stats(totals, profile=bool(cfg.get("profile")),
                                           row_moments=self.secure_row_moments)
        if "contingency" not in stats and len(totals.sums) > 4 + bool(cfg.get("profile")):
            logger.info("round %d secure evaluation: %d of %d clients have labels; no "
                        "contingency metrics", server_round, labelled, len(totals.nodes))
        metrics = aggregate_evaluation_stats([stats])
        metrics.pop("ari-client-weighted", None)
        self._secure_stats = stats
        logger.info("round %d evaluation (secure aggregation): %s", server_round,
                    format_metrics(metrics))
        return metrics

    # -- the end-of-run checks ---------------------------------------------------------
    def diagnose(self) -> dict[str, Any]:
        """Check the finished run for degenerate results; log and keep every anomaly.

        Called by :meth:`start` after the final federated evaluation. Everything comes
        from the model and the clients' additive statistics (counts and sums, no row):
        :func:`~flwr_clustering.strategies.diagnosis.run_diagnostics` of the run's
        :meth:`run_summary`, plus the algorithm's own (:meth:`diagnostic_extras`). Each
        anomaly is one WARNING line of the library's logger and one sentence of
        :attr:`warnings`, naming the cause and the run-config option(s) that address it
        (:attr:`advice`).

        Returns
        -------
        dict
            :attr:`diagnostics` (see :func:`~flwr_clustering.strategies.diagnosis.
            run_diagnostics`).
        """
        try:
            run = self.run_summary()
            diag = run_diagnostics(run)
            diag.update(self.diagnostic_extras(diag))
            keys = self.Options.fields_by_key()
            by_field = {f.name: key for key, f in keys.items()}
            advice = {anomaly: tuple(by_field[name] for name in names if name in by_field)
                      for anomaly, names in self.advice.items()}
            advice["split"] = (("refine-rounds",) if refine_problem(self) is None
                               else tuple(by_field[n] for n in self.advice.get("split", ())
                                          if n in by_field))
            warnings = diagnosis_warnings(diag, run, advice)
        except Exception as ex:  # noqa: BLE001 - a diagnostic must not end a finished run
            logger.exception("diagnostics failed")
            diag, warnings = {}, [f"{type(self).__name__}: the diagnostics could not be "
                                  f"computed: {type(ex).__name__}: {ex}"]
        for text in warnings:
            logger.warning("%s", text)
        warnings = [*self.record.run_warnings, *warnings]  # already logged
        self.record.diagnostics, self.record.warnings = diag, warnings
        return diag

    def run_summary(self) -> RunSummary:
        """What the end-of-run checks read of this run.

        A :class:`~flwr_clustering.strategies.diagnosis.RunSummary`.
        """
        rec = self.record
        stats = list(rec.evaluation_stats or [])
        last = int(rec.history[-1]["round"]) if rec.history else 0
        iterative = self.protocol_rounds() is None
        converged = None
        if iterative and self.tol >= 0 and rec.history:
            converged = bool(self.converged(last))
        options = self.feature_options
        transform = rec.feature_transform
        return RunSummary(
            name=type(self).__name__, model=rec.centroids, k=int(getattr(self, "k", 0) or 0),
            evaluation_stats=stats, sse=rec.final_metrics.get("sse") if stats else None,
            history=rec.history, iterative=iterative, converged=converged, tol=self.tol,
            num_rounds=int(rec.num_rounds or self.max_rounds), early_stop=self.early_stop,
            last_shift=rec.last_shift, absent=dict(self.nodes.run_absent),
            split_result=rec.split_result, transform=transform,
            categorical_weight=(options.categorical_weight if transform is not None
                                and transform.scaling == "standard" else ""))

    def diagnostic_extras(self, diagnostics: dict[str, Any]) -> dict[str, Any]:
        """The algorithm's own diagnostics (override; DGC's consensus, KDC's cores).

        Parameters
        ----------
        diagnostics : dict
            The common part (``data-scale`` among others).
        """
        return {}

    def _split_check(self, grid: Grid, server_round: int, timeout: float,
                     scatter: list[Reply] | None = None) -> None:
        """The split check and refinement (never fatal).

        Before the final evaluation, or after it with ``scatter``: the final evaluation's
        replies that carried the first sums (:meth:`scatter_in_final_evaluation`).

        The node sampling generator is restored afterwards, so that the final evaluation
        asks the nodes it would have asked without the check.
        """
        state = self.record.sample_rng.bit_generator.state
        model = self.centroids
        try:
            self.split_result = run_split_check(self, grid, server_round, timeout,
                                                scatter=scatter)
        except Exception as ex:  # noqa: BLE001 - a diagnostic must not end a finished run
            logger.warning("round %d: the split check%s failed, the model is kept as it "
                           "was: %s: %s", server_round,
                           " and refinement" if self.refine_rounds else "",
                           type(ex).__name__, ex)
            self.centroids = model
            self.split_result = {"split-check": f"failed: {type(ex).__name__}: {ex}"}
        self.record.sample_rng.bit_generator.state = state

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
        """Return extra per-round numbers for the history (override to add).

        ``replies`` are the round's valid replies; a secure round's are a
        :class:`~flwr_clustering.replies.Collected` without replies whose ``totals`` hold
        the sums.
        """
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
