"""Differentially private federated Lloyd: clipped rows, Gaussian noise on sums and counts.

The federated Lloyd step (FKM with ``server-update='lloyd'``) needs only the federation's
per-cluster sums and counts. Here every row is first clipped to the L2 ball of radius
``bound`` (the data bound, ``B``), so adding or removing one row changes one cluster's sum
by at most ``B`` and its count by 1: the L2 sensitivity of the (sums, counts) vector is
``Delta = sqrt(B^2 + 1)``. Gaussian noise of standard deviation ``sigma = z * Delta`` on
every sum and count entry makes each round a Gaussian mechanism with noise multiplier
``z``; ``T`` rounds compose to ``(epsilon, delta)``-DP with respect to adding or removing
one row of any client. The accountant (:class:`GaussianAccountant`) is
:mod:`dp_accounting`'s privacy loss distribution (``"pld"``, default: the ``T``-fold
Gaussian is composed exactly, up to a pessimistic discretisation of ``1e-4`` in the privacy
loss), or its Renyi-DP one (``"rdp"``, an upper bound: about 8 % more noise at
``epsilon = 1``, ``delta = 1e-5``); both are reported, and the noise is calibrated by the
run's (:func:`noise_multiplier_for`).

Where the noise is added decides who it protects against:

* ``"distributed"`` (default): each of the ``m`` clients adds ``N(0, sigma^2 / m)`` to its
  own sums and counts, so the federation's totals carry ``N(0, sigma^2)``. The released
  model is ``(epsilon, delta)``-DP. A server that sees each client's upload on its own
  faces only ``sigma / sqrt(m)`` per client: against it the guarantee is the weaker one
  of noise multiplier ``z / sqrt(m)`` (:func:`server_epsilon`). Under secure aggregation
  (FKM's ``secure-aggregation``) it sees only the totals, and the full guarantee holds.
  Clients that drop out lower the total noise: a round with ``m' < m`` replies has noise
  multiplier ``z sqrt(m'/m)``, which :func:`dp_epsilon_of` composes (the FKM strategy
  records it per round).
* ``"central"``: the clients send exact sums and counts and the server adds
  ``N(0, sigma^2)``; the model is ``(epsilon, delta)``-DP for everyone but the server,
  which must be trusted.

The start (``init``) is where DP clustering wins or loses (Scott et al., ICML 2025,
FedDP-KMeans, start from server-side data, which we do not have). ``"moments"`` (default)
is a DP initialisation that sends no row, two Gaussian mechanisms before the Lloyd steps:

1. **moments** (:func:`dp_moment_stats`): every client sends its row count, the sum of
   its clipped rows and the sum of their outer products ``x x^T``, noised (one row moves
   them by at most ``sqrt(1 + B^2 + B^4)`` in L2; the symmetric matrix's noise is drawn
   on its upper triangle and mirrored). The server takes the top ``p = min(k, d)``
   eigenvectors ``U`` of the noisy covariance (DP PCA) and draws
   ``CANDIDATES_PER_CLUSTER * k`` candidate centres from the Gaussian of the noisy mean
   and covariance in that subspace (:func:`dp_init_candidates`): data-independent given
   the released statistics.
2. **candidates** (:func:`dp_candidate_stats`): every client assigns its projected
   clipped rows ``U^T x`` to the nearest candidate and sends noisy per-candidate sums and
   counts (sensitivity ``sqrt(B^2 + 1)``, as a Lloyd step). The server keeps the
   candidates whose noisy count is at least twice the noise, and clusters their means by
   count-weighted k-means into ``k`` centres, lifted back to ``d`` dimensions
   (:func:`dp_init_from_candidates`).

The budget (:func:`dp_noise_plan`): every mechanism is Gaussian, and Gaussians compose
exactly to the Gaussian of noise multiplier ``(sum_i z_i^-2)^-1/2`` (Dong, Roth and Su's
Gaussian DP; Renyi DP composes them the same way); the target
``epsilon`` fixes that one multiplier ``z``, and mechanism ``i`` gets the share ``s_i``
of ``1/z^2`` (``z_i = z / sqrt(s_i)``): ``init_share`` split evenly between the two init
mechanisms, the rest evenly over the ``T`` Lloyd steps. The accountant composes all of
them (:func:`dp_epsilon_of`). ``init="random"`` is the former start: uniform in the cube
inside the ball of radius ``B`` (data-independent, no privacy cost, ``T`` equal rounds).

Other choices of ours (FastLloyd and FedDP-KMeans make similar ones): the privacy
threshold does not apply (the noise, not withholding, protects
small clusters, and withholding would itself depend on the data); a centroid whose noisy
count is below 1 keeps its previous position; every centroid is projected back into the
ball of radius ``B``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby
from typing import Any

import numpy as np

from .lloyd import check_data, cluster_sums, nearest_labels, weighted_kmeans

__all__ = [
    "ACCOUNTANTS",
    "CANDIDATES_PER_CLUSTER",
    "DEFAULT_INIT_SHARE",
    "DP_INITS",
    "NOISE_PLACEMENTS",
    "DPLloydResult",
    "GaussianAccountant",
    "client_noise_rng",
    "clip_rows",
    "dp_client_stats",
    "dp_epsilon",
    "dp_epsilon_of",
    "dp_candidate_stats",
    "dp_init_candidates",
    "dp_init_from_candidates",
    "dp_initial_centroids",
    "dp_moment_stats",
    "dp_noise_plan",
    "moments_sensitivity",
    "dp_server_step",
    "gaussian_noise",
    "noise_multiplier_for",
    "run_dp_lloyd",
    "sensitivity",
    "server_epsilon",
    "server_epsilon_of",
]

#: The privacy accountants: dp-accounting's privacy loss distribution (default) or Renyi DP.
ACCOUNTANTS = ("pld", "rdp")
#: The PLD accountant's discretisation of the privacy loss (dp-accounting's default) for a
#: Gaussian of noise multiplier ``z >= 1``; ``1e-4 / z^2`` below (the loss's scale grows as
#: ``1 / z^2``, and so would the PLD's size and time: 2 s at ``z = 0.27``). Its rounding is
#: pessimistic: the epsilon reported is an upper bound, within about this of the exact one.
PLD_DISCRETIZATION = 1e-4
#: Where the Gaussian noise is added (see the module docstring).
NOISE_PLACEMENTS = ("distributed", "central")
#: The starts of DP federated Lloyd (see the module docstring).
DP_INITS = ("moments", "random")
#: Candidate centres per cluster drawn by the ``"moments"`` start.
CANDIDATES_PER_CLUSTER = 8
#: The share of the budget (of ``1/z^2``) the ``"moments"`` start spends.
DEFAULT_INIT_SHARE = 0.5
#: The noise generators' streams: Lloyd rounds, then the two init mechanisms.
_LLOYD_STREAM, _MOMENTS_STREAM, _CANDIDATES_STREAM = 7, 8, 9


def _accountant():
    try:
        import dp_accounting
        from dp_accounting import pld, rdp
    except ImportError as ex:  # pragma: no cover - depends on the environment
        raise ImportError("differential privacy needs the dp-accounting package: "
                          "pip install 'flwr-clustering[dp]'") from ex
    return dp_accounting, pld, rdp


def _check_method(method: str) -> str:
    if method not in ACCOUNTANTS:
        raise ValueError(f"the privacy accountant must be one of {ACCOUNTANTS}, got {method!r}")
    return method


class GaussianAccountant:
    """The privacy spent by Gaussian mechanisms run one after another (plain Python).

    Each mechanism is :mod:`dp_accounting`'s ``GaussianDpEvent`` of noise multiplier ``z``
    (L2 sensitivity 1, the noise's standard deviation ``z``; add or remove one row), as
    every statistic of DP federated Lloyd is. The state is the list of mechanisms composed
    (``[z, count]``, in order), from which :meth:`get_epsilon` rebuilds dp-accounting's
    accountant, runs of equal ``z`` self-composed: a restored state
    (:meth:`load_state_dict`) gives the same figures, bit for bit. The method names are
    those of Flower's ``PrivacyAccountant`` protocol (``compose``, ``get_epsilon``,
    ``get_delta``, ``num_releases``, ``state_dict``, ``load_state_dict``); the Flower
    adapter is :class:`flwr_clustering.strategies.dp_accountant.FlowerPrivacyAccountant`.

    Parameters
    ----------
    method : {"pld", "rdp"}, default "pld"
        dp-accounting's ``PLDAccountant`` (privacy loss distribution, exact for the
        Gaussian up to its pessimistic discretisation :data:`PLD_DISCRETIZATION`) or
        ``RdpAccountant`` (Renyi DP, an upper bound).
    """

    def __init__(self, method: str = "pld") -> None:
        self.method = _check_method(method)
        self.events: list[tuple[float, int]] = []

    @property
    def num_releases(self) -> int:
        """The number of mechanisms composed."""
        return sum(count for _, count in self.events)

    def compose(self, noise_multiplier: float, count: int = 1) -> None:
        """Compose ``count`` Gaussian mechanisms of noise multiplier ``noise_multiplier``.

        ``noise_multiplier = 0`` (no noise) makes the epsilon infinite.
        """
        z = float(noise_multiplier)
        if not (math.isfinite(z) and z >= 0):
            raise ValueError(f"a noise multiplier must be finite and >= 0, got {z}")
        if isinstance(count, bool) or int(count) != count or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        self.events.append((z, int(count)))

    def _backend(self):
        return _backend(self.method, tuple(self.events))

    def get_epsilon(self, delta: float) -> float:
        """The ``epsilon`` of every mechanism composed, at ``delta`` (0 for none)."""
        if not 0 < float(delta) < 1:
            raise ValueError(f"delta must lie in (0, 1), got {delta}")
        if not self.events:
            return 0.0
        if any(z == 0 for z, _ in self.events):
            return math.inf
        return _epsilon_of_events(self.method, tuple(self.events), float(delta))

    def get_delta(self, epsilon: float) -> float:
        """The ``delta`` of every mechanism composed, at ``epsilon`` (0 for none)."""
        if not float(epsilon) >= 0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
        if not self.events:
            return 0.0
        if any(z == 0 for z, _ in self.events):
            return 1.0
        return float(self._backend().get_delta(float(epsilon)))

    def copy(self, method: str | None = None) -> GaussianAccountant:
        """An accountant of the same mechanisms (composing more leaves this one alone).

        ``method``: another accountant's view of them (default: this one's).
        """
        other = GaussianAccountant(self.method if method is None else method)
        other.events = list(self.events)
        return other

    def state_dict(self) -> dict[str, Any]:
        """The JSON-able state: the method and every mechanism composed, in order."""
        return {"method": self.method,
                "events": [{"noise_multiplier": z, "count": c} for z, c in self.events]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (of an accountant of the same method)."""
        if state.get("method") != self.method:
            raise ValueError(f"the accountant state is of method {state.get('method')!r}, "
                             f"this accountant's is {self.method!r}")
        restored = GaussianAccountant(self.method)
        for e in state.get("events", []):
            restored.compose(float(e["noise_multiplier"]), int(e["count"]))
        self.events = restored.events


