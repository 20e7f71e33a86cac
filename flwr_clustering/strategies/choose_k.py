"""A search over candidate models in one run: ``k='auto'`` and several starts.

:func:`search_strategy` wraps an algorithm's strategy (FKM, k-FED, FeCA: those whose
class sets ``searches_k``) into a :class:`CandidateSearch` that fits one model per
candidate, every ``k`` of ``k_min..k_max`` times ``starts`` seeds, **in the messages of one
run**: each round's train message carries every active candidate's model and config
(:data:`~flwr_clustering.protocol.CANDIDATES_KEY`), each client answers each candidate
with its own ``fit`` (:func:`~flwr_clustering.clients.candidates.fit_candidates`), and the
server runs each candidate's own aggregation on its part of the replies. A candidate is
the algorithm's single-``k`` run of the same seed (start 0) or of its start's seed, bit
for bit (tested); it stops when it converges, the run when all have.

After the last round two library phases score every candidate from per-cluster sums
(with ``refine_rounds``, first up to that many federated Lloyd rounds of every candidate,
the ``k-moments`` sums giving each cluster's mean)
(:mod:`flwr_clustering.algorithms.choose_k`; through secure aggregation when it is on):
the best start of each ``k`` (lowest SSE) is kept, ``k`` is chosen by ``rule`` (the
runner-up logged), and the chosen model becomes the run's model: the split check, the
final evaluation, the diagnostics and every result file are the chosen ``k``'s.
``k_scores`` holds every candidate's criteria (``result.json``, ``k_scores.csv``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid

from ..algorithms.choose_k import (
    DEFAULT_RULE,
    RULES,
    CandidateMoments,
    best_starts,
    candidate_scores,
    choose,
    cluster_means,
    start_seed,
)
from ..algorithms.upload import Claims, claims_of
from ..log import logger
from ..options import Options
from ..protocol import CANDIDATE_ERRORS_RECORD, CANDIDATES_KEY, K_MOMENTS_PHASE, K_SPREADS_PHASE
from .base import ClusteringStrategy, Reply
from .features import known_data_sources

__all__ = ["CandidateSearch", "search_k", "search_problem", "search_strategy"]

#: The phase name of a search's train messages (each candidate's own is inside).
SEARCH_PHASE = "search"


@dataclass
class _Failed:
    """A candidate a client could not answer (or whose answer was invalid)."""

    reason: str | None = None


@dataclass
class _Scores:
    """One client's reply to a scoring phase: its arrays, and per candidate its counts."""

    arrays: list[np.ndarray]
    counts: list[np.ndarray]

    def claims(self) -> Claims:
        """Every candidate's counts, one array (the ledger's smallest count)."""
        return Claims(counts=np.concatenate(self.counts) if self.counts else None)


@dataclass
class _Payloads:
    """One reply of a search round: each active candidate's payload (or ``_Failed``)."""

    items: list[Any]

    def claims(self) -> Claims:
        """Every valid candidate's counts, one array; the first valid dimension.

        Read when asked: the rules may fail a candidate's part after the parse.
        """
        parts, features = [], None
        for p in self.items:
            if isinstance(p, _Failed):
                continue
            claimed = claims_of(p)
            if claimed.counts is not None:
                parts.append(np.ravel(np.asarray(claimed.counts, dtype=np.float64)))
            if features is None:
                features = claimed.features
        return Claims(counts=np.concatenate(parts) if parts else None, features=features)


def search_problem(strategy_class: type, *, dp: bool = False) -> str | None:
    """Why ``strategy_class`` cannot search over candidates (``None``: it can).

    (:func:`flwr_clustering.registry.searchers` names the algorithms that can.)
    """
    if not getattr(strategy_class, "searches_k", False):
        return (f"{strategy_class.name} fits one k per run (its strategy does not set "
                "searches_k)")
    if dp:
        return ("differential privacy is calibrated for one model's statistics; a search "
                "sends every candidate's, and its scores, without noise: choose k on "
                "another run, or without dp-epsilon")
    return None


