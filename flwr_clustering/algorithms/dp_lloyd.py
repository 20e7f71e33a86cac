"""Differentially private federated Lloyd: clipped rows, Gaussian noise on sums and counts.

The federated Lloyd step (FKM with ``server-update='lloyd'``) needs only the federation's
per-cluster sums and counts. Here every row is first clipped to the L2 ball of radius
``bound`` (the data bound, ``B``), so adding or removing one row changes one cluster's sum
by at most ``B`` and its count by 1: the L2 sensitivity of the (sums, counts) vector is
``Delta = sqrt(B^2 + 1)``. Gaussian noise of standard deviation ``sigma = z * Delta`` on
every sum and count entry makes each round a Gaussian mechanism with noise multiplier
``z``; ``T`` rounds compose (Renyi DP, :mod:`dp_accounting`'s ``RdpAccountant``) to
``(epsilon, delta)``-DP with respect to adding or removing one row of any client.

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

The budget (:func:`dp_noise_plan`): every mechanism is Gaussian, so under Renyi DP their
composition is the Gaussian of noise multiplier ``(sum_i z_i^-2)^-1/2``; the target
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

import numpy as np

from .lloyd import check_data, cluster_sums, nearest_labels, weighted_kmeans

__all__ = [
    "CANDIDATES_PER_CLUSTER",
    "DEFAULT_INIT_SHARE",
    "DP_INITS",
    "NOISE_PLACEMENTS",
    "DPLloydResult",
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
        from dp_accounting import rdp
    except ImportError as ex:  # pragma: no cover - depends on the environment
        raise ImportError("differential privacy needs the dp-accounting package: "
                          "pip install 'flwr-clustering[dp]'") from ex
    return dp_accounting, rdp


def sensitivity(bound: float) -> float:
    """L2 sensitivity of one round's (sums, counts) to one row: ``sqrt(B^2 + 1)``."""
    return math.sqrt(float(bound) ** 2 + 1.0)


def dp_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
    """The ``epsilon`` of ``rounds`` Gaussian mechanisms of noise multiplier ``z`` at ``delta``.

    Computed by :mod:`dp_accounting`'s Renyi-DP accountant (``GaussianDpEvent`` composed
    ``rounds`` times); ``inf`` for ``z = 0``.
    """
    if noise_multiplier <= 0:
        return math.inf
    if rounds < 1:
        return 0.0
    dp_accounting, rdp = _accountant()
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier=float(noise_multiplier)), int(rounds)))
    return float(acc.get_epsilon(float(delta)))


def dp_epsilon_of(noise_multipliers: Sequence[float], delta: float) -> float:
    """The ``epsilon`` of Gaussian mechanisms of different noise multipliers, composed.

    Equal multipliers give exactly :func:`dp_epsilon`; a round whose totals carried less
    noise (distributed noise with clients missing) is composed with its own multiplier.
    """
    zs = [float(z) for z in noise_multipliers]
    if len(set(zs)) <= 1:
        return dp_epsilon(zs[0] if zs else 1.0, len(zs), delta)
    if min(zs) <= 0:
        return math.inf
    dp_accounting, rdp = _accountant()
    acc = rdp.RdpAccountant()
    for z in zs:
        acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=z))
    return float(acc.get_epsilon(float(delta)))


def server_epsilon(noise_multiplier: float, rounds: int, delta: float, clients: int,
                   placement: str = "distributed") -> float:
    """The ``epsilon`` against a server that sees every client's upload on its own.

    ``"distributed"``: each upload carries ``1 / sqrt(m)`` of the noise, so noise multiplier
    ``z / sqrt(m)``; ``"central"``: the server adds the noise itself: ``inf``.
    """
    if placement == "central":
        return math.inf
    return dp_epsilon(noise_multiplier / math.sqrt(max(int(clients), 1)), rounds, delta)


