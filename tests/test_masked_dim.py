"""Feature masks, the DIM look-alike and the E1-E3 metrics; spec 000 §11 item 14: on the
DIM look-alike both algorithms under both assumptions reproduce the paper's rows exactly."""

import numpy as np
import pytest

from flwr_clustering.algorithms.masked import (
    aggregation_correctness,
    centroid_agreement,
    mask_aware_means,
)
from flwr_clustering.algorithms.masked_federated import run_masked_federated
from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot
from flwr_clustering.data.masks import (
    apply_mask,
    chain_masks,
    dim_federation,
    dim_lookalike,
    shared_block_masks,
)
from flwr_clustering.metrics import hungarian_accuracy


def test_chain_masks_follow_the_spec_recipe():
    m = chain_masks(128, 10, 0.3, seed=1)
    assert m.shape == (10, 128) and m.any(axis=0).all()
    s = int(np.ceil(128 / (10 - 9 * 0.3)))
    assert (m.sum(axis=1) == s).all()  # 18 features each, as spec §7.1's table
    shared = m[:-1] & m[1:]
    assert (shared.sum(axis=1) >= 5).all()  # ~30 % of 18 with the next client
    assert not (m[0] & m[2:]).any()  # only consecutive clients overlap


def test_shared_block_masks_follow_the_spec_recipe():
    m = shared_block_masks(128, 10, 0.1, seed=2)
    common = m.all(axis=0)
    assert common.sum() == 13  # 10 % of 128
    private = m & ~common
    assert (private.sum(axis=0) <= 1).all() and private.any(axis=0).sum() == 128 - 13
    with pytest.raises(ValueError, match="private feature"):
        shared_block_masks(10, 10, 0.1)


def test_apply_mask_and_dim_federation_deal_every_row_once():
    X, y, _ = dim_lookalike(seed=3)
    assert X.shape == (1024, 128) and np.bincount(y).tolist() == [64] * 16
    masks = chain_masks(128, 10, seed=3)
    parts = dim_federation(X, y, masks, scheme="chain", split="sorted", seed=3)
    assert sum(len(p[0]) for p in parts) == 1024
    for (Xi, _), m in zip(parts, masks, strict=True):
        assert np.isnan(Xi[:, ~m]).all() and not np.isnan(Xi[:, m]).any()
    assert np.isnan(apply_mask(X[:2], masks[0])[:, ~masks[0]]).all()


def test_metrics_by_hand():
    assert hungarian_accuracy([0, 0, 1, 1, 2], [5, 5, 7, 7, 7]) == pytest.approx(0.8)
    # groups: {0, 1} (classes 0, 0) and {2, 3} (classes 1, 0): 3 of 4 placed right
    assert aggregation_correctness([[0, 1], [2, 3]], np.array([0, 0, 1, 0])) == 0.75
    C = np.array([[1.0, np.nan], [0.0, 2.0]])
    R = np.array([[0.0, 1.0], [1.0, 0.0]])
    cos, rel = centroid_agreement(C, R)
    # row 0 matches R[1] on coordinate 0 only; row 1 matches R[0] with cos 1, rel 1
    assert cos == pytest.approx(1.0) and rel == pytest.approx(0.5)


def _local_classes(parts, local_labels, keep=None):
    out = []
    for i, ((_, y), lab) in enumerate(zip(parts, local_labels, strict=True)):
        ids = range(lab.max() + 1) if keep is None else keep[i]
        out += [np.bincount(y[lab == a]).argmax() for a in ids]
    return np.array(out)


@pytest.mark.parametrize("assumption", [1, 2])
def test_dim_lookalike_reproduces_the_papers_rows_exactly(assumption):
    X, y, _ = dim_lookalike(seed=0)
    if assumption == 1:  # chain masks, random even split, Method A
        masks, scheme, split, method = chain_masks(128, 10, seed=0), "chain", "iid", "A"
    else:  # shared block, sorted (biased) split, Method B
        masks, scheme, split, method = shared_block_masks(128, 10, seed=0), "shared", "sorted", "B"
    parts = dim_federation(X, y, masks, scheme=scheme, split=split, seed=0)
    clients = [Xi for Xi, _ in parts]
    k_local = [len(np.unique(yi)) for _, yi in parts]  # oracle K_i < K, as the paper
    o = mask_aware_means(clients, [yi for _, yi in parts], 16)
    y_all = np.concatenate([yi for _, yi in parts])

    fed = run_masked_federated(clients, 16, method=method, k_local=k_local, rounds=3)
    e1 = aggregation_correctness(fed.groups, _local_classes(parts, fed.local_labels,
                                                            fed.uploaded))
    pred = []
    for Xi in clients:
        m = ~np.isnan(Xi[0])
        G = np.where(np.isnan(fed.centroids[:, m]), np.inf, fed.centroids[:, m])
        pred.append(np.argmin(((Xi[:, None, m] - G[None]) ** 2).sum(-1), axis=1))
    cos, rel = centroid_agreement(fed.centroids, o)
    assert e1 == 1.0
    assert hungarian_accuracy(y_all, np.concatenate(pred)) == 1.0
    assert cos == pytest.approx(1.0, abs=1e-12) and rel < 1e-12

    one = run_masked_oneshot(clients, 16, k_local=k_local)
    e4 = aggregation_correctness(one.groups, _local_classes(parts, one.local_labels))
    pred = [one.assignment[i][lab] for i, lab in enumerate(one.local_labels)]
    cos, rel = centroid_agreement(one.centroids, o)
    assert e4 == 1.0
    assert hungarian_accuracy(y_all, np.concatenate(pred)) == 1.0
    assert cos == pytest.approx(1.0, abs=1e-12) and rel < 1e-12
