"""Shared k-means primitives used by every centroid-based algorithm.

Everything here is plain NumPy / SciPy / scikit-learn and takes its randomness from a
``numpy.random.Generator``. No Flower import, ever (layer 1 of the architecture).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController

__all__ = [
    "BLOCK_BYTES",
    "assign_to_nearest",
    "nearest_labels",
    "nearest_labels_unchecked",
    "check_data",
    "check_features",
    "client_rng",
    "cluster_sums",
    "distance_blocks",
    "local_kmeans",
    "lloyd_step",
    "matched_shift",
    "nearest",
    "row_blocks",
    "seed_from",
    "silhouette_values",
    "squared_distances",
    "weighted_kmeans",
]


def seed_from(rng: np.random.Generator) -> int:
    """Draw an integer seed for a scikit-learn ``random_state`` from ``rng``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The caller's generator; it advances by one draw.

    Returns
    -------
    int
        A seed in ``[0, 2**31 - 1)``.
    """
    return int(rng.integers(0, 2**31 - 1))


def client_rng(seed: int, client_id: int) -> np.random.Generator:
    """The random generator of client ``client_id`` in a run seeded with ``seed``.

    Parameters
    ----------
    seed : int
        The run seed.
    client_id : int
        A stable client identifier (the partition id in simulation).

    Returns
    -------
    numpy.random.Generator
        ``default_rng([seed, client_id])``: independent streams per client, the same in
        the pure loop and under Flower.
    """
    return np.random.default_rng([int(seed), int(client_id)])


#: Work arrays over a client's rows (distances, masks, one-hot products) are built in row
#: blocks of about this many bytes, so a client's memory stays flat in its number of rows
#: (10 million rows cost the data plus a few per-row vectors, not a copy of the data).
BLOCK_BYTES = 1 << 23


def row_blocks(n: int, width: int) -> Iterator[slice]:
    """Slices of ``range(n)`` whose float64 work arrays of ``width`` columns hold ~8 MiB.

    Parameters
    ----------
    n : int
        Number of rows.
    width : int
        Columns of the widest per-row work array (e.g. ``k`` for distances).

    Yields
    ------
    slice
        Consecutive row blocks covering ``[0, n)`` (none when ``n == 0``).
    """
    rows = max(1, BLOCK_BYTES // (8 * max(1, int(width))))
    for start in range(0, int(n), rows):
        yield slice(start, min(int(n), start + rows))


def check_features(X: np.ndarray, n_features: int, *, name: str = "data") -> None:
    """Raise unless the (already validated) data has ``n_features`` columns.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data that :func:`check_data` accepted.
    n_features : int
        The number of features the data must have.
    name : str, default "data"
        How the error message names this array.

    Raises
    ------
    ValueError
        On a feature-count mismatch.
    """
    if X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features but the model has {n_features} "
            "(feature-count mismatch between clients)"
        )


#: The floating types the Lloyd kernels compute in (``dtype=None`` of :func:`check_data`
#: keeps these, anything else becomes float64).
FLOAT_DTYPES = ("float64", "float32")


def check_data(X: np.ndarray, *, name: str = "data", n_features: int | None = None,
               dtype: type | str | None = np.float64, _scan: bool = True) -> np.ndarray:
    """Validate a data matrix and return it as a C-contiguous float array.

    No copy is made of data that is already C-contiguous in the target type, and the
    finiteness scan runs in row blocks (:func:`row_blocks`), so validating 10 million rows
    costs no second copy of them.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The data.
    name : str, default "data"
        How the error messages name this array (e.g. ``"client 3 data"``).
    n_features : int, optional
        The number of features the data must have (e.g. the dimension of the global
        centroids).
    dtype : numpy dtype, str or None, default float64
        The type returned; ``None`` keeps float32 data float32 (half the memory: the
        kernels that accept it compute in it) and makes anything else float64.

    Returns
    -------
    numpy.ndarray
        ``X`` as ``dtype``.

    Raises
    ------
    ValueError
        If ``X`` is not 2-D, holds NaN or inf, or has the wrong number of features.
    """
    if dtype is None:
        dtype = X.dtype if getattr(X, "dtype", None) == np.float32 else np.float64
    X = np.ascontiguousarray(X, dtype=dtype)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_samples, n_features), got shape {X.shape}")
    n_bad, first = 0, None
    for rows in row_blocks(len(X) if _scan else 0, X.shape[1]):
        bad = ~np.isfinite(X[rows])
        if bad.any():
            n_bad += int(bad.sum())
            if first is None:
                first = rows.start + int(np.nonzero(bad)[0][0])
    if n_bad:
        raise ValueError(
            f"{name} contains NaN or inf in {n_bad} value(s) "
            f"(first bad row: {first}); clean or impute it before clustering"
        )
    if n_features is not None:
        check_features(X, n_features, name=name)
    return X


def _checked_pair(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    C = check_data(C, name="centroids")
    if len(C) == 0:
        raise ValueError("centroids must hold at least one row (k >= 1)")
    # float32 data stays float32 (the labels are those of its exact distances all the same)
    return check_data(X, name="data", n_features=C.shape[1], dtype=None), C


def squared_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances ``(n, k)`` from every row of ``X`` to every centroid.

    ``scipy.spatial.distance.cdist`` computes each pair from its difference vector, so a
    row's value does not depend on which other rows share the call (unlike the GEMM
    expansion, whose rounding depends on blocking) and is never negative. This is what
    makes a client's assignments bit-identical to the pooled ones, hence federated
    statistics equal centralized ones exactly. It is also why the row blocks of
    :func:`distance_blocks` give the same values as one call.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Data (may be empty).
    C : array_like of shape (k, d)
        Centroids, ``k >= 1``.

    Returns
    -------
    numpy.ndarray of shape (n, k)
        Squared distances.

    Raises
    ------
    ValueError
        On NaN/inf, wrong dimensions, no centroid, or a feature-count mismatch.
    """
    return squared_distances_unchecked(*_checked_pair(X, C))


