"""Feature masks for partially overlapping feature spaces (Maritan & Schenato, Sec. 6).

Every client observes a subset of the ``d`` global features; its rows carry NaN on the
others. This module builds the paper's two mask schemes and the DIM-set look-alike:

- :func:`chain_masks` -- "Assumption 1": one block of features per client, consecutive
  blocks overlapping by a fraction (30 % in the paper), on a seeded permutation of the
  features; no wrap-around;
- :func:`shared_block_masks` -- "Assumption 2": a block shared by every client (10 % of the
  features) plus disjoint private blocks;
- :func:`apply_mask` -- NaN out the unobserved features of a client's rows;
- :func:`dim_lookalike` -- 1024 points, 16 well-separated Gaussian clusters in d = 128
  (the DIM-sets cannot be downloaded here);
- :func:`dim_federation` -- the paper's DIM client split: every cluster goes to a subset of
  the clients (a run of consecutive clients under chain masks, any subset under shared-block
  masks), split evenly at random ("iid") or by the sorted first coordinate ("sorted", biased
  local clusters); :func:`dim_assignment` gives the same dealing as a client per row;
- :func:`style_groups` -- pseudo-writer ids (per-class k-means sub-styles) for the offline
  stand-ins of QMNIST (writers) and HAR (subjects);
- :func:`feature_masks` -- a mask scheme by name (``"none"``, ``"chain"``, ``"shared"``).

No Flower import (layer 2).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "MASK_SCHEMES",
    "apply_mask",
    "chain_masks",
    "dim_assignment",
    "dim_federation",
    "dim_lookalike",
    "feature_masks",
    "shared_block_masks",
    "style_groups",
]


def chain_masks(d: int, n: int, overlap: float = 0.3, *, seed: int = 0) -> np.ndarray:
    """Chain masks: consecutive clients share ``overlap`` of their block (Sec. 6).

    The paper gives the 30% overlap of consecutive sets, not the construction; this one is
    an implementation choice.

    Block size ``s = ceil(d / (n - (n - 1) overlap))``; client ``i``'s block starts at
    ``round(i (d - s) / (n - 1))`` in a seeded random permutation of the features.

    Parameters
    ----------
    d : int
        Number of features.
    n : int
        Number of clients (``>= 1``).
    overlap : float, default 0.3
        Fraction of a block shared with the next one, in ``[0, 1)``.
    seed : int, default 0
        Seed of the feature permutation.

    Returns
    -------
    numpy.ndarray of shape (n, d), bool
        Every feature is observed by at least one client; client ``i`` shares features with
        ``i - 1`` and ``i + 1`` only (when the overlap is positive).
    """
    if n < 1 or d < n:
        raise ValueError(f"need 1 <= n <= d, got n={n}, d={d}")
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"overlap must be in [0, 1), got {overlap}")
    s = min(d, math.ceil(d / (n - (n - 1) * overlap)))
    perm = np.random.default_rng(seed).permutation(d)
    masks = np.zeros((n, d), dtype=bool)
    for i in range(n):
        start = 0 if n == 1 else round(i * (d - s) / (n - 1))
        masks[i, perm[start:start + s]] = True
    return masks


def shared_block_masks(d: int, n: int, shared: float = 0.1, *, seed: int = 0) -> np.ndarray:
    """A feature block shared by all clients plus disjoint private blocks (Sec. 6).

    Parameters
    ----------
    d : int
        Number of features.
    n : int
        Number of clients.
    shared : float, default 0.1
        Fraction of the features every client observes (at least one feature).
    seed : int, default 0
        Seed of the feature permutation.

    Returns
    -------
    numpy.ndarray of shape (n, d), bool
        Every pair of clients overlaps exactly on the shared block.
    """
    n_shared = max(1, round(shared * d))
    if n < 1 or d - n_shared < n:
        raise ValueError(f"need at least one private feature per client: d={d}, n={n}")
    perm = np.random.default_rng(seed).permutation(d)
    masks = np.zeros((n, d), dtype=bool)
    masks[:, perm[:n_shared]] = True
    for i, block in enumerate(np.array_split(perm[n_shared:], n)):
        masks[i, block] = True
    return masks


def apply_mask(X: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Return a copy of ``X`` with NaN on the features outside ``mask``."""
    out = np.array(X, dtype=np.float64, copy=True)
    out[:, ~np.asarray(mask, dtype=bool)] = np.nan
    return out


