"""KDC through Flower (in-process grid): the sites' labels equal the pure loop exactly."""

import json

import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_moons
from sklearn.metrics import normalized_mutual_info_score as nmi

from flwr_clustering.algorithms.kdc import kdc_central, run_kdc
from flwr_clustering.clients import client_app
from flwr_clustering.clients.kdc import KDCClient
from flwr_clustering.strategies.kdc import KDC
from flwr_clustering.testing import InProcessGrid, client_app_for


def _sites(r=4, seed=0):
    Xm, ym = make_moons(400, noise=0.06, random_state=seed)
    Xb, yb = make_blobs(200, centers=[[3.5, 2.0], [-2.5, 2.5]], cluster_std=[0.15, 0.5],
                        random_state=seed)
    X, y = np.vstack([Xm, Xb]), np.concatenate([ym, yb + 2])
    # very unbalanced sites, the first one holding only moon 0
    moon0 = np.flatnonzero(y == 0)
    rest = np.setdiff1d(np.arange(len(y)), moon0)
    parts = [moon0] + np.array_split(np.random.default_rng(seed).permutation(rest), r - 1)
    return [(X[p], y[p]) for p in parts]


@pytest.mark.parametrize("step2,variant,auto", [("kbcc", "anne", False),
                                                ("kernel-kmeans", "inne", False),
                                                ("kbcc", "anne", True)])
def test_sites_labels_equal_the_pure_loop_and_the_centralized_run(step2, variant, auto):
    parts = _sites()
    data = [X for X, _ in parts]
    strategy = KDC(4, sample_size=300, psi=16, t=50, tau=0.4 if variant == "inne" else 0.7,
                   auto=auto, step2=step2, variant=variant, return_labels=True,
                   min_nodes=4, seed=3)
    grid = InProcessGrid(client_app_for(KDCClient, parts), 4, shuffle_seed=1)
    strategy.start(grid=grid)
    psi = strategy.selection["psi"] if auto else 16
    tau = strategy.selection["tau"] if auto else strategy.tau
    ref = run_kdc(data, 4, s=300, psi=psi, t=50, tau=tau, step2=step2, variant=variant,
                  seed=3, auto=False)
    np.testing.assert_array_equal(strategy.B, ref.B)
    for i in range(4):
        np.testing.assert_array_equal(strategy.site_labels[i], ref.labels[i])
    central = kdc_central(np.vstack(data), ref.B, 4, psi=psi, t=50, tau=tau, step2=step2,
                          variant=variant, lo=ref.lo, hi=ref.hi, seed=3)
    np.testing.assert_array_equal(np.concatenate(ref.labels), central.labels[0])
    # exactly one upload and one broadcast after the statistics round
    kinds = [(m.metadata.group_id, len(m.content["arrays"])) for m in grid.sent]
    assert sorted({g for g, _ in kinds}) == ["0", "1", "2"]
    assert sum(g == "1" for g, _ in kinds) == 4 and sum(g == "2" for g, _ in kinds) == 4
    ups = [len(r) for r in strategy.site_labels.values()]
    assert sum(ups) == 600 and strategy.history[0]["rows-uploaded"] == 300
    y = np.concatenate([y for _, y in parts])
    assert strategy.final_metrics["nmi"] == pytest.approx(nmi(y, central.labels[0]), abs=1e-12)
    assert strategy.final_metrics["num-examples"] == 600


def test_labels_stay_on_the_sites_by_default_and_the_app_writes_results(tmp_path):
    from flwr_clustering.app.client_app import app as app_client
    from flwr_clustering.app.server_app import run_server
    from flwr_clustering.data import load_partition

    rc = {"algorithm": "kdc", "dataset": "moons", "n-samples": 600, "partitioner": "iid",
          "k": 2, "min-nodes": 3, "sample-size": 300, "ik-t": 50,
          "out-dir": str(tmp_path / "kdc")}
    grid = InProcessGrid(app_client, 3, run_config=rc)
    out = run_server(grid, rc)
    strategy = out["strategy"]
    for msg in grid.received:
        assert not msg.has_error() and ("stats" not in msg.content
                                        or "labels" not in msg.content["stats"])
    data = [load_partition(i, 3, dataset="moons", n_samples=600, partitioner="iid")
            for i in range(3)]
    sel = strategy.selection
    # one set of defaults: the pure loop at its defaults makes the App's choice
    ref = run_kdc([X for X, _ in data], 2, s=300, t=50)
    assert {key: ref.extra["selection"][key] for key in ("psi", "tau", "run", "fallback")} == {
        key: sel[key] for key in ("psi", "tau", "run", "fallback")}
    assert sel["fallback"] is False
    y = np.concatenate([y for _, y in data])
    saved = json.loads((tmp_path / "kdc" / "result.json").read_text())
    assert saved["federated"]["nmi"] == pytest.approx(nmi(y, np.concatenate(ref.labels)))
    assert saved["federated-on-pooled"]["nmi"] == pytest.approx(saved["federated"]["nmi"])
    # clusters of any shape: KDC separates the moons, k-means on the pooled rows cannot
    assert saved["federated"]["nmi"] > 0.9 > 0.5 > saved["centralized"]["nmi"]
    with np.load(tmp_path / "kdc" / "kdc_model.npz") as model:
        assert model["maps"].shape == (2, sel["psi"] * 50)


def test_a_bad_site_is_dropped_with_its_sample_and_bad_options_are_rejected():
    parts = _sites()

    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        if i == 2:
            return KDCClient(np.full((5, 3), 1.0), client_id=i)  # wrong dimension
        return KDCClient(*parts[i], client_id=i)

    strategy = KDC(4, auto=False, sample_size=300, t=50, tau=0.7, min_nodes=3, seed=3)
    strategy.start(grid=InProcessGrid(client_app(client_fn), 4))
    assert 2 not in strategy.alloc and strategy.final_metrics["num-examples"] == 600 - len(
        parts[2][0])
    with pytest.raises(ValueError, match="step2"):
        KDC(3, step2="dbscan")
    with pytest.raises(ValueError, match="variant"):
        KDC(3, variant="iforest")


def test_a_tiny_site_takes_part_with_an_empty_or_one_row_sample():
    parts = _sites(r=3) + [(np.array([[0.5, 0.25]]), np.array([0]))]  # a one-row site
    data = [X for X, _ in parts]
    strategy = KDC(4, auto=False, sample_size=100, t=50, tau=0.7, return_labels=True,
                   min_nodes=4, seed=2)
    strategy.start(grid=InProcessGrid(client_app_for(KDCClient, parts), 4))
    ref = run_kdc(data, 4, s=100, t=50, tau=0.7, seed=2, auto=False)
    assert strategy.alloc[3] == ref.sample_sizes[3] == 0  # 100 / 601 of one row rounds to 0
    for i in range(4):
        np.testing.assert_array_equal(strategy.site_labels[i], ref.labels[i])
    assert len(strategy.site_labels[3]) == 1
