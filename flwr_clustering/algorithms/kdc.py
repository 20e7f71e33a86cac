"""KDC: distributed clustering with a distributional (Isolation) kernel (Zhang et al., Sec. 4).

Zhang, Xu, Gong, Ting & Zhu, *Distributed Clustering based on Distributional Kernel*. Sites
send one uniform random subset ``B_l`` of their (min-max normalised) rows; the coordinator
builds an Isolation Kernel on the pooled subset ``B``, finds ``k`` initial clusters in ``B``
with a step-2 algorithm ``f`` (κBCC by default, kernel k-means as the alternative) and
broadcasts the kernel model and one kernel mean map per cluster; every site labels each of
its rows by the cluster whose distribution is most similar,
``argmax_i <Phi(x), Phi(P_{G_i})>``. One upload, one broadcast.

The Isolation Kernel is our own implementation of the standard construction (Ting, Zhu &
Zhou 2018, which the paper cites in Sec. 7 and does not restate): ``t`` partitionings,
each from ``psi`` distinct points of ``B``; a point's feature in partitioning ``i`` is the
one-hot index of its nearest sampled point (aNNE, Voronoi cells) or, for iNNE, the same cell
only if the point lies within that centre's radius (the Euclidean distance to its nearest
other centre). ``IK(x, y)`` is the fraction of partitionings in which ``x`` and ``y`` share
a cell.

Determinism and exact equivalence (property (a), Sec. 5.1): every per-row computation here
(distances by :func:`scipy.spatial.distance.cdist`, which computes each pair on its own,
argmin, sparse row products) depends only on that row and the model, never on the other rows
it is processed with, so the distributed labels equal the centralized ones bit for bit.

Layer 1: NumPy / SciPy / scikit-learn only, no Flower import.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..options import Options, option
from .lloyd import check_data, client_rng, seed_from

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = [
    "IsolationKernel",
    "KDCResult",
    "STEP2",
    "VARIANTS",
    "allocate_sample",
    "assign_by_distribution",
    "build_ik",
    "coreset_kmeans",
    "feature_map",
    "ik_similarity",
    "initial_cluster_means",
    "kbcc",
    "kbcc_components",
    "kbcc_components_multi",
    "kdc_central",
    "kdc_coordinator",
    "kdc_site_assign",
    "kdc_site_sample",
    "kernel_kmeans",
    "kernel_mean_maps",
    "minmax_scale",
    "pooled_sample",
    "run_kdc",
    "select_parameters",
]

#: Isolation Kernel variants: aNNE (Voronoi cells, the default) and iNNE (hyperspheres).
VARIANTS = ("anne", "inne")

#: Step-2 algorithms on the pooled subset.
STEP2 = ("kbcc", "kernel-kmeans")

#: Rows per block of the distance and similarity computations (memory bound, not results).
_BLOCK = 2048


# ------------------------------------------------------------------------- kernel
@dataclass
class IsolationKernel:
    """An Isolation Kernel model: what the coordinator broadcasts.

    Attributes
    ----------
    centres : numpy.ndarray of shape (t, psi, d)
        The sampled points of every partitioning (rows of ``B``: the broadcast shows them).
    radii : numpy.ndarray of shape (t, psi) or None
        iNNE radii (Euclidean distance of each centre to its nearest other centre of the
        same partitioning); ``None`` for aNNE.
    """

    centres: np.ndarray
    radii: np.ndarray | None = None

    @property
    def t(self) -> int:
        """Number of partitionings."""
        return int(self.centres.shape[0])

    @property
    def psi(self) -> int:
        """Cells per partitioning."""
        return int(self.centres.shape[1])

    @property
    def variant(self) -> str:
        """``"anne"`` or ``"inne"``."""
        return "anne" if self.radii is None else "inne"

    def arrays(self) -> list[np.ndarray]:
        """The model as arrays (for a message): ``[centres]`` or ``[centres, radii]``."""
        return [self.centres] if self.radii is None else [self.centres, self.radii]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> IsolationKernel:
        """Rebuild a model from :meth:`arrays`, checking shapes."""
        if len(arrays) not in (1, 2):
            raise ValueError(f"an Isolation Kernel is 1 or 2 arrays, got {len(arrays)}")
        centres = np.asarray(arrays[0], dtype=np.float64)
        if centres.ndim != 3 or not np.isfinite(centres).all():
            raise ValueError(f"IK centres must be a finite (t, psi, d) array, got {centres.shape}")
        radii = None
        if len(arrays) == 2:
            radii = np.asarray(arrays[1], dtype=np.float64)
            if radii.shape != centres.shape[:2] or not np.isfinite(radii).all():
                raise ValueError(f"IK radii must be a finite {centres.shape[:2]} array, "
                                 f"got {radii.shape}")
        return cls(centres, radii)


def build_ik(S: np.ndarray, psi: int, t: int, rng: np.random.Generator | int,
             variant: str = "anne") -> IsolationKernel:
    """Build an Isolation Kernel on ``S`` (for KDC: the pooled subset ``B``).

    Parameters
    ----------
    S : array_like of shape (s, d)
        The points the partitionings are drawn from.
    psi : int
        Points per partitioning (cells), ``2 <= psi <= s``.
    t : int
        Partitionings, ``>= 1``.
    rng : numpy.random.Generator or int
        Draws partitioning ``i``'s ``psi`` distinct row indices, one partitioning after the
        other.
    variant : {"anne", "inne"}, default "anne"
        Voronoi cells, or hyperspheres with radius = distance to the nearest other centre.
        Duplicate rows of ``S`` may be drawn together: aNNE then never picks the later copy
        (ties go to the lowest index); iNNE gives both radius 0 (a point exactly on them is
        inside).

    Returns
    -------
    IsolationKernel
    """
    from scipy.spatial.distance import cdist

    S = check_data(S, name="IK sample")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    psi, t = int(psi), int(t)
    if t < 1:
        raise ValueError(f"t must be >= 1, got {t}")
    if not 2 <= psi <= len(S):
        raise ValueError(f"psi must be in [2, {len(S)}] (the sample size), got {psi}")
    rng = np.random.default_rng(rng)
    idx = np.stack([rng.choice(len(S), size=psi, replace=False) for _ in range(t)])
    centres = S[idx]
    radii = None
    if variant == "inne":
        radii = np.empty((t, psi))
        for i in range(t):
            d = cdist(centres[i], centres[i])
            np.fill_diagonal(d, np.inf)
            radii[i] = d.min(axis=1)
    return IsolationKernel(centres, radii)


def _cells(model: IsolationKernel, X: np.ndarray) -> np.ndarray:
    """Cell index (0..psi-1) of every row in every partitioning; -1 outside (iNNE)."""
    from scipy.spatial.distance import cdist

    t, psi, d = model.centres.shape
    flat = model.centres.reshape(t * psi, d)
    out = np.empty((len(X), t), dtype=np.int64)
    rows = np.arange(t)
    for start in range(0, len(X), _BLOCK):
        block = X[start:start + _BLOCK]
        d2 = cdist(block, flat, "sqeuclidean").reshape(len(block), t, psi)
        j = d2.argmin(axis=2)  # ties: lowest index
        if model.radii is not None:
            dist = np.sqrt(np.take_along_axis(d2, j[:, :, None], axis=2)[:, :, 0])
            j = np.where(dist <= model.radii[rows[None, :], j], j, -1)
        out[start:start + len(block)] = j
    return out


def feature_map(model: IsolationKernel, X: np.ndarray) -> sp.csr_matrix:
    """The IK feature map ``Phi(X)``: sparse binary, ``(n, t psi)``.

    Row ``x`` has a one in column ``i psi + j`` when ``x`` falls in cell ``j`` of
    partitioning ``i``: exactly ``t`` ones (aNNE), at most ``t`` (iNNE; a row outside every
    ball is all zero).
    """
    import scipy.sparse as sp

    X = check_data(X, name="data", n_features=model.centres.shape[2])
    cells = _cells(model, X)
    t, psi = model.t, model.psi
    cols = cells + (np.arange(t) * psi)[None, :]
    keep = cells >= 0
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
    return sp.csr_matrix((np.ones(int(keep.sum())), cols[keep], indptr),
                         shape=(len(X), t * psi))


def ik_similarity(F: sp.spmatrix, G: sp.spmatrix | None = None, t: int | None = None
                  ) -> np.ndarray:
    """Dense IK similarity ``Phi(X) Phi(Y)^T / t`` (fraction of shared cells), in [0, 1]."""
    import scipy.sparse as sp

    F = sp.csr_matrix(F)
    G = F if G is None else sp.csr_matrix(G)
    if t is None:
        raise ValueError("t (the number of partitionings) is required")
    return np.asarray((F @ G.T).toarray()) / float(t)


def kernel_mean_maps(F: sp.spmatrix, groups: Sequence[np.ndarray]) -> np.ndarray:
    """Kernel mean map of every group: ``mean_{y in G_i} Phi(y)``, dense ``(k, t psi)``."""
    import scipy.sparse as sp

    F = sp.csr_matrix(F)
    maps = np.zeros((len(groups), F.shape[1]))
    for i, g in enumerate(groups):
        g = np.asarray(g, dtype=np.int64)
        if g.size == 0:
            raise ValueError(f"group {i} is empty: its kernel mean map is undefined")
        maps[i] = np.asarray(F[g].sum(axis=0)).ravel() / g.size
    return maps


def assign_by_distribution(F: sp.spmatrix, maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step 3: ``argmax_i <Phi(x), Phi(P_{G_i})>`` for every row (not nearest centre).

    The un-normalised inner product of Definition 3.1 and Framework 2 (Sec. 3-4; dividing
    by ``t`` would not change the argmax). Ties, including an all-zero iNNE row, go to the
    lowest cluster index.

    Returns
    -------
    labels : numpy.ndarray of shape (n,)
    scores : numpy.ndarray of shape (n, k)
        The inner products.
    """
    import scipy.sparse as sp

    scores = np.asarray(sp.csr_matrix(F) @ np.asarray(maps, dtype=np.float64).T)
    if scores.shape[1] == 0:
        raise ValueError("no cluster to assign to")
    return scores.argmax(axis=1).astype(np.int64), scores


