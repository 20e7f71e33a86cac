"""Clustering across partially overlapping feature spaces (Maritan & Schenato; spec 000).

Every client observes its own subset of the ``d`` global features (a boolean mask); its
rows are full ``d``-vectors with NaN on the features it does not observe. The server knows
each client's mask, never its rows.

Building blocks (spec §2), all plain NumPy/SciPy:

- centroids travel as per-coordinate sufficient statistics :class:`MaskedStats` (sum and
  count of the observed values per cluster and feature), so the typo-fixed mask-aware merge
  (Eq. 4) is an addition and reproduces the optimal mask-aware centroid (Eq. 1) exactly;
- :func:`bounding_box` and :func:`rescaled_distances` implement Eqs. 2-3: distances in the
  shared subspace, rescaled by the diagonal of the reference set's bounding box in that
  subspace; disjoint masks give NaN ("invalid"), never 0;
- :func:`method_a` (greedy constrained merging, Assumption 1) and :func:`method_b`
  (farthest-first seeding + mask-aware k-means, Assumptions 2-3) group the clients' local
  centroids into ``K`` global centroids.

No Flower import (layer 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MaskedStats",
    "bounding_box",
    "client_mask",
    "choose_local_clusters",
    "client_local_clusters",
    "cluster_stats",
    "local_clustering",
    "local_kmedoids",
    "local_kmeans_masked",
    "mask_aware_means",
    "masked_client_update",
    "masked_squared_distances",
    "pooled_masked_squared_distances",
    "merge_groups",
    "masked_server_update",
    "method_a",
    "method_b",
    "rescaled_distances",
    "run_masked_federated",
    "run_masked_oneshot",
    "fit_gaussians",
    "cluster_overlap",
    "force_agglomeration",
    "force_sums",
    "proxy_clusters",
    "GaussianUpload",
    "MaskedFederatedResult",
    "MaskedOneShotResult",
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
    """

    sums: np.ndarray
    counts: np.ndarray

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
    observed = ~np.isnan(X)
    onehot = np.zeros((k, len(X)))
    onehot[labels, np.arange(len(X))] = 1.0
    return MaskedStats(onehot @ np.where(observed, X, 0.0), onehot @ observed)


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
    mask = ~np.isnan(X).all(axis=0)
    if not mask.any():
        raise ValueError("the client observes no feature (every column is NaN)")
    holes = np.isnan(X[:, mask])
    if holes.any():
        row, col = np.argwhere(holes)[0]
        raise ValueError(
            f"row {row} has NaN in observed feature {np.flatnonzero(mask)[col]}: a client "
            "observes a fixed feature subset; impute missing values first"
        )
    if np.isinf(X[:, mask]).any():
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
    centroids, labels = local_kmeans(Xo, k, rng, init=init, n_init=n_init, max_iter=max_iter)
    k = len(centroids)
    return labels, cluster_stats(X, labels, k)


#: Local clustering algorithms a client may run (spec §1, §3.1 item 3).
LOCAL_ALGORITHMS = ("kmeans", "kmedoids")

#: Best silhouette below which a client keeps a single local cluster (Kaufman & Rousseeuw:
#: below 0.25 "no substantial structure"); silhouette itself cannot score K_i = 1.
MIN_SILHOUETTE = 0.25


def local_kmedoids(
    Xo: np.ndarray, k: int, rng: np.random.Generator, *, init: np.ndarray | None = None,
    n_init: int = 1, max_iter: int = 300,
) -> tuple[np.ndarray, np.ndarray]:
    """Alternating k-medoids (Park & Jun's Voronoi iteration) with Euclidean distance.

    Each start is seeded with scikit-learn's ``kmeans_plusplus`` (whose centres are data
    points) or, with ``init``, with the rows closest to the given centroids (spec §3.1
    item 3); then points go to their nearest medoid and each medoid moves to the point of
    its cluster with the smallest total distance, until nothing changes. Of ``n_init``
    starts the lowest total distance wins. **Medoids are real rows**: a client that uploads
    them shares raw data points.

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


def choose_local_clusters(
    X: np.ndarray, k_max: int, rng: np.random.Generator, *, algorithm: str = "kmeans",
    n_init: int = 10, min_silhouette: float = MIN_SILHOUETTE, sample_size: int = 2000,
) -> tuple[np.ndarray, MaskedStats]:
    """Pick ``K_i <= k_max`` by the silhouette score and return that clustering (spec §3.1).

    Clusters the observed columns for every ``K_i`` in ``2..min(k_max, n - 1)`` (in that
    order, one generator) and keeps the best mean silhouette (scikit-learn, Euclidean; on a
    seeded sample of ``sample_size`` rows for large clients). Silhouette cannot score a
    single cluster, so ``K_i = 1`` when the best score is below ``min_silhouette`` (or
    ``k_max = 1``, or fewer than 3 rows).

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
    if best is None or best[0] < min_silhouette:
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