def _backend(method: str, events: tuple[tuple[float, int], ...]):
    """dp-accounting's accountant with every mechanism composed.

    ``"rdp"``: each run of equal multipliers self-composed. ``"pld"``
    (:data:`PLD_DISCRETIZATION`): the same when all are equal (the ``PLDAccountant``
    composes ``T`` Gaussians of ``z`` exactly, as one of ``z / sqrt(T)``); mechanisms of
    different multipliers are composed the same exact way, as the one Gaussian of
    ``(sum_i z_i^-2)^-1/2`` (Gaussian DP, Dong, Roth and Su 2022), which spares the
    discretised convolution of their distributions (its error and its time).
    """
    dp_accounting, pld, rdp = _accountant()
    runs = [(z, sum(c for _, c in run)) for z, run in groupby(events, key=lambda e: e[0])]
    if method == "rdp":
        acc = rdp.RdpAccountant()
        for z, count in runs:
            acc.compose(dp_accounting.SelfComposedDpEvent(
                dp_accounting.GaussianDpEvent(noise_multiplier=z), count))
        return acc
    joint = (runs[0][0] / math.sqrt(runs[0][1]) if len(runs) == 1 else
             1.0 / math.sqrt(sum(count / (z * z) for z, count in runs)))
    acc = pld.PLDAccountant(
        value_discretization_interval=PLD_DISCRETIZATION * max(1.0, joint ** -2))
    if len(runs) == 1:
        z, count = runs[0]
        return acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.GaussianDpEvent(noise_multiplier=z), count))
    return acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=joint))


