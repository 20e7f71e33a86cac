"""Shared k-means primitives used by every centroid-based algorithm.

Everything here is plain NumPy / SciPy / scikit-learn and takes its randomness from a
``numpy.random.Generator``. No Flower import, ever (layer 1 of the architecture).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController

__all__ = [
    "assign_to_nearest",
    "check_data",
    "client_rng",
    "cluster_sums",
    "local_kmeans",
    "lloyd_step",
    "matched_shift",
    "nearest",
    "seed_from",
    "squared_distances",
    "weighted_kmeans",
]


def seed_from(rng: np.random.Generator) -> int:
    """Draw an integer seed for a scikit-learn ``random_state`` from ``rng``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The caller's generator; it advances by one draw.

    Returns
    -------
    int
        A seed in ``[0, 2**31 - 1)``.
    """
    return int(rng.integers(0, 2**31 - 1))


def client_rng(seed: int, client_id: int) -> np.random.Generator:
    """The random generator of client ``client_id`` in a run seeded with ``seed``.

    Parameters
    ----------
    seed : int
        The run seed.
    client_id : int
        A stable client identifier (the partition id in simulation).

    Returns
    -------
    numpy.random.Generator
        ``default_rng([seed, client_id])``: independent streams per client, the same in
        the pure loop and under Flower.
    """
    return np.random.default_rng([int(seed), int(client_id)])


def check_data(X: np.ndarray, *, name: str = "data", n_features: int | None = None) -> np.ndarray:
    """Validate a data matrix and return it as C-contiguous float64.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The data.
    name : str, default "data"
        How the error messages name this array (e.g. ``"client 3 data"``).
    n_features : int, optional
        The number of features the data must have (e.g. the dimension of the global
        centroids).

    Returns
    -------
    numpy.ndarray
        ``X`` as float64.

    Raises
    ------
    ValueError
        If ``X`` is not 2-D, holds NaN or inf, or has the wrong number of features.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_samples, n_features), got shape {X.shape}")
    bad = ~np.isfinite(X)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise ValueError(
            f"{name} contains NaN or inf in {int(bad.sum())} value(s) "
            f"(first bad row: {int(rows[0])}); clean or impute it before clustering"
        )
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features but the model has {n_features} "
            "(feature-count mismatch between clients)"
        )
    return X


def squared_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances ``(n, k)`` from every row of ``X`` to every centroid.

    ``scipy.spatial.distance.cdist`` computes each pair from its difference vector, so a
    row's value does not depend on which other rows share the call (unlike the GEMM
    expansion, whose rounding depends on blocking) and is never negative. This is what
    makes a client's assignments bit-identical to the pooled ones, hence federated
    statistics equal centralized ones exactly.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Data (may be empty).
    C : array_like of shape (k, d)
        Centroids, ``k >= 1``.

    Returns
    -------
    numpy.ndarray of shape (n, k)
        Squared distances.

    Raises
    ------
    ValueError
        On NaN/inf, wrong dimensions, no centroid, or a feature-count mismatch.
    """
    from scipy.spatial.distance import cdist

    C = check_data(C, name="centroids")
    if len(C) == 0:
        raise ValueError("centroids must hold at least one row (k >= 1)")
    X = check_data(X, name="data", n_features=C.shape[1])
    return cdist(X, C, metric="sqeuclidean")


def nearest(d2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(argmin per row, min per row)`` of a distance matrix (ties: lowest index).

    Parameters
    ----------
    d2 : numpy.ndarray of shape (n, k)
        Squared distances, e.g. from :func:`squared_distances`.

    Returns
    -------
    labels : numpy.ndarray of shape (n,), int64
        Index of the nearest centroid.
    sq_dist : numpy.ndarray of shape (n,)
        Squared distance to it.
    """
    labels = np.argmin(d2, axis=1).astype(np.int64)
    return labels, d2[np.arange(len(d2)), labels]