# ------------------------------------------------------------------------ step 2
def kbcc(F: sp.spmatrix, k: int, tau: float, t: int) -> list[np.ndarray]:
    """κBCC: the ``k`` largest connected components of ``{(x, y): IK(x, y) > tau}``.

    Parameters
    ----------
    F : sparse matrix of shape (s, t psi)
        ``Phi(B)``.
    k : int
        Cores to keep.
    tau : float
        Similarity threshold (strict ``>``, the paper's definition; ``tau >= 1`` gives
        singletons).
    t : int
        Partitionings of the kernel (IK = shared cells / t).

    Returns
    -------
    list of numpy.ndarray
        ``k`` disjoint index arrays into ``B``, largest first (equal sizes: the one with the
        smallest member index first). Points outside them are labelled by step 3.

    Raises
    ------
    ValueError
        With fewer than ``k`` components (the paper leaves this undefined): raise ``tau``
        (fewer pairs pass ``IK > tau``) or ``psi`` (smaller cells, lower similarities).
    """
    n_comp, comp = kbcc_components(F, tau, t)
    if n_comp < k:
        raise ValueError(f"κBCC found {n_comp} component(s) with tau={tau}, fewer than "
                         f"k={k}: raise tau (or psi)")
    return _largest(comp, n_comp, k)


