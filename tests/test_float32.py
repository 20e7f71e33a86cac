"""FKM in float32 (the ``dtype`` option): the kernels, the client, the messages, the App.

What must hold: float32 rows get the labels of their exact distances (as float64 rows do);
a float32 Flower run equals the float32 pure loop bit for bit; the clients hold and send
float32; the server refuses a float64 reply in a float32 run; every other algorithm, DP and
secure aggregation refuse float32 by name; the quality stays that of float64 (the full
comparison is the ``bench dtype`` benchmark).
"""

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.metrics import adjusted_rand_score

from flwr_clustering.algorithms.fkm import FKMOptions, fkm_client_update, run_fkm
from flwr_clustering.algorithms.lloyd import check_data, lloyd_step, nearest_labels
from flwr_clustering.algorithms.local_centroids import LocalCentroids, check_local_centroids
from flwr_clustering.app.config import build_client, merged_config, run_dtype
from flwr_clustering.clients import FedKMeansClient
from flwr_clustering.data.synthetic import garst_beta_split
from flwr_clustering.evaluation import local_evaluation_stats
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid, client_app_for


def _clients():
    X, y, c = garst_beta_split(0.1)
    return [(X[c == i], y[c == i]) for i in range(5)]


def test_check_data_keeps_float32_only_when_asked():
    X32 = np.ones((3, 2), np.float32)
    assert check_data(X32).dtype == np.float64  # the default is unchanged
    assert check_data(X32, dtype=None).dtype == np.float32
    assert check_data(X32, dtype=None) is X32  # no copy
    assert check_data(np.ones((3, 2), np.int32), dtype=None).dtype == np.float64
    with pytest.raises(ValueError, match="NaN or inf"):
        check_data(np.array([[1.0, np.inf]], np.float32), dtype=None)


@pytest.mark.parametrize("d,k", [(2, 16), (16, 16), (64, 10)])
def test_float32_rows_get_the_labels_of_their_exact_distances(d, k):
    rng = np.random.default_rng(d)
    C = rng.normal(size=(k, d)) * 3 + 50
    X = (C[rng.integers(k, size=20000)] + rng.normal(size=(20000, d))).astype(np.float32)
    # rows halfway between two centroids, rounded to float32: near-ties in float32
    half = ((C[0] + C[1]) / 2 + rng.normal(size=(500, d)) * 1e-6).astype(np.float32)
    X = np.vstack([X, half])
    exact = cdist(X.astype(np.float64), C, "sqeuclidean").argmin(axis=1)
    np.testing.assert_array_equal(nearest_labels(X, C), exact)
    # centroids given in float32 too (what a float32 client receives)
    C32 = C.astype(np.float32)
    np.testing.assert_array_equal(
        nearest_labels(X, C32), cdist(X.astype(np.float64), C32.astype(np.float64),
                                      "sqeuclidean").argmin(axis=1))


def test_lloyd_step_of_float32_rows_sums_in_float64():
    X = np.random.default_rng(0).normal(size=(5000, 12)).astype(np.float32)
    C = X[:6].astype(np.float64)
    means32, counts32, labels32 = lloyd_step(X, C)
    means64, counts64, labels64 = lloyd_step(X.astype(np.float64), C)
    np.testing.assert_array_equal(labels32, labels64)
    np.testing.assert_array_equal(counts32, counts64)
    assert means32.dtype == np.float64
    np.testing.assert_allclose(means32, means64, rtol=1e-12, atol=1e-15)


def test_fkm_client_update_sends_float32_means_of_float32_rows():
    X = _clients()[0][0]
    C = X[:16].astype(np.float32).astype(np.float64)
    up32 = fkm_client_update(X.astype(np.float32), C)
    up64 = fkm_client_update(X, C)
    assert up32.means.dtype == np.float32 and up64.means.dtype == np.float64
    np.testing.assert_array_equal(up32.counts, up64.counts)
    np.testing.assert_allclose(up32.means, up64.means, rtol=1e-6)


def test_evaluation_statistics_of_float32_rows_equal_those_of_their_float64_values():
    X, y = _clients()[1]
    X32 = X.astype(np.float32)
    C = X[:16]
    s32 = local_evaluation_stats(X32, C, y, 16)
    s64 = local_evaluation_stats(X32.astype(np.float64), C, y, 16)
    for key in ("sse", "silhouette-sum", "num-examples"):
        assert s32[key] == s64[key], key  # cdist of the same values, exactly rounded sums
    for key in ("cluster-counts", "contingency"):
        np.testing.assert_array_equal(s32[key], s64[key])
    for key in ("sum-x", "cluster-residuals"):
        np.testing.assert_allclose(s32[key], s64[key], rtol=1e-12)


