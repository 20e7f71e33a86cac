"""End-to-end: ``flwr run . --stream`` (Ray simulation) on a private local SuperLink.

``flwr run`` with the default ``local`` connection lazily starts a *detached* local
SuperLink daemon (``flower-superlink`` + ``flower-superexec``) and leaves it running.
Its ports come from ``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT`` (default 39091, the only port
it serves in flwr 1.41) and ``FLWR_LOCAL_CONTROL_API_PORT`` (default 39093, passed as the
deprecated ``--control-api-address``, unused unless gRPC is forced); its state lives in
``$FLWR_HOME/local-superlink``. This module gives it free ports and a temporary
``FLWR_HOME``, so it never touches a developer's SuperLink on 39091, reuses it for both
runs, and stops it (and every child) by pid at the end: Flower has no command or pid
file for that, so the pid is the process listening on the chosen port.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from simulations.benchmarks.processes import (
    CliResult,
    ProcInfo,
    describe,
    executable,
    flower_env,
    free_ports,
    local_superlink_processes,
    parse_run_id,
    pids_listening_on,
    pids_with_port_in_cmdline,
    port_is_open,
    proc_info,
    read_log,
    run_cli,
    stop_processes,
    tail,
    wait_for_run_finished,
)

#: The repository root: the Flower App that ``flwr run`` builds into a FAB.
REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 300.0  # one `flwr run --stream`: 20-35 s on 2 idle cores, ~50 s when busy
NUM_SUPERNODES = 5
FEDERATION_CONFIG = f"num-supernodes={NUM_SUPERNODES} client-resources-num-cpus=1"


@pytest.fixture(scope="module")
def client_data():
    """The simulated clients' data, as each virtual SuperNode loads it (default run config)."""
    from flwr_clustering.app.config import dataset_kwargs, merged_config
    from flwr_clustering.data.registry import load_partition

    cfg = merged_config({})
    return [load_partition(i, NUM_SUPERNODES, **dataset_kwargs(cfg))[0]
            for i in range(NUM_SUPERNODES)]


def _repo_snapshot() -> dict[str, object]:
    """Top-level entries of the repo root, and pyproject.toml's content (flwr may migrate it)."""
    return {
        "entries": sorted(p.name for p in REPO_ROOT.iterdir()),
        "pyproject": (REPO_ROOT / "pyproject.toml").read_text(),
    }


@dataclass
class SimulationRun:
    """One finished ``flwr run`` and what it produced."""

    cli: CliResult
    run_id: int
    status: dict
    out_dir: Path
    result: dict