def kbcc_components(F: sp.spmatrix, tau: float, t: int) -> tuple[int, np.ndarray]:
    """Connected components of the thresholded IK graph on ``B``: ``(count, labels)``.

    Blocked: each block of rows is compared with all of ``B`` and its edges are merged
    into the components found so far, so memory stays at one block of similarities (not
    the ``s x s`` graph).
    """
    return kbcc_components_multi(F, [tau], t)[0]


def kbcc_components_multi(F: sp.spmatrix, taus: Sequence[float], t: int
                          ) -> list[tuple[int, np.ndarray]]:
    """:func:`kbcc_components` for several thresholds, sharing the similarity blocks."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    F = sp.csr_matrix(F)
    s = F.shape[0]
    state = [(s, np.arange(s)) for _ in taus]
    for start in range(0, s, _BLOCK // 2):
        sim = ik_similarity(F[start:start + _BLOCK // 2], F, t)
        for j, tau in enumerate(taus):
            r, c = np.nonzero(sim > tau)
            if not len(r):
                continue
            n_comp, comp = state[j]
            a, b = comp[r + start], comp[c]
            graph = sp.csr_matrix((np.ones(len(a), dtype=np.int8), (a, b)),
                                  shape=(n_comp, n_comp))
            n_new, merged = connected_components(graph, directed=False)
            state[j] = (int(n_new), merged[comp])
    return [(int(n), comp) for n, comp in state]


def _largest(comp: np.ndarray, n_comp: int, k: int) -> list[np.ndarray]:
    sizes = np.bincount(comp, minlength=n_comp)
    first = np.full(n_comp, len(comp))
    np.minimum.at(first, comp, np.arange(len(comp)))
    order = np.lexsort((first, -sizes))[:k]
    return [np.flatnonzero(comp == c) for c in order]


def kernel_kmeans(F: sp.spmatrix, k: int, rng: np.random.Generator | int, *,
                  n_init: int = 1, max_iter: int = 100) -> list[np.ndarray]:
    """Kernel k-means with the IK kernel on ``B``: Lloyd k-means on the explicit ``Phi(B)``.

    scikit-learn ``KMeans`` on the sparse features (IK has a finite feature map, so this
    is kernel k-means exactly; the paper's ``A_dist``-κkm, Sec. 8.1). Returns the ``k``
    clusters as index arrays (empty clusters dropped with an error).
    """
    import scipy.sparse as sp
    from sklearn.cluster import KMeans

    F = sp.csr_matrix(F)
    if F.shape[0] < k:
        raise ValueError(f"kernel k-means needs at least k={k} points, got {F.shape[0]}")
    seed = seed_from(np.random.default_rng(rng))
    labels = KMeans(k, n_init=n_init, max_iter=max_iter, random_state=seed).fit(F).labels_
    groups = [np.flatnonzero(labels == c) for c in range(k)]
    if any(g.size == 0 for g in groups):
        raise ValueError("kernel k-means left a cluster empty")
    return groups


# ----------------------------------------------------------------- the protocol
def minmax_scale(X: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> np.ndarray:
    """Global min-max scaling to [0, 1] (a constant feature maps to 0); ``None``: as is."""
    X = np.asarray(X, dtype=np.float64)
    if lo is None or hi is None:
        return X
    span = np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64)
    return (X - lo) / np.where(span > 0, span, 1.0)


def allocate_sample(sizes: Sequence[int], s: int) -> np.ndarray:
    """Proportional allocation ``s_l = s n_l / n`` by largest remainders (sum exactly ``s``).

    Ties of the remainders go to the lower site index; ``s`` is capped at ``n``.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if (sizes < 0).any():
        raise ValueError("site sizes must be >= 0")
    n = int(sizes.sum())
    s = min(int(s), n)
    if n == 0:
        return np.zeros(len(sizes), dtype=np.int64)
    quota = sizes * s / n
    alloc = np.floor(quota).astype(np.int64)
    rest = s - int(alloc.sum())
    order = np.lexsort((np.arange(len(sizes)), -(quota - alloc)))
    alloc[order[:rest]] += 1
    return np.minimum(alloc, sizes)


def kdc_site_sample(X: np.ndarray, size: int, rng: np.random.Generator,
                    lo: np.ndarray | None = None, hi: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Step 1 on a site: ``size`` rows drawn uniformly without replacement, scaled.

    Returns ``(B_l, indices)``; the indices stay on the site. **These are raw rows**: the
    upload is inherent to KDC.
    """
    X = check_data(X, name="site data")
    if not 0 <= size <= len(X):
        raise ValueError(f"sample size must be in [0, {len(X)}], got {size}")
    idx = np.sort(rng.choice(len(X), size=int(size), replace=False))
    return minmax_scale(X[idx], lo, hi), idx


def kdc_coordinator(B: np.ndarray, k: int, *, psi: int = 16, t: int = 100,
                    tau: float = 0.5, step2: str = "kbcc", variant: str = "anne",
                    seed: int = 0, n_init: int = 1
                    ) -> tuple[IsolationKernel, np.ndarray, list[np.ndarray]]:
    """Step 2: the kernel on ``B``, ``k`` initial clusters, their kernel mean maps.

    The kernel is drawn from ``default_rng(seed)``; kernel k-means (``n_init`` starts, as
    scikit-learn's default of one k-means++ start) from ``default_rng([seed, 1])``.

    Returns
    -------
    model : IsolationKernel
    maps : numpy.ndarray of shape (k, t psi)
    groups : list of numpy.ndarray
        The initial clusters (indices into ``B``).
    """
    B = check_data(B, name="pooled sample")
    if step2 not in STEP2:
        raise ValueError(f"step2 must be one of {STEP2}, got {step2!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    model = build_ik(B, psi, t, np.random.default_rng(seed), variant)
    F = feature_map(model, B)
    if step2 == "kbcc":
        groups = kbcc(F, k, tau, t)
    else:
        groups = kernel_kmeans(F, k, np.random.default_rng([seed, 1]), n_init=n_init)
    return model, kernel_mean_maps(F, groups), groups


def initial_cluster_means(B: np.ndarray, groups: Sequence[np.ndarray],
                          lo: np.ndarray | None = None, hi: np.ndarray | None = None
                          ) -> np.ndarray:
    """Input-space mean of every initial cluster (the scaling undone): for logs and plots.

    KDC's model is the kernel and the mean maps; these means do not label anything.
    """
    means = np.stack([np.asarray(B)[np.asarray(g)].mean(axis=0) for g in groups])
    if lo is None or hi is None:
        return means
    span = np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64)
    return means * np.where(span > 0, span, 1.0) + lo


def kdc_site_assign(X: np.ndarray, model: IsolationKernel, maps: np.ndarray,
                    lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    """Step 3 on a site: the label of every local row (they stay on the site)."""
    X = check_data(X, name="site data")
    return _label_rows(X, model, maps, lo, hi)


#: Rows per block of step 3 (memory only: every row is labelled on its own).
_ASSIGN_BLOCK = 65_536


def _label_rows(X: np.ndarray, model: IsolationKernel, maps: np.ndarray,
                lo: np.ndarray | None, hi: np.ndarray | None) -> np.ndarray:
    """Step 3 block by block, so memory does not grow with ``n``."""
    out = np.empty(len(X), dtype=np.int64)
    for start in range(0, len(X), _ASSIGN_BLOCK):
        block = minmax_scale(X[start:start + _ASSIGN_BLOCK], lo, hi)
        out[start:start + len(block)] = assign_by_distribution(feature_map(model, block),
                                                               maps)[0]
    return out


@dataclass
class KDCResult:
    """Outcome of :func:`run_kdc` / :func:`kdc_central`.

    Attributes
    ----------
    labels : list of numpy.ndarray
        Every site's labels (one array for the centralized run).
    model : IsolationKernel
    maps : numpy.ndarray of shape (k, t psi)
    groups : list of numpy.ndarray
        Initial clusters (indices into ``B``).
    B : numpy.ndarray
        The pooled subset (scaled), sites in order.
    sample_sizes : numpy.ndarray
        Rows each site sent.
    lo, hi : numpy.ndarray or None
        The global scaling.
    """

    labels: list[np.ndarray]
    model: IsolationKernel
    maps: np.ndarray
    groups: list[np.ndarray]
    B: np.ndarray
    sample_sizes: np.ndarray
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    extra: dict = field(default_factory=dict)


def _site_rng(seed: int, site: int) -> np.random.Generator:

    return client_rng(seed, site)


def pooled_sample(data: Sequence[np.ndarray], s: int = 10_000, *, normalize: bool = True,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray | None,
                                          np.ndarray | None, list[np.ndarray]]:
    """Rounds 0 and 1 of KDC over in-memory sites: scaling, allocation, the pooled ``B``.

    Returns ``(B, allocation, lo, hi, data)`` (``data`` checked, empty sites as
    ``(0, d)``); site ``l`` samples with ``client_rng(seed, l)``.
    """
    full = [check_data(X, name=f"site {i} data") for i, X in enumerate(data) if len(X)]
    if not full:
        raise ValueError("every site is empty")
    d = full[0].shape[1]
    data = [check_data(X, name=f"site {i} data", n_features=d) if len(X) else np.empty((0, d))
            for i, X in enumerate(data)]
    lo = hi = None
    if normalize:
        lo = np.min([X.min(axis=0) for X in full], axis=0)
        hi = np.max([X.max(axis=0) for X in full], axis=0)
    alloc = allocate_sample([len(X) for X in data], s)
    parts = [kdc_site_sample(X, int(a), _site_rng(seed, i), lo, hi)[0] if len(X) else
             np.empty((0, d)) for i, (X, a) in enumerate(zip(data, alloc, strict=True))]
    return np.vstack(parts), alloc, lo, hi, data


def run_kdc(data: Sequence[np.ndarray], k: int, *, s: int = 10_000, psi: int = 16,
            t: int = 100, tau: float = 0.5, auto: bool = True, step2: str = "kbcc",
            variant: str = "anne", normalize: bool = True, seed: int = 0,
            n_init: int = 1) -> KDCResult:
    """KDC as a loop over in-memory sites (Framework 2), what the Flower run computes.

    The defaults are :class:`KDCOptions`' (the App's and the strategy's): ``auto`` chooses
    ``psi`` and ``tau`` on the pooled sample (:func:`select_parameters`); ``auto=False``
    uses the given ``psi`` and ``tau`` (the paper tuned them per dataset).

    Parameters
    ----------
    data : sequence of array_like of shape (n_l, d)
        Every site's rows (a site may be empty).
    k : int
        Clusters.
    s : int, default 10000
        Total sample size (capped at ``n``), allocated in proportion to the site sizes.
    psi, t, variant : Isolation Kernel parameters.
    tau : float, default 0.5
        κBCC threshold.
    auto : bool, default True
        Choose ``psi`` and ``tau`` without labels (``psi`` and ``tau`` are then unused);
        the choice is in ``extra["selection"]`` and a fallback choice is warned about.
    step2 : {"kbcc", "kernel-kmeans"}, default "kbcc"
    normalize : bool, default True
        Global min-max scaling to [0, 1] (from the sites' per-feature min and max).
    seed : int, default 0
        Site ``l`` samples with ``client_rng(seed, l)``; the coordinator uses ``seed``.
    n_init : int, default 1
        Starts of kernel k-means.
    """
    B, alloc, lo, hi, data = pooled_sample(data, s, normalize=normalize, seed=seed)
    extra: dict = {}
    if auto:
        selection = select_parameters(B, k, t=t, variant=variant, seed=seed)
        psi, tau = selection["psi"], selection["tau"]
        extra["selection"] = selection
        message = selection_warning(selection, k)
        if message:
            warnings.warn(message, RuntimeWarning, stacklevel=2)
    model, maps, groups = kdc_coordinator(B, k, psi=psi, t=t, tau=tau, step2=step2,
                                          variant=variant, seed=seed, n_init=n_init)
    labels = [kdc_site_assign(X, model, maps, lo, hi) if len(X) else
              np.empty(0, dtype=np.int64) for X in data]
    return KDCResult(labels, model, maps, groups, B, alloc, lo, hi, extra)


def kdc_central(X: np.ndarray, B: np.ndarray, k: int, *, psi: int = 16, t: int = 100,
                tau: float = 0.5, step2: str = "kbcc", variant: str = "anne",
                lo: np.ndarray | None = None, hi: np.ndarray | None = None,
                seed: int = 0, n_init: int = 1) -> KDCResult:
    """Framework 1 (centralized) on all rows ``X`` with a given subset ``B`` (scaled).

    With the ``B``, scaling and seed of a :func:`run_kdc` run, the labels equal the sites'
    labels concatenated (property (a), Sec. 5.1).
    """
    model, maps, groups = kdc_coordinator(B, k, psi=psi, t=t, tau=tau, step2=step2,
                                          variant=variant, seed=seed, n_init=n_init)
    labels = _label_rows(check_data(X, name="data"), model, maps, lo, hi)
    return KDCResult([labels], model, maps, groups, np.asarray(B), np.array([len(B)]), lo, hi)


# ------------------------------------------------------------ parameter choice
#: Default search grids of :func:`select_parameters` (the paper gives no ψ or τ,
#: Sec. 7; the group's ψ grid, trimmed; τ in steps of 0.05).
PSI_GRID = (4, 8, 16, 32, 64)
TAU_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))


def _stable_run(B: np.ndarray, k: int, psi: int, t: int, variant: str,
                taus: Sequence[float], min_core: float, seed: int,
                closest: dict | None = None) -> list[float]:
    """The longest run of valid ``tau`` with the same step-3 clustering of ``B``.

    ``closest``, if given, is updated with the ``tau`` whose ``k``-th largest κBCC
    component is the largest (``{"psi", "tau", "core"}``), valid or not.
    """
    from sklearn.metrics import adjusted_rand_score

    need = max(2, math.ceil(min_core * len(B)))
    F = feature_map(build_ik(B, psi, t, np.random.default_rng(seed), variant), B)
    best: list[float] = []
    run: list[float] = []
    first = None
    for tau, (n_comp, comp) in zip(taus, kbcc_components_multi(F, taus, t), strict=True):
        groups = _largest(comp, n_comp, k) if n_comp >= k else []
        core = min(len(g) for g in groups) if groups else 0
        if closest is not None and core > closest.get("core", 0):
            closest.update(psi=psi, tau=tau, core=core)
        if not groups or core < need:
            run, first = [], None
            continue
        labels = assign_by_distribution(F, kernel_mean_maps(F, groups))[0]
        if first is not None and adjusted_rand_score(first, labels) >= 0.95:
            run.append(tau)
        else:
            run, first = [tau], labels
        if len(run) > len(best):
            best = list(run)
    return best


def select_parameters(B: np.ndarray, k: int, *, t: int = 100, variant: str = "anne",
                      psi_grid: Sequence[int] = PSI_GRID, tau_grid: Sequence[float] = TAU_GRID,
                      min_core: float = 0.02, max_points: int = 2000, seed: int = 0) -> dict:
    """Choose ``psi`` and ``tau`` on the pooled subset, without labels (a stability rule).

    The heuristic is ours (the paper tuned against ground truth). For a ``psi``, with the
    kernel ``build_ik(B, psi, t, seed)``:

    1. a ``tau`` of the grid is *valid* when the ``k`` largest κBCC components each hold at
       least ``min_core`` of the rows (and at least 2);
    2. walking up the valid ``tau`` values, a *run* continues while the step-3 labels of
       the rows stay the same clustering (adjusted Rand index >= 0.95 against the run's
       first ``tau``).

    The ``psi`` with the longest run wins (ties: the larger ``psi``) and ``tau`` is its
    run's middle value: a clustering that many thresholds agree on, chosen where it is
    least sensitive to ``tau``. To keep the cost down, the ``psi`` are ranked on at most
    ``max_points`` rows of ``B`` (a seeded subsample); then, best first, the run is
    recomputed on all of ``B`` with the coordinator's own kernel (more rows join more
    cores), and the first ``psi`` with a valid run there gives the answer.

    When no grid point gives ``k`` cores of ``min_core`` (a class smaller than
    ``min_core`` of the rows cannot), the closest one is used: the ``(psi, tau)`` whose
    ``k``-th largest core (on all of ``B``) is the largest, with ``"fallback": True`` and
    ``"smallest-core"`` (rows) in the result; the caller warns. A run that can produce a
    clustering is not failed for it.

    Returns
    -------
    dict
        ``{"psi", "tau", "run", "tried", "fallback"}``; ``run`` is the winning run's ``tau``
        values (on all of ``B``; empty for a fallback), ``tried`` every ``psi``'s run on the
        subsample; a fallback adds ``"smallest-core"`` and ``"min-core-rows"``.

    Raises
    ------
    ValueError
        If no grid point gives ``k`` κBCC components at all.
    """
    B = check_data(B, name="pooled sample")
    taus = sorted(float(x) for x in tau_grid)
    sub = B
    if len(B) > max_points:
        rng = np.random.default_rng([seed, 2])
        sub = B[np.sort(rng.choice(len(B), max_points, replace=False))]
    tried = []
    for psi in psi_grid:
        if psi <= len(sub):
            run = _stable_run(sub, k, int(psi), t, variant, taus, min_core, seed)
            tried.append({"psi": int(psi), "tau": run[len(run) // 2] if run else None,
                          "run": run})
    ranked = sorted((c for c in tried if c["run"]), key=lambda c: (len(c["run"]), c["psi"]),
                    reverse=True)
    for cand in ranked:
        run = (cand["run"] if sub is B else
               _stable_run(B, k, cand["psi"], t, variant, taus, min_core, seed))
        if run:
            return {"psi": cand["psi"], "tau": run[len(run) // 2], "run": run, "tried": tried,
                    "fallback": False}
    closest: dict = {}
    for psi in psi_grid:
        if psi <= len(B):
            _stable_run(B, k, int(psi), t, variant, taus, min_core, seed, closest=closest)
    if not closest:
        raise ValueError(f"no (psi, tau) on the grid gives {k} κBCC components on the "
                         f"{len(B)}-row sample: lower k, or give more rows (sample-size)")
    return {"psi": int(closest["psi"]), "tau": float(closest["tau"]), "run": [],
            "tried": tried, "fallback": True, "smallest-core": int(closest["core"]),
            "min-core-rows": max(2, math.ceil(min_core * len(B)))}


def selection_warning(selection: dict, k: int) -> str | None:
    """The warning of a fallback :func:`select_parameters` choice (``None`` otherwise)."""
    if not selection.get("fallback"):
        return None
    return (f"KDC: no (psi, tau) on the grid gives {k} κBCC cores of at least "
            f"{selection['min-core-rows']} sample rows each; using the closest, "
            f"psi={selection['psi']}, tau={selection['tau']:.2f}, whose smallest core has "
            f"{selection['smallest-core']} rows: a small cluster may be merged into another "
            "(set kdc-auto=false with psi and tau, lower k, or raise sample-size)")


# ------------------------------------------------------------------- baseline
def coreset_kmeans(data: Sequence[np.ndarray], k: int, *, size: int = 1000,
                   seed: int = 0, max_iter: int = 100) -> tuple[np.ndarray, list[np.ndarray],
                                                                  dict]:
    """Coreset-based distributed k-means (Balcan, Ehrlich & Liang 2013; Sec. 8.1).

    Round 1: every site runs local k-means (k-means++, one start) and shares its cost.
    Round 2: site ``i`` draws ``t_i = size cost_i / sum cost`` rows with probability
    proportional to their squared distance to the nearest local centre, weights them
    ``sum cost / (size m_q)``, weights every local centre ``|P_b| - sum of its sampled
    weights``, and sends both. The coordinator runs weighted k-means
    (``KMeans(sample_weight=...)``, ``max_iter`` iterations) on the union; every site labels
    its rows by the nearest centre.

    Returns
    -------
    centres : numpy.ndarray of shape (k, d)
    labels : list of numpy.ndarray
    info : dict
        ``"points-sent"`` per site (coreset rows plus local centres),
        ``"total-weight"`` (the coreset's weights sum to ``n`` by construction) and
        ``"used-weight"``: a local centre's weight can be negative (its sampled rows carry
        more than its cluster's size); scikit-learn's k-means takes no negative weight, so
        those centres are left out and the weights used sum to more than ``n``.
    """
    from scipy.spatial.distance import cdist
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    data = [check_data(X, name=f"site {i} data") for i, X in enumerate(data)]
    local = []
    for X in data:
        km = KMeans(min(k, len(X)), n_init=1, random_state=seed_from(rng)).fit(X)
        d2 = np.min(cdist(X, km.cluster_centers_, "sqeuclidean"), axis=1)
        local.append((km, d2))
    costs = np.array([d2.sum() for _, d2 in local])
    total = float(costs.sum())
    points, weights, sent = [], [], []
    for X, (km, d2), cost in zip(data, local, costs, strict=True):
        t_i = int(round(size * cost / total)) if total > 0 else 0
        chosen = np.empty(0, dtype=np.int64)
        if t_i > 0 and cost > 0:
            chosen = rng.choice(len(X), size=t_i, replace=True, p=d2 / cost)
        w_q = total / (size * d2[chosen]) if len(chosen) else np.empty(0)
        w_b = np.bincount(km.labels_, minlength=len(km.cluster_centers_)).astype(float)
        np.subtract.at(w_b, km.labels_[chosen], w_q)
        points += [X[chosen], km.cluster_centers_]
        weights += [w_q, w_b]
        sent.append(len(chosen) + len(km.cluster_centers_))
    P, W = np.vstack(points), np.concatenate(weights)
    keep = W > 0  # a centre whose sampled points carry all its weight drops out
    km = KMeans(k, n_init=1, max_iter=max_iter, random_state=seed_from(rng)).fit(
        P[keep], sample_weight=W[keep])
    C = km.cluster_centers_
    labels = [cdist(X, C, "sqeuclidean").argmin(axis=1) for X in data]
    return C, labels, {"points-sent": sent, "total-weight": float(W.sum()),
                       "used-weight": float(W[keep].sum())}


@dataclass(frozen=True)
class KDCOptions(Options):
    """Options of KDC (Zhang et al. 2024): run-config keys and message config."""

    k: int = option(16, minimum=1, help="clusters")
    sample_size: int = option(10_000, minimum=1, help="s, rows the sites send in all "
                              "(raw rows: KDC needs them)")
    psi: int = option(16, minimum=2, help="Isolation Kernel: cells per partitioning")
    t: int = option(100, key="ik-t", minimum=1, help="Isolation Kernel: partitionings")
    tau: float = option(0.5, help="kBCC similarity threshold")
    auto: bool = option(True, key="kdc-auto", help="choose psi and tau on the sample without "
                        "labels")
    step2: str = option("kbcc", key="kdc-step2", choices=STEP2, help="the coordinator's "
                        "clustering of the sample")
    variant: str = option("anne", key="ik-variant", choices=VARIANTS, help="Voronoi cells or "
                          "hyperspheres")
    normalize: bool = option(True, help="global min-max scaling")
    return_labels: bool = option(False, help="sites also return their labels (simulation "
                                 "checks)")
