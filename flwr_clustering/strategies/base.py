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

from ..log import logger
from ..metrics import aggregate_evaluation_stats
from ..options import Options, option

__all__ = ["ClusteringOptions", "ClusteringStrategy", "Reply", "logger"]


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
    """

    client_id: int
    node_id: int
    payload: Any
    metrics: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)


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
        statistics where the protocol allows it without extra messages).
    **kwargs
        Options by field name (see the algorithm's ``Options``).

    Notes
    -----
    The round cap is the option ``max_rounds`` of iterative algorithms; a fixed protocol
    returns its round count from :meth:`protocol_rounds` instead. The convergence
    tolerance is the option ``tol`` where the algorithm has one (else never early).
    """

    #: Short name used in logs and results.
    name = "clustering"
    #: The algorithm's options dataclass.
    Options: type[Options] = ClusteringOptions
    #: Per-round history series the App plots in ``training.png`` (none by default).
    curves: tuple[str, ...] = ()

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
        self.configure()
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

    def prepare_round(self, server_round: int, grid: Grid, timeout: float) -> None:
        """An extra exchange before the train messages of every round.

        Called by :meth:`start` before :meth:`configure_train` of each round (DeepFeCA
        clusters the clients' features here, then trains on the result); the default
        does nothing.
        """

    # ------------------------------------------------------ Flower plumbing
    def wait_for_nodes(self, grid: Grid) -> list[int]:
        """Block until ``min_nodes`` nodes are connected; return their sorted ids."""
        start = time.monotonic()
        while len(ids := sorted(grid.get_node_ids())) < self.min_nodes:
            if time.monotonic() - start > self.node_wait_timeout:
                raise RuntimeError(
                    f"only {len(ids)} node(s) connected after {self.node_wait_timeout:.0f} s, "
                    f"min_nodes={self.min_nodes}"
                )
            time.sleep(0.5)
        return ids

    def sample_nodes(self, grid: Grid) -> list[int]:
        """Choose the nodes of a round with the strategy's own seeded generator."""
        ids = self.wait_for_nodes(grid)
        if self.fraction >= 1.0:
            return ids
        n = max(self.min_nodes, int(round(self.fraction * len(ids))))
        return sorted(int(i) for i in self._sample_rng.choice(ids, size=n, replace=False))

    @staticmethod
    def records(arrays_list, config: dict[str, Any]) -> dict[str, Any]:
        """The content of a message: ``arrays`` (list of ndarrays) and ``config``."""
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
        return [self.message(server_round, node, content, message_type)
                for node in self.sample_nodes(grid)]

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
        replies = list(grid.send_and_receive(
            messages, timeout=self.round_timeout if timeout is None else timeout))
        self.last_exchange_replies = len(replies)
        return self.collect(server_round, list(replies), parse, kind=phase,
                            min_replies=min_replies)

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
            If fewer than ``min_nodes`` valid replies remain.
        """
        valid: list[Reply] = []
        seen: set[int] = set()
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            if msg.has_error():
                logger.warning(
                    "round %d %s: dropping reply of node %d: %s",
                    server_round, kind, node, msg.error.reason,
                )
                continue
            try:
                metrics = dict(msg.content["metrics"])
                cid = int(metrics.get("client-id", node))
                stats = dict(metrics)
                if "stats" in msg.content:
                    stats.update({k: v.numpy() for k, v in msg.content["stats"].items()})
                payload = None
                if parse is not None:
                    payload = parse(msg.content["arrays"].to_numpy_ndarrays())
                if cid in seen:
                    raise ValueError(f"duplicate client id {cid}")
            except (KeyError, ValueError, TypeError) as ex:
                logger.warning(
                    "round %d %s: dropping reply of node %d: malformed payload: %s",
                    server_round, kind, node, ex,
                )
                continue
            seen.add(cid)
            valid.append(Reply(cid, node, payload, metrics, stats))
        valid.sort(key=lambda r: r.client_id)
        if parse is not None:
            valid = self._drop_dimension_mismatch(server_round, valid)
        floor = self.min_nodes if min_replies is None else int(min_replies)
        if len(valid) < floor:
            raise RuntimeError(
                f"round {server_round} {kind}: only {len(valid)} valid replies, "
                f"fewer than {'min_nodes=' if min_replies is None else ''}{floor}"
            )
        return valid

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
        """Build one evaluate message per sampled node carrying the current centroids."""
        if not self.evaluate or self.centroids is None:
            return []
        return self._messages(
            server_round, [self.centroids], dict(config or {}), grid, MessageType.EVALUATE
        )

    def aggregate_evaluate(self, server_round: int, replies) -> MetricRecord | None:
        """Aggregate the clients' additive statistics into exact global metrics."""
        valid = self.collect(server_round, replies, kind="evaluate")
        metrics = aggregate_evaluation_stats([r.stats for r in valid])
        metrics.update(self.evaluation_extras(valid))
        if self.history:
            self.history[-1]["metrics"] = metrics
        self.final_metrics = metrics
        logger.info("round %d evaluation: %s", server_round, _fmt(metrics))
        return MetricRecord({k: float(v) for k, v in metrics.items()})

    def evaluation_extras(self, replies: list[Reply]) -> dict[str, float]:
        """Return protocol-specific metrics of the federated evaluation (override to add)."""
        return {}

    def summary(self) -> None:
        """Log the strategy's configuration."""
        logger.info("%s: %s", type(self).__name__, self.describe())

    def describe(self) -> dict[str, Any]:
        """Return the configuration as a dict (logged and saved with the results)."""
        return {
            "min_nodes": self.min_nodes, "fraction": self.fraction, "seed": self.seed,
            "max_rounds": self.max_rounds, "tol": self.tol, **self.options.as_dict(),
        }

    def model_record(self) -> ArrayRecord:
        """The model as an ``ArrayRecord`` (default: ``centroids``; override to add arrays).

        It is what :meth:`aggregate_train` returns and ``Result.arrays`` holds.
        """
        if self.centroids is None:
            return ArrayRecord()
        return ArrayRecord({"centroids": Array(np.ascontiguousarray(self.centroids))})

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

    def plot_features(self, X: np.ndarray) -> np.ndarray:
        """The rows as the model sees them, for the cluster plot (default: ``X``)."""
        return X

    def result_summary(self) -> dict[str, Any]:
        """Extra entries of ``result.json`` (override to add)."""
        return {}

    # ------------------------------------------------------------- the loop
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn=None,
    ) -> Result:
        """Run the protocol: rounds until convergence or the cap, then evaluation.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
            The grid of the ServerApp.
        initial_arrays : ArrayRecord, optional
            Starting centroids under key ``"centroids"`` (algorithms that initialise on
            the clients, like FKM, do not need them).
        num_rounds : int, optional
            Round cap; defaults to ``max_rounds``.
        timeout : float, optional
            Seconds to wait for the replies of a round; defaults to ``round_timeout``.
        train_config, evaluate_config : ConfigRecord, optional
            Extra configuration merged into the messages.
        evaluate_fn : callable, optional
            ``evaluate_fn(round, arrays) -> MetricRecord | None``, a server-side
            evaluation after every round (e.g. on pooled data in simulation).

        Returns
        -------
        flwr.serverapp.strategy.Result
            ``arrays["centroids"]``, per-round train info, federated evaluation metrics
            by round, and ``evaluate_fn``'s metrics.
        """
        fixed = self.protocol_rounds()
        if num_rounds is not None and fixed is not None and int(num_rounds) != fixed:
            raise ValueError(
                f"{type(self).__name__} is a fixed protocol of {fixed} round(s); "
                f"num_rounds={num_rounds} does not fit (leave it out)")
        if num_rounds is not None and int(num_rounds) < 1:
            raise ValueError(f"num_rounds must be at least 1, got {num_rounds}")
        self.reset()
        num_rounds = self.max_rounds if num_rounds is None else int(num_rounds)
        timeout = self.round_timeout if timeout is None else float(timeout)
        if initial_arrays is not None and "centroids" in initial_arrays:
            self.centroids = np.asarray(initial_arrays["centroids"].numpy(), dtype=np.float64)
        self.summary()
        t0 = time.monotonic()
        self.initialize(grid, timeout)
        result = Result()
        arrays = initial_arrays or ArrayRecord()
        for rnd in range(1, num_rounds + 1):
            t_round = time.monotonic()
            self.prepare_round(rnd, grid, timeout)
            replies = grid.send_and_receive(
                self.configure_train(rnd, arrays, train_config, grid), timeout=timeout
            )
            arrays, train_metrics = self.aggregate_train(rnd, list(replies))
            self.history[-1]["seconds"] = time.monotonic() - t_round
            result.arrays = arrays
            result.train_metrics_clientapp[rnd] = train_metrics
            if evaluate_fn is not None:
                server_metrics = evaluate_fn(rnd, arrays)
                if server_metrics is not None:
                    result.evaluate_metrics_serverapp[rnd] = server_metrics
                    self.history[-1]["server-metrics"] = dict(server_metrics)
            if self.converged(rnd):
                logger.info("converged after round %d", rnd)
                break
        last = self.history[-1]["round"]
        messages = self.configure_evaluate(last, arrays, evaluate_config, grid)
        if messages:
            self.aggregate_evaluate(last, list(grid.send_and_receive(messages, timeout=timeout)))
        for record in self.history:
            if "metrics" in record:
                result.evaluate_metrics_clientapp[record["round"]] = MetricRecord(
                    {k: float(v) for k, v in record["metrics"].items()}
                )
        result.arrays = self.model_record()
        self.seconds = time.monotonic() - t0
        logger.info("%s finished: %d rounds in %.2f s", self.name, last, self.seconds)
        return result


def _fmt(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