@lru_cache(maxsize=1024)
def _epsilon_of_events(method: str, events: tuple[tuple[float, int], ...],
                       delta: float) -> float:
    """:meth:`GaussianAccountant.get_epsilon` (cached: a PLD costs up to 0.3 s to build)."""
    return float(_backend(method, events).get_epsilon(delta))


def sensitivity(bound: float) -> float:
    """L2 sensitivity of one round's (sums, counts) to one row: ``sqrt(B^2 + 1)``."""
    return math.sqrt(float(bound) ** 2 + 1.0)


def dp_epsilon(noise_multiplier: float, rounds: int, delta: float,
               accountant: str = "pld") -> float:
    """The ``epsilon`` of ``rounds`` Gaussian mechanisms of noise multiplier ``z`` at ``delta``.

    Computed by :mod:`dp_accounting`'s ``accountant`` (``"pld"``: ``PLDAccountant``,
    ``"rdp"``: ``RdpAccountant``), ``GaussianDpEvent`` composed ``rounds`` times;
    ``inf`` for ``z = 0``.
    """
    if noise_multiplier <= 0:
        return math.inf
    if rounds < 1:
        return 0.0
    acc = GaussianAccountant(accountant)
    acc.compose(noise_multiplier, int(rounds))
    return acc.get_epsilon(delta)


