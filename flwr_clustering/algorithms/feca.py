"""FeCA: one-shot federated k-means of Xu et al., "Jigsaw game" (Sec. 4, Algorithms 1-5).

Every client runs single-start Lloyd k-means on its own data (a local solution, often a
spurious local optimum), removes the centroids that sit between several true centres
(**ClientUpdate**, Algorithm 2), gives each kept centroid a radius (**RadiusAssign**,
empirical Algorithm 4 by default, theoretical Algorithm 3 selectable) and uploads the
``(centroid, radius)`` pairs once. The server greedily groups all received centroids in
balls, largest radius first, keeps the ``k`` groups with the most members and returns the
unweighted mean of each (**ServerAggregation**, Algorithm 5). One message per client, no
counts, no labels.

This module holds the client step (:func:`feca_client`), its two parts
(:func:`eliminate_one_fit_many`, :func:`empirical_radii`, :func:`theoretical_radii`), the
server step (:func:`feca_server`) and the pure loop (:func:`run_feca`) that the Flower
strategy must match bit for bit. No Flower import (layer 1).

Choices where the paper is silent (implementation choices; Sec. 4.1 and Algorithm 2 leave
them open):

- The "largest standard deviation" (Sec. 4.1; Appendix A speaks of the standard deviation of
  distances) is the RMS radius ``sqrt(G_i / n_i)`` by default
  (``std_mode="rms"``); ``"dist_std"`` is the literal standard deviation of the distances
  ``||x - c_i||`` over the cluster.
- The candidate ``i`` may coincide with ``p`` or ``q`` (then ``G_i >= G_j`` fails
  except in a degenerate equality, and the loop stops); the loop stops when fewer than two
  centroids remain.
- Single-start k-means (``n_init=1``, k-means++; the paper gives no Lloyd settings), as the
  variance of its centralized baseline suggests (Sec. 6.1, Table 1); ``init`` and
  ``n_init`` are options. The centroids are the means of the final partition
  (``c_i = mean(D_i)``), empty clusters are dropped.
- A client with fewer than ``k`` points runs ``min(k, n)`` clusters.
- Ties: the argmax/argmin take the lowest index; the server keeps, among groups of equal
  size, the one formed first (larger radius).
- Privacy (not in the paper): a kept centroid of fewer than ``privacy_threshold`` points is
  not uploaded (a one-point centroid is a raw row). It is withheld after the radii are
  computed, so the other radii are the paper's. The radius ``r'_i`` is a distance to the
  client's farthest point of the cluster; the upload is ``min(r'_i, d_nn / 2)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..options import Options, option
from .lloyd import check_data, client_rng, cluster_sums, local_kmeans
from .upload import Claims, centre_claims

__all__ = [
    "RADIUS_MODES",
    "STD_MODES",
    "FeCAClientResult",
    "FeCAResult",
    "FeCAServerResult",
    "FeCAUpload",
    "check_feca_upload",
    "cluster_spread",
    "eliminate_one_fit_many",
    "empirical_radii",
    "feca_client",
    "feca_server",
    "merged_sse",
    "run_feca",
    "theoretical_radii",
]

STD_MODES = ("rms", "dist_std")
RADIUS_MODES = ("empirical", "theoretical")


@dataclass
class FeCAUpload:
    """What one FeCA client uploads: kept centroids and their radii (nothing else).

    Attributes
    ----------
    centroids : numpy.ndarray of shape (k_m, d)
        The centroids that survived the elimination (and the privacy threshold).
    radii : numpy.ndarray of shape (k_m,)
        Their radii (Algorithm 4 or 3).
    """

    centroids: np.ndarray
    radii: np.ndarray

    def claims(self) -> Claims:
        """Means with no counts: each a mean of at least one row (:class:`~.upload.Upload`)."""
        return centre_claims(self.centroids)

    def to_arrays(self) -> list[np.ndarray]:
        """Return the payload as the list ``[centroids, radii]``."""
        return [self.centroids, self.radii]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> FeCAUpload:
        """Build from ``[centroids, radii]`` (the inverse of :meth:`to_arrays`)."""
        if len(arrays) != 2:
            raise ValueError(f"expected 2 arrays (centroids, radii), got {len(arrays)}")
        return cls(np.asarray(arrays[0]), np.asarray(arrays[1]))


@dataclass
class FeCAClientResult:
    """A client's upload plus what stays on the client (for logs and tests).

    Attributes
    ----------
    upload : FeCAUpload
        What is sent.
    centroids : numpy.ndarray of shape (k_eff, d)
        All local centroids (means of the non-empty Lloyd clusters).
    counts : numpy.ndarray of shape (k_eff,), int64
        Their cluster sizes (never sent).
    kept : numpy.ndarray of int64
        Indices (into ``centroids``) that survived the elimination, ascending.
    removed : list of int
        Indices removed by the elimination, in removal order.
    withheld : numpy.ndarray of int64
        Kept indices not uploaded because of the privacy threshold.
    """

    upload: FeCAUpload
    centroids: np.ndarray
    counts: np.ndarray
    kept: np.ndarray
    removed: list[int]
    withheld: np.ndarray


def _partition_means(X: np.ndarray, labels: np.ndarray, k: int):
    """Means of the non-empty clusters of a labelling, relabelled ``0..k_eff-1``."""
    sums, counts = cluster_sums(X, labels, k)
    nz = np.flatnonzero(counts > 0)
    remap = np.full(k, -1, dtype=np.int64)
    remap[nz] = np.arange(len(nz))
    return sums[nz] / counts[nz, None], counts[nz], remap[labels]


def cluster_spread(
    X: np.ndarray, labels: np.ndarray, centroids: np.ndarray, *, std_mode: str = "rms"
) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster SSE ``G_i`` (Eq. 3) and "standard deviation" (Sec. 4.1).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Local data.
    labels : numpy.ndarray of shape (n,)
        Cluster of every row, in ``[0, k)``.
    centroids : numpy.ndarray of shape (k, d)
        ``c_i``, one per cluster.
    std_mode : {"rms", "dist_std"}, default "rms"
        ``"rms"``: ``sqrt(G_i / n_i)``; ``"dist_std"``: standard deviation (ddof 0) of
        ``||x - c_i||`` over ``D_i``. An empty cluster gets 0.

    Returns
    -------
    sse : numpy.ndarray of shape (k,)
        ``G_i = sum_{x in D_i} ||x - c_i||^2``.
    std : numpy.ndarray of shape (k,)
        The spread used to pick the one-fit-many candidate.
    """
    if std_mode not in STD_MODES:
        raise ValueError(f"std_mode must be one of {STD_MODES}, got {std_mode!r}")
    k = len(centroids)
    d2 = ((X - centroids[labels]) ** 2).sum(axis=1)
    counts = np.bincount(labels, minlength=k)
    sse = np.bincount(labels, weights=d2, minlength=k)
    safe = np.maximum(counts, 1)
    if std_mode == "rms":
        return sse, np.sqrt(sse / safe)
    dist = np.sqrt(d2)
    mean = np.bincount(labels, weights=dist, minlength=k) / safe
    var = np.bincount(labels, weights=(dist - mean[labels]) ** 2, minlength=k) / safe
    return sse, np.sqrt(var)