def _nan_argmin(D: np.ndarray) -> tuple[int, ...] | None:
    """Index of the smallest non-NaN, finite entry (lowest flat index on ties), or None."""
    W = np.where(np.isfinite(D), D, np.inf)
    if not np.isfinite(W).any():
        return None
    return np.unravel_index(int(np.argmin(W)), D.shape)


def _constrained_agglomeration(
    stats: MaskedStats, owners: np.ndarray, k: int, lo: np.ndarray, hi: np.ndarray
) -> tuple[MaskedStats, list[list[int]]]:
    """Method A when no participant has ``k`` local centroids (spec §3.2 ambiguity).

    Every local centroid starts as its own group; the closest pair of groups (rescaled
    distance between their merged centroids, over shared features) that share no
    participant merges, until ``k`` groups remain. With one participant holding ``k``
    centroids this reduces to seeding with them; it also covers clients that each hold
    only some clusters (the paper's DIM runs, ``K_i < K``).
    """
    sums, counts = stats.sums.copy(), stats.counts.copy()
    groups = [[z] for z in range(len(stats))]
    parts = [{int(owners[z])} for z in range(len(stats))]
    while len(groups) > k:
        cur = MaskedStats(sums, counts)
        D = rescaled_distances(cur.means, cur.masks, cur.means, cur.masks, lo, hi)
        np.fill_diagonal(D, np.nan)
        for r in range(len(groups)):
            for q in range(len(groups)):
                if parts[r] & parts[q]:
                    D[r, q] = np.nan
        pick = _nan_argmin(D)
        if pick is None:
            raise ValueError(
                f"method A stalled at {len(groups)} groups (k={k}): no two groups share a "
                "feature and no participant"
            )
        r, q = sorted(int(v) for v in pick)
        sums[r] += sums[q]
        counts[r] += counts[q]
        groups[r] += groups.pop(q)
        parts[r] |= parts.pop(q)
        sums, counts = np.delete(sums, q, axis=0), np.delete(counts, q, axis=0)
    return MaskedStats(sums, counts), [sorted(g) for g in groups]


def method_a(
    stats: MaskedStats, owners: np.ndarray, k: int, *, seed_owner: int | None = None
) -> tuple[MaskedStats, list[list[int]]]:
    """Method A: greedy constrained merging of local centroids (spec §3.2).

    Seeds ``k`` groups with the centroids of one participant that has exactly ``k`` (the
    one with the most points, ties: lowest id, unless ``seed_owner``), then repeatedly
    merges the globally closest (remaining local centroid, group) pair under the rescaled
    distance (reference set: all local centroids), never putting two centroids of one
    participant in one group. Groups merge by adding sufficient statistics (Eq. 4), so the
    global centroid carries per-coordinate counts and the union mask.

    Parameters
    ----------
    stats : MaskedStats
        All local centroids (concatenated over clients).
    owners : numpy.ndarray of shape (len(stats),)
        Participant of every local centroid.
    k : int
        Number of global centroids.
    seed_owner : int, optional
        Participant whose centroids seed the groups (must have exactly ``k``).

    Returns
    -------
    global_stats : MaskedStats
        ``k`` merged centroids.
    groups : list of list of int
        Indices of the local centroids in each group.

    When no participant has exactly ``k`` local centroids (the paper's DIM runs), the
    grouping is a constrained agglomeration instead: the closest pair of groups that share
    no participant merges until ``k`` groups remain (a documented fallback; the paper only
    says to seed with centroids that "should not be merged").

    Raises
    ------
    ValueError
        If ``seed_owner`` does not have ``k`` centroids, or the merging stalls on disjoint
        masks.
    """
    owners = np.asarray(owners, dtype=np.int64)
    ids, per_owner = np.unique(owners, return_counts=True)
    lo, hi = bounding_box(stats.means)
    if seed_owner is None:
        full = ids[per_owner == k]
        if not len(full):
            return _constrained_agglomeration(stats, owners, k, lo, hi)
        size = {int(i): float(stats.take(np.flatnonzero(owners == i)).sizes.sum()) for i in full}
        seed_owner = max(full.tolist(), key=lambda i: (size[i], -i))
    seeds = np.flatnonzero(owners == seed_owner)
    if len(seeds) != k:
        raise ValueError(f"participant {seed_owner} has {len(seeds)} local centroids, not k={k}")
    groups = [[int(z)] for z in seeds]
    g_sums, g_counts = stats.sums[seeds].copy(), stats.counts[seeds].copy()
    members = [{int(seed_owner)} for _ in range(k)]
    remaining = [int(z) for z in range(len(stats)) if owners[z] != seed_owner]
    means, masks = stats.means, stats.masks
    while remaining:
        g_means = MaskedStats(g_sums, g_counts).means
        D = rescaled_distances(means[remaining], masks[remaining], g_means, g_counts > 0, lo, hi)
        for row, z in enumerate(remaining):
            for g in range(k):
                if owners[z] in members[g]:
                    D[row, g] = np.inf
        pick = _nan_argmin(D)
        if pick is None:
            raise ValueError(
                f"method A stalled: local centroids {remaining} share no feature with any "
                "group they may join (disjoint masks or the one-per-participant constraint)"
            )
        row, g = pick
        z = remaining.pop(int(row))
        groups[g].append(z)
        members[g].add(int(owners[z]))
        g_sums[g] += stats.sums[z]
        g_counts[g] += stats.counts[z]
    return MaskedStats(g_sums, g_counts), groups


