"""FFCM: federated fuzzy c-means of Stallmann & Wilbik (arXiv 2201.07316).

A baseline of Xu et al. (Sec. 6).

Protocol, per round: the server broadcasts the global centres ``V`` (``k x d``); every
client runs fuzzy c-means (FCM, fuzzifier ``m``: the paper's 2, or by default chosen from
the dimension, :func:`fuzzifier_from_dimension`) on its own data starting from
``V`` and uploads its local centres ``V^(i)`` and their supports
``s^(i)_j = sum_x u_{xj}``; the server aggregates either by support-weighted averaging
of the centres with the same index (**v1**) or by k-means with ``k`` clusters over all
``M k`` local centres (**v2**).

Sources of the details, since the FeCA paper only names the two versions:

* FCM (Bezdek 1981): memberships ``u_ij = 1 / sum_l (d_ij / d_il)^(2/(m-1))`` and centres
  ``v_j = sum_i u_ij^m x_i / sum_i u_ij^m``, alternated; the objective
  ``J_m = sum_ij u_ij^m d_ij^2`` never increases.
* The authors' code (github.com/stallmo/federated_clustering, ``local_learners.py`` and
  ``global_learner.py``; FCM from stallmo/cluster_library ``fuzzy_cmeans.py``):
  the support is the column sum of the memberships ``u`` (not ``u^m``) of the local
  data to the final local centres; v1 is ``V_j = sum_i s_ij V_ij / sum_i s_ij``; v2
  ("kmeans" update) is scikit-learn ``KMeans(k)`` on the stacked local centres, **not
  weighted** by the supports, seeded with k-means++ in the first round and
  initialised at the previous global centres from the second round on
  (``max_iter=500``); the global initialisation is ``randint(-10, 10, (k, d))``; local
  FCM stops when the Frobenius norm of the change of the membership matrix is below
  ``tol = 1e-4`` (or after ``max_iter = 1000``), the global loop when the Frobenius norm
  of the change of ``V`` is below ``1e-4``.

What this module does differently, and why, is stated where it happens:
:func:`fcm` (stopping rule), :func:`ffcm_random_init` (the initial box is scaled to the
data), :func:`ffcm_server_v1` (centres with no support), :func:`ffcm_server_v2`
(``weighted`` option).

No Flower import here (layer 1 of the architecture).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..options import Options, option
from .lloyd import (
    _threadpool_controller,
    check_data,
    matched_shift,
    seed_from,
    squared_distances,
    squared_distances_unchecked,
)

__all__ = [
    "FFCMResult",
    "check_ffcm_uploads",
    "fcm",
    "fcm_centres",
    "fcm_memberships",
    "fcm_objective",
    "feature_moments",
    "ffcm_client",
    "ffcm_random_init",
    "ffcm_server_v1",
    "ffcm_server_v2",
    "fuzzifier_from_dimension",
    "pooled_mean_std",
    "run_ffcm",
]

CRITERIA = ("centres", "memberships")

#: The paper's fuzzifier (Stallmann & Wilbik, and the FeCA paper's baseline).
PAPER_FUZZIFIER = 2.0
#: Upper bound of the automatic fuzzifier: the paper's value, which is what low-dimensional
#: data get (the rule exceeds 2 below about 6 dimensions).
AUTO_FUZZIFIER_CAP = 2.0


def fuzzifier_from_dimension(d: int, n: int, cap: float = AUTO_FUZZIFIER_CAP) -> float:
    """The fuzzifier ``m`` for ``n`` rows of ``d`` features (Schwämmle & Jensen 2010).

    ``m = 1 + (1418/n + 22.05) d^-2 + (12.33/n + 0.243) d^(-0.0406 ln n - 0.1134)``,
    capped at ``cap``: the largest ``m`` at which fuzzy c-means still finds structure
    rather than pulling every centre to the grand mean (V. Schwämmle and O. N. Jensen,
    "A simple and fast method to determine the parameters for fuzzy c-means cluster
    analysis", Bioinformatics 26(22), 2010; the rule of the Mfuzz package). Fuzzy c-means
    with the paper's ``m = 2`` collapses in higher dimensions: on the 64-feature digits
    (IID over 10 clients) all 10 FFCM centres end as one point (SSE 1.85x k-means'); with
    this rule (``m = 1.05`` there) the SSE is within 1.01x (``docs/quality.md``).

    Parameters
    ----------
    d : int
        Number of features, ``>= 1``.
    n : int
        Number of rows of the federation, ``>= 2``.
    cap : float, default 2.0
        The largest value returned (the paper's ``m``; low-dimensional data get it).

    Returns
    -------
    float
        ``m`` in ``(1, cap]``.

    Raises
    ------
    ValueError
        If ``d < 1`` or ``n < 2``.
    """
    d, n = int(d), int(n)
    if d < 1 or n < 2:
        raise ValueError(f"the fuzzifier rule needs d >= 1 and n >= 2, got d={d}, n={n}")
    m = (1.0 + (1418.0 / n + 22.05) * d ** -2.0
         + (12.33 / n + 0.243) * d ** (-0.0406 * math.log(n) - 0.1134))
    return float(min(m, cap))


def _check_m(m: float) -> float:
    m = float(m)
    if not (np.isfinite(m) and m > 1.0):
        raise ValueError(f"the fuzzifier m must be a finite number > 1, got {m}")
    return m


def fcm_memberships(X: np.ndarray, V: np.ndarray, m: float = 2.0) -> np.ndarray:
    """FCM memberships of every point to every centre (Bezdek's membership update).

    ``u_ij = 1 / sum_l (d_ij / d_il)^(2/(m-1))`` with ``d_ij = ||x_i - v_j||``. Computed
    as ``w_ij / sum_l w_il`` with ``w_ij = (d_ij^2 / min_l d_il^2)^(-1/(m-1))``, which is
    the same quantity scaled so that the nearest centre has ``w = 1``: no overflow, no
    division by zero, whatever the scale of the data. A point that coincides with a
    centre (``d = 0``) gets membership 1 to it and 0 elsewhere (the limit of the
    formula); coincident centres share that membership equally. Every row sums to 1 and
    no NaN is ever produced.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data (may be empty).
    V : numpy.ndarray of shape (k, d)
        Centres, ``k >= 1``.
    m : float, default 2.0
        Fuzzifier, ``m > 1``.

    Returns
    -------
    numpy.ndarray of shape (n, k)
        The membership matrix ``U``.

    Raises
    ------
    ValueError
        On NaN/inf, a feature-count mismatch, no centre, or ``m <= 1``.
    """
    return _memberships(squared_distances(X, V), _check_m(m))


def _memberships(d2: np.ndarray, m: float) -> np.ndarray:
    """:func:`fcm_memberships` from the squared distances (inputs already validated)."""
    U = np.empty_like(d2)
    if d2.size == 0:
        return U
    dmin = d2.min(axis=1)
    hit = dmin == 0.0
    if not hit.any():  # the usual case: the same arithmetic without the row selections
        w = (d2 / dmin[:, None]) ** (-1.0 / (m - 1.0))
        return np.divide(w, w.sum(axis=1, keepdims=True), out=U)
    far = ~hit
    if far.any():
        ratio = d2[far] / dmin[far, None]  # >= 1; exactly 1 at the nearest centre
        w = ratio ** (-1.0 / (m - 1.0))  # in [0, 1]; inf ratio -> 0
        U[far] = w / w.sum(axis=1, keepdims=True)
    if hit.any():
        on = (d2[hit] == 0.0).astype(np.float64)
        U[hit] = on / on.sum(axis=1, keepdims=True)
    return U


def fcm_centres(
    X: np.ndarray, U: np.ndarray, m: float = 2.0, previous: np.ndarray | None = None
) -> np.ndarray:
    """FCM centre update ``v_j = sum_i u_ij^m x_i / sum_i u_ij^m``.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    U : numpy.ndarray of shape (n, k)
        Memberships.
    m : float, default 2.0
        Fuzzifier, ``m > 1``.
    previous : numpy.ndarray of shape (k, d), optional
        Current centres: a centre whose total weight ``sum_i u_ij^m`` is 0 stays where it
        is. Without ``previous`` such a centre is an error.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The new centres.

    Raises
    ------
    ValueError
        If the shapes disagree, or a centre has zero weight and no ``previous``.
    """
    m = _check_m(m)
    X = check_data(X)
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2 or len(U) != len(X):
        raise ValueError(f"memberships must have shape ({len(X)}, k), got {U.shape}")
    if previous is not None:
        previous = np.asarray(previous, dtype=np.float64)
        if previous.shape != (U.shape[1], X.shape[1]):
            raise ValueError(
                f"previous centres must have shape {(U.shape[1], X.shape[1])}, got "
                f"{previous.shape}"
            )
    return _centres(X, U, m, previous)


def _centres(X: np.ndarray, U: np.ndarray, m: float, previous: np.ndarray | None
             ) -> np.ndarray:
    """:func:`fcm_centres` on validated inputs."""
    W = U**m
    den = W.sum(axis=0)
    num = W.T @ X
    zero = den <= 0.0
    if previous is None:
        if zero.any():
            raise ValueError(
                f"centre(s) {np.flatnonzero(zero).tolist()} have zero total membership and no "
                "previous position was given"
            )
        return num / den[:, None]
    if not zero.any():
        return num / den[:, None]
    V = np.array(previous, dtype=np.float64, copy=True)
    V[~zero] = num[~zero] / den[~zero, None]
    return V


def fcm_objective(
    X: np.ndarray, V: np.ndarray, m: float = 2.0, U: np.ndarray | None = None
) -> float:
    """The FCM objective ``J_m(U, V) = sum_ij u_ij^m ||x_i - v_j||^2``.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    V : numpy.ndarray of shape (k, d)
        Centres.
    m : float, default 2.0
        Fuzzifier.
    U : numpy.ndarray of shape (n, k), optional
        Memberships; by default the optimal ones for ``V`` (:func:`fcm_memberships`).

    Returns
    -------
    float
        ``J_m``.
    """
    d2 = squared_distances(X, V)
    if U is None:
        U = fcm_memberships(X, V, m)
    return float(((np.asarray(U, dtype=np.float64) ** _check_m(m)) * d2).sum())


def fcm(
    X: np.ndarray,
    V0: np.ndarray,
    *,
    m: float = 2.0,
    max_iter: int = 100,
    tol: float = 1e-4,
    criterion: str = "centres",
) -> tuple[np.ndarray, np.ndarray, int]:
    """Fuzzy c-means from given centres (alternating optimisation of ``J_m``).

    Starting from ``U = memberships(V0)``, every iteration moves the centres to
    :func:`fcm_centres` of ``U`` (a centre with zero total weight stays) and recomputes
    ``U`` for the new centres, so the returned ``U`` always belongs to the returned
    ``V``. ``J_m`` does not increase from one iteration to the next.

    Stopping rule (``criterion``):

    * ``"centres"`` (default): stop when ``max_j ||v_j^(t) - v_j^(t-1)||_2 <= tol``.
      This is **absolute, in data units**: on data of scale ~1e6 (the S-sets) the
      default ``1e-4`` means "to numerical convergence", and ``max_iter`` is the
      effective cap.
    * ``"memberships"``: the authors' rule, stop when the Frobenius norm of the change
      of ``U`` is ``<= tol`` (they use a strict ``<``). Memberships lie in [0, 1], so
      this is scale-free, but it grows with ``sqrt(n k)``.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data (may be empty: then ``V0`` is returned).
    V0 : numpy.ndarray of shape (k, d)
        Initial centres (for FFCM: the global centres).
    m : float, default 2.0
        Fuzzifier, ``m > 1``.
    max_iter : int, default 100
        At most this many centre updates (``0``: return ``V0`` and its memberships). The
        authors' code allows 1000.
    tol : float, default 1e-4
        Threshold of the stopping rule (the authors' value).
    criterion : {"centres", "memberships"}, default "centres"
        See above.

    Returns
    -------
    V : numpy.ndarray of shape (k, d)
        Final centres.
    U : numpy.ndarray of shape (n, k)
        Memberships of ``X`` to ``V``.
    n_iter : int
        Number of centre updates performed.

    Raises
    ------
    ValueError
        On bad data or options (NaN, feature mismatch, ``m <= 1``, ``max_iter < 0``).
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if max_iter < 0:
        raise ValueError(f"max_iter must be >= 0, got {max_iter}")
    V = check_data(V0, name="initial centres")
    if len(V) == 0:
        raise ValueError("initial centres must hold at least one row (k >= 1)")
    X = check_data(X, n_features=V.shape[1])
    m = _check_m(m)
    # validated once: the loop calls the kernels directly (a 100-row client runs dozens of
    # iterations per round, where the checks cost a third of the time)
    U = _memberships(squared_distances_unchecked(X, V), m)
    n_iter = 0
    while n_iter < max_iter:
        n_iter += 1
        V_new = _centres(X, U, m, V)
        U_new = _memberships(squared_distances_unchecked(X, V_new), m)
        if criterion == "centres":
            change = float(np.sqrt(((V_new - V) ** 2).sum(axis=1)).max())
        else:
            change = float(np.linalg.norm(U_new - U))
        V, U = V_new, U_new
        if change <= tol:
            break
    return V, U, n_iter


def ffcm_client(
    X: np.ndarray,
    V: np.ndarray,
    *,
    m: float = 2.0,
    max_iter: int = 100,
    tol: float = 1e-4,
    criterion: str = "centres",
) -> tuple[np.ndarray, np.ndarray]:
    """The FFCM client step: local FCM from the global centres, upload centres and supports.

    The support of local centre ``j`` is ``s_j = sum_x u_xj``: the column sum of the
    memberships ``u`` (not ``u^m``) of the local data to the final local centres, as in
    the authors' code (``get_center_support``).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's data.
    V : numpy.ndarray of shape (k, d)
        The broadcast global centres.
    m, max_iter, tol, criterion
        Options of :func:`fcm`.

    Returns
    -------
    V_local : numpy.ndarray of shape (k, d)
        The local centres (``V`` itself for a client with no data).
    supports : numpy.ndarray of shape (k,)
        The supports (all 0 for a client with no data).

    Raises
    ------
    ValueError
        On bad data or options.
    """
    V_local, U, _ = fcm(X, V, m=m, max_iter=max_iter, tol=tol, criterion=criterion)
    return V_local, U.sum(axis=0)


def check_ffcm_uploads(
    uploads: Sequence[tuple[np.ndarray, np.ndarray]], *, k: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Validate FFCM uploads and stack them.

    Parameters
    ----------
    uploads : sequence of (numpy.ndarray, numpy.ndarray)
        ``(V_i, s_i)`` per client: centres ``(k, d)`` and supports ``(k,)``.
    k : int, optional
        Required number of centres.

    Returns
    -------
    centres : numpy.ndarray of shape (M, k, d)
        The stacked local centres.
    supports : numpy.ndarray of shape (M, k)
        The stacked supports.

    Raises
    ------
    ValueError
        Naming the first malformed upload: not a pair, wrong shapes, a shape different
        from client 0's, NaN/inf, or a negative support.
    """
    if len(uploads) == 0:
        raise ValueError("FFCM needs at least one client upload, got none")
    centres, supports = [], []
    for i, up in enumerate(uploads):
        if len(up) != 2:
            raise ValueError(
                f"client {i} upload must be a pair (centres, supports), got {len(up)} items"
            )
        V = check_data(up[0], name=f"client {i} centres")
        s = np.asarray(up[1], dtype=np.float64)
        if len(V) == 0:
            raise ValueError(f"client {i} centres hold no row (k >= 1 required)")
        if k is not None and len(V) != k:
            raise ValueError(f"client {i} uploaded {len(V)} centres, expected k={k}")
        if centres and V.shape != centres[0].shape:
            raise ValueError(
                f"client {i} centres have shape {V.shape} but client 0's have shape "
                f"{centres[0].shape}: FFCM needs the same k and d from every client"
            )
        if s.shape != (len(V),):
            raise ValueError(f"client {i} supports must have shape ({len(V)},), got {s.shape}")
        if not np.isfinite(s).all() or (s < 0).any():
            raise ValueError(f"client {i} supports must be finite and >= 0")
        centres.append(V)
        supports.append(s)
    return np.stack(centres), np.stack(supports)


def ffcm_server_v1(
    uploads: Sequence[tuple[np.ndarray, np.ndarray]], *, previous: np.ndarray | None = None
) -> np.ndarray:
    """FFCM v1 server step: support-weighted average of the centres with the same index.

    ``V_j = sum_i s_ij V_ij / sum_i s_ij``, computed as ``sum_i (s_ij / S_j) V_ij`` with
    ``S_j = sum_i s_ij``: then one client (``s/s = 1``) or identical clients
    (``s/(2s) = 1/2``) give back exactly the local centres.

    A centre with zero total support (no client's data has any membership in it, e.g.
    only empty clients) keeps ``previous[j]`` when the previous global centres are
    given (the natural FL choice: nobody moved it), else the unweighted mean of the
    clients' ``V_ij``.

    Parameters
    ----------
    uploads : sequence of (numpy.ndarray, numpy.ndarray)
        ``(V_i, s_i)`` per client, in client-id order.
    previous : numpy.ndarray of shape (k, d), optional
        The global centres broadcast this round.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The new global centres.

    Raises
    ------
    ValueError
        On malformed uploads (see :func:`check_ffcm_uploads`) or a ``previous`` of the
        wrong shape.
    """
    centres, supports = check_ffcm_uploads(uploads)
    total = supports.sum(axis=0)
    hit = total > 0
    weights = np.zeros_like(supports)
    weights[:, hit] = supports[:, hit] / total[hit]
    V = (weights[:, :, None] * centres).sum(axis=0)
    if not hit.all():
        if previous is not None:
            prev = check_data(previous, name="previous global centres")
            if prev.shape != V.shape:
                raise ValueError(
                    f"previous global centres must have shape {V.shape}, got {prev.shape}"
                )
            V[~hit] = prev[~hit]
        else:
            V[~hit] = centres[:, ~hit].mean(axis=0)
    return V


def ffcm_server_v2(
    uploads: Sequence[tuple[np.ndarray, np.ndarray]],
    k: int,
    rng: np.random.Generator,
    *,
    previous: np.ndarray | None = None,
    weighted: bool = False,
    n_init: int = 10,
    max_iter: int = 500,
) -> np.ndarray:
    """FFCM v2 server step: k-means with ``k`` clusters over all ``M k`` local centres.

    As in the authors' code: scikit-learn :class:`~sklearn.cluster.KMeans` on the
    stacked local centres, seeded with k-means++ (``n_init`` starts; the scikit-learn of
    the time defaulted to 10) when there are no previous global centres (round 1), and
    started once from ``previous`` otherwise (rounds >= 2); ``max_iter = 500``. The
    authors pass no weights; ``weighted=True`` weights every local centre by its
    support instead (then the result is a support-weighted mean of each group, like v1).

    Parameters
    ----------
    uploads : sequence of (numpy.ndarray, numpy.ndarray)
        ``(V_i, s_i)`` per client, in client-id order (the order changes the k-means++
        draws).
    k : int
        Number of global centres; every upload must hold ``k`` centres.
    rng : numpy.random.Generator
        The server's generator; it advances by exactly one draw per call (the
        scikit-learn seed, unused when ``previous`` is given).
    previous : numpy.ndarray of shape (k, d), optional
        Initial centres of the k-means (the previous round's global centres).
    weighted : bool, default False
        Use the supports as sample weights.
    n_init : int, default 10
        k-means++ starts when ``previous`` is None.
    max_iter : int, default 500
        Lloyd iterations.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The new global centres.

    Raises
    ------
    ValueError
        On malformed uploads, a ``previous`` of the wrong shape, or all supports 0 with
        ``weighted=True``.
    """
    from sklearn.cluster import KMeans

    centres, supports = check_ffcm_uploads(uploads, k=k)
    points = centres.reshape(-1, centres.shape[2])
    weights = supports.reshape(-1) if weighted else None
    if weighted and not (weights > 0).any():
        raise ValueError("every support is 0: weighted v2 has nothing to weight")
    seed = seed_from(rng)
    if previous is None:
        init, starts = "k-means++", n_init
    else:
        init = check_data(previous, name="previous global centres", n_features=points.shape[1])
        if len(init) != k:
            raise ValueError(f"previous global centres must have {k} rows, got {len(init)}")
        starts = 1
    # The problem is small (M k points): threads cost more to wake than they save.
    with _threadpool_controller().limit(limits=1):
        km = KMeans(k, init=init, n_init=starts, max_iter=max_iter, random_state=seed)
        return km.fit(points, sample_weight=weights).cluster_centers_


def feature_moments(X: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """A client's additive per-feature statistics: count, sum and sum of squares.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's data (may be empty).

    Returns
    -------
    n : int
        Number of rows.
    total : numpy.ndarray of shape (d,)
        ``sum_x x``.
    sumsq : numpy.ndarray of shape (d,)
        ``sum_x x**2`` (per feature).
    """
    X = check_data(X)
    return len(X), X.sum(axis=0), (X**2).sum(axis=0)


def pooled_mean_std(
    moments: Sequence[tuple[int, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and (population) standard deviation of the pooled data.

    Exact up to rounding: ``mean = sum_i S_i / N`` and
    ``std = sqrt(max(sum_i Q_i / N - mean**2, 0))`` with ``N = sum_i n_i``, the same as
    ``np.mean`` / ``np.std`` of the concatenated data. Only the element-wise sum of the
    clients' triples matters, so it can come from secure aggregation (passing that one
    summed triple gives the same result). The price of the sum-of-squares form is
    cancellation: the relative error of ``std`` is about ``1e-16 * mean**2 / var``,
    irrelevant for an initialisation box.

    Parameters
    ----------
    moments : sequence of (int, numpy.ndarray, numpy.ndarray)
        :func:`feature_moments` of every client.

    Returns
    -------
    mean : numpy.ndarray of shape (d,)
    std : numpy.ndarray of shape (d,)

    Raises
    ------
    ValueError
        If there is no statistic, the shapes differ, or the pooled count is 0.
    """
    if len(moments) == 0:
        raise ValueError("pooled_mean_std needs at least one client's moments, got none")
    n_tot, s_tot, q_tot = 0, None, None
    for i, mom in enumerate(moments):
        if len(mom) != 3:
            raise ValueError(f"client {i} moments must be (n, sum, sumsq), got {len(mom)} items")
        n, s, q = int(mom[0]), np.asarray(mom[1], dtype=np.float64), np.asarray(mom[2], np.float64)
        if n < 0 or s.ndim != 1 or q.shape != s.shape:
            raise ValueError(
                f"client {i} moments are malformed: n={n}, sum {s.shape}, sumsq {q.shape}"
            )
        if s_tot is not None and s.shape != s_tot.shape:
            raise ValueError(
                f"client {i} moments have {s.shape[0]} features but client 0's have "
                f"{s_tot.shape[0]} (feature-count mismatch between clients)"
            )
        n_tot += n
        s_tot = s if s_tot is None else s_tot + s
        q_tot = q if q_tot is None else q_tot + q
    if n_tot == 0:
        raise ValueError("the pooled data hold no point (every client is empty)")
    mean = s_tot / n_tot
    var = np.maximum(q_tot / n_tot - mean**2, 0.0)
    return mean, np.sqrt(var)


def ffcm_random_init(
    mean: np.ndarray, std: np.ndarray, k: int, rng: np.random.Generator, *, width: float = 2.0
) -> np.ndarray:
    """FFCM's random global initialisation, scaled to the data.

    Every coordinate is drawn uniformly in ``[mean - width*std, mean + width*std)`` of
    its feature. The authors draw ``randint(-10, 10)`` whatever the data, which only
    suits data of unit scale (S-set coordinates are ~1e6). A uniform box keeps the
    authors' kind of draw (uniform, bounded); centring it on the pooled mean and sizing
    it by the pooled std puts every initial centre inside the data cloud at any scale
    (``2 std`` covers the bulk of a Gaussian mixture; a Gaussian draw would instead
    throw some centres far into the tails). It needs only the pooled mean and std,
    which the server gets exactly from the clients' additive (count, sum, sum of
    squares) (:func:`feature_moments`, :func:`pooled_mean_std`); no minimum or maximum,
    which would be raw data values, is shared.

    Parameters
    ----------
    mean : numpy.ndarray of shape (d,)
        Pooled per-feature mean.
    std : numpy.ndarray of shape (d,)
        Pooled per-feature standard deviation (``>= 0``).
    k : int
        Number of centres.
    rng : numpy.random.Generator
        The server's generator.
    width : float, default 2.0
        Half-width of the box in standard deviations.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The initial global centres ``V0``.

    Raises
    ------
    ValueError
        If ``mean`` and ``std`` are not finite 1-D arrays of the same length, ``std < 0``,
        ``k < 1`` or ``width < 0``.
    """
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    if mean.ndim != 1 or std.shape != mean.shape:
        raise ValueError(
            f"mean and std must be 1-D of the same length, got {mean.shape}, {std.shape}"
        )
    if not (np.isfinite(mean).all() and np.isfinite(std).all()) or (std < 0).any():
        raise ValueError("mean and std must be finite, std >= 0")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if width < 0:
        raise ValueError(f"width must be >= 0, got {width}")
    return rng.uniform(mean - width * std, mean + width * std, size=(k, len(mean)))


@dataclass
class FFCMResult:
    """Outcome of :func:`run_ffcm`.

    Attributes
    ----------
    centroids : numpy.ndarray of shape (k, d)
        Global centres after the last round.
    initial : numpy.ndarray of shape (k, d)
        The initial global centres ``V0``.
    history : list of numpy.ndarray
        Global centres after every round (``history[r - 1]`` is round ``r``).
    shifts : list of float
        Hungarian-matched shift of every round against the previous global centres
        (:func:`~flwr_clustering.algorithms.lloyd.matched_shift`; v2 may permute them).
    converged : bool
        Whether the run stopped on ``global_tol`` rather than after ``rounds``.
    fuzzifier : float
        The ``m`` used (resolved when ``m = 0`` asked for the automatic choice).
    """

    centroids: np.ndarray
    initial: np.ndarray
    history: list[np.ndarray] = field(default_factory=list)
    shifts: list[float] = field(default_factory=list)
    converged: bool = False
    fuzzifier: float = PAPER_FUZZIFIER


def run_ffcm(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    version: int = 1,
    rounds: int = 10,
    seed: int = 0,
    m: float = 0.0,
    local_max_iter: int = 100,
    tol: float = 1e-4,
    criterion: str = "centres",
    init: np.ndarray | str | None = None,
    init_width: float = 2.0,
    weighted: bool = False,
    n_init: int = 10,
    global_tol: float | None = None,
) -> FFCMResult:
    """Run FFCM on in-memory client arrays, with no Flower (the reference loop).

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        ``X_i`` of every client, in client-id order.
    k : int
        Number of global centres.
    version : {1, 2}, default 1
        Server aggregation: :func:`ffcm_server_v1` or :func:`ffcm_server_v2`.
    rounds : int, default 10
        Number of rounds (the FeCA paper reports rounds 1 and 10).
    seed : int, default 0
        Seeds the server generator ``default_rng(seed)``, which draws ``V0`` (unless
        ``init`` is given) and then one k-means seed per v2 round. Clients are
        deterministic given ``V``.
    m : float, default 0.0
        The fuzzifier; ``0`` (the default, as the App's) chooses it from the dimension and
        the pooled row count (:func:`fuzzifier_from_dimension`); the paper's ``m = 2``
        must be asked for.
    local_max_iter, tol, criterion
        Client options (:func:`ffcm_client`; ``local_max_iter`` is its ``max_iter``).
    init : numpy.ndarray of shape (k, d) or "authors", optional
        ``V0``; by default :func:`ffcm_random_init` from the pooled mean and std.
        ``"authors"`` draws integers in ``[-10, 10)`` whatever the data scale, as the
        authors' code does (for reproductions only: on data far from unit scale every
        initial centre starts far from the data).
    init_width : float, default 2.0
        ``width`` of :func:`ffcm_random_init`.
    weighted, n_init
        v2 options (:func:`ffcm_server_v2`). v2 has no previous centres in round 1
        (k-means++ seeding, as the authors do) and starts from the previous round's
        global centres afterwards.
    global_tol : float, optional
        Stop early when the round's matched shift is ``<= global_tol``; ``None``
        (default) runs all ``rounds``.

    Returns
    -------
    FFCMResult
        Final, initial and per-round global centres.

    Raises
    ------
    ValueError
        On bad data (no client, NaN, feature mismatch, all clients empty) or options.
    """
    if version not in (1, 2):
        raise ValueError(f"version must be 1 or 2, got {version!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(clients) == 0:
        raise ValueError("FFCM needs at least one client, got none")
    data, d = [], None
    for i, X in enumerate(clients):
        X = check_data(X, name=f"client {i} data", n_features=d)
        d = X.shape[1]
        data.append(X)
    if m == 0:
        m = fuzzifier_from_dimension(d, sum(len(X) for X in data))
    result_m = _check_m(m)
    server_rng = np.random.default_rng(seed)
    if init is None:
        mean, std = pooled_mean_std([feature_moments(X) for X in data])
        V = ffcm_random_init(mean, std, k, server_rng, width=init_width)
    elif isinstance(init, str):
        if init != "authors":
            raise ValueError(f"init must be an array, None or 'authors', got {init!r}")
        V = server_rng.integers(-10, 10, size=(k, d)).astype(np.float64)
    else:
        V = check_data(init, name="initial centres", n_features=d)
        if len(V) != k:
            raise ValueError(f"initial centres must have k={k} rows, got {len(V)}")
    result = FFCMResult(centroids=V, initial=V, fuzzifier=result_m)
    client_opts = dict(m=m, max_iter=local_max_iter, tol=tol, criterion=criterion)
    for r in range(rounds):
        uploads = [ffcm_client(X, V, **client_opts) for X in data]
        if version == 1:
            V_new = ffcm_server_v1(uploads, previous=V)
        else:
            V_new = ffcm_server_v2(
                uploads, k, server_rng, previous=None if r == 0 else V, weighted=weighted,
                n_init=n_init,
            )
        shift = matched_shift(V, V_new)
        result.history.append(V_new)
        result.shifts.append(shift)
        result.centroids, V = V_new, V_new
        if global_tol is not None and shift <= global_tol:
            result.converged = True
            break
    return result


@dataclass(frozen=True)
class FFCMOptions(Options):
    """Options of FFCM (Stallmann & Wilbik 2022), a baseline of Xu et al. 2024."""

    k: int = option(16, minimum=1, help="number of global clusters")
    version: int = option(1, key="ffcm-version", choices=(1, 2), help="server aggregation: 1 "
                          "support-weighted average, 2 k-means over the local centres")
    fuzzifier: float = option(0.0, check=lambda m: None if m == 0 or m > 1.0 else
                              "must be > 1 (or 0: chosen from the dimension)",
                              help="m of fuzzy c-means; 0 chooses it from the dimension and "
                              "the row count (Schwämmle & Jensen 2010, at most 2); the "
                              "paper's m is 2")
    local_max_iter: int = option(100, minimum=1, run_config=False,
                                 help="local fuzzy c-means iterations at most")
    local_tol: float = option(1e-4, run_config=False, help="local convergence tolerance")
    criterion: str = option("centres", choices=CRITERIA, run_config=False,
                            help="local stopping criterion")
    init_width: float = option(2.0, run_config=False, help="width of the random start, in "
                               "pooled standard deviations")
    weighted: bool = option(False, run_config=False, help="version 2: weight the server "
                            "k-means by supports")
    n_init: int = option(10, key="server-n-init", minimum=1, run_config=False,
                         help="restarts of the version-2 server k-means")
    privacy_threshold: int = option(2, minimum=0, help="clients with fewer points refuse")
    max_rounds: int = option(20, minimum=1, help="round cap")
    tol: float = option(1e-6, help="stop when the matched centre shift is <= tol (negative: "
                        "never)")
