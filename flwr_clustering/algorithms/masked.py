"""Shared primitives for clustering across overlapping feature spaces (Maritan & Schenato).

Every client observes its own subset of the ``d`` global features (a boolean mask); its
rows are full ``d``-vectors with NaN on the features it does not observe. The server knows
each client's mask, never its rows.

This module holds what both of the paper's algorithms use (Sec. 3-5), all plain
NumPy/SciPy:

- centroids travel as per-coordinate sufficient statistics :class:`MaskedStats` (sum and
  count of the observed values per cluster and feature), so the typo-fixed mask-aware merge
  (Eq. 4) is an addition and reproduces the optimal mask-aware centroid (Eq. 1) exactly;
- the clients' local clustering on their observed features (k-means or k-medoids, ``K_i``
  fixed or chosen by silhouette; Algorithm 1 lines 1-2, Algorithm 2 line 2);
- :func:`bounding_box` and :func:`rescaled_distances` implement Eqs. 2-3: distances in the
  shared subspace, rescaled by the diagonal of the reference set's bounding box in that
  subspace; disjoint masks give NaN ("invalid"), never 0;
- :func:`masked_squared_distances`: a client's rows against global centroids on its own
  features (compatibility check, labels, evaluation);
- the paper's evaluation (Sec. 6): the optimal mask-aware centroids of Eq. 1
  (:func:`mask_aware_means`), aggregation correctness (E1/E4), centroid agreement (E3) and
  the satisfaction rate of Assumption 8 (Table 1). Simulation only: they need true labels
  or complete rows.

The algorithms themselves live in :mod:`~flwr_clustering.algorithms.masked_federated`
(Algorithm 1, Methods A and B) and :mod:`~flwr_clustering.algorithms.masked_oneshot`
(Algorithm 2, Gaussian proxies and force agglomeration).

No Flower import (layer 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .kmedoids import local_kmedoids
from .lloyd import cluster_sums, row_blocks
from .upload import Claims

__all__ = [
    "LOCAL_ALGORITHMS",
    "GMEANS_CRITICAL",
    "MIN_SILHOUETTE",
    "MaskedStats",
    "aggregation_correctness",
    "assumption8_rate",
    "bounding_box",
    "centroid_agreement",
    "choose_local_clusters",
    "looks_like_one_cluster",
    "client_local_clusters",
    "client_mask",
    "cluster_stats",
    "k_local_per_client",
    "local_clustering",
    "local_kmeans_masked",
    "mask_aware_means",
    "masked_distance_blocks",
    "masked_nearest",
    "masked_squared_distances",
    "partial_squared_distances",
    "pooled_masked_squared_distances",
    "rescaled_distances",
]


#: Floor of a bounding-box diagonal (a constant feature would otherwise divide by 0).
EPS = 1e-12


@dataclass
class MaskedStats:
    """Per-cluster, per-feature sufficient statistics of masked data.

    Attributes
    ----------
    sums : numpy.ndarray of shape (k, d)
        Sum of the observed values of every feature in every cluster (0 where unobserved).
    counts : numpy.ndarray of shape (k, d)
        Number of points of the cluster that observe the feature.
    single_row : bool, default False
        As an upload: each representative is one row (a medoid, sent as size x medoid),
        held to the bound of a single row in the reply rules. Not sent.
    """

    sums: np.ndarray
    counts: np.ndarray
    single_row: bool = False

    def __post_init__(self) -> None:
        self.sums = np.asarray(self.sums, dtype=np.float64)
        self.counts = np.asarray(self.counts, dtype=np.float64)
        if self.sums.ndim != 2 or self.sums.shape != self.counts.shape:
            raise ValueError(
                f"sums {self.sums.shape} and counts {self.counts.shape} must be equal 2-D shapes"
            )
        if (self.counts < 0).any():
            raise ValueError("counts must be non-negative")

    @property
    def means(self) -> np.ndarray:
        """``sums / counts`` with NaN where no point observes the feature."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums / np.where(self.counts > 0,
                                                                  self.counts, 1), np.nan)

    def claims(self) -> Claims:
        """Rows per cluster and feature, each cluster's observed means, ``d``.

        Every feature's column of counts sums to at most the client's rows
        (:class:`~.upload.Upload`).
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            means = np.where(self.counts > 0, self.sums / self.counts, np.nan)
        rows = (self.counts > 0).astype(np.float64) if self.single_row else None
        return Claims(counts=self.counts, means=means, mean_rows=rows,
                      features=int(self.sums.shape[1]))

    @property
    def masks(self) -> np.ndarray:
        """Boolean ``(k, d)``: which features each centroid carries."""
        return self.counts > 0

    @property
    def sizes(self) -> np.ndarray:
        """Points per cluster (the largest per-feature count)."""
        return self.counts.max(axis=1) if self.counts.size else np.zeros(len(self.counts))

    def __len__(self) -> int:
        return len(self.sums)

    def take(self, index: Sequence[int] | np.ndarray) -> MaskedStats:
        """Return the statistics of the clusters ``index``."""
        index = np.asarray(index, dtype=np.int64)
        return MaskedStats(self.sums[index], self.counts[index])

    def merged(self) -> MaskedStats:
        """Merge all clusters into one (Eq. 4, typo fixed): add sums and counts."""
        return MaskedStats(self.sums.sum(axis=0, keepdims=True),
                           self.counts.sum(axis=0, keepdims=True))

    @staticmethod
    def concatenate(parts: Sequence[MaskedStats]) -> MaskedStats:
        """Stack the clusters of several statistics (e.g. all clients' uploads)."""
        return MaskedStats(np.concatenate([p.sums for p in parts]),
                           np.concatenate([p.counts for p in parts]))


def cluster_stats(X: np.ndarray, labels: np.ndarray, k: int) -> MaskedStats:
    """Sufficient statistics of a labelling of masked data.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Rows with NaN on the unobserved features.
    labels : numpy.ndarray of shape (n,)
        Cluster of every row, in ``[0, k)``.
    k : int
        Number of clusters.

    Returns
    -------
    MaskedStats
        ``sums[a, m]`` and ``counts[a, m]`` over the rows of cluster ``a`` that observe ``m``.
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if X.ndim != 2 or labels.shape != (len(X),):
        raise ValueError(f"X must be (n, d) and labels (n,), got {X.shape} and {labels.shape}")
    # one row block at a time (no dense (k, n) one-hot, no zero-filled copy of the rows)
    sums, counts = np.zeros((k, X.shape[1])), np.zeros((k, X.shape[1]))
    for rows in row_blocks(len(X), X.shape[1]):
        observed = ~np.isnan(X[rows])
        sums += cluster_sums(np.where(observed, X[rows], 0.0), labels[rows], k)[0]
        counts += cluster_sums(observed.astype(np.float64), labels[rows], k)[0]
    return MaskedStats(sums, counts)


def client_mask(X: np.ndarray) -> np.ndarray:
    """The features a client observes: the columns that are not all NaN.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's rows, NaN on the features it does not observe.

    Returns
    -------
    numpy.ndarray of shape (d,), bool
        The mask ``Omega_i``.

    Raises
    ------
    ValueError
        If a row has NaN in an observed feature (missing values must be imputed first: the
        model is a fixed feature subset per client), or no feature is observed.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"data must be 2-D (n, d), got shape {X.shape}")
    # two passes in row blocks (memory flat in n): the observed columns, then their holes
    mask = np.zeros(X.shape[1], dtype=bool)
    for rows in row_blocks(len(X), X.shape[1]):
        mask |= ~np.isnan(X[rows]).all(axis=0)
    if not mask.any():
        raise ValueError("the client observes no feature (every column is NaN)")
    for rows in row_blocks(len(X), X.shape[1]):
        block = X[rows][:, mask]
        holes = np.isnan(block)
        if holes.any():
            row, col = np.argwhere(holes)[0]
            raise ValueError(
                f"row {rows.start + row} has NaN in observed feature "
                f"{np.flatnonzero(mask)[col]}: a client observes a fixed feature subset; "
                "impute missing values first"
            )
        if np.isinf(block).any():
            raise ValueError("data contains inf")
    return mask