def method_b(
    stats: MaskedStats, k: int, *, max_iter: int = 100
) -> tuple[MaskedStats, list[list[int]]]:
    """Method B: farthest-first seeding, then mask-aware k-means of local centroids (§3.3).

    Seeds: the farthest valid pair, then max-min additions (ties: lowest index). Then
    assign every local centroid to the nearest global centroid (rescaled distance, +inf
    when disjoint) and merge each cluster by sufficient statistics, until the assignment
    stops changing or ``max_iter``; an empty cluster keeps its previous centroid.

    Parameters
    ----------
    stats : MaskedStats
        All local centroids.
    k : int
        Number of global centroids (``2 <= k <= len(stats)``).
    max_iter : int, default 100
        Assignment iterations at most.

    Returns
    -------
    global_stats : MaskedStats
        ``k`` merged centroids.
    groups : list of list of int
        Indices of the local centroids in each group.
    """
    n = len(stats)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}] (the number of local centroids), got {k}")
    means, masks = stats.means, stats.masks
    lo, hi = bounding_box(means)
    D = rescaled_distances(means, masks, means, masks, lo, hi)
    np.fill_diagonal(D, np.nan)
    valid = np.where(np.isnan(D), -np.inf, D)
    if k == 1:
        Z = [0]
    else:
        a, b = np.unravel_index(int(np.argmax(valid)), valid.shape)
        Z = sorted([int(a), int(b)])
        while len(Z) < k:
            min_d = np.where(np.isnan(D[:, Z]), np.inf, D[:, Z]).min(axis=1)
            min_d[Z] = -np.inf
            min_d[np.isposinf(min_d)] = -np.inf  # no valid distance to Z: never picked
            Z.append(int(np.argmax(min_d)))
    g_sums, g_counts = stats.sums[Z].copy(), stats.counts[Z].copy()
    assign = None
    for _ in range(max_iter):
        g_means = MaskedStats(g_sums, g_counts).means
        Dg = rescaled_distances(means, masks, g_means, g_counts > 0, lo, hi)
        new = np.argmin(np.where(np.isnan(Dg), np.inf, Dg), axis=1)
        if assign is not None and np.array_equal(new, assign):
            break
        assign = new
        for g in range(k):
            rows = assign == g
            if rows.any():
                g_sums[g] = stats.sums[rows].sum(axis=0)
                g_counts[g] = stats.counts[rows].sum(axis=0)
    groups = [np.flatnonzero(assign == g).tolist() for g in range(k)]
    return MaskedStats(g_sums, g_counts), groups


# ------------------------------------------------------------ Algorithm 1 (federated)


