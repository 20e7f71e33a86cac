"""``nearest_labels`` (matrix-product expansion + exact re-check) gives cdist's labels."""

import math

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from flwr_clustering.algorithms import lloyd
from flwr_clustering.algorithms.lloyd import assign_to_nearest, lloyd_step, nearest_labels


def _exact(X, C):
    return np.argmin(cdist(X, C, "sqeuclidean"), axis=1)


def _cases():
    rng = np.random.default_rng(0)
    for n, d, k in [(5000, 1, 3), (5000, 2, 16), (3000, 16, 16), (1000, 64, 10), (200, 3, 1)]:
        X = rng.normal(size=(n, d))
        yield f"gauss-{n}x{d}-k{k}", X, X[rng.choice(n, k, replace=False)].copy()
    grid = rng.integers(-3, 4, size=(4000, 3)).astype(np.float64)
    # exact ties everywhere: duplicated centroids and points halfway between integer centres
    yield "ties", grid, np.vstack([grid[:6], grid[:6], grid[:6] + 1.0])
    far = rng.normal(size=(3000, 4)) * 1e3 + 1e9  # the expansion cancels catastrophically
    yield "offset", far, far[:12] + rng.normal(size=(12, 4)) * 1e-3
    tiny = rng.normal(size=(2000, 5)) * 1e-150
    yield "tiny", tiny, tiny[:7].copy()
    mid = (grid[:1] + grid[1:2]) / 2  # a row exactly between two centroids
    yield "halfway", np.repeat(mid, 50, axis=0), np.vstack([grid[1:2], grid[:1]])


@pytest.mark.parametrize("name,X,C", list(_cases()), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_labels_equal_cdist_argmin_in_one_block_and_in_many(monkeypatch, name, X, C):
    expected = _exact(X, C)
    np.testing.assert_array_equal(nearest_labels(X, C), expected)
    np.testing.assert_array_equal(assign_to_nearest(X, C)[0], expected)
    with monkeypatch.context() as m:  # blocks of 3 rows, the last one short
        m.setattr(lloyd, "BLOCK_BYTES", 8 * 3 * max(len(C), X.shape[1]))
        m.setattr(lloyd, "_LABEL_BLOCK_BYTES", 8 * 3 * len(C))
        m.setattr(lloyd, "_LABEL_MIN_ROWS", 1)
        np.testing.assert_array_equal(nearest_labels(X, C), expected)
        np.testing.assert_array_equal(lloyd.nearest_labels_unchecked(X, C), expected)


def test_the_exact_recheck_decides_ties_and_near_ties():
    """Rows whose two nearest centroids are within rounding go to cdist; a halfway row
    takes the lower index, as argmin does."""
    C = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 1e-9]])
    X = np.array([[1.0, 0.0], [1.0, 5e-10], [1.0 + 1e-15, 0.0], [0.5, 0.0]])
    np.testing.assert_array_equal(nearest_labels(X, C), _exact(X, C))


def test_lloyd_step_is_unchanged_and_empty_data_gives_no_label():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(2000, 8))
    C = X[:5].copy()
    means, counts, labels = lloyd_step(X, C)
    np.testing.assert_array_equal(labels, _exact(X, C))
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=5))
    np.testing.assert_allclose(means, [X[labels == j].mean(axis=0) for j in range(5)],
                               rtol=1e-13)
    assert nearest_labels(np.zeros((0, 8)), C).shape == (0,)
    with pytest.raises(ValueError, match="NaN or inf"):
        nearest_labels(np.full((3, 8), np.nan), C)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nan_or_inf_anywhere_raises_check_datas_error_without_a_scan_of_its_own(
        monkeypatch, bad, dtype):
    """nearest_labels scans only the rows it assigns again: every non-finite row must be
    among them, whatever the signs of the centroids (a row of -inf against positive
    centroids has +inf everywhere: all k within an inf bound), the block or k."""
    rng = np.random.default_rng(7)
    for k, signs in [(2, 1.0), (5, 1.0), (5, -1.0), (16, 0.0)]:
        C = np.abs(rng.normal(size=(k, 4))) * signs
        X = rng.normal(size=(700, 4)).astype(dtype)
        X[[3, 300, 699], [0, 2, 3]] = bad
        X[450] = bad  # a whole row
        with monkeypatch.context() as m:
            m.setattr(lloyd, "_LABEL_MIN_ROWS", 1)
            m.setattr(lloyd, "_LABEL_BLOCK_BYTES", 8 * 64 * k)
            for call in (nearest_labels, lloyd_step):
                with pytest.raises(ValueError, match=r"NaN or inf in 7 value\(s\) "
                                                     r"\(first bad row: 3\)"):
                    call(X, C)
    with pytest.raises(ValueError, match="first bad row: 1"):  # k = 1: scanned up front
        nearest_labels(np.array([[0.0], [bad]], dtype=dtype), np.zeros((1, 1)))