def local_kmeans_masked(
    X: np.ndarray, k: int, rng: np.random.Generator, *, init: np.ndarray | str = "k-means++",
    n_init: int = 1, max_iter: int = 300,
) -> tuple[np.ndarray, MaskedStats]:
    """k-means on the client's observed features only (cost O(d_i) per point).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Rows, NaN on unobserved features.
    k : int
        Number of local clusters (``min(k, n)`` are used).
    rng : numpy.random.Generator
        Seeds scikit-learn (one draw).
    init : "k-means++", "random" or numpy.ndarray of shape (k, d)
        An array is taken on the observed columns (warm start from global centroids).
    n_init, max_iter
        As in :class:`sklearn.cluster.KMeans`.

    Returns
    -------
    labels : numpy.ndarray of shape (n,), int64
        Local cluster of every row.
    stats : MaskedStats
        Per-cluster sufficient statistics (NaN-free sums, counts on the observed features).
    """
    from .lloyd import local_kmeans

    mask = client_mask(X)
    Xo = np.asarray(X, dtype=np.float64)[:, mask]
    if isinstance(init, np.ndarray):
        init = np.asarray(init, dtype=np.float64)[:, mask]
    # Xo is this function's own copy: scikit-learn may centre it in place (no second copy)
    centroids, labels = local_kmeans(Xo, k, rng, init=init, n_init=n_init, max_iter=max_iter,
                                     copy_x=False)
    k = len(centroids)
    return labels, cluster_stats(X, labels, k)


