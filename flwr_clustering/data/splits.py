"""The row indices of every client of a split, in NumPy alone (no table library).

One function per partitioner name of :data:`~flwr_clustering.data.registry.PARTITIONERS`
except ``dirichlet`` (Flower Datasets' own ``DirichletPartitioner``). Each returns one index
array per client; the Flower Datasets partitioners of
:mod:`~flwr_clustering.data.partitioners` select exactly these rows (they call these
functions), and :func:`~flwr_clustering.data.registry.split_arrays` indexes the arrays with
them directly, so building the partitions of 100,000 rows costs NumPy indexing, not a round
trip through Arrow. ``tests/test_data_splits.py`` checks that both routes give the same arrays,
bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["assignment_indices", "cluster_wise_indices", "iid_indices", "sorted_chunk_indices"]


def iid_indices(n: int, num_partitions: int, seed: int) -> list[np.ndarray]:
    """Shuffle ``range(n)`` with ``default_rng(seed)``, then cut it into contiguous shards.

    The shards of ``datasets.Dataset.shard(contiguous=True)`` (what
    ``flwr_datasets.partitioner.IidPartitioner`` serves): the first ``n % num_partitions``
    are one row longer, as :func:`numpy.array_split`'s.
    """
    perm = np.random.default_rng(seed).permutation(n)
    return np.array_split(perm, num_partitions)


def assignment_indices(values: np.ndarray, num_partitions: int,
                       column: str = "client") -> list[np.ndarray]:
    """Rows whose value is ``i``, for every ``i < num_partitions``, in data order.

    Raises
    ------
    ValueError
        If a value is not an integer in ``[0, num_partitions)``.
    """
    values = np.asarray(values)
    if values.size and (values.dtype.kind not in "iu" or values.min() < 0
                        or values.max() >= num_partitions):
        raise ValueError(
            f"column {column!r} must hold integers in [0, {num_partitions}); got dtype "
            f"{values.dtype}, range [{values.min()}, {values.max()}]")
    # a stable sort keeps data order within a client: O(n log n), not O(n x clients)
    order = np.argsort(values, kind="stable")
    bounds = np.cumsum(np.bincount(values, minlength=num_partitions))[:-1]
    return np.split(order, bounds)


def cluster_wise_indices(labels: np.ndarray, amounts: Sequence[int]) -> list[np.ndarray]:
    """Client ``i`` gets ``amounts[i]`` whole classes (Garst & Reinders, Fig. 4).

    For each class in sorted order, the clients whose remaining amount is not zero (in
    client order) each take an equal consecutive block of its rows; leftovers are dropped
    (see :class:`~flwr_clustering.data.partitioners.ClusterWisePartitioner`).
    """
    labels = np.asarray(labels)
    remaining = np.array([int(a) for a in amounts], dtype=np.int64)
    parts: list[list[np.ndarray]] = [[] for _ in amounts]
    for cls in np.unique(labels):
        takers = np.flatnonzero(remaining != 0)
        if takers.size == 0:
            break
        rows = np.flatnonzero(labels == cls)
        q = rows.size // takers.size
        for j, c in enumerate(takers):
            parts[c].append(rows[j * q : (j + 1) * q])
        remaining[takers] -= 1
    return [np.concatenate(p) if p else np.empty(0, dtype=np.int64) for p in parts]


def sorted_chunk_indices(X: np.ndarray, y: np.ndarray, num_partitions: int,
                         feature: int = 0) -> list[np.ndarray]:
    """Every class sorted by ``X[:, feature]`` and cut into ``num_partitions`` chunks.

    Client ``i`` gets chunk ``i`` (``numpy.array_split`` sizes) of every class, its rows in
    data order (see :class:`~flwr_clustering.data.partitioners.SortedChunkPartitioner`).
    """
    X, y = np.asarray(X), np.asarray(y)
    if not 0 <= feature < X.shape[1]:
        raise ValueError(f"sort feature {feature} out of range for d={X.shape[1]}")
    parts: list[list[np.ndarray]] = [[] for _ in range(num_partitions)]
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        idx = idx[np.argsort(X[idx, feature], kind="stable")]
        for i, chunk in enumerate(np.array_split(idx, num_partitions)):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]