def merged_sse(X: np.ndarray, labels: np.ndarray, p: int, q: int) -> float:
    """``G_j`` of Eq. 4: the SSE of ``D_p ∪ D_q`` around its own mean.

    Computed from the points, literally. It equals the closed form
    ``G_p + G_q + n_p n_q / (n_p + n_q) ||c_p - c_q||^2`` when ``c_p, c_q`` are the means.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Local data.
    labels : numpy.ndarray of shape (n,)
        Cluster of every row.
    p, q : int
        The two clusters.

    Returns
    -------
    float
        ``sum_{x in D_p ∪ D_q} ||x - mean(D_p ∪ D_q)||^2``.
    """
    D = X[(labels == p) | (labels == q)]
    return float(((D - D.mean(axis=0)) ** 2).sum())


def _closest_pair(C: np.ndarray, alive: list[int]) -> tuple[int, int]:
    """The closest pair among ``alive`` (ties: lexicographically first)."""
    from scipy.spatial.distance import pdist, squareform

    dist = squareform(pdist(C[alive]))
    np.fill_diagonal(dist, np.inf)
    a, b = np.unravel_index(int(np.argmin(dist)), dist.shape)
    a, b = sorted((int(a), int(b)))
    return alive[a], alive[b]


def eliminate_one_fit_many(
    X: np.ndarray, labels: np.ndarray, centroids: np.ndarray, *, std_mode: str = "rms"
) -> tuple[np.ndarray, list[int]]:
    """ClientUpdate step 2 (Algorithm 2): remove one-fit-many centroids.

    While at least two centroids remain: take the remaining cluster ``i`` of largest
    spread and the closest remaining pair ``(p, q)``; if ``G_i >= G_j`` (Eqs. 3-4), drop
    ``c_i`` and its points, else stop. Kept centroids are never recomputed; the tentative
    merge of ``p`` and ``q`` is only a test.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Local data.
    labels : numpy.ndarray of shape (n,)
        The Lloyd partition, every cluster non-empty.
    centroids : numpy.ndarray of shape (k, d)
        ``c_i = mean(D_i)``.
    std_mode : {"rms", "dist_std"}, default "rms"
        See :func:`cluster_spread`.

    Returns
    -------
    kept : numpy.ndarray of int64
        Surviving cluster indices, ascending.
    removed : list of int
        Removed indices in removal order.
    """
    sse, std = cluster_spread(X, labels, centroids, std_mode=std_mode)
    alive = list(range(len(centroids)))
    removed: list[int] = []
    while len(alive) >= 2:
        i = alive[int(np.argmax(std[alive]))]
        p, q = _closest_pair(centroids, alive)
        if sse[i] >= merged_sse(X, labels, p, q):
            alive.remove(i)
            removed.append(i)
        else:
            break
    return np.asarray(alive, dtype=np.int64), removed


