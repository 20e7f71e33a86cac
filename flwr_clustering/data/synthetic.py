"""Synthetic data of Garst & Reinders, "Federated K-means clustering" (Sec. 3).

The paper's 2-D data is a 4x4 grid of Gaussian clusters, split over five clients that sit at fixed
locations ("observers"). Everything here is regenerated from the recipe of the paper's Sec.
3 (Eq. 2) and the authors' code with NumPy's legacy ``RandomState`` stream, which is the
stream behind ``np.random.seed(42)`` in the authors' notebook. The regeneration is exact: it
reproduces the client sizes of the authors' stored CSV files bit for bit (see
``tests/test_data.py``).

Three generators:

- :func:`garst_grid` -- the pooled points and their true labels (Eq. 1 data of the paper).
- :func:`garst_beta_split` -- the points plus the paper's spatial beta split (Eq. 2), drawn from
  the *same* RNG stream right after the points.
- :func:`garst_clusterwise` -- the "cluster-wise" data of Fig. 4 (16/1/3/10/7 clusters per client).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "GARST_CENTERS",
    "GARST_OBSERVERS",
    "GARST_CLUSTERWISE_AMOUNTS",
    "garst_grid",
    "garst_beta_split",
    "garst_clusterwise",
]

#: The 16 cluster centres, a 4x4 grid with spacing 5, in the paper's order (label = row index).
GARST_CENTERS: np.ndarray = np.array(
    [(mx, my) for mx in (-7.5, -2.5, 2.5, 7.5) for my in (-7.5, -2.5, 2.5, 7.5)],
    dtype=np.float64,
)
GARST_CENTERS.setflags(write=False)

#: The five fixed client locations ("observers", ``data/observer_locations.csv`` of the authors,
#: originally drawn from U(-10, 10)^2).
GARST_OBSERVERS: np.ndarray = np.array(
    [
        (6.996601158324054, 4.124745404114659),
        (-5.271066703849256, 7.157142451709259),
        (6.714794493537756, -9.174802677105856),
        (2.443515920603241, 8.331910708477391),
        (-9.606948592795872, 2.769673398722041),
    ],
    dtype=np.float64,
)
GARST_OBSERVERS.setflags(write=False)

#: Number of whole clusters given to clients 0..4 in the cluster-wise experiment (Fig. 4).
GARST_CLUSTERWISE_AMOUNTS: tuple[int, ...] = (16, 1, 3, 10, 7)


def _check_ppc_noise(ppc: int, noise: float) -> int:
    """Validate the points-per-cluster and noise arguments and return ``ppc`` as an int."""
    if int(ppc) != ppc or ppc < 1:
        raise ValueError(f"ppc (points per cluster) must be a positive integer, got {ppc!r}")
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(
            f"noise (cluster standard deviation) must be finite and >= 0, got {noise!r}"
        )
    return int(ppc)


def _draw_grid(rs: np.random.RandomState, ppc: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Draw the grid points from ``rs``: per centre, ``ppc`` x values then ``ppc`` y values."""
    blocks = []
    for mx, my in GARST_CENTERS:
        x = rs.normal(mx, noise, ppc)
        y = rs.normal(my, noise, ppc)
        blocks.append(np.column_stack([x, y]))
    X = np.vstack(blocks).astype(np.float64, copy=False)
    labels = np.repeat(np.arange(len(GARST_CENTERS), dtype=np.int64), ppc)
    return X, labels