def squared_distances_unchecked(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """:func:`squared_distances` of validated float64 arrays.

    No check: for inner loops that validated their inputs once.
    """
    from scipy.spatial.distance import cdist

    return cdist(X, C, metric="sqeuclidean")


def distance_blocks(X: np.ndarray, C: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
    """:func:`squared_distances` one row block at a time (memory flat in ``n``).

    The inputs are validated once, before the first block.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Data (may be empty: no block).
    C : array_like of shape (k, d)
        Centroids, ``k >= 1``.

    Yields
    ------
    rows : slice
        The block's rows of ``X``.
    d2 : numpy.ndarray of shape (rows, k)
        Their squared distances, equal bit for bit to the same rows of
        ``squared_distances(X, C)``.
    """
    yield from _blocks(*_checked_pair(X, C))


def _blocks(X: np.ndarray, C: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
    from scipy.spatial.distance import cdist

    for rows in row_blocks(len(X), len(C)):
        yield rows, cdist(X[rows], C, metric="sqeuclidean")


def nearest(d2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(argmin per row, min per row)`` of a distance matrix (ties: lowest index).

    Parameters
    ----------
    d2 : numpy.ndarray of shape (n, k)
        Squared distances, e.g. from :func:`squared_distances`.

    Returns
    -------
    labels : numpy.ndarray of shape (n,), int64
        Index of the nearest centroid.
    sq_dist : numpy.ndarray of shape (n,)
        Squared distance to it.
    """
    labels = np.argmin(d2, axis=1).astype(np.int64)
    return labels, d2[np.arange(len(d2)), labels]


#: Rows whose two nearest centroids by the GEMM expansion are closer than this many
#: ``(d + 2) * eps * (||x|| + max ||c||)**2`` (``||x||`` bounded by its block's largest
#: ``|value| * sqrt(d)``) are assigned again with exact distances: 4
#: times the sum of both routes' worst-case rounding (the expansion's and cdist's), with
#: ``eps`` of the type the expansion is computed in (float32 data: float32, whose rounding
#: of the centroids is within the same bound).
_GAP_FACTOR = 8.0


def nearest_labels(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``assign_to_nearest(X, C)[0]``, the same labels, at about the cost of ``X @ C.T``.

    The nearest centroid minimises ``||c||^2 - 2 x.c``, one matrix product per row block
    (BLAS, with its threads). Where another centroid's expansion lies within its rounding
    bound of the best (``_GAP_FACTOR``: the dot products' worst-case error and cdist's, with
    a factor 4 to spare), the row is assigned again from :func:`squared_distances` (exact
    ties: lowest index, as there). So every label is the
    one :func:`assign_to_nearest` gives, whatever the row blocks or the BLAS; the
    distances themselves are not computed.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    C : numpy.ndarray of shape (k, d)
        Centroids, ``k >= 1``.

    Returns
    -------
    numpy.ndarray of shape (n,), int64
        Index of the nearest centroid of every row.

    Raises
    ------
    ValueError
        As :func:`check_data` for ``X`` and ``C``. The scan for NaN and inf in ``X`` costs
        no pass of its own: a row holding one is never sure (its bound is NaN or inf), so
        only the rows assigned again are scanned, and a bad one raises
        :func:`check_data`'s error.
    """
    return _nearest_labels(*_label_inputs(X, C), scan=True)


def _label_inputs(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`nearest_labels`'s checks: ``X`` is scanned for NaN and inf only when k = 1."""
    C = check_data(C, name="centroids")
    if len(C) == 0:
        raise ValueError("centroids must hold at least one row (k >= 1)")
    return check_data(X, name="data", n_features=C.shape[1], dtype=None,
                      _scan=len(C) == 1), C


def nearest_labels_unchecked(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """:func:`nearest_labels` of validated arrays (``X`` float64 or float32, ``C`` float64).

    For callers that checked ``X`` once already: the finiteness scan of 2 million rows
    costs a third of the matrix product. Float32 data is expanded in float32 (half the
    memory traffic), against the centroids rounded to float32; the unsure rows are
    assigned again from the exact distances to ``C`` itself, so the labels are those of
    ``assign_to_nearest(X, C)`` in either type.
    """
    return _nearest_labels(X, C, scan=False)


#: A row block of :func:`nearest_labels` (its (k, rows) work arrays, its rows and, in
#: :func:`lloyd_step` of float32 rows, their float64 copy) holds about this many bytes:
#: within the shared cache, and few enough blocks that NumPy's per-call costs (some 20
#: calls a block) stay small (1, 2, 4, 8, 16 MiB measured: 4-8 best in float32 and 64).
_LABEL_BLOCK_BYTES = 1 << 22
#: ... and at least this many rows (many centroids: per-call overheads of tiny blocks).
_LABEL_MIN_ROWS = 256


def _nearest_labels(X: np.ndarray, C: np.ndarray, *, scan: bool,
                    sums: np.ndarray | None = None) -> np.ndarray:
    """Exact labels of ``X`` (:func:`nearest_labels`), and with ``sums`` its cluster sums.

    ``sums`` (a ``(k, d)`` float64 array of zeros) gets ``cluster_sums(X, labels, k)[0]``
    added into it, bit for bit. In one thread the sums of each row block are added while
    the block is in cache (no second pass over ``X``, no float64 copy of float32 data
    beyond one block); with several, the labels run in threads and :func:`cluster_sums`
    follows.
    """
    (n, d), k = X.shape, len(C)
    labels = np.zeros(n, dtype=np.int64)
    if n == 0:
        return labels
    if k == 1:  # (X was scanned by the caller; an inf bound counts as sure)
        if sums is not None:
            sums += cluster_sums(X, labels, k)[0]
        return labels
    ftype = X.dtype if X.dtype == np.float32 else np.dtype(np.float64)
    Cw = np.asarray(C, dtype=ftype)
    cc = np.einsum("ij,ij->i", Cw, Cw)[:, None]
    c_norm = float(np.sqrt(np.max(np.einsum("ij,ij->i", C, C))))
    neg2_c = -2.0 * Cw
    factor = _GAP_FACTOR * float(np.finfo(ftype).eps) * (d + 2)
    # (k, rows) layout: the reductions over the centroids run along axis 0, as k - 1
    # vectorised passes (along axis 1 NumPy loops per row of k values: 2-3x slower)
    # a block's work arrays and rows (and, with the sums, its rows in float64) hold
    # about _LABEL_BLOCK_BYTES
    row_bytes = (ftype.itemsize + 1) * k + ftype.itemsize * d
    if sums is not None and ftype != np.float64:
        row_bytes += 8 * d
    size = min(n, max(_LABEL_MIN_ROWS, _LABEL_BLOCK_BYTES // row_bytes))

    def run(rows: slice, block_sums: _BlockSums | None = None) -> bool:
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf rows: found below
            return _label_blocks(X[rows], C, labels[rows], neg2_c, cc, c_norm, factor,
                                 size, scan, block_sums)

    n_blocks = -(-n // size)
    threads = _label_threads(n_blocks)
    if threads == 1:
        fused = _BlockSums.make(sums, n, d, size, X.dtype)
        bad_rows = run(slice(0, n), fused)
        if fused is not None:
            fused.finish()
    else:
        # the client was given several CPUs (BLAS may use them): contiguous runs of blocks
        # in as many threads, each with single-threaded BLAS (NumPy and BLAS release the
        # GIL); the labels do not depend on the split (the unsure rows are exact)
        cuts = [n_blocks * i // threads * size for i in range(threads)] + [n]
        runs = [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        bad_rows = any(_in_threads(run, runs, threads))
        fused = None
    if bad_rows:  # check_data's own error, with its count and first bad row
        check_data(X, name="data")
    if sums is not None and fused is None:
        sums += cluster_sums(X, labels, k)[0]
    return labels


#: :func:`nearest_labels` runs in threads from this many row blocks on.
_LABEL_THREAD_MIN_BLOCKS = 4


@functools.cache
def _blas_controller():
    """Threadpoolctl's handle on the BLAS libraries NumPy and SciPy loaded (built once)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


def _label_threads(n_blocks: int) -> int:
    """Threads for ``n_blocks`` row blocks: 1 for few, else what BLAS may use now.

    The CPUs the client was given (``OMP_NUM_THREADS``, threadpoolctl limits, Ray's CPU
    count), at most one per two blocks.
    """
    if n_blocks < _LABEL_THREAD_MIN_BLOCKS:
        return 1
    budget = max((int(i["num_threads"]) for i in _blas_controller().info()), default=1)
    return max(1, min(budget, n_blocks // 2))


def _label_blocks(X, C, labels, neg2_c, cc, c_norm, factor, size, scan,
                  block_sums: _BlockSums | None = None) -> bool:
    """The blocks of :func:`_nearest_labels`; whether a row assigned again is not finite."""
    k, ftype = len(C), neg2_c.dtype
    root_d = float(np.sqrt(X.shape[1]))
    # work arrays reused by every block (no page faults); ufuncs called directly (the
    # methods' Python wrappers cost as much as a small block's pass)
    work = np.empty((k, size), dtype=ftype)
    best = np.empty(size, dtype=ftype)
    within = np.empty((k, size), dtype=bool)
    flag = np.empty(size, dtype=bool)
    small = k < 256  # counts and index sums of up to k marks fit in a byte (no overflow)
    if small:
        index = np.arange(k, dtype=np.uint8)
        count, index_sum = np.empty(size, np.uint8), np.empty(size, np.uint8)
    else:
        # one product counts the centroids within the bound (row 0) and sums their
        # indices (row 1): small integers, exact in either type
        count_index = np.vstack([np.ones(k), np.arange(k)]).astype(ftype)
        tally = np.empty((2, size), dtype=ftype)
    bad_rows = False
    for start in range(0, len(X), size):
        block = X[start:start + size]
        m = len(block)
        expansion = np.matmul(neg2_c, block.T, out=work[:, :m])
        expansion += cc
        # a row is sure when one centroid alone lies within the rounding bound of the best;
        # the bound takes the block's largest |value| times sqrt(d) for every row's norm
        # (an upper bound: looser than the row's own norm, but two fast reductions where
        # the norms cost a slow pass; NaN or inf make it NaN or inf)
        x_norm = max(abs(float(_max(block, axis=None))),
                     abs(float(_min(block, axis=None)))) * root_d
        bound = _min(expansion, axis=0, out=best[:m])
        bound += factor * (x_norm + c_norm) ** 2
        lab = labels[start:start + m]
        if small:
            # the marks as bytes: their count and the sum of their indices (a sure row has
            # count 1, and the sum is its label; an unsure row's sum may wrap: not used)
            marks = np.less_equal(expansion, bound, out=within[:, :m]).view(np.uint8)
            counted = np.add.reduce(marks, axis=0, out=count[:m])
            np.copyto(lab, np.einsum("jm,j->m", marks, index, out=index_sum[:m]))
        else:
            marks = np.less_equal(expansion, bound, out=expansion, casting="unsafe")
            tallied = np.matmul(count_index, marks, out=tally[:, :m])
            np.copyto(lab, tallied[1], casting="unsafe")
            counted = tallied[0]
        # NaN or inf in a row makes its bound NaN (no centroid within) or inf (all k)
        unsure = np.not_equal(counted, 1, out=flag[:m]).nonzero()[0]
        if len(unsure):
            rows = block[unsure]
            if scan and not np.isfinite(rows).all():
                bad_rows = True
                continue
            lab[unsure] = squared_distances_unchecked(rows, C).argmin(axis=1)
        if block_sums is not None:
            block_sums.add(block, lab)
    return bad_rows


_max, _min = np.maximum.reduce, np.minimum.reduce


def assign_to_nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Assign every row of ``X`` to its nearest centroid (ties: lowest index).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    C : numpy.ndarray of shape (k, d)
        Centroids, ``k >= 1``.

    Returns
    -------
    labels : numpy.ndarray of shape (n,), int64
        Index of the nearest centroid.
    sq_dist : numpy.ndarray of shape (n,), float64
        Squared Euclidean distance to it.
    """
    X, C = _checked_pair(X, C)
    labels = np.empty(len(X), dtype=np.int64)
    sq_dist = np.empty(len(X), dtype=np.float64)
    for rows, d2 in _blocks(X, C):
        labels[rows], sq_dist[rows] = nearest(d2)
    return labels, sq_dist


_BINCOUNT_MAX_FEATURES = 8
#: :func:`cluster_sums` in one thread adds blocks of rows whose float64 copy holds this.
_SUMS_BLOCK_BYTES = 1 << 21


def cluster_sums(X: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums and counts, the sufficient statistics of a Lloyd step.

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    labels : numpy.ndarray of shape (n,)
        Cluster index of every row, in ``[0, k)``.
    k : int
        Number of clusters.

    Returns
    -------
    sums : numpy.ndarray of shape (k, d)
        ``sums[j] = sum of X[labels == j]``, added in row order (for ``d > 8`` in row
        blocks of :func:`row_blocks`, so beyond one block the rounding differs from one
        sequential sum by float round-off).
    counts : numpy.ndarray of shape (k,), int64
        ``counts[j] = |{i : labels[i] == j}|``.

    Notes
    -----
    Accuracy: every row is added in float64, float32 rows included (their cast to
    float64 is exact), so each entry is a float64 sum of ``n_j = counts[j]`` exact terms
    in some order, and (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
    ed., eq. 4.4, for any order of additions)
    ``|sums[j, f] - sum_i x_if| <= gamma(n_j - 1) * sum_i |x_if|`` with
    ``gamma(m) = m u / (1 - m u)``, ``u = 2**-53``. In float32 the same sums would be
    bounded with ``u = 2**-24`` only (tested: this bound tells them apart).
    :func:`lloyd_step` computes the same sums bit for bit.
    """
    import scipy.sparse as sp

    n, d = X.shape
    if np.shape(labels) != (n,):
        raise ValueError(f"labels must have shape ({n},), got {np.shape(labels)}")
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    if len(counts) > k:
        raise ValueError(f"labels must lie in [0, {k}), got {len(counts) - 1}")
    blocks = list(row_blocks(n, d))
    threads = _label_threads(len(blocks))  # (blocks of 8 MiB: big data only)
    kernel = _csc_matvecs()
    if threads == 1 and kernel is not None:
        # the one-hot product's kernel on short blocks (a float32 block or a strided one
        # copied to float64 in cache): the same additions as the paths below
        X = np.asarray(X)
        sums = np.zeros((k, d))
        size = min(n, max(_LABEL_MIN_ROWS, _SUMS_BLOCK_BYTES // (8 * max(d, 1))))
        copy = X.dtype != np.float64 or not X.flags.c_contiguous
        acc = _BlockSums(sums, n, d, size, copy, kernel)
        labels = np.ascontiguousarray(labels, dtype=np.int64)
        for start in range(0, n, size):
            acc.add(X[start:start + size], labels[start:start + size])
        acc.finish()
        return sums, counts
    if d <= _BINCOUNT_MAX_FEATURES:
        # Both paths add the rows of a cluster in row order, so they agree bit for bit;
        # one bincount per column is the faster one for few features.
        sums = np.empty((k, d))

        def column(j: int) -> None:
            sums[:, j] = np.bincount(labels, weights=X[:, j], minlength=k)

        _in_threads(column, range(d), min(threads, d))
        return sums, counts

    # One-hot products in row blocks (memory flat in n); a block's product adds its rows
    # in row order, and the blocks are added in order (also when the blocks' products ran
    # in threads). Built as CSC (one entry per column, no sorting): the same additions as
    # the CSR product, 2-3x faster to build.
    def block_sums(rows: slice) -> np.ndarray:
        b = rows.stop - rows.start
        onehot = sp.csc_matrix((np.ones(b), labels[rows], np.arange(b + 1)), shape=(k, b))
        return onehot @ X[rows]

    sums = np.zeros((k, d))
    if threads == 1:
        for rows in blocks:
            sums += block_sums(rows)
        return sums, counts
    parts = _in_threads(block_sums, blocks, threads)
    for part in parts:
        sums += part
    return sums, counts


@functools.cache
def _csc_matvecs():
    """SciPy's kernel of ``csc_matrix @ dense``, or None when this SciPy has none.

    ``Y += A @ X``, the rows of ``X`` added in order. Called directly: building a
    ``csc_matrix`` per label block costs more than its product at these sizes. Without
    it the sums follow the labels in :func:`cluster_sums`.
    """
    try:
        from scipy.sparse._sparsetools import csc_matvecs
    except ImportError:  # pragma: no cover - a SciPy without the private module
        return None
    # a private function: checked once on a small case against NumPy, so that a SciPy
    # whose kernel takes other arguments falls back instead of summing wrongly
    rows = np.array([[1.0, 2.0], [3.0, 5.0], [7.0, 11.0]])
    labels = np.array([1, 0, 1], dtype=np.int64)
    out = np.zeros((2, 2))
    try:
        csc_matvecs(2, 3, 2, np.arange(4, dtype=np.int64), labels, np.ones(3),
                    rows.reshape(-1), out.reshape(-1))
    except Exception:  # noqa: BLE001 - any failure means: do not use it
        return None
    if not np.array_equal(out, [[3.0, 5.0], [8.0, 13.0]]):
        return None
    return csc_matvecs


class _BlockSums:
    """:func:`cluster_sums` of the label blocks, added as each block's labels are done.

    The same additions in the same order as :func:`cluster_sums` (the one-hot product's
    kernel, each row added to its cluster's partial sum in row order; the partial sums
    added to the total at the boundaries of :func:`row_blocks`, or once for ``d <= 8``,
    where bincount adds every row in order), so the sums are equal bit for bit. Float32
    rows are cast to float64 (exactly) one label block at a time, while it is in cache.
    """

    def __init__(self, sums: np.ndarray, n: int, d: int, size: int, copy: bool,
                 kernel) -> None:
        self.sums, self.kernel = sums, kernel
        self.part = np.zeros_like(sums)
        self.k, self.d = sums.shape
        self.width = n if d <= _BINCOUNT_MAX_FEATURES else max(1, BLOCK_BYTES // (8 * d))
        self.row, self.flush_at = 0, self.width
        self.cast = np.empty((size, d)) if copy else None
        self.indptr = np.arange(size + 1, dtype=np.int64)
        self.ones = np.ones(size)

    @classmethod
    def make(cls, sums, n, d, size, dtype) -> _BlockSums | None:
        kernel = _csc_matvecs()
        if sums is None or kernel is None:
            return None
        return cls(sums, n, d, size, dtype != np.float64, kernel)

    def add(self, block: np.ndarray, labels: np.ndarray) -> None:
        m = len(block)
        if self.cast is not None:  # float32 rows: cast exactly, in cache (or strided)
            np.copyto(self.cast[:m], block)
            block = self.cast[:m]
        if self.row + m < self.flush_at:  # the usual block: one call, no boundary inside
            self.kernel(self.k, m, self.d, self.indptr[:m + 1], labels, self.ones[:m],
                        block.reshape(-1), self.part.reshape(-1))
            self.row += m
            return
        a = 0
        while a < m:
            b = min(m, a + self.flush_at - self.row)
            self.kernel(self.k, b - a, self.d, self.indptr[:b - a + 1], labels[a:b],
                        self.ones[:b - a], block[a:b].ravel(), self.part.ravel())
            self.row += b - a
            a = b
            if self.row == self.flush_at:
                self.finish()
                self.flush_at += self.width

    def finish(self) -> None:
        self.sums += self.part
        self.part[:] = 0.0


def _in_threads(fn, items, threads: int) -> list:
    """``[fn(item) for item in items]``, in ``threads`` threads (BLAS single-threaded)."""
    if threads == 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    with _blas_controller().limit(limits=1), ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def lloyd_step(
    X: np.ndarray, C: np.ndarray, labels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Lloyd iteration: assign to the nearest centroid, then move centroids to means.

    A centroid that attracts no point stays where it is (its count is 0).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        Data.
    C : numpy.ndarray of shape (k, d)
        Current centroids.
    labels : numpy.ndarray of shape (n,), optional
        The assignment of ``X`` to ``C`` when the caller already has it (it must equal
        ``assign_to_nearest(X, C)[0]``); skips the distance computation.

    Notes
    -----
    Without ``labels``, in one thread, the sums of each row block are added as soon as
    its labels are known, while the block is in cache: one pass over ``X`` (float32
    rows are cast to float64 a block at a time). The labels are those of
    :func:`nearest_labels` (exact) and the sums those of :func:`cluster_sums`, bit for
    bit, within its float64 bound.

    Returns
    -------
    means : numpy.ndarray of shape (k, d)
        Updated centroids.
    counts : numpy.ndarray of shape (k,), int64
        Size of the partition that produced each mean.
    labels : numpy.ndarray of shape (n,)
        The partition (assignment to ``C``).
    """
    if labels is None:
        X, C = _label_inputs(X, C)
        # the sums of each row block are added while it is in cache: the same values as
        # cluster_sums(X, labels, k), bit for bit
        sums = np.zeros((len(C), X.shape[1]))
        labels = _nearest_labels(X, C, scan=True, sums=sums)
        counts = np.bincount(labels, minlength=len(C)).astype(np.int64)
    elif np.shape(labels) != (len(X),):
        raise ValueError(f"labels must have shape ({len(X)},), got {np.shape(labels)}")
    else:
        sums, counts = cluster_sums(X, labels, len(C))
    means = np.array(C, dtype=np.float64, copy=True)
    nz = counts > 0
    means[nz] = sums[nz] / counts[nz, None]
    return means, counts, labels


def matched_shift(C_old: np.ndarray | None, C_new: np.ndarray) -> float:
    """Largest centroid displacement after Hungarian matching of two centroid sets.

    Used as the convergence test of algorithms whose server re-clusters from scratch
    every round, so that cluster indices are not stable (FKM, Garst & Reinders' Algorithm 1
    line 10).

    Parameters
    ----------
    C_old, C_new : numpy.ndarray of shape (k, d)
        Centroids of two consecutive rounds.

    Returns
    -------
    float
        ``max_j ||C_new[j] - C_old[pi(j)]||`` for the optimal matching ``pi``;
        ``inf`` when there is no previous set or the shapes differ.
    """
    from scipy.optimize import linear_sum_assignment

    if C_old is None or C_old.shape != C_new.shape:
        return float("inf")
    cost = ((C_new[:, None, :] - C_old[None, :, :]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].max()))


@functools.cache
def _threadpool_controller() -> ThreadpoolController:
    # Built once: a ThreadpoolController scans the loaded libraries, which costs about as
    # much as a small server k-means. It only controls the libraries loaded when it is built,
    # so scikit-learn's OpenMP runtime (BLAS comes with NumPy) is loaded first.
    import sklearn.cluster  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def weighted_kmeans(
    points: np.ndarray,
    weights: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    seeding: str = "weighted",
    n_init: int = 10,
    max_iter: int = 300,
    tol: float = 1e-4,
) -> np.ndarray:
    """Sample-weighted k-means (Garst & Reinders Eq. 1) over a set of weighted points.

    Parameters
    ----------
    points : numpy.ndarray of shape (m, d)
        The points (for FKM: the local centroids of all clients), ``m >= k``.
    weights : numpy.ndarray of shape (m,)
        Non-negative weights (for FKM: the local cluster sizes).
    k : int
        Number of clusters.
    rng : numpy.random.Generator
        Source of the random state (one draw per call).
    seeding : {"weighted", "unweighted"}
        ``"weighted"`` is scikit-learn >= 1.3: the k-means++ seeding uses the weights.
        ``"unweighted"`` emulates scikit-learn < 1.3, which the paper used: ``n_init``
        unweighted k-means++ seedings, each refined by weighted Lloyd, keeping the run of
        lowest weighted inertia (Garst & Reinders, Sec. 3, Fig. 4).
    n_init, max_iter, tol
        As in :class:`sklearn.cluster.KMeans`.

    Returns
    -------
    numpy.ndarray of shape (k, d)
        The cluster centres.
    """
    from sklearn.cluster import KMeans, kmeans_plusplus

    weights = np.asarray(weights, dtype=np.float64)
    if seeding not in ("weighted", "unweighted"):
        raise ValueError(f"seeding must be 'weighted' or 'unweighted', got {seeding!r}")
    # The server's problem is small (m = sum of k_i points): OpenMP threads cost more to wake
    # than they save, and under Ray they compete with the simulation for the same cores.
    with _threadpool_controller().limit(limits=1):
        if seeding == "weighted":
            km = KMeans(k, n_init=n_init, max_iter=max_iter, tol=tol, random_state=seed_from(rng))
            return km.fit(points, sample_weight=weights).cluster_centers_
        best, best_inertia = None, np.inf
        for _ in range(n_init):
            init, _ = kmeans_plusplus(points, k, random_state=seed_from(rng))
            km = KMeans(k, init=init, n_init=1, max_iter=max_iter, tol=tol)
            km.fit(points, sample_weight=weights)
            if km.inertia_ < best_inertia:
                best, best_inertia = km.cluster_centers_, km.inertia_
        return best


def local_kmeans(
    X: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    init: str | np.ndarray = "k-means++",
    n_init: int = 1,
    max_iter: int = 300,
    tol: float = 1e-4,
    copy_x: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Single-start Lloyd k-means on one client's data (the local step of M-Avg and FeCA).

    scikit-learn's ``KMeans(n_clusters=min(k, n), init=init, n_init=n_init,
    random_state=seed_from(rng))``. One start is the default because the FeCA paper's
    argument relies on Lloyd returning local optima (Xu et al., Sec. 3.1; the paper gives no
    Lloyd settings).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's data, ``n >= 1``.
    k : int
        Number of clusters, ``k >= 1``. A client with fewer than ``k`` points gets
        ``k_eff = n`` clusters (an implementation choice); callers that need exactly ``k`` centroids
        (M-Avg) must check ``n >= k`` themselves (see :func:`mavg_client`).
    rng : numpy.random.Generator
        The client's generator; it advances by one draw (the scikit-learn seed).
    init : {"k-means++", "random"} or numpy.ndarray of shape (k, d), default "k-means++"
        Seeding of :class:`sklearn.cluster.KMeans`; an array is a warm start (one start,
        ``k`` taken from its rows).
    n_init : int, default 1
        Number of starts (the lowest-inertia one is kept).
    max_iter : int, default 300
        Lloyd iterations per start.
    tol : float, default 1e-4
        scikit-learn's tolerance (relative to the mean feature variance).
    copy_x : bool, default True
        scikit-learn's ``copy_x``: ``False`` lets it centre ``X`` in place (and put it
        back, up to round-off) instead of copying it; only for an array the caller owns.

    Returns
    -------
    centroids : numpy.ndarray of shape (k_eff, d)
        ``k_eff = min(k, n)`` centroids.
    labels : numpy.ndarray of shape (n,), int64
        scikit-learn's ``labels_``: the nearest-centroid assignment of ``X`` to the
        returned centroids (its final E-step). The centroids are the means of these
        labels whenever Lloyd stopped because the partition no longer changed.

    Raises
    ------
    ValueError
        If ``X`` is empty, not 2-D or holds NaN/inf, or ``k < 1``.
    """
    from sklearn.cluster import KMeans

    X = check_data(X)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(X) == 0:
        raise ValueError("local k-means needs at least one data point, got n=0")
    if isinstance(init, np.ndarray):
        init = check_data(init, name="initial centroids", n_features=X.shape[1])
        k, n_init = len(init), 1
    km = KMeans(
        n_clusters=min(k, len(X)),
        init=init,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        random_state=seed_from(rng),
        copy_x=copy_x,
    ).fit(X)
    return np.ascontiguousarray(km.cluster_centers_), km.labels_.astype(np.int64)


def silhouette_values(d2: np.ndarray) -> np.ndarray:
    """Simplified silhouette of every row of ``d2`` (Hruschka et al. 2004).

    ``d2`` holds each row's squared distances to the centres; ``a`` and ``b`` are the
    distances to the nearest and second nearest, and the value is ``(b - a) / b``. The one
    definition in the library: the metrics (:func:`flwr_clustering.metrics.
    simplified_silhouette_sum`), the clients' evaluation statistics and the choice of
    ``k`` (:mod:`~flwr_clustering.algorithms.choose_k`) use it.

    An infinite squared distance is a centroid that cannot be measured on the row (a masked
    client's centroid with no value on its observed features): a row with one measurable
    centroid gets 1, the limit of ``(b - a) / b`` as ``b`` grows; a row with none gets 0,
    as with a single centroid. So every value is finite and lies in ``[0, 1]`` (``a <= b``).
    """
    values = np.zeros(len(d2))
    if d2.shape[1] < 2 or len(d2) == 0:
        return values
    two = np.sqrt(np.partition(d2, 1, axis=1)[:, :2])
    a, b = two[:, 0], two[:, 1]  # a <= b, so max(a, b) = b
    both = np.isfinite(b) & (b > 0)
    values[both] = (b[both] - a[both]) / b[both]
    values[np.isfinite(a) & np.isinf(b)] = 1.0
    return values
