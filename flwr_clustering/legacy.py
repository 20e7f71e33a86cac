"""Run our strategies and clients in legacy Flower projects (``ServerAppComponents`` API).

Flower still runs projects written for its older API: a ``flwr.server.ServerApp(server_fn=...)``
whose ``server_fn`` returns ``ServerAppComponents(strategy=..., config=ServerConfig(...))``
with a :class:`flwr.server.strategy.Strategy`, and a ``flwr.client.ClientApp(client_fn=...)``
whose ``client_fn`` returns ``NumPyClient(...).to_client()``. Our strategies are Message-API
strategies (:class:`flwr.serverapp.strategy.Strategy`), so they need an adapter there:

* :class:`LegacyStrategy` wraps a :class:`~flwr_clustering.strategies.base.ClusteringStrategy`
  and implements the legacy methods with the wrapped strategy's own hooks: the messages it
  would send become ``FitIns``/``EvaluateIns``, the ``FitRes``/``EvaluateRes`` that come back
  become the replies it would have received, and its ``aggregate_train`` and
  ``aggregate_evaluate`` (with their reply validation) do the rest. Same code, same numbers
  as ``strategy.start(grid=...)``.
* On the client side, :meth:`ClusteringClient.to_client
  <flwr_clustering.clients.base.ClusteringClient.to_client>` returns :func:`legacy_client`:
  legacy metrics hold scalars only, so array-valued statistics travel as ``np.save`` bytes
  under keys prefixed by :data:`ARRAY_PREFIX`, and the client id goes along as
  ``"client-id"`` (replies are ordered by it, as in the Message-API path).

Rounds: legacy fit round ``r`` is the wrapped strategy's round ``r``. Exchanges that are not
training (FFCM's feature moments) run inside ``initialize_parameters``, before round 1, as
``fit`` calls whose ``config["phase"]`` names the phase, so they use no ``ServerConfig``
round. After convergence (or the round cap) ``configure_fit`` returns no instruction; the
federated evaluation runs once, after the last round that trained.

Only protocols of one message per client per round fit this API. Strategies that build their
own messages (DGC's per-node relay, KDC's sample and kernel phases, DeepFeCA's cluster and
train exchanges) are refused with a ``TypeError`` that points to the Message API.
See ``docs/legacy.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.common import (
    Code,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server import ServerConfig
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy as LegacyFlowerStrategy
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.supercore.run import Run

from .clients.legacy import (  # the client side, re-exported here
    ARRAY_PREFIX,
    LegacyClient,
    decode_metrics,
    encode_metrics,
    legacy_client,
)
from .log import logger
from .strategies.base import ClusteringStrategy

__all__ = [
    "ARRAY_PREFIX",
    "LegacyClient",
    "LegacyStrategy",
    "as_legacy",
    "decode_metrics",
    "encode_metrics",
    "legacy_client",
    "legacy_problem",
]

#: Error code of a reply the adapter builds from a failed legacy call.
LEGACY_ERROR_CODE = 2

#: Hooks a strategy overrides when its protocol is more than one message per client per round.
MESSAGE_API_HOOKS = ("configure_train", "aggregate_train", "prepare_round",
                     "configure_evaluate", "aggregate_evaluate", "start")


# --------------------------------------------------------------------------- server side
def legacy_problem(strategy: ClusteringStrategy | type) -> str | None:
    """Say why a strategy cannot run on the legacy API (``None``: it can).

    Parameters
    ----------
    strategy : ClusteringStrategy or its class
        The strategy.

    Returns
    -------
    str or None
        The reason, naming the Message-API hooks the strategy overrides.
    """
    cls = strategy if isinstance(strategy, type) else type(strategy)
    if not issubclass(cls, ClusteringStrategy):
        return f"{cls.__name__} is not a ClusteringStrategy"
    if getattr(strategy, "secure_aggregation", False) is True:
        return (f"{cls.__name__} with secure aggregation cannot run on Flower's legacy "
                "Strategy API: a secure round is four exchanges (SecAgg+). Use the Message "
                "API: a flwr.serverapp.ServerApp whose main calls strategy.start(grid=grid), "
                "with flwr_clustering.clients.client_app(client_fn) as the ClientApp "
                "(see docs/privacy.md).")
    if getattr(strategy, "refine_rounds", 0):
        return (f"{cls.__name__} with refine-rounds cannot run on Flower's legacy Strategy "
                "API: the refinement and the split check are exchanges after the last "
                "round. Use the Message API: a flwr.serverapp.ServerApp whose main calls "
                "strategy.start(grid=grid) (see docs/legacy.md).")
    custom = [h for h in MESSAGE_API_HOOKS if getattr(cls, h) is not getattr(ClusteringStrategy, h)]
    if not custom:
        return None
    return (f"{cls.__name__} cannot run on Flower's legacy Strategy API: its protocol is not "
            f"one message per client per round (it needs several message kinds per round or "
            f"per-node content; it overrides {', '.join(custom)}). Use the Message API: a "
            f"flwr.serverapp.ServerApp whose main calls strategy.start(grid=grid), with "
            f"flwr_clustering.clients.client_app(client_fn) as the ClientApp "
            f"(see docs/legacy.md).")


def _node_id(proxy: ClientProxy) -> int | None:
    node = getattr(proxy, "node_id", None)
    if isinstance(node, int | np.integer):
        return int(node)
    return int(proxy.cid) if str(proxy.cid).isdigit() else None


def _to_ins(msg: Message) -> FitIns | EvaluateIns:
    """The legacy instruction carrying a message's arrays and config."""
    params = ndarrays_to_parameters(msg.content["arrays"].to_numpy_ndarrays())
    config = dict(msg.content["config"])
    bad = {k: type(v).__name__ for k, v in config.items()
           if not isinstance(v, bool | bytes | float | int | str)}
    if bad:
        raise TypeError(f"config values {bad} cannot travel in a legacy FitIns/EvaluateIns")
    if msg.metadata.message_type == MessageType.EVALUATE:
        return EvaluateIns(parameters=params, config=config)
    return FitIns(parameters=params, config=config)


