"""Flower plumbing shared by every clustering strategy (layer 3).

:class:`ClusteringStrategy` owns, once: waiting for ``min_nodes``, seeded node sampling,
building per-node messages, dropping error replies and malformed payloads with a logged
reason, ordering replies by client id (so results do not depend on arrival order),
the round loop with a convergence test and a round cap, the per-round history and the
final federated evaluation. An algorithm's strategy declares its options (an
:class:`~flwr_clustering.options.Options` dataclass) and only says what to send and how to
aggregate, by calling :mod:`flwr_clustering.algorithms`.

Exchanges: :meth:`ClusteringStrategy.exchange` sends one phase's content to every sampled
node (or each node its own content) and returns the parsed, validated replies. Phases that
are not training (sizes, moments, feature counts, feature clustering) go as Flower
``QUERY`` messages; the rounds of the protocol go as ``TRAIN`` messages. A strategy's model
is the ``ArrayRecord`` of :meth:`ClusteringStrategy.model_record` (whatever arrays the
algorithm needs); fixed protocols declare their round count in
:meth:`ClusteringStrategy.protocol_rounds`. The strategy writes no file: the App (or the
caller) writes what :meth:`ClusteringStrategy.artifacts` and the history hand back
(:func:`flwr_clustering.app.results.save_results`).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from .. import diagnostics as _diagnostics
from ..algorithms.local_centroids import (
    LocalCentroids,
    RowMoments,
    check_means_within_rows,
)
from ..data.schema import FeatureTransform
from ..log import format_metrics, logger, show_progress
from ..metrics import EVALUATION_STATS, aggregate_evaluation_stats, check_evaluation_stats
from ..options import Options, option
from ..protocol import (
    CATEGORIES_PHASE,
    COLUMNS_RECORD,
    DATA_SOURCE_PHASE,
    FEATURE_MOMENTS_PHASE,
    SECURE_EVALUATE_PHASE,
)
from ..secure import SECAGG_THRESHOLD, secure_sum
from .features import FeatureOptions, prepare_features, with_features
from .split_check import refine_problem, run_split_check

__all__ = ["ClusteringOptions", "ClusteringStrategy", "Reply", "logger"]

#: How our clients' error replies start (:func:`flwr_clustering.clients.base._handle`).
_CLIENT_PREFIX = re.compile(r"client (\d+)\b")
#: The same error wrapped by Flower's legacy client runtime: "... RuntimeError('client 3: ...".
_CLIENT_WRAPPED = re.compile(r"\(['\"]client (\d+): ")


@dataclasses.dataclass(frozen=True)
class ClusteringOptions(Options):
    """Options every clustering algorithm has: ``k``."""

    k: int = option(16, minimum=1, help="number of global clusters")


@dataclass
class Reply:
    """A valid client reply, decoded.

    Attributes
    ----------
    client_id : int
        The client's stable id (partition id, else node id).
    node_id : int
        The Flower node that sent it.
    payload : Any
        What :meth:`ClusteringStrategy.parse_payload` made of the arrays.
    metrics : dict
        Scalar metrics of the reply.
    stats : dict
        Scalars and arrays together: the evaluation statistics, if any.
    columns : dict or None
        The ``columns`` record of a ``data-source`` reply (names and kinds of the client's
        columns, :func:`~flwr_clustering.clients.base.columns_record`), else ``None``.
    """

    client_id: int
    node_id: int
    payload: Any
    metrics: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Any] | None = None


def _reply_origins(sent: list[Message], replies: list[Message]) -> dict[int, int]:
    """``{id(reply): node id}``: the node each reply stands for.

    A reply normally comes from its node. An error the SuperLink makes for a node that
    stopped sending heartbeats ("Node Unavailable") comes from the SuperLink's own node id
    instead; it is traced back, through ``reply_to_message_id``, to the node its message
    was sent to, so that the lost node (and its client id) is the one named.
    """
    dst = {m.metadata.message_id: int(m.metadata.dst_node_id) for m in sent
           if m.metadata.message_id}
    destinations = set(dst.values())
    out = {}
    for msg in replies:
        node = int(msg.metadata.src_node_id)
        if msg.has_error() and node not in destinations:
            node = dst.get(msg.metadata.reply_to_message_id, node)
        out[id(msg)] = node
    return out


def ledger_entry(server_round: int, kind: str, client_id: int, msg: Message,
                 metrics: dict[str, Any]) -> dict[str, Any]:
    """What one reply carried, for the privacy ledger (see ``privacy_ledger``)."""
    arrays: list[np.ndarray] = []
    for name in ("arrays", "stats"):
        if name in msg.content:
            arrays += msg.content[name].to_numpy_ndarrays()
    return {
        "round": int(server_round), "phase": kind, "client": int(client_id),
        "floats": int(sum(a.size for a in arrays if a.dtype.kind == "f")),
        "integers": int(sum(a.size for a in arrays if a.dtype.kind in "iub")),
        "scalars": len(metrics),
        "raw-rows": int(metrics.get("raw-rows", 0)),
        "min-count": None,
    }


def _min_count(counts: np.ndarray | None, stats: dict[str, Any]) -> int | None:
    """The fewest rows behind a sum or mean of a reply (``None``: none the server sees).

    An upload's counts (:meth:`ClusteringStrategy.payload_counts`) give the rows behind
    each mean; in the evaluation statistics a residual row stands for its cluster's rows,
    and ``sse``, ``sum-x`` and the silhouette sum for all the client's rows; in the split
    check's and the refinement's sums a cluster's row stands for its rows.
    """
    found: list[float] = []
    if counts is not None:
        c = np.asarray(counts, dtype=np.float64).ravel()
        found += c[c > 0].tolist()
    if "cluster-residuals" in stats and "cluster-counts" in stats:
        R = np.asarray(stats["cluster-residuals"], dtype=np.float64)
        n = np.asarray(stats["cluster-counts"], dtype=np.float64)
        if R.ndim == 2 and len(R) == len(n):
            sent = ~np.isnan(R).all(axis=1) & (n > 0)
            found += n[sent].tolist()
    for key in ("split-counts", "refine-counts"):  # the split check's per-cluster sums
        if key in stats:
            c = np.asarray(stats[key], dtype=np.float64).ravel()
            found += c[c > 0].tolist()
    if any(k in stats for k in ("sse", "sum-x", "refine-sse")) and stats.get("num-examples"):
        found.append(float(stats["num-examples"]))
    return int(min(found)) if found else None


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
        (a level rarer than ``privacy_threshold`` folds into ``other``).
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
    #: How the model labels a row (``model.json``'s ``labelling``): the nearest centre;
    #: masked algorithms on each row's observed features; KDC its kernel, DeepFeCA its
    #: network (their own artifacts hold those models).
    labelling: str = "nearest-centroid"
    #: Per-round history series the App plots in ``training.png`` (none by default).
    curves: tuple[str, ...] = ()
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
        scaling: str | None = None,
        feature_columns: Any = None,
        index_column: str | None = None,
        categorical_columns: Any = None,
        split_check: bool = True,
        refine_rounds: int = 0,
        **kwargs: Any,
    ) -> None:
        option_kwargs, unknown = self.Options.split_kwargs(kwargs)
        if unknown:
            names = [f.name for f in dataclasses.fields(self.Options)]
            raise TypeError(f"{type(self).__name__} got unexpected argument(s) "
                            f"{sorted(unknown)}; its options are {names}")
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
        self.split_check = bool(split_check)
        if isinstance(refine_rounds, bool) or int(refine_rounds) != refine_rounds \
                or refine_rounds < 0:
            raise ValueError(f"refine_rounds must be a non-negative integer, got "
                             f"{refine_rounds!r}")
        self.refine_rounds = int(refine_rounds)
        self.feature_options = FeatureOptions.from_values(scaling, feature_columns,
                                                          index_column, categorical_columns)
        if self.secure_aggregation and self.feature_options.scaling == "minmax":
            raise ValueError("secure-aggregation=true: scaling='minmax' needs every site's "
                             "minimum and maximum (one row's value each), which secure "
                             "aggregation cannot sum: run with scaling='standard'")
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
        self.max_rounds = int(fixed if fixed is not None else options.max_rounds)
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {self.max_rounds}")
        self.reset()

    def configure(self) -> None:
        """Derive attributes from the options (override; called once by ``__init__``)."""

    def protocol_rounds(self) -> int | None:
        """The fixed number of train rounds of the protocol (``None``: iterative).

        One-shot algorithms return 1; :meth:`start` rejects a ``num_rounds`` that does not
        fit a fixed protocol.
        """
        return None

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every run state (called at the start of :meth:`start`)."""
        self.rng = np.random.default_rng(self.seed)
        self._sample_rng = np.random.default_rng([self.seed, 1])
        self.centroids: np.ndarray | None = None
        self.centroid_history: list[np.ndarray] = []
        self.history: list[dict[str, Any]] = []
        self.final_metrics: dict[str, float] = {}
        self.n_features: int | None = None
        self.last_shift = float("inf")
        self._expect_stats = True
        self._client_of: dict[int, int] = {}
        #: Warnings logged during the run (e.g. KDC's fallback choice of psi and tau);
        #: :meth:`diagnose` puts them first in :attr:`warnings`, after those the App
        #: logged before :meth:`start` (``pre_run_warnings``, e.g. identical data).
        self.run_warnings: list[str] = list(getattr(self, "pre_run_warnings", []))
        self.stopped = False
        #: What the split check (and refinement) found (:meth:`_split_check`).
        self.split_result: dict[str, Any] | None = None
        self.diagnostics: dict[str, Any] = {}
        self.warnings: list[str] = []
        #: ``{client: reason}`` of every client without a valid reply in the run (latest).
        self.run_absent: dict[str, str] = {}
        #: The clients' statistics of the last federated evaluation (counts and sums).
        self.evaluation_stats: list[dict[str, Any]] = []
        #: ``{(client id, evaluate?): rows}``: the row count (``num-examples``) of each
        #: client's first reply, which its later replies must repeat (:meth:`check_reply`).
        self.client_rows: dict[tuple[int, bool], int] = {}
        #: Each client's per-feature count, sum and sum of squares (``feature-moments``)
        #: and, in the run's space, what they allow its means (:meth:`check_reply`).
        self.client_sums: dict[int, tuple[np.ndarray, ...]] = {}
        self.client_moments: dict[int, RowMoments] = {}
        #: One entry per client reply received (valid or not): what it carried
        #: (:meth:`privacy_ledger`).
        self.ledger: list[dict[str, Any]] = []
        #: One entry per secure exchange: what the server learned (the federation's totals).
        self.secure_totals: list[dict[str, Any]] = []
        #: The federation's features and scaling (agreed before round 1), ``None`` when
        #: the rows are used as the clients hold them; ``feature_summary`` describes it.
        self.feature_transform = None
        self._feature_json: str | None = None
        self.feature_summary: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The run state after a round: what :meth:`load_state_dict` needs to continue.

        Arrays stay arrays; everything else is JSON-able (the generators' states are
        ``Generator.bit_generator.state`` dicts). Subclasses with more between-round
        state extend it (and :meth:`load_state_dict`). The values are the strategy's own
        objects, not copies: serialise the dict before the next round.

        Returns
        -------
        dict
            ``round`` (the last completed round, 0 before round 1), ``num_rounds``,
            ``stopped`` (the run ended at that round), the model and its history, the
            per-round history, the final metrics so far, ``n_features``, ``last_shift``
            and the states of the server generator (``rng``) and the sampling one.
        """
        return {
            "round": int(self.history[-1]["round"]) if self.history else 0,
            "num_rounds": int(getattr(self, "num_rounds", self.max_rounds)),
            "stopped": bool(self.stopped),
            "centroids": self.centroids,
            "centroid_history": list(self.centroid_history),
            "history": self.history,
            "final_metrics": self.final_metrics,
            "n_features": self.n_features,
            "last_shift": float(self.last_shift),
            "rng": self.rng.bit_generator.state,
            "sample_rng": self._sample_rng.bit_generator.state,
            "ledger": self.ledger,
            "secure_totals": self.secure_totals,
            "feature_transform": self._feature_json,
            "feature_summary": self.feature_summary,
            # each client's declared sums: they bound its means after a resume too
            "client_sums": {str(cid): [np.asarray(a, dtype=np.float64).tolist() for a in sums]
                            for cid, sums in getattr(self, "client_sums", {}).items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the run state of :meth:`state_dict` (after :meth:`reset`)."""
        C = state["centroids"]
        self.centroids = None if C is None else np.asarray(C)
        self.centroid_history = [np.asarray(c) for c in state["centroid_history"]]
        self.history = [dict(record) for record in state["history"]]
        self.final_metrics = dict(state["final_metrics"])
        self.n_features = None if state["n_features"] is None else int(state["n_features"])
        self.last_shift = float(state["last_shift"])
        self.rng.bit_generator.state = state["rng"]
        self._sample_rng.bit_generator.state = state["sample_rng"]
        self.ledger = [dict(e) for e in state.get("ledger", [])]
        self.secure_totals = [dict(e) for e in state.get("secure_totals", [])]
        self.num_rounds = int(state["num_rounds"])
        self.stopped = bool(state["stopped"])
        text = state.get("feature_transform")
        if text:
            self.feature_transform = FeatureTransform.from_json(str(text))
            self._feature_json = str(text)
        self.feature_summary = state.get("feature_summary")
        sums = state.get("client_sums") or {}
        self.client_sums = {int(cid): tuple(np.asarray(a, dtype=np.float64) for a in arrays)
                            for cid, arrays in sums.items()}
        transform = self.feature_transform
        self.client_moments = {
            cid: RowMoments.from_sums(*arrays, *((transform.center, transform.scale)
                                                 if transform is not None else ()))
            for cid, arrays in self.client_sums.items()}

    # ----------------------------------------------------- algorithm hooks
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
        """Return the feature dimension a payload reveals (``None``: none)."""
        return None

    def privacy_ledger(self) -> dict[str, Any]:
        """What the clients sent in this run, as the server received it (``privacy.json``).

        Returns
        -------
        dict
            ``secure-aggregation`` (false: the server saw every reply on its own),
            ``differential-privacy`` (``None``: none; so ``epsilon`` and ``delta`` are
            ``None``, meaning unbounded), ``privacy-threshold``, ``raw-rows-setting``
            (:meth:`raw_rows_option`), ``totals`` over the run, ``clients`` (the same per
            client) and ``messages``: one entry per reply received (dropped ones too) with
            its round, phase, client, ``floats`` and ``integers`` (array entries),
            ``scalars``, ``raw-rows`` (declared by the client) and ``min-count``: the fewest
            rows behind any sum or mean it carried (``None``: the reply carries no counts
            the server can check, e.g. FeCA's centroids or DGC's centres).
        """
        keys = ("floats", "integers", "scalars", "raw-rows")

        def total(entries: list[dict[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {k: int(sum(e[k] for e in entries)) for k in keys}
            out["replies"] = len(entries)
            counts = [e["min-count"] for e in entries if e.get("min-count") is not None]
            out["min-count"] = min(counts) if counts else None
            return out

        # the App's data-source exchange runs before start() (which resets the run state)
        ledger = [*getattr(self, "pre_run_ledger", []), *self.ledger]
        by_client: dict[int, list[dict[str, Any]]] = {}  # one pass: rounds x clients entries
        for e in ledger:
            by_client.setdefault(e["client"], []).append(e)
        return {
            "secure-aggregation": self.secure_aggregation,
            "secure-totals": list(getattr(self, "secure_totals", [])),
            "differential-privacy": None,
            "epsilon": None,
            "delta": None,
            "privacy-threshold": getattr(self, "privacy_threshold", None),
            "raw-rows-setting": self.raw_rows_option(),
            "totals": total(ledger),
            "clients": {str(c): total(by_client[c]) for c in sorted(by_client)},
            "messages": ledger,
        }

    def raw_rows_option(self) -> str | None:
        """The setting of this run that sends raw rows, if any (``"init='paper'"``).

        The App stops before round 1 when a node refuses raw rows (node config
        ``allow-raw-rows``) and this is not ``None``; the clients refuse the step anyway.
        """
        return None

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
                "aggregation hides from it; secure modes: fkm with server-update='lloyd', "
                "ffcm with ffcm-version=1, masked-federated")

    def aggregate_sums(self, server_round: int, totals) -> np.ndarray:
        """The new model from a secure round's totals.

        ``totals`` is a :class:`~flwr_clustering.secure.SecureSum` (its ``sums``).
        """
        raise NotImplementedError(f"{self.name} has no secure aggregation")

    def secure_round_info(self, server_round: int, totals) -> dict[str, Any]:
        """Extra per-round numbers of a secure round for the history (override to add)."""
        return {}

    def secure_exchange(self, grid: Grid, server_round: int, phase: str,
                        arrays: list[np.ndarray] | tuple = (),
                        config: dict[str, Any] | None = None, *,
                        timeout: float | None = None):
        """One exchange whose replies reach the server only as their sum (SecAgg+).

        The sampled nodes answer ``phase`` as usual; :func:`flwr_clustering.secure.secure_sum`
        masks and sums their reply arrays. Failed clients are logged (WARNING) and left in
        ``last_absent``; fewer than ``min_nodes`` contributors end the run.

        Returns
        -------
        flwr_clustering.secure.SecureSum
        """
        nodes = self.sample_nodes(grid)
        cfg = with_features(self, {**dict(config or {}), "phase": phase, "seed": self.seed})
        timeout = getattr(self, "_run_timeout", self.round_timeout) if timeout is None \
            else timeout
        totals = secure_sum(grid, nodes, list(arrays), cfg, server_round=server_round,
                            threshold=self.secagg_threshold, timeout=timeout)
        self.last_absent = {}
        for node, why in sorted(totals.failed.items()):
            self.last_absent[node] = f"failed: {why}"
            logger.warning("round %d %s (secure aggregation): %s failed: %s", server_round,
                           phase, self.who(node), why)
        if not hasattr(self, "run_absent"):
            self.run_absent = {}
        for node, why in self.last_absent.items():
            self.run_absent[self.who(node)] = f"round {server_round} {phase}: {why}"
        for node in totals.nodes:
            self.ledger.append({
                "round": int(server_round), "phase": f"{phase} (secure)",
                "client": int(self.client_of.get(node, node)), "floats": 0, "integers": 0,
                "scalars": 0, "raw-rows": 0, "min-count": None,
                "masked-bytes": int(totals.received.get(node, 0))})
        self.secure_totals.append({
            "round": int(server_round), "phase": phase, "clients": len(totals.nodes),
            "floats": int(sum(a.size for a in totals.sums)),
            "error-bound": totals.error_bound})
        if len(totals.nodes) < self.min_nodes:
            raise RuntimeError(
                f"round {server_round} {phase}: only {len(totals.nodes)} clients completed "
                f"secure aggregation, fewer than min_nodes={self.min_nodes}; failed: "
                + "; ".join(f"{self.who(n)} {why}" for n, why in self.last_absent.items()))
        logger.info("round %d %s: secure aggregation of %d clients (%d arrays summed; "
                    "each total within %.3g of the exact sum)", server_round, phase,
                    len(totals.nodes), len(totals.sums), totals.error_bound)
        return totals

    def secure_train(self, server_round: int, grid: Grid, config: ConfigRecord | None,
                     timeout: float) -> tuple[ArrayRecord, MetricRecord]:
        """A training round under secure aggregation: one secure exchange, the new model."""
        cfg = {**dict(config or {}), **self.train_config(server_round), "evaluate": False}
        phase = str(cfg.pop("phase"))
        totals = self.secure_exchange(grid, server_round, phase,
                                      self.train_arrays(server_round), cfg, timeout=timeout)
        previous = self.centroids
        new = np.asarray(self.aggregate_sums(server_round, totals), dtype=np.float64)
        self.last_shift = self.shift(previous, new)
        self.centroids = new
        self.centroid_history.append(new)
        record = {
            "round": server_round, "clients": len(totals.nodes),
            "dropped": len(totals.failed), "num-centroids": int(len(new)),
            "shift": self.last_shift, "secure-aggregation": True,
            "sum-error-bound": totals.error_bound,
            **self.secure_round_info(server_round, totals),
        }
        if self.last_absent:
            record["absent"] = [
                {"client": self.client_of.get(node), "node": node, "reason": why}
                for node, why in self.last_absent.items()]
        self.history.append(record)
        logger.info("round %d: %d clients (secure aggregation), %d centroids, shift %.3g",
                    server_round, len(totals.nodes), len(new), self.last_shift)
        metrics = {k: v for k, v in record.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        return self.model_record(), MetricRecord(
            {k: (v if np.isfinite(v) else -1.0) for k, v in metrics.items()})

    def payload_counts(self, payload: Any) -> np.ndarray | None:
        """Return the row counts an upload claims (``None``: it claims none).

        :meth:`check_reply` refuses an upload whose counts are negative or sum to more
        than the rows the client reported (``num-examples``); for a 2-D array (counts per
        cluster and feature) every column is such a sum.
        """
        return None

    def payload_means(self, payload: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """Return the local means an upload claims and the rows behind each (``None``: none).

        :meth:`check_reply` refuses a mean that no subset of the client's rows can have,
        given the sums it declared before round 1 (:func:`~flwr_clustering.algorithms.
        local_centroids.check_means_within_rows`). By default the means of a
        :class:`~flwr_clustering.algorithms.local_centroids.LocalCentroids` upload (FKM,
        k-FED).
        """
        if isinstance(payload, LocalCentroids):
            return payload.means, payload.counts
        return None

    def check_reply(self, kind: str, client_id: int, metrics: dict[str, Any], payload: Any,
                    stats: dict[str, Any]) -> None:
        """The rules every reply must keep, whatever the algorithm (raise ``ValueError``).

        * ``num-examples`` is a non-negative integer, and a client's replies repeat the row
          count of its first one (evaluation replies are tracked apart, for clients that
          evaluate on other rows);
        * the upload's counts (:meth:`payload_counts`) are finite, non-negative and sum to
          at most ``num-examples``;
        * each local mean (:meth:`payload_means`) lies where the rows behind it can put it,
          given the per-feature sums the client declared before round 1 (only when the
          run agreed its features: ``feature-moments``; not under secure aggregation);
        * the evaluation statistics keep :func:`~flwr_clustering.metrics.check_evaluation_stats`
          (counts within the rows, one row per cluster of the model, finite sums).

        The shapes, dtypes and sizes of each protocol's arrays are checked by the
        algorithm's parser (:meth:`parse_payload`). A client can still lie consistently
        about its row count from its first reply on: the rules bound what it claims by
        what it said before, not by its real data.
        """
        rows = metrics.get("num-examples")
        if rows is not None:
            if isinstance(rows, bool) or not float(rows).is_integer() or float(rows) < 0:
                raise ValueError(f"num-examples must be a non-negative integer, got {rows!r}")
            rows = int(rows)
            first = self.client_rows.setdefault((int(client_id), kind == "evaluate"), rows)
            if rows != first:
                raise ValueError(f"its row count changed: num-examples={rows}, but {first} in "
                                 "its first reply (a client's rows may not change during a "
                                 "run)")
        counts = None if payload is None else self.payload_counts(payload)
        if counts is not None:
            c = np.asarray(counts, dtype=np.float64)
            if not np.isfinite(c).all() or (c < 0).any():
                raise ValueError("its counts must be finite and non-negative")
            if rows is None:
                raise ValueError("it sent counts without num-examples")
            total = float(c.sum(axis=0).max() if c.ndim == 2 and c.size else c.sum())
            if total > rows * (1 + 1e-9):  # fuzzy supports are float sums
                raise ValueError(f"its counts sum to {total:.0f}, more than the {rows} rows "
                                 "it reported (num-examples)")
        moments = getattr(self, "client_moments", {}).get(int(client_id))
        claimed = None if payload is None or moments is None else self.payload_means(payload)
        if claimed is not None:
            transform = self.feature_transform
            check_means_within_rows(*claimed, moments,
                                    None if transform is None else transform.features)
        if any(key in stats for key in ("sse", "cluster-counts", "contingency", "labels")):
            C = self.centroids
            model = C if C is not None and np.ndim(C) == 2 else None
            k_max = max([v for v in (getattr(self, "k", None),
                                     None if model is None else len(model)) if v] or [0])
            check_evaluation_stats(stats, k_max=k_max or None,
                                   n_features=None if model is None else model.shape[1])

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

    # ------------------------------------------------------ Flower plumbing
    def wait_for_nodes(self, grid: Grid, *, settle: float = 0.0) -> list[int]:
        """Block until ``min_nodes`` nodes are connected; return their sorted ids.

        While it waits it logs how many nodes are connected, every 5 s.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid.
        settle : float, default 0
            Then also wait until the node count has not changed for ``settle`` seconds
            (a simulation registers its virtual SuperNodes while the ServerApp starts).

        Raises
        ------
        RuntimeError
            After ``node_wait_timeout`` seconds with fewer than ``min_nodes`` nodes.
        """
        start = last_log = time.monotonic()
        ids = sorted(grid.get_node_ids())
        if len(ids) < self.min_nodes:
            logger.info("waiting for nodes: %d of min_nodes=%d connected", len(ids),
                        self.min_nodes)
        while len(ids) < self.min_nodes:
            now = time.monotonic()
            if now - start > self.node_wait_timeout:
                raise RuntimeError(
                    f"only {len(ids)} node(s) connected after {self.node_wait_timeout:.0f} s, "
                    f"min_nodes={self.min_nodes}: start more SuperNodes, or lower min_nodes "
                    "(run config 'min-nodes')"
                )
            if now - last_log >= 5.0:
                logger.info("waiting for nodes: %d of min_nodes=%d connected (%.0f s of %.0f s)",
                            len(ids), self.min_nodes, now - start, self.node_wait_timeout)
                last_log = now
            time.sleep(0.5)
            ids = sorted(grid.get_node_ids())
        stable_since = time.monotonic()
        while settle > 0 and time.monotonic() - stable_since < settle:
            time.sleep(min(0.25, settle))
            now_ids = sorted(grid.get_node_ids())
            if now_ids != ids:
                ids, stable_since = now_ids, time.monotonic()
        return ids

    def sample_nodes(self, grid: Grid) -> list[int]:
        """Choose the nodes of a round with the strategy's own seeded generator."""
        ids = self.wait_for_nodes(grid)
        if self.fraction >= 1.0:
            return ids
        n = max(self.min_nodes, int(round(self.fraction * len(ids))))
        return sorted(int(i) for i in self._sample_rng.choice(ids, size=n, replace=False))

    def records(self, arrays_list, config: dict[str, Any]) -> dict[str, Any]:
        """The content of a message: ``arrays`` (list of ndarrays) and ``config``.

        Once the federation agreed on its features (:attr:`feature_transform`), the
        config carries them (``feature-transform``), so that every client holds its rows
        in the same features and units whatever message it answers.
        """
        config = with_features(self, config)
        return {"arrays": ArrayRecord(list(arrays_list)), "config": ConfigRecord(config)}

    @staticmethod
    def message(server_round: int, node: int, content: dict[str, Any],
                message_type: str) -> Message:
        """One message to ``node`` with :meth:`records` content.

        :meth:`_messages` sends the same records to every sampled node; protocols that
        send each node its own content (the DGC relay) call this per node.
        """
        return Message(RecordDict(dict(content)), dst_node_id=node,
                       message_type=message_type, group_id=str(server_round))

    def _messages(self, server_round, arrays_list, config, grid, message_type) -> list[Message]:
        content = self.records(arrays_list, config)
        return self.sent([self.message(server_round, node, content, message_type)
                          for node in self.sample_nodes(grid)])

    def sent(self, messages: list[Message], timeout: float | None = None) -> list[Message]:
        """Note where ``messages`` go (and the wait); return ``messages``.

        :meth:`collect` then names the nodes that do not answer. :meth:`_messages` and
        :meth:`exchange` call it; a strategy that builds its own messages (one per node,
        as the DGC relay) passes them through it. ``timeout``
        defaults to ``round_timeout`` (what :meth:`start` waits unless given another).
        """
        self._sent_nodes = sorted({int(m.metadata.dst_node_id) for m in messages})
        self._sent_messages = list(messages)
        if timeout is None:  # what start() waits (its ``timeout``, else round_timeout)
            timeout = getattr(self, "_run_timeout", self.round_timeout)
        self._sent_timeout = float(timeout)
        return messages

    @property
    def client_of(self) -> dict[int, int]:
        """``{node id: client id}``, learned from the replies of the run so far."""
        if not hasattr(self, "_client_of"):
            self._client_of: dict[int, int] = {}
        return self._client_of

    def who(self, node: int) -> str:
        """``"client 3 (node 123)"``, or ``"node 123"`` while its client id is unknown."""
        cid = self.client_of.get(int(node))
        return f"node {node}" if cid is None else f"client {cid} (node {node})"

    def exchange(
        self,
        grid: Grid,
        server_round: int,
        phase: str,
        arrays: list[np.ndarray] | tuple = (),
        config: dict[str, Any] | None = None,
        *,
        per_node: dict[int, tuple[list[np.ndarray], dict[str, Any]]] | None = None,
        message_type: str = MessageType.QUERY,
        parse=None,
        min_replies: int | None = None,
        timeout: float | None = None,
    ) -> list[Reply]:
        """Send one phase of the protocol and return the valid replies, by client id.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid.
        server_round : int
            Round number (``0`` for exchanges before round 1), the messages' group id.
        phase : str
            The phase name, sent as ``config["phase"]``.
        arrays : list of numpy.ndarray
            The arrays every sampled node receives.
        config : dict, optional
            The configuration every node receives (``phase`` and ``seed`` are added).
        per_node : dict, optional
            ``{node id: (arrays, extra config)}``: each node its own content, instead of
            ``arrays`` to every sampled node.
        message_type : str, default ``MessageType.QUERY``
            ``QUERY`` for phases that are not training, ``TRAIN`` for rounds.
        parse : callable, optional
            ``parse(arrays) -> payload`` (see :meth:`collect`).
        min_replies : int, optional
            The fewest valid replies to accept (default ``min_nodes``).
        timeout : float, optional
            Seconds to wait (default ``round_timeout``).

        Returns
        -------
        list of Reply
            Valid replies in client-id order.
        """
        cfg = {**dict(config or {}), "phase": phase, "seed": self.seed}
        if per_node is None:
            messages = self._messages(server_round, list(arrays), cfg, grid, message_type)
        else:
            messages = [self.message(server_round, node,
                                     self.records(node_arrays, {**cfg, **node_cfg}),
                                     message_type)
                        for node, (node_arrays, node_cfg) in per_node.items()]
        timeout = self.round_timeout if timeout is None else timeout
        self.sent(messages, timeout)
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        self.last_exchange_replies = len(replies)
        return self.collect(server_round, list(replies), parse, kind=phase,
                            min_replies=min_replies)

    def identify_clients(self, grid: Grid, server_round: int,
                         timeout: float | None = None) -> dict[int, int]:
        """Ask every connected node which client it holds: ``{client id: node id}``.

        Waits for ``min_nodes``, then sends one ``QUERY`` message per connected node in
        the library's ``data-source`` phase, which every client answers without the
        algorithm's code (:func:`~flwr_clustering.clients.base.handle_query`); the
        replies carry the ``client-id``. Nothing of the run's state changes (no generator
        is drawn from), so a run that calls it gets the same results.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid.
        server_round : int
            The round for logs and the messages' group id.
        timeout : float, optional
            Seconds to wait (default ``round_timeout``).

        Returns
        -------
        dict
            ``{client id: node id}`` of the valid replies; nodes without one are in
            ``last_absent`` (``{node id: reason}``).

        Raises
        ------
        RuntimeError
            If two nodes claim one client id (naming both), see :meth:`collect`.
        """
        nodes = self.wait_for_nodes(grid)
        replies = self.exchange(grid, server_round, DATA_SOURCE_PHASE,
                                per_node={int(n): ([], {}) for n in nodes},
                                min_replies=0, timeout=timeout)
        return {r.client_id: r.node_id for r in replies}

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

    def collect(
        self, server_round: int, replies, parse=None, kind: str = "train",
        min_replies: int | None = None,
    ) -> list[Reply]:
        """Decode replies, drop the bad ones with a logged reason, sort by client id.

        Parameters
        ----------
        server_round : int
            Current round (for logs).
        replies : iterable of flwr.app.Message
            What the grid returned.
        parse : callable, optional
            ``parse(arrays) -> payload``; a ``ValueError``/``KeyError``/``TypeError``
            drops the reply.
        kind : str
            ``"train"`` or ``"evaluate"`` (for logs).
        min_replies : int, optional
            The fewest valid replies to accept (default ``min_nodes``).

        Returns
        -------
        list of Reply
            Valid replies in client-id order.

        Raises
        ------
        RuntimeError
            If two replies carry the same client id (whatever their order: the error names
            the client id and the nodes), or if fewer than ``min_nodes`` valid replies
            remain (the error names the nodes that did not reply within the round timeout
            and the ones dropped, by client id where a reply of the run told it).
        ValueError
            If the clients that replied hold fewer rows than ``k`` (sum of num-examples;
            not checked for ``"evaluate"``).

        Notes
        -----
        A node sent a message (:meth:`sent`) without a reply is logged as "did not reply
        within round-timeout"; the nodes without a valid reply, with the reason, are left
        in ``last_absent`` (``{node id: reason}``) for the strategy to read.
        """
        sent, self._sent_nodes = getattr(self, "_sent_nodes", None), None
        messages, self._sent_messages = getattr(self, "_sent_messages", None) or [], None
        timeout = getattr(self, "_sent_timeout", self.round_timeout)
        replies = list(replies)
        origin = _reply_origins(messages, replies)
        problems: dict[int, str] = {}  # node -> why it sent no valid reply
        decoded = []
        for msg in replies:
            node = origin[id(msg)]
            if msg.has_error():
                reason = str(msg.error.reason)
                # our clients' errors start "client 3", also inside a legacy runtime's
                named = _CLIENT_PREFIX.match(reason) or _CLIENT_WRAPPED.search(reason)
                if named is not None:
                    self.client_of.setdefault(node, int(named.group(1)))
                problems[node] = f"failed: {reason}"
                logger.warning("round %d %s: %s failed: %s", server_round, kind,
                               self.who(node), reason)
                continue
            try:
                metrics = dict(msg.content["metrics"])
                cid = int(metrics.get("client-id", node))
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"malformed reply: {ex}"
                logger.warning("round %d %s: dropping reply of %s: malformed payload: %s",
                               server_round, kind, self.who(node), ex)
                continue
            decoded.append((cid, node, msg, metrics))
        self._refuse_duplicates(server_round, kind, decoded)
        valid: list[Reply] = []
        for cid, node, msg, metrics in sorted(decoded, key=lambda t: t[0]):
            self.client_of[node] = cid
            entry = ledger_entry(server_round, kind, cid, msg, metrics)
            self.ledger.append(entry)
            try:
                stats = dict(metrics)
                if "stats" in msg.content:
                    stats.update({k: v.numpy() for k, v in msg.content["stats"].items()})
                payload = None
                if parse is not None:
                    payload = parse(msg.content["arrays"].to_numpy_ndarrays())
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"malformed payload: {ex}"
                logger.warning(
                    "round %d %s: dropping reply of %s: malformed payload: %s",
                    server_round, kind, self.who(node), ex,
                )
                continue
            entry["min-count"] = _min_count(
                None if payload is None else self.payload_counts(payload), stats)
            try:
                self.check_reply(kind, cid, metrics, payload, stats)
            except (KeyError, ValueError, TypeError) as ex:
                problems[node] = f"invalid reply: {ex}"
                logger.warning("round %d %s: dropping reply of %s: invalid reply: %s",
                               server_round, kind, self.who(node), ex)
                continue
            columns = (dict(msg.content[COLUMNS_RECORD]) if COLUMNS_RECORD in msg.content
                       else None)
            valid.append(Reply(cid, node, payload, metrics, stats, columns))
        if parse is not None:
            kept = self._drop_dimension_mismatch(server_round, valid)
            kept_nodes = {r.node_id for r in kept}
            for r in valid:
                if r.node_id not in kept_nodes:
                    problems[r.node_id] = (f"sent {self.payload_features(r.payload)} features, "
                                           f"the federation has {self.n_features}")
            valid = kept
        replied = set(origin.values())
        missing: list[int] = []
        if sent is not None and replied <= set(sent):
            missing = [node for node in sent if node not in replied]
            for node in missing:
                logger.warning("round %d %s: %s did not reply within round-timeout=%g s",
                               server_round, kind, self.who(node), timeout)
        self.last_absent = {**{n: problems[n] for n in sorted(problems)},
                            **{n: f"did not reply within round-timeout={timeout:g} s"
                               for n in missing}}
        if not hasattr(self, "run_absent"):
            self.run_absent = {}
        for node, why in self.last_absent.items():
            self.run_absent[self.who(node)] = f"round {server_round} {kind}: {why}"
        floor = self.min_nodes if min_replies is None else int(min_replies)
        if len(valid) < floor:
            parts = []
            if missing:
                parts.append(f"{len(sent) - len(missing)} of {len(sent)} nodes replied within "
                             f"round-timeout={timeout:g} s; missing: "
                             + ", ".join(self.who(n) for n in missing))
            parts.append(f"only {len(valid)} valid replies, fewer than "
                         f"{'min_nodes=' if min_replies is None else ''}{floor}")
            withheld = [n for n, why in problems.items() if "privacy threshold" in why]
            if withheld:
                parts.append(f"{len(withheld)} client(s) withheld their reply under the "
                             "privacy threshold (a local cluster of fewer than "
                             "privacy-threshold points): lower privacy-threshold or k, or "
                             "min-nodes")
            if problems:
                parts.append("dropped: " + "; ".join(f"{self.who(n)} {why}"
                                                      for n, why in sorted(problems.items())))
            raise RuntimeError(f"round {server_round} {kind}: " + "; ".join(parts))
        if kind not in ("evaluate", DATA_SOURCE_PHASE, FEATURE_MOMENTS_PHASE, CATEGORIES_PHASE):
            self._check_rows_for_k(server_round, kind, valid, complete=not self.last_absent
                                   and sent is not None and self.fraction >= 1.0)
        return valid

    def _refuse_duplicates(self, server_round: int, kind: str, decoded) -> None:
        """Two nodes with one client id end the run, whatever the order of their replies."""
        claims: dict[int, list[int]] = {}
        for cid, node, _, _ in decoded:
            claims.setdefault(cid, []).append(node)
        duplicates = {cid: sorted(nodes) for cid, nodes in sorted(claims.items())
                      if len(nodes) > 1}
        if duplicates:
            which = "; ".join(f"client id {cid} is claimed by nodes "
                              + ", ".join(map(str, nodes)) for cid, nodes in duplicates.items())
            raise RuntimeError(
                f"round {server_round} {kind}: duplicate client ids: {which}. Every SuperNode "
                "needs its own client id: give each a unique 'partition-id' in its node "
                "config (flower-supernode --node-config \"partition-id=N ...\")")

    def _check_rows_for_k(self, server_round: int, kind: str, valid: list[Reply],
                          *, complete: bool) -> None:
        """Refuse ``k`` above the rows the replying clients hold (sum of num-examples)."""
        k = getattr(self, "k", None)
        sizes = [r.metrics.get("num-examples") for r in valid]
        if k is None or not valid or any(n is None for n in sizes):
            return
        total = int(sum(int(n) for n in sizes))
        if total >= int(k):
            return
        who = (f"the federation holds {total} rows (sum of num-examples of its {len(valid)} "
               "clients)" if complete else
               f"the {len(valid)} clients that replied hold {total} rows (sum of num-examples)")
        raise ValueError(f"round {server_round} {kind}: {who}, fewer than k={k}: there are "
                         "not k clusters to find; lower k (run config 'k') or add data")

    def _drop_dimension_mismatch(self, server_round: int, replies: list[Reply]) -> list[Reply]:
        dims = {r.client_id: self.payload_features(r.payload) for r in replies}
        known = [d for d in dims.values() if d is not None]
        if not known:
            return replies
        if self.n_features is None:
            counts = Counter(known)
            top = max(counts.values())
            # Majority dimension; ties go to the lowest client id.
            self.n_features = next(d for d in known if counts[d] == top)
        kept = []
        for r in replies:
            d = dims[r.client_id]
            if d is not None and d != self.n_features:
                logger.warning(
                    "round %d: dropping client %d: it sent %d features, the federation has %d",
                    server_round, r.client_id, d, self.n_features,
                )
                continue
            kept.append(r)
        return kept

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
        previous = self.centroids
        new = np.asarray(self.aggregate_payloads(server_round, valid), dtype=np.float64)
        self.last_shift = self.shift(previous, new)
        self.centroids = new
        self.centroid_history.append(new)
        record = {
            "round": server_round,
            "clients": len(valid),
            "dropped": len(replies) - len(valid),
            "num-centroids": int(len(new)),
            "shift": self.last_shift,
            **self.round_info(server_round, valid),
        }
        if self.last_absent:  # the nodes asked that sent no valid reply, and why
            record["absent"] = [
                {"client": self.client_of.get(node), "node": node, "reason": why}
                for node, why in self.last_absent.items()]
        # clients that withheld their reply under the privacy threshold ("dropped" counts
        # every reply without a valid payload; the reasons are in ``diagnostics["absent"]``)
        withheld = sum("privacy" in why for why in self.last_absent.values())
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

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Return extra per-round numbers for the history (override to add)."""
        return {}

    def shift(self, previous: np.ndarray | None, new: np.ndarray) -> float:
        """Return how far the model moved in this round (default: max abs change)."""
        if previous is None or previous.shape != new.shape:
            return float("inf")
        return float(np.abs(new - previous).max())

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

    def secure_evaluation(self, grid: Grid, server_round: int,
                          config: ConfigRecord | None, timeout: float) -> dict[str, float]:
        """The federated evaluation's statistics, summed under secure aggregation.

        One secure exchange (:func:`~flwr_clustering.clients.base.secure_evaluation_arrays`):
        the server learns the federation's rows, SSE, silhouette sum, cluster counts, sum
        and sum of squares of the rows, per-cluster residual sums and (with ``n-classes``
        in ``config`` and labels on every client) the contingency table, never one
        client's. The metrics are :func:`~flwr_clustering.metrics.aggregate_evaluation_stats`
        of the totals, without ``ari-client-weighted`` (it needs each client's ARI).
        """
        cfg = {k: v for k, v in dict(config or {}).items() if k not in ("phase", "seed")}
        totals = self.secure_exchange(grid, server_round, SECURE_EVALUATE_PHASE,
                                      [self.centroids], cfg, timeout=timeout)
        head, counts, sum_x, residuals, *table = totals.sums
        squares = table.pop() if cfg.get("profile") else None
        n = int(np.rint(head[0]))
        stats: dict[str, Any] = {
            "num-examples": n, "sse": float(head[1]), "silhouette-sum": float(head[2]),
            "cluster-counts": np.rint(counts).astype(np.int64)}
        if self.secure_row_moments:  # (a masked federation's rows miss features)
            stats.update({"sum-x": sum_x, "cluster-residuals": residuals,
                          "sst-local": float(head[4] - sum_x @ sum_x / n) if n else 0.0})
            if squares is not None:
                stats["cluster-sq-residuals"] = squares
        labelled = int(np.rint(head[3]))
        if table and labelled == len(totals.nodes):
            stats["contingency"] = np.rint(table[0]).astype(np.int64)
        elif table:
            logger.info("round %d secure evaluation: %d of %d clients have labels; no "
                        "contingency metrics", server_round, labelled, len(totals.nodes))
        metrics = aggregate_evaluation_stats([stats])
        metrics.pop("ari-client-weighted", None)
        self._secure_stats = stats
        logger.info("round %d evaluation (secure aggregation): %s", server_round,
                    format_metrics(metrics))
        return metrics

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

    # ------------------------------------------------------------ diagnostics
    def diagnose(self) -> dict[str, Any]:
        """Check the finished run for degenerate results; log and keep every anomaly.

        Called by :meth:`start` after the final federated evaluation. Everything comes
        from the model and the clients' additive statistics (counts and sums, no row):
        see :mod:`flwr_clustering.diagnostics` for the rules. Each anomaly is one WARNING
        line of the library's logger and one sentence of :attr:`warnings`, naming the
        cause and the run-config option(s) that address it (:attr:`advice`).

        Returns
        -------
        dict
            :attr:`diagnostics`: ``k``; ``centroids`` (rows of the model);
            ``non-finite-entries``; ``distinct-centres`` and ``distinct-tolerance``;
            ``data-scale`` (RMS distance of the rows to their mean); ``cluster-counts``
            and ``non-empty-clusters`` (``None`` without a final evaluation),
            ``largest-cluster-share`` (rows of the largest cluster over all; reported,
            not warned about: some data has one dominant cluster); ``sse``,
            ``sst`` (total sum of squares) and ``sse-ratio`` (``sse / sst``);
            ``lloyd-gain`` and ``lloyd-gain-clusters``
            (:func:`~flwr_clustering.diagnostics.lloyd_gain`);
            ``rounds``, ``num-rounds``, ``iterative``, ``converged`` (``None`` where no
            tolerance applies), ``round-cap-hit``, ``last-shift``, ``tol``; ``absent``
            (``{client: reason}``), ``withheld`` and ``dropped`` (client counts),
            ``withheld-centroids`` (local centroids kept back under the privacy threshold,
            where the clients report it: FeCA), ``empty-uploads`` (clients of the last
            round that sent no centroid, every local cluster under the privacy threshold:
            FKM); plus
            the algorithm's own (:meth:`diagnostic_extras`).
        """
        try:
            diag = self._diagnostics()
            diag.update(self.diagnostic_extras(diag))
            keys = self.Options.fields_by_key()
            by_field = {f.name: key for key, f in keys.items()}
            advice = {anomaly: tuple(by_field[name] for name in names if name in by_field)
                      for anomaly, names in self.advice.items()}
            advice["split"] = (("refine-rounds",) if refine_problem(self) is None
                               else tuple(by_field[n] for n in self.advice.get("split", ())
                                          if n in by_field))
            warnings = _diagnostics.warnings_from(diag, advice, type(self).__name__)
        except Exception as ex:  # noqa: BLE001 - a diagnostic must not end a finished run
            logger.exception("diagnostics failed")
            diag, warnings = {}, [f"{type(self).__name__}: the diagnostics could not be "
                                  f"computed: {type(ex).__name__}: {ex}"]
        for text in warnings:
            logger.warning("%s", text)
        warnings = [*getattr(self, "run_warnings", []), *warnings]  # already logged
        self.diagnostics, self.warnings = diag, warnings
        return diag

    def _diagnostics(self) -> dict[str, Any]:
        """The algorithm-independent part of :meth:`diagnose`."""
        C = self.centroids
        k = int(getattr(self, "k", 0) or 0)
        stats = list(getattr(self, "evaluation_stats", []) or [])
        n = int(sum(int(s["num-examples"]) for s in stats)) if stats else None
        sst = _diagnostics.total_sum_of_squares(stats)
        scale = _diagnostics.data_scale(sst, n, C)
        counts = _diagnostics.pooled_counts(stats, k)
        sse = self.final_metrics.get("sse") if stats else None
        last = int(self.history[-1]["round"]) if self.history else 0
        iterative = self.protocol_rounds() is None
        converged = None
        if iterative and self.tol >= 0 and self.history:
            converged = bool(self.converged(last))
        absent = dict(getattr(self, "run_absent", {}))
        withheld = sum("privacy" in why for why in absent.values())
        gain, gain_clusters = _diagnostics.lloyd_gain(stats)
        return {
            "lloyd-gain": gain,
            "lloyd-gain-clusters": gain_clusters,
            "k": k,
            "centroids": 0 if C is None else int(len(C)),
            "non-finite-entries": _diagnostics.non_finite_entries(C),
            "distinct-centres": _diagnostics.distinct_centres(C, scale),
            "distinct-tolerance": _diagnostics.DISTINCT_RTOL * (scale or 0.0),
            "data-scale": scale,
            "cluster-counts": None if counts is None else [int(c) for c in counts],
            "non-empty-clusters": _diagnostics.nonempty_clusters(counts),
            "largest-cluster-share": (float(counts.max() / counts.sum())
                                      if counts is not None and counts.sum() else None),
            "sse": None if sse is None else float(sse),
            "sst": sst,
            "sse-ratio": (float(sse) / sst if sse is not None and sst else None),
            "rounds": last,
            "num-rounds": int(getattr(self, "num_rounds", self.max_rounds)),
            "iterative": iterative,
            "converged": converged,
            "round-cap-hit": bool(converged is False and self.early_stop
                                  and last >= int(getattr(self, "num_rounds", 0))),
            "last-shift": (float(self.last_shift) if iterative and np.isfinite(self.last_shift)
                           else None),
            "tol": self.tol,
            "absent": absent,
            "withheld": int(withheld),
            "dropped": int(len(absent) - withheld),
            "withheld-centroids": int(sum(int(h.get("withheld-centroids", 0))
                                          for h in self.history)),
            "empty-uploads": int(self.history[-1].get("empty-uploads", 0)
                                 if self.history else 0),
            **(getattr(self, "split_result", None) or {"split-check": "off"}),
        }

    def _split_check(self, grid: Grid, server_round: int, timeout: float) -> None:
        """The split check and refinement before the final evaluation (never fatal).

        The node sampling generator is restored afterwards, so that the final evaluation
        asks the nodes it would have asked without the check.
        """
        state = self._sample_rng.bit_generator.state
        model = self.centroids
        try:
            self.split_result = run_split_check(self, grid, server_round, timeout)
        except Exception as ex:  # noqa: BLE001 - a diagnostic must not end a finished run
            logger.warning("round %d: the split check%s failed, the model is kept as it "
                           "was: %s: %s", server_round,
                           " and refinement" if self.refine_rounds else "",
                           type(ex).__name__, ex)
            self.centroids = model
            self.split_result = {"split-check": f"failed: {type(ex).__name__}: {ex}"}
        self._sample_rng.bit_generator.state = state

    def diagnostic_extras(self, diagnostics: dict[str, Any]) -> dict[str, Any]:
        """The algorithm's own diagnostics (override; DGC's consensus, KDC's cores).

        Parameters
        ----------
        diagnostics : dict
            The common part (``data-scale`` among others).
        """
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

    # ------------------------------------------------------------- the loop
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
        """The config of an ``EVALUATE`` exchange: ``config`` plus ``final`` and ``evaluate``.

        A per-round evaluation always asks for statistics; the final message (the model's
        delivery to every node) asks for them only with ``evaluate``. Sets what
        :meth:`aggregate_evaluate` expects back.
        """
        self._expect_stats = (self.evaluate or not final) and not self.secure_aggregation
        # the final evaluation also asks for the per-cluster spreads (the cluster profile)
        return ConfigRecord({**dict(config or {}), "final": final,
                             "evaluate": self._expect_stats,
                             "profile": bool(final and self._expect_stats)})

    def _client_evaluation(self, grid: Grid, server_round: int, arrays: ArrayRecord,
                           evaluate_config: ConfigRecord | None, *, final: bool,
                           timeout: float) -> MetricRecord | None:
        """One ``EVALUATE`` exchange (per round, or the final model's delivery).

        Under secure aggregation the statistics come from :meth:`secure_evaluation`, and
        only the final model goes out in an ``EVALUATE`` message (without statistics).
        """
        if self.secure_aggregation:
            metrics = None
            if self.secure_evaluate and self.centroids is not None:
                cfg = {**dict(evaluate_config or {}), "profile": bool(final)}
                metrics = self.secure_evaluation(grid, server_round, ConfigRecord(cfg),
                                                 timeout)
            if final:
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
        messages = self.configure_evaluate(server_round, arrays, cfg, grid)
        if not messages:
            return None
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        return self.aggregate_evaluate(server_round, replies)

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
        timeout = self.round_timeout if timeout is None else float(timeout)
        self._run_timeout = timeout
        initial = None if resume is not None else self.initial_centroids(initial_arrays)
        if initial is not None:
            self.centroids = initial
        self.summary()
        stop_rule = ("stops early when converged" if self.early_stop and fixed is None
                     and num_rounds > 1 else "runs every round")
        logger.info("%s: %d round(s) (%s); %s", self.name, num_rounds,
                    "the protocol's" if fixed is not None else "num_rounds", stop_rule)
        t0 = time.monotonic()
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
            t_round = time.monotonic()
            self.prepare_round(rnd, grid, timeout)
            if self.secure_aggregation and self.secure_round(rnd):
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
            if stop:
                self._split_check(grid, rnd, timeout)
                if self.refine_rounds:  # the refined model is the round's
                    arrays = result.arrays = self.model_record()
            if stop or self.evaluate_every_round:
                self._client_evaluation(grid, rnd, arrays, evaluate_config, final=stop,
                                        timeout=timeout)
            if stop:
                self.diagnose()
            if evaluate_fn is not None:
                server_metrics = evaluate_fn(rnd, arrays)
                if server_metrics is not None:
                    result.evaluate_metrics_serverapp[rnd] = server_metrics
                    self.history[-1]["server-metrics"] = dict(server_metrics)
                    _log_server_evaluation(rnd, num_rounds, dict(server_metrics),
                                           self.history[-1].get("metrics"))
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


def _log_server_evaluation(rnd: int, num_rounds: int, server: dict[str, float],
                           federated: dict[str, float] | None) -> None:
    """Log the ``evaluate_fn``'s metrics of a round, once.

    When the round's federated evaluation (just logged) has the same values, as the exact
    federated statistics give on the pooled rows of a simulation, the line says so instead
    of repeating every value.
    """
    if federated and set(server) <= set(federated) and all(
            np.isclose(float(server[k]), float(federated[k]), rtol=1e-9, atol=1e-12)
            for k in server):
        logger.info("[ROUND %d/%d] server evaluation: the federated evaluation's values",
                    rnd, num_rounds)
    else:
        logger.info("[ROUND %d/%d] server evaluation: %s", rnd, num_rounds, format_metrics(server))