def test_threads_give_the_same_labels_and_sums_bit_for_bit(monkeypatch):
    """With several CPUs the label blocks and the sums' blocks run in threads; the result
    must not depend on it (labels exact, block sums added in block order)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(5000, 12)) * 10
    X[::7] = X[1::7]  # exact ties between rows
    C = X[rng.choice(5000, 9, replace=False)].copy()
    C[3] = C[2]  # a duplicated centroid
    serial_labels = nearest_labels(X, C)
    serial_sums = lloyd.cluster_sums(X, serial_labels, 9)
    narrow_sums = lloyd.cluster_sums(X[:, :3], serial_labels, 9)  # the bincount path
    with monkeypatch.context() as m:
        m.setattr(lloyd, "_LABEL_MIN_ROWS", 1)
        m.setattr(lloyd, "_LABEL_BLOCK_BYTES", 8 * 9 * 97)  # 52 blocks of 97 rows
        m.setattr(lloyd, "BLOCK_BYTES", 8 * 12 * 300)  # 17 sum blocks
        serial_small = lloyd.cluster_sums(X, serial_labels, 9)
        m.setattr(lloyd, "_label_threads", lambda n_blocks: 3)
        np.testing.assert_array_equal(nearest_labels(X, C), serial_labels)
        np.testing.assert_array_equal(nearest_labels(X, C), _exact(X, C))
        threaded = lloyd.cluster_sums(X, serial_labels, 9)
        threaded_narrow = lloyd.cluster_sums(X[:, :3], serial_labels, 9)
    for ours, theirs in ((threaded, serial_small), (threaded_narrow, narrow_sums)):
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_allclose(serial_small[0], serial_sums[0], rtol=1e-12)


def _gamma_bound(X, labels, k):
    """Per cluster and feature, gamma_{n_j - 1} * sum |x| (u = 2**-53): how far any float64
    summation of the rows' exact values may be from their true sum (Higham, eq. 4.4)."""
    u = 2.0 ** -53
    counts = np.bincount(labels, minlength=k)
    abs_sums = np.array([np.abs(X[labels == j].astype(np.float64)).sum(axis=0)
                         for j in range(k)])
    steps = np.maximum(counts - 1, 0)[:, None]
    return steps * u / (1 - steps * u) * abs_sums


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [3, 12])  # the bincount path of cluster_sums and the sparse one
def test_lloyd_step_fuses_the_sums_into_the_label_blocks_bit_for_bit(monkeypatch, dtype, d):
    """lloyd_step adds each label block's sums while the block is in cache: its labels are
    the exact ones and its means are cluster_sums' bit for bit, whatever the blocks (the
    sums' block boundaries falling inside label blocks), in either type; the sums are
    within the float64 summation bound of the exact sums (float32 rows summed in float32
    would be off by about 1e-3 here, far outside it)."""
    rng = np.random.default_rng(d)
    k = 7
    centres = rng.normal(size=(k, d)) * 4 + 1e4  # a large offset: float32 sums would drift
    X = (centres[rng.integers(k, size=6000)] + rng.normal(size=(6000, d))).astype(dtype)
    C = centres + rng.normal(size=(k, d)) * 0.1
    half = ((C[0] + C[1]) / 2 + rng.normal(size=(300, d)) * 1e-7).astype(dtype)  # near-ties
    X = np.vstack([X, half])
    exact = _exact(X.astype(np.float64), C)
    for block_bytes, sum_rows in [(None, None), (8 * 97 * (k + d), 250), (8 * 3 * k, 7)]:
        with monkeypatch.context() as m:
            m.setattr(lloyd, "_label_threads", lambda n_blocks: 1)  # the fused blocks
            if block_bytes:
                m.setattr(lloyd, "_LABEL_MIN_ROWS", 1)
                m.setattr(lloyd, "_LABEL_BLOCK_BYTES", block_bytes)
                m.setattr(lloyd, "BLOCK_BYTES", 8 * d * sum_rows)
            means, counts, labels = lloyd_step(X, C)
            np.testing.assert_array_equal(labels, exact)
            ref_means, ref_counts, _ = lloyd_step(X, C, exact)  # the cluster_sums path
            np.testing.assert_array_equal(counts, ref_counts)
            np.testing.assert_array_equal(means, ref_means)
            sums = np.zeros((k, d))
            lloyd._nearest_labels(np.ascontiguousarray(X), C, scan=True, sums=sums)
            np.testing.assert_array_equal(sums, lloyd.cluster_sums(X, exact, k)[0])
            m.setattr(lloyd, "_csc_matvecs", lambda: None)  # bincount / csc_matrix sums
            np.testing.assert_array_equal(sums, lloyd.cluster_sums(X, exact, k)[0])
            np.testing.assert_array_equal(lloyd_step(X, C)[0], means)
    true = np.array([[math.fsum(X[exact == j, f].astype(np.float64)) for f in range(d)]
                     for j in range(k)])  # correctly rounded: within u |true| of the truth
    bound = _gamma_bound(X, exact, k) + 2.0 ** -53 * np.abs(true)
    assert np.all(np.abs(sums - true) <= bound)
    # the bound is tight enough to tell: the same rows summed in float32 break it
    in_float32 = np.array([X[exact == j].astype(np.float32).sum(axis=0, dtype=np.float32)
                           for j in range(k)])
    assert not np.all(np.abs(in_float32 - true) <= bound)