def _to_reply(msg: Message, res: FitRes | EvaluateRes) -> Message:
    """The Message-API reply that ``pack_reply`` would have built for ``res``."""
    if res.status.code != Code.OK:
        return Message(Error(code=LEGACY_ERROR_CODE,
                             reason=f"status {res.status.code.name}: {res.status.message}"),
                       reply_to=msg)
    scalars, arrays = decode_metrics(res.metrics)
    cid = scalars.pop("client-id", None)
    if isinstance(res, EvaluateRes):
        scalars["loss"] = float(res.loss)
    scalars["num-examples"] = int(res.num_examples)
    if cid is not None:
        scalars["client-id"] = int(cid)
    content = RecordDict({"metrics": MetricRecord(scalars)})
    if isinstance(res, FitRes):
        content["arrays"] = ArrayRecord(
            [np.require(a, requirements="C") for a in parameters_to_ndarrays(res.parameters)])
    if arrays:
        content["stats"] = ArrayRecord(
            {k: Array(np.require(v, requirements="C")) for k, v in arrays.items()})
    return Message(content, reply_to=msg)


def _error_reply(msg: Message, reason: str) -> Message:
    return Message(Error(code=LEGACY_ERROR_CODE, reason=reason), reply_to=msg)


class _ClientManagerGrid(Grid):
    """A Message-API grid over a legacy ClientManager (for the wrapped strategy's hooks).

    ``get_node_ids`` lists the connected clients; ``send_and_receive`` turns every message
    into a ``fit`` (train and query messages) or ``evaluate`` call of its client proxy, in
    parallel, and turns the results back into replies (failures into error replies).
    """

    def __init__(self, client_manager: ClientManager, timeout: float | None) -> None:
        self.client_manager = client_manager
        self.timeout = timeout
        self._run = Run.create_empty(0)

    def proxies(self) -> dict[int, ClientProxy]:
        """The connected clients by node id (an index when the proxy has none)."""
        clients = self.client_manager.all()
        out, unnamed = {}, []
        for cid in sorted(clients):
            node = _node_id(clients[cid])
            if node is None:
                unnamed.append(clients[cid])
            else:
                out[node] = clients[cid]
        for proxy in unnamed:
            out[max(out, default=-1) + 1] = proxy
        return out

    def set_run(self, run: Run) -> None:
        """Ignore (the legacy server has one run)."""

    @property
    def run(self) -> Run:
        """An empty run."""
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        """Create a message (deprecated Grid API)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        """Return the node ids of the connected clients."""
        return list(self.proxies())

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Not supported: use :meth:`send_and_receive`."""
        raise NotImplementedError

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Not supported: use :meth:`send_and_receive`."""
        raise NotImplementedError

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None) -> list[Message]:
        """Call every message's client proxy and return the replies, in message order."""
        messages = list(messages)
        proxies = self.proxies()
        wait = self.timeout if timeout is None else timeout

        def call(msg: Message) -> Message:
            proxy = proxies.get(int(msg.metadata.dst_node_id))
            if proxy is None:
                return _error_reply(msg, f"node {msg.metadata.dst_node_id} is not connected")
            try:
                ins = _to_ins(msg)
                group = int(msg.metadata.group_id or 0)
                if isinstance(ins, EvaluateIns):
                    return _to_reply(msg, proxy.evaluate(ins, timeout=wait, group_id=group))
                return _to_reply(msg, proxy.fit(ins, timeout=wait, group_id=group))
            except Exception as ex:  # noqa: BLE001 - a failed client becomes an error reply
                return _error_reply(msg, str(ex))

        if not messages:
            return []
        with ThreadPoolExecutor(max_workers=min(len(messages), 32)) as pool:
            return list(pool.map(call, messages))