def search_strategy(strategy_class: type, candidate_options: list[Options], *,
                    starts: int = 1, rule: str = DEFAULT_RULE, **kwargs: Any
                    ) -> CandidateSearch:
    """A :class:`CandidateSearch` of ``strategy_class`` over ``candidate_options``.

    Parameters
    ----------
    strategy_class : type
        The algorithm's strategy (``FedKMeans``, ``KFed``, ``FeCA``).
    candidate_options : list of Options
        One instance of the algorithm's options per candidate ``k`` (ascending ``k``);
        options that default to ``k`` (``k_local``) resolved for each.
    starts : int, default 1
        Seeds per ``k``: start 0 is the run's ``seed``, the others
        :func:`~flwr_clustering.algorithms.choose_k.start_seed`.
    rule : str, default "silhouette"
        How ``k`` is chosen (:data:`~flwr_clustering.algorithms.choose_k.RULES`).
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` arguments.
    """
    problem = search_problem(strategy_class, dp=any(
        getattr(o, "dp_epsilon", 0) > 0 for o in candidate_options))
    if problem is not None:
        raise ValueError(f"a search over candidates: {problem}")
    cls = type(f"{strategy_class.__name__}Search", (CandidateSearch,), {
        "inner": strategy_class, "Options": strategy_class.Options,
        "name": strategy_class.name, "labelling": strategy_class.labelling,
        "advice": strategy_class.advice, "scales_features": strategy_class.scales_features,
        "__doc__": f"{strategy_class.__name__} over candidate k and starts in one run.",
    })
    return cls(candidate_options=candidate_options, starts=starts, rule=rule, **kwargs)


def search_k(strategy_class: type, ks=range(2, 11), *, starts: int = 1,
             rule: str = DEFAULT_RULE, **kwargs: Any) -> CandidateSearch:
    """``k='auto'`` in your own ServerApp: a search of ``strategy_class`` over ``ks``.

    ``search_k(FedKMeans, range(2, 11), starts=3, max_rounds=20, min_nodes=3)`` is the
    App's ``k='auto' n-init=3``; ``strategy.start(grid=...)`` runs it and leaves the chosen
    model in ``centroids``, the scores in ``k_scores`` and the choice in ``search``.

    Parameters
    ----------
    strategy_class : type
        ``FedKMeans``, ``KFed`` or ``FeCA``.
    ks : iterable of int, default 2..10
        The candidate ``k``.
    starts, rule
        See :func:`search_strategy`.
    **kwargs
        The algorithm's options by field name (every candidate's, ``k`` apart) and
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` arguments.
    """
    option_kwargs, base = strategy_class.Options.split_kwargs(dict(kwargs))
    option_kwargs.pop("k", None)
    # each k checked as the algorithm's options check it (2.5 refused, not truncated)
    by_k = {o.k: o for o in (strategy_class.Options(**{**option_kwargs, "k": k}) for k in ks)}
    options = [by_k[k] for k in sorted(by_k)]
    return search_strategy(strategy_class, options, starts=starts, rule=rule, **base)


