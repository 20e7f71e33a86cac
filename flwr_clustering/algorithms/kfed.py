"""k-FED: one-shot federated clustering of Dennis, Li & Smith (ICML 2021).

The baseline of Garst & Reinders (Sec. 3) and Xu et al. (Sec. 6). Every client runs the
Awasthi-Sheffet local step (projection on the top ``k'`` right singular vectors,
k-means++ seeding, 1:3 distance pruning, Lloyd to convergence) and uploads its ``k'``
local centres once; the server seeds ``K`` centres max-from-set starting from the first
client's centres and runs unweighted k-means over all local centres.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..options import Options, option
from .lloyd import check_data, client_rng, nearest_labels, seed_from
from .local_centroids import LocalCentroids

__all__ = ["awasthi_sheffet", "kfed_client", "kfed_server", "max_from_set_seeds", "run_kfed"]


def awasthi_sheffet(
    X: np.ndarray, k_local: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Awasthi-Sheffet local clustering, as k-FED's reference implementation does it.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Local data.
    k_local : int
        ``k'``, the number of local clusters.
    rng : numpy.random.Generator
        Random source (SVD sketch, k-means++ seeding).

    Returns
    -------
    centres : numpy.ndarray of shape (min(n, k'), d)
        Local centres. When ``n <= k'`` these are the points themselves.
    counts : numpy.ndarray of shape (min(n, k'),), int64
        Points nearest to each centre.
    """
    from scipy.spatial.distance import cdist
    from sklearn.cluster import KMeans, kmeans_plusplus
    from sklearn.utils.extmath import randomized_svd

    n = len(X)
    if n <= k_local:
        return X.copy(), np.ones(n, dtype=np.int64)
    _, _, vt = randomized_svd(X, n_components=k_local, random_state=seed_from(rng))
    V = vt.T  # d x k' (with k' > d only d directions carry data, as in the reference code)
    A = X @ V
    # Plain (non-greedy) D^2 sampling, as the reference implementation does.
    seeds, _ = kmeans_plusplus(A, k_local, random_state=seed_from(rng), n_local_trials=1)
    dist = cdist(seeds, A)  # k' x n
    init = np.empty((k_local, A.shape[1]))
    for r in range(k_local):
        others = np.delete(dist, r, axis=0)
        # S_r: points at least 3 times closer to seed r than to any other seed. The seed
        # itself is always in S_r, so the mean exists.
        in_sr = ~(others < 3 * dist[r]).any(axis=0)
        init[r] = A[in_sr].mean(axis=0)
    km = KMeans(k_local, init=init @ V.T, n_init=1, random_state=seed_from(rng)).fit(X)
    centres = km.cluster_centers_
    counts = np.bincount(nearest_labels(X, centres), minlength=k_local).astype(np.int64)
    return centres, counts


def kfed_client(
    X: np.ndarray, k_local: int, rng: np.random.Generator, *, privacy_threshold: int = 2
) -> LocalCentroids:
    """The k-FED client step: Awasthi-Sheffet, then the privacy filter.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Local data.
    k_local : int
        ``k'`` (the paper's untuned setting uses ``k' = K``).
    rng : numpy.random.Generator
        The client's generator.
    privacy_threshold : int, default 2
        Centres with fewer local points are withheld. The original k-FED has no such
        filter and uploads raw rows when ``n <= k'``; ``privacy_threshold = 1`` restores
        that.

    Returns
    -------
    LocalCentroids
        Centres and counts (``index`` all ``-1``).
    """
    X = check_data(X)
    centres, counts = awasthi_sheffet(X, k_local, rng)
    keep = counts >= privacy_threshold
    return LocalCentroids(centres[keep], counts[keep], np.full(int(keep.sum()), -1, np.int64))


def max_from_set_seeds(first: np.ndarray, rest: np.ndarray, k: int) -> np.ndarray:
    """k-FED's server seeding: start from ``first``, add the farthest point until ``k``.

    Parameters
    ----------
    first : numpy.ndarray of shape (k0, d)
        The first client's centres (assumed to lie in different target clusters).
    rest : numpy.ndarray of shape (m, d)
        All other local centres.
    k : int
        Number of seeds.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        Seeds; ``first`` truncated to ``k`` rows if it has more.
    """
    from scipy.spatial.distance import cdist

    seeds = list(first[:k])
    rest = np.array(rest, copy=True)
    dist = cdist(rest, np.asarray(seeds)).min(axis=1) if len(seeds) else np.full(len(rest), np.inf)
    while len(seeds) < k:
        j = int(np.argmax(dist))
        seeds.append(rest[j])
        dist = np.minimum(dist, np.linalg.norm(rest - rest[j], axis=1))
        dist[j] = -np.inf
    return np.asarray(seeds)


def kfed_server(uploads: Sequence[LocalCentroids], k: int) -> np.ndarray:
    """The k-FED server step: max-from-set seeding, then unweighted k-means.

    Parameters
    ----------
    uploads : sequence of LocalCentroids
        In client-id order; the first non-empty upload provides the initial seeds.
    k : int
        Number of global clusters.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        Global centres (the local centres themselves when at most ``k`` arrived).
    """
    from sklearn.cluster import KMeans

    uploads = [u for u in uploads if len(u.means)]
    if not uploads:
        raise ValueError("no client uploaded any centre")
    L = np.concatenate([u.means for u in uploads])
    if len(L) <= k:
        return L
    init = max_from_set_seeds(uploads[0].means, L[len(uploads[0].means):], k)
    return KMeans(k, init=init, n_init=1).fit(L).cluster_centers_


def run_kfed(
    clients: Sequence[np.ndarray],
    k: int,
    k_local: int | None = None,
    *,
    seed: int = 0,
    privacy_threshold: int = 2,
) -> np.ndarray:
    """Run k-FED on in-memory client arrays (the reference loop for the Flower strategy).

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Client data in client-id order.
    k : int
        Number of global clusters.
    k_local : int, optional
        ``k'``; defaults to ``k`` (the untuned setting of the paper).
    seed : int, default 0
        Client ``i`` uses :func:`~flwr_clustering.algorithms.lloyd.client_rng(seed, i)`.
    privacy_threshold : int, default 2
        As in :func:`kfed_client`.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The global centres.

    Raises
    ------
    ValueError
        If ``k_local * len(clients) < k``.
    """
    k_local = k if k_local is None else k_local
    if k_local * len(clients) < k:
        raise ValueError(f"k-FED needs k' * clients >= k, got {k_local} * {len(clients)} < {k}")
    uploads = [
        kfed_client(X, k_local, client_rng(seed, i), privacy_threshold=privacy_threshold)
        for i, X in enumerate(clients)
    ]
    return kfed_server(uploads, k)


@dataclass(frozen=True)
class KFedOptions(Options):
    """Options of k-FED (Dennis, Li & Smith 2021): run-config keys and message config."""

    k: int = option(16, minimum=1, help="number of global clusters")
    k_local: int = option(0, minimum=0, help="k', local centres per client (0: the same as k)")
    privacy_threshold: int = option(2, minimum=0, help="local centres of fewer points are "
                                    "withheld")

    def validate(self) -> None:
        """``k_local = 0`` means ``k``."""
        if self.k_local == 0:
            object.__setattr__(self, "k_local", self.k)
