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

Choices of ours (FastLloyd and FedDP-KMeans make similar ones): the initial centroids are
drawn uniformly from the cube inside the ball of radius ``B`` (data-independent, no
privacy cost); the privacy threshold does not apply (the noise, not withholding, protects
small clusters, and withholding would itself depend on the data); a centroid whose noisy
count is below 1 keeps its previous position; every centroid is projected back into the
ball of radius ``B``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .lloyd import check_data, cluster_sums, nearest_labels

__all__ = [
    "NOISE_PLACEMENTS",
    "DPLloydResult",
    "client_noise_rng",
    "clip_rows",
    "dp_client_stats",
    "dp_epsilon",
    "dp_epsilon_of",
    "dp_initial_centroids",
    "dp_server_step",
    "noise_multiplier_for",
    "run_dp_lloyd",
    "sensitivity",
    "server_epsilon",
]

#: Where the Gaussian noise is added (see the module docstring).
NOISE_PLACEMENTS = ("distributed", "central")


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


def client_noise_rng(seed: int, client_id: int, server_round: int) -> np.random.Generator:
    """The generator of client ``client_id``'s noise in round ``server_round`` (1-based)."""
    return np.random.default_rng([int(seed), int(client_id), int(server_round), 7])


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


def dp_client_stats(X: np.ndarray, C: np.ndarray, *, bound: float, sigma: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One client's noisy Lloyd statistics: sums ``(k, d)`` and counts ``(k,)``, float64.

    Rows are clipped to ``bound`` and assigned to their nearest centroid; ``sigma`` is
    this client's noise standard deviation (``z Delta / sqrt(m)`` distributed, 0 central).
    """
    Xc = clip_rows(check_data(X), bound)
    labels = nearest_labels(Xc, C)
    sums, counts = cluster_sums(Xc, labels, len(C))
    counts = counts.astype(np.float64)
    if sigma > 0:
        sums = sums + rng.normal(0.0, sigma, size=sums.shape)
        counts = counts + rng.normal(0.0, sigma, size=counts.shape)
    return sums, counts


def dp_server_step(sums: np.ndarray, counts: np.ndarray, previous: np.ndarray, *,
                   bound: float, sigma: float = 0.0,
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """New centroids from the federation's (noisy) sums and counts.

    ``sigma > 0`` (central placement) adds the noise here first. A centroid whose noisy
    count is below 1 keeps its previous position; every centroid is projected into the
    ball of radius ``bound``.
    """
    sums = np.asarray(sums, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if sigma > 0:
        if rng is None:
            raise ValueError("central noise needs the server's generator")
        sums = sums + rng.normal(0.0, sigma, size=sums.shape)
        counts = counts + rng.normal(0.0, sigma, size=counts.shape)
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
        ``z``.
    sigma : float
        The noise standard deviation on the federation's totals, ``z * sqrt(B^2 + 1)``.
    epsilon, delta : float
        The guarantee of the released model (the accountant's ``epsilon`` for the rounds
        run).
    server_epsilon : float
        The guarantee against a server that sees each upload (:func:`server_epsilon`).
    uploads : list of list of (numpy.ndarray, numpy.ndarray)
        Every client's ``(sums, counts)`` per round, as the server receives them.
    """

    centroids: np.ndarray
    noise_multiplier: float
    sigma: float
    epsilon: float
    delta: float
    server_epsilon: float
    uploads: list = field(default_factory=list)


def run_dp_lloyd(clients: Sequence[np.ndarray], k: int, *, epsilon: float, delta: float,
                 bound: float, rounds: int, seed: int = 0,
                 placement: str = "distributed",
                 initial: np.ndarray | None = None) -> DPLloydResult:
    """Differentially private federated Lloyd as a loop over in-memory clients.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Every client's rows.
    k : int
        Clusters.
    epsilon, delta : float
        The target guarantee of the released model over ``rounds`` rounds
        (``epsilon = inf``: no noise, exact federated Lloyd on the clipped rows).
    bound : float
        The data bound ``B`` (rows are clipped to it).
    rounds : int
        ``T``, every one of which is paid for.
    seed : int, default 0
        Server generator (initial centroids, central noise); client ``i``'s noise in round
        ``r`` comes from :func:`client_noise_rng`.
    placement : {"distributed", "central"}
        Where the noise is added.
    initial : numpy.ndarray, optional
        Data-independent initial centroids (default :func:`dp_initial_centroids`).
    """
    if placement not in NOISE_PLACEMENTS:
        raise ValueError(f"placement must be one of {NOISE_PLACEMENTS}, got {placement!r}")
    if not bound > 0:
        raise ValueError(f"the data bound must be positive, got {bound}")
    data = [check_data(X) for X in clients]
    d = data[0].shape[1]
    z = noise_multiplier_for(epsilon, delta, rounds)
    sigma = z * sensitivity(bound)
    m = len(data)
    rng = np.random.default_rng(seed)
    C = (dp_initial_centroids(k, d, bound, rng) if initial is None
         else np.array(initial, dtype=np.float64))
    per_client = sigma / math.sqrt(m) if placement == "distributed" else 0.0
    uploads = []
    for r in range(1, rounds + 1):
        stats = [dp_client_stats(X, C, bound=bound, sigma=per_client,
                                 rng=client_noise_rng(seed, i, r))
                 for i, X in enumerate(data)]
        uploads.append(stats)
        C = dp_server_step(sum(s for s, _ in stats), sum(c for _, c in stats), C,
                           bound=bound, sigma=sigma if placement == "central" else 0.0,
                           rng=rng)
    return DPLloydResult(
        centroids=C, noise_multiplier=z, sigma=sigma,
        epsilon=dp_epsilon(z, rounds, delta), delta=delta,
        server_epsilon=server_epsilon(z, rounds, delta, m, placement), uploads=uploads)