def test_float32_run_keeps_the_float64_quality():
    data = _clients()
    X = np.vstack([x for x, _ in data])
    y = np.concatenate([t for _, t in data])
    aris = {}
    for dtype in ("float64", "float32"):
        res = run_fkm([x for x, _ in data], 16, seed=0, max_rounds=10, dtype=dtype)
        assert all(h.dtype == np.dtype(dtype) for h in res.history)
        aris[dtype] = adjusted_rand_score(y, nearest_labels(X, res.centroids))
    assert abs(aris["float32"] - aris["float64"]) < 0.02, aris


@pytest.mark.parametrize("client_dtype", [None, "float32"])
def test_float32_flower_run_equals_the_float32_pure_loop(client_dtype):
    data = _clients()
    grid = InProcessGrid(client_app_for(FedKMeansClient, data, dtype=client_dtype), 5,
                         shuffle_seed=3)
    strategy = FedKMeans(16, min_nodes=5, seed=7, max_rounds=6, tol=-1.0, dtype="float32")
    result = strategy.start(grid=grid)
    ref = run_fkm([x for x, _ in data], 16, seed=7, max_rounds=6, tol=-1.0, dtype="float32")
    assert len(strategy.centroid_history) == len(ref.history) == 6
    for ours, theirs in zip(strategy.centroid_history, ref.history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(result.arrays["centroids"].numpy(), ref.centroids)
    # the broadcast and the means the clients sent back are float32
    assert strategy.train_arrays(7)[0].dtype == np.float32
    sent = [a.numpy() for m in grid.received if not m.has_error()
            and "arrays" in m.content.array_records
            for a in m.content.array_records["arrays"].values()]
    means = [a for a in sent if a.ndim == 2 and a.shape[1] == 2]
    assert means and all(a.dtype == np.float32 for a in means)


def test_a_reply_in_the_other_type_is_refused():
    upload = LocalCentroids(np.zeros((2, 3)), np.array([5, 5]), np.array([0, 1]))
    with pytest.raises(ValueError, match="the run computes in float32"):
        check_local_centroids(upload, n_features=3, dtype="float32")
    ok = LocalCentroids(np.zeros((2, 3), np.float32), np.array([5, 5]), np.array([0, 1]))
    assert check_local_centroids(ok, n_features=3, dtype="float32").means.dtype == np.float64
    with pytest.raises(ValueError, match="the run computes in float64"):  # and the reverse
        check_local_centroids(ok, n_features=3, dtype="float64")


def test_the_client_converts_its_rows_once_on_the_first_float32_message():
    X, y = _clients()[0]
    client = FedKMeansClient(X, y, client_id=0)
    assert client.X.dtype == np.float64
    config = {**FKMOptions(k=16, dtype="float32").to_config(), "phase": "init"}
    arrays, n, _ = client.fit([], config)
    assert client.X.dtype == np.float32 and arrays[0].dtype == np.float32
    with pytest.raises(ValueError, match="computes in float64 or float32, not 'float16'"):
        client.use_dtype("float16")


def test_the_app_refuses_float32_for_an_algorithm_that_computes_in_float64():
    with pytest.raises(ValueError, match="algorithm 'kfed' computes in float64 only"):
        merged_config({"algorithm": "kfed", "dtype": "float32"})
    cfg = merged_config({"dtype": "float32"})
    assert run_dtype(cfg) == "float32"
    assert run_dtype(merged_config({"algorithm": "kfed"})) == "float64"
    X, y = _clients()[0]
    assert build_client(cfg, X, y, 0).X.dtype == np.float32


def test_float32_refuses_differential_privacy_and_secure_aggregation():
    with pytest.raises(ValueError, match="dp-epsilon needs dtype='float64'"):
        FedKMeans(8, dtype="float32", server_update="lloyd", dp_epsilon=1.0, data_bound=5.0)
    with pytest.raises(ValueError, match="secure aggregation sums float64 totals"):
        FedKMeans(8, dtype="float32", server_update="lloyd", secure_aggregation=True)


def test_the_estimator_in_float32_keeps_float32_centres_and_its_clients_labels():
    from flwr_clustering.estimator import FederatedClustering

    data = _clients()
    model = FederatedClustering("fkm", 16, random_state=0, dtype="float32", max_rounds=5)
    model.fit([x for x, _ in data])
    assert model.cluster_centers_.dtype == np.float32
    for i, (x, _) in enumerate(data):
        np.testing.assert_array_equal(model.predict(x), model.labels_[i])


def test_a_local_file_is_held_in_float32(tmp_path):
    from flwr_clustering.app.client_app import load_node_file
    from flwr_clustering.data.local_file import save_local_file

    X, y = _clients()[0]
    path = tmp_path / "site.csv"
    save_local_file(path, X, y)
    loaded = load_node_file({"data-path": str(path)}, 0, dtype="float32")
    assert loaded.X.dtype == np.float32
    np.testing.assert_array_equal(loaded.X, load_node_file({"data-path": str(path)}, 0)
                                  .X.astype(np.float32))