def _fill_projection(G: np.ndarray, X: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Global centroids on the client's observed columns, NaN filled by the column mean.

    A global centroid whose members never observed one of the client's features has no
    value there; the client's own mean of that feature is the neutral stand-in (documented
    choice, the paper assumes it does not happen).
    """
    P = np.asarray(G, dtype=np.float64)[:, mask].copy()
    col_mean = np.nanmean(np.asarray(X, dtype=np.float64)[:, mask], axis=0)
    holes = np.isnan(P)
    P[holes] = np.broadcast_to(col_mean, P.shape)[holes]
    return P


def _partial_sqdist(A: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Squared distances of NaN-free rows ``A`` to centroids ``P`` that may hold NaN.

    A fully defined centroid gets the plain squared Euclidean distance. A centroid defined
    on only ``q`` of the ``d_i`` coordinates gets the distance over those, scaled by
    ``d_i / q`` (the same mean squared difference per coordinate), and one defined nowhere
    gets ``inf``: an undefined coordinate never makes a centroid look close.
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
    dimension, and is never closest if it has none (:func:`_partial_sqdist`). Used for the
    compatibility check, the final labels and the federated evaluation.

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
    return _partial_sqdist(X[:, mask], np.asarray(G, dtype=np.float64)[:, mask])


def pooled_masked_squared_distances(X: np.ndarray, G: np.ndarray) -> np.ndarray:
    """:func:`masked_squared_distances` for rows of several masks (pooled evaluation data).

    Rows are grouped by their observed-feature pattern and each group is measured on its
    own features (a NaN centroid coordinate takes the group's column mean, as on a
    client). Simulation-only: a real server never holds rows.
    """
    X = np.asarray(X, dtype=np.float64)
    patterns, group = np.unique(~np.isnan(X), axis=0, return_inverse=True)
    out = np.empty((len(X), len(G)))
    for p in range(len(patterns)):
        rows = np.flatnonzero(group.ravel() == p)
        out[rows] = masked_squared_distances(X[rows], G)
    return out


def masked_client_update(
    X: np.ndarray,
    G: np.ndarray,
    *,
    local_iterations: int = 10,
    min_points: int | None = None,
    privacy_threshold: int = 2,
    algorithm: str = "kmeans",
) -> MaskedStats:
    """One federated round of Algorithm 1 on a client (lines 14-18, spec §3.1).

    Keeps the global centroids compatible with the local data (those that attract at least
    ``min_points`` local points, default ``max(2, ceil(0.02 n))``), runs k-means warm-started
    at them on the observed columns for ``local_iterations`` steps, aligns the updated local
    centroids to **all** ``K`` projected global centroids by the Hungarian method and
    returns ``K`` aligned rows: unmatched global indices (and local clusters of fewer than
    ``privacy_threshold`` points) get zero counts.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's rows, NaN on unobserved features.
    G : numpy.ndarray of shape (K, d)
        Global centroids (NaN where a centroid has no value).
    local_iterations : int, default 10
        ``I_F``, k-means iterations of the warm start.
    min_points : int, optional
        Compatibility threshold.
    privacy_threshold : int, default 2
        Aligned centroids of fewer points are withheld (count 0).
    algorithm : {"kmeans", "kmedoids"}, default "kmeans"
        Local algorithm; k-medoids starts from the rows closest to the compatible
        centroids and uploads medoids (real rows).

    Returns
    -------
    MaskedStats
        ``K`` rows aligned to ``G``.
    """
    from scipy.optimize import linear_sum_assignment

    X = np.asarray(X, dtype=np.float64)
    mask = client_mask(X)
    Xo = X[:, mask]
    K = len(G)
    P = _fill_projection(G, X, mask)
    nearest = np.argmin(masked_squared_distances(X, G), axis=1)
    attracted = np.bincount(nearest, minlength=K)
    threshold = max(2, int(np.ceil(0.02 * len(Xo)))) if min_points is None else int(min_points)
    compatible = np.flatnonzero(attracted >= threshold)
    if not len(compatible):
        compatible = np.array([int(np.argmax(attracted))])
    warm = np.array(G[compatible], dtype=np.float64)
    warm[:, mask] = P[compatible]
    # A warm start draws no randomness: the generator only satisfies the signature.
    _, local = local_clustering(X, len(compatible), np.random.default_rng(0), init=warm,
                                max_iter=max(1, int(local_iterations)), algorithm=algorithm)
    # Alignment cost: the same partial distance, from every local centroid to all K
    # projected global centroids (inf -> a finite cost above every finite one).
    cost = np.sqrt(_partial_sqdist(np.nan_to_num(local.means[:, mask]),
                                   np.asarray(G, dtype=np.float64)[:, mask]).T)
    finite = np.isfinite(cost)
    cost[~finite] = (cost[finite].max() + 1.0) * 10 if finite.any() else 1.0
    rows, cols = linear_sum_assignment(cost)
    sums = np.zeros((K, X.shape[1]))
    counts = np.zeros((K, X.shape[1]))
    keep = local.sizes[cols] >= max(privacy_threshold, 1)
    sums[rows[keep]] = local.sums[cols[keep]]
    counts[rows[keep]] = local.counts[cols[keep]]
    return MaskedStats(sums, counts)


def masked_server_update(
    G: np.ndarray, uploads: Sequence[MaskedStats], alpha: float = 0.8
) -> np.ndarray:
    """The server update of Algorithm 1: ``G <- (1 - alpha) G + alpha merge(aligned)``.

    Coordinates that no contributor observes keep their old value (a no-op there); a
    coordinate that was NaN takes the merged value.

    Parameters
    ----------
    G : numpy.ndarray of shape (K, d)
        Current global centroids.
    uploads : sequence of MaskedStats
        Every client's ``K`` aligned rows.
    alpha : float, default 0.8
        Step size in ``(0, 1]``.

    Returns
    -------
    numpy.ndarray of shape (K, d)
        The new global centroids.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    total = MaskedStats(sum(u.sums for u in uploads), sum(u.counts for u in uploads))
    merged = total.means
    G = np.asarray(G, dtype=np.float64)
    out = G.copy()
    have = ~np.isnan(merged)
    blend = have & ~np.isnan(G)
    out[blend] = (1.0 - alpha) * G[blend] + alpha * merged[blend]
    fresh = have & np.isnan(G)
    out[fresh] = merged[fresh]
    return out