def assign_to_nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Assign every row of ``X`` to its nearest centroid (ties: lowest index).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    C : numpy.ndarray of shape (k, d)
        Centroids, ``k >= 1``.

    Returns
    -------
    labels : numpy.ndarray of shape (n,), int64
        Index of the nearest centroid.
    sq_dist : numpy.ndarray of shape (n,), float64
        Squared Euclidean distance to it.
    """
    return nearest(squared_distances(X, C))


_BINCOUNT_MAX_FEATURES = 8


def cluster_sums(X: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums and counts, the sufficient statistics of a Lloyd step.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    labels : numpy.ndarray of shape (n,)
        Cluster index of every row, in ``[0, k)``.
    k : int
        Number of clusters.

    Returns
    -------
    sums : numpy.ndarray of shape (k, d)
        ``sums[j] = sum of X[labels == j]``.
    counts : numpy.ndarray of shape (k,), int64
        ``counts[j] = |{i : labels[i] == j}|``.
    """
    import scipy.sparse as sp

    n, d = X.shape
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    if d <= _BINCOUNT_MAX_FEATURES:
        # Both paths add the rows of a cluster in row order, so they agree bit for bit;
        # one bincount per column is the faster one for few features.
        sums = np.empty((k, d))
        for j in range(d):
            sums[:, j] = np.bincount(labels, weights=X[:, j], minlength=k)
        return sums, counts
    onehot = sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(k, n))
    return np.asarray(onehot @ X), counts


