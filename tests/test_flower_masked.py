"""Masked-feature clustering through Flower (in-process grid): equal to the pure loops,
message hygiene (spec 000 §11 item 15), bad clients dropped."""

import numpy as np
import pytest

from flwr_clustering.algorithms.masked import centroid_agreement
from flwr_clustering.algorithms.masked_federated import run_masked_federated
from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot
from flwr_clustering.clients.masked import MaskedFederatedClient, MaskedOneShotClient
from flwr_clustering.data.masks import (
    chain_masks,
    dim_federation,
    dim_lookalike,
    shared_block_masks,
)
from flwr_clustering.strategies.masked import MaskedFederated, MaskedOneShot
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app


def _parts(assumption=2, seed=0):
    X, y, _ = dim_lookalike(seed=seed)
    if assumption == 1:
        masks = chain_masks(128, 10, seed=seed)
        return dim_federation(X, y, masks, scheme="chain", split="iid", seed=seed)
    masks = shared_block_masks(128, 10, seed=seed)
    return dim_federation(X, y, masks, scheme="shared", split="sorted", seed=seed)


@pytest.mark.parametrize("method,assumption", [("B", 2), ("B", 1)])
def test_masked_federated_through_flower_equals_pure_loop(method, assumption):
    parts = _parts(assumption)
    grid = InProcessGrid(client_app_for(MaskedFederatedClient, parts), 10, shuffle_seed=3)
    strategy = MaskedFederated(16, method=method, min_nodes=10, k_local=16, seed=5)
    strategy.start(grid=grid)
    ref = run_masked_federated([x for x, _ in parts], 16, method=method, k_local=16, seed=5)
    assert len(strategy.centroid_history) == len(ref.history) == 4  # init + F = 3
    for ours, theirs in zip(strategy.centroid_history, ref.history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    # message hygiene: no payload carries more rows than k centroids
    for msg in grid.received:
        if msg.metadata.message_type == "train":
            sums, counts = msg.content["arrays"].to_numpy_ndarrays()
            assert len(sums) <= 16 and sums.shape == counts.shape
    assert strategy.final_metrics["num-examples"] == 1024


def test_masked_oneshot_through_flower_equals_pure_loop_in_one_round():
    parts = _parts(2)
    k_local = 16
    grid = InProcessGrid(client_app_for(MaskedOneShotClient, parts), 10, shuffle_seed=1)
    # small proxies keep the O(proxies^2) forces cheap; the sizes are not what is tested
    strategy = MaskedOneShot(16, min_nodes=10, k_local=k_local, seed=2, min_size=10,
                             max_size=20)
    result = strategy.start(grid=grid)
    ref = run_masked_oneshot([x for x, _ in parts], 16, k_local=k_local, seed=2, min_size=10,
                             max_size=20)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref.centroids)
    assert len(strategy.history) == 1
    for msg in grid.received:
        if msg.metadata.message_type == "train":
            mask, means, covs, counts = msg.content["arrays"].to_numpy_ndarrays()
            assert len(means) <= k_local and covs.shape[0] == len(means) == len(counts)
            assert means.shape[1] == int(mask.sum())


@pytest.mark.parametrize("algorithm,feature_mask,method", [
    ("masked-federated", "chain", "A"), ("masked-oneshot", "shared", "B")])
def test_the_flower_app_on_dim_is_exact_with_silhouette_k_i(tmp_path, algorithm, feature_mask,
                                                            method):
    """The whole App (registry partitions, feature masks, silhouette K_i, strategy, results)
    equals the pure loop and reproduces the paper's DIM row; centralized k-means beside it."""
    import json

    from flwr_clustering.algorithms.masked import mask_aware_means
    from flwr_clustering.data import load_partition

    rc = {"algorithm": algorithm, "dataset": "dim-128", "partitioner": "natural",
          "feature-mask": feature_mask,
          "method": method, "k": 16, "min-nodes": 10, "tol": -1.0,
          "out-dir": str(tmp_path / "run"), "scaling": "none"}
    out, _ = run_app(rc, 10, shuffle_seed=4)
    parts = [load_partition(i, 10, dataset="dim-128", feature_mask=feature_mask)
             for i in range(10)]
    clients = [x for x, _ in parts]
    if algorithm == "masked-federated":
        ref = run_masked_federated(clients, 16, method=method)
        for ours, theirs in zip(out["strategy"].centroid_history, ref.history, strict=True):
            np.testing.assert_array_equal(ours, theirs)
    else:
        ref = run_masked_oneshot(clients, 16)
        np.testing.assert_array_equal(out["centroids"], ref.centroids)
    # silhouette picked every client's true local cluster count (the paper's oracle K_i)
    assert [len(np.unique(lab)) for lab in ref.local_labels] == \
        [len(np.unique(y)) for _, y in parts]
    o = mask_aware_means(clients, [y for _, y in parts], 16)
    cos, rel = centroid_agreement(out["centroids"], o)
    assert cos == pytest.approx(1.0, abs=1e-12) and rel < 1e-12
    assert out["federated"]["accuracy"] == 1.0
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["federated-on-pooled"]["accuracy"] == 1.0
    assert saved["centralized"]["accuracy"] == 1.0  # k-means on the complete rows
    assert (tmp_path / "run" / "clusters.png").stat().st_size > 0