def noise_multiplier_for(epsilon: float, delta: float, rounds: int, *,
                         tol: float = 1e-4) -> float:
    """The smallest noise multiplier ``z`` whose ``rounds``-fold composition is ``epsilon``-DP.

    Bisection on :func:`dp_epsilon` (decreasing in ``z``) to relative tolerance ``tol``;
    0 for ``epsilon = inf``.
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if math.isinf(epsilon):
        return 0.0
    lo, hi = 0.0, 1.0
    while dp_epsilon(hi, rounds, delta) > epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            raise ValueError(f"epsilon={epsilon} is out of reach in {rounds} rounds")
    while hi - lo > tol * hi:
        mid = 0.5 * (lo + hi)
        if mid > 0 and dp_epsilon(mid, rounds, delta) <= epsilon:
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
                  init_share: float = DEFAULT_INIT_SHARE) -> tuple[float, ...]:
    """The noise multiplier of every mechanism of a run, in the order they run.

    ``init="moments"``: ``(z_moments, z_candidates, z_1, ..., z_T)``; ``"random"``:
    ``(z_1, ..., z_T)``, all equal (:func:`noise_multiplier_for` over ``T`` rounds).
    For ``"moments"`` the single multiplier ``z`` of ``epsilon`` at ``delta`` is split by
    shares of ``1/z^2`` (``init_share / 2`` each init mechanism, ``(1 - init_share) / T``
    each round), which Renyi DP composes back to exactly ``z``; the plan is checked with
    :func:`dp_epsilon_of` to be within ``epsilon``. ``epsilon = inf``: all 0 (no noise).
    """
    if init not in DP_INITS:
        raise ValueError(f"the DP init must be one of {DP_INITS}, got {init!r}")
    if int(rounds) < 1:
        raise ValueError(f"a DP run needs at least one Lloyd round, got {rounds}")
    if not 0.0 < float(init_share) < 1.0:
        raise ValueError(f"dp-init-share must lie strictly between 0 and 1, got {init_share}")
    if init == "random":
        return (noise_multiplier_for(epsilon, delta, rounds),) * int(rounds)
    z = noise_multiplier_for(epsilon, delta, 1)
    if z == 0.0:
        return (0.0,) * (2 + int(rounds))
    shares = [init_share / 2, init_share / 2] + [(1.0 - init_share) / rounds] * int(rounds)
    zs = [z / math.sqrt(s) for s in shares]
    while dp_epsilon_of(zs, delta) > epsilon:  # float rounding of the split, if any
        zs = [x * (1 + 1e-9) for x in zs]
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
        The guarantee of the released model: the accountant's ``epsilon`` of every
        mechanism run (the init's and the rounds').
    server_epsilon : float
        The guarantee against a server that sees each upload (:func:`server_epsilon`).
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
    noise_multipliers: tuple = ()
    initial: np.ndarray | None = None
    uploads: list = field(default_factory=list)
    init_uploads: list = field(default_factory=list)


def server_epsilon_of(noise_multipliers: Sequence[float], delta: float, clients: int,
                      placement: str = "distributed") -> float:
    """:func:`server_epsilon` of mechanisms of different multipliers, composed."""
    if placement == "central":
        return math.inf
    root = math.sqrt(max(int(clients), 1))
    return dp_epsilon_of([z / root for z in noise_multipliers], delta)


def run_dp_lloyd(clients: Sequence[np.ndarray], k: int, *, epsilon: float, delta: float,
                 bound: float, rounds: int, seed: int = 0,
                 placement: str = "distributed",
                 initial: np.ndarray | None = None, init: str = "moments",
                 init_share: float = DEFAULT_INIT_SHARE) -> DPLloydResult:
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
    """
    if placement not in NOISE_PLACEMENTS:
        raise ValueError(f"placement must be one of {NOISE_PLACEMENTS}, got {placement!r}")
    if not bound > 0:
        raise ValueError(f"the data bound must be positive, got {bound}")
    data = [check_data(X) for X in clients]
    d = data[0].shape[1]
    if initial is not None:
        init = "random"
    plan = dp_noise_plan(epsilon, delta, rounds, init=init, init_share=init_share)
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
        epsilon=dp_epsilon_of(plan, delta), delta=delta,
        server_epsilon=server_epsilon_of(plan, delta, m, placement),
        noise_multipliers=plan, initial=initial_C, uploads=uploads,
        init_uploads=init_uploads)