class CandidateSearch(ClusteringStrategy):
    """Several candidate models of one algorithm, fitted in the messages of one run.

    Build it with :func:`search_strategy`. The strategy's own ``options`` are the largest
    candidate's; after :meth:`start`, ``k``, ``options`` and ``centroids`` are the chosen
    candidate's, ``k_scores`` every kept candidate's criteria (one per ``k``),
    ``search`` the choice (rule, chosen ``k``, runner-up, each rule's pick) and
    ``candidates`` the candidates' strategies (``k`` major, start minor).

    Parameters
    ----------
    candidate_options : list of Options
        See :func:`search_strategy`.
    starts : int, default 1
        Seeds per ``k``.
    rule : str, default "silhouette"
        How ``k`` is chosen.
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` arguments.
    """

    #: The wrapped algorithm's strategy class (set by :func:`search_strategy`).
    inner: type = ClusteringStrategy

    def __init__(self, *, candidate_options: list[Options], starts: int = 1,
                 rule: str = DEFAULT_RULE, **kwargs: Any) -> None:
        if not candidate_options:
            raise ValueError("a search needs at least one candidate")
        ks = [int(o.k) for o in candidate_options]
        if ks != sorted(set(ks)):
            raise ValueError(f"the candidates' k must be distinct and ascending, got {ks}")
        if isinstance(starts, bool) or int(starts) != starts or not 1 <= starts <= 100:
            raise ValueError(f"starts must be an integer in 1..100, got {starts!r}")
        if rule not in RULES:
            raise ValueError(f"unknown k rule {rule!r}; one of {', '.join(RULES)}")
        self.candidate_options = list(candidate_options)
        self.n_starts = int(starts)
        self.rule = rule
        kwargs.pop("options", None)
        super().__init__(options=candidate_options[-1], **kwargs)

    # ---------------------------------------------------------------- the candidates
    def configure(self) -> None:
        """Build the candidates' strategies (one per ``k`` and start)."""
        base = dict(min_nodes=self.min_nodes, fraction=self.fraction,
                    round_timeout=self.round_timeout, node_wait_timeout=self.node_wait_timeout,
                    evaluate=False, early_stop=self.early_stop,
                    secure_aggregation=self.secure_aggregation,
                    secagg_threshold=self.secagg_threshold, secagg_keys=self.secagg_keys,
                    split_check=False)
        self.candidates = [self.inner(options=o, seed=start_seed(self.seed, s), **base)
                           for o in self.candidate_options for s in range(self.n_starts)]
        self.candidate_ks = [int(o.k) for o in self.candidate_options
                             for _ in range(self.n_starts)]

    def protocol_rounds(self) -> int | None:
        """The algorithm's own (one-shot: 1; iterative: ``None``)."""
        return self.candidates[0].protocol_rounds()

    def secure_aggregation_problem(self) -> str | None:
        """The algorithm's own."""
        return self.inner.secure_aggregation_problem(self)

    def raw_rows_option(self) -> str | None:
        """The algorithm's own (every candidate has the same options but ``k``)."""
        return self.candidates[0].raw_rows_option() if hasattr(self, "candidates") else None

    def reset(self) -> None:
        """Reset the run and every candidate; the candidates share the run's records."""
        super().reset()
        if not hasattr(self, "candidates"):
            return
        for c in self.candidates:
            c.reset()
            c.ledger, c.nodes = self.ledger, self.nodes  # one ledger, one node book
            c._start_exchanges(self.exchanger.timeout)
            c.failed = None
        self.active = list(range(len(self.candidates)))
        self.k_scores: list[dict[str, Any]] = []
        self.candidate_scores: list[dict[str, Any]] = []
        self.search: dict[str, Any] | None = None
        self.chosen: int | None = None

    def initial_centroids(self, initial_arrays: ArrayRecord | None) -> np.ndarray | None:
        """Refuse starting centroids: each candidate starts as its algorithm does."""
        if initial_arrays is not None and len(initial_arrays) > 0:
            raise ValueError("a search over candidates starts every candidate as its "
                             "algorithm does: pass no initial_arrays (or give k and run "
                             "one model from them)")
        return None

    #: The rows-for-``k`` rule at the largest candidate names ``k-max``.
    k_hint = " (a search: lower its largest candidate, run config 'k-max')"

    def _share_features(self) -> None:
        for c in self.candidates:
            c.record.feature_transform = self.record.feature_transform
            c.record.feature_json = self.record.feature_json
            c.feature_summary, c.n_features = self.feature_summary, self.n_features
            c.rules.client_sums = self.rules.client_sums
            c.rules.client_moments = self.rules.client_moments
            c._start_exchanges(self.exchanger.timeout)

    def initialize(self, grid: Grid, timeout: float) -> None:
        """Share the agreed features; run the algorithm's own start for each candidate.

        An exchange the algorithm makes before round 1 (FKM under secure aggregation: the
        federation's moments) is made once, by the first candidate, and its result
        handed to the others (``shared_start``). The run's ``data-source`` replies
        (:func:`~.features.known_data_sources`) are every candidate's.
        """
        self._share_features()
        shared, known = None, known_data_sources(self)
        for c in self.candidates:
            c.record.data_sources = known
            if shared is not None:
                c.shared_start = shared
            c.initialize(grid, timeout)
            shared = getattr(c, "shared_start", None)
        self.n_features = self.n_features or self.candidates[0].n_features

    # ---------------------------------------------------------------- the rounds
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> list[Message]:
        """One train message per node with every active candidate's model and config."""
        entries, out = self._candidate_content(server_round)
        cfg = {**dict(config or {}), "phase": SEARCH_PHASE,
               CANDIDATES_KEY: json.dumps(entries, default=_plain), "seed": self.seed,
               "evaluate": False}
        return self._messages(server_round, out, cfg, grid, MessageType.TRAIN)

    def _candidate_content(self, server_round: int, extra: dict | None = None):
        entries, out = [], []
        for i in self.active:
            c = self.candidates[i]
            arrays = list(c.train_arrays(server_round))
            cfg = {**c.train_config(server_round), "seed": c.seed, "evaluate": False,
                   **(extra or {})}
            cfg["phase"] = c.summer.phase(cfg["phase"])  # its name in the run's exchange
            entries.append({"config": cfg, "arrays": len(arrays)})
            out += arrays
        return entries, out

    def _split_reply(self, server_round: int, arrays: list[np.ndarray]) -> _Payloads:
        if not arrays:
            raise ValueError("a search reply needs its candidates' sizes first")
        sizes = np.asarray(arrays[0])
        if sizes.shape != (len(self.active),) or sizes.dtype.kind not in "iu":
            raise ValueError(f"a search reply's sizes must be {len(self.active)} integers, "
                             f"got {sizes.dtype} {sizes.shape}")
        if int(sizes[sizes > 0].sum()) != len(arrays) - 1:
            raise ValueError(f"its sizes add up to {int(sizes[sizes > 0].sum())} arrays, it "
                             f"sent {len(arrays) - 1}")
        items, at = [], 1
        for size, i in zip(sizes.tolist(), self.active, strict=True):
            if size < 0:
                items.append(_Failed())
                continue
            part = arrays[at:at + size]
            at += size
            try:
                items.append(self.candidates[i].parse_payload(server_round, part))
            except (ValueError, KeyError, TypeError) as ex:
                items.append(_Failed(f"malformed payload: {ex}"))
        if all(isinstance(p, _Failed) for p in items):
            raise ValueError("no candidate's answer is valid")
        return _Payloads(items)

    def check_reply(self, kind: str, client_id: int, metrics: dict[str, Any], payload: Any,
                    stats: dict[str, Any]) -> None:
        """The base rules; then each candidate's, on its own part (failing only it)."""
        if isinstance(payload, _Scores):  # each candidate's counts within the rows
            super().check_reply(kind, client_id, metrics, None, stats)
            rows = int(metrics.get("num-examples", 0))
            for n in payload.counts:
                if float(n.sum()) > rows:
                    raise ValueError(f"its counts sum to {n.sum():.0f}, more than the {rows} "
                                     "rows it reported (num-examples)")
            return None
        if not isinstance(payload, _Payloads):
            return super().check_reply(kind, client_id, metrics, payload, stats)
        super().check_reply(kind, client_id, metrics, None, stats)
        for j, i in enumerate(self.active):
            p = payload.items[j]
            if isinstance(p, _Failed):
                continue
            try:
                self.candidates[i].check_reply(kind, client_id, metrics, p, {})
            except (ValueError, KeyError, TypeError) as ex:
                payload.items[j] = _Failed(f"invalid reply: {ex}")
        return None

    def aggregate_train(self, server_round: int, replies) -> tuple[ArrayRecord, MetricRecord]:
        """Validate the replies once; aggregate each active candidate on its part."""
        replies = list(replies)
        errors: dict[int, dict[str, str]] = {}
        for m in replies:
            if not m.has_error() and CANDIDATE_ERRORS_RECORD in m.content:
                errors[int(m.metadata.src_node_id)] = {
                    str(k): str(v) for k, v in m.content[CANDIDATE_ERRORS_RECORD].items()}
        valid = self.collect(server_round, replies,
                             lambda a: self._split_reply(server_round, a))
        for node, why in list(valid.absent.items()):  # every candidate failed: why
            if node in errors and "no candidate's answer" in why:
                text = "; ".join(dict.fromkeys(errors[node].values()))
                valid.absent[node] = f"failed every candidate: {text}"
                self.run_absent[self.who(node)] = (f"round {server_round} train: failed "
                                                   f"every candidate: {text}")
        for c in self.candidates:
            c.n_features = self.n_features
        active, done, shifts = list(self.active), [], []
        for j, i in enumerate(active):
            c = self.candidates[i]
            mine, failed, nodes = [], {}, {}
            for r in valid:
                p = r.payload.items[j]
                if isinstance(p, _Failed):
                    failed[r.client_id] = p.reason or errors.get(r.node_id, {}).get(
                        str(j), "failed")
                    nodes[r.client_id] = r.node_id
                    continue
                mine.append(Reply(r.client_id, r.node_id, p, r.metrics, {}, None))
            for cid, why in failed.items():
                logger.warning("round %d: candidate k=%d%s: client %d left out: %s",
                               server_round, c.k, self._start_name(i), cid, why)
            try:
                if len(mine) < self.min_nodes:
                    raise RuntimeError(f"only {len(mine)} valid answers, fewer than "
                                       f"min_nodes={self.min_nodes}")
                new = c.adopt_model(c.aggregate_payloads(server_round, mine))
            except (ValueError, RuntimeError) as ex:
                c.failed = f"round {server_round}: {ex}"
                message = (f"candidate k={c.k}{self._start_name(i)} failed in round "
                           f"{server_round} and is left out of the choice: {ex}")
                logger.warning("%s", message)
                self.run_warnings.append(message)
                done.append(i)
                continue
            record = {"round": server_round, "clients": len(mine),
                      "dropped": len(failed), "num-centroids": int(len(new)),
                      "shift": c.last_shift, **c.round_info(server_round, mine)}
            if failed:
                record["absent"] = [{"client": cid, "node": nodes[cid], "reason": why}
                                    for cid, why in failed.items()]
            c.history.append(record)
            shifts.append(c.last_shift)
            if self._candidate_done(c, server_round):
                done.append(i)
        self.active = [i for i in self.active if i not in done]
        if all(c.failed for c in self.candidates):
            raise RuntimeError(f"round {server_round}: every candidate failed: " + "; ".join(
                f"k={c.k}: {c.failed}" for c in self.candidates))
        self.last_shift = max(shifts) if shifts else 0.0
        record = {"round": server_round, "clients": len(valid),
                  "dropped": len(replies) - len(valid), "candidates": len(active),
                  "converged": len([i for i in done if not self.candidates[i].failed]),
                  "shift": self.last_shift}
        if valid.absent:
            record["absent"] = [{"client": self.client_of.get(n), "node": n, "reason": why}
                                for n, why in valid.absent.items()]
        self.history.append(record)
        logger.info("round %d: %d clients, %d candidate models (%d done), largest shift %.3g",
                    server_round, len(valid), len(active), len(done), self.last_shift)
        return self.model_record(), MetricRecord(
            {k: float(v) if np.isfinite(v) else -1.0 for k, v in record.items()
             if isinstance(v, int | float)})

    def secure_train(self, server_round: int, grid: Grid, config: ConfigRecord | None,
                     timeout: float) -> tuple[ArrayRecord, MetricRecord]:
        """A search round under secure aggregation: every candidate's sums, one secure sum.

        A client that cannot answer one candidate fails the whole exchange
        (``candidates-strict``: a masked sum has no per-candidate part).
        """
        entries, out = self._candidate_content(server_round)
        phases = {e["config"].get("phase") for e in entries}
        cfg = {**dict(config or {}), CANDIDATES_KEY: json.dumps(entries, default=_plain),
               "candidates-strict": True, "evaluate": False}
        totals = self.secure_exchange(grid, server_round, SEARCH_PHASE, out, cfg,
                                      timeout=timeout)
        sums = totals.sums
        count = len(self.active)
        per = (len(sums) - 1) // count if count else 0
        if per * count != len(sums) - 1:
            raise RuntimeError(f"round {server_round}: {len(sums)} secure totals for "
                               f"{count} candidates ({phases})")
        active, done, shifts = list(self.active), [], []
        for j, i in enumerate(active):
            c = self.candidates[i]
            part = dataclasses.replace(totals, sums=sums[1 + j * per:1 + (j + 1) * per])
            c.adopt_model(c.aggregate_sums(server_round, part))
            c.history.append({"round": server_round, "clients": len(totals.nodes),
                              "shift": c.last_shift, "secure-aggregation": True})
            shifts.append(c.last_shift)
            if self._candidate_done(c, server_round):
                done.append(i)
        self.active = [i for i in self.active if i not in done]
        self.last_shift = max(shifts) if shifts else 0.0
        record = {"round": server_round, "clients": len(totals.nodes),
                  "dropped": len(totals.failed), "candidates": len(active),
                  "converged": len(done), "shift": self.last_shift,
                  "secure-aggregation": True, "sum-error-bound": totals.error_bound}
        self.history.append(record)
        logger.info("round %d: %d clients (secure aggregation), %d candidate models (%d "
                    "done), largest shift %.3g", server_round, len(totals.nodes), len(active),
                    len(done), self.last_shift)
        return self.model_record(), MetricRecord(
            {k: float(v) for k, v in record.items()
             if isinstance(v, int | float) and not isinstance(v, bool)})

    def _candidate_done(self, c: ClusteringStrategy, server_round: int) -> bool:
        """Whether candidate ``c`` stops after this round (the run's last, or converged)."""
        last = server_round >= int(getattr(self, "num_rounds", self.max_rounds))
        c.stopped = last or (self.early_stop and c.converged(server_round))
        return c.stopped

    def converged(self, server_round: int) -> bool:
        """Every candidate done (after the choice: whether the chosen one converged)."""
        if self.chosen is not None:
            c = self.candidates[self.chosen]
            return bool(c.history) and c.converged(int(c.history[-1]["round"]))
        return not self.active

    def _start_name(self, i: int) -> str:
        return f" start {i % self.n_starts}" if self.n_starts > 1 else ""

    # ---------------------------------------------------------------- the choice
    def finish_training(self, grid: Grid, server_round: int, timeout: float) -> bool:
        """Score every candidate from per-cluster sums, keep the best start, choose ``k``.

        Returns ``True``: the chosen candidate's model is now the run's.
        """
        scored = [i for i, c in enumerate(self.candidates)
                  if not c.failed and c.centroids is not None]
        models = [np.asarray(self.candidates[i].centroids, dtype=np.float64) for i in scored]
        converged = {i: (bool(c.converged(int(c.history[-1]["round"])))
                         if c.history and self.protocol_rounds() is None else None)
                     for i, c in enumerate(self.candidates)}
        moments = self._score_exchange(grid, server_round, K_MOMENTS_PHASE, models, timeout)
        totals = [CandidateMoments.from_arrays(m) for m in moments]
        lloyd = 0
        for _ in range(self.refine_rounds):  # every candidate refined before the choice
            new = [np.where(t.counts[:, None] > 0, np.nan_to_num(cluster_means(t)), C)
                   for C, t in zip(models, totals, strict=True)]
            if all(np.array_equal(a, b) for a, b in zip(new, models, strict=True)):
                break
            models, lloyd = new, lloyd + 1
            moments = self._score_exchange(grid, server_round, K_MOMENTS_PHASE, models,
                                           timeout)
            totals = [CandidateMoments.from_arrays(m) for m in moments]
        if lloyd:
            logger.info("refine-rounds=%d: %d federated Lloyd rounds of every candidate "
                        "before the choice", self.refine_rounds, lloyd)
            for pos, i in enumerate(scored):
                self.candidates[i].adopt_model(models[pos])
        means = [np.nan_to_num(cluster_means(t)) for t in totals]
        spreads = self._score_exchange(grid, server_round, K_SPREADS_PHASE,
                                       models + means, timeout, count=len(models))
        scores = []
        for pos, i in enumerate(scored):
            c = self.candidates[i]
            s = candidate_scores(models[pos], totals[pos], spreads[pos][0], c.k)
            s.update({"start": i % self.n_starts, "seed": c.seed,
                      "rounds": len(c.history), "converged": converged[i]})
            scores.append(s)
        self.candidate_scores = scores
        kept = best_starts(scores)
        self.k_scores = [scores[p] for p in kept]
        chosen, runner, picks = choose(self.k_scores, self.rule)
        self.chosen = scored[kept[chosen]]
        best = self.k_scores[chosen]
        self.search = {
            "rule": self.rule, "k": best["k"],
            "runner-up": None if runner is None else self.k_scores[runner]["k"],
            "picks": {r: self.k_scores[p]["k"] for r, p in picks.items()},
            "candidates": len(self.candidates), "starts": self.n_starts,
            "k-min": self.candidate_ks[0], "k-max": self.candidate_ks[-1],
            "withheld-rows": max(s["withheld-rows"] for s in scores) if scores else 0,
            "lloyd-rounds": lloyd,
        }
        criterion = "sse" if self.rule == "sse-knee" else self.rule
        runner_text = ("" if runner is None else
                       f"; runner-up k={self.k_scores[runner]['k']} ({criterion} "
                       f"{self.k_scores[runner][criterion]:.4g})")
        logger.info("k chosen by %s: k=%d (%s %.4g)%s; the other rules pick %s",
                    self.rule, best["k"], criterion, best[criterion], runner_text,
                    ", ".join(f"{r} k={k}" for r, k in self.search["picks"].items()
                              if r != self.rule))
        if self.search["withheld-rows"]:
            message = (f"the k scores leave out up to {self.search['withheld-rows']} rows: "
                       "clusters of fewer than privacy-threshold rows at a client are "
                       "withheld from them (secure-aggregation=true scores every row)")
            logger.warning("%s", message)
            self.run_warnings.append(message)
        c = self.candidates[self.chosen]
        # the clients the chosen model was built without are the run's (diagnose names
        # them; the estimator warns): a dropped site is never silent
        for record in c.history:
            for a in record.get("absent", []):
                self.run_absent[self.who(a["node"])] = (
                    f"round {record['round']} (candidate k={c.k}): {a['reason']}")
        self.options = c.options
        self.k = c.k
        for name in ("k_local",):
            if hasattr(c, name):
                setattr(self, name, getattr(c, name))
        self.centroids = np.asarray(c.centroids, dtype=np.float64)
        self.centroid_history = list(c.centroid_history)
        self.last_shift = c.last_shift
        return True

    def _score_exchange(self, grid: Grid, server_round: int, phase: str,
                        arrays: list[np.ndarray], timeout: float, *,
                        count: int | None = None) -> list[list[np.ndarray]]:
        """One scoring phase: per candidate, the federation's totals of its arrays."""
        count = len(arrays) if count is None else count
        per = 5 if phase == K_MOMENTS_PHASE else 1
        cfg = {"candidate-count": count, "privacy-threshold": int(
            getattr(self.options, "privacy_threshold", 2))}
        shapes = [len(C) for C in arrays[:count]]
        d = int(np.shape(arrays[0])[1]) if count else 0

        def parse(a):
            return self._parse_scores(phase, a, shapes, d, cfg["privacy-threshold"])

        # (scoring draws no node sample: the candidates' rounds stay those of single runs)
        state = self.record.sample_rng.bit_generator.state
        sums = self.sum_phase(grid, server_round, phase, arrays, cfg, parse=parse,
                              parts=lambda r: r.payload.arrays[:per * count],
                              timeout=timeout).totals.sums
        self.record.sample_rng.bit_generator.state = state
        if len(sums) != per * count:
            raise RuntimeError(f"{phase}: {len(sums)} totals for {count} candidates")
        return [sums[p * per:(p + 1) * per] for p in range(count)]

    def state_dict(self) -> dict[str, Any]:
        """The base state, plus every candidate's model, history and failure.

        The App writes it after every round (``checkpoint.npz``): a search is not
        resumable, but a failed one keeps every finished round's candidates on disk.
        """
        return {**super().state_dict(), "candidates": [
            {"k": int(c.k), "seed": int(c.seed), "centroids": c.centroids,
             "history": c.history, "stopped": bool(c.stopped), "failed": c.failed}
            for c in self.candidates]}

    @staticmethod
    def _parse_scores(phase: str, arrays: list[np.ndarray], ks: list[int], d: int,
                      threshold: int) -> _Scores:
        """Check one client's scoring reply: shapes, finite values, the privacy threshold.

        ``k-moments``: per candidate ``counts (k,)`` (whole, and each either 0 or at least
        ``threshold``: a smaller cluster is withheld), ``sums (k, d)``, ``sse (k,)``,
        ``silhouette (k,)``, ``withheld (1,)``; ``k-spreads``: ``spreads (k,)`` >= 0.
        """
        per = 5 if phase == K_MOMENTS_PHASE else 1
        if len(arrays) != per * len(ks):
            raise ValueError(f"{phase}: {len(arrays)} arrays for {len(ks)} candidates")
        out = [np.asarray(a, dtype=np.float64) for a in arrays]
        if not all(np.isfinite(a).all() for a in out):
            raise ValueError(f"{phase}: a value is not finite")
        counts = []
        for c, k in enumerate(ks):
            part = out[c * per:(c + 1) * per]
            want = ([(k,), (k, d), (k,), (k,), (1,)] if per == 5 else [(k,)])
            got = [a.shape for a in part]
            if got != [tuple(w) for w in want]:
                raise ValueError(f"{phase}: candidate {c}'s arrays have shapes {got}, "
                                 f"expected {want}")
            if per == 1:
                if (part[0] < 0).any():
                    raise ValueError(f"{phase}: a negative sum of distances")
                continue
            n = part[0]
            if (n < 0).any() or not np.array_equal(n, np.rint(n)) or part[4][0] < 0:
                raise ValueError(f"{phase}: counts must be whole and non-negative")
            if ((n > 0) & (n < threshold)).any():
                raise ValueError(f"{phase}: a cluster of {int(n[(n > 0) & (n < threshold)][0])} "
                                 f"rows, fewer than the privacy threshold {threshold}")
            counts.append(n)
        return _Scores(out, counts)

    # ---------------------------------------------------------------- results
    def describe(self) -> dict[str, Any]:
        """The configuration, with the search's candidates and rule."""
        return {**super().describe(), "k-candidates": sorted(set(self.candidate_ks)),
                "starts": self.n_starts, "k-rule": self.rule}

    def result_summary(self) -> dict[str, Any]:
        """``k_scores`` (one per ``k``: the kept start), ``k-choice`` and every start's."""
        out: dict[str, Any] = {"k_scores": self.k_scores, "k-choice": self.search}
        if self.n_starts > 1:
            out["candidate_scores"] = self.candidate_scores
        return out

    def artifacts(self) -> dict[str, dict[str, np.ndarray]]:
        """``candidates.npz``: every kept candidate's centres (model units), by ``k``."""
        if not self.k_scores:
            return {}
        out = {}
        for s in self.k_scores:
            i = next(i for i, c in enumerate(self.candidates)
                     if c.k == s["k"] and c.seed == s["seed"])
            out[f"k_{s['k']}"] = np.asarray(self.candidates[i].centroids)
        return {"candidates.npz": out}


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")