#: Local clustering algorithms a client may run (Sec. 4.1.1: any algorithm, centroids or medoids).
LOCAL_ALGORITHMS = ("kmeans", "kmedoids")


#: Best silhouette below which a client keeps a single local cluster (Kaufman & Rousseeuw:
#: below 0.25 "no substantial structure"); silhouette itself cannot score K_i = 1.
MIN_SILHOUETTE = 0.25


def local_clustering(
    X: np.ndarray, k: int, rng: np.random.Generator, *, algorithm: str = "kmeans",
    init: np.ndarray | str = "k-means++", n_init: int = 1, max_iter: int = 300,
) -> tuple[np.ndarray, MaskedStats]:
    """A client's local clustering on its observed features: k-means or k-medoids.

    k-means returns the clusters' sufficient statistics (centroid = mean). k-medoids
    returns each cluster's **medoid, a real row**, as its representative: ``sums = size x
    medoid`` and ``counts = size`` on the observed features, so the count-weighted merge
    (Eq. 4) averages medoids weighted by cluster size.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Rows, NaN on unobserved features.
    k : int
        Local clusters.
    rng : numpy.random.Generator
        The client's generator.
    algorithm : {"kmeans", "kmedoids"}, default "kmeans"
        Local algorithm.
    init, n_init, max_iter
        As in :func:`local_kmeans_masked`; for k-medoids an array init takes the rows
        closest to its centroids.

    Returns
    -------
    labels : numpy.ndarray of shape (n,), int64
    stats : MaskedStats
    """
    if algorithm == "kmeans":
        return local_kmeans_masked(X, k, rng, init=init, n_init=n_init, max_iter=max_iter)
    if algorithm != "kmedoids":
        raise ValueError(f"local algorithm must be one of {LOCAL_ALGORITHMS}, got {algorithm!r}")
    mask = client_mask(X)
    X = np.asarray(X, dtype=np.float64)
    warm = np.asarray(init, dtype=np.float64)[:, mask] if isinstance(init, np.ndarray) else None
    medoids, labels = local_kmedoids(X[:, mask], k, rng, init=warm, n_init=n_init,
                                     max_iter=max_iter)
    sizes = np.bincount(labels, minlength=len(medoids)).astype(np.float64)
    observed = np.broadcast_to(mask, (len(medoids), X.shape[1]))
    sums = np.where(observed, np.nan_to_num(X[medoids]) * sizes[:, None], 0.0)
    return labels, MaskedStats(sums, observed * sizes[:, None])


#: Critical value of the corrected Anderson-Darling statistic at significance 1e-4, the
#: G-means test of Hamerly & Elkan ("Learning the k in k-means", NIPS 2003).
GMEANS_CRITICAL = 1.8692