def test_lloyd_step_in_threads_gives_the_serial_sums(monkeypatch):
    """With several CPUs the labels run in threads and cluster_sums follows: the same
    means bit for bit as the fused serial step."""
    rng = np.random.default_rng(5)
    X = (rng.normal(size=(4000, 10)) * 10).astype(np.float32)
    C = X[rng.choice(4000, 6, replace=False)].astype(np.float64)
    with monkeypatch.context() as m:
        m.setattr(lloyd, "_LABEL_MIN_ROWS", 1)
        m.setattr(lloyd, "_LABEL_BLOCK_BYTES", 8 * 6 * 101)
        m.setattr(lloyd, "_label_threads", lambda n_blocks: 1)
        serial = lloyd_step(X, C)
        m.setattr(lloyd, "_label_threads", lambda n_blocks: 3)
        threaded = lloyd_step(X, C)
    for ours, theirs in zip(threaded, serial, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(serial[2], _exact(X.astype(np.float64), C))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [2, 8, 9, 30])
def test_cluster_sums_kernel_adds_as_bincount_and_the_sparse_product(monkeypatch, dtype, d):
    """In one thread cluster_sums calls the one-hot product's kernel on short blocks
    (float32 or strided rows copied to float64 in cache): the same sums, bit for bit, as
    its bincount (d <= 8) and csc_matrix (d > 8) paths, across their block boundaries."""
    rng = np.random.default_rng(d)
    X = (rng.normal(size=(5000, 2 * d)) * 3 + 1e3).astype(dtype)[:, ::2]  # strided
    labels = rng.integers(6, size=5000)
    labels[:50] = 5
    with monkeypatch.context() as m:
        m.setattr(lloyd, "_label_threads", lambda n_blocks: 1)
        m.setattr(lloyd, "BLOCK_BYTES", 8 * d * 333)  # sums' blocks of 333 rows (d > 8)
        m.setattr(lloyd, "_LABEL_MIN_ROWS", 1)
        m.setattr(lloyd, "_SUMS_BLOCK_BYTES", 8 * d * 100)  # kernel blocks of 100 rows
        ours, counts = lloyd.cluster_sums(X, labels, 7)
        m.setattr(lloyd, "_csc_matvecs", lambda: None)
        theirs, their_counts = lloyd.cluster_sums(X, labels, 7)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(counts, their_counts)
    assert counts[6] == 0 and not ours[6].any()
    np.testing.assert_allclose(ours[5], X[labels == 5].astype(np.float64).sum(axis=0),
                               rtol=1e-12)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 5\), got 5"):
        lloyd.cluster_sums(X, labels, 5)
    with pytest.raises(ValueError, match=r"labels must have shape \(5000,\), got \(4999,\)"):
        lloyd.cluster_sums(X, labels[1:], 7)  # (the kernel would read past their end)


def test_scipy_s_private_kernel_is_checked_before_use(monkeypatch):
    """A SciPy whose private kernel sums otherwise (or takes other arguments) is not used."""
    import scipy.sparse._sparsetools as tools

    from flwr_clustering.algorithms import lloyd

    def wrong(k, m, d, indptr, labels, data, x, y):
        y[:] = 1.0

    def other_arguments(*args):
        raise TypeError("csc_matvecs() takes other arguments")

    for kernel in (wrong, other_arguments):
        monkeypatch.setattr(tools, "csc_matvecs", kernel)
        lloyd._csc_matvecs.cache_clear()
        assert lloyd._csc_matvecs() is None
        X = np.random.default_rng(0).normal(size=(50, 3))
        labels = np.arange(50) % 4
        np.testing.assert_allclose(lloyd.cluster_sums(X, labels, 4)[0],
                                   [X[labels == j].sum(0) for j in range(4)], rtol=1e-12)
    monkeypatch.undo()
    lloyd._csc_matvecs.cache_clear()
    assert lloyd._csc_matvecs() is not None
