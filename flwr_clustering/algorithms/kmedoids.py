"""k-medoids: alternating (Voronoi-iteration) k-medoids with Euclidean distance.

Maritan & Schenato let every participant run "an arbitrary clustering algorithm" on its
local data and upload "local centroids or medoids" (Sec. 4, Algorithm 1 lines 1-2), and
warm-start a medoid-based algorithm "using the local data points closest to the selected
centroids" (Sec. 4, line 15). scikit-learn has no k-medoids, so this module holds one:
Park & Jun's alternating algorithm, seeded by scikit-learn's ``kmeans_plusplus``.
:func:`~flwr_clustering.algorithms.masked.local_clustering` wraps it for masked data.

No Flower import here (layer 1 of the architecture).
"""

from __future__ import annotations

import numpy as np

__all__ = ["local_kmedoids"]


def local_kmedoids(
    Xo: np.ndarray, k: int, rng: np.random.Generator, *, init: np.ndarray | None = None,
    n_init: int = 1, max_iter: int = 300,
) -> tuple[np.ndarray, np.ndarray]:
    """Alternating k-medoids (Park & Jun's Voronoi iteration) with Euclidean distance.

    Each start is seeded with scikit-learn's ``kmeans_plusplus`` (whose centres are data
    points) or, with ``init``, with the rows closest to the given centroids (Maritan &
    Schenato, Sec. 4.1.3 step 2); then points go to their nearest medoid and each medoid
    moves to the point of its cluster with the smallest total distance, until nothing
    changes. Of ``n_init`` starts the lowest total distance wins. **Medoids are real rows**:
    a client that uploads them shares raw data points.

    Parameters
    ----------
    Xo : numpy.ndarray of shape (n, d_i)
        The client's observed columns (no NaN).
    k : int
        Number of clusters (``min(k, n)`` are used).
    rng : numpy.random.Generator
        One draw per start seeds ``kmeans_plusplus``.
    init : numpy.ndarray of shape (k, d_i), optional
        Warm start: the nearest row to each centroid (distinct rows).
    n_init : int, default 1
        Starts (ignored with ``init``).
    max_iter : int, default 300
        Medoid updates per start.

    Returns
    -------
    medoids : numpy.ndarray of shape (k_eff,), int64
        Row index of every medoid.
    labels : numpy.ndarray of shape (n,), int64
        Nearest medoid of every row.
    """
    from scipy.spatial.distance import cdist
    from sklearn.cluster import kmeans_plusplus

    from .lloyd import check_data, seed_from

    Xo = check_data(Xo)
    n = len(Xo)
    if n == 0 or k < 1:
        raise ValueError(f"k-medoids needs n >= 1 and k >= 1, got n={n}, k={k}")
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    starts = 1 if init is not None else max(1, int(n_init))
    for _ in range(starts):
        if init is not None:
            D0 = cdist(np.asarray(init, dtype=np.float64), Xo)
            medoids = []
            for row in D0:  # nearest row not taken yet (medoids must be distinct)
                order = np.argsort(row, kind="stable")
                medoids.append(int(next(j for j in order if j not in medoids)))
            medoids = np.array(medoids[:n], dtype=np.int64)
        else:
            _, medoids = kmeans_plusplus(Xo, min(k, n), random_state=seed_from(rng))
            medoids = np.asarray(medoids, dtype=np.int64)
        for _ in range(max(1, int(max_iter))):
            labels = np.argmin(cdist(Xo, Xo[medoids]), axis=1)
            new = medoids.copy()
            for a in range(len(medoids)):
                members = np.flatnonzero(labels == a)
                if len(members):
                    within = cdist(Xo[members], Xo[members]).sum(axis=1)
                    new[a] = members[int(np.argmin(within))]
            if np.array_equal(new, medoids):
                break
            medoids = new
        D = cdist(Xo, Xo[medoids])
        labels = np.argmin(D, axis=1)
        cost = float(D[np.arange(n), labels].sum())
        if best is None or cost < best[0]:
            best = (cost, medoids, labels.astype(np.int64))
    assert best is not None
    return best[1], best[2]