def garst_grid(ppc: int = 50, noise: float = 1.0, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """Generate the pooled 4x4 Gaussian grid of Garst & Reinders (Sec. 3, Fig. 1).

    With ``rs = np.random.RandomState(seed)`` (the stream of ``np.random.seed(seed)``), for each
    centre of :data:`GARST_CENTERS` in order draw ``x = rs.normal(mx, noise, ppc)`` and then
    ``y = rs.normal(my, noise, ppc)``. The label of a point is the index of its centre.

    Parameters
    ----------
    ppc : int, default 50
        Points per cluster (the paper uses 50, 100 and 200).
    noise : float, default 1.0
        Standard deviation of every cluster (the paper uses 1.0 to 1.5).
    seed : int, default 42
        Seed of the legacy ``RandomState`` stream (42 in the paper).

    Returns
    -------
    X : numpy.ndarray
        ``(16 * ppc, 2)`` float64 points, cluster by cluster.
    y : numpy.ndarray
        ``(16 * ppc,)`` int64 true labels in ``0..15``.

    Raises
    ------
    ValueError
        If ``ppc`` is not a positive integer or ``noise`` is negative or not finite.
    """
    ppc = _check_ppc_noise(ppc, noise)
    return _draw_grid(np.random.RandomState(seed), ppc, noise)


def garst_beta_split(
    beta: float,
    ppc: int = 50,
    noise: float = 1.0,
    seed: int = 42,
    observers: np.ndarray | Sequence[Sequence[float]] = GARST_OBSERVERS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generate the grid and split it over clients with the paper's spatial beta rule (Eq. 2).

    The points are drawn exactly as in :func:`garst_grid`; the split then *continues the same*
    ``RandomState`` stream, which is what makes it reproduce the authors' files. For each point
    in order and each client ``o`` in order::

        d_o   = ||point - observers[o]||
        P_o   = 1 - exp(-beta / d_o)
        hit_o = rs.choice([0, 1], p=[1 - P_o, P_o])

    If no client is hit the point goes to the nearest client (lowest index on ties); otherwise to
    ``rs.choice(hitting_clients)``. Small ``beta`` gives an almost Voronoi (strongly non-IID)
    split; ``beta = 10`` is close to IID. For the same rule on arbitrary data, with its own
    generator, use :class:`flwr_clustering.data.partitioners.BetaSpatialPartitioner`.

    Parameters
    ----------
    beta : float
        Spread parameter of Eq. 2 (the paper uses 0.1, 1 and 10); must be > 0.
    ppc : int, default 50
        Points per cluster.
    noise : float, default 1.0
        Standard deviation of every cluster.
    seed : int, default 42
        Seed of the legacy ``RandomState`` stream shared by the points and the split.
    observers : array-like of shape (n_clients, 2), default GARST_OBSERVERS
        Client locations.

    Returns
    -------
    X : numpy.ndarray
        ``(16 * ppc, 2)`` float64 points, identical to ``garst_grid(ppc, noise, seed)[0]``.
    y : numpy.ndarray
        ``(16 * ppc,)`` int64 true labels.
    client : numpy.ndarray
        ``(16 * ppc,)`` int64 client index of every point.

    Raises
    ------
    ValueError
        If ``beta`` is not a positive finite number, ``observers`` is not of shape ``(m, 2)``
        with ``m >= 1``, or ``ppc``/``noise`` are invalid.

    Examples
    --------
    >>> X, y, client = garst_beta_split(0.1)
    >>> np.bincount(client).tolist()
    [185, 144, 194, 74, 203]
    """
    if not np.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be a positive finite number, got {beta!r}")
    obs = np.asarray(observers, dtype=np.float64)
    if obs.ndim != 2 or obs.shape[1] != 2 or obs.shape[0] < 1:
        raise ValueError(f"observers must have shape (n_clients, 2), got {obs.shape}")
    ppc = _check_ppc_noise(ppc, noise)

    rs = np.random.RandomState(seed)
    X, labels = _draw_grid(rs, ppc, noise)
    dist = np.linalg.norm(X[:, None, :] - obs[None, :, :], axis=2)
    with np.errstate(divide="ignore"):
        prob = 1.0 - np.exp(-beta / dist)  # a point on an observer gets P = 1
    return X, labels, _beta_draws(rs, prob, np.argmin(dist, axis=1))


def _beta_draws(rs: np.random.RandomState, prob: np.ndarray, nearest: np.ndarray
                ) -> np.ndarray:
    """The client of every point, continuing ``rs`` exactly as the authors' calls would.

    Per point and client ``o``, ``rs.choice([0, 1], p=[1 - P_o, P_o])`` takes one
    ``random_sample`` (two 32-bit words of the Mersenne Twister) and returns 1 when it is
    at least the normalised first cumulative probability ``(1 - P_o) / ((1 - P_o) + P_o)``;
    then ``rs.choice(hits)`` takes ``randint(0, len(hits))``: no word for one hit, else
    32-bit words masked to the next power of two minus one until one is ``< len(hits)``
    (NumPy's legacy bounded integers). The words come from a copy of ``rs``'s generator in
    one call and the doubles are formed in one vectorised step; only the walk through them
    (which depends on how many words each point took) is a loop, of integer list lookups.
    """
    n, m = prob.shape
    q = 1.0 - prob
    threshold = (q / (q + prob)).tolist()  # the cdf of [1 - P, P] divided by its last entry
    _, key, pos, _, _ = rs.get_state(legacy=True)
    bits = np.random.MT19937()
    bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": pos}}
    words = bits.random_raw(2 * m * n + 64 * m + 64)
    while True:
        doubles = (((words[:-1] >> 5) * 67108864 + (words[1:] >> 6)) * 2.0**-53).tolist()
        masked, client = words.tolist(), np.empty(n, dtype=np.int64)
        at, steps, i = 0, range(0, 2 * m, 2), 0
        limit = len(doubles) - 2 * m  # a point's draws must all lie in the buffer
        while i < n and at <= limit - 64:
            t = threshold[i]
            hits = [o for o, j in zip(range(m), steps, strict=True) if doubles[at + j] >= t[o]]
            at += 2 * m
            if len(hits) > 1:
                top = len(hits) - 1
                mask = (1 << top.bit_length()) - 1
                while at < len(masked) and (value := masked[at] & mask) > top:
                    at += 1
                if at == len(masked):
                    break  # (a run of rejections longer than the margin: draw more)
                at += 1
                client[i] = hits[value]
            else:
                client[i] = hits[0] if hits else nearest[i]
            i += 1
        if i == n:
            return client
        # an unlucky run of rejections used the margin: draw again with twice the words
        bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": pos}}
        words = bits.random_raw(2 * len(words))


def garst_clusterwise(
    ppc: int = 50,
    noise: float = 1.0,
    amounts: Sequence[int] = GARST_CLUSTERWISE_AMOUNTS,
    seed: int = 42,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generate the "cluster-wise" data of Fig. 4: client ``i`` holds ``amounts[i]`` whole clusters.

    Sec. 3 ("High variability in number of local clusters") as the authors' code runs it.
    With ``rs = np.random.RandomState(seed)``, for each centre ``m`` of
    :data:`GARST_CENTERS` in order:

    1. draw ``ppc`` x values, then ``ppc`` y values (the same stream as :func:`garst_grid`);
    2. find the clients whose remaining amount is not zero (in client order);
    3. the j-th of them takes the consecutive block ``[j*q, (j+1)*q)`` with
       ``q = ppc // n_selected``; leftover points are discarded;
    4. decrement the remaining amount of those clients.

    A centre that no client wants any more is discarded entirely. With the defaults the client
    sizes are ``[473, 10, 34, 173, 98]`` (788 points) and the clients hold 16, 1, 3, 10 and 7
    true clusters. The same split of any labelled data set is
    :class:`flwr_clustering.data.partitioners.ClusterWisePartitioner`.

    Parameters
    ----------
    ppc : int, default 50
        Points per cluster.
    noise : float, default 1.0
        Standard deviation of every cluster.
    amounts : sequence of int, default (16, 1, 3, 10, 7)
        Number of clusters for each client; one entry per client, each ``>= 0``.
    seed : int, default 42
        Seed of the legacy ``RandomState`` stream.

    Returns
    -------
    X : numpy.ndarray
        ``(n, 2)`` float64 points that were kept, centre by centre and, within a centre, in
        client order.
    y : numpy.ndarray
        ``(n,)`` int64 true labels.
    client : numpy.ndarray
        ``(n,)`` int64 client index of every point.

    Raises
    ------
    ValueError
        If ``amounts`` is empty or has a negative entry, or ``ppc``/``noise`` are invalid.
    """
    remaining = np.array([int(a) for a in amounts], dtype=np.int64)
    if remaining.size == 0 or np.any(remaining < 0):
        raise ValueError(f"amounts must be a non-empty sequence of ints >= 0, got {amounts!r}")
    ppc = _check_ppc_noise(ppc, noise)

    rs = np.random.RandomState(seed)
    X_parts, y_parts, c_parts = [], [], []
    for label, (mx, my) in enumerate(GARST_CENTERS):
        pts = np.column_stack([rs.normal(mx, noise, ppc), rs.normal(my, noise, ppc)])
        takers = np.flatnonzero(remaining != 0)
        if takers.size == 0:
            continue
        q = ppc // takers.size
        for j, c in enumerate(takers):
            X_parts.append(pts[j * q : (j + 1) * q])
            y_parts.append(np.full(q, label, dtype=np.int64))
            c_parts.append(np.full(q, c, dtype=np.int64))
        remaining[takers] -= 1
    if not X_parts:
        return np.empty((0, 2)), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return (
        np.vstack(X_parts).astype(np.float64, copy=False),
        np.concatenate(y_parts),
        np.concatenate(c_parts),
    )