def looks_like_one_cluster(Xo: np.ndarray, rng: np.random.Generator) -> bool:
    """G-means' test: whether the data look like one Gaussian along their best 2-split.

    Splits the rows in two random halves, finds the 2-means split of the first half
    (scikit-learn ``KMeans``), projects the second half on the line through the two
    centres, and applies the Anderson-Darling normality test to the standardised
    projection, with the small-sample correction ``A*^2 = A^2 (1 + 4/n - 25/n^2)`` at
    significance 1e-4 (Hamerly & Elkan, "Learning the k in k-means", NIPS 2003). Fitting
    the direction on one half and testing on the other is ours: in high dimension the
    2-means direction of a single Gaussian's own rows splits it in two by construction (300
    rows of a 50-D Gaussian: rejected in-sample, ``A*^2 = 0.14`` held out). ``True`` when
    normality is not rejected.

    Parameters
    ----------
    Xo : numpy.ndarray of shape (n, d)
        Rows (observed features only).
    rng : numpy.random.Generator
        Draws the halves and the k-means seed.

    Returns
    -------
    bool
        ``True`` also for fewer than 16 rows (too few to test) or a constant projection.
    """
    from scipy.stats import anderson
    from sklearn.cluster import KMeans

    from .lloyd import seed_from

    Xo = np.asarray(Xo, dtype=np.float64)
    if len(Xo) < 16:
        return True
    order = rng.permutation(len(Xo))
    fit, test = Xo[order[: len(Xo) // 2]], Xo[order[len(Xo) // 2:]]
    centres = KMeans(2, n_init=3, random_state=seed_from(rng)).fit(fit).cluster_centers_
    z = test @ (centres[0] - centres[1])
    if not float(np.std(z)) > 0.0:
        return True
    n = len(z)
    z = (z - z.mean()) / z.std()
    try:  # SciPy >= 1.17 asks for a p-value method; only the statistic is used here
        a2 = float(anderson(z, dist="norm", method="interpolate").statistic)
    except TypeError:  # older SciPy: no ``method`` argument
        a2 = float(anderson(z, dist="norm").statistic)
    return a2 * (1.0 + 4.0 / n - 25.0 / n**2) <= GMEANS_CRITICAL


def choose_local_clusters(
    X: np.ndarray, k_max: int, rng: np.random.Generator, *, algorithm: str = "kmeans",
    n_init: int = 10, min_silhouette: float = MIN_SILHOUETTE, sample_size: int = 2000,
) -> tuple[np.ndarray, MaskedStats]:
    """Pick ``K_i <= k_max`` by the silhouette score and return that clustering (Sec. 4.1.1).

    Clusters the observed columns for every ``K_i`` in ``2..min(k_max, n - 1)`` (in that
    order, one generator) and keeps the best mean silhouette (scikit-learn, Euclidean; on a
    seeded sample of ``sample_size`` rows for large clients). Silhouette cannot score a
    single cluster, so when the best score is below ``min_silhouette`` a second test
    decides between ``K_i = 1`` and the best-scoring ``K_i``: G-means' normality test along
    a held-out 2-split (:func:`looks_like_one_cluster`). A client keeps one cluster only when its
    rows look like one Gaussian; otherwise it keeps the best-scoring ``K_i``, because
    the server can merge local clusters but never split one. (Silhouettes are low in
    high dimensions whatever the structure: on a 50-feature set every client's best was
    below 0.25, and with ``K_i = 1`` everywhere Algorithm 2's clusters were the clients.)
    ``K_i = 1`` also when ``k_max = 1`` or the client has fewer than 3 rows, and, below the
    silhouette threshold, when it has fewer than 16 rows (too few to test).

    Returns
    -------
    labels : numpy.ndarray of shape (n,), int64
    stats : MaskedStats
        The chosen clustering (``len(stats) = K_i``).
    """
    from sklearn.metrics import silhouette_score

    from .lloyd import seed_from

    mask = client_mask(X)
    Xo = np.asarray(X, dtype=np.float64)[:, mask]
    best: tuple[float, np.ndarray, MaskedStats] | None = None
    for k in range(2, min(int(k_max), len(Xo) - 1) + 1):
        labels, stats = local_clustering(X, k, rng, algorithm=algorithm, n_init=n_init)
        if len(np.unique(labels)) < 2:
            continue
        score = float(silhouette_score(
            Xo, labels, sample_size=min(sample_size, len(Xo)), random_state=seed_from(rng)))
        if best is None or score > best[0]:
            best = (score, labels, stats)
    if best is None:
        return local_clustering(X, 1, rng, algorithm=algorithm, n_init=1)
    if best[0] < min_silhouette and looks_like_one_cluster(Xo, rng):
        return local_clustering(X, 1, rng, algorithm=algorithm, n_init=1)
    return best[1], best[2]


def client_local_clusters(
    X: np.ndarray, k_local: int | None, k_max: int, rng: np.random.Generator, *,
    algorithm: str = "kmeans", n_init: int = 10,
) -> tuple[np.ndarray, MaskedStats]:
    """The initial local clustering of Algorithms 1 and 2 on one client.

    ``k_local`` fixes ``K_i``; ``None`` (the default everywhere) lets the client choose
    ``K_i <= k_max`` by silhouette (:func:`choose_local_clusters`).
    """
    if k_local is None:
        return choose_local_clusters(X, k_max, rng, algorithm=algorithm, n_init=n_init)
    return local_clustering(X, int(k_local), rng, algorithm=algorithm, n_init=n_init)


def mask_aware_means(
    clients: Sequence[np.ndarray], labels: Sequence[np.ndarray], k: int
) -> np.ndarray:
    """The optimal mask-aware centroids of Eq. 1 (typo fixed) from the pooled raw data.

    Coordinate ``m`` of centroid ``a`` is the mean of feature ``m`` over the points of true
    cluster ``a`` held by clients that observe ``m`` (NaN when none does). The reference of
    metric E3; computed here from raw rows, so only for evaluation in simulation.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Each client's rows (NaN on unobserved features).
    labels : sequence of numpy.ndarray
        True cluster of every row.
    k : int
        Number of true clusters.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        ``o^a``.
    """
    X = np.concatenate([np.asarray(c, dtype=np.float64) for c in clients])
    y = np.concatenate([np.asarray(lab, dtype=np.int64) for lab in labels])
    observed = ~np.isnan(X)
    out = np.full((k, X.shape[1]), np.nan)
    for a in range(k):
        rows = y == a
        cnt = observed[rows].sum(axis=0)
        total = np.where(observed[rows], X[rows], 0.0).sum(axis=0)
        out[a, cnt > 0] = total[cnt > 0] / cnt[cnt > 0]
    return out


def bounding_box(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware entry-wise minimum and maximum of a reference set (Eq. 2's ``S``).

    Parameters
    ----------
    points : numpy.ndarray of shape (m, d)
        The reference set (all local centroids, or all proxy points), NaN where unobserved.

    Returns
    -------
    lo, hi : numpy.ndarray of shape (d,)
        ``ewmin`` and ``ewmax`` over the observed entries (NaN for a feature nobody
        observes).
    """
    points = np.asarray(points, dtype=np.float64)
    seen = ~np.isnan(points).all(axis=0)
    lo = np.full(points.shape[1], np.nan)
    hi = np.full(points.shape[1], np.nan)
    lo[seen] = np.nanmin(points[:, seen], axis=0)
    hi[seen] = np.nanmax(points[:, seen], axis=0)
    return lo, hi


def rescaled_distances(
    A: np.ndarray, mask_a: np.ndarray, B: np.ndarray, mask_b: np.ndarray,
    lo: np.ndarray, hi: np.ndarray,
) -> np.ndarray:
    """Rescaled Euclidean distances across feature subspaces (Eqs. 2-3).

    For rows ``x`` of ``A`` (mask ``mask_a[x]``) and ``y`` of ``B``, with shared features
    ``M = mask_a[x] & mask_b[y]``:
    ``||M x - M y|| / max(||M hi - M lo||, EPS)``; NaN when ``M`` is empty (the paper's
    "invalid" distance, which argmin treats as +inf and argmax skips).

    Parameters
    ----------
    A : numpy.ndarray of shape (p, d)
        Points (NaN allowed outside their mask).
    mask_a : numpy.ndarray of shape (p, d), bool
        Observed features of each row of ``A``.
    B : numpy.ndarray of shape (q, d)
        Points.
    mask_b : numpy.ndarray of shape (q, d), bool
        Observed features of each row of ``B``.
    lo, hi : numpy.ndarray of shape (d,)
        Bounding box of the reference set (:func:`bounding_box`).

    Returns
    -------
    numpy.ndarray of shape (p, q)
        Distances in ``[0, ...)``, NaN where the masks are disjoint.
    """
    A0 = np.where(mask_a, np.nan_to_num(np.asarray(A, dtype=np.float64)), 0.0)
    B0 = np.where(mask_b, np.nan_to_num(np.asarray(B, dtype=np.float64)), 0.0)
    ma = np.asarray(mask_a, dtype=np.float64)
    mb = np.asarray(mask_b, dtype=np.float64)
    span2 = np.nan_to_num(hi - lo) ** 2
    # From the differences, not the a^2 + b^2 - 2ab expansion, which cancels badly on
    # data far from the origin (a point's distance to itself would not be 0). Row chunks
    # keep the (rows, q, d) temporary small.
    d2 = np.empty((len(A0), len(B0)))
    step = max(1, 2**22 // max(1, len(B0) * A0.shape[1]))
    for start in range(0, len(A0), step):
        rows = slice(start, start + step)
        diff2 = (A0[rows, None, :] - B0[None, :, :]) ** 2
        d2[rows] = np.einsum("pqd,pd,qd->pq", diff2, ma[rows], mb)
    diag2 = ma @ (mb * span2).T
    shared = ma @ mb.T
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.sqrt(d2) / np.maximum(np.sqrt(diag2), EPS)
    out[shared == 0] = np.nan
    return out


def partial_squared_distances(A: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Squared distances of NaN-free rows ``A`` to centroids ``P`` that may hold NaN.

    A fully defined centroid gets the plain squared Euclidean distance. A centroid defined
    on only ``q`` of the ``d_i`` coordinates gets the distance over those, scaled by
    ``d_i / q`` (the same mean squared difference per coordinate), and one defined nowhere
    gets ``inf``: an undefined coordinate never makes a centroid look close.

    Parameters
    ----------
    A : numpy.ndarray of shape (n, d_i)
        Rows on a client's observed features (no NaN).
    P : numpy.ndarray of shape (K, d_i)
        Centroids on the same features, NaN where a centroid has no value.

    Returns
    -------
    numpy.ndarray of shape (n, K)
    """
    from scipy.spatial.distance import cdist

    defined = ~np.isnan(P)
    full = defined.all(axis=1)
    out = np.full((len(A), len(P)), np.inf)
    if full.any():
        out[:, full] = cdist(A, P[full], metric="sqeuclidean")
    for a in np.flatnonzero(~full & defined.any(axis=1)):
        m = defined[a]
        out[:, a] = ((A[:, m] - P[a, m]) ** 2).sum(axis=1) * (P.shape[1] / m.sum())
    return out


def masked_squared_distances(X: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Squared distances of a client's rows to global centroids, on its observed features.

    A centroid with no value on some of those features (no contributor observed them; the
    paper assumes this away) is measured on the features it has, rescaled to the client's
    dimension, and is never closest if it has none (:func:`partial_squared_distances`).
    Used for the compatibility check, the final labels and the federated evaluation.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's rows, NaN on unobserved features.
    G : numpy.ndarray of shape (K, d)
        Global centroids.

    Returns
    -------
    numpy.ndarray of shape (n, K)
    """
    mask = client_mask(X)
    X = np.asarray(X, dtype=np.float64)
    return partial_squared_distances(X[:, mask], np.asarray(G, dtype=np.float64)[:, mask])


def masked_distance_blocks(X: np.ndarray, G: np.ndarray, mask: np.ndarray | None = None
                           ) -> Iterator[tuple[slice, np.ndarray]]:
    """:func:`masked_squared_distances` one row block at a time (memory flat in ``n``).

    Every value is computed per row, so the blocks equal the rows of the whole matrix
    bit for bit.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's rows, NaN on unobserved features.
    G : numpy.ndarray of shape (K, d)
        Global centroids.
    mask : numpy.ndarray of shape (d,), optional
        ``client_mask(X)`` when the caller has it (saves two passes over the rows).

    Yields
    ------
    rows : slice
        The block's rows.
    d2 : numpy.ndarray of shape (rows, K)
        Their squared distances.
    """
    mask = client_mask(X) if mask is None else np.asarray(mask, dtype=bool)
    X = np.asarray(X, dtype=np.float64)
    P = np.asarray(G, dtype=np.float64)[:, mask]
    for rows in row_blocks(len(X), max(len(P), int(mask.sum()))):
        yield rows, partial_squared_distances(X[rows][:, mask], P)


def masked_nearest(X: np.ndarray, G: np.ndarray, mask: np.ndarray | None = None
                   ) -> np.ndarray:
    """The nearest global centroid of every row, on the observed features (int64).

    ``argmin`` of :func:`masked_squared_distances`, computed in row blocks.
    """
    labels = np.empty(len(X), dtype=np.int64)
    for rows, d2 in masked_distance_blocks(X, G, mask):
        labels[rows] = np.argmin(d2, axis=1)
    return labels


def pooled_masked_squared_distances(X: np.ndarray, G: np.ndarray) -> np.ndarray:
    """:func:`masked_squared_distances` for rows of several masks (pooled evaluation data).

    Rows are grouped by their observed-feature pattern and each group is measured on its
    own features, with the rule of :func:`partial_squared_distances` for a centroid that
    has NaN coordinates (as on a client). Simulation-only: a real server never holds rows.
    """
    X = np.asarray(X, dtype=np.float64)
    patterns, group = np.unique(~np.isnan(X), axis=0, return_inverse=True)
    out = np.empty((len(X), len(G)))
    for p in range(len(patterns)):
        rows = np.flatnonzero(group.ravel() == p)
        out[rows] = masked_squared_distances(X[rows], G)
    return out


def k_local_per_client(k_local: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Broadcast ``k_local`` (None, an int, or one value per client) to ``n`` clients.

    The run loops of both algorithms take ``K_i`` for all clients or per client; ``None``
    means "choose by silhouette" (:func:`client_local_clusters`).
    """
    if k_local is None or np.isscalar(k_local):
        return [None if k_local is None else int(k_local)] * n
    ks = [None if v is None else int(v) for v in k_local]
    if len(ks) != n:
        raise ValueError(f"k_local has {len(ks)} entries for {n} clients")
    return ks


# ------------------------------------------------ evaluation of Sec. 6 (simulation only)


def aggregation_correctness(groups: Sequence[Sequence[int]], classes: np.ndarray) -> float:
    """E1 / E4 of Maritan & Schenato: how correctly local clusters were grouped.

    Each local cluster carries the majority true class of its points (``classes``); groups
    are matched to classes by the Hungarian method on the group x class counts; the result
    is the fraction of local clusters placed in the group matched to their class (an
    implementation choice: Sec. 6.2 defines E1 without a formula).

    Parameters
    ----------
    groups : sequence of sequence of int
        Local cluster indices per global group.
    classes : numpy.ndarray
        Majority class of every local cluster.

    Returns
    -------
    float
        In ``[0, 1]``; 1 is a perfect aggregation.
    """
    classes = np.asarray(classes, dtype=np.int64)
    table = np.zeros((len(groups), int(classes.max()) + 1))
    for g, members in enumerate(groups):
        np.add.at(table[g], classes[list(members)], 1)
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / len(classes))


def centroid_agreement(C: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """E3 of Maritan & Schenato: cosine similarity and relative distance to Eq. 1.

    Rows are matched by the Hungarian method on the Euclidean distance over the coordinates
    both define (NaN marks a coordinate nobody observed; pairs with none in common are
    matched last); then the means over matched pairs of ``cos(c, o)`` and
    ``||c - o|| / ||o||`` on those coordinates.

    Parameters
    ----------
    C : numpy.ndarray of shape (k1, d)
        Estimated centroids (NaN allowed).
    reference : numpy.ndarray of shape (k2, d)
        The optimal mask-aware centroids (NaN allowed).

    Returns
    -------
    (float, float)
        Mean cosine similarity, mean relative distance.
    """
    C = np.asarray(C, dtype=np.float64)
    R = np.asarray(reference, dtype=np.float64)
    both = ~np.isnan(C)[:, None, :] & ~np.isnan(R)[None, :, :]
    diff = np.where(both, np.nan_to_num(C)[:, None, :] - np.nan_to_num(R)[None, :, :], 0.0)
    cost = np.sqrt((diff**2).sum(-1))
    # A pair with no coordinate in common cannot be compared: never match it if avoidable.
    cost[~both.any(-1)] = 10.0 * (cost.max() + 1.0)
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(cost)
    cos, rel = [], []
    for r, c in zip(rows, cols, strict=True):
        m = both[r, c]
        a, b = C[r, m], R[c, m]
        cos.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
        rel.append(float(np.linalg.norm(a - b) / np.linalg.norm(b)))
    return float(np.mean(cos)), float(np.mean(rel))


def assumption8_rate(
    clients: Sequence[np.ndarray],
    complete: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    rng: np.random.Generator,
    n_triplets: int = 1000,
) -> float:
    """Satisfaction rate of Maritan & Schenato's Assumption 8 (Sec. 6.1, Table 1).

    Samples triplets ``x1`` of client ``i`` and class ``a``, ``x2`` of a neighbour ``j`` and
    class ``a``, ``x3`` of a neighbour ``k`` and class ``b != a`` (neighbours: clients whose
    masks share a feature with ``i``'s, ``i`` excluded) and checks implication (14): when
    ``x2`` is closer to ``x1`` than ``x3`` on the complete rows, it is also closer under the
    rescaled masked distances ``d_ij``, ``d_ik`` (Eq. 3, ``S`` = all complete rows). The rate
    is over the triplets whose premise holds (those with a false premise would satisfy the
    implication vacuously); simulation only, it needs the complete rows.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Client rows with NaN outside the masks (they give the masks).
    complete : sequence of numpy.ndarray
        The same rows complete.
    labels : sequence of numpy.ndarray
        True classes per client.
    rng : numpy.random.Generator
        Sampling.
    n_triplets : int, default 1000
        Triplets drawn (the paper's 1000).

    Returns
    -------
    float
        Fraction in ``[0, 1]``; NaN when no valid triplet exists.
    """
    masks = [~np.isnan(np.asarray(X, dtype=np.float64)).all(axis=0) for X in clients]
    full = np.vstack([np.asarray(Xc, dtype=np.float64) for Xc in complete])
    span = full.max(axis=0) - full.min(axis=0)
    n = len(clients)
    neighbours = [[j for j in range(n) if j != i and (masks[i] & masks[j]).any()]
                  for i in range(n)]
    by_class = [{int(c): np.flatnonzero(np.asarray(y) == c) for c in np.unique(y)}
                for y in labels]

    def rescaled(x: np.ndarray, x2: np.ndarray, m: np.ndarray) -> float:
        return float(np.linalg.norm((x - x2)[m]) / max(np.linalg.norm(span[m]), 1e-12))

    held, ok = 0, 0
    for _ in range(int(n_triplets)):
        i = int(rng.integers(n))
        if not by_class[i] or not neighbours[i]:
            continue
        a = int(rng.choice(list(by_class[i])))
        same = [j for j in neighbours[i] if a in by_class[j]]
        other = [(k, b) for k in neighbours[i] for b in by_class[k] if b != a]
        if not same or not other:
            continue
        j = same[int(rng.integers(len(same)))]
        k, b = other[int(rng.integers(len(other)))]
        x1 = complete[i][rng.choice(by_class[i][a])]
        x2 = complete[j][rng.choice(by_class[j][a])]
        x3 = complete[k][rng.choice(by_class[k][b])]
        if np.linalg.norm(x1 - x2) < np.linalg.norm(x1 - x3):
            held += 1
            ok += rescaled(x1, x2, masks[i] & masks[j]) < rescaled(x1, x3, masks[i] & masks[k])
    return ok / held if held else math.nan