@dataclass
class LocalSuperLink:
    """A private local SuperLink started lazily by the first ``flwr run``."""

    home: Path
    tmp: Path
    http_port: int
    control_port: int
    env: dict[str, str]
    app: Path = REPO_ROOT
    runs: list[SimulationRun] = field(default_factory=list)
    seen: dict[tuple[int, int], ProcInfo] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        """The SuperLink's own log file (it is started with stdout/stderr discarded)."""
        return self.home / "local-superlink" / "superlink.log"

    def server_log(self) -> str:
        """Tail of the SuperLink log, for assertion messages."""
        return f"--- local SuperLink log ({self.log_path}):\n{tail(read_log(self.log_path))}"

    def remember_processes(self) -> list[ProcInfo]:
        """Record the SuperLink (listening on our port) and everything naming our port."""
        procs = local_superlink_processes(self.http_port)
        for info in procs:
            self.seen.setdefault(info.key, info)
        return procs

    def submit(
        self, algorithm: str, out_dir: Path, extra: str = "", app: Path | None = None
    ) -> tuple[CliResult, int, dict]:
        """``flwr run . --stream`` one job from ``app``; return its final ``flwr ls``.

        ``app``: the App's folder, by default :attr:`app` (a copy of the App's files:
        ``flwr run`` from the repository root spends seconds walking its virtualenv).
        """
        # the rows as the paper's loops hold them (scaling='none'): every run here is
        # compared with its pure loop on the raw partitions (the scaled App is tested
        # in-process and in tests/test_deployment_data.py)
        if "scaling=" not in extra:
            extra = f"scaling='none' {extra}"
        # the split check (two more exchanges after the last round, which change no
        # model) runs where a test asks for it: the FKM run (it is tested in-process)
        if "split-check=" not in extra:
            extra = f"split-check=false {extra}"
        overrides = f"algorithm='{algorithm}' out-dir='{out_dir}' {extra}".strip()
        cli = run_cli(
            [executable("flwr"), "run", ".", "--stream",
             "--federation-config", FEDERATION_CONFIG, "--run-config", overrides],
            self.env, app or self.app, RUN_TIMEOUT, context=self.server_log,
        )
        self.remember_processes()
        print(f"flwr run ({algorithm}, simulation): {cli.seconds:.1f} s")
        assert cli.returncode == 0, f"{cli.report()}\n{self.server_log()}"
        run_id = parse_run_id(cli.output)
        status = wait_for_run_finished(
            run_id, self.env, self.tmp, timeout=120.0,
            context=lambda: f"{cli.report()}\n{self.server_log()}",
        )
        return cli, run_id, status

    def run(self, algorithm: str, extra: str = "", app: Path | None = None) -> SimulationRun:
        """Run one job that must complete and write its results."""
        out_dir = self.tmp / f"out-{algorithm}-{len(self.runs)}"
        cli, run_id, status = self.submit(algorithm, out_dir, extra, app)
        # G2: `flwr run --stream` exits 0 even if the ServerApp failed; ask the SuperLink.
        assert status["status"] == "finished:completed", (
            f"run {run_id}: {status['status']} ({status.get('status-details')})\n"
            f"{cli.report()}\n{self.server_log()}"
        )
        result_file = out_dir / "result.json"
        assert result_file.is_file(), f"no {result_file}\n{cli.report()}"
        run = SimulationRun(cli, run_id, status, out_dir, json.loads(result_file.read_text()))
        self.runs.append(run)
        return run

    def stop(self) -> list[ProcInfo]:
        """Stop the SuperLink, its SuperExec and any simulation process, by pid."""
        self.remember_processes()
        roots = [info for info in self.seen.values() if proc_info(info.pid) is not None]
        return stop_processes(roots, timeout=20.0)


@pytest.fixture(scope="module")
def local_superlink(tmp_path_factory, app_dir):
    tmp = tmp_path_factory.mktemp("flwr-simulation")
    http_port, control_port = free_ports(2)
    env = flower_env(
        tmp / "flwr-home",
        FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(http_port),
        FLWR_LOCAL_CONTROL_API_PORT=str(control_port),
    )
    assert not port_is_open(http_port), f"port {http_port} already taken"
    before = _repo_snapshot()
    link = LocalSuperLink(tmp / "flwr-home", tmp, http_port, control_port, env, app_dir)
    try:
        yield link
    finally:
        survivors = link.stop()
        assert not survivors, f"still running after stop:\n{describe(survivors)}"
        assert _repo_snapshot() == before, "flwr run changed the repo root"


@pytest.fixture(scope="module")
def fkm_run(local_superlink):
    # the README's `flwr run .` from the repository root; the other runs from a copy
    return local_superlink.run("fkm", "split-check=true", app=REPO_ROOT)


@pytest.fixture(scope="module")
def kfed_run(fkm_run, local_superlink):
    return local_superlink.run("kfed")


@pytest.fixture(scope="module")
def feca_run(fkm_run, local_superlink):
    return local_superlink.run("feca")


