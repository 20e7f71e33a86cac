"""Decentralized gradient clustering over a network graph: the DGC-rho family (Armacki et al.).

Armacki, Bajović, Jakovetić & Kar, "A unified framework for center-based clustering of
distributed data". Users sit on an undirected connected graph with Laplacian ``L`` and hold
their own data; user ``i`` keeps its own ``K`` centres ``x_i`` and talks to its neighbours
only. One iteration ``t``: every user assigns its points to its nearest centre (fixed for
the iteration), then ``S`` synchronous consensus + innovation steps (Sec. 3, Eqs. 6-7 and
Algorithm 1)::

    x_i <- x_i - alpha * sum_{j in N_i} (x_i - x_j)
               - (alpha / rho) * sum_{r in C_i(k)} w_r * phi(||x_i(k) - y_r||^2) (x_i(k) - y_r)

with ``grad_x f(x, y) = phi(x, y) (x - y)`` for the four losses of :data:`LOSSES` (Sec. 2,
Examples 1-4; Sec. 3, DGC-KM/HL/LL/FL): k-means ``||x-y||^2`` (phi 2), Huber (1 or
delta/a), logistic ``log(1 + e^u)`` (``2 sigmoid(u)``) and Fair on the squared distance
(``2 delta u / (delta + u)``), ``u`` the squared distance. The relaxed cost (Sec. 2, Eqs. 3 and
5) is ``J_rho = 1/2 x^T (L (x) I) x + (1/rho) sum_i J_i(x_i, C_i)``.

The baselines of Sec. 5 are special cases of the same update: CGC is one user without
edges and ``rho = 1`` (:func:`run_cgc`); LGC is every user alone (:func:`run_lgc`); ADMM k-means
(Forero et al. 2011) is :func:`run_admm_kmeans`.

No Flower import (layer 1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..options import Options, option

__all__ = [
    "LOSSES",
    "PAPER_RHO",
    "RHO_PULL",
    "adaptive_rho",
    "algebraic_connectivity",
    "resolve_rho",
    "DGCResult",
    "GRAPHS",
    "adjacency_from",
    "assign",
    "build_graph",
    "clustering_gradient",
    "complete_graph",
    "consensus_cost",
    "consensus_distance",
    "dgc_step",
    "erdos_renyi_graph",
    "flag_outliers",
    "grid_graph",
    "initial_centres",
    "lambda_max",
    "INITS",
    "laplacian",
    "local_cost",
    "local_init",
    "neighbour_sums",
    "node_update",
    "outlier_scores",
    "loss_value",
    "loss_weight",
    "relaxed_cost",
    "ring_graph",
    "run_admm_kmeans",
    "run_cgc",
    "run_dgc",
    "run_lgc",
    "scored_users",
    "smoothness",
    "star_graph",
    "step_size",
]

#: The four losses of the paper (KM, HL, LL, FL).
LOSSES = ("kmeans", "huber", "logistic", "fair")

#: ``max_{u >= 0} u e^u / (1 + e^u)^2`` (at u ~ 1.5434): the logistic Hessian bound is
#: ``2 + 4 * this`` (the smoothness of Assumption 3 for the logistic loss, Appendix C).
_LOGISTIC_PEAK = 0.22387


def _check_loss(loss: str, delta: float) -> None:
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    if loss in ("huber", "fair") and not delta > 0:
        raise ValueError(f"{loss} needs delta > 0, got {delta}")


# ------------------------------------------------------------------------------ losses


def loss_value(loss: str, u: np.ndarray, delta: float = 1.0) -> np.ndarray:
    """``f(x, y)`` as a function of the squared distance ``u = ||x - y||^2``.

    Parameters
    ----------
    loss : {"kmeans", "huber", "logistic", "fair"}
        The loss.
    u : numpy.ndarray
        Squared distances (``>= 0``).
    delta : float, default 1.0
        Huber / Fair parameter.

    Returns
    -------
    numpy.ndarray
        ``u``; Huber ``a^2/2`` (``a <= delta``) or ``delta a - delta^2/2``;
        ``log(1 + e^u)`` (stable); ``delta^2 (u/delta - log(1 + u/delta))``.
    """
    _check_loss(loss, delta)
    u = np.asarray(u, dtype=np.float64)
    if loss == "kmeans":
        return u.copy()
    if loss == "huber":
        a = np.sqrt(u)
        return np.where(a <= delta, u / 2.0, delta * a - delta**2 / 2.0)
    if loss == "logistic":
        return np.logaddexp(0.0, u)
    return delta**2 * (u / delta - np.log1p(u / delta))


def loss_weight(loss: str, u: np.ndarray, delta: float = 1.0) -> np.ndarray:
    """The gradient weight ``phi`` with ``grad_x f(x, y) = phi (x - y)`` (Sec. 3; Assumption 7).

    Parameters
    ----------
    loss : {"kmeans", "huber", "logistic", "fair"}
        The loss.
    u : numpy.ndarray
        Squared distances.
    delta : float, default 1.0
        Huber / Fair parameter.

    Returns
    -------
    numpy.ndarray
        KM 2; Huber 1 near (``a <= delta``, also at ``a = 0``) and ``delta / a`` far;
        logistic ``2 expit(u)`` (no overflow); Fair ``2 delta u / (delta + u)`` (0 at u = 0).
    """
    from scipy.special import expit

    _check_loss(loss, delta)
    u = np.asarray(u, dtype=np.float64)
    if loss == "kmeans":
        return np.full(u.shape, 2.0)
    if loss == "huber":
        a = np.sqrt(u)
        return np.where(a <= delta, 1.0, delta / np.maximum(a, delta))
    if loss == "logistic":
        return 2.0 * expit(u)
    return 2.0 * delta * u / (delta + u)


def smoothness(loss: str, delta: float = 1.0) -> float:
    """The smoothness constant ``beta`` of the loss in ``x`` (Assumption 3).

    KM 2, Huber 1, logistic ``2 + 4 * 0.22387 ~ 2.8955`` (the paper's bound), Fair
    ``9 delta / 4`` (the exact largest Hessian eigenvalue, at ``u = 3 delta``).
    """
    _check_loss(loss, delta)
    return {"kmeans": 2.0, "huber": 1.0, "logistic": 2.0 + 4.0 * _LOGISTIC_PEAK,
            "fair": 9.0 * delta / 4.0}[loss]


# ------------------------------------------------------------------------------ graphs


def _check_adjacency(A: np.ndarray) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"adjacency must be square, got shape {A.shape}")
    if not np.array_equal(A, A.T):
        raise ValueError("adjacency must be symmetric (an undirected graph)")
    if np.any(np.diag(A) != 0) or not np.isin(A, (0.0, 1.0)).all():
        raise ValueError("adjacency must be 0/1 with a zero diagonal (no self-loops)")
    return A


def _connected(A: np.ndarray) -> bool:
    from scipy.sparse.csgraph import connected_components

    return connected_components(A, directed=False)[0] == 1


def ring_graph(m: int) -> np.ndarray:
    """The cycle on ``m`` nodes (a path for ``m = 2``, one node for ``m = 1``)."""
    A = np.zeros((m, m))
    for i in range(m if m > 2 else m - 1):
        A[i, (i + 1) % m] = A[(i + 1) % m, i] = 1.0
    return A


def complete_graph(m: int) -> np.ndarray:
    """Every pair of the ``m`` nodes connected."""
    return np.ones((m, m)) - np.eye(m)


def star_graph(m: int) -> np.ndarray:
    """Node 0 connected to every other node."""
    A = np.zeros((m, m))
    A[0, 1:] = A[1:, 0] = 1.0
    return A


def grid_graph(rows: int, cols: int) -> np.ndarray:
    """A ``rows x cols`` 2-D grid (4-neighbourhood); node ``r * cols + c``."""
    m = rows * cols
    A = np.zeros((m, m))
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            if c + 1 < cols:
                A[i, i + 1] = A[i + 1, i] = 1.0
            if r + 1 < rows:
                A[i, i + cols] = A[i + cols, i] = 1.0
    return A


def erdos_renyi_graph(m: int, p: float, rng: np.random.Generator,
                      max_tries: int = 1000) -> np.ndarray:
    """``G(m, p)``, redrawn until connected (the paper's Assumption 2).

    The heterogeneous runs of Sec. 5 use an Erdos-Renyi graph.

    Raises
    ------
    ValueError
        If no connected draw came within ``max_tries`` (``p`` too small for ``m``).
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must be in (0, 1], got {p}")
    for _ in range(max_tries):
        upper = np.triu(rng.random((m, m)) < p, k=1)
        A = (upper | upper.T).astype(np.float64)
        if _connected(A):
            return A
    raise ValueError(f"no connected G({m}, {p}) in {max_tries} draws; increase p")


def adjacency_from(source: np.ndarray | str | Path) -> np.ndarray:
    """A user-supplied adjacency matrix: an array, or a ``.npy`` / text file (``loadtxt``).

    Raises
    ------
    ValueError
        If it is not a symmetric 0/1 matrix without self-loops, or not connected.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            A = (np.load(path, allow_pickle=False) if path.suffix == ".npy"
                 else np.loadtxt(path, ndmin=2))
        except (OSError, ValueError, EOFError) as ex:
            # numpy's message quotes the line it could not read: never repeat it (a graph
            # file is a server-side file; its lines are nobody else's business)
            raise ValueError(
                f"graph file {str(path)!r} is not an adjacency matrix ({type(ex).__name__} "
                "while reading it): give a .npy array or a text file of 0/1 rows, one per "
                "node") from None
    else:
        A = source
    A = _check_adjacency(A)
    if not _connected(A):
        raise ValueError("the graph must be connected (the paper's Assumption 2)")
    return A


GRAPHS = ("ring", "complete", "star", "grid", "erdos-renyi")

#: An inline edge list: ``"0-1,1-2,2-0"``, client ids joined by ``-``, edges by ``,``.
_EDGE_LIST = re.compile(r"\s*\d+\s*-\s*\d+\s*(,\s*\d+\s*-\s*\d+\s*)*,?\s*")


def is_edge_list(text: str) -> bool:
    """Whether ``text`` is an inline edge list (``"0-1,1-2,2-0"``; see :func:`edge_list_graph`)."""
    return isinstance(text, str) and _EDGE_LIST.fullmatch(text) is not None


def edge_list_graph(text: str, m: int) -> np.ndarray:
    """The adjacency of ``m`` users from an inline edge list such as ``"0-1,1-2,2-0"``.

    Each edge is two client ids (``0..m-1``) joined by ``-``; edges are separated by
    commas (spaces are ignored). Undirected: ``0-1`` and ``1-0`` are one edge.

    Raises
    ------
    ValueError
        On a malformed list, a self-loop, an id outside ``0..m-1``, or a graph that is not
        connected (every user needs a path to every other, the paper's Assumption 2).
    """
    if not is_edge_list(text):
        raise ValueError(f"graph {text!r} is not an edge list such as '0-1,1-2,2-0'")
    A = np.zeros((m, m))
    for edge in filter(None, (e.strip() for e in text.split(","))):
        i, j = (int(v) for v in edge.split("-"))
        if i == j:
            raise ValueError(f"graph edge {i}-{j}: a node is not its own neighbour")
        if max(i, j) >= m:
            raise ValueError(f"graph edge {i}-{j}: the federation has {m} nodes, client ids "
                             f"0..{m - 1}")
        A[i, j] = A[j, i] = 1.0
    if not _connected(A):
        raise ValueError(f"graph {text!r}: not connected over the {m} nodes (every node "
                         "needs a path to every other, the paper's Assumption 2)")
    return A


def build_graph(graph: str | np.ndarray | Path, m: int, *, p: float = 0.3,
                seed: int = 0) -> np.ndarray:
    """The adjacency of ``m`` users from a name, an array or a file.

    Names: ``ring``, ``complete``, ``star``, ``grid`` (``r x c`` with ``r`` the largest
    divisor of ``m`` up to ``sqrt(m)``), ``erdos-renyi`` (``G(m, p)`` redrawn until
    connected, with ``default_rng(seed)``); an inline edge list ``"0-1,1-2,2-0"``
    (:func:`edge_list_graph`). Anything else is read by :func:`adjacency_from` and must
    have ``m`` nodes (the Flower App reads a file only from the operator's allow-list,
    :mod:`flwr_clustering.app.paths`).
    """
    if isinstance(graph, str) and graph in GRAPHS:
        if graph == "ring":
            return ring_graph(m)
        if graph == "complete":
            return complete_graph(m)
        if graph == "star":
            return star_graph(m)
        if graph == "grid":
            rows = max(r for r in range(1, int(np.sqrt(m)) + 1) if m % r == 0)
            return grid_graph(rows, m // rows)
        return erdos_renyi_graph(m, p, np.random.default_rng(seed))
    if is_edge_list(graph):
        return edge_list_graph(graph, m)
    if isinstance(graph, str) and not Path(graph).exists():
        raise ValueError(f"graph must be one of {GRAPHS}, an edge list such as "
                         f"'0-1,1-2,2-0', an adjacency array or a file; got {graph!r}")
    A = adjacency_from(graph)
    if len(A) != m:
        raise ValueError(f"the adjacency has {len(A)} nodes, the federation {m}")
    return A


def initial_centres(data: Sequence[np.ndarray], k: int, *, seed: int = 0,
                    scheme: str = "kmeans", privacy_threshold: int = 2) -> np.ndarray:
    """Every user's :func:`local_init` with its own generator ``client_rng(seed, i)``."""
    from .lloyd import client_rng

    return np.stack([local_init(X, k, client_rng(seed, i), scheme,
                                privacy_threshold=privacy_threshold)
                     for i, X in enumerate(data)])


def laplacian(A: np.ndarray) -> np.ndarray:
    """``L = D - A`` (SciPy's combinatorial Laplacian)."""
    from scipy.sparse.csgraph import laplacian as _laplacian

    return _laplacian(_check_adjacency(A))


def lambda_max(A: np.ndarray) -> float:
    """Largest eigenvalue of the Laplacian (``numpy.linalg.eigvalsh``); 0 without edges."""
    return float(np.linalg.eigvalsh(laplacian(A))[-1]) if len(A) else 0.0


def step_size(A: np.ndarray, loss: str, rho: float, n_max: float, *, delta: float = 1.0,
              safety: float = 1.0) -> float:
    """The global step ``alpha = safety / (lambda_max(L) + beta n_max / rho)`` (Theorem 1).

    ``n_max`` is the largest local weight sum (the largest local data set with unit
    weights). With ``safety <= 1`` the update is a convex combination (Lemma 12) and the
    cost is non-increasing (Lemma 5).
    """
    if rho < 1:
        raise ValueError(f"rho must be >= 1, got {rho}")
    return float(safety) / (lambda_max(A) + smoothness(loss, delta) * float(n_max) / rho)


def algebraic_connectivity(A: np.ndarray) -> float:
    """``lambda_2(L)``, the second-smallest Laplacian eigenvalue; 0 when disconnected.

    The rate of the graph's slowest consensus mode: the smaller it is (a long ring), the
    longer neighbours take to agree.
    """
    if len(A) < 2:
        return 0.0
    return max(float(np.linalg.eigvalsh(laplacian(A))[1]), 0.0)


#: The paper's ``rho`` (Sec. 5: 10, 100, 1000): the smallest the adaptive default takes.
PAPER_RHO = 10.0
#: The adaptive ``rho`` (``rho=0``, the default) caps the largest node's clustering pull
#: ``beta N_max / rho`` at this share of ``lambda_2(L)``. At the fixed point a node's
#: centres then differ from its neighbours' by about this share of the spread of the
#: local means, below the consensus diagnostic's 0.1 of the data's scale. Measured
#: (2026-11-28) with ``python -m simulations quality --algorithms dgc --engine app`` on
#: its eight sets of 5-10 nodes (ring, IID and Dirichlet(0.3), seeds 0-2, 100
#: iterations), the commit before this default against this one: the consensus warning
#: in 48 -> 1 of 48 runs, mean ARI 0.464 -> 0.471 (docs/quality.md, issue 38).
RHO_PULL = 0.2


def adaptive_rho(A: np.ndarray, loss: str, n_max: float, *, delta: float = 1.0) -> float:
    """The default ``rho``: ``max(10, beta N_max / (RHO_PULL lambda_2(L)))``.

    Scales with the data (``N_max``, the largest local weight sum) and the graph
    (:func:`algebraic_connectivity`), so that the consensus term dominates the relaxed
    cost ``J_rho`` whatever their size; the paper's fixed ``rho = 10`` leaves nodes of a
    few hundred rows each far apart. A disconnected graph (no consensus possible) keeps
    the paper's value.
    """
    lam2 = algebraic_connectivity(A)
    if lam2 <= 1e-12:
        return PAPER_RHO
    return max(PAPER_RHO, smoothness(loss, delta) * float(n_max) / (RHO_PULL * lam2))


def resolve_rho(rho: float, A: np.ndarray, loss: str, n_max: float, *,
                delta: float = 1.0) -> float:
    """``rho`` as given (at least 1), or :func:`adaptive_rho` for ``rho = 0``."""
    rho = float(rho)
    if rho == 0:
        return adaptive_rho(A, loss, n_max, delta=delta)
    if rho < 1:
        raise ValueError(f"rho must be 0 (adapt to the data and the graph) or >= 1, got {rho}")
    return rho


# ----------------------------------------------------------------------- the iteration


def assign(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Nearest centre of every row (Euclidean; ties to the lowest index)."""
    from .lloyd import nearest_labels

    return nearest_labels(X, C)


def clustering_gradient(X: np.ndarray, labels: np.ndarray, C: np.ndarray, loss: str, *,
                        delta: float = 1.0, weights: np.ndarray | None = None) -> np.ndarray:
    """``sum_{r in C(k)} w_r phi(||c_k - y_r||^2) (c_k - y_r)`` for every centre ``k``.

    Evaluated at the current centres ``C`` with the clusters ``labels`` held fixed (the
    inner steps of an iteration); an empty cluster has gradient 0.

    Returns
    -------
    numpy.ndarray of shape (K, d)
    """
    X = np.asarray(X, dtype=np.float64)
    K = len(C)
    Z = C[labels] - X
    phi = loss_weight(loss, np.einsum("ij,ij->i", Z, Z), delta)
    if weights is not None:
        phi = phi * np.asarray(weights, dtype=np.float64)
    G = np.zeros((K, X.shape[1]))
    np.add.at(G, labels, phi[:, None] * Z)
    return G


def outlier_scores(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Labels and outlier score (distance to the nearest centre) of every row.

    The paper's outlier detection (Sec. 5, fourth experiment): with Huber centres, which
    far points barely pull, the rows farthest from every centre are the outliers.
    """
    from .lloyd import assign_to_nearest

    labels, d2 = assign_to_nearest(X, C)
    return labels, np.sqrt(d2)


def flag_outliers(scores: np.ndarray, *, fraction: float | None = None,
                  threshold: float | None = None) -> np.ndarray:
    """Boolean mask of outliers: score above ``threshold``, or the top ``fraction``.

    Exactly one of ``fraction`` (in ``[0, 1)``) and ``threshold`` must be given.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if (fraction is None) == (threshold is None):
        raise ValueError("give exactly one of fraction and threshold")
    if threshold is not None:
        return scores > float(threshold)
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"fraction must be in [0, 1), got {fraction}")
    n_out = int(round(float(fraction) * len(scores)))
    flags = np.zeros(len(scores), dtype=bool)
    if n_out:
        flags[np.argsort(-scores, kind="stable")[:n_out]] = True
    return flags


def local_cost(X: np.ndarray, labels: np.ndarray, C: np.ndarray, loss: str, *,
               delta: float = 1.0, weights: np.ndarray | None = None) -> float:
    """``J_i = sum_k sum_{r in C(k)} w_r f(c_k, y_r)``."""
    Z = C[labels] - np.asarray(X, dtype=np.float64)
    f = loss_value(loss, np.einsum("ij,ij->i", Z, Z), delta)
    return float(np.sum(f if weights is None else f * weights))


def node_update(x_i: np.ndarray, neighbour_sum: np.ndarray, degree: float, X: np.ndarray,
                labels: np.ndarray, alpha: float, rho: float, loss: str, *,
                delta: float = 1.0, weights: np.ndarray | None = None) -> np.ndarray:
    """One user's step (U): ``x_i - alpha (deg_i x_i - sum_j x_j) - (alpha/rho) grad_i``.

    The user needs its neighbours only through their sum: what the Flower relay sends.
    :func:`dgc_step` calls this for every user, so both give the same bits.
    """
    grad = clustering_gradient(X, labels, x_i, loss, delta=delta, weights=weights)
    return x_i - alpha * (degree * x_i - neighbour_sum) - (alpha / rho) * grad


def neighbour_sums(A: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """``sum_{j in N_i} x_j`` for every user (what the relay sends to user ``i``)."""
    return np.tensordot(np.asarray(A, dtype=np.float64), centres, axes=(1, 0))


INITS = ("kmeans", "random")


def local_init(X: np.ndarray, k: int, rng: np.random.Generator, scheme: str = "kmeans",
               *, privacy_threshold: int = 2) -> np.ndarray:
    """A user's own initial centres (independent, unsynchronised; Sec. 3).

    ``"kmeans"`` (default): a local single-start k-means. A cluster of fewer than
    ``privacy_threshold`` points (a one-point mean is a row) starts at the mean of all the user's
    rows instead, and a user with fewer than ``k`` points repeats its last centre; a user
    with fewer than ``privacy_threshold`` rows cannot start privately and gets an error.
    ``"random"``: ``k`` distinct local rows drawn uniformly, the paper's random
    initialisation, **which sends raw rows to the neighbours** (and the relay).
    """
    from .lloyd import local_kmeans

    X = np.asarray(X, dtype=np.float64)
    if scheme == "random":
        if len(X) < k:
            raise ValueError(f"random init needs at least k={k} points, got {len(X)}")
        return X[rng.choice(len(X), size=k, replace=False)].copy()
    if scheme != "kmeans":
        raise ValueError(f"init must be one of {INITS}, got {scheme!r}")
    if len(X) < max(1, privacy_threshold):
        raise ValueError(f"a user needs at least {max(1, privacy_threshold)} rows (the minimum "
                         f"count, privacy_threshold) to start privately, got {len(X)}")
    C, labels = local_kmeans(X, k, rng)
    C[np.bincount(labels, minlength=len(C)) < privacy_threshold] = X.mean(axis=0)
    if len(C) < k:
        C = np.vstack([C, np.repeat(C[-1:], k - len(C), axis=0)])
    return C


def dgc_step(centres: np.ndarray, A: np.ndarray, data: Sequence[np.ndarray],
             labels: Sequence[np.ndarray], alpha: float | np.ndarray, rho: float, loss: str,
             *, delta: float = 1.0, weights: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """One synchronous consensus + innovation step of every user (Sec. 3, Eq. 7).

    Parameters
    ----------
    centres : numpy.ndarray of shape (m, K, d)
        Every user's current centres ``x_i^{t,s}``.
    A : numpy.ndarray of shape (m, m)
        Adjacency.
    data, labels : sequences of m arrays
        Every user's points and their clusters (fixed during the iteration).
    alpha : float or numpy.ndarray of shape (m,)
        Step (one global value in DGC; per user in LGC).
    rho : float
        Consensus weight: the clustering term is scaled by ``1 / rho``.
    loss : str
        One of :data:`LOSSES`.
    delta : float, default 1.0
        Huber / Fair parameter.
    weights : sequence of m arrays, optional
        Per-sample weights (default 1).

    Returns
    -------
    numpy.ndarray of shape (m, K, d)
        ``x^{t,s+1}``: every user used its neighbours' ``x^{t,s}`` (Jacobi).
    """
    x = np.asarray(centres, dtype=np.float64)
    m = len(x)
    A = np.asarray(A, dtype=np.float64)
    nbr, deg = neighbour_sums(A, x), A.sum(axis=1)
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (m,))
    return np.stack([
        node_update(x[i], nbr[i], deg[i], data[i], labels[i], float(a[i]), rho, loss,
                    delta=delta, weights=None if weights is None else weights[i])
        for i in range(m)])


def relaxed_cost(centres: np.ndarray, A: np.ndarray, data: Sequence[np.ndarray],
                 labels: Sequence[np.ndarray], rho: float, loss: str, *, delta: float = 1.0,
                 weights: Sequence[np.ndarray] | None = None) -> float:
    """``J_rho = 1/2 sum_{edges} sum_k ||x_i(k) - x_j(k)||^2 + (1/rho) sum_i J_i`` (Eq. 3)."""
    x = np.asarray(centres, dtype=np.float64)
    clustering = sum(
        local_cost(data[i], labels[i], x[i], loss, delta=delta,
                   weights=None if weights is None else weights[i])
        for i in range(len(x)))
    return consensus_cost(A, x) + clustering / rho


def consensus_cost(A: np.ndarray, centres: np.ndarray) -> float:
    """The consensus term of J_rho: ``1/2 sum_{edges} sum_k ||x_i(k) - x_j(k)||^2``."""
    x = np.asarray(centres, dtype=np.float64)
    flat = x.reshape(len(x), -1)
    return 0.5 * float(np.sum(flat * (laplacian(A) @ flat)))


def consensus_distance(centres: np.ndarray) -> float:
    """``max_{i, j, k} ||x_i(k) - x_j(k)||``: the paper's consensus metric."""
    x = np.asarray(centres, dtype=np.float64)
    diff = x[:, None] - x[None, :]
    return float(np.sqrt(np.max(np.einsum("ijkd,ijkd->ijk", diff, diff))))


@dataclass
class DGCResult:
    """Outcome of :func:`run_dgc`.

    Attributes
    ----------
    centres : numpy.ndarray of shape (m, K, d)
        Every user's final centres.
    labels : list of numpy.ndarray
        Every user's final clusters (assignment to its final centres).
    history : list of numpy.ndarray
        ``x^0, x^1, ..., x^T`` (after every outer iteration).
    costs : list of float
        ``J_rho(x^t, C^{t+1})`` after every reassignment (Lemma 5's chain), ``t = 0..T-1``,
        then ``J_rho(x^T, C^{T+1})``.
    consensus : list of float
        :func:`consensus_distance` of every ``x^t``.
    alpha : float or numpy.ndarray
        The step used.
    rho : float
        The ``rho`` used (:func:`resolve_rho`).
    """

    centres: np.ndarray
    labels: list[np.ndarray]
    history: list[np.ndarray] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    consensus: list[float] = field(default_factory=list)
    alpha: float | np.ndarray = 0.0
    rho: float = 0.0


def run_dgc(data: Sequence[np.ndarray], A: np.ndarray, init: np.ndarray, *,
            loss: str = "kmeans", rho: float = 0.0, iterations: int = 100,
            inner_steps: int = 1, alpha: float | np.ndarray | None = None,
            delta: float = 1.0, weights: Sequence[np.ndarray] | None = None,
            keep_history: bool = True) -> DGCResult:
    """DGC-F_rho (Algorithm 1) on in-memory user data: the reference loop.

    Parameters
    ----------
    data : sequence of m arrays of shape (N_i, d)
        Every user's points.
    A : numpy.ndarray of shape (m, m)
        Adjacency of an undirected graph (connected for the theory; edgeless is LGC).
    init : numpy.ndarray of shape (m, K, d)
        Every user's own initial centres (independent initialisation).
    loss : str, default "kmeans"
        One of :data:`LOSSES`.
    rho : float, default 0.0
        ``>= 1``; larger means more consensus. ``0``: :func:`adaptive_rho` (from ``A`` and
        the largest local weight sum); the paper's runs pass 10, 100 or 1000.
    iterations : int, default 100
        ``T``.
    inner_steps : int, default 1
        ``S``: centre steps per iteration with the clusters fixed.
    alpha : float or array, optional
        Default :func:`step_size` with ``n_max`` the largest weight sum.
    delta : float, default 1.0
        Huber / Fair parameter.
    weights : sequence of m arrays, optional
        Per-sample weights (default 1).
    keep_history : bool, default True
        Keep every ``x^t`` (memory ``T m K d``).

    Returns
    -------
    DGCResult
    """
    _check_loss(loss, delta)
    A = _check_adjacency(A)
    x = np.array(init, dtype=np.float64, copy=True)
    m = len(A)
    if x.ndim != 3 or len(x) != m or len(data) != m:
        raise ValueError(f"need init (m, K, d) and m data sets for m = {m} users, got init "
                         f"{x.shape} and {len(data)} data sets")
    from .lloyd import check_data

    data = [check_data(D, name=f"user {i} data", n_features=x.shape[2])
            for i, D in enumerate(data)]
    if any(len(D) == 0 for D in data):
        raise ValueError("every user needs at least one point")
    n_max = max(float(len(D) if weights is None else np.sum(w))
                for D, w in zip(data, weights or [None] * m, strict=True))
    rho = resolve_rho(rho, A, loss, n_max, delta=delta)
    if alpha is None:
        alpha = step_size(A, loss, rho, n_max, delta=delta)
    result = DGCResult(x, [], alpha=alpha, rho=rho)
    for _ in range(int(iterations)):
        labels = [assign(data[i], x[i]) for i in range(m)]
        if keep_history:
            result.history.append(x.copy())
        result.consensus.append(consensus_distance(x))
        result.costs.append(relaxed_cost(x, A, data, labels, rho, loss, delta=delta,
                                         weights=weights))
        for _ in range(int(inner_steps)):
            x = dgc_step(x, A, data, labels, alpha, rho, loss, delta=delta, weights=weights)
    labels = [assign(data[i], x[i]) for i in range(m)]
    if keep_history:
        result.history.append(x.copy())
    result.consensus.append(consensus_distance(x))
    result.costs.append(relaxed_cost(x, A, data, labels, rho, loss, delta=delta,
                                     weights=weights))
    result.centres, result.labels = x, labels
    return result


def run_cgc(X: np.ndarray, init: np.ndarray, *, loss: str = "kmeans", iterations: int = 100,
            inner_steps: int = 1, alpha: float | None = None, delta: float = 1.0) -> DGCResult:
    """Centralized gradient clustering (CGC, Sec. 5): DGC with one user, no edge, rho = 1.

    Default step ``1 / (beta N)``.
    """
    return run_dgc([X], np.zeros((1, 1)), np.asarray(init, dtype=np.float64)[None], loss=loss,
                   rho=1.0, iterations=iterations, inner_steps=inner_steps, alpha=alpha,
                   delta=delta)


def run_lgc(data: Sequence[np.ndarray], init: np.ndarray, *, loss: str = "kmeans",
            iterations: int = 100, delta: float = 1.0) -> DGCResult:
    """Local gradient clustering (LGC, Sec. 5): every user alone, step ``1 / (beta N_i)``."""
    alpha = np.array([1.0 / (smoothness(loss, delta) * len(D)) for D in data])
    m = len(data)
    return run_dgc(data, np.zeros((m, m)), init, loss=loss, rho=1.0, iterations=iterations,
                   alpha=alpha, delta=delta)


def run_admm_kmeans(data: Sequence[np.ndarray], A: np.ndarray, init: np.ndarray, *,
                    eta: float = 1.0, iterations: int = 100) -> DGCResult:
    """Distributed hard k-means by consensus ADMM (Forero, Cano & Giannakis 2011; Sec. 5).

    Per iteration and node ``j``: assign to the nearest own centre; multiplier
    ``v_j += (eta / 2) sum_{j' in N_j} (m_j - m_j')`` (at the current centres); centres
    ``m_j = (sum of the cluster - v_j + (eta / 2) sum_{j'} (m_j + m_j')) /
    (cluster size + eta |N_j|)``. One exchange of ``K x d`` centres per iteration. The
    equations are rebuilt from the standard derivation (the paper does not print them).

    Returns
    -------
    DGCResult
        ``costs`` holds the plain k-means cost ``sum_i J_i`` of every iterate.
    """
    from .lloyd import cluster_sums

    A = _check_adjacency(A)
    if eta <= 0:
        raise ValueError(f"eta must be > 0, got {eta}")
    x = np.array(init, dtype=np.float64, copy=True)
    data = [np.asarray(D, dtype=np.float64) for D in data]
    L = laplacian(A)
    deg = A.sum(axis=1)
    v = np.zeros_like(x)
    result = DGCResult(x, [])
    for _ in range(int(iterations)):
        labels = [assign(data[i], x[i]) for i in range(len(x))]
        result.history.append(x.copy())
        result.consensus.append(consensus_distance(x))
        result.costs.append(sum(local_cost(D, lab, x[i], "kmeans")
                                for i, (D, lab) in enumerate(zip(data, labels, strict=True))))
        v = v + (eta / 2.0) * np.tensordot(L, x, axes=(1, 0))
        neighbour_sum = np.tensordot(A, x, axes=(1, 0))
        new = np.empty_like(x)
        for i, (D, lab) in enumerate(zip(data, labels, strict=True)):
            sums, counts = cluster_sums(D, lab, x.shape[1])
            denom = counts[:, None] + eta * deg[i]
            num = sums - v[i] + (eta / 2.0) * (deg[i] * x[i] + neighbour_sum[i])
            # an isolated node's empty cluster has nothing to move it: it stays
            new[i] = np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), x[i])
        x = new
    labels = [assign(data[i], x[i]) for i in range(len(x))]
    result.history.append(x.copy())
    result.consensus.append(consensus_distance(x))
    result.costs.append(sum(local_cost(D, lab, x[i], "kmeans")
                            for i, (D, lab) in enumerate(zip(data, labels, strict=True))))
    result.centres, result.labels = x, labels
    return result


def scored_users(m: int, limit: int) -> np.ndarray:
    """Ids of the users whose own centres the per-user metrics score.

    All ``m`` when ``m <= limit``, else ``limit`` ids evenly spaced over ``0..m-1`` (first
    and last in).

    Scoring every user costs every client ``m`` models and an ``(m, K, classes)`` table per
    reply, ``m^2`` over the federation (5.8 GB at 1,000 nodes); a fixed evenly spaced set
    keeps the mean, min and max over users an unbiased, deterministic summary.
    """
    if limit <= 0:
        return np.zeros(0, dtype=np.int64)
    if m <= limit:
        return np.arange(m, dtype=np.int64)
    return np.unique(np.linspace(0, m - 1, limit).round().astype(np.int64))


@dataclass(frozen=True)
class DGCOptions(Options):
    """Options of DGC-rho (Armacki et al. 2025): run-config keys and message config."""

    k: int = option(16, minimum=1, help="centres per node")
    loss: str = option("kmeans", choices=LOSSES, help="clustering loss")
    rho: float = option(0.0, minimum=0.0, help="the clustering term is scaled by 1/rho "
                        "(>= 1; 0: adapt to the data and the graph, max(10, beta N_max / "
                        "(0.2 lambda_2(L))); the paper's runs use 10-1000)")
    graph: str = option("ring", help="ring, complete, star, grid, erdos-renyi, an edge list "
                        "such as '0-1,1-2,2-0', or an adjacency file (the App reads one "
                        "only from the operator's allowed paths)")
    iterations: int = option(100, minimum=1, help="T")
    inner_steps: int = option(1, minimum=1, help="S")
    delta: float = option(1.0, help="Huber / Fair parameter")
    alpha: float = option(0.0, minimum=0.0, run_config=False,
                          help="step (0: 1 / (lambda_max(L) + beta N_max / rho))")
    init: str = option("kmeans", key="node-init", choices=INITS,
                       help="node start; 'random' (the paper's) sends raw rows")
    er_p: float = option(0.3, help="edge probability of erdos-renyi")
    privacy_threshold: int = option(2, minimum=0, help="kmeans start: a smaller local "
                                    "cluster starts at the node's mean")
    tol: float = option(-1.0, key="dgc-tol", run_config=False, help="stop once no node's "
                        "centres move more than tol in a step (negative: run all T S steps)")
    user_eval_nodes: int = option(100, minimum=0, help="per-user metrics score at most this "
                                  "many users' own centres on the joint data (evenly spaced "
                                  "ids when the graph has more nodes; 0: none)")
