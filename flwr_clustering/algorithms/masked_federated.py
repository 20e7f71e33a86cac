"""Algorithm 1 of Maritan & Schenato (Sec. 4): federated clustering, overlapping features.

Initialisation: every client clusters its observed features and uploads the sufficient
statistics of its local clusters; the server groups them into ``K`` global centroids with
Method A (greedy constrained merging, Assumption 1) or Method B (farthest-first seeding and
mask-aware k-means, Assumptions 2-3). Federated phase: every round each client keeps the
global centroids compatible with its data, runs a few warm-started local iterations,
aligns its centroids to the global ones, and the server blends the merge into ``G`` with
step ``alpha``. :func:`run_masked_federated` is the pure loop the Flower strategy matches.

Shared primitives (statistics, local clustering, rescaled distances) are in
:mod:`~flwr_clustering.algorithms.masked`. No Flower import (layer 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..options import Options, option
from .lloyd import row_blocks
from .masked import (
    LOCAL_ALGORITHMS,
    MaskedStats,
    bounding_box,
    client_local_clusters,
    client_mask,
    k_local_per_client,
    local_clustering,
    masked_nearest,
    partial_squared_distances,
    rescaled_distances,
)

__all__ = [
    "MaskedFederatedOptions",
    "MaskedFederatedResult",
    "masked_client_update",
    "masked_server_update",
    "method_a",
    "method_b",
    "run_masked_federated",
]


def _nan_argmin(D: np.ndarray) -> tuple[int, ...] | None:
    """Index of the smallest non-NaN, finite entry (lowest flat index on ties), or None."""
    W = np.where(np.isfinite(D), D, np.inf)
    if not np.isfinite(W).any():
        return None
    return np.unravel_index(int(np.argmin(W)), D.shape)


def _constrained_agglomeration(
    stats: MaskedStats, owners: np.ndarray, k: int, lo: np.ndarray, hi: np.ndarray
) -> tuple[MaskedStats, list[list[int]]]:
    """Method A when no participant has ``k`` local centroids.

    An implementation choice: Sec. 4.1.2 only says to seed with centroids that "should not
    be merged". Every local centroid starts as its own group; the closest pair of groups (rescaled
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
    """Method A: greedy constrained merging of local centroids (Sec. 4.1.2).

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


def _fill_projection(G: np.ndarray, X: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Global centroids on the client's observed columns, NaN filled by the column mean.

    A global centroid whose members never observed one of the client's features has no
    value there; the client's own mean of that feature is the neutral stand-in (documented
    choice, the paper assumes it does not happen).
    """
    P = np.asarray(G, dtype=np.float64)[:, mask].copy()
    holes = np.isnan(P)
    if holes.any():
        # the observed columns hold no NaN (client_mask): their mean, in row blocks
        X = np.asarray(X, dtype=np.float64)
        total = np.zeros(int(mask.sum()))
        for rows in row_blocks(len(X), X.shape[1]):
            total += X[rows][:, mask].sum(axis=0)
        col_mean = total / len(X)
        P[holes] = np.broadcast_to(col_mean, P.shape)[holes]
    return P


def masked_client_update(
    X: np.ndarray,
    G: np.ndarray,
    *,
    local_iterations: int = 10,
    min_points: int | None = None,
    privacy_threshold: int = 2,
    algorithm: str = "kmeans",
) -> MaskedStats:
    """One federated round of Algorithm 1 on a client (Sec. 4.1.3, lines 14-18).

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
    K = len(G)
    P = _fill_projection(G, X, mask)
    # the nearest centroids in row blocks: no (n, K) matrix, no copy of the rows
    attracted = np.bincount(masked_nearest(X, G, mask), minlength=K)
    threshold = max(2, int(np.ceil(0.02 * len(X)))) if min_points is None else int(min_points)
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
    cost = np.sqrt(partial_squared_distances(np.nan_to_num(local.means[:, mask]),
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
    ks = k_local_per_client(k_local, len(clients))
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


def _alpha_check(alpha: float) -> str | None:
    return None if 0.0 < alpha <= 1.0 else "must be in (0, 1]"


@dataclass(frozen=True)
class MaskedFederatedOptions(Options):
    """Options of Algorithm 1 of Maritan & Schenato (federated, masked features)."""

    k: int = option(16, minimum=1, help="global clusters")
    method: str = option("B", choices=("A", "B"), help="initial grouping: Method A (IID per "
                         "cluster) or B (biased local data)")
    alpha: float = option(0.8, check=_alpha_check, help="step size")
    federated_rounds: int = option(3, minimum=0, help="F")
    k_local: int = option(0, minimum=0, help="K_i (0: each client chooses K_i <= k by "
                          "silhouette)")
    local_iterations: int = option(0, auto=10, minimum=1, help="warm-started local steps per "
                                   "round (0: the algorithm's default)")
    privacy_threshold: int = option(2, minimum=0, help="clusters of fewer points are never "
                                    "uploaded")
    n_init: int = option(0, auto=10, minimum=1, help="restarts of the initial local k-means "
                         "(0: the algorithm's default)")
    local_algorithm: str = option("kmeans", choices=LOCAL_ALGORITHMS, help="'kmedoids' "
                                  "uploads medoids, which are real rows")
    tol: float = option(1e-6, help="stop when no coordinate moves more than tol (negative: "
                        "exactly F rounds)")

    def validate(self) -> None:
        """Algorithm 1 needs ``K_i <= K``."""
        if self.k_local > self.k:
            raise ValueError(f"k_local must be in [0, {self.k}] for Algorithm 1 (K_i <= K), "
                             f"got {self.k_local} (run-config key 'k-local')")