def test_fkm_simulation_matches_reference_and_centralized(fkm_run, local_superlink, client_data):
    run = fkm_run
    # The first `flwr run` started our own SuperLink, on our port, in our FLWR_HOME.
    assert f"Starting local SuperLink on 127.0.0.1:{local_superlink.http_port}" in run.cli.output
    assert (local_superlink.home / "local-superlink" / "state.db").exists()
    listeners = pids_listening_on(local_superlink.http_port)
    assert listeners, "no process listens on the local SuperLink port after the run"
    assert all("flower-superlink" in (proc_info(p).cmdline if proc_info(p) else "")
               for p in listeners), describe(local_superlink.remember_processes())

    res = run.result
    assert res["algorithm"] == "fkm"
    assert res["config"]["min_nodes"] == 2  # the default; all 5 nodes still take part (below)
    fed = res["federated"]
    assert fed["num-examples"] == 800  # the whole Garst grid, 16 x 50 points
    assert fed["ari"] > 0.9, fed  # ~0.957 on this data
    assert fed["nmi"] > 0.9 and fed["purity"] > 0.9, fed
    # Side by side with centralized k-means on the pooled data (simulation only).
    assert res["centralized"]["ari"] > 0.9, res["centralized"]
    assert res["federated-on-pooled"]["ari"] == pytest.approx(fed["ari"], abs=1e-9)
    assert 1 <= res["rounds"] <= 20
    # the split check ran through Ray's actors too (its two exchanges after the last round)
    assert res["diagnostics"]["split-check"] == "run", res["diagnostics"]

    with np.load(run.out_dir / "centroids.npz") as npz:
        centroids = npz["centroids"]
        assert centroids.shape == (16, 2)
        assert np.all(np.isfinite(centroids))
        assert f"round_{res['rounds']}" in npz.files
    # Through Ray, the SuperLink and 5 ClientApp actors: the same numbers as the pure loop.
    from flwr_clustering.algorithms.fkm import run_fkm

    ref = run_fkm(client_data, 16, seed=0, max_rounds=20, tol=1e-6)
    assert len(ref.history) == res["rounds"]
    np.testing.assert_allclose(centroids, ref.centroids, rtol=0, atol=1e-9)
    history = json.loads((run.out_dir / "history.json").read_text())
    assert len(history) == res["rounds"]
    assert all(h["clients"] == NUM_SUPERNODES for h in history), history
    assert (run.out_dir / "clusters.png").stat().st_size > 0


@pytest.mark.parametrize("algorithm", ["fkm", "kfed", "feca"])
def test_the_estimator_equals_flwr_run(request, client_data, algorithm):
    """``FederatedClustering`` on the clients' arrays gives the Ray ``flwr run``'s model,
    bit for bit (same default run config, same clients in partition-id order)."""
    from flwr_clustering import FederatedClustering

    run = request.getfixturevalue(f"{algorithm}_run")
    with np.load(run.out_dir / "centroids.npz") as npz:
        centroids = npz["centroids"]
    est = FederatedClustering(algorithm, n_clusters=16, random_state=0,
                              scaling="none").fit(client_data)
    np.testing.assert_array_equal(est.cluster_centers_, centroids)
    assert est.n_iter_ == run.result["rounds"]


def test_kfed_simulation_matches_reference(fkm_run, kfed_run, local_superlink, client_data):
    run = kfed_run
    assert "Starting local SuperLink" not in run.cli.output  # the running one was reused
    assert all("flower-superlink" in (proc_info(p).cmdline if proc_info(p) else "")
               for p in pids_listening_on(local_superlink.http_port))
    assert run.run_id != fkm_run.run_id

    res = run.result
    assert res["algorithm"] == "kfed"
    assert res["rounds"] == 1  # one-shot
    fed = res["federated"]
    assert fed["num-examples"] == 800
    # Untuned k-FED (k' = 16) is weak (paper, beta = 0.1 split: 0.643 +- 0.078); only check
    # that it clusters at all ...
    assert 0.3 < fed["ari"] <= 1.0, fed
    with np.load(run.out_dir / "centroids.npz") as npz:
        centroids = npz["centroids"]
    assert centroids.shape == (16, 2)
    # ... and that it is exactly the reference loop.
    from flwr_clustering.algorithms.kfed import run_kfed

    np.testing.assert_allclose(centroids, run_kfed(client_data, 16, seed=0), rtol=0, atol=1e-9)


def test_feca_simulation_is_one_round_and_matches_reference(feca_run, client_data):
    run = feca_run
    res = run.result
    assert res["algorithm"] == "feca" and res["rounds"] == 1  # one-shot
    history = json.loads((run.out_dir / "history.json").read_text())
    assert history[0]["clients"] == NUM_SUPERNODES
    with np.load(run.out_dir / "centroids.npz") as npz:
        centroids = npz["centroids"]
    from flwr_clustering.algorithms.feca import run_feca

    ref = run_feca(client_data, 16, seed=0)
    np.testing.assert_allclose(centroids, ref.centroids, rtol=0, atol=1e-9)
    assert res["federated"]["num-examples"] == 800
    assert res["federated-on-pooled"]["nmi"] == pytest.approx(res["federated"]["nmi"], abs=1e-9)