def _farthest_own_point(X: np.ndarray, labels: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """``r'_i = max_{x in D_i} ||x - c_i||`` (0 for an empty cluster)."""
    dist = np.sqrt(((X - centroids[labels]) ** 2).sum(axis=1))
    out = np.zeros(len(centroids))
    np.maximum.at(out, labels, dist)
    return out


def empirical_radii(
    X: np.ndarray, labels: np.ndarray, centroids: np.ndarray, kept: np.ndarray
) -> np.ndarray:
    """RadiusAssign, empirical (Algorithm 4): ``r_i = min(r'_i, d_nn(i) / 2)``.

    ``r'_i`` is the distance from ``c_i`` to its farthest own point and ``d_nn(i)`` the
    distance to the nearest *other kept* centroid of the same client (``inf`` when ``c_i``
    is alone).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Local data.
    labels : numpy.ndarray of shape (n,)
        Partition.
    centroids : numpy.ndarray of shape (k, d)
        All local centroids.
    kept : numpy.ndarray of int
        Indices that survived :func:`eliminate_one_fit_many`.

    Returns
    -------
    numpy.ndarray of shape (len(kept),)
        The radii of the kept centroids, in the order of ``kept``.
    """
    from scipy.spatial.distance import pdist, squareform

    r1 = _farthest_own_point(X, labels, centroids)[kept]
    if len(kept) < 2:
        return r1
    dist = squareform(pdist(centroids[kept]))
    np.fill_diagonal(dist, np.inf)
    return np.minimum(r1, dist.min(axis=1) / 2)


def theoretical_radii(
    X: np.ndarray, labels: np.ndarray, centroids: np.ndarray, kept: np.ndarray
) -> np.ndarray:
    """RadiusAssign, theoretical (Algorithm 3): one radius ``Δ~_min / 2`` per client.

    In index order, skipping removed ones, each centroid ``i`` of a copy ``C~`` finds its
    nearest neighbour ``j`` in the current ``C~``; if their balls (radii ``r'``) overlap,
    both leave ``C~`` (a many-fit-one pair). ``Δ~_min`` is the smallest pairwise distance
    left in ``C~``. When fewer than two remain, the fallback (an implementation choice;
    Algorithm 3 leaves it open) is half the smallest pairwise distance of all kept
    centroids, and for a lone centroid ``r'``.

    Parameters
    ----------
    X, labels, centroids, kept
        As in :func:`empirical_radii`.

    Returns
    -------
    numpy.ndarray of shape (len(kept),)
        The same radius for every kept centroid.
    """
    from scipy.spatial.distance import pdist, squareform

    r1 = _farthest_own_point(X, labels, centroids)[kept]
    if len(kept) < 2:
        return r1
    dist = squareform(pdist(centroids[kept]))
    np.fill_diagonal(dist, np.inf)
    present = np.ones(len(kept), dtype=bool)
    for i in range(len(kept)):
        if not present[i]:
            continue
        row = np.where(present, dist[i], np.inf)
        if not np.isfinite(row).any():
            continue
        j = int(np.argmin(row))
        if r1[i] + r1[j] > dist[i, j]:
            present[i] = present[j] = False
    rest = np.flatnonzero(present)
    if len(rest) >= 2:
        radius = dist[np.ix_(rest, rest)].min() / 2
    else:
        radius = dist.min() / 2
    return np.full(len(kept), radius)


def feca_client(
    X: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    std_mode: str = "rms",
    radius: str = "empirical",
    eliminate: bool = True,
    privacy_threshold: int = 2,
    init: str = "k-means++",
    n_init: int = 1,
    max_iter: int = 300,
) -> FeCAClientResult:
    """The FeCA client step: Lloyd, ClientUpdate (Alg. 2), RadiusAssign (Alg. 4 or 3).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Local data; it never leaves the client.
    k : int
        Local number of clusters ``k'`` (``= k`` in the paper's main experiments); a
        client with fewer points runs ``min(k, n)`` (an implementation choice).
    rng : numpy.random.Generator
        The client's generator (one draw seeds the k-means).
    std_mode : {"rms", "dist_std"}, default "rms"
        The spread that picks the one-fit-many candidate (Sec. 4.1).
    radius : {"empirical", "theoretical"}, default "empirical"
        Algorithm 4 (every experiment of the paper) or Algorithm 3 (its theory).
    eliminate : bool, default True
        ``False`` skips the elimination (the ablation of the paper's Table 5).
    privacy_threshold : int, default 2
        Kept centroids of fewer points are not uploaded.
    init, n_init, max_iter
        Of the local k-means (single start by default; the paper gives no settings).

    Returns
    -------
    FeCAClientResult
        The upload and the local bookkeeping.

    Raises
    ------
    ValueError
        On NaN/inf or non-2-D data, empty data, ``k < 1``, or an unknown mode.
    """
    X = check_data(X)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(X) == 0:
        raise ValueError("FeCA client data is empty")
    if radius not in RADIUS_MODES:
        raise ValueError(f"radius must be one of {RADIUS_MODES}, got {radius!r}")
    if std_mode not in STD_MODES:
        raise ValueError(f"std_mode must be one of {STD_MODES}, got {std_mode!r}")
    k_eff = min(int(k), len(X))
    _, raw_labels = local_kmeans(X, k_eff, rng, init=init, n_init=n_init, max_iter=max_iter)
    centroids, counts, labels = _partition_means(X, raw_labels, k_eff)
    if eliminate:
        kept, removed = eliminate_one_fit_many(X, labels, centroids, std_mode=std_mode)
    else:
        kept, removed = np.arange(len(centroids), dtype=np.int64), []
    assign = empirical_radii if radius == "empirical" else theoretical_radii
    radii = assign(X, labels, centroids, kept)
    send = counts[kept] >= privacy_threshold
    upload = FeCAUpload(centroids[kept][send], radii[send])
    return FeCAClientResult(upload, centroids, counts, kept, removed, kept[~send])


def check_feca_upload(upload: FeCAUpload, *, n_features: int | None, k: int) -> FeCAUpload:
    """Validate an upload received from a client (server side).

    Parameters
    ----------
    upload : FeCAUpload
        The payload.
    n_features : int or None
        Expected dimension (``None``: not known yet).
    k : int
        At most this many centroids may arrive (the local ``k'``).

    Returns
    -------
    FeCAUpload
        The same upload as float64 arrays.

    Raises
    ------
    ValueError
        Naming what is malformed: shapes, too many centroids, non-finite values,
        negative radii.
    """
    C = np.asarray(upload.centroids, dtype=np.float64)
    r = np.asarray(upload.radii, dtype=np.float64)
    if C.ndim != 2:
        raise ValueError(f"centroids must be 2-D (k_m, d), got shape {C.shape}")
    if r.shape != (len(C),):
        raise ValueError(f"radii have shape {r.shape}, expected ({len(C)},) to match centroids")
    if len(C) > k:
        raise ValueError(f"{len(C)} centroids sent, more than k'={k}")
    if n_features is not None and len(C) and C.shape[1] != n_features:
        raise ValueError(f"centroids have {C.shape[1]} features, expected {n_features}")
    if not (np.isfinite(C).all() and np.isfinite(r).all()):
        raise ValueError("centroids or radii contain NaN or inf")
    if (r < 0).any():
        raise ValueError("radii must be non-negative")
    return FeCAUpload(C, r)


@dataclass
class FeCAServerResult:
    """The server's output and how it got there.

    Attributes
    ----------
    centroids : numpy.ndarray of shape (k_out, d)
        ``C*``, ``k_out <= k`` (fewer when fewer than ``k`` groups formed).
    groups : list of numpy.ndarray
        Every group (indices into the concatenated uploads), in formation order.
    selected : list of int
        Indices into ``groups`` of the output centroids, in output order (largest group
        first; equal sizes in formation order).
    seeds : list of int
        The centroid (index into the concatenated uploads) that formed each group.
    radii : numpy.ndarray
        The concatenated radii (so ``radii[seeds[j]]`` is group ``j``'s ball radius).
    """

    centroids: np.ndarray
    groups: list[np.ndarray]
    selected: list[int]
    seeds: list[int] = field(default_factory=list)
    radii: np.ndarray | None = None

    @property
    def group_sizes(self) -> list[int]:
        """Sizes of all groups, in formation order."""
        return [len(g) for g in self.groups]


def feca_server(uploads: Sequence[FeCAUpload], k: int) -> FeCAServerResult:
    """ServerAggregation (Algorithm 5): greedy ball grouping, top-``k`` groups, means.

    Repeatedly the remaining centroid of largest radius ``r_i`` (ties: first in client-id
    then upload order) takes every remaining centroid within ``||c_t - c_i|| <= r_i``
    (itself included) as a group. The ``k`` groups with the most members are kept (a
    stable sort: among equal sizes the earlier group wins) and each becomes the
    unweighted mean of its members.

    Parameters
    ----------
    uploads : sequence of FeCAUpload
        In client-id order.
    k : int
        Number of output centroids wanted.

    Returns
    -------
    FeCAServerResult
        ``C*`` of shape ``(min(k, groups), d)``.

    Raises
    ------
    ValueError
        If no centroid was received or ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    nonempty = [u for u in uploads if len(u.centroids)]
    if not nonempty:
        raise ValueError("no client uploaded any centroid")
    C = np.concatenate([u.centroids for u in nonempty]).astype(np.float64)
    r = np.concatenate([u.radii for u in nonempty]).astype(np.float64)
    remaining = np.ones(len(C), dtype=bool)
    groups: list[np.ndarray] = []
    seeds: list[int] = []
    # Stable order of decreasing radius: ties keep client-id, then upload order.
    order = np.argsort(-r, kind="stable")
    for i in order:
        if not remaining[i]:
            continue
        dist = np.sqrt(((C - C[i]) ** 2).sum(axis=1))
        members = np.flatnonzero(remaining & (dist <= r[i]))
        remaining[members] = False
        groups.append(members)
        seeds.append(int(i))
    sizes = np.array([len(g) for g in groups])
    selected = [int(j) for j in np.argsort(-sizes, kind="stable")[:k]]
    centroids = np.stack([C[groups[j]].mean(axis=0) for j in selected])
    return FeCAServerResult(centroids, groups, selected, seeds, r)


@dataclass
class FeCAResult:
    """Outcome of :func:`run_feca`.

    Attributes
    ----------
    centroids : numpy.ndarray of shape (k_out, d)
        ``C*``.
    server : FeCAServerResult
        Grouping details.
    clients : list of FeCAClientResult
        Per-client uploads and bookkeeping, in client-id order.
    """

    centroids: np.ndarray
    server: FeCAServerResult
    clients: list[FeCAClientResult] = field(default_factory=list)


def run_feca(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    k_local: int | None = None,
    seed: int = 0,
    **client_opts,
) -> FeCAResult:
    """Run FeCA (Algorithm 1) on in-memory client arrays: the reference loop.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Client data in client-id order.
    k : int
        Number of output centroids.
    k_local : int, optional
        ``k'``, clusters of each client's Lloyd run; defaults to ``k``.
    seed : int, default 0
        Client ``i`` uses :func:`~flwr_clustering.algorithms.lloyd.client_rng(seed, i)`.
    **client_opts
        Keyword arguments of :func:`feca_client` (``std_mode``, ``radius``,
        ``eliminate``, ``privacy_threshold``, ``init``, ``n_init``, ``max_iter``).

    Returns
    -------
    FeCAResult
        ``C*`` and the details.
    """
    k_local = k if k_local is None else int(k_local)
    results = [
        feca_client(X, k_local, client_rng(seed, i), **client_opts)
        for i, X in enumerate(clients)
    ]
    server = feca_server([r.upload for r in results], k)
    return FeCAResult(server.centroids, server, results)


@dataclass(frozen=True)
class FeCAOptions(Options):
    """Options of FeCA (Xu et al. 2024, Algorithms 1-4): run-config keys, message config."""

    k: int = option(16, minimum=1, help="number of global clusters")
    k_local: int = option(0, minimum=0, help="k', the clients' clusters (0: the same as k)")
    std_mode: str = option("rms", choices=STD_MODES, help="the spread that picks the "
                           "one-fit-many candidate")
    radius: str = option("empirical", choices=RADIUS_MODES, help="Algorithm 4 (empirical) or "
                         "3 (theoretical) radii")
    eliminate: bool = option(True, help="the elimination step (false: the paper's ablation)")
    privacy_threshold: int = option(2, minimum=0, help="centroids of fewer points are not "
                                    "sent")
    init: str = option("k-means++", key="local-init", choices=("k-means++", "random"),
                       help="the clients' k-means seeding")
    n_init: int = option(0, auto=1, minimum=1, help="the clients' k-means restarts (0: the "
                         "algorithm's default)")

    def validate(self) -> None:
        """``k_local = 0`` means ``k``."""
        if self.k_local == 0:
            object.__setattr__(self, "k_local", self.k)