def _per_client(k_local: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Broadcast ``k_local`` (None, an int, or one value per client) to ``n`` clients."""
    if k_local is None or np.isscalar(k_local):
        return [None if k_local is None else int(k_local)] * n
    ks = [None if v is None else int(v) for v in k_local]
    if len(ks) != n:
        raise ValueError(f"k_local has {len(ks)} entries for {n} clients")
    return ks


@dataclass
class MaskedFederatedResult:
    """Outcome of :func:`run_masked_federated`.

    Attributes
    ----------
    centroids : numpy.ndarray of shape (K, d)
        Final global centroids.
    history : list of numpy.ndarray
        Global centroids after the initialisation (index 0) and after every round.
    groups : list of list of int
        The initial grouping of the local centroids (Method A or B).
    owners : numpy.ndarray
        Client of every uploaded local centroid (the indices of ``groups``).
    local_labels : list of numpy.ndarray
        Per client: the initial local cluster of every row (kept on the client in Flower).
    uploaded : list of numpy.ndarray
        Per client: which of its initial local clusters were uploaded (privacy threshold).
    """

    centroids: np.ndarray
    history: list[np.ndarray]
    groups: list[list[int]]
    owners: np.ndarray | None = None
    local_labels: list[np.ndarray] | None = None
    uploaded: list[np.ndarray] | None = None


def run_masked_federated(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    method: str = "B",
    alpha: float = 0.8,
    rounds: int = 3,
    k_local: int | Sequence[int | None] | None = None,
    seed: int = 0,
    local_iterations: int = 10,
    privacy_threshold: int = 2,
    n_init: int = 10,
    algorithm: str = "kmeans",
) -> MaskedFederatedResult:
    """Algorithm 1 on in-memory client arrays (the reference loop for the Flower strategy).

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Client rows in client-id order, NaN on unobserved features.
    k : int
        Number of global clusters.
    method : {"A", "B"}, default "B"
        Initial meta-clustering (Assumption 1 or Assumptions 2-3; B is the paper's fallback).
    alpha : float, default 0.8
        Step size of the federated update.
    rounds : int, default 3
        ``F``, federated rounds after the initialisation.
    k_local : int or sequence of int, optional
        Local clusters at initialisation, for all clients or per client; ``None`` (the
        default) lets every client choose ``K_i <= k`` by silhouette
        (:func:`choose_local_clusters`).
    seed : int, default 0
        Client ``i`` uses :func:`~flwr_clustering.algorithms.lloyd.client_rng(seed, i)`.
    local_iterations, privacy_threshold
        See :func:`masked_client_update`.
    n_init : int, default 10
        Restarts of the initial local clustering.
    algorithm : {"kmeans", "kmedoids"}, default "kmeans"
        Local algorithm (k-medoids uploads real rows).

    Returns
    -------
    MaskedFederatedResult
        Final centroids, history and the initial grouping.
    """
    from .lloyd import client_rng

    if method not in ("A", "B"):
        raise ValueError(f"method must be 'A' or 'B', got {method!r}")
    ks = _per_client(k_local, len(clients))
    uploads, owners, local_labels, uploaded = [], [], [], []
    for i, X in enumerate(clients):
        labels, stats = client_local_clusters(X, ks[i], k, client_rng(seed, i),
                                              algorithm=algorithm, n_init=n_init)
        keep = np.flatnonzero(stats.sizes >= max(privacy_threshold, 1))
        uploads.append(stats.take(keep))
        owners += [i] * len(keep)
        local_labels.append(labels)
        uploaded.append(keep)
    stats = MaskedStats.concatenate(uploads)
    if method == "A":
        init, groups = method_a(stats, np.asarray(owners), k)
    else:
        init, groups = method_b(stats, k)
    G = init.means
    history = [G]
    for _ in range(rounds):
        aligned = [masked_client_update(X, G, local_iterations=local_iterations,
                                        privacy_threshold=privacy_threshold,
                                        algorithm=algorithm) for X in clients]
        G = masked_server_update(G, aligned, alpha)
        history.append(G)
    return MaskedFederatedResult(G, history, groups, np.asarray(owners), local_labels, uploaded)


# ------------------------------------------------------------ Algorithm 2 (one-shot)


@dataclass
class GaussianUpload:
    """One client's Algorithm 2 upload: a Gaussian per local cluster, in its own subspace.

    Attributes
    ----------
    mask : numpy.ndarray of shape (d,), bool
        The client's observed features ``Omega_i``.
    means : numpy.ndarray of shape (K_i, d_i)
        Cluster means on the observed features.
    covariances : numpy.ndarray of shape (K_i, d_i, d_i)
        Regularised MLE covariances.
    counts : numpy.ndarray of shape (K_i,)
        Cluster sizes (for the proxy size and the final weighted merge, Eq. 4).
    """

    mask: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    counts: np.ndarray


def fit_gaussians(
    X: np.ndarray, labels: np.ndarray, k: int, *, reg: float = 1e-6
) -> GaussianUpload:
    """``fitPDF`` of Algorithm 2: a multivariate Gaussian (MLE) per local cluster.

    The covariance gets ``reg * (trace / d_i + 1e-300)`` on its diagonal, a ridge relative
    to the cluster's own scale (scikit-learn's absolute ``reg_covar`` would vanish on data
    of large scale and dominate on small), so a cluster with fewer points than features
    still has a positive-definite covariance.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's rows, NaN on unobserved features.
    labels : numpy.ndarray of shape (n,)
        Local clusters, every one non-empty.
    k : int
        Number of local clusters.
    reg : float, default 1e-6
        Relative ridge.

    Returns
    -------
    GaussianUpload
        Means, covariances and counts of the ``k`` clusters on the observed features.
    """
    mask = client_mask(X)
    Xo = np.asarray(X, dtype=np.float64)[:, mask]
    d_i = Xo.shape[1]
    means = np.zeros((k, d_i))
    covs = np.zeros((k, d_i, d_i))
    counts = np.bincount(labels, minlength=k)
    if (counts == 0).any():
        raise ValueError(f"local cluster(s) {np.flatnonzero(counts == 0).tolist()} are empty")
    for a in range(k):
        D = Xo[labels == a]
        means[a] = D.mean(axis=0)
        C = (D - means[a]).T @ (D - means[a]) / len(D)
        covs[a] = C + np.eye(d_i) * reg * (np.trace(C) / d_i + 1e-300)
    return GaussianUpload(mask, means, covs, counts)


def proxy_clusters(
    uploads: Sequence[GaussianUpload], rng: np.random.Generator, *,
    min_size: int = 30, max_size: int = 100,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic proxy clusters drawn from the uploaded Gaussians (server side).

    Cluster ``(i, a)`` gets ``M = clip(count, min_size, max_size)`` points in client ``i``'s
    subspace (NaN elsewhere), drawn with ``rng`` in upload order.

    Returns
    -------
    points : numpy.ndarray of shape (total, d)
        All proxy points.
    owner : numpy.ndarray of shape (total,), int64
        Index of the proxy cluster (in upload order) of every point.
    masks : numpy.ndarray of shape (total, d), bool
        The observed features of every point.
    """
    if not any(len(up.means) for up in uploads):
        raise ValueError("no local cluster was uploaded (every client empty or below the "
                         "privacy threshold): nothing to agglomerate")
    d = len(uploads[0].mask)
    points, owner, masks = [], [], []
    z = 0
    for up in uploads:
        for a in range(len(up.means)):
            m = int(np.clip(up.counts[a], min_size, max_size))
            P = np.full((m, d), np.nan)
            P[:, up.mask] = rng.multivariate_normal(up.means[a], up.covariances[a], size=m,
                                                    method="cholesky")
            points.append(P)
            owner.append(np.full(m, z))
            masks.append(np.broadcast_to(up.mask, (m, d)))
            z += 1
    return np.vstack(points), np.concatenate(owner), np.vstack(masks)


def force_sums(
    points: np.ndarray, owner: np.ndarray, masks: np.ndarray, *, w: float = 2.0,
    eps: float = 1e-12,
) -> np.ndarray:
    """``f'`` of Eq. 10 between every pair of proxy clusters (rescaled distances, S = P).

    ``f'(P_r, P_s) = sum_{x in P_r, x' in P_s} 1 / (d(x, x') + eps)^w``; pairs with disjoint
    masks contribute 0. Symmetric, zero diagonal.
    """
    lo, hi = bounding_box(points)
    n_groups = int(owner.max()) + 1
    F = np.zeros((n_groups, n_groups))
    for r in range(n_groups):
        rows = owner == r
        D = rescaled_distances(points[rows], masks[rows], points, masks, lo, hi)
        inv = np.where(np.isnan(D), 0.0, 1.0 / (D + eps) ** w)
        F[r] = np.bincount(owner, weights=inv.sum(axis=0), minlength=n_groups)
    F = (F + F.T) / 2  # equal up to rounding; make it exactly symmetric
    np.fill_diagonal(F, 0.0)
    return F


FORCE_NORMALIZATIONS = ("literal", "valid_pairs")


def cluster_overlap(uploads: Sequence[GaussianUpload], normalize: str) -> np.ndarray | None:
    """Whether the uploaded clusters' masks intersect, for ``normalize="valid_pairs"``.

    Returns ``None`` for the literal Eq. 11 (every pair counts).
    """
    if normalize not in FORCE_NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {FORCE_NORMALIZATIONS}, got {normalize!r}")
    if normalize == "literal":
        return None
    M = np.vstack([np.broadcast_to(up.mask, (len(up.means), len(up.mask))) for up in uploads])
    M = M.astype(np.int64)
    return (M @ M.T) > 0


def force_agglomeration(
    F: np.ndarray, sizes: np.ndarray, k: int, *, overlap: np.ndarray | None = None
) -> list[list[int]]:
    """Merge proxy clusters by the largest attractive force (Eq. 11) down to ``k`` groups.

    ``f(G_r, G_s) = Fsum[r, s] / (size_r * size_s)`` with the Lance-Williams-style update
    ``Fsum[r] += Fsum[s]``, ``size_r += size_s`` (the printed denominator's ``G[s] x G[s]``
    typo fixed to ``G[r] x G[s]``). Ties: the lowest (r, s).

    With ``overlap`` (spec §4.1, ``normalize="valid_pairs"``) the denominator counts only
    the point pairs whose clusters share a feature, so pairs that have no distance do not
    dilute the force between groups that span disjoint feature sets; groups without any
    valid pair never merge while another pair can.

    Parameters
    ----------
    F : numpy.ndarray of shape (N0, N0)
        :func:`force_sums`.
    sizes : numpy.ndarray of shape (N0,)
        Proxy points per cluster.
    k : int
        Groups to stop at.
    overlap : numpy.ndarray of shape (N0, N0), bool, optional
        Whether two proxy clusters' feature masks intersect (default: the literal Eq. 11).

    Returns
    -------
    list of list of int
        The groups (proxy cluster indices), ordered by their smallest member.
    """
    Fs = np.array(F, dtype=np.float64, copy=True)
    size = np.asarray(sizes, dtype=np.float64).copy()
    pairs = None  # valid point pairs between groups (valid_pairs normalisation)
    if overlap is not None:
        pairs = np.asarray(overlap, dtype=bool) * np.outer(size, size)
    alive = list(range(len(Fs)))
    members = {i: [i] for i in alive}
    while len(alive) > k:
        if pairs is None:
            sub = Fs[np.ix_(alive, alive)] / np.outer(size[alive], size[alive])
        else:
            P = pairs[np.ix_(alive, alive)]
            sub = np.where(P > 0, Fs[np.ix_(alive, alive)] / np.where(P > 0, P, 1.0), -1.0)
        np.fill_diagonal(sub, -np.inf)
        a, b = np.unravel_index(int(np.argmax(sub)), sub.shape)
        r, s = sorted((alive[a], alive[b]))
        Fs[r] += Fs[s]
        Fs[:, r] += Fs[:, s]
        Fs[r, r] = 0.0
        if pairs is not None:
            pairs[r] += pairs[s]
            pairs[:, r] += pairs[:, s]
        size[r] += size[s]
        members[r] += members.pop(s)
        alive.remove(s)
    return sorted((sorted(members[i]) for i in alive), key=lambda g: g[0])


def merge_groups(uploads: Sequence[GaussianUpload], groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Global centroids of Algorithm 2: the Eq. 4 merge of each group's local means.

    Parameters
    ----------
    uploads : sequence of GaussianUpload
        In upload order (local cluster indices run over them in that order).
    groups : sequence of sequence of int
        Local clusters per global cluster.

    Returns
    -------
    numpy.ndarray of shape (len(groups), d)
        Count-weighted per-feature means (NaN where no member observes a feature).
    """
    d = len(uploads[0].mask)
    sums, counts = [], []
    for up in uploads:
        for a in range(len(up.means)):
            row = np.zeros(d)
            row[up.mask] = up.means[a] * up.counts[a]
            sums.append(row)
            counts.append(np.where(up.mask, float(up.counts[a]), 0.0))
    local = MaskedStats(np.array(sums), np.array(counts))
    return np.vstack([local.take(list(g)).merged().means for g in groups])


@dataclass
class MaskedOneShotResult:
    """Outcome of :func:`run_masked_oneshot`.

    Attributes
    ----------
    centroids : numpy.ndarray of shape (k, d)
        Count-weighted mask-aware merge (Eq. 4) of each group's local means.
    groups : list of list of int
        Local clusters (in upload order) per global cluster.
    assignment : list of numpy.ndarray
        Per client: global cluster of each of its local clusters (what clients need to
        label their points).
    local_labels : list of numpy.ndarray
        Per client: the local cluster of every row (kept on the client in Flower).
    """

    centroids: np.ndarray
    groups: list[list[int]]
    assignment: list[np.ndarray]
    local_labels: list[np.ndarray] | None = None


def run_masked_oneshot(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    k_local: int | Sequence[int | None] | None = None,
    k_max: int | None = None,
    seed: int = 0,
    w: float = 2.0,
    min_size: int = 30,
    max_size: int = 100,
    n_init: int = 10,
    privacy_threshold: int = 2,
    algorithm: str = "kmeans",
    normalize: str = "literal",
) -> MaskedOneShotResult:
    """Algorithm 2 on in-memory client arrays: Gaussian proxies and force agglomeration.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Client rows, NaN on unobserved features.
    k : int
        Number of global clusters.
    k_local : int or sequence of int, optional
        Local clusters, for all clients or per client (over-clustering, e.g. ``2k``, is
        allowed); ``None`` (the default) lets every client choose ``K_i <= k_max`` by
        silhouette.
    k_max : int, optional
        Largest silhouette choice (default ``k``).
    seed : int, default 0
        Client ``i`` uses ``client_rng(seed, i)``; the server's proxies use
        ``default_rng(seed)``.
    w : float, default 2.0
        Force exponent.
    min_size, max_size : int
        Proxy cluster size bounds.
    n_init : int, default 10
        Restarts of the local k-means.
    privacy_threshold : int, default 2
        Local clusters of fewer points are not uploaded.
    algorithm : {"kmeans", "kmedoids"}, default "kmeans"
        Local algorithm (only its labels are used: the Gaussians are fitted to the
        clusters' points).
    normalize : {"literal", "valid_pairs"}, default "literal"
        Denominator of the group force: all point pairs (Eq. 11 as printed) or only the
        pairs of clusters that share a feature (:func:`force_agglomeration`).

    Returns
    -------
    MaskedOneShotResult
        Global centroids, groups and per-client label maps.
    """
    from .lloyd import client_rng

    ks = _per_client(k_local, len(clients))
    uploads, local_labels = [], []
    for i, X in enumerate(clients):
        labels, stats = client_local_clusters(X, ks[i], k if k_max is None else int(k_max),
                                              client_rng(seed, i), algorithm=algorithm,
                                              n_init=n_init)
        up = fit_gaussians(X, labels, len(stats))
        keep = up.counts >= max(privacy_threshold, 1)
        uploads.append(GaussianUpload(up.mask, up.means[keep], up.covariances[keep],
                                      up.counts[keep]))
        local_labels.append(labels)
    points, owner, masks = proxy_clusters(uploads, np.random.default_rng(seed),
                                          min_size=min_size, max_size=max_size)
    F = force_sums(points, owner, masks, w=w)
    groups = force_agglomeration(F, np.bincount(owner), k,
                                 overlap=cluster_overlap(uploads, normalize))
    centroids = merge_groups(uploads, groups)
    local_count = sum(len(up.means) for up in uploads)
    label_of = np.empty(local_count, dtype=np.int64)
    for j, g in enumerate(groups):
        label_of[g] = j
    offsets = np.cumsum([0] + [len(up.means) for up in uploads])
    assignment = [label_of[offsets[i]:offsets[i + 1]] for i in range(len(uploads))]
    return MaskedOneShotResult(centroids, groups, assignment, local_labels)
