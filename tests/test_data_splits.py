"""The NumPy splits equal the Flower Datasets partitioners' partitions, bit for bit.

``split_arrays`` indexes the arrays with the rows of :mod:`flwr_clustering.data.splits`
(and, for ``dirichlet``, the rows Flower Datasets' ``DirichletPartitioner`` picks from the
labels); the reference here is the route it replaced: the arrays turned into a
``datasets.Dataset``, partitioned by the Flower Datasets partitioners and turned back.
"""

import subprocess
import sys

import numpy as np
import pytest
from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

from flwr_clustering.data.masks import feature_masks
from flwr_clustering.data.partitioners import (
    AssignmentPartitioner,
    ClusterWisePartitioner,
    FeatureMaskPartitioner,
    SortedChunkPartitioner,
    partition_arrays,
)
from flwr_clustering.data.registry import (
    DIRICHLET_MIN_PARTITION_SIZE,
    _parse_amounts,
    load_dataset,
    load_partition,
    split_arrays,
)
from flwr_clustering.data.splits import assignment_indices


def _through_flower_datasets(X, y, n, partitioner, *, seed=0, alpha=0.5, amounts=None,
                             natural=None, masks=None):
    extra = None
    if partitioner == "iid":
        perm = np.random.default_rng(seed).permutation(len(X))
        X, y = X[perm], y[perm]
        part = IidPartitioner(n)
    elif partitioner == "dirichlet":
        part = DirichletPartitioner(num_partitions=n, partition_by="label", alpha=alpha,
                                    min_partition_size=DIRICHLET_MIN_PARTITION_SIZE,
                                    self_balancing=False, shuffle=True, seed=seed)
    elif partitioner == "natural":
        part, extra = AssignmentPartitioner(n), {"client": natural}
    elif partitioner == "cluster-wise":
        part = ClusterWisePartitioner(_parse_amounts(amounts, n))
    else:
        part = SortedChunkPartitioner(n)
    if masks is not None:
        part = FeatureMaskPartitioner(part, masks)
    return partition_arrays(X, y, part, n, extra=extra)


def _assert_same(parts, reference):
    assert len(parts) == len(reference)
    for (X_i, y_i), (R_i, r_i) in zip(parts, reference, strict=True):
        assert X_i.dtype == R_i.dtype == np.float64 and y_i.dtype == r_i.dtype == np.int64
        assert X_i.shape == R_i.shape and X_i.flags.c_contiguous
        np.testing.assert_array_equal(X_i, R_i)  # NaN in the same places (masks) too
        np.testing.assert_array_equal(y_i, r_i)


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet", "natural", "cluster-wise",
                                         "sorted"])
@pytest.mark.parametrize("n", [5, 37])
def test_every_partitioner_gives_the_flower_datasets_partitions_bit_for_bit(partitioner, n):
    X, y, natural = load_dataset("garst-grid", ppc=60, beta=1.0)
    natural = np.random.default_rng(1).integers(0, n, len(X)) if n != 5 else natural
    kw = dict(seed=3, natural=natural, cluster_amounts=None)
    parts = split_arrays(X, y, n, partitioner=partitioner, dirichlet_alpha=2.0, **kw)
    reference = _through_flower_datasets(X, y, n, partitioner, seed=3, alpha=2.0,
                                         natural=natural)
    _assert_same(parts, reference)


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet", "sorted"])
def test_masked_splits_equal_the_feature_mask_partitioner(partitioner):
    X, y, _ = load_dataset("wine")
    masks = feature_masks("chain", X.shape[1], 4, overlap=0.3, shared=0.1, seed=0)
    parts = split_arrays(X, y, 4, partitioner=partitioner, seed=0, masks=masks)
    _assert_same(parts, _through_flower_datasets(X, y, 4, partitioner, seed=0, masks=masks))
    assert all(np.isnan(X_i[:, ~m]).all() and not np.isnan(X_i[:, m]).any()
               for (X_i, _), m in zip(parts, masks, strict=True))


def test_assignment_keeps_data_order_gives_empty_clients_and_refuses_out_of_range():
    idx = assignment_indices(np.array([2, 0, 2, 0, 2]), 4)
    assert [i.tolist() for i in idx] == [[1, 3], [], [0, 2, 4], []]
    with pytest.raises(ValueError, match=r"integers in \[0, 2\)"):
        assignment_indices(np.array([0, 2]), 2)


def test_garst_grid_draws_its_natural_split_only_for_the_natural_partitioner():
    """The iid split of garst-grid no longer draws the per-point beta split; the points are
    the same, and the natural split is still the paper's."""
    X, y, client = load_dataset("garst-grid", ppc=50, beta=0.1)
    X2, y2, none = load_dataset("garst-grid", ppc=50, beta=0.1, natural=False)
    assert none is None
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    for i in range(5):
        X_i, y_i = load_partition(i, 5, dataset="garst-grid", partitioner="natural")
        np.testing.assert_array_equal(X_i, X[client == i])
        np.testing.assert_array_equal(y_i, y[client == i])
    with pytest.raises(ValueError, match="beta must be a positive finite number"):
        load_dataset("garst-grid", beta=-1.0, natural=False)


def test_a_client_partition_loads_without_a_table_library():
    code = ("import sys; from flwr_clustering.data import load_partition; "
            "load_partition(0, 10, dataset='garst-grid', partitioner='iid'); "
            "load_partition(1, 5, dataset='garst-grid', partitioner='sorted'); "
            "print(sorted(m for m in ('datasets', 'pyarrow', 'pandas', 'flwr_datasets') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def _beta_split_by_the_authors_calls(beta, ppc, seed, observers):
    """The split as the spec writes it: one ``rs.choice`` per point and client."""
    from flwr_clustering.data.synthetic import _draw_grid

    rs = np.random.RandomState(seed)
    X, _ = _draw_grid(rs, ppc, 1.0)
    dist = np.linalg.norm(X[:, None, :] - observers[None, :, :], axis=2)
    with np.errstate(divide="ignore"):
        prob = 1.0 - np.exp(-beta / dist)
    client = np.empty(len(X), dtype=np.int64)
    for i in range(len(X)):
        hits = [o for o in range(len(observers))
                if rs.choice([0, 1], p=[1.0 - float(prob[i, o]), float(prob[i, o])])]
        client[i] = int(rs.choice(hits)) if hits else int(np.argmin(dist[i]))
    return client


@pytest.mark.parametrize("beta,ppc,seed,n_obs", [(0.1, 50, 42, 5), (1.0, 30, 7, 5),
                                                  (10.0, 40, 0, 5), (100.0, 20, 3, 9)])
def test_vectorised_beta_split_continues_the_stream_exactly_as_the_authors_calls(
        beta, ppc, seed, n_obs):
    from flwr_clustering.data.synthetic import GARST_OBSERVERS, garst_beta_split

    observers = (np.asarray(GARST_OBSERVERS, dtype=np.float64) if n_obs == 5 else
                 np.random.default_rng(0).uniform(-5, 5, (n_obs, 2)))
    _, _, client = garst_beta_split(beta, ppc=ppc, seed=seed, observers=observers)
    np.testing.assert_array_equal(
        client, _beta_split_by_the_authors_calls(beta, ppc, seed, observers))
