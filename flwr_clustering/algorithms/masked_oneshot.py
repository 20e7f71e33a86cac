"""Algorithm 2 of Maritan & Schenato (Sec. 5): one-shot clustering, overlapping features.

Every client clusters its observed features, fits a Gaussian to each local cluster
(``fitPDF``) and uploads the Gaussians once. The server draws proxy points from them,
computes the attractive force between every pair of proxy clusters (Eq. 10, rescaled
distances of Eqs. 2-3), agglomerates by the largest group force (Eq. 11) down to ``K``
groups and merges each group's local means (Eq. 4). :func:`run_masked_oneshot` is the pure
loop the Flower strategy matches.

Shared primitives (statistics, local clustering, rescaled distances) are in
:mod:`~flwr_clustering.algorithms.masked`. No Flower import (layer 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..options import Options, option
from .masked import (
    LOCAL_ALGORITHMS,
    MaskedStats,
    bounding_box,
    client_local_clusters,
    client_mask,
    k_local_per_client,
    rescaled_distances,
)
from .upload import Claims

__all__ = [
    "MaskedOneShotOptions",
    "FORCE_NORMALIZATIONS",
    "GaussianUpload",
    "MaskedOneShotResult",
    "cluster_overlap",
    "fit_gaussians",
    "force_agglomeration",
    "force_sums",
    "merge_groups",
    "proxy_clusters",
    "run_masked_oneshot",
]


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

    def claims(self) -> Claims:
        """The counts, each mean on the observed features (NaN elsewhere), ``d``."""
        means = np.full((len(self.means), len(self.mask)), np.nan)
        means[:, self.mask] = self.means
        return Claims(counts=self.counts, means=means, features=int(len(self.mask)))


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

    With ``overlap`` (``normalize="valid_pairs"``, an option of ours; Eq. 11 as printed, Sec. 5.1,
    counts every pair) the denominator counts only
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

    ks = k_local_per_client(k_local, len(clients))
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


@dataclass(frozen=True)
class MaskedOneShotOptions(Options):
    """Options of Algorithm 2 of Maritan & Schenato (Gaussian proxies, force agglomeration)."""

    k: int = option(16, minimum=1, help="global clusters")
    k_local: int = option(0, minimum=0, help="K_i, over-clustering allowed (0: each client "
                          "chooses K_i <= k_max by silhouette)")
    k_max: int = option(0, minimum=0, run_config=False, help="largest silhouette choice (0: k)")
    w: float = option(2.0, key="force-w", check=lambda w: None if w > 1.0 else "must be > 1",
                      help="force exponent")
    min_size: int = option(30, key="proxy-min", minimum=1, help="proxy points per local "
                           "cluster, at least")
    max_size: int = option(100, key="proxy-max", minimum=1, help="proxy points per local "
                           "cluster, at most")
    privacy_threshold: int = option(2, minimum=0, help="clusters of fewer points are not "
                                    "uploaded")
    n_init: int = option(0, auto=10, minimum=1, help="restarts of the local k-means (0: the "
                         "algorithm's default)")
    local_algorithm: str = option("kmeans", choices=LOCAL_ALGORITHMS, help="the clients' "
                                  "algorithm (only its labels shape the Gaussians)")
    normalize: str = option("literal", key="force-normalize", choices=FORCE_NORMALIZATIONS,
                            help="group-force denominator: all point pairs (Eq. 11) or "
                            "'valid_pairs'")

    def validate(self) -> None:
        """``k_max = 0`` means ``k``; proxy sizes are ordered."""
        if self.k_max == 0:
            object.__setattr__(self, "k_max", self.k)
        if self.min_size > self.max_size:
            raise ValueError(f"need 'proxy-min' <= 'proxy-max', got {self.min_size}, "
                             f"{self.max_size}")
