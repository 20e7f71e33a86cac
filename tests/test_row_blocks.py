"""Row blocks (memory flat in a client's rows): blocked results equal the one-block ones.

Every per-row quantity (distances, labels, silhouettes) is computed per row, so it is
identical whatever the blocking; the exactly rounded sums (``math.fsum``: SSE, silhouette
sum) are identical too. Sums of rows added block by block (cluster sums for ``d > 8``, the
total sum of squares, a masked client's residuals) differ from one block by float
round-off only: asserted to 1e-12 relative. The blocks are made small here by patching
``BLOCK_BYTES``, so a few hundred rows span many blocks.
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_clustering.algorithms import lloyd
from flwr_clustering.algorithms.fkm import fkm_client_update
from flwr_clustering.algorithms.masked import masked_nearest, masked_squared_distances
from flwr_clustering.algorithms.masked_federated import masked_client_update
from flwr_clustering.clients.masked import MaskedFederatedClient
from flwr_clustering.evaluation import local_evaluation_stats

EXACT = ("num-examples", "sse", "silhouette-sum", "cluster-counts", "contingency", "ari-local")


@pytest.fixture
def data():
    rng = np.random.default_rng(11)
    centres = rng.normal(scale=5.0, size=(6, 12))
    y = rng.integers(0, 6, size=997)
    X = centres[y] + rng.normal(size=(997, 12))
    C = X[[3, 100, 200, 300, 400, 500, 600]].copy()
    return X, y, C


def _blocked(monkeypatch, fn, *args, **kwargs):
    """``fn`` with blocks of 3 rows of 12 columns (8 * 12 * 3 bytes)."""
    with monkeypatch.context() as m:
        m.setattr(lloyd, "BLOCK_BYTES", 8 * 12 * 3)
        assert len(list(lloyd.row_blocks(997, 12))) == 333
        return fn(*args, **kwargs)


def test_row_blocks_cover_the_rows_once():
    for n, width in ((0, 4), (1, 4), (10, 1 << 30), (1 << 20, 16)):
        blocks = list(lloyd.row_blocks(n, width))
        covered = np.concatenate([np.arange(b.start, b.stop) for b in blocks]) if blocks \
            else np.zeros(0, dtype=int)
        np.testing.assert_array_equal(covered, np.arange(n))
        assert all(b.stop > b.start for b in blocks)
    # ~8 MiB of float64 per block: 65,536 rows of 16 columns
    assert lloyd.row_blocks(10**7, 16).__next__() == slice(0, 65536)


def test_assignment_and_evaluation_are_identical_in_blocks(monkeypatch, data):
    X, y, C = data
    labels, dist = lloyd.assign_to_nearest(X, C)
    b_labels, b_dist = _blocked(monkeypatch, lloyd.assign_to_nearest, X, C)
    np.testing.assert_array_equal(b_labels, labels)
    np.testing.assert_array_equal(b_dist, dist)
    d2 = lloyd.squared_distances(X, C)
    np.testing.assert_array_equal(np.vstack([b for _, b in lloyd.distance_blocks(X, C)]), d2)

    whole = local_evaluation_stats(X, C, y, 6)
    blocked = _blocked(monkeypatch, local_evaluation_stats, X, C, y, 6)
    assert set(whole) == set(blocked)
    for key in EXACT:
        np.testing.assert_array_equal(blocked[key], whole[key], err_msg=key)
    for key in ("sum-x", "sst-local", "cluster-residuals"):
        np.testing.assert_allclose(blocked[key], whole[key], rtol=1e-12, atol=1e-9,
                                   err_msg=key)


def test_fkm_client_step_in_blocks_equals_one_block(monkeypatch, data):
    X, _, C = data
    whole = fkm_client_update(X, C, local_iters=2)
    blocked = _blocked(monkeypatch, fkm_client_update, X, C, local_iters=2)
    np.testing.assert_array_equal(blocked.counts, whole.counts)
    np.testing.assert_array_equal(blocked.index, whole.index)
    np.testing.assert_allclose(blocked.means, whole.means, rtol=1e-12)


def test_check_data_finds_the_first_bad_row_across_blocks(monkeypatch, data):
    X = data[0].copy()
    X[[500, 700], [3, 4]] = [np.inf, np.nan]
    with pytest.raises(ValueError, match=r"in 2 value\(s\) \(first bad row: 500\)"):
        _blocked(monkeypatch, lloyd.check_data, X)


def test_masked_client_in_blocks_equals_one_block(monkeypatch, data):
    X, y, C = data
    X = X.copy()
    X[:, [2, 7]] = np.nan  # a client that does not observe features 2 and 7
    G = C.copy()
    G[1, 5] = np.nan  # a centroid without a value on an observed feature
    np.testing.assert_array_equal(
        _blocked(monkeypatch, masked_nearest, X, G),
        np.argmin(masked_squared_distances(X, G), axis=1))
    client = MaskedFederatedClient(X, y, client_id=0)
    whole = client.local_stats(G, {"n-classes": 6})
    blocked = _blocked(monkeypatch, client.local_stats, G, {"n-classes": 6})
    for key in ("num-examples", "sse", "silhouette-sum", "cluster-counts", "contingency"):
        np.testing.assert_array_equal(blocked[key], whole[key], err_msg=key)
    np.testing.assert_allclose(blocked["cluster-residuals"], whole["cluster-residuals"],
                               rtol=1e-12, atol=1e-9)
    up = masked_client_update(X, G, local_iterations=3)
    b_up = _blocked(monkeypatch, masked_client_update, X, G, local_iterations=3)
    np.testing.assert_array_equal(b_up.counts, up.counts)
    np.testing.assert_allclose(b_up.sums, up.sums, rtol=1e-12)
