"""FedKMeans: the FKM strategy of Garst & Reinders (server side of Algorithm 1)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from flwr.serverapp import Grid

from ..algorithms.fkm import FKMOptions, as_run_dtype, fkm_server_aggregate
from ..algorithms.fkm_partial import PartialCentroids
from ..algorithms.lloyd import matched_shift
from ..algorithms.local_centroids import LocalCentroids, check_local_centroids
from ..algorithms.upload import Arrays, Claims
from ..protocol import DATA_SOURCE_PHASE
from ..replies import Collected
from .base import ClusteringStrategy, Reply, logger
from .features import known_data_sources

__all__ = ["FedKMeans"]


class _Labelling:
    """FKM's ``labelling``, from the run's feature transform (also in a resumed run).

    The nearest centre; under ``missing='partial'`` the nearest on each row's observed
    features (``masked-nearest-centroid``, as the masked algorithms). On the class: the
    nearest centre.
    """

    def __get__(self, strategy, cls=None) -> str:
        if strategy is not None and strategy.partial:
            return "masked-nearest-centroid"
        return "nearest-centroid"


class FedKMeans(ClusteringStrategy):
    """Federated k-means (FKM), iterative; client side: ``FedKMeansClient``.

    Round 1 asks the clients for ``min(n_i, k)`` k-means++-seeded local clusters (or,
    given ``initial_arrays``, for one local update from those centroids); every round
    the server runs a count-weighted k-means with ``k`` clusters over all received local
    centroids and broadcasts the result; clients keep the global centroids that attract
    a local point, run ``local_iterations`` Lloyd steps and upload means and counts.
    Stops when the Hungarian-matched centroid shift is ``<= tol`` or after
    ``max_rounds`` aggregations.

    The options are the fields of :class:`~flwr_clustering.algorithms.fkm.FKMOptions`
    (given one by one or as ``options=``).

    Parameters
    ----------
    k : int
        ``K_g``, the number of global clusters.
    privacy_threshold : int, default 2
        ``p``: clients withhold clusters of fewer than ``p`` points; the server rejects
        uploads that break it.
    local_iterations : int, default 1
        Lloyd steps per round on each client (the paper: 1).
    server_seeding : {"weighted", "unweighted"}, default "weighted"
        k-means++ seeding of the server k-means; ``"unweighted"`` reproduces the paper's
        scikit-learn < 1.3 behaviour (needed for its cluster-wise figure).
    init : {"private", "paper"}, default "private"
        ``"private"`` runs a Lloyd step before the first upload so no raw row is sent;
        ``"paper"`` uploads the k-means++ seeds, **which are raw data rows**.
    server_update : {"kmeans", "lloyd"}, default "kmeans"
        ``"kmeans"`` is the paper; ``"lloyd"`` averages the local centroids by the global
        centroid they grew from (exactly a centralized Lloyd step when ``p = 0``).
    recount : bool, default False
        Count points nearest to the new local means (the paper's scikit-learn
        semantics) instead of the partition that produced them.
    server_n_init : int, default 10
        Restarts of the server k-means.
    n_init : int, default 1
        Federated starts (scikit-learn's ``n_init``): with more than 1, the App and the
        estimator run a search (:mod:`~flwr_clustering.strategies.choose_k`) of this
        many FKM runs of different seeds in the messages of one run and keep the lowest
        federated SSE; the strategy itself fits one model.
    max_rounds : int, default 20
        Aggregations at most.
    tol : float, default 1e-6
        Convergence tolerance on the Hungarian-matched shift (negative: never).
    dtype : {"float64", "float32"}, default "float64"
        The type the clients compute in and send. With ``"float32"`` the clients hold
        their rows as float32 and upload float32 means (a float64 reply is refused), and
        every new ``C_g`` is rounded to float32 before it is broadcast, as float32; the
        server's k-means runs in float64. Not with differential privacy or secure
        aggregation.
    **kwargs
        :class:`~flwr_clustering.strategies.base.ClusteringStrategy` options
        (``min_nodes``, ``fraction``, ``seed``, ``round_timeout``, ...).
    """

    name = "fkm"
    Options = FKMOptions
    searches_k = True  # k='auto' and n-init starts (strategies/choose_k.py)
    searches_starts = True  # its n-init option is the search's federated starts
    resumable = True  # the base state (centroids, generators) is all it carries
    #: ``missing='partial'`` (asked for: ``auto`` stays ``mean``) runs partial FKM: each
    #: row clustered on its observed features by the partial-distance Lloyd step
    #: (:mod:`~flwr_clustering.algorithms.fkm_partial`), with server-update 'lloyd'
    partial_rows = True
    labelling = _Labelling()

    @property
    def partial(self) -> bool:
        """Whether this run is partial FKM (its feature transform keeps missing cells)."""
        transform = getattr(self, "feature_transform", None)
        return transform is not None and transform.missing == "keep"

    def partial_rows_problem(self) -> str | None:
        """Why these options cannot run ``missing='partial'`` (``None``: they can)."""
        o = self.options
        if o.server_update != "lloyd":
            return ("partial FKM updates each coordinate of a centre from the clients' per "
                    "cluster and feature counts and means (federated Lloyd); the paper's "
                    f"server-update={o.server_update!r} clusters whole local centroids: run "
                    "with server-update='lloyd'")
        if o.robust_trim > 0:
            return "robust-trim is not implemented for per-feature means: set robust-trim=0"
        if o.recount:
            return "recount is the paper's scikit-learn semantics of whole rows: recount=False"
        if o.init != "private":
            return ("partial FKM starts from the federation's per-feature moments (no row "
                    f"leaves a client): init={o.init!r} does not apply, use init='private'")
        if o.dp_epsilon > 0:
            return ("differential privacy clips whole rows: run with missing='drop' (rows "
                    "with a missing cell left out)")
        return None

    @property
    def secure_row_moments(self) -> bool:
        """Partial FKM's secure evaluation sums no row moments (rows miss cells)."""
        return not self.partial

    def raw_rows_option(self) -> str | None:
        """``init='paper'`` uploads the k-means++ seeds, raw rows (not with DP)."""
        summer = getattr(self, "summer", None)  # (the echo benchmark borrows this method)
        sends_init = summer is None or summer.phase("init") is not None
        return ("init='paper'" if self.options.init == "paper"
                and not getattr(self, "dp", False) and sends_init else None)

    def secure_aggregation_problem(self) -> str | None:
        """Federated Lloyd (``server-update='lloyd'``) needs only the totals."""
        if self.options.dtype != "float64":
            return ("secure aggregation sums float64 totals: run it with dtype='float64', "
                    f"not {self.options.dtype!r}")
        if self.options.robust_trim > 0:
            return ("robust-trim needs each client's means, which secure aggregation hides "
                    "(the server learns only their totals): set robust-trim=0")
        if self.options.server_update == "lloyd":
            return None
        return ("FKM's server-update='kmeans' (the paper) clusters every client's local "
                "centroids, which secure aggregation hides from the server; use "
                "server-update='lloyd' (federated Lloyd, which needs only the totals)")

    # ------------------------------------------------------ differential privacy
    def configure(self) -> None:
        """With ``dp-epsilon``: the noise of differentially private federated Lloyd."""
        self.dp = self.options.dp_epsilon > 0
        if self.dp:
            # the evaluation statistics are exact: a DP run does not ask for them
            self.evaluate = False
            self._dp_plan(self.options.dp_init)

    def round_cap(self) -> int:
        """The most rounds: :meth:`FKMOptions.round_cap` (``dp-rounds`` with DP)."""
        return self.options.round_cap()

    def _dp_plan(self, init: str) -> None:
        """Every mechanism's noise multiplier (``dp_lloyd.dp_noise_plan``), for ``init``."""
        from ..algorithms.dp_lloyd import dp_noise_plan, sensitivity
        from .dp_accountant import FlowerPrivacyAccountant

        o = self.options
        self.noise_plan = dp_noise_plan(o.dp_epsilon, o.dp_delta, self.round_cap(), init=init,
                                        init_share=o.dp_init_share,
                                        accountant=o.dp_accountant)
        self.noise_multiplier = self.noise_plan[-1]
        self.sigma = self.noise_multiplier * sensitivity(o.data_bound)
        #: the init mechanisms run, ``{"phase", "clients", "dp-noise-multiplier"}`` each
        self.dp_init_log: list[dict[str, Any]] = []
        #: every mechanism run, as the noise reached the totals (Flower's
        #: ``PrivacyAccountant`` protocol; its state is in the checkpoint)
        self.accountant = FlowerPrivacyAccountant(o.dp_accountant, o.dp_delta, o.dp_epsilon)

    def initialize(self, grid: Grid, timeout: float) -> None:
        """DP or secure aggregation: starting centroids without any client's own upload.

        The feature count and the number of clients come from the run's ``data-source``
        replies (counts and a hash of each client's rows, no statistic of them): those of
        the query made before (the App's check, or the features step's), collected again
        under the run's rules, else one query now (:meth:`_data_sources`); the clients'
        DP noise is calibrated for that many clients. DP starts from its two init
        mechanisms (``dp-init='moments'``, :meth:`_dp_moments_start`, paid from the
        budget) or draws the starting centroids in the data ball (``dp-init='random'``, no
        privacy cost); secure aggregation without DP draws them in the
        federation's per-feature mean +- 2 std, from moments summed securely
        (:func:`~flwr_clustering.algorithms.fkm.moment_init`), unless centroids are given.
        """
        if not self.dp and self.summer.phase("init") is not None:
            # the clients start the model in round 1 (``init``; partial FKM: from the
            # moments of its observed values); only a plain exchange carries ``init``
            if self.partial:
                self._partial_start(grid, timeout)
            return
        from ..algorithms.dp_lloyd import dp_initial_centroids
        from ..algorithms.fkm import moment_init

        shared = getattr(self, "shared_start", None)  # a search's first candidate's
        if shared is None:
            valid = self._data_sources(grid, timeout)
            transform = getattr(self, "feature_transform", None)
            if transform is not None:
                # the agreed features: a site's file may hold others (ignored) or dates
                # and categories (converted), so its own column count is not the width
                width = len(transform.features)
            else:
                dims = sorted({int(r.metrics.get("num-features", -1)) for r in valid})
                if len(dims) != 1 or dims[0] < 1:
                    raise ValueError(f"DP FKM: the clients report feature counts {dims}, "
                                     "not one")
                width = dims[0]
            shared = {"clients": len(valid), "features": width}
        self.dp_clients = int(shared["clients"])
        self.n_features = int(shared["features"])
        self.shared_start = shared
        if not self.dp and self.partial:
            if self.centroids is None:
                from ..algorithms.fkm_partial import partial_moment_init

                totals = self.secure_exchange(grid, 0, "secure-partial-moments",
                                              config=self.options.to_config(),
                                              timeout=timeout)
                count, total, sumsq = totals.sums
                self.centroids = partial_moment_init(np.rint(count), total, sumsq, self.k,
                                                     self.rng)
                logger.info("secure aggregation: %d starting centroids drawn in the "
                            "federation's per-feature mean +- 2 std of the observed values",
                            self.k)
            return
        if not self.dp:
            if self.centroids is None:
                if "moments" not in shared:
                    totals = self.secure_exchange(grid, 0, "secure-moments",
                                                  config=self.options.to_config(),
                                                  timeout=timeout)
                    shared["moments"] = totals.sums
                n, sum_x, sum_sq = shared["moments"]
                self.centroids = moment_init(float(np.rint(n[0])), sum_x, sum_sq, self.k,
                                             self.rng)
                logger.info("secure aggregation: %d starting centroids drawn in the "
                            "federation's per-feature mean +- 2 std (%d rows)", self.k,
                            int(np.rint(n[0])))
            return
        # given centroids or dp-init='random': no init mechanism, T equal rounds (the
        # clients are told, to calibrate their share of the noise alike)
        self.dp_init_used = ("random" if self.centroids is not None
                             or self.options.dp_init == "random" else "moments")
        self._dp_plan(self.dp_init_used)
        if self.centroids is None and self.options.dp_init == "random":
            self.centroids = dp_initial_centroids(self.k, self.n_features,
                                                  self.options.data_bound, self.rng)
        elif self.centroids is None:
            self.centroids = self._dp_moments_start(grid, timeout)
        logger.info("DP federated Lloyd: epsilon=%g, delta=%g over %d rounds, data bound "
                    "%g: noise multiplier %.4g, sigma %.4g on the totals (%s, %d clients)",
                    self.options.dp_epsilon, self.options.dp_delta, self.max_rounds,
                    self.options.data_bound, self.noise_multiplier, self.sigma,
                    self.options.dp_placement, self.dp_clients)

    def _data_sources(self, grid: Grid, timeout: float) -> Collected:
        """The valid ``data-source`` replies of every node (at least ``min_nodes``).

        The replies the run has already (:func:`~.features.known_data_sources`: the App's
        check, or the features step's query), collected again under the run's rules
        (node identities, absent nodes and declared rows as a second query would leave
        them, no second ledger entry), else one query now. With ``fraction < 1`` the
        query is made (it samples the nodes, drawing from the sampling generator, which
        the rounds' samples follow).
        """
        known = known_data_sources(self) if self.fraction >= 1.0 else None
        if known is None:
            return self.exchange(grid, 0, DATA_SOURCE_PHASE, min_replies=self.min_nodes,
                                 timeout=timeout)
        return self.exchanger.collect_again(known.asked, min_replies=self.min_nodes)

    def _partial_start(self, grid: Grid, timeout: float) -> None:
        """Partial FKM's start: ``k`` centres in each feature's mean +- 2 std of its values.

        From every client's per-feature count, sum and sum of squares of its observed
        values (``partial-moments``; a feature seen in fewer than ``privacy-threshold``
        of a client's rows withheld), added in client-id order, unless centroids are
        given (:func:`~flwr_clustering.algorithms.fkm_partial.partial_moment_init`).
        """
        from ..algorithms.fkm_partial import partial_moment_init, sum_moments

        if self.centroids is not None:
            return
        d = len(self.feature_transform.features)
        p = max(int(self.privacy_threshold), 1)

        def parse(arrays):
            count, total, sumsq = _dp_arrays(arrays, [(d,), (d,), (d,)],
                                             "per-feature counts, sums, sums of squares")
            if (count < 0).any() or not np.array_equal(count, np.rint(count)) or (
                    (count > 0) & (count < p)).any() or (sumsq < 0).any():
                raise ValueError("per-feature counts must be whole, 0 or at least the privacy "
                                 f"threshold {p}, and the sums of squares non-negative")
            # the per-feature counts: each at most the client's rows
            return Arrays([count, total, sumsq],
                          Claims(counts=np.asarray(count).reshape(1, -1), features=d))

        valid = self.exchange(grid, 0, "partial-moments", config=self.options.to_config(),
                              parse=parse, min_replies=self.min_nodes, timeout=timeout)
        count, total, sumsq = sum_moments([r.payload for r in valid])
        self.centroids = partial_moment_init(count, total, sumsq, self.k, self.rng)
        logger.info("partial FKM: %d starting centroids drawn in the federation's per-feature "
                    "mean +- 2 std of the observed values (%d clients)", self.k, len(valid))

    def _dp_init_exchange(self, grid: Grid, phase: str, arrays: list[np.ndarray],
                          parse, timeout: float) -> list[np.ndarray]:
        """One init mechanism: the clients' noisy statistics, summed in client-id order."""
        config = {"dp-clients": int(self.dp_clients), "dp-round": 0,
                  **self.options.to_config()}
        # secure aggregation: the server learns only the totals
        totals = self.sum_phase(grid, 0, phase, arrays, config, parse=parse,
                                parts=lambda r: r.payload, min_replies=self.min_nodes,
                                timeout=timeout).totals
        parts = [np.asarray(a, dtype=np.float64) for a in totals.sums]
        clients = len(totals.nodes)
        z = self.noise_plan[len(self.dp_init_log)]
        info = self._dp_noise_info(f"round 0 {phase}", z, clients)
        self.dp_init_log.append({"phase": phase, **info})
        return parts

    def _dp_moments_start(self, grid: Grid, timeout: float) -> np.ndarray:
        """``dp-init='moments'``: the two init mechanisms, then the starting centroids.

        As :func:`~flwr_clustering.algorithms.dp_lloyd.run_dp_lloyd`: noisy moments, the
        candidates drawn in their top subspace, the candidates' noisy sums and counts,
        count-weighted k-means over their means.
        """
        from ..algorithms.dp_lloyd import (
            dp_init_candidates,
            dp_init_from_candidates,
            moments_sensitivity,
            sensitivity,
        )

        o, d = self.options, self.n_features
        central = o.dp_placement == "central"

        def parse_moments(arrays):  # noisy: no count to check; the dimension
            return Arrays(_dp_arrays(arrays, [(1,), (d,), (d, d)], "noisy count, sum, moments"),
                          Claims(features=d))

        count, total, second = self._dp_init_exchange(grid, "dp-moments", [], parse_moments,
                                                      timeout)
        s_mom = self.noise_plan[0] * moments_sensitivity(o.data_bound)
        rows = float(np.asarray(count).reshape(-1)[0])
        if s_mom > DP_NOISE_WARN_SHARE * max(rows, 1.0):
            message = (f"DP start: the noise on the federation's row count (std {s_mom:.3g}) "
                       f"is more than {DP_NOISE_WARN_SHARE:.0%} of the rows (noisy count "
                       f"{rows:.0f}): at dp-epsilon={o.dp_epsilon:g} with data-bound="
                       f"{o.data_bound:g} the start and the rounds are mostly noise; a "
                       "larger dp-epsilon, more rows or a tighter data-bound help")
            logger.warning(message)
            self.run_warnings.append(message)
        U, mean, Q = dp_init_candidates(count, total, second, self.k, self.rng,
                                        sigma=s_mom if central else 0.0)

        def parse_candidates(arrays):  # noisy, in the candidates' subspace: claims nothing
            return _dp_arrays(arrays, [Q.shape, (len(Q),)], "noisy candidate sums, counts")

        sums, counts = self._dp_init_exchange(grid, "dp-candidates", [U, Q],
                                              parse_candidates, timeout)
        s_cand = self.noise_plan[1] * sensitivity(o.data_bound)
        logger.info("DP start: %d candidates in a %d-dimensional subspace of the noisy "
                    "moments; %d centroids from them", len(Q), U.shape[1], self.k)
        return dp_init_from_candidates(sums, counts, U, mean, Q, self.k, bound=o.data_bound,
                                       total_sigma=s_cand, rng=self.rng,
                                       sigma=s_cand if central else 0.0)

    def reset(self) -> None:
        """The base's reset; forget a search's shared start (:meth:`initialize`)."""
        super().reset()
        self.shared_start = None

    def state_dict(self) -> dict[str, Any]:
        """The base state, plus the DP run's client count."""
        return {**super().state_dict(), "dp_clients": getattr(self, "dp_clients", None),
                "dp_init_used": getattr(self, "dp_init_used", None),
                "dp_noise_plan": list(getattr(self, "noise_plan", ())),
                "dp_init_log": list(getattr(self, "dp_init_log", ())),
                "dp_accountant": (self.accountant.state_dict() if getattr(self, "dp", False)
                                  else None)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        if state.get("dp_clients") is not None:
            self.dp_clients = int(state["dp_clients"])
        if state.get("dp_noise_plan"):
            self.noise_plan = tuple(float(z) for z in state["dp_noise_plan"])
            self.noise_multiplier = self.noise_plan[-1]
            self.dp_init_log = [dict(e) for e in state.get("dp_init_log", [])]
        if state.get("dp_accountant") is not None:
            self.accountant.load_state_dict(state["dp_accountant"])
        if state.get("dp_init_used"):
            self.dp_init_used = str(state["dp_init_used"])

    def privacy_ledger(self) -> dict[str, Any]:
        """The base ledger; with DP, its parameters and the epsilon of the rounds run."""
        ledger = super().privacy_ledger()
        if not self.dp:
            return ledger
        from ..algorithms.dp_lloyd import ACCOUNTANTS, server_epsilon_of

        rounds = len(self.history)
        o = self.options
        clients = getattr(self, "dp_clients", 1)
        init = list(getattr(self, "dp_init_log", []))
        planned = list(self.noise_plan[:len(init)]) + [self.noise_multiplier] * rounds
        # every mechanism run, with the noise that reached the totals: the init's, the rounds'
        ledger_epsilon = self.accountant.get_epsilon(o.dp_delta)
        ledger.update({
            "differential-privacy": {
                "mechanism": "Gaussian on clipped sums and counts",
                # the run's accountant calibrated the noise and states epsilon; both beside
                "accountant": o.dp_accountant,
                "epsilons": {method: (ledger_epsilon if method == o.dp_accountant else
                                      self.accountant.core.copy(method).get_epsilon(
                                          o.dp_delta)) for method in ACCOUNTANTS},
                "placement": o.dp_placement, "data-bound": o.data_bound,
                "noise-multiplier": self.noise_multiplier, "sigma": self.sigma,
                "target-epsilon": o.dp_epsilon, "calibrated-rounds": self.max_rounds,
                "rounds-run": rounds, "clients": clients,
                "init": "moments" if init else "random", "init-share": (
                    o.dp_init_share if init else 0.0),
                # every mechanism's noise multiplier, in the order they ran
                "mechanisms": [{"phase": e["phase"], "round": 0,
                                "noise-multiplier": e["dp-noise-multiplier"],
                                "clients": e["dp-clients"]} for e in init] + [
                    {"phase": "dp-update", "round": int(h["round"]),
                     "noise-multiplier": h.get("dp-noise-multiplier", self.noise_multiplier),
                     "clients": h.get("dp-clients", clients)} for h in self.history],
            },
            "epsilon": ledger_epsilon,
            "delta": o.dp_delta,
            # under secure aggregation the server sees only the total noise
            "server-epsilon": (ledger_epsilon if self.summer.sums_only else
                               server_epsilon_of(planned, o.dp_delta, clients,
                                                 o.dp_placement, o.dp_accountant)
                               if planned else 0.0),
        })
        return ledger

    def initial_centroids(self, initial_arrays) -> np.ndarray | None:
        """The base's starting centroids, rounded to the run's ``dtype``."""
        C = super().initial_centroids(initial_arrays)
        return None if C is None else as_run_dtype(C, self.options.dtype).astype(np.float64)

    def train_arrays(self, server_round: int) -> list[np.ndarray]:
        """The current centroids, in the run's ``dtype`` (float32: half the broadcast)."""
        if self.centroids is None:
            return []
        return [as_run_dtype(self.centroids, self.options.dtype)]

    def train_config(self, server_round: int) -> dict[str, Any]:
        """Return the client options; ``phase`` is ``init`` until centroids exist."""
        if getattr(self, "dp", False):  # (the echo benchmark borrows this method)
            return {"phase": "dp-update", "dp-round": server_round,
                    "dp-clients": int(self.dp_clients), **self.options.to_config(),
                    "dp-init": getattr(self, "dp_init_used", self.options.dp_init)}
        if self.partial:
            return {"phase": "partial-update", **self.options.to_config()}
        return {"phase": "init" if self.centroids is None else "update",
                **self.options.to_config()}

    def parse_payload(self, server_round: int, arrays: list[np.ndarray]) -> Any:
        """Decode ``[means, counts, index]`` and check shapes, finiteness, counts.

        DP: ``[sums (k, d), counts (k,)]``, noisy floats (no count rule applies; the
        payload claims only its dimension). The counts are the partition behind each
        mean, except for the paper's round-1 seeds (``init='paper'``: rows, counted by
        the rows nearest to them) and with ``recount`` (counted after the means moved):
        those means are held to the bound of a single row (``single_row``), which every
        row and every mean of rows keeps.
        """
        if self.dp:
            if len(arrays) != 2:
                raise ValueError(f"expected 2 arrays (noisy sums, counts), got {len(arrays)}")
            sums, counts = (np.asarray(a) for a in arrays)
            if sums.shape != self.centroids.shape or counts.shape != (self.k,):
                raise ValueError(f"noisy sums {sums.shape} and counts {counts.shape}, "
                                 f"expected {self.centroids.shape} and ({self.k},)")
            if sums.dtype.kind != "f" or counts.dtype.kind != "f" or not (
                    np.isfinite(sums).all() and np.isfinite(counts).all()):
                raise ValueError("noisy sums and counts must be finite floats")
            return Arrays((sums.astype(np.float64), counts.astype(np.float64)),
                          Claims(features=int(sums.shape[1])))
        if self.partial:
            from ..algorithms.fkm_partial import check_partial_upload

            return check_partial_upload(
                PartialCentroids.from_arrays(arrays), n_features=self.n_features,
                privacy_threshold=self.privacy_threshold, k=len(self.centroids),
                dtype=self.options.dtype)
        upload = check_local_centroids(
            LocalCentroids.from_arrays(arrays), n_features=self.n_features,
            privacy_threshold=self.privacy_threshold,
            k=None if self.centroids is None else len(self.centroids),
            # init: k seeds; update: one local centroid per global centroid at most
            max_centroids=self.k if self.centroids is None else len(self.centroids),
            dtype=self.options.dtype,
        )
        if self.options.recount or (self.centroids is None and self.options.init == "paper"):
            return dataclasses.replace(upload, single_row=True)
        return upload

    def aggregate_payloads(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """Run the FKM server step on the uploads in client-id order."""
        previous = self.centroids
        if self.dp:
            from ..algorithms.dp_lloyd import dp_server_step

            sums = sum(r.payload[0] for r in replies)  # client-id order, as run_dp_lloyd
            counts = sum(r.payload[1] for r in replies)
            central = self.options.dp_placement == "central"
            return dp_server_step(sums, counts, previous, bound=self.options.data_bound,
                                  sigma=self.sigma if central else 0.0, rng=self.rng)
        if self.partial:
            from ..algorithms.fkm_partial import partial_server_step

            new = partial_server_step([r.payload for r in replies], previous)
            return as_run_dtype(new, self.options.dtype)
        update = self.server_update if previous is not None else "kmeans"
        new = fkm_server_aggregate(
            [r.payload for r in replies], self.k, self.rng, seeding=self.server_seeding,
            update=update, previous=previous, n_init=self.server_n_init,
            trim=self.options.robust_trim,
        )
        if len(new) < self.k:  # diagnose() warns if the final model has fewer than k
            logger.info(
                "round %d: only %d local centroids received (<= k=%d); using them as they are",
                server_round, len(new), self.k,
            )
        # what the clients will compute with (the base keeps it as float64 values)
        return as_run_dtype(new, self.options.dtype)

    def aggregate_sums(self, server_round: int, totals) -> np.ndarray:
        """Federated Lloyd from the secure totals (DP: noisy totals, as ``dp-update``)."""
        from ..algorithms.fkm import lloyd_from_totals

        sums, counts = totals.sums
        previous = self.centroids
        if self.partial:  # per centroid and feature: the sums and counts of observed values
            from ..algorithms.fkm_partial import partial_lloyd_from_totals

            if sums.shape != previous.shape or counts.shape != previous.shape:
                raise RuntimeError(f"round {server_round}: the secure totals have shapes "
                                   f"{sums.shape} and {counts.shape}, expected "
                                   f"{previous.shape} twice")
            return partial_lloyd_from_totals(sums, np.rint(counts), previous)
        if sums.shape != previous.shape or counts.shape != (len(previous),):
            raise RuntimeError(f"round {server_round}: the secure totals have shapes "
                               f"{sums.shape} and {counts.shape}, expected {previous.shape}")
        if self.dp:
            from ..algorithms.dp_lloyd import dp_server_step

            central = self.options.dp_placement == "central"
            return dp_server_step(sums, counts, previous, bound=self.options.data_bound,
                                  sigma=self.sigma if central else 0.0, rng=self.rng)
        return lloyd_from_totals(sums, np.rint(counts), previous)

    def _dp_round_info(self, server_round: int, clients: int) -> dict[str, Any]:
        return self._dp_noise_info(f"round {server_round}", self.noise_multiplier, clients)

    def _dp_noise_info(self, what: str, z: float, clients: int) -> dict[str, Any]:
        # distributed noise: each client brought 1/sqrt(m) of it; a missing client's
        # share is missing from the totals, and the mechanism costs more than planned
        planned = z
        if self.options.dp_placement == "distributed" and clients < self.dp_clients:
            z *= math.sqrt(clients / self.dp_clients)
            message = (f"{what}: only {clients} of {self.dp_clients} "
                       "clients' noise is in the totals (distributed placement): its "
                       f"noise multiplier is {z:.4g}, not {planned:.4g}; privacy.json's "
                       "epsilon counts it")
            logger.warning(message)
            self.run_warnings.append(message)
        self.accountant.spend(z)
        return {"dp-clients": clients, "dp-noise-multiplier": z}

    def round_info(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Return ``M``, the number of local centroids received (and the empty uploads).

        ``empty-uploads`` (only when > 0): clients that sent no centroid, every local
        cluster being smaller than the privacy threshold; :meth:`diagnose` warns when the
        last round has any. Under secure aggregation (``replies`` a ``Collected`` with
        ``totals``) only DP's noise multiplier.
        """
        totals = getattr(replies, "totals", None)  # a secure round: the sums only
        if self.dp:
            return self._dp_round_info(server_round, len(replies) if totals is None
                                       else len(totals.nodes))
        if totals is not None:
            return {}
        info: dict[str, Any] = {
            "uploaded-centroids": int(sum(len(r.payload.means) for r in replies))}
        empty = sum(len(r.payload.means) == 0 for r in replies)
        if empty:
            info["empty-uploads"] = int(empty)
        return info

    def shift(self, previous: np.ndarray | None, new: np.ndarray) -> float:
        """Return the Hungarian-matched shift (cluster ids are not stable across rounds)."""
        return matched_shift(previous, new)

    def converged(self, server_round: int) -> bool:
        """Return whether the matched shift fell to ``tol``."""
        return self.last_shift <= self.tol


#: The DP start warns when the noise on the federation's row count exceeds this share of it.
DP_NOISE_WARN_SHARE = 0.1


def _dp_arrays(arrays: list[np.ndarray], shapes: list[tuple], what: str
               ) -> list[np.ndarray]:
    """A DP init reply: finite float arrays of the expected shapes, as float64."""
    if len(arrays) != len(shapes):
        raise ValueError(f"expected {len(shapes)} arrays ({what}), got {len(arrays)}")
    out = []
    for a, shape in zip(arrays, shapes, strict=True):
        a = np.asarray(a)
        if a.shape != tuple(shape) or a.dtype.kind != "f" or not np.isfinite(a).all():
            raise ValueError(f"{what}: expected finite floats of shape {tuple(shape)}, got "
                             f"{a.dtype} {a.shape}")
        out.append(a.astype(np.float64))
    return out