def lloyd_step(
    X: np.ndarray, C: np.ndarray, labels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Lloyd iteration: assign to the nearest centroid, then move centroids to means.

    A centroid that attracts no point stays where it is (its count is 0).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    C : numpy.ndarray of shape (k, d)
        Current centroids.
    labels : numpy.ndarray of shape (n,), optional
        The assignment of ``X`` to ``C`` when the caller already has it (it must equal
        ``assign_to_nearest(X, C)[0]``); skips the distance computation.

    Returns
    -------
    means : numpy.ndarray of shape (k, d)
        Updated centroids.
    counts : numpy.ndarray of shape (k,), int64
        Size of the partition that produced each mean.
    labels : numpy.ndarray of shape (n,)
        The partition (assignment to ``C``).
    """
    if labels is None:
        labels, _ = assign_to_nearest(X, C)
    elif np.shape(labels) != (len(X),):
        raise ValueError(f"labels must have shape ({len(X)},), got {np.shape(labels)}")
    sums, counts = cluster_sums(X, labels, len(C))
    means = np.array(C, dtype=np.float64, copy=True)
    nz = counts > 0
    means[nz] = sums[nz] / counts[nz, None]
    return means, counts, labels


def matched_shift(C_old: np.ndarray | None, C_new: np.ndarray) -> float:
    """Largest centroid displacement after Hungarian matching of two centroid sets.

    Used as the convergence test of algorithms whose server re-clusters from scratch
    every round, so that cluster indices are not stable (FKM, Garst & Reinders' Algorithm 1
    line 10).

    Parameters
    ----------
    C_old, C_new : numpy.ndarray of shape (k, d)
        Centroids of two consecutive rounds.

    Returns
    -------
    float
        ``max_j ||C_new[j] - C_old[pi(j)]||`` for the optimal matching ``pi``;
        ``inf`` when there is no previous set or the shapes differ.
    """
    from scipy.optimize import linear_sum_assignment

    if C_old is None or C_old.shape != C_new.shape:
        return float("inf")
    cost = ((C_new[:, None, :] - C_old[None, :, :]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].max()))


@functools.cache
def _threadpool_controller() -> ThreadpoolController:
    # Built once: a ThreadpoolController scans the loaded libraries, which costs about as
    # much as a small server k-means. It only controls the libraries loaded when it is built,
    # so scikit-learn's OpenMP runtime (BLAS comes with NumPy) is loaded first.
    import sklearn.cluster  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def weighted_kmeans(
    points: np.ndarray,
    weights: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    seeding: str = "weighted",
    n_init: int = 10,
    max_iter: int = 300,
    tol: float = 1e-4,
) -> np.ndarray:
    """Sample-weighted k-means (Garst & Reinders Eq. 1) over a set of weighted points.

    Parameters
    ----------
    points : numpy.ndarray of shape (m, d)
        The points (for FKM: the local centroids of all clients), ``m >= k``.
    weights : numpy.ndarray of shape (m,)
        Non-negative weights (for FKM: the local cluster sizes).
    k : int
        Number of clusters.
    rng : numpy.random.Generator
        Source of the random state (one draw per call).
    seeding : {"weighted", "unweighted"}
        ``"weighted"`` is scikit-learn >= 1.3: the k-means++ seeding uses the weights.
        ``"unweighted"`` emulates scikit-learn < 1.3, which the paper used: ``n_init``
        unweighted k-means++ seedings, each refined by weighted Lloyd, keeping the run of
        lowest weighted inertia (Garst & Reinders, Sec. 3, Fig. 4).
    n_init, max_iter, tol
        As in :class:`sklearn.cluster.KMeans`.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The cluster centres.
    """
    from sklearn.cluster import KMeans, kmeans_plusplus

    weights = np.asarray(weights, dtype=np.float64)
    if seeding not in ("weighted", "unweighted"):
        raise ValueError(f"seeding must be 'weighted' or 'unweighted', got {seeding!r}")
    # The server's problem is small (m = sum of k_i points): OpenMP threads cost more to wake
    # than they save, and under Ray they compete with the simulation for the same cores.
    with _threadpool_controller().limit(limits=1):
        if seeding == "weighted":
            km = KMeans(k, n_init=n_init, max_iter=max_iter, tol=tol, random_state=seed_from(rng))
            return km.fit(points, sample_weight=weights).cluster_centers_
        best, best_inertia = None, np.inf
        for _ in range(n_init):
            init, _ = kmeans_plusplus(points, k, random_state=seed_from(rng))
            km = KMeans(k, init=init, n_init=1, max_iter=max_iter, tol=tol)
            km.fit(points, sample_weight=weights)
            if km.inertia_ < best_inertia:
                best, best_inertia = km.cluster_centers_, km.inertia_
        return best


def local_kmeans(
    X: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    init: str | np.ndarray = "k-means++",
    n_init: int = 1,
    max_iter: int = 300,
    tol: float = 1e-4,
) -> tuple[np.ndarray, np.ndarray]:
    """Single-start Lloyd k-means on one client's data (the local step of M-Avg and FeCA).

    scikit-learn's ``KMeans(n_clusters=min(k, n), init=init, n_init=n_init,
    random_state=seed_from(rng))``. One start is the default because the FeCA paper's
    argument relies on Lloyd returning local optima (Xu et al., Sec. 3.1; the paper gives no
    Lloyd settings).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's data, ``n >= 1``.
    k : int
        Number of clusters, ``k >= 1``. A client with fewer than ``k`` points gets
        ``k_eff = n`` clusters (an implementation choice); callers that need exactly ``k`` centroids
        (M-Avg) must check ``n >= k`` themselves (see :func:`mavg_client`).
    rng : numpy.random.Generator
        The client's generator; it advances by one draw (the scikit-learn seed).
    init : {"k-means++", "random"} or numpy.ndarray of shape (k, d), default "k-means++"
        Seeding of :class:`sklearn.cluster.KMeans`; an array is a warm start (one start,
        ``k`` taken from its rows).
    n_init : int, default 1
        Number of starts (the lowest-inertia one is kept).
    max_iter : int, default 300
        Lloyd iterations per start.
    tol : float, default 1e-4
        scikit-learn's tolerance (relative to the mean feature variance).

    Returns
    -------
    centroids : numpy.ndarray of shape (k_eff, d)
        ``k_eff = min(k, n)`` centroids.
    labels : numpy.ndarray of shape (n,), int64
        scikit-learn's ``labels_``: the nearest-centroid assignment of ``X`` to the
        returned centroids (its final E-step). The centroids are the means of these
        labels whenever Lloyd stopped because the partition no longer changed.

    Raises
    ------
    ValueError
        If ``X`` is empty, not 2-D or holds NaN/inf, or ``k < 1``.
    """
    from sklearn.cluster import KMeans

    X = check_data(X)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(X) == 0:
        raise ValueError("local k-means needs at least one data point, got n=0")
    if isinstance(init, np.ndarray):
        init = check_data(init, name="initial centroids", n_features=X.shape[1])
        k, n_init = len(init), 1
    km = KMeans(
        n_clusters=min(k, len(X)),
        init=init,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        random_state=seed_from(rng),
    ).fit(X)
    return np.ascontiguousarray(km.cluster_centers_), km.labels_.astype(np.int64)