def dim_lookalike(
    n_samples: int = 1024, d: int = 128, k: int = 16, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A DIM-set look-alike: ``k`` well-separated Gaussian clusters (Sec. 6, DIM-sets).

    Centres uniform in ``[0, 255]^d`` (DIM values are believed to be 0-255 integers), cluster
    standard deviation 5: with d = 128 the nearest centres are about 700 apart, some 140
    standard deviations, so every clustering question is easy, as in the real DIM-sets.

    Returns
    -------
    X : numpy.ndarray of shape (n_samples, d)
    y : numpy.ndarray of shape (n_samples,), int64
    centres : numpy.ndarray of shape (k, d)
    """
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 255, size=(k, d))
    y = np.arange(n_samples) % k
    X = centres[y] + 5.0 * rng.standard_normal((n_samples, d))
    return X, y.astype(np.int64), centres


MASK_SCHEMES = ("none", "chain", "shared")


def feature_masks(
    scheme: str, d: int, n: int, *, overlap: float = 0.3, shared: float = 0.1, seed: int = 0
) -> np.ndarray | None:
    """Return the masks of a scheme by name.

    ``"chain"`` (:func:`chain_masks`), ``"shared"`` (:func:`shared_block_masks`) or
    ``"none"`` (every client sees everything: ``None``).
    """
    if scheme == "none":
        return None
    if scheme == "chain":
        return chain_masks(d, n, overlap, seed=seed)
    if scheme == "shared":
        return shared_block_masks(d, n, shared, seed=seed)
    raise ValueError(f"unknown feature mask {scheme!r}; choose from {', '.join(MASK_SCHEMES)}")


def style_groups(X: np.ndarray, y: np.ndarray, n_groups: int, *, seed: int = 0) -> np.ndarray:
    """Pseudo-writer ids for data without writer or subject ids (stand-in for QMNIST/HAR).

    Every class is split by k-means into ``n_groups`` sub-styles (scikit-learn ``KMeans``,
    ``n_init=10``); sub-style ``j`` of class ``c`` goes to group ``perm_c[j]`` with a
    seeded permutation per class. So every group holds every class (as a writer or a
    subject holds every digit or activity), but only one style of it: the local clusters
    are biased, as under Maritan & Schenato's Assumption 2.

    Returns
    -------
    numpy.ndarray of shape (n,), int64
        Group of every row, in ``[0, n_groups)``.
    """
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    group = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        if len(idx) < n_groups:
            raise ValueError(f"class {c} has {len(idx)} rows, fewer than {n_groups} groups")
        sub = KMeans(n_groups, n_init=10, random_state=seed).fit_predict(X[idx])
        group[idx] = rng.permutation(n_groups)[sub]
    return group


def dim_assignment(
    X: np.ndarray,
    y: np.ndarray,
    n: int,
    *,
    scheme: str = "chain",
    split: str = "iid",
    holders: tuple[int, int] = (3, 6),
    seed: int = 0,
) -> np.ndarray:
    """The client of every row under the paper's DIM dealing (see :func:`dim_federation`).

    A draw that leaves a client without rows is redrawn with the same generator (the
    paper's participants all hold data), so seeds whose first draw covers every client
    are unaffected. With fewer than ``holders[0]`` clients every cluster goes to all of
    them (the same draws as for ``holders=(n, ...)``); ``n >= holders[0]`` is the paper's
    dealing, unchanged.
    """
    if scheme not in ("chain", "shared") or split not in ("iid", "sorted"):
        raise ValueError(f"scheme must be chain|shared and split iid|sorted, got {scheme}, {split}")
    if n < 1:
        raise ValueError(f"need at least 1 client, got {n}")
    holders = (min(holders[0], n), holders[1])
    rng = np.random.default_rng(seed)
    for _ in range(100):  # redraw until every client holds some rows (same generator)
        client = _deal(X, y, n, scheme, split, holders, rng)
        if len(np.unique(client)) == n:
            return client
    raise ValueError(f"could not give each of {n} clients a cluster with holders={holders}")


def _deal(X: np.ndarray, y: np.ndarray, n: int, scheme: str, split: str,
          holders: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """One draw of the DIM dealing (see :func:`dim_assignment`)."""
    client = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        m = int(rng.integers(holders[0], min(holders[1], n) + 1))
        if scheme == "chain":
            start = int(rng.integers(0, n - m + 1))
            who = list(range(start, start + m))
        else:
            who = sorted(rng.choice(n, size=m, replace=False).tolist())
        if split == "sorted":
            idx = idx[np.argsort(X[idx, 0], kind="stable")]
        else:
            idx = rng.permutation(idx)
        for i, chunk in zip(who, np.array_split(idx, m), strict=True):
            client[chunk] = i
    return client


def dim_federation(
    X: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    *,
    scheme: str = "chain",
    split: str = "iid",
    holders: tuple[int, int] = (3, 6),
    seed: int = 0,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Deal every cluster to a subset of clients and mask their rows (Sec. 6, DIM-sets).

    Parameters
    ----------
    X, y : numpy.ndarray
        Complete data and true labels.
    masks : numpy.ndarray of shape (n, d), bool
        Client masks.
    scheme : {"chain", "shared"}, default "chain"
        ``"chain"``: a cluster goes to a run of consecutive clients (its overlap graph stays
        connected); ``"shared"``: to any random subset.
    split : {"iid", "sorted"}, default "iid"
        Within a cluster: a random even split, or contiguous chunks of the points sorted by
        the first coordinate (biased local clusters).
    holders : (int, int), default (3, 6)
        Range of the number of clients holding a cluster (inclusive; with fewer clients
        than ``holders[0]``, every cluster goes to all of them).
    seed : int, default 0
        Seed of the dealing.

    Returns
    -------
    list of (numpy.ndarray, numpy.ndarray)
        Per client: masked rows (NaN outside its mask) and true labels.
    """
    client = dim_assignment(X, y, len(masks), scheme=scheme, split=split, holders=holders,
                            seed=seed)
    return [(apply_mask(X[client == i], masks[i]), y[client == i]) for i in range(len(masks))]