def test_a_client_with_holes_in_its_features_is_dropped(caplog):
    import logging

    parts = _parts(2)
    X0 = parts[0][0].copy()
    m = ~np.isnan(X0[0])
    X0[3, np.flatnonzero(m)[0]] = np.nan  # a missing value inside the client's mask
    parts[0] = (X0, parts[0][1])
    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy = MaskedFederated(16, min_nodes=9, federated_rounds=1)
        strategy.start(grid=InProcessGrid(client_app_for(MaskedFederatedClient, parts), 10))
    finally:
        logger.removeHandler(caplog.handler)
    assert "client 0: row 3 has NaN in observed feature" in caplog.text
    assert strategy.history[0]["clients"] == 9


def test_a_misaligned_update_is_dropped(caplog):
    import logging

    parts = _parts(2)

    class Short(MaskedFederatedClient):
        def fit(self, parameters, config):
            arrays, n, metrics = super().fit(parameters, config)
            if config.get("phase") == "update":
                arrays = [a[:-1] for a in arrays]  # one aligned row missing
            return arrays, n, metrics

    logger = logging.getLogger("flwr_clustering")
    logger.addHandler(caplog.handler)
    try:
        strategy = MaskedFederated(16, min_nodes=9, federated_rounds=1, evaluate=False)
        app = client_app_for(MaskedFederatedClient, parts, by_node={4: Short})
        strategy.start(grid=InProcessGrid(app, 10))
    finally:
        logger.removeHandler(caplog.handler)
    assert "aligned upload of shape (15, 128), expected (16, 128)" in caplog.text
    assert [h["clients"] for h in strategy.history] == [10, 9]


def test_bad_options_get_clear_errors():
    from flwr_clustering.app.config import build_strategy, merged_config

    with pytest.raises(ValueError, match="method"):
        MaskedFederated(4, method="C")
    with pytest.raises(ValueError, match="k_local"):
        MaskedFederated(4, k_local=5)  # Algorithm 1: K_i <= K
    assert MaskedOneShot(4, k_local=8).k_local == 8  # Algorithm 2 may over-cluster
    with pytest.raises(ValueError, match="w must be"):
        MaskedOneShot(4, w=1.0)
    with pytest.raises(ValueError, match="local_algorithm"):
        MaskedOneShot(4, local_algorithm="dbscan")
    s = build_strategy(merged_config({"algorithm": "masked-federated", "k": 3}))
    assert (s.k_local, s.n_init, s.local_iterations, s.method) == (None, 10, 10, "B")
    s = build_strategy(merged_config({"algorithm": "feca", "k": 3}))
    assert s.n_init == 1  # n-init 0 = the algorithm's default


def test_an_empty_masked_client_is_refused_clearly():
    with pytest.raises(ValueError, match="data is empty"):
        MaskedFederatedClient(np.empty((0, 4)), client_id=7)


def _mask_federations():
    """(d, masks): every non-empty feature subset at some client, and disjoint feature sets."""
    from itertools import combinations

    for d in (1, 2, 3):
        subsets = [set(c) for r in range(1, d + 1) for c in combinations(range(d), r)]
        n = max(5, len(subsets))
        yield pytest.param(d, [subsets[i % len(subsets)] for i in range(n)],
                           id=f"d{d}-every-subset")
        if d > 1:  # no two clients share a feature: centres stay partly undefined (warned)
            yield pytest.param(d, [{i % d} for i in range(5)], id=f"d{d}-disjoint")


@pytest.mark.parametrize("algorithm", ["masked-federated", "masked-oneshot"])
@pytest.mark.parametrize(("d", "masks"), list(_mask_federations()))
def test_every_mask_pattern_at_d_1_2_3_completes_with_every_client(algorithm, d, masks):
    # Issue 38: a client observing one of two features computed its silhouette sum as NaN
    # (a centre with no value on its features is infinitely far), the server dropped it
    # and the run failed below min-nodes. No client may send a non-finite statistic.
    from sklearn.datasets import make_blobs

    from flwr_clustering.estimator import FederatedClustering

    X, _ = make_blobs(120 * len(masks), n_features=d, centers=3, random_state=0)
    parts = []
    for i, observed in enumerate(masks):
        part = X[i::len(masks)].copy()
        part[:, [j for j in range(d) if j not in observed]] = np.nan
        parts.append(part)
    model = FederatedClustering(algorithm, n_clusters=3).fit(parts)
    assert model.history_ and all(h["clients"] == len(masks) for h in model.history_), (
        model.history_)
    metrics = model.metrics_
    assert metrics["num-examples"] == len(X)
    assert np.isfinite(metrics["sse"]) and -1 <= metrics["simplified-silhouette"] <= 1, metrics
    undefined = np.isnan(model.cluster_centers_).any()
    assert undefined == any("NaN/inf entr" in w for w in model.warnings_), model.warnings_