@pytest.mark.parametrize("algorithm", ["mavg", "ffcm"])
def test_feca_baselines_in_simulation_match_reference(fkm_run, local_superlink, algorithm):
    # beta = 10 (near IID): with the spatial beta = 0.1 split every client's 16-means has
    # one-point clusters, and M-Avg clients rightly refuse to upload them.
    from flwr_clustering.app.config import dataset_kwargs, merged_config
    from flwr_clustering.data.registry import load_partition

    run = local_superlink.run(algorithm, "partitioner='natural' beta=10.0 max-rounds=3 tol=-1.0")
    res = run.result
    assert res["algorithm"] == algorithm
    assert res["rounds"] == (1 if algorithm == "mavg" else 3)
    cfg = merged_config({"partitioner": "natural", "beta": 10.0})
    data = [load_partition(i, NUM_SUPERNODES, **dataset_kwargs(cfg))[0]
            for i in range(NUM_SUPERNODES)]
    if algorithm == "mavg":
        from flwr_clustering.algorithms.mavg import run_mavg

        ref = run_mavg(data, 16)
    else:
        from flwr_clustering.algorithms.ffcm import run_ffcm

        ref = run_ffcm(data, 16, rounds=3).centroids
    with np.load(run.out_dir / "centroids.npz") as npz:
        np.testing.assert_allclose(npz["centroids"], ref, rtol=0, atol=1e-9)
    assert res["federated"]["num-examples"] == 800


@pytest.mark.parametrize("algorithm,extra", [
    ("masked-federated", "feature-mask='chain' method='A'"),
    ("masked-oneshot", "feature-mask='shared'"),
])
def test_masked_algorithms_in_simulation_match_reference(fkm_run, local_superlink, algorithm,
                                                         extra):
    """Partially overlapping feature spaces under Ray: DIM look-alike, NaN outside each
    client's mask, K_i by silhouette; equal to the pure loop and exact (accuracy 1)."""
    from flwr_clustering.algorithms.masked_federated import run_masked_federated
    from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot
    from flwr_clustering.data.registry import load_partition

    run = local_superlink.run(
        algorithm, f"dataset='dim-128' partitioner='natural' k=16 tol=-1.0 {extra}")
    res = run.result
    assert res["algorithm"] == algorithm
    assert res["rounds"] == (4 if algorithm == "masked-federated" else 1)
    mask = "chain" if "chain" in extra else "shared"
    data = [load_partition(i, NUM_SUPERNODES, dataset="dim-128", partitioner="natural",
                           feature_mask=mask)[0]
            for i in range(NUM_SUPERNODES)]
    ref = (run_masked_federated(data, 16, method="A") if algorithm == "masked-federated"
           else run_masked_oneshot(data, 16))
    with np.load(run.out_dir / "centroids.npz") as npz:
        np.testing.assert_allclose(npz["centroids"], ref.centroids, rtol=0, atol=1e-9)
    assert res["federated"]["num-examples"] == 1024
    assert res["federated"]["accuracy"] == 1.0 == res["centralized"]["accuracy"]


def test_dgc_relay_in_simulation_matches_reference(fkm_run, local_superlink):
    """DGC over a ring of the 5 Ray nodes: the relay's iterates equal run_dgc's."""
    from flwr_clustering.algorithms.dgc import build_graph, initial_centres, run_dgc
    from flwr_clustering.data.registry import load_partition

    run = local_superlink.run(
        "dgc", "dataset='iris' partitioner='iid' k=3 rho=100.0 iterations=20 graph='ring'")
    res = run.result
    assert res["algorithm"] == "dgc" and res["rounds"] == 21  # init + T S
    data = [load_partition(i, NUM_SUPERNODES, dataset="iris", partitioner="iid")[0]
            for i in range(NUM_SUPERNODES)]
    ref = run_dgc(data, build_graph("ring", NUM_SUPERNODES), initial_centres(data, 3),
                  rho=100.0, iterations=20)
    with np.load(run.out_dir / "centroids.npz") as npz:
        np.testing.assert_allclose(npz["centroids"], ref.centres.mean(axis=0), rtol=0,
                                   atol=1e-12)
    history = json.loads((run.out_dir / "history.json").read_text())
    np.testing.assert_allclose(history[-1]["consensus"], ref.consensus[-1], rtol=1e-12)
    assert history[-1]["messages"] == 2 * NUM_SUPERNODES
    # every user's own centres, scored through Ray on the joint data
    from flwr_clustering.algorithms.dgc import assign
    from flwr_clustering.metrics import hungarian_accuracy

    labels = [load_partition(i, NUM_SUPERNODES, dataset="iris", partitioner="iid")[1]
              for i in range(NUM_SUPERNODES)]
    X, y = np.vstack(data), np.concatenate(labels)
    expected = np.mean([hungarian_accuracy(y, assign(X, C)) for C in ref.centres])
    assert res["federated"]["user-accuracy-mean"] == pytest.approx(expected, abs=1e-12)


