"""FKM: federated k-means of Garst & Reinders (Sec. 2, Algorithm 1).

Protocol, per round: every client uploads its local centroids and their sizes (clusters
smaller than the privacy threshold ``privacy_threshold`` are withheld); the server runs a
count-weighted k-means with ``K_g`` clusters over all received centroids (Eq. 1) and
broadcasts the ``K_g`` global centroids; every client keeps the global centroids that
attract at least one of its points, runs ``L`` Lloyd steps from them and uploads again.

This module holds the client step, the server step and a pure-NumPy loop
(:func:`run_fkm`) that the Flower strategy must match bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..options import Options, option
from .dp_lloyd import ACCOUNTANTS
from .lloyd import (
    FLOAT_DTYPES,
    check_data,
    client_rng,
    lloyd_step,
    matched_shift,
    nearest_labels,
    nearest_labels_unchecked,
    seed_from,
    weighted_kmeans,
)
from .local_centroids import LocalCentroids

__all__ = [
    "as_run_dtype",
    "dense_totals",
    "lloyd_from_totals",
    "moment_init",
    "FKMOptions",
    "FKMResult",
    "fkm_client_init",
    "fkm_client_update",
    "fkm_server_aggregate",
    "trimmed_lloyd",
    "run_fkm",
]

INIT_MODES = ("private", "paper")
SERVER_UPDATES = ("kmeans", "lloyd")


def _filtered(means, part_counts, counts, index, privacy_threshold,
              dtype=np.float64) -> LocalCentroids:
    keep = (part_counts >= privacy_threshold) & (counts >= privacy_threshold)
    return LocalCentroids(
        np.ascontiguousarray(means[keep], dtype=dtype),
        counts[keep].astype(np.int64),
        index[keep].astype(np.int64),
    )


def _local_lloyd(
    X, C, index, privacy_threshold, local_iters, recount, labels=None
) -> LocalCentroids:
    part_counts = np.zeros(len(C), dtype=np.int64)
    for _ in range(local_iters):
        C, part_counts, _ = lloyd_step(X, C, labels)
        labels = None
    counts = part_counts
    if recount:
        # scikit-learn semantics used by the paper's code: a final E-step, so the counts
        # are of the points nearest to the NEW means (Algorithm 1 line 17 as their code runs it).
        counts = np.bincount(nearest_labels(X, C), minlength=len(C)).astype(np.int64)
    # the means leave the client in the data's type (float32 data: float32 means)
    return _filtered(C, part_counts, counts, index, privacy_threshold, X.dtype)


def fkm_client_init(
    X: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    privacy_threshold: int = 2,
    init: str = "private",
    local_iters: int = 1,
    recount: bool = False,
) -> LocalCentroids:
    """Round-0 client step: k-means++ seeding of ``min(n_i, K_g)`` local clusters.

    Parameters
    ----------
    X : numpy.ndarray of shape (n_i, d)
        The client's data; float32 data is computed in and uploaded as float32 (the
        sums of the Lloyd steps in float64), anything else as float64.
    k : int
        ``K_g``, the global number of clusters.
    rng : numpy.random.Generator
        The client's generator (see :func:`~flwr_clustering.algorithms.lloyd.client_rng`).
    privacy_threshold : int, default 2
        Clusters with fewer than ``privacy_threshold`` points are withheld.
    init : {"private", "paper"}
        ``"private"`` (default) runs ``max(1, local_iters)`` Lloyd steps from the seeds
        before uploading, so only means of ``>= privacy_threshold`` points leave the client.
        ``"paper"`` uploads the k-means++ seeds themselves, as the paper's code does:
        **these are raw data rows**.
    local_iters : int, default 1
        Lloyd steps in private mode.
    recount : bool, default False
        Count points nearest to the new means (the paper's scikit-learn semantics)
        instead of the partition that produced them; in both cases a centroid is only
        uploaded when the partition behind it has at least ``privacy_threshold`` points.

    Returns
    -------
    LocalCentroids
        The upload (``index`` is all ``-1``).
    """
    from sklearn.cluster import kmeans_plusplus

    X = check_data(X, dtype=None)
    if init not in INIT_MODES:
        raise ValueError(f"init must be one of {INIT_MODES}, got {init!r}")
    k_i = min(len(X), k)
    if k_i == 0:
        d = X.shape[1]
        return LocalCentroids(np.zeros((0, d), X.dtype), np.zeros(0, np.int64),
                              np.zeros(0, np.int64))
    seeds, _ = kmeans_plusplus(X, k_i, random_state=seed_from(rng))
    index = np.full(k_i, -1, dtype=np.int64)
    if init == "paper":
        counts = np.bincount(nearest_labels(X, seeds), minlength=k_i).astype(np.int64)
        return _filtered(seeds, counts, counts, index, privacy_threshold, X.dtype)
    return _local_lloyd(X, seeds, index, privacy_threshold, max(1, local_iters), recount)


def fkm_client_update(
    X: np.ndarray,
    global_centroids: np.ndarray,
    *,
    privacy_threshold: int = 2,
    local_iters: int = 1,
    recount: bool = False,
) -> LocalCentroids:
    """Client step of rounds ``r >= 1`` (Algorithm 1, lines 13-19).

    Assign the local points to the global centroids, drop the global centroids that
    attract no local point, run ``local_iters`` Lloyd steps from the survivors, apply the
    privacy filter.

    Parameters
    ----------
    X : numpy.ndarray of shape (n_i, d)
        The client's data (float32 data: computed in and uploaded as float32).
    global_centroids : numpy.ndarray of shape (K, d)
        The broadcast ``C_g``.
    privacy_threshold, local_iters, recount
        As in :func:`fkm_client_init` (``local_iters`` may be 0: then the upload is the
        surviving global centroids with their local counts, i.e. only evaluation).

    Returns
    -------
    LocalCentroids
        The upload; ``index`` names the global centroid each local one started from.
    """
    C = check_data(global_centroids, name="global centroids")
    X = check_data(X, n_features=C.shape[1], dtype=None)
    if len(X) == 0:
        d = C.shape[1]
        return LocalCentroids(np.zeros((0, d), X.dtype), np.zeros(0, np.int64),
                              np.zeros(0, np.int64))
    labels = nearest_labels_unchecked(X, C)  # both checked above
    present = np.flatnonzero(np.bincount(labels, minlength=len(C)))
    if local_iters == 0:
        counts = np.bincount(labels, minlength=len(C))[present].astype(np.int64)
        return _filtered(C[present], counts, counts, present, privacy_threshold, X.dtype)
    # Dropping centroids that attract no point changes no row's nearest centroid (cdist
    # values are per pair, ties still go to the lowest index), so the first local step
    # reuses this assignment, renumbered, instead of computing the distances again.
    renumber = np.zeros(len(C), dtype=np.int64)
    renumber[present] = np.arange(len(present))
    return _local_lloyd(
        X, C[present], present.astype(np.int64), privacy_threshold, local_iters, recount,
        renumber[labels],
    )


def dense_totals(upload: LocalCentroids, k: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """An upload as per-global-centroid sums ``(k, d)`` and counts ``(k,)``, float64.

    What a client of federated Lloyd (``server_update='lloyd'``) sends under secure
    aggregation, where only the federation's totals reach the server: the sum of the rows
    behind each local mean (``mean * count``) at its ``index``, zero elsewhere.
    """
    sums = np.zeros((int(k), int(d)), dtype=np.float64)
    counts = np.zeros(int(k), dtype=np.float64)
    index = np.asarray(upload.index, dtype=np.int64)
    if len(index):
        sums[index] = np.asarray(upload.means, dtype=np.float64) * np.asarray(
            upload.counts, dtype=np.float64)[:, None]
        counts[index] = upload.counts
    return sums, counts


def lloyd_from_totals(sums: np.ndarray, counts: np.ndarray,
                      previous: np.ndarray) -> np.ndarray:
    """Federated Lloyd's server step from the totals: ``sum / count`` where ``count > 0``.

    A global centroid no client kept stays where it was, as in
    :func:`fkm_server_aggregate` with ``update='lloyd'``, whose count-weighted mean of the
    local means is the same quotient (up to float rounding).
    """
    new = np.array(previous, dtype=np.float64, copy=True)
    counts = np.asarray(counts, dtype=np.float64)
    ok = counts > 0
    new[ok] = np.asarray(sums, dtype=np.float64)[ok] / counts[ok, None]
    return new


def moment_init(n: float, sum_x: np.ndarray, sum_sq: np.ndarray, k: int,
                rng: np.random.Generator) -> np.ndarray:
    """``k`` starting centroids from the federation's rows, sum and sum of squares.

    FFCM's data-scaled random start (:func:`~flwr_clustering.algorithms.ffcm.pooled_mean_std`,
    :func:`~flwr_clustering.algorithms.ffcm.ffcm_random_init`: uniform in the pooled mean
    plus or minus 2 std of every feature). It uses only totals, so it runs under secure
    aggregation. A start without any row's position; it lacks k-means++'s spread, so Lloyd
    may end in a poorer local optimum than FKM's default start (the diagnostics then say so).
    """
    from .ffcm import ffcm_random_init, pooled_mean_std

    if not n > 0:
        raise ValueError("no rows to draw starting centroids from (the totals hold 0 rows)")
    mean, std = pooled_mean_std([(int(n), np.asarray(sum_x, dtype=np.float64),
                                  np.asarray(sum_sq, dtype=np.float64))])
    return ffcm_random_init(mean, std, int(k), rng)


def fkm_server_aggregate(
    uploads: Sequence[LocalCentroids],
    k: int,
    rng: np.random.Generator,
    *,
    seeding: str = "weighted",
    update: str = "kmeans",
    previous: np.ndarray | None = None,
    n_init: int = 10,
    trim: float = 0.0,
) -> np.ndarray:
    """Server step: global centroids from all clients' local centroids.

    Parameters
    ----------
    uploads : sequence of LocalCentroids
        In a fixed order (sorted by client id): the order changes the k-means++ draws.
    k : int
        ``K_g``.
    rng : numpy.random.Generator
        The server's generator (one or ``n_init`` draws per call).
    seeding : {"weighted", "unweighted"}
        k-means++ seeding of the server k-means (see
        :func:`~flwr_clustering.algorithms.lloyd.weighted_kmeans`).
    update : {"kmeans", "lloyd"}
        ``"kmeans"`` is the paper (Eq. 1): weighted k-means over the ``M`` local
        centroids, re-seeded every round. ``"lloyd"`` is federated Lloyd: the new global
        centroid ``j`` is the count-weighted mean of the local centroids that grew from
        ``previous[j]`` (needs ``previous`` and the ``index`` of each upload); a global
        centroid no client kept stays where it was. With ``privacy_threshold = 0`` and every
        client this
        is exactly one centralized Lloyd step.
    previous : numpy.ndarray of shape (k, d), optional
        ``C_g`` of the previous round (required by ``"lloyd"``).
    n_init : int, default 10
        Restarts of the server k-means.
    trim : float in [0, 0.5], default 0
        ``"lloyd"`` only: the robust combination (:func:`trimmed_lloyd`); 0 is the
        count-weighted mean.

    Returns
    -------
    numpy.ndarray of shape (k', d)
        The global centroids; ``k' = k`` unless only ``M <= k`` local centroids were
        received, in which case the ``M`` local centroids are returned unchanged
        (an implementation choice; the paper leaves ``M <= K_g`` open, Algorithm 1 line 10).

    Raises
    ------
    ValueError
        If no client uploaded any centroid.
    """
    if update not in SERVER_UPDATES:
        raise ValueError(f"update must be one of {SERVER_UPDATES}, got {update!r}")
    uploads = [u for u in uploads if len(u.means)]
    if not uploads:
        raise ValueError(
            "no client uploaded any centroid (every local cluster was below the privacy "
            "threshold or every client failed)"
        )
    # the server computes in float64 whatever the clients sent (float32 means: exactly)
    means = np.concatenate([np.asarray(u.means, dtype=np.float64) for u in uploads])
    counts = np.concatenate([u.counts for u in uploads]).astype(np.float64)
    if update == "lloyd":
        if previous is None:
            raise ValueError("the 'lloyd' server update needs the previous global centroids")
        index = np.concatenate([u.index for u in uploads])
        if (index < 0).any():
            raise ValueError("the 'lloyd' server update needs uploads indexed by global centroid")
        if trim > 0:
            return trimmed_lloyd(uploads, previous, trim)
        new = np.array(previous, dtype=np.float64, copy=True)
        weight = np.bincount(index, weights=counts, minlength=len(new))
        sums = np.zeros_like(new)
        np.add.at(sums, index, means * counts[:, None])
        hit = weight > 0
        new[hit] = sums[hit] / weight[hit, None]
        return new
    if len(means) <= k:
        return means
    return weighted_kmeans(means, counts, k, rng, seeding=seeding, n_init=n_init)


def trimmed_lloyd(uploads: Sequence[LocalCentroids], previous: np.ndarray,
                  trim: float) -> np.ndarray:
    """Federated Lloyd's server step, robust to a few clients' means (coordinate-wise trim).

    For each global centroid ``j`` and feature, the ``n_j`` clients whose local means grew
    from ``j`` are ranked by their value; the ``t = min(floor(trim * n_j), (n_j - 1) // 2)``
    lowest and highest are set aside and the rest averaged by their counts. ``trim=0.5`` is
    the coordinate-wise median (the middle one or two). Each client has one vote whatever
    the counts it claims, so with at most ``t`` lying clients at ``j`` every coordinate of
    the new centroid lies between the smallest and the largest honest value (Yin et al.
    2018, coordinate-wise trimmed mean). The price: clients whose honest means are
    extreme (non-IID sites) are set aside too, so an honest run moves less exactly than
    federated Lloyd; a global centroid that fewer than three clients feed is their
    count-weighted mean, untrimmed.

    Parameters
    ----------
    uploads : sequence of LocalCentroids
        Indexed by global centroid (at most one local mean per client and index).
    previous : numpy.ndarray of shape (k, d)
        The global centroids the local means grew from (kept where no client has a mean
        of at least one row).
    trim : float in (0, 0.5]
        The fraction of the clients set aside at each end.
    """
    if not 0 < trim <= 0.5:
        raise ValueError(f"trim must lie in (0, 0.5], got {trim}")
    new = np.array(previous, dtype=np.float64, copy=True)
    means = np.concatenate([np.asarray(u.means, dtype=np.float64) for u in uploads])
    counts = np.concatenate([u.counts for u in uploads]).astype(np.float64)
    index = np.concatenate([u.index for u in uploads])
    sent = counts > 0  # privacy-threshold 0 sends empty clusters: no vote, no weight
    for j in np.unique(index[sent]):
        at = (index == j) & sent
        V, c = means[at], counts[at]
        n = len(V)
        t = min(int(np.floor(trim * n)), (n - 1) // 2)
        if t == 0:
            new[j] = c @ V / c.sum()
            continue
        rank = np.argsort(np.argsort(V, axis=0, kind="stable"), axis=0, kind="stable")
        w = np.where((rank >= t) & (rank < n - t), c[:, None], 0.0)
        new[j] = (w * V).sum(axis=0) / w.sum(axis=0)
    return new


def as_run_dtype(A: np.ndarray, dtype: str) -> np.ndarray:
    """``A`` in the run's type: ``"float32"`` rounds to float32, ``"float64"`` to float64.

    FKM's ``dtype`` option. The server rounds every new ``C_g`` with it, so that what it
    broadcasts, checkpoints and compares (the shift) is what the clients compute with.
    """
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {dtype!r}")
    return np.asarray(A, dtype=dtype)


@dataclass
class FKMResult:
    """Outcome of :func:`run_fkm`.

    Attributes
    ----------
    centroids : numpy.ndarray
        ``C_g`` after the last aggregation.
    history : list of numpy.ndarray
        ``C_g`` after every aggregation (``history[r - 1]`` is round ``r``).
    shifts : list of float
        Hungarian-matched shift of every round against the previous one.
    uploads : list of int
        Number of local centroids ``M`` received in every round.
    converged : bool
        Whether the run stopped on ``tol`` rather than on ``max_rounds``.
    """

    centroids: np.ndarray
    history: list[np.ndarray] = field(default_factory=list)
    shifts: list[float] = field(default_factory=list)
    uploads: list[int] = field(default_factory=list)
    converged: bool = False


def run_fkm(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    seed: int = 0,
    max_rounds: int = 20,
    tol: float = 1e-6,
    privacy_threshold: int = 2,
    local_iters: int = 1,
    init: str = "private",
    recount: bool = False,
    seeding: str = "weighted",
    update: str = "kmeans",
    n_init: int = 10,
    initial_centroids: np.ndarray | None = None,
    dtype: str = "float64",
    trim: float = 0.0,
) -> FKMResult:
    """Run FKM on in-memory client arrays, with no Flower (the reference loop).

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        ``X_i`` of every client, in client-id order.
    k : int
        ``K_g``.
    seed : int, default 0
        Seeds the server generator ``default_rng(seed)`` and client ``i``'s generator
        :func:`client_rng(seed, i) <flwr_clustering.algorithms.lloyd.client_rng>`.
    max_rounds : int, default 20
        Number of aggregations ``R`` at most.
    tol : float, default 1e-6
        Stop when the Hungarian-matched shift of ``C_g`` falls to ``tol`` or below
        (``tol < 0`` disables the test).
    privacy_threshold, local_iters, init, recount
        Client options (:func:`fkm_client_init`, :func:`fkm_client_update`).
    seeding, update, n_init, trim
        Server options (:func:`fkm_server_aggregate`).
    initial_centroids : numpy.ndarray of shape (k, d), optional
        A shared starting ``C_g``; then round 1 is a client update from it instead of
        the client-side k-means++ initialisation.
    dtype : {"float64", "float32"}, default "float64"
        The type the clients compute in and send (:func:`as_run_dtype`): with
        ``"float32"`` every client's rows and every broadcast ``C_g`` are float32 (the
        server's k-means runs in float64, its result is rounded to float32).

    Returns
    -------
    FKMResult
        Final and per-round global centroids.
    """
    server_rng = np.random.default_rng(seed)
    client_opts = dict(
        privacy_threshold=privacy_threshold, local_iters=local_iters, recount=recount
    )
    clients = [as_run_dtype(X, dtype) for X in clients]
    previous = (None if initial_centroids is None
                else as_run_dtype(np.asarray(initial_centroids, float), dtype))
    if previous is None:
        uploads = [
            fkm_client_init(X, k, client_rng(seed, i), init=init, **client_opts)
            for i, X in enumerate(clients)
        ]
    else:
        uploads = [fkm_client_update(X, previous, **client_opts) for X in clients]
    result = FKMResult(centroids=previous)
    for _ in range(max_rounds):
        server_update = update if previous is not None else "kmeans"
        new = fkm_server_aggregate(
            uploads, k, server_rng, seeding=seeding, update=server_update, previous=previous,
            n_init=n_init, trim=trim,
        )
        new = as_run_dtype(new, dtype)
        shift = matched_shift(previous, new)
        result.history.append(new)
        result.shifts.append(shift)
        result.uploads.append(sum(len(u.means) for u in uploads))
        result.centroids, previous = new, new
        if shift <= tol:
            result.converged = True
            break
        if len(result.history) < max_rounds:
            uploads = [fkm_client_update(X, new, **client_opts) for X in clients]
    return result



def _dp_run(run_config: Mapping[str, Any]) -> bool:
    """Whether a run config asks for differential privacy (its DP keys matter then)."""
    return float(run_config.get("dp-epsilon", 0) or 0) > 0

@dataclass(frozen=True)
class FKMOptions(Options):
    """Options of FKM (Garst & Reinders, Algorithm 1): run-config keys and message config."""

    k: int = option(16, minimum=1, help="number of global clusters K_g")
    privacy_threshold: int = option(2, minimum=0, help="clusters of fewer points are "
                                    "never sent")
    local_iterations: int = option(0, auto=1, minimum=0, help="Lloyd steps per round on "
                                   "each client (0: the algorithm's default)")
    server_seeding: str = option("weighted", choices=("weighted", "unweighted"),
                                 help="k-means++ seeding of the server k-means")
    init: str = option("private", choices=INIT_MODES, help="round-0 upload: 'private' "
                       "means after a Lloyd step, 'paper' the k-means++ seeds (raw rows)")
    server_update: str = option("kmeans", choices=SERVER_UPDATES, help="server step: the "
                                "paper's k-means (Eq. 1) or 'lloyd' (exact federated Lloyd)")
    robust_trim: float = option(0.0, minimum=0.0, maximum=0.5, help="server-update "
                                "'lloyd': set aside this fraction of the clients' means at "
                                "each end, per centroid and feature (0.5: the median; 0: "
                                "the exact count-weighted mean)",
                                when=lambda cfg: cfg.get("server-update") == "lloyd")
    recount: bool = option(False, run_config=False, help="count points nearest to the new "
                           "local means (the paper's scikit-learn semantics)")
    server_n_init: int = option(10, key="server-n-init", minimum=1, run_config=False,
                                help="restarts of the server k-means")
    n_init: int = option(0, auto=1, minimum=1, maximum=100,
                         help="federated starts (scikit-learn's n_init): this many FKM runs "
                         "of different seeds in the messages of one run; the lowest "
                         "federated SSE is kept (0: the algorithm's default, 1)")
    max_rounds: int = option(20, minimum=1, help="round cap")
    tol: float = option(1e-6, help="stop when the Hungarian-matched centroid shift is <= tol "
                        "(negative: never)")
    dp_epsilon: float = option(0.0, minimum=0.0, help="differential privacy: epsilon of the "
                               "released model, start and dp-rounds (0: off; needs "
                               "server-update='lloyd' and data-bound)")
    dp_delta: float = option(1e-5, minimum=0.0, maximum=0.5, help="differential privacy: "
                             "delta", when=_dp_run)
    data_bound: float = option(0.0, minimum=0.0, help="differential privacy: the L2 norm "
                               "every row is clipped to (B)", when=_dp_run)
    dp_placement: str = option("distributed", choices=("distributed", "central"),
                               help="differential privacy: each client adds its share of the "
                               "noise, or the (trusted) server adds it", when=_dp_run)
    dp_init: str = option("moments", choices=("moments", "random"),
                          help="differential privacy: the start, 'moments' (DP moments and "
                          "candidate centres, paid from the budget, no row sent) or "
                          "'random' (uniform in the data ball, free)", when=_dp_run)
    dp_init_share: float = option(0.5, help="differential privacy: the share of the budget "
                                  "dp-init='moments' spends (the rest is split over the "
                                  "dp-rounds Lloyd steps)", when=_dp_run)
    dp_accountant: str = option("pld", choices=ACCOUNTANTS, help="differential privacy: the "
                                "accountant that calibrates the noise, 'pld' (privacy loss "
                                "distribution, exact for the Gaussian) or 'rdp' (Renyi DP, "
                                "about 8 % more noise); privacy.json states both epsilons",
                                when=_dp_run)
    dp_rounds: int = option(2, minimum=1, help="differential privacy: the DP Lloyd steps the "
                            "budget is split over, the run's rounds (max-rounds caps them); "
                            "more rounds only split the budget further", when=_dp_run)
    dtype: str = option("float64", choices=FLOAT_DTYPES, help="the type the clients compute "
                        "in and send: float32 halves their data's memory and the messages")

    def round_cap(self) -> int:
        """The most rounds: with ``dp-epsilon``, ``dp-rounds`` (at most ``max-rounds``).

        Those are the steps the DP budget is split over (server and clients alike, so
        each client's share of the noise is the server's plan); more would only split it
        further.
        """
        if self.dp_epsilon > 0:
            return min(int(self.max_rounds), int(self.dp_rounds))
        return int(self.max_rounds)

    def validate(self) -> None:
        """Differential privacy runs federated Lloyd on clipped rows: it needs both."""
        if self.dp_epsilon > 0 and self.dtype != "float64":
            raise ValueError("dp-epsilon needs dtype='float64' (the noise calibration and "
                             f"clipping are computed in float64), got dtype={self.dtype!r}")
        if self.robust_trim > 0 and self.server_update != "lloyd":
            raise ValueError(f"robust-trim={self.robust_trim} needs server-update='lloyd' "
                             "(each global centroid from the means that grew from it), got "
                             f"server-update={self.server_update!r}")
        if self.robust_trim > 0 and self.dp_epsilon > 0:
            raise ValueError("robust-trim needs each client's means; with dp-epsilon > 0 the "
                             "clients send noisy sums: set robust-trim=0")
        if self.dp_epsilon > 0:
            if self.server_update != "lloyd":
                raise ValueError("dp-epsilon needs server-update='lloyd' (differentially "
                                 "private federated Lloyd: the server uses only sums and "
                                 f"counts), got server-update={self.server_update!r}")
            if not self.data_bound > 0:
                raise ValueError("dp-epsilon needs data-bound > 0: the L2 norm every row is "
                                 "clipped to (the sensitivity of the sums)")
            if not 0 < self.dp_delta < 1:
                raise ValueError(f"dp-delta must lie in (0, 1), got {self.dp_delta}")
            if not 0 < self.dp_init_share < 1:
                raise ValueError("dp-init-share must lie strictly between 0 and 1 (the "
                                 "start's share of the budget), got "
                                 f"{self.dp_init_share}")
