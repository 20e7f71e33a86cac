"""Partial FKM (missing='partial') through Flower: the estimator and the strategy on the
in-process grid equal the pure loop ``run_fkm_partial`` bit for bit; refusals; predict."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import missing_cell_sites
from sklearn.datasets import load_wine

from flwr_clustering import FederatedClustering, load_model
from flwr_clustering.algorithms.fkm_partial import (
    partial_distance_blocks,
    partial_labels,
    run_fkm_partial,
)
from flwr_clustering.clients import FedKMeansClient, client_app
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid, client_app_for


def _rows(est, frames):
    """Each site's rows as its client holds them (the federation's transform)."""
    return [est.feature_transform_.transform(f.to_numpy(dtype=np.float64)) for f in frames]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_estimator_equals_the_pure_loop_bit_for_bit(dtype):
    frames, ys = missing_cell_sites(load_wine, share=0.15)
    est = FederatedClustering("fkm", 3, missing="partial", server_update="lloyd",
                              random_state=4, max_rounds=12, tol=-1.0, min_nodes=3,
                              dtype=dtype).fit(frames, ys)
    clients = _rows(est, frames)
    assert all(np.isnan(X).any() for X in clients)  # the rows keep their missing cells
    ref = run_fkm_partial(clients, 3, seed=4, max_rounds=12, tol=-1.0, dtype=dtype)
    assert ref.centroids.dtype == dtype
    assert len(est.strategy_.centroid_history) == len(ref.history) == 12
    for ours, theirs in zip(est.strategy_.centroid_history, ref.history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(est.strategy_.centroids, ref.centroids)
    for i, X in enumerate(clients):
        np.testing.assert_array_equal(est.labels_[i],
                                      partial_labels(X.astype(dtype), ref.centroids))
        np.testing.assert_array_equal(est.predict(frames[i]), est.labels_[i])
    assert est.strategy_.labelling == "masked-nearest-centroid"
    summary = est.strategy_.feature_summary
    assert summary["missing"] == "partial" and summary["fill"] == []
    if dtype == "float32":  # (the sites' sums are of their float32 rows)
        return
    # the federation's scale: each feature's observed values (no fill), as StandardScaler
    # on the pooled rows with NaN left out
    pooled = pd.concat(frames, ignore_index=True).to_numpy()
    np.testing.assert_allclose(est.feature_transform_.center, np.nanmean(pooled, axis=0),
                               rtol=1e-12)
    np.testing.assert_allclose(est.feature_transform_.scale, np.nanstd(pooled, axis=0),
                               rtol=1e-12)
    # a better clustering than chance on wine, with 15 % of the cells missing
    from sklearn.metrics import adjusted_rand_score

    ari = adjusted_rand_score(np.concatenate(ys), np.concatenate(est.labels_))
    assert ari > 0.6, ari


def test_the_strategy_on_the_grid_equals_the_pure_loop_with_options(tmp_path):
    frames, ys = missing_cell_sites(load_wine, share=0.25, seed=2)
    data = [(f.to_numpy(dtype=np.float64), y) for f, y in zip(frames, ys, strict=True)]
    names = list(frames[0].columns)

    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        client = FedKMeansClient(*data[i], client_id=i, missing_cells=True)
        from flwr_clustering.data.schema import FeatureTable

        client.feature_table = FeatureTable.from_frame(frames[i])
        return client

    grid = InProcessGrid(client_app(client_fn), 3, shuffle_seed=3)
    strategy = FedKMeans(4, min_nodes=3, seed=9, max_rounds=6, tol=-1.0,
                         server_update="lloyd", local_iterations=2, privacy_threshold=5,
                         scaling="standard", missing="partial")
    strategy.start(grid=grid)
    transform = strategy.feature_transform
    assert transform.missing == "keep" and list(transform.features) == names
    clients = [transform.transform(X) for X, _ in data]
    ref = run_fkm_partial(clients, 4, seed=9, max_rounds=6, tol=-1.0, local_iters=2,
                          privacy_threshold=5)
    for ours, theirs in zip(strategy.centroid_history, ref.history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    # the per-round evaluation ran on the partial distances: finite SSE every round
    sse = [h["metrics"]["sse"] for h in strategy.history]
    assert len(sse) == 6 and np.isfinite(sse).all() and sse[-1] <= sse[0]


@pytest.mark.parametrize("option, match", [
    ({}, r"server-update='kmeans'.*server-update='lloyd'"),
    ({"server_update": "lloyd", "robust_trim": 0.2}, "robust-trim"),
    ({"server_update": "lloyd", "init": "paper"}, "init='private'"),
    ({"server_update": "lloyd", "n_init": 3}, "n-init=1"),
])
def test_refusals_name_the_option(option, match):
    frames, _ = missing_cell_sites(load_wine, share=0.05)
    with pytest.raises(ValueError, match=match):
        FederatedClustering("fkm", 3, missing="partial", min_nodes=3, **option).fit(frames)


class _LyingClient(FedKMeansClient):
    """Sends a per-feature count below the privacy threshold (one value's mean)."""

    def fit(self, parameters, config):
        arrays, n, metrics = super().fit(parameters, config)
        if config.get("phase") == "partial-update" and self.client_id == 1:
            arrays[3] = arrays[3].copy()
            arrays[3][0, 0] = 1
        return arrays, n, metrics


def test_a_reply_breaking_the_per_feature_contract_is_refused():
    frames, _ = missing_cell_sites(load_wine, share=0.1)
    data = [f.to_numpy(dtype=np.float64) for f in frames]

    app = client_app_for(_LyingClient, data, missing_cells=True)

    strategy = FedKMeans(3, min_nodes=3, server_update="lloyd", scaling="standard",
                         missing="partial", max_rounds=2)
    with pytest.raises(RuntimeError, match=r"client 1.*feature count is below the privacy "
                                           r"threshold 2"):
        strategy.start(grid=InProcessGrid(app, 3))


@pytest.mark.parametrize("keys", ["run", "exchange"])
def test_secure_aggregation_equals_the_pure_loop_from_totals_only(keys):
    frames, _ = missing_cell_sites(load_wine, share=0.15)
    names = list(frames[0].columns)
    data = [f.to_numpy(dtype=np.float64) for f in frames]

    app = client_app_for(FedKMeansClient, data, missing_cells=True)

    strategy = FedKMeans(3, min_nodes=3, seed=2, max_rounds=8, tol=-1.0,
                         server_update="lloyd", scaling="standard", missing="partial",
                         secure_aggregation=True, secagg_keys=keys)
    strategy.start(grid=InProcessGrid(app, 3))
    phases = [t["phase"] for t in strategy.secure_totals]
    start = phases.index("secure-partial-moments")  # after the features step's exchanges
    assert set(phases[:start]) <= {"feature-moments", "unit-check"}
    assert set(phases[start + 1:start + 9]) == {"secure-partial-update"}
    assert phases[-1] == "secure-evaluate"
    # the pure loop on the rows the clients held, from the federation's scale: the secure
    # sums are fixed point (within n 2**-33), so equal up to that, with the same labels
    transform = strategy.feature_transform
    assert transform.missing == "keep" and len(transform.features) == len(names)
    clients = [transform.transform(X) for X in data]
    ref = run_fkm_partial(clients, 3, seed=2, max_rounds=8, tol=-1.0)
    for ours, theirs in zip(strategy.centroid_history, ref.history, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-7)
    for X in clients:
        np.testing.assert_array_equal(partial_labels(X, strategy.centroids),
                                      partial_labels(X, ref.centroids))
    # the secure evaluation: the partial distances' SSE, no row moments or residuals
    stats = strategy._secure_stats
    assert "sum-x" not in stats and "cluster-residuals" not in stats
    sse = sum(d2.min(axis=1).sum() for X in clients
              for _, d2 in partial_distance_blocks(X, strategy.centroids))
    np.testing.assert_allclose(stats["sse"], sse, rtol=1e-9)


def test_other_algorithms_still_refuse_partial_and_auto_stays_mean():
    frames, _ = missing_cell_sites(load_wine, share=0.05)
    with pytest.raises(ValueError, match=r"missing='partial' .* kfed does not do.*fkm"):
        FederatedClustering("kfed", 3, missing="partial", min_nodes=3).fit(frames)
    est = FederatedClustering("fkm", 3, min_nodes=3, server_update="lloyd").fit(frames)
    assert est.feature_transform_.missing == "mean"
    assert est.strategy_.labelling == "nearest-centroid"


def test_the_saved_model_labels_new_rows_by_their_observed_features(tmp_path):
    frames, _ = missing_cell_sites(load_wine, share=0.15)
    est = FederatedClustering("fkm", 3, missing="partial", server_update="lloyd",
                              random_state=1, min_nodes=3).fit(frames)
    path = est.save_model(tmp_path / "model.json")
    assert json.loads(path.read_text())["labelling"] == "masked-nearest-centroid"
    model = load_model(path)
    for frame, labels in zip(frames, est.labels_, strict=True):
        np.testing.assert_array_equal(model.predict(frame), labels)


def test_a_site_checks_a_file_with_missing_cells_against_the_partial_model(tmp_path, capsys):
    from flwr_clustering.__main__ import main

    frames, _ = missing_cell_sites(load_wine, share=0.15)
    est = FederatedClustering("fkm", 3, missing="partial", server_update="lloyd",
                              random_state=1, min_nodes=3).fit(frames)
    model = est.save_model(tmp_path / "model.json")
    path = tmp_path / "site.csv"
    frames[0].to_csv(path, index=False)
    assert frames[0].isna().any().any()
    code = main(["check", str(path), "--schema", str(model)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "accepted with missing='partial'" in out


def test_a_resumed_partial_run_equals_an_uninterrupted_one():
    from flwr_clustering.app.checkpoint import pack, unpack

    frames, _ = missing_cell_sites(load_wine, share=0.2, seed=5)
    data = [f.to_numpy(dtype=np.float64) for f in frames]

    app = client_app_for(FedKMeansClient, data, missing_cells=True)

    options = dict(min_nodes=3, seed=6, max_rounds=6, tol=-1.0, server_update="lloyd",
                   scaling="standard", missing="partial")
    full = FedKMeans(3, **options)
    full.start(grid=InProcessGrid(app, 3))
    saved = {}

    def on_round(strategy, rnd):
        if rnd == 3:
            arrays: dict = {}
            meta = json.loads(json.dumps(pack(strategy.state_dict(), arrays)))
            saved["state"] = unpack(meta, arrays)
            raise RuntimeError("SuperLink gone")

    with pytest.raises(RuntimeError, match="SuperLink gone"):
        FedKMeans(3, **options).start(grid=InProcessGrid(app, 3),
                                      on_round=on_round)
    resumed = FedKMeans(3, **options)
    resumed.start(grid=InProcessGrid(app, 3), resume=saved["state"])
    assert resumed.labelling == "masked-nearest-centroid"
    np.testing.assert_array_equal(resumed.centroids, full.centroids)
    for ours, theirs in zip(resumed.centroid_history, full.centroid_history, strict=True):
        np.testing.assert_array_equal(ours, theirs)