class LegacyStrategy(LegacyFlowerStrategy):
    """A legacy :class:`flwr.server.strategy.Strategy` that runs one of our strategies.

    Use it in ``ServerAppComponents(strategy=LegacyStrategy(FedKMeans(...)), config=...)``.
    Every legacy method calls the wrapped strategy's Message-API hooks, so a legacy run
    gives the same numbers as ``strategy.start(grid=...)``.

    Parameters
    ----------
    strategy : ClusteringStrategy
        FKM, k-FED, FeCA, M-Avg, FFCM, masked Algorithm 1 or 2 (one message per client per
        round). DGC, KDC and DeepFeCA are refused.
    initial_arrays : ArrayRecord, optional
        As ``start(initial_arrays=...)``: starting ``"centroids"``.
    num_rounds : int, optional
        As ``start(num_rounds=...)``: the round cap (default: the strategy's
        ``max_rounds``, or its fixed protocol length). Set ``ServerConfig.num_rounds`` to
        at least this (:meth:`server_config` does): Flower does not tell a strategy its
        round count, so a smaller ``ServerConfig.num_rounds`` stops the run before the
        final federated evaluation.
    on_finish : callable, optional
        ``on_finish(result)``, called once with :attr:`result` when the protocol has
        ended (after the final federated evaluation): the place to save the model, as
        the legacy ``ServerApp`` returns nothing.

    Raises
    ------
    TypeError
        If the strategy's protocol needs the Message API (:func:`legacy_problem`).
    ValueError
        If ``num_rounds`` does not fit a fixed protocol, or is below 1.

    Notes
    -----
    Round mapping: legacy fit round ``r`` is the strategy's round ``r``; exchanges before
    round 1 (FFCM's ``moments`` phase) run in :meth:`initialize_parameters` as ``fit``
    calls with ``config["phase"]`` set; after convergence :meth:`configure_fit` returns
    ``[]``; the federated evaluation runs once, after the last round that trained.
    Clients: all connected ones (the strategy waits for ``min_nodes``, or samples
    ``fraction`` with its seeded generator), replies ordered by client id.
    """

    def __init__(
        self,
        strategy: ClusteringStrategy,
        *,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None,
        on_finish: Callable[[Result], None] | None = None,
    ) -> None:
        problem = legacy_problem(strategy)
        if problem is not None:
            raise TypeError(problem)
        fixed = strategy.protocol_rounds()
        if num_rounds is not None and fixed is not None and int(num_rounds) != fixed:
            raise ValueError(
                f"{type(strategy).__name__} is a fixed protocol of {fixed} round(s); "
                f"num_rounds={num_rounds} does not fit (leave it out)")
        if num_rounds is not None and int(num_rounds) < 1:
            raise ValueError(f"num_rounds must be at least 1, got {num_rounds}")
        self.strategy = strategy
        self.initial_arrays = initial_arrays
        self.on_finish = on_finish
        self.num_rounds = strategy.max_rounds if num_rounds is None else int(num_rounds)
        self._grid: _ClientManagerGrid | None = None
        self._reset()

    def _reset(self) -> None:
        self._arrays = self.initial_arrays or ArrayRecord()
        self._train_metrics: dict[int, MetricRecord] = {}
        self._pending: list[Message] = []
        self._last_round: int | None = None
        self._evaluated = False
        self._t0 = self._t_round = time.monotonic()

    def __repr__(self) -> str:
        """Name the wrapped strategy."""
        return f"LegacyStrategy({type(self.strategy).__name__})"

    def server_config(self, round_timeout: float | None = None) -> ServerConfig:
        """A ``ServerConfig`` with enough rounds for the whole protocol.

        Parameters
        ----------
        round_timeout : float, optional
            Flower's per-round timeout (the strategy's exchanges before round 1 use the
            strategy's ``round_timeout``).

        Returns
        -------
        flwr.server.ServerConfig
            ``num_rounds`` = the round cap.
        """
        return ServerConfig(num_rounds=self.num_rounds, round_timeout=round_timeout)

    # ------------------------------------------------------------ legacy hooks
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Reset the strategy and run its exchanges before round 1 (FFCM's moments).

        Parameters
        ----------
        client_manager : flwr.server.ClientManager
            The legacy client manager.

        Returns
        -------
        flwr.common.Parameters
            The initial model's arrays (possibly none: then no client is asked for any).
        """
        s = self.strategy
        s.reset()
        self._reset()
        self._grid = _ClientManagerGrid(client_manager, s.round_timeout)
        if self.initial_arrays is not None and "centroids" in self.initial_arrays:
            s.centroids = np.asarray(self.initial_arrays["centroids"].numpy(), dtype=np.float64)
        s.summary()
        s.initialize(self._grid, s.round_timeout)
        return ndarrays_to_parameters(s.model_record().to_numpy_ndarrays())

    def _require_initialized(self, client_manager: ClientManager) -> _ClientManagerGrid:
        if self._grid is None:
            raise RuntimeError("LegacyStrategy: initialize_parameters was not called")
        self._grid.client_manager = client_manager
        return self._grid

    def _done(self) -> bool:
        return self._last_round is not None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """The wrapped strategy's train messages as ``FitIns`` (none after the last round).

        Parameters
        ----------
        server_round : int
            The round.
        parameters : flwr.common.Parameters
            Ignored: the wrapped strategy holds the model.
        client_manager : flwr.server.ClientManager
            The legacy client manager.

        Returns
        -------
        list of (ClientProxy, FitIns)
            One instruction per sampled client; ``[]`` once converged or past the cap.
        """
        grid = self._require_initialized(client_manager)
        if self._done() or server_round > self.num_rounds:
            return []
        self._t_round = time.monotonic()
        self.strategy.prepare_round(server_round, grid, self.strategy.round_timeout)
        messages = self.strategy.configure_train(server_round, self._arrays, None, grid)
        self._pending = list(messages)
        proxies = grid.proxies()
        return [(proxies[int(m.metadata.dst_node_id)], _to_ins(m)) for m in self._pending]

    def _replies(self, results, failures) -> list[Message]:
        """Match results and failures to the pending messages, as replies."""
        by_node = {_node_id(proxy): res for proxy, res in results}
        failed = {_node_id(f[0]): f[1] for f in failures if isinstance(f, tuple)}
        reasons = iter(str(f) for f in failures if not isinstance(f, tuple))
        replies = []
        for msg in self._pending:
            node = int(msg.metadata.dst_node_id)
            if node in by_node:
                replies.append(_to_reply(msg, by_node[node]))
            elif node in failed:
                replies.append(_to_reply(msg, failed[node]))
            else:
                replies.append(_error_reply(msg, next(reasons, "no reply")))
        self._pending = []
        return replies

    def aggregate_fit(
        self, server_round: int, results, failures
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Aggregate with the wrapped strategy's ``aggregate_train``; test convergence.

        Parameters
        ----------
        server_round : int
            The round.
        results : list of (ClientProxy, FitRes)
            Successful replies.
        failures : list
            Failed replies or exceptions (dropped and logged, as error replies are).

        Returns
        -------
        tuple
            The model's arrays as ``Parameters`` and the round's metrics.
        """
        s = self.strategy
        arrays, metrics = s.aggregate_train(server_round, self._replies(results, failures))
        s.history[-1]["seconds"] = time.monotonic() - self._t_round
        self._arrays = arrays
        self._train_metrics[server_round] = metrics
        if s.converged(server_round):
            logger.info("converged after round %d", server_round)
            self._last_round = server_round
        elif server_round >= self.num_rounds:
            self._last_round = server_round
        return ndarrays_to_parameters(arrays.to_numpy_ndarrays()), dict(metrics or {})

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        """The final evaluation's messages as ``EvaluateIns`` (only after the last round).

        Parameters
        ----------
        server_round : int
            The round.
        parameters : flwr.common.Parameters
            Ignored.
        client_manager : flwr.server.ClientManager
            The legacy client manager.

        Returns
        -------
        list of (ClientProxy, EvaluateIns)
            Empty except once, in the round the protocol ended.
        """
        grid = self._require_initialized(client_manager)
        if self._last_round != server_round or self._evaluated:
            return []
        self._evaluated = True
        messages = self.strategy.configure_evaluate(
            server_round, self._arrays, self.strategy.evaluation_config(final=True), grid)
        if not messages:
            self._finish()
            return []
        self._pending = list(messages)
        proxies = grid.proxies()
        return [(proxies[int(m.metadata.dst_node_id)], _to_ins(m)) for m in self._pending]

    def aggregate_evaluate(
        self, server_round: int, results, failures
    ) -> tuple[float | None, dict[str, Scalar]]:
        """Exact global metrics from the clients' statistics (wrapped ``aggregate_evaluate``).

        Parameters
        ----------
        server_round : int
            The round.
        results : list of (ClientProxy, EvaluateRes)
            Successful replies.
        failures : list
            Failed replies or exceptions.

        Returns
        -------
        tuple
            The example-weighted mean client loss (mean squared distance to the nearest
            centroid) and the global metrics.
        """
        metrics = self.strategy.aggregate_evaluate(server_round, self._replies(results, failures))
        self._finish()
        ok = [res for _, res in results if res.status.code == Code.OK]
        n = sum(res.num_examples for res in ok)
        loss = sum(res.loss * res.num_examples for res in ok) / n if n else None
        return loss, dict(metrics or {})

    def evaluate(self, server_round: int, parameters: Parameters):
        """No server-side evaluation (return ``None``).

        Parameters
        ----------
        server_round : int
            The round.
        parameters : flwr.common.Parameters
            The model.

        Returns
        -------
        None
            Evaluate ``result.arrays`` yourself after the run if you need it.
        """
        return None

    # ----------------------------------------------------------------- result
    def _finish(self) -> None:
        s = self.strategy
        s.seconds = time.monotonic() - self._t0
        s.diagnose()  # as start() does after the final evaluation
        if s.history:
            logger.info("%s finished: %d rounds in %.2f s", s.name, s.history[-1]["round"],
                        s.seconds)
        if self.on_finish is not None:
            self.on_finish(self.result)

    @property
    def result(self) -> Result:
        """The run's :class:`flwr.serverapp.strategy.Result`, as ``strategy.start`` returns it.

        ``arrays`` (the model), train metrics by round and the federated evaluation
        metrics by round.
        """
        s = self.strategy
        result = Result()
        result.arrays = s.model_record()
        result.train_metrics_clientapp = dict(self._train_metrics)
        for record in s.history:
            if "metrics" in record:
                result.evaluate_metrics_clientapp[record["round"]] = MetricRecord(
                    {k: float(v) for k, v in record["metrics"].items()})
        return result


def as_legacy(strategy: ClusteringStrategy, **kwargs: Any) -> LegacyStrategy:
    """Wrap a strategy for ``ServerAppComponents(strategy=...)`` (see :class:`LegacyStrategy`).

    Parameters
    ----------
    strategy : ClusteringStrategy
        The strategy.
    **kwargs
        ``initial_arrays``, ``num_rounds``, ``on_finish``.

    Returns
    -------
    LegacyStrategy
        The adapter.
    """
    return LegacyStrategy(strategy, **kwargs)