def dp_epsilon_of(noise_multipliers: Sequence[float], delta: float,
                  accountant: str = "pld") -> float:
    """The ``epsilon`` of Gaussian mechanisms of different noise multipliers, composed.

    Equal multipliers give exactly :func:`dp_epsilon`; a round whose totals carried less
    noise (distributed noise with clients missing) is composed with its own multiplier.
    """
    acc = GaussianAccountant(accountant)
    for z in noise_multipliers:
        acc.compose(z)
    return acc.get_epsilon(delta)


def server_epsilon(noise_multiplier: float, rounds: int, delta: float, clients: int,
                   placement: str = "distributed", accountant: str = "pld") -> float:
    """The ``epsilon`` against a server that sees every client's upload on its own.

    ``"distributed"``: each upload carries ``1 / sqrt(m)`` of the noise, so noise multiplier
    ``z / sqrt(m)``; ``"central"``: the server adds the noise itself: ``inf``.
    """
    if placement == "central":
        return math.inf
    return dp_epsilon(noise_multiplier / math.sqrt(max(int(clients), 1)), rounds, delta,
                      accountant)


def noise_multiplier_for(epsilon: float, delta: float, rounds: int, *,
                         tol: float = 1e-4, accountant: str = "pld") -> float:
    """The smallest noise multiplier ``z`` whose ``rounds``-fold composition is ``epsilon``-DP.

    By ``accountant``'s :func:`dp_epsilon` (decreasing in ``z``), to relative tolerance
    ``tol``: the ``z`` returned meets ``epsilon`` and ``z (1 - tol)`` does not. Bisection,
    for ``"rdp"`` from ``[0, 1]``, for ``"pld"`` from just below the exact Gaussian's
    multiplier (Balle and Wang's analytic Gaussian, dp-accounting's
    ``get_sigma_gaussian``, which the PLD's pessimistic epsilon never undercuts): two
    PLD evaluations as a rule. 0 for ``epsilon = inf``.
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    _check_method(accountant)
    if math.isinf(epsilon):
        return 0.0
    return _calibrated(float(epsilon), float(delta), int(rounds), float(tol), accountant)


@lru_cache(maxsize=256)
def _calibrated(epsilon: float, delta: float, rounds: int, tol: float, accountant: str
                ) -> float:
    """:func:`noise_multiplier_for` (cached: a run's server and clients ask alike)."""
    if accountant == "pld":
        from dp_accounting.gaussian_mechanism import get_sigma_gaussian

        # the exact Gaussian's multiplier: the PLD's pessimistic epsilon is never below
        # the exact one, so no z below it meets epsilon
        lo = math.sqrt(rounds) * get_sigma_gaussian(epsilon, delta) * (1 - tol)
        hi = lo * (1 + tol) / (1 - tol)
    else:
        lo, hi = 0.0, 1.0
    while dp_epsilon(hi, rounds, delta, accountant) > epsilon:
        # "rdp": doubling from [0, 1] (its former calibration, unchanged); "pld": a gap
        # that doubles from tol
        lo, hi = hi, (2 * hi if accountant == "rdp" else hi + 2 * (hi - lo))
        if hi > 1e6:
            raise ValueError(f"epsilon={epsilon} is out of reach in {rounds} rounds")
    while hi - lo > tol * hi:
        mid = 0.5 * (lo + hi)
        if mid > 0 and dp_epsilon(mid, rounds, delta, accountant) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def client_noise_rng(seed: int, client_id: int, server_round: int,
                     phase: str = "dp-update") -> np.random.Generator:
    """The generator of client ``client_id``'s noise in round ``server_round`` (1-based).

    ``phase`` ``"dp-moments"`` and ``"dp-candidates"`` (round 0) are the init's streams.
    """
    stream = {"dp-update": _LLOYD_STREAM, "dp-moments": _MOMENTS_STREAM,
              "dp-candidates": _CANDIDATES_STREAM}[phase]
    return np.random.default_rng([int(seed), int(client_id), int(server_round), stream])


def moments_sensitivity(bound: float) -> float:
    """L2 sensitivity of (count, sum, upper triangle of ``sum x x^T``) to one row.

    ``sqrt(1 + B^2 + B^4)``: the upper triangle of ``x x^T`` (diagonal included) has L2
    norm at most ``||x||^2 <= B^2``.
    """
    b2 = float(bound) ** 2
    return math.sqrt(1.0 + b2 + b2 * b2)


def dp_noise_plan(epsilon: float, delta: float, rounds: int, *, init: str = "moments",
                  init_share: float = DEFAULT_INIT_SHARE,
                  accountant: str = "pld") -> tuple[float, ...]:
    """The noise multiplier of every mechanism of a run, in the order they run.

    ``init="moments"``: ``(z_moments, z_candidates, z_1, ..., z_T)``; ``"random"``:
    ``(z_1, ..., z_T)``, all equal (:func:`noise_multiplier_for` over ``T`` rounds).
    For ``"moments"`` the single multiplier ``z`` of ``epsilon`` at ``delta`` is split by
    shares of ``1/z^2`` (``init_share / 2`` each init mechanism, ``(1 - init_share) / T``
    each round), which compose back to exactly ``z``; the plan is checked with
    :func:`dp_epsilon_of` to be within ``epsilon`` (and raised by a hair if the
    accountant's rounding says otherwise). ``accountant`` calibrates and checks it
    (:class:`GaussianAccountant`). ``epsilon = inf``: all 0 (no noise).
    """
    if init not in DP_INITS:
        raise ValueError(f"the DP init must be one of {DP_INITS}, got {init!r}")
    if int(rounds) < 1:
        raise ValueError(f"a DP run needs at least one Lloyd round, got {rounds}")
    if not 0.0 < float(init_share) < 1.0:
        raise ValueError(f"dp-init-share must lie strictly between 0 and 1, got {init_share}")
    if init == "random":
        return (noise_multiplier_for(epsilon, delta, rounds, accountant=accountant),) * int(
            rounds)
    z = noise_multiplier_for(epsilon, delta, 1, accountant=accountant)
    if z == 0.0:
        return (0.0,) * (2 + int(rounds))
    shares = [init_share / 2, init_share / 2] + [(1.0 - init_share) / rounds] * int(rounds)
    zs = [z / math.sqrt(s) for s in shares]
    step = 1e-9
    while dp_epsilon_of(zs, delta, accountant) > epsilon:  # rounding of the split, if any
        zs = [x * (1 + step) for x in zs]
        step *= 4  # the PLD's discretisation may need more than a float's rounding
    return tuple(zs)


def clip_rows(X: np.ndarray, bound: float) -> np.ndarray:
    """Scale every row of L2 norm above ``bound`` down to norm ``bound``."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    scale = np.minimum(1.0, float(bound) / np.maximum(norms, 1e-300))
    return X * scale[:, None]


def dp_initial_centroids(k: int, d: int, bound: float, rng: np.random.Generator) -> np.ndarray:
    """``k`` centroids uniform in the cube of half-side ``B / sqrt(d)`` (inside the ball)."""
    half = float(bound) / math.sqrt(d)
    return rng.uniform(-half, half, size=(int(k), int(d)))


def gaussian_noise(sums: np.ndarray, counts: np.ndarray, sigma: float,
                   rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray]:
    """``sums`` and ``counts`` with ``N(0, sigma^2)`` added to each value (sums drawn first).

    ``sigma = 0``: returned unchanged. The Gaussian mechanism of every DP statistic here.
    """
    if sigma > 0:
        sums = sums + rng.normal(0.0, sigma, size=sums.shape)
        counts = counts + rng.normal(0.0, sigma, size=counts.shape)
    return sums, counts


def _symmetric_noise(d: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Noise for a symmetric ``(d, d)`` matrix: upper triangle ``N(0, sigma^2)``, mirrored."""
    upper = np.triu(rng.normal(0.0, sigma, size=(d, d)))
    return upper + np.triu(upper, 1).T


def dp_moment_stats(X: np.ndarray, *, bound: float, sigma: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One client's noisy moments: count ``(1,)``, sum ``(d,)``, ``sum x x^T`` ``(d, d)``.

    The init's first mechanism. Rows are clipped to ``bound``; ``sigma`` is this
    client's noise (``z_moments * moments_sensitivity(B) / sqrt(m)`` distributed, 0
    central). The matrix stays symmetric (:func:`_symmetric_noise`).
    """
    Xc = clip_rows(check_data(X), bound)
    d = Xc.shape[1]
    count = np.array([float(len(Xc))])
    total = Xc.sum(axis=0)
    second = Xc.T @ Xc
    second = 0.5 * (second + second.T)  # exactly symmetric
    if sigma > 0:
        count = count + rng.normal(0.0, sigma, size=1)
        total = total + rng.normal(0.0, sigma, size=d)
        second = second + _symmetric_noise(d, sigma, rng)
    return count, total, second


def dp_init_candidates(count: np.ndarray, total: np.ndarray, second: np.ndarray, k: int,
                       rng: np.random.Generator, *, sigma: float = 0.0,
                       per_cluster: int = CANDIDATES_PER_CLUSTER
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The server's side of the moments: subspace ``U (d, p)``, mean ``(d,)``, candidates.

    ``sigma > 0`` (central placement) adds the noise to the totals first. The noisy
    covariance ``S / n - mu mu^T`` gives the top ``p = min(k, d)`` eigenvectors ``U``;
    ``per_cluster * k`` candidates ``(M, p)`` are drawn, in the coordinates ``U^T x``,
    from the Gaussian of mean ``U^T mu`` and the covariance's top eigenvalues.
    """
    count = np.asarray(count, dtype=np.float64).reshape(1)
    total = np.asarray(total, dtype=np.float64)
    second = np.asarray(second, dtype=np.float64)
    d = len(total)
    if sigma > 0:
        count = count + rng.normal(0.0, sigma, size=1)
        total = total + rng.normal(0.0, sigma, size=d)
        second = second + _symmetric_noise(d, sigma, rng)
    n = max(float(count[0]), 1.0)
    mean = total / n
    cov = second / n - np.outer(mean, mean)
    values, vectors = np.linalg.eigh(0.5 * (cov + cov.T))  # ascending
    p = min(int(k), d)
    U = np.ascontiguousarray(vectors[:, ::-1][:, :p])
    scale = np.sqrt(np.maximum(values[::-1][:p], 0.0))
    Q = U.T @ mean + rng.standard_normal((int(per_cluster) * int(k), p)) * scale
    return U, mean, Q


def dp_candidate_stats(X: np.ndarray, U: np.ndarray, Q: np.ndarray, *, bound: float,
                       sigma: float, rng: np.random.Generator
                       ) -> tuple[np.ndarray, np.ndarray]:
    """One client's noisy candidate statistics: sums ``(M, p)`` and counts ``(M,)``.

    The init's second mechanism: the clipped rows, projected (``U^T x``, norm <= ``B``),
    go to their nearest candidate; sensitivity ``sqrt(B^2 + 1)`` as a Lloyd step.
    """
    Y = clip_rows(check_data(X), bound) @ np.asarray(U, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    labels = nearest_labels(Y, Q)
    sums, counts = cluster_sums(Y, labels, len(Q))
    return gaussian_noise(sums, counts.astype(np.float64), sigma, rng)


def dp_init_from_candidates(sums: np.ndarray, counts: np.ndarray, U: np.ndarray,
                            mean: np.ndarray, Q: np.ndarray, k: int, *, bound: float,
                            total_sigma: float, rng: np.random.Generator,
                            sigma: float = 0.0) -> np.ndarray:
    """``k`` starting centroids ``(k, d)`` from the candidates' noisy sums and counts.

    ``sigma > 0`` (central placement) adds the noise first. Candidates whose noisy count
    is at least ``max(1, 2 * total_sigma)`` keep their mean (the others their position,
    weight 0 when too few survive); count-weighted k-means (:func:`weighted_kmeans`,
    ``n_init=10``) makes ``k`` centres in the subspace, lifted as ``U c + (I - U U^T) mu``
    and projected into the ball of radius ``bound``.
    """
    sums, counts = gaussian_noise(np.asarray(sums, dtype=np.float64),
                                  np.asarray(counts, dtype=np.float64), sigma, rng)
    keep = counts >= max(1.0, 2.0 * float(total_sigma))
    points = np.array(Q, dtype=np.float64, copy=True)
    points[keep] = sums[keep] / counts[keep, None]
    if int(keep.sum()) >= k:
        points, weights = points[keep], counts[keep]
    else:  # too few survive: the rest join with a small weight, to make k
        weights = np.where(keep, counts, 1e-3)
    centres = weighted_kmeans(points, weights, int(k), rng)
    U = np.asarray(U, dtype=np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    C = centres @ U.T + (mean - U @ (U.T @ mean))
    return clip_rows(C, bound)


def dp_client_stats(X: np.ndarray, C: np.ndarray, *, bound: float, sigma: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One client's noisy Lloyd statistics: sums ``(k, d)`` and counts ``(k,)``, float64.

    Rows are clipped to ``bound`` and assigned to their nearest centroid; ``sigma`` is
    this client's noise standard deviation (``z Delta / sqrt(m)`` distributed, 0 central).
    """
    Xc = clip_rows(check_data(X), bound)
    labels = nearest_labels(Xc, C)
    sums, counts = cluster_sums(Xc, labels, len(C))
    return gaussian_noise(sums, counts.astype(np.float64), sigma, rng)


def dp_server_step(sums: np.ndarray, counts: np.ndarray, previous: np.ndarray, *,
                   bound: float, sigma: float = 0.0,
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """New centroids from the federation's (noisy) sums and counts.

    ``sigma > 0`` (central placement) adds the noise here first. A centroid whose noisy
    count is below 1 keeps its previous position; every centroid is projected into the
    ball of radius ``bound``.
    """
    if sigma > 0 and rng is None:
        raise ValueError("central noise needs the server's generator")
    sums, counts = gaussian_noise(np.asarray(sums, dtype=np.float64),
                                  np.asarray(counts, dtype=np.float64), sigma, rng)
    new = np.array(previous, dtype=np.float64, copy=True)
    ok = counts >= 1.0
    new[ok] = sums[ok] / counts[ok, None]
    return clip_rows(new, bound)


@dataclass
class DPLloydResult:
    """Result of :func:`run_dp_lloyd`.

    Attributes
    ----------
    centroids : numpy.ndarray of shape (k, d)
    noise_multiplier : float
        ``z`` of every Lloyd round.
    sigma : float
        The noise standard deviation on a round's totals, ``z * sqrt(B^2 + 1)``.
    epsilon, delta : float
        The guarantee of the released model: the run's accountant's ``epsilon`` of every
        mechanism run (the init's and the rounds').
    server_epsilon : float
        The guarantee against a server that sees each upload (:func:`server_epsilon`).
    accountant : str
        The accountant that calibrated the noise and computed ``epsilon`` (``"pld"``
        or ``"rdp"``).
    epsilons : dict
        ``{"pld": epsilon, "rdp": epsilon}``: both accountants' ``epsilon`` of the same
        mechanisms (the PLD's is the tighter).
    noise_multipliers : tuple of float
        Every mechanism's ``z`` (:func:`dp_noise_plan`): the init's two, then the rounds'.
    initial : numpy.ndarray of shape (k, d)
        The starting centroids.
    uploads : list of list of (numpy.ndarray, numpy.ndarray)
        Every client's ``(sums, counts)`` per round, as the server receives them.
    init_uploads : list of list of tuple
        ``"moments"``: every client's moments, then its candidate statistics.
    """

    centroids: np.ndarray
    noise_multiplier: float
    sigma: float
    epsilon: float
    delta: float
    server_epsilon: float
    accountant: str = "pld"
    epsilons: dict = field(default_factory=dict)
    noise_multipliers: tuple = ()
    initial: np.ndarray | None = None
    uploads: list = field(default_factory=list)
    init_uploads: list = field(default_factory=list)


def server_epsilon_of(noise_multipliers: Sequence[float], delta: float, clients: int,
                      placement: str = "distributed", accountant: str = "pld") -> float:
    """:func:`server_epsilon` of mechanisms of different multipliers, composed."""
    if placement == "central":
        return math.inf
    root = math.sqrt(max(int(clients), 1))
    return dp_epsilon_of([z / root for z in noise_multipliers], delta, accountant)


def run_dp_lloyd(clients: Sequence[np.ndarray], k: int, *, epsilon: float, delta: float,
                 bound: float, rounds: int, seed: int = 0,
                 placement: str = "distributed",
                 initial: np.ndarray | None = None, init: str = "moments",
                 init_share: float = DEFAULT_INIT_SHARE,
                 accountant: str = "pld") -> DPLloydResult:
    """Differentially private federated Lloyd as a loop over in-memory clients.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Every client's rows.
    k : int
        Clusters.
    epsilon, delta : float
        The target guarantee of the released model, init and ``rounds`` rounds together
        (``epsilon = inf``: no noise, exact federated Lloyd on the clipped rows).
    bound : float
        The data bound ``B`` (rows are clipped to it).
    rounds : int
        ``T``, every one of which is paid for.
    seed : int, default 0
        Server generator (start, central noise); client ``i``'s noise comes from
        :func:`client_noise_rng` (round ``r``; the init's phases in round 0).
    placement : {"distributed", "central"}
        Where the noise is added.
    initial : numpy.ndarray, optional
        Data-independent initial centroids: no init mechanism runs, and the budget is
        the ``"random"`` plan's (``T`` equal rounds).
    init : {"moments", "random"}, default "moments"
        The start (module docstring) when ``initial`` is not given.
    init_share : float, default 0.5
        The ``"moments"`` start's share of the budget (:func:`dp_noise_plan`).
    accountant : {"pld", "rdp"}, default "pld"
        The accountant that calibrates the noise and states ``epsilon``
        (:class:`GaussianAccountant`); both accountants' figures are in ``epsilons``.
    """
    if placement not in NOISE_PLACEMENTS:
        raise ValueError(f"placement must be one of {NOISE_PLACEMENTS}, got {placement!r}")
    if not bound > 0:
        raise ValueError(f"the data bound must be positive, got {bound}")
    data = [check_data(X) for X in clients]
    d = data[0].shape[1]
    if initial is not None:
        init = "random"
    plan = dp_noise_plan(epsilon, delta, rounds, init=init, init_share=init_share,
                         accountant=accountant)
    z = plan[-1]
    sigma = z * sensitivity(bound)
    m = len(data)
    central = placement == "central"

    def share(total_sigma: float) -> float:  # a client's noise: as the FKM client computes it
        return 0.0 if central else total_sigma / math.sqrt(m)

    rng = np.random.default_rng(seed)
    init_uploads = []
    if initial is not None:
        C = np.array(initial, dtype=np.float64)
    elif init == "random":
        C = dp_initial_centroids(k, d, bound, rng)
    else:
        s_mom = plan[0] * moments_sensitivity(bound)
        moments = [dp_moment_stats(X, bound=bound, sigma=share(s_mom),
                                   rng=client_noise_rng(seed, i, 0, "dp-moments"))
                   for i, X in enumerate(data)]
        U, mean, Q = dp_init_candidates(
            *(sum(mo[j] for mo in moments) for j in range(3)), k, rng,
            sigma=s_mom if central else 0.0)
        s_cand = plan[1] * sensitivity(bound)
        cands = [dp_candidate_stats(X, U, Q, bound=bound,
                                    sigma=share(s_cand),
                                    rng=client_noise_rng(seed, i, 0, "dp-candidates"))
                 for i, X in enumerate(data)]
        init_uploads = [moments, cands]
        C = dp_init_from_candidates(sum(c[0] for c in cands), sum(c[1] for c in cands), U,
                                    mean, Q, k, bound=bound, total_sigma=s_cand, rng=rng,
                                    sigma=s_cand if central else 0.0)
    initial_C = C.copy()
    uploads = []
    for r in range(1, rounds + 1):
        stats = [dp_client_stats(X, C, bound=bound, sigma=share(sigma),
                                 rng=client_noise_rng(seed, i, r))
                 for i, X in enumerate(data)]
        uploads.append(stats)
        C = dp_server_step(sum(s for s, _ in stats), sum(c for _, c in stats), C,
                           bound=bound, sigma=sigma if central else 0.0, rng=rng)
    return DPLloydResult(
        centroids=C, noise_multiplier=z, sigma=sigma,
        epsilon=dp_epsilon_of(plan, delta, accountant), delta=delta,
        server_epsilon=server_epsilon_of(plan, delta, m, placement, accountant),
        accountant=accountant,
        epsilons={method: dp_epsilon_of(plan, delta, method) for method in ACCOUNTANTS},
        noise_multipliers=plan, initial=initial_C, uploads=uploads,
        init_uploads=init_uploads)