def test_secure_aggregation_in_simulation_matches_federated_lloyd(fkm_run, local_superlink,
                                                                    client_data):
    """SecAgg+ through Ray: node state carries the protocol across its four messages."""
    from flwr_clustering.algorithms.fkm import dense_totals, fkm_client_update, lloyd_from_totals

    run = local_superlink.run("fkm", "server-update='lloyd' secure-aggregation=true "
                                     "max-rounds=4 tol=-1.0 scaling='standard' "
                                     "split-check=true")
    history = json.loads((run.out_dir / "history.json").read_text())
    assert [h["clients"] for h in history] == [NUM_SUPERNODES] * 4
    assert all(h["secure-aggregation"] for h in history)
    ledger = json.loads((run.out_dir / "privacy.json").read_text())
    assert ledger["secure-aggregation"] is True
    # scaling across the sites (the App's default, scaling='standard'): the per-feature
    # sums come through the secure sums too, before FKM's own exchanges
    assert [t["phase"] for t in ledger["secure-totals"]] == (
        ["feature-moments", "unit-check", "secure-moments"] + ["secure-update"] * 4
        + ["split-scatter", "split-histograms", "secure-evaluate"])  # (the split check)
    features = run.result["features"]
    assert features["scaling"] == "standard"
    center, scale = np.asarray(features["center"]), np.asarray(features["scale"])
    pooled = np.vstack(client_data)
    # the secure sums carry the moments in fixed point: close to the pooled statistics
    np.testing.assert_allclose(center, pooled.mean(0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(scale, pooled.std(0), rtol=1e-6)
    scaled = [(x - center) / scale for x in client_data]
    # the pure loop on the federation's scaled rows: the start from the pooled moments
    # (the strategy's generator, seed 0), then 4 federated Lloyd rounds
    from flwr_clustering.algorithms.fkm import moment_init

    X = np.vstack(scaled)
    C = moment_init(len(X), X.sum(0), np.square(X).sum(0), 16, np.random.default_rng(0))
    for _ in range(4):
        totals = [dense_totals(fkm_client_update(x, C), 16, X.shape[1])
                  for x in scaled]
        C = lloyd_from_totals(sum(t[0] for t in totals), sum(t[1] for t in totals), C)
    with np.load(run.out_dir / "centroids.npz") as npz:
        np.testing.assert_allclose(npz["scaled_centroids"], C, rtol=0, atol=1e-8)
        # and the model in the data's units is the scaled model mapped back
        np.testing.assert_allclose(npz["centroids"], npz["scaled_centroids"] * scale + center,
                                   rtol=1e-12)
    assert run.result["federated"]["num-examples"] == len(X)


def test_k_auto_in_simulation_is_the_pure_search(fkm_run, local_superlink, client_data):
    """k='auto' through Ray: every candidate in one run, the choice the pure loop's."""
    from flwr_clustering.algorithms.choose_k import run_choose_k
    from flwr_clustering.algorithms.fkm import run_fkm

    run = local_superlink.run("fkm", "k='auto' k-min=12 k-max=18 n-init=2 max-rounds=6")
    history = json.loads((run.out_dir / "history.json").read_text())
    assert len(history) <= 6 and all(h["clients"] == NUM_SUPERNODES for h in history)

    def fit(k, seed):
        return run_fkm(client_data, k, seed=seed, max_rounds=6).centroids

    ref = run_choose_k(client_data, fit, range(12, 19), starts=2, seed=0, threshold=2)
    choice = run.result["k-choice"]
    assert choice["k"] == ref["scores"][ref["chosen"]]["k"]
    assert [s["k"] for s in run.result["k_scores"]] == list(range(12, 19))
    with np.load(run.out_dir / "candidates.npz") as npz:
        for i in ref["kept"]:
            k = ref["scores"][i]["k"]
            np.testing.assert_allclose(npz[f"k_{k}"], ref["models"][i], rtol=0, atol=1e-9)
    with np.load(run.out_dir / "centroids.npz") as npz:
        np.testing.assert_allclose(npz["centroids"], ref["models"][ref["chosen"]], rtol=0,
                                   atol=1e-9)
    assert (run.out_dir / "k_scores.csv").is_file() and (run.out_dir / "k_scores.png").is_file()
    phases = {m["phase"] for m in json.loads((run.out_dir / "privacy.json").read_text())[
        "messages"]}
    assert {"k-moments", "k-spreads"} <= phases


def test_kdc_in_simulation_matches_reference(fkm_run, local_superlink):
    """KDC on two moons over the 5 Ray nodes: the sites' statistics equal run_kdc's."""
    from sklearn.metrics import normalized_mutual_info_score

    from flwr_clustering.algorithms.kdc import run_kdc
    from flwr_clustering.data.registry import load_partition

    run = local_superlink.run(
        "kdc", "dataset='moons' n-samples=600 partitioner='iid' k=2 sample-size=300 ik-t=50")
    res = run.result
    assert res["algorithm"] == "kdc" and res["rounds"] == 2  # one upload, one broadcast
    parts = [load_partition(i, NUM_SUPERNODES, dataset="moons", n_samples=600,
                            partitioner="iid") for i in range(NUM_SUPERNODES)]
    sel = res["selection"]
    ref = run_kdc([X for X, _ in parts], 2, s=300, psi=sel["psi"], tau=sel["tau"], t=50, auto=False)
    y = np.concatenate([y for _, y in parts])
    nmi = normalized_mutual_info_score(y, np.concatenate(ref.labels))
    assert res["federated"]["nmi"] == pytest.approx(nmi, abs=1e-12) and nmi > 0.9
    assert res["centralized"]["nmi"] < 0.5  # k-means cannot separate the moons
    history = json.loads((run.out_dir / "history.json").read_text())
    assert history[0]["rows-uploaded"] == 300


def test_deepfeca_in_simulation_matches_reference(fkm_run, local_superlink, client_data):
    """DeepFeCA (MLP on the 2-D rows) under Ray: C* and every network weight are exactly
    run_deepfeca's (fixed seeds per client step, 1 PyTorch thread, FedAvg in client order)."""
    from flwr_clustering.algorithms.deepfeca import (
        NetworkSpec,
        TrainOptions,
        run_deepfeca,
        weight_names,
    )
    from flwr_clustering.app.config import dataset_kwargs, merged_config
    from flwr_clustering.data.registry import load_pooled

    t0 = time.monotonic()
    run = local_superlink.run(
        "deepfeca", "network='mlp' k=8 max-rounds=2 local-epochs=1 deepfeca-centralized=false")
    print(f"deepfeca simulation run: {time.monotonic() - t0:.1f} s")
    res = run.result
    assert res["algorithm"] == "deepfeca" and res["rounds"] == 2
    history = json.loads((run.out_dir / "history.json").read_text())
    assert [h["round"] for h in history] == [1, 2], history
    assert [h["clients"] for h in history] == [NUM_SUPERNODES] * 2, history
    assert [h["labelling-clients"] for h in history] == [NUM_SUPERNODES] * 2, history

    _, y = load_pooled(NUM_SUPERNODES, **dataset_kwargs(merged_config({})))
    if y is not None:  # the linear probe needs labels (the Garst grid has them)
        probe = res["linear-probe"]
        assert 0.0 <= probe["federated"] <= 1.0, probe
        assert 0.0 <= probe["random-network"] <= 1.0, probe
        assert "centralized" not in probe  # deepfeca-centralized=false
    else:
        assert "linear-probe" not in res

    # The reference loop with the App's settings (batch-size 32, 1 thread, seed 0, k' = k).
    spec = NetworkSpec.for_data("mlp", client_data[0].shape[1])
    t1 = time.monotonic()
    ref = run_deepfeca(client_data, 8, rounds=2, spec=spec,
                       options=TrainOptions(epochs=1, batch_size=32, threads=1), seed=0)
    print(f"deepfeca reference loop: {time.monotonic() - t1:.1f} s")
    assert [h["k-out"] for h in ref.history] == [h["k-out"] for h in history]
    with np.load(run.out_dir / "centroids.npz") as npz:
        centroids = npz["centroids"]
        assert "round_2" in npz.files
    assert centroids.dtype == ref.centroids.dtype and centroids.shape == ref.centroids.shape
    np.testing.assert_array_equal(centroids, ref.centroids)
    with np.load(run.out_dir / "model.npz") as npz:
        assert npz.files == weight_names(spec)  # state_dict names, in state_dict order
        saved = [npz[name] for name in npz.files]
    assert len(saved) == len(ref.weights)
    for name, w, r in zip(weight_names(spec), saved, ref.weights, strict=True):
        assert (w.dtype, w.shape) == (r.dtype, r.shape), name
        np.testing.assert_array_equal(w, r, err_msg=name)


def test_failed_run_exits_zero_but_flwr_ls_says_failed(fkm_run, local_superlink):
    # Gotcha G2, and proof that the status checks above are not vacuous.
    out_dir = local_superlink.tmp / "out-bad"
    cli, run_id, status = local_superlink.submit("no-such-algorithm", out_dir)
    assert cli.returncode == 0
    assert status["status"] == "finished:failed", status
    assert "no-such-algorithm" in status["status-details"], status
    assert "no-such-algorithm" in cli.output  # the ServerApp's ValueError is in the stream
    # a refused run config says so in result.json too (issue 50), nothing else is written
    result = json.loads((out_dir / "result.json").read_text())
    assert result["status"] == "failed" and result["refused"] is True, result
    assert "no-such-algorithm" in result["reason"], result
    assert {f.name for f in out_dir.iterdir()} <= {"result.json", "privacy.json"}


def _files(out_dir: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out_dir.iterdir()) if f.is_file()}


def test_a_run_into_a_finished_runs_out_dir_is_refused_and_changes_nothing(
        fkm_run, local_superlink):
    """Issue 39, item 1, with real `flwr run`s: a second run names the first one's results
    and the choices, fails before any message, and leaves every file as it was."""
    before = _files(fkm_run.out_dir)
    cli, run_id, status = local_superlink.submit("kfed", fkm_run.out_dir)
    assert status["status"] == "finished:failed", status
    details = status["status-details"]
    assert "holds another run's results" in details and "resume-from=" in details, details
    assert _files(fkm_run.out_dir) == before


def test_two_runs_started_together_on_one_out_dir_leave_one_runs_results(
        fkm_run, local_superlink):
    """Two `flwr run`s at once into one out-dir: one completes, the other is refused (by
    the lock while the first writes, or by its results after), and the folder holds the
    completed run's files only."""
    import threading

    out_dir = local_superlink.tmp / "out-shared"
    outcome: dict[str, dict] = {}

    def submit(algorithm: str) -> None:
        outcome[algorithm] = local_superlink.submit(algorithm, out_dir)[2]

    threads = [threading.Thread(target=submit, args=(a,)) for a in ("kfed", "feca")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = {a: s["status"] for a, s in outcome.items()}
    assert sorted(statuses.values()) == ["finished:completed", "finished:failed"], outcome
    done = next(a for a, s in statuses.items() if s == "finished:completed")
    failed = next(a for a, s in statuses.items() if s == "finished:failed")
    details = outcome[failed]["status-details"]
    assert "being written by another run" in details or "holds another run's results" in \
        details, details
    result = json.loads((out_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["run-config"]["algorithm"] == done, result
    assert not (out_dir / ".run.lock").exists()


def test_local_superlink_stops_by_pid(fkm_run, local_superlink):
    port = local_superlink.http_port
    procs = local_superlink.remember_processes()
    names = " ".join(p.cmdline for p in procs)
    assert "flower-superlink" in names and "flower-superexec" in names, describe(procs)
    survivors = local_superlink.stop()
    assert not survivors, f"still running after stop:\n{describe(survivors)}"
    deadline = time.monotonic() + 10
    while port_is_open(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not port_is_open(port), f"port {port} still open"
    assert not pids_with_port_in_cmdline(port), describe(pids_with_port_in_cmdline(port))
