"""End-to-end: a real deployment on 127.0.0.1 (one SuperLink, one SuperNode per data file).

Each SuperNode reads its own local file (``data-path`` in its node config; .npz and .csv
with labels), the CLI submits ``flwr run . deploy --stream`` with ``dataset='local'``
(the server has no pooled data), and every algorithm's result must be exactly its
reference loop on the files' data. Every process (and its FLWR_HOME, database and port)
belongs to this test and is stopped by pid at the end.

Deployment exchanges are slow (every message starts a fresh ``flwr-clientapp`` process,
about 4 s an exchange on 3 SuperNodes and 2 cores), so the runs are capped at a few rounds
and leave out the split check (two exchanges after the last round that change no model; it
runs on a deployment in tests/test_deployment_data.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from simulations.benchmarks.deployment import CONNECTION, TEST_POLL_SECONDS, LocalDeployment
from simulations.benchmarks.processes import (
    describe,
    parse_run_id,
    pids_with_port_in_cmdline,
    port_is_open,
    wait_for_run_finished,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.deployment]

NUM_CLIENTS = 3
#: One file per client; both loaders (NumPy archive and pandas CSV) are exercised.
FILE_NAMES = ("client0.npz", "client1.csv", "client2.npz")
RUN_TIMEOUT = 300.0  # about 3 x 7 s of rounds plus start-up; generous for a busy CI box


def _write_client_files(tmp: Path) -> tuple[list[Path], list[tuple[np.ndarray, np.ndarray]]]:
    """Split the Garst grid (beta = 10, near IID) over three clients and save one file each."""
    from flwr_clustering.data.local_file import save_local_file
    from flwr_clustering.data.synthetic import GARST_OBSERVERS, garst_beta_split

    X, y, client = garst_beta_split(10.0, observers=GARST_OBSERVERS[:NUM_CLIENTS])
    data_dir = tmp / "data"
    data_dir.mkdir()
    files, parts = [], []
    for i, name in enumerate(FILE_NAMES):
        path = data_dir / name
        save_local_file(path, X[client == i], y[client == i])
        files.append(path)
        parts.append((X[client == i], y[client == i]))
    return files, parts


def _node_config(i: int, path: Path) -> dict:
    # KDC uploads a sample of raw rows: the data owners of this test allow it
    return {"partition-id": i, "num-partitions": NUM_CLIENTS, "data-path": path,
            "labels-path": _labels_path(path, i), "allow-raw-rows": True}


def _labels_path(data_path: Path, i: int) -> Path:
    """Where SuperNode ``i`` keeps the labels of its rows (node config ``labels-path``)."""
    return data_path.parent.parent / "labels" / f"node{i}.npy"


def _deploy_run(dep: LocalDeployment, algorithm: str, overrides: str) -> tuple[dict, np.ndarray]:
    """``flwr run`` one job on the deployment; check it completed; return result, centroids."""
    out_dir = dep.tmp / f"results-{algorithm}"
    run = dep.cli(
        "run", ".", CONNECTION, "--stream", "--run-config",
        f"algorithm='{algorithm}' dataset='local' min-nodes={NUM_CLIENTS} {overrides} "
        f"scaling='none' split-check=false out-dir='{out_dir}'",
        timeout=RUN_TIMEOUT, cwd=dep.app,
    )
    assert run.returncode == 0, f"{run.report()}\n{dep.logs()}"
    status = wait_for_run_finished(parse_run_id(run.output), dep.cli_env, dep.tmp,
                                   connection=CONNECTION, timeout=120,
                                   context=lambda: run.report() + dep.logs())
    assert status["status"] == "finished:completed", f"{status}\n{dep.logs()}"
    with np.load(out_dir / "centroids.npz") as npz:
        centroids = npz["centroids"]
    return json.loads((out_dir / "result.json").read_text()), centroids


@pytest.fixture
def deployment(tmp_path, app_dir):
    files, _ = _write_client_files(tmp_path)
    dep = LocalDeployment(tmp_path, NUM_CLIENTS,
                          [_node_config(i, path) for i, path in enumerate(files)],
                          poll_seconds=TEST_POLL_SECONDS, app=app_dir)
    dep.data_files = files
    try:
        yield dep.start()
    finally:
        survivors = dep.stop()
        assert not survivors, f"still running after stop:\n{describe(survivors)}\n{dep.logs()}"


def test_deployment_three_supernodes_local_files(deployment):
    dep = deployment
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering.algorithms.lloyd import assign_to_nearest
    from flwr_clustering.data.local_file import load_local_file

    t_nodes = time.monotonic()
    dep.wait_online(NUM_CLIENTS)
    assert len(dep.online_nodes()) == NUM_CLIENTS, dep.logs()

    print(f"{NUM_CLIENTS} SuperNodes online after {time.monotonic() - t_nodes:.1f} s")
    from flwr_clustering.algorithms.feca import run_feca

    # A one-shot FeCA run with the App's defaults but the algorithm (FKM on a deployment
    # of local files runs in test_deployment_data.py, test_deployment_scale.py and
    # test_deployment_faults.py).
    out_dir = dep.tmp / "results"
    t0 = time.monotonic()
    run = dep.cli(
        "run", ".", CONNECTION, "--stream", "--run-config",
        f"algorithm='feca' dataset='local' min-nodes={NUM_CLIENTS} scaling='none' "
        f"split-check=false out-dir='{out_dir}'",
        timeout=RUN_TIMEOUT, cwd=dep.app,
    )
    seconds = time.monotonic() - t0
    print(f"flwr run (feca, deployment): {seconds:.1f} s")
    assert run.returncode == 0, f"{run.report()}\n{dep.logs()}"
    assert "Starting local SuperLink" not in run.output  # the explicit connection was used
    run_id = parse_run_id(run.output)
    # G2: `flwr run --stream` exits 0 even when the run failed; ask the SuperLink.
    status = wait_for_run_finished(run_id, dep.cli_env, dep.tmp, connection=CONNECTION,
                                   timeout=120, context=lambda: run.report() + dep.logs())
    assert status["status"] == "finished:completed", (
        f"{status}\n{run.report()}\n{dep.logs()}"
    )

    result_file = out_dir / "result.json"
    assert result_file.is_file(), f"no {result_file} after {seconds:.0f} s\n{run.report()}"
    res = json.loads(result_file.read_text())
    assert res["algorithm"] == "feca"
    assert res["run-config"]["dataset"] == "local"
    assert "centralized" not in res  # no pooled data on a real deployment
    assert res["rounds"] == 1
    history = json.loads((out_dir / "history.json").read_text())
    assert [h["clients"] for h in history] == [NUM_CLIENTS], history

    with np.load(out_dir / "centroids.npz") as npz:
        centroids = npz["centroids"]
    assert centroids.shape == (16, 2) and np.all(np.isfinite(centroids))

    # The SuperNodes read their own files: the result is exactly the reference loop on
    # those files' data (client i = partition-id i) ...
    parts = [load_local_file(p) for p in dep.data_files]
    local = [X for X, _ in parts]
    np.testing.assert_allclose(centroids, run_feca(local, 16).centroids, rtol=0, atol=1e-9)

    # ... and the federated metrics (the files carry labels) are exact, i.e. equal to the
    # centralized computation on the union of the files.
    fed = res["federated"]
    X = np.vstack(local)
    y = np.concatenate([y for _, y in parts])
    assert fed["num-examples"] == len(X) == 800
    ari = adjusted_rand_score(y, assign_to_nearest(X, centroids)[0])
    assert fed["ari"] == pytest.approx(ari, abs=1e-9)
    assert fed["ari"] > 0.8, fed
    assert {"nmi", "purity", "sse"} <= set(fed), fed
    # Every SuperNode received the final model and wrote its own rows' labels locally
    # (labels-path in its node config); no label travelled.
    for i, (path, X_i) in enumerate(zip(dep.data_files, local, strict=True)):
        np.testing.assert_array_equal(np.load(_labels_path(path, i)),
                                      assign_to_nearest(X_i, centroids)[0])

    # FFCM (a moments exchange and two rounds of fuzzy c-means), then Algorithms 1 and 2 of the masked-feature paper, DGC and KDC, on the same
    # SuperNodes: the reference loops' results. (FKM under secure aggregation, whose
    # session state each SuperNode carries across fresh flwr-clientapp processes, runs on a
    # deployment in tests/test_deployment_data.py.)
    from flwr_clustering.algorithms.dgc import build_graph, initial_centres, run_dgc
    from flwr_clustering.algorithms.ffcm import run_ffcm
    from flwr_clustering.algorithms.kdc import initial_cluster_means, run_kdc
    from flwr_clustering.algorithms.masked_federated import run_masked_federated
    from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot

    kdc = run_kdc(local, 16, s=400, t=50, step2="kernel-kmeans", auto=False)
    kdc_means = initial_cluster_means(kdc.B, kdc.groups, kdc.lo, kdc.hi)
    for algorithm, overrides, rounds, ref in (
        ("ffcm", "max-rounds=2 tol=-1.0", 2, run_ffcm(local, 16, rounds=2).centroids),
        ("masked-federated", "federated-rounds=1 tol=-1.0", 2,
         run_masked_federated(local, 16, rounds=1).centroids),
        ("masked-oneshot", "", 1, run_masked_oneshot(local, 16).centroids),
        # DGC: the relay routes neighbour sums over a ring of the 3 SuperNodes
        # (partition-id = graph node); one iteration keeps the test short
        ("dgc", "iterations=1 rho=10.0", 2,
         run_dgc(local, build_graph("ring", 3), initial_centres(local, 16), rho=10.0,
                 iterations=1).centres.mean(axis=0)),
        # KDC: statistics round, one sample upload, one broadcast; the initial clusters'
        # means (the logged model) equal the pure loop's, hence the same sample and kernel
        ("kdc", "kdc-auto=false kdc-step2='kernel-kmeans' sample-size=400 ik-t=50", 2,
         kdc_means),
    ):
        res, centroids = _deploy_run(dep, algorithm, overrides)
        assert res["algorithm"] == algorithm and res["rounds"] == rounds
        np.testing.assert_allclose(centroids, ref, rtol=0, atol=1e-9)
    # KDC's sites kept their labels; their statistics give the reference labels' NMI
    from sklearn.metrics import normalized_mutual_info_score

    assert res["federated"]["nmi"] == pytest.approx(normalized_mutual_info_score(
        np.concatenate([y for _, y in parts]), np.concatenate(kdc.labels)), abs=1e-12)

    # DeepFeCA (an MLP on the 2-D rows), one round: a describe exchange, then a cluster and
    # a train exchange; every message starts a fresh flwr-clientapp process, yet C* and
    # the averaged network are exactly run_deepfeca's on the files' data (fixed seeds per
    # client step, 1 PyTorch thread, FedAvg in client-id order).
    from flwr_clustering.algorithms.deepfeca import (
        NetworkSpec,
        TrainOptions,
        run_deepfeca,
        weight_names,
    )

    t_deep = time.monotonic()
    res, centroids = _deploy_run(dep, "deepfeca",
                                 "network='mlp' k=8 max-rounds=1 local-epochs=1")
    print(f"flwr run (deepfeca, deployment, 1 round): {time.monotonic() - t_deep:.1f} s")
    assert res["algorithm"] == "deepfeca" and res["rounds"] == 1
    assert "linear-probe" not in res  # dataset='local': no pooled rows or labels on the server
    out_dir = dep.tmp / "results-deepfeca"
    history = json.loads((out_dir / "history.json").read_text())
    assert [h["clients"] for h in history] == [NUM_CLIENTS], history
    spec = NetworkSpec.for_data("mlp", local[0].shape[1])
    ref = run_deepfeca(local, 8, rounds=1, spec=spec,
                       options=TrainOptions(epochs=1, batch_size=32, threads=1), seed=0)
    assert (centroids.dtype, centroids.shape) == (ref.centroids.dtype, ref.centroids.shape)
    np.testing.assert_array_equal(centroids, ref.centroids)
    with np.load(out_dir / "model.npz") as npz:
        assert npz.files == weight_names(spec)  # state_dict names, in state_dict order
        saved = [npz[name] for name in npz.files]
    for name, w, r in zip(weight_names(spec), saved, ref.weights, strict=True):
        assert (w.dtype, w.shape) == (r.dtype, r.shape), name
        np.testing.assert_array_equal(w, r, err_msg=name)

    # Stop everything we started, by pid, and check that it is gone.
    survivors = dep.stop()
    assert not survivors, describe(survivors)
    for p in dep.processes:
        assert not p.alive(), p.report()
    for port in [dep.link_port, *dep.node_ports]:
        assert not port_is_open(port), f"port {port} still open"
        assert not pids_with_port_in_cmdline(port), describe(pids_with_port_in_cmdline(port))
