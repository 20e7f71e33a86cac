"""M-Avg: one-shot Match Averaging of local k-means centroids (a baseline of Xu et al.).

The FeCA paper (Xu et al. 2024, Sec. 6 "Baselines") describes M-Avg in one sentence: it
"matches different sets of centroids from clients by minimizing their ℓ2-distances and
returns the means of matched centroids". Everything else is a documented choice:

* every client runs single-start Lloyd k-means with ``k`` clusters on its own data
  (:func:`local_kmeans`, the same local step FeCA uses) and uploads its ``k x d``
  centroids once;
* the server takes client 0's centroids as the reference (``reference="first"``) or
  matches every client in turn to the running mean of the clients matched before it
  (``reference="running"``); the matching is a Hungarian assignment
  (:func:`scipy.optimize.linear_sum_assignment`) minimising the summed **Euclidean**
  distance ``sum_j ||r_j - c_{pi(j)}||`` between matched centroids (``metric`` switches
  to squared distances); the matched slots are averaged without weights;
* ``max_iter = 1`` is the one-shot description of the paper; ``max_iter > 1`` re-matches
  every client (client 0 included) to the current mean and re-averages until no
  client's matching changes.

No Flower import here (layer 1 of the architecture).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..options import Options, option
from .lloyd import check_data, client_rng, local_kmeans
from .upload import Claims, centre_claims

__all__ = ["MAvgUpload", "PrivacyWithheld", "check_uploads", "match_to", "mavg_client",
           "mavg_server", "run_mavg"]

REFERENCES = ("first", "running")
METRICS = ("euclidean", "sqeuclidean")


@dataclass
class MAvgUpload:
    """What one M-Avg client uploads: its ``k`` local k-means centroids, nothing else.

    Attributes
    ----------
    centroids : numpy.ndarray of shape (k, d)
        The centroids (no counts: each the mean of at least one of the client's rows).
    """

    centroids: np.ndarray

    def claims(self) -> Claims:
        """Means with no counts, and their dimension (:class:`~.upload.Upload`)."""
        return centre_claims(self.centroids)


def mavg_client(
    X: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    init: str = "k-means++",
    n_init: int = 1,
    max_iter: int = 300,
    tol: float = 1e-4,
    privacy_threshold: int = 2,
) -> np.ndarray:
    """The M-Avg client step: local k-means, upload the ``k`` centroids (once).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's data.
    k : int
        Number of clusters.
    rng : numpy.random.Generator
        The client's generator (see :func:`~flwr_clustering.algorithms.lloyd.client_rng`).
    init, n_init, max_iter, tol
        Options of :func:`local_kmeans`.
    privacy_threshold : int, default 2
        If a local cluster has fewer points, the client refuses: M-Avg needs all ``k``
        centroids, and a one-point centroid is a raw row. ``0`` disables the check (the
        paper's M-Avg has none).

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The local centroids.

    Raises
    ------
    ValueError
        If the client has fewer than ``k`` points (M-Avg matches exactly ``k`` centroids
        per client), a cluster smaller than ``privacy_threshold``, or on bad data (see
        :func:`local_kmeans`).
    """
    X = check_data(X)
    if len(X) < k:
        raise ValueError(
            f"M-Avg needs at least k points per client to upload k centroids, got n={len(X)} "
            f"points for k={k}"
        )
    centroids, labels = local_kmeans(X, k, rng, init=init, n_init=n_init, max_iter=max_iter,
                                     tol=tol)
    smallest = int(np.bincount(labels, minlength=k).min())
    if smallest < privacy_threshold:
        raise PrivacyWithheld(
            f"a local cluster has {smallest} point(s), fewer than the privacy threshold "
            f"{privacy_threshold}; M-Avg would upload it, so the client withholds its reply"
        )
    return centroids


class PrivacyWithheld(ValueError):
    """A client withholds its reply: it would reveal a cluster below the privacy threshold."""


def check_uploads(uploads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Validate M-Avg uploads: a non-empty list of finite ``(k, d)`` arrays, same ``k``, ``d``.

    Parameters
    ----------
    uploads : sequence of numpy.ndarray
        One centroid array per client.

    Returns
    -------
    list of numpy.ndarray
        The uploads as float64 arrays.

    Raises
    ------
    ValueError
        Naming the first malformed upload (not 2-D, no centroid, NaN/inf, or a shape
        different from client 0's).
    """
    if len(uploads) == 0:
        raise ValueError("M-Avg needs at least one client upload, got none")
    out = []
    for i, C in enumerate(uploads):
        C = check_data(C, name=f"client {i} centroids")
        if len(C) == 0:
            raise ValueError(f"client {i} centroids hold no row (k >= 1 required)")
        if out and C.shape != out[0].shape:
            raise ValueError(
                f"client {i} centroids have shape {C.shape} but client 0's have shape "
                f"{out[0].shape}: M-Avg needs the same k and d from every client"
            )
        out.append(C)
    return out


def match_to(reference: np.ndarray, C: np.ndarray, *, metric: str = "euclidean") -> np.ndarray:
    """Order the rows of ``C`` to match ``reference`` (Hungarian assignment).

    Parameters
    ----------
    reference : numpy.ndarray of shape (k, d)
        The target order.
    C : numpy.ndarray of shape (k, d)
        Centroids to reorder.
    metric : {"euclidean", "sqeuclidean"}, default "euclidean"
        Cost of matching ``reference[j]`` with ``C[l]``: ``||reference_j - C_l||`` (the
        paper's "ℓ2-distance") or its square.

    Returns
    -------
    numpy.ndarray of shape (k,), int64
        The permutation ``perm`` minimising ``sum_j cost(reference[j], C[perm[j]])``;
        ``C[perm]`` is ``C`` in the reference's order.
    """
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    cost = cdist(reference, C, metric=metric)
    _, cols = linear_sum_assignment(cost)
    return cols.astype(np.int64)


def mavg_server(
    uploads: Sequence[np.ndarray],
    *,
    reference: str = "first",
    max_iter: int = 1,
    metric: str = "euclidean",
) -> np.ndarray:
    """The M-Avg server step: match every client's centroids, average the matched slots.

    Parameters
    ----------
    uploads : sequence of numpy.ndarray of shape (k, d)
        The clients' centroids in client-id order (the order matters: client 0 is the
        reference, and ``"running"`` matches clients in this order).
    reference : {"first", "running"}, default "first"
        ``"first"``: every client ``i >= 1`` is matched to client 0's centroids.
        ``"running"``: client ``i`` is matched to the mean of the matched centroids of
        clients ``0..i-1``.
    max_iter : int, default 1
        Number of matching passes. ``1`` is the paper's one-shot description. With
        ``max_iter > 1`` every further pass re-matches every client (client 0 included)
        to the current mean and re-averages; it stops early when no client's matching
        changes (the mean is then a fixed point).
    metric : {"euclidean", "sqeuclidean"}, default "euclidean"
        Matching cost (see :func:`match_to`).

    Returns
    -------
    numpy.ndarray of shape (k, d)
        ``(1/M) sum_i C_i[perm_i]``, in the order of client 0's centroids (first pass).

    Raises
    ------
    ValueError
        On malformed uploads (see :func:`check_uploads`) or unknown options.
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    uploads = check_uploads(uploads)
    k = len(uploads[0])
    perms = [np.arange(k, dtype=np.int64)]
    total = uploads[0].copy()
    for i, C in enumerate(uploads[1:], start=1):
        target = uploads[0] if reference == "first" else total / i
        perm = match_to(target, C, metric=metric)
        perms.append(perm)
        total += C[perm]
    mean = total / len(uploads)
    for _ in range(max_iter - 1):
        new_perms = [match_to(mean, C, metric=metric) for C in uploads]
        if all(np.array_equal(a, b) for a, b in zip(new_perms, perms, strict=True)):
            break
        perms = new_perms
        mean = sum(C[p] for C, p in zip(uploads, perms, strict=True)) / len(uploads)
    return mean


def run_mavg(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    seed: int = 0,
    reference: str = "first",
    match_iter: int = 1,
    metric: str = "euclidean",
    init: str = "k-means++",
    n_init: int = 1,
    max_iter: int = 300,
    tol: float = 1e-4,
    privacy_threshold: int = 2,
    min_clients: int = 2,
) -> np.ndarray:
    """Run M-Avg on in-memory client arrays, with no Flower (the reference loop).

    What the Flower run computes at the same options: a client whose k-means leaves a
    cluster below ``privacy_threshold`` withholds its reply, a client with fewer than ``k``
    rows refuses, and the others are matched (with a :class:`RuntimeWarning`), as long as
    ``min_clients`` (the App's ``min-nodes``) remain.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        ``X_i`` of every client, in client-id order.
    k : int
        Number of clusters.
    seed : int, default 0
        Client ``i`` uses :func:`client_rng(seed, i) <flwr_clustering.algorithms.lloyd.client_rng>`.
    reference, metric
        Server options (:func:`mavg_server`).
    match_iter : int, default 1
        ``max_iter`` of :func:`mavg_server` (matching passes).
    init, n_init, max_iter, tol
        Client k-means options (:func:`local_kmeans`).
    privacy_threshold : int, default 2
        As in :func:`mavg_client`: a client with a smaller local cluster withholds its
        reply and is left out.
    min_clients : int, default 2
        Fewest clients whose centroids are matched (the App's ``min-nodes`` default).

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The global centroids.

    Raises
    ------
    ValueError
        If there is no client, a client has bad data, the clients' feature counts differ,
        or fewer than ``min_clients`` clients remain after the privacy threshold and the
        clients with fewer than ``k`` rows are left out (said in those words).
    """
    if len(clients) == 0:
        raise ValueError("M-Avg needs at least one client, got none")
    uploads, withheld, small = [], [], []
    d = None
    for i, X in enumerate(clients):
        X = check_data(X, name=f"client {i} data", n_features=d)
        d = X.shape[1]
        if len(X) < k:  # the App's client refuses (it uploads exactly k centroids)
            small.append(i)
            continue
        try:
            uploads.append(
                mavg_client(X, k, client_rng(seed, i), init=init, n_init=n_init,
                            max_iter=max_iter, tol=tol, privacy_threshold=privacy_threshold)
            )
        except PrivacyWithheld:
            withheld.append(i)
    if withheld:
        warnings.warn(f"M-Avg: client(s) {', '.join(map(str, withheld))} withheld their reply "
                      f"under the privacy threshold ({privacy_threshold})", RuntimeWarning,
                      stacklevel=2)
    if small:
        warnings.warn(f"M-Avg: client(s) {', '.join(map(str, small))} have fewer than k={k} "
                      "rows and are left out (M-Avg uploads exactly k local centroids)",
                      RuntimeWarning, stacklevel=2)
    if len(uploads) < min_clients:
        why = []
        if withheld:
            why.append(f"{len(withheld)} withheld their reply under the privacy threshold (a "
                       f"local cluster of fewer than privacy-threshold={privacy_threshold} "
                       f"points): clients {', '.join(map(str, withheld))}")
        if small:
            why.append(f"{len(small)} have fewer than k={k} rows: clients "
                       f"{', '.join(map(str, small))}")
        raise ValueError(
            f"M-Avg: only {len(uploads)} client(s) sent centroids, fewer than min-nodes="
            f"{min_clients}, because {'; and '.join(why)}; lower privacy-threshold or k")
    return mavg_server(uploads, reference=reference, max_iter=match_iter, metric=metric)


@dataclass(frozen=True)
class MAvgOptions(Options):
    """Options of M-Avg (match averaging, a baseline of Xu et al. 2024)."""

    k: int = option(16, minimum=1, help="number of global clusters")
    reference: str = option("first", key="mavg-reference", choices=REFERENCES,
                            help="match to the lowest client id's centroids or the running "
                            "mean")
    match_iter: int = option(1, minimum=1, run_config=False,
                             help="matching passes over the clients")
    privacy_threshold: int = option(2, minimum=0, help="a client whose k-means has a smaller "
                                    "cluster refuses")
    init: str = option("k-means++", key="local-init", choices=("k-means++", "random"),
                       help="the clients' k-means seeding")
    n_init: int = option(0, auto=1, minimum=1, help="the clients' k-means restarts (0: the "
                         "algorithm's default)")
