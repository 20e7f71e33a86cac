"""The round driver: Flower's ``Strategy.start`` and its hooks (a part of the strategy base).

:meth:`RoundDriver.start` runs the protocol with the contract of Flower's
``Strategy.start``: the features agreed before round 1, then every round's train exchange
(:meth:`~RoundDriver.configure_train`, :meth:`~RoundDriver.aggregate_train`, or a secure
round), the convergence test and round cap, the split check, the final model's delivery
with the federated evaluation (:meth:`~RoundDriver.configure_evaluate`,
:meth:`~RoundDriver.aggregate_evaluate`), the diagnostics, ``evaluate_fn`` and
``on_round``. The algorithm's part is in the base's hooks
(:class:`~flwr_clustering.strategies.base.ClusteringStrategy`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from ..evaluation import EVALUATION_STATS, aggregate_evaluation_stats
from ..log import format_metrics, logger, show_progress
from .features import prepare_features


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


class RoundDriver:
    """The round loop (``start``) and Flower's configure/aggregate methods."""

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
                changed = self.finish_training(grid, rnd, timeout)
                self._split_check(grid, rnd, timeout)
                if changed or self.refine_rounds:  # the chosen or refined model is the round's
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
