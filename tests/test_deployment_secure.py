"""The production deployment of docs/deployment.md, run as written: TLS + SuperNode auth.

The guide's commands are fenced blocks tagged ``<!-- deploy-test: TAG -->``. This test
extracts them and runs exactly them on 127.0.0.1 (``SUPERLINK_HOST=localhost``): the
certificate and key blocks, the registration and the run with ``bash -euo pipefail`` in
the test's folders, the CLI's ``config.toml`` with its ``$VARIABLES`` filled in, and the
SuperLink and SuperNode commands joined, filled in, split with :func:`shlex.split` and
started as processes of a :class:`LocalDeployment` (stopped by pid). A change of the guide
is a change of this test: the docs and the test cannot drift apart.

One deployment checks what the guide says TLS and authentication protect against:

* three registered SuperNodes run FKM; the model equals the reference loop's on the same
  files bit for bit (so it equals an insecure deployment's, which equals the same loop:
  tests/test_integration_deployment.py), and the time per round is printed;
* a fourth SuperNode whose key is not registered is refused at once (Flower exit code 305,
  "Failed to activate SuperNode") and never online; the run has 3 clients every round;
* a SuperNode that trusts another CA (as against an impostor SuperLink) fails the TLS
  handshake (CERTIFICATE_VERIFY_FAILED, exit code 305);
* plain text gets nothing from the TLS port: an ``--insecure`` SuperNode retries forever and
  never comes online, a raw HTTP request gets no response (HTTPS with the CA does), and the
  CLI with ``insecure = true`` cannot list the nodes.
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import shutil
import ssl
import string
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from simulations.benchmarks.deployment import (
    LocalDeployment,
    node_config,
    read_json,
    round_seconds,
)
from simulations.benchmarks.processes import (
    CliResult,
    describe,
    executable,
    free_ports,
    parse_cli_json,
    parse_run_id,
    port_is_open,
    run_cli,
    stop_managed,
    wait_for_run_finished,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "deployment.md"
SECTION = "## Production deployment: TLS and SuperNode authentication"
_TAG = r"<!-- deploy-test: ([\w-]+) -->\n```(\w+)\n(.*?)```"
TAGS = ("certificates", "supernode-key", "superlink", "cli-config", "register", "supernode",
        "run")

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.deployment]
_MISSING = [tool for tool in ("openssl", "ssh-keygen") if shutil.which(tool) is None]
if _MISSING:
    pytestmark.append(pytest.mark.skip(
        reason=f"{' and '.join(_MISSING)} not found: the test makes its certificates and "
               "SuperNode keys with openssl and ssh-keygen"))

NUM_CLIENTS = 3
MAX_ROUNDS = 3  # the guide's run: min-nodes=3 max-rounds=3
HOST = "localhost"  # the name in the SuperLink's certificate (SAN) that everyone dials
RUN_TIMEOUT = 300.0
#: What a SuperNode logs when it takes part in a run (a message, a ClientApp process).
ACTIVITY = ("[RUN ", "Receiving:", "flwr-clientapp")


# ----------------------------------------------------------------- the guide's commands
def _section() -> str:
    text = GUIDE.read_text()
    assert text.count(SECTION) == 1, f"{GUIDE.name} has no single {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def block(tag: str) -> str:
    """The text of the guide's block tagged ``tag`` (exactly one)."""
    found = [code for t, _, code in re.findall(_TAG, _section(), re.S) if t == tag]
    assert len(found) == 1, f"{GUIDE.name} has {len(found)} blocks tagged deploy-test: {tag}"
    return found[0]


def run_block(tag: str, cwd: Path, env: dict[str, str], timeout: float = 120.0,
              context=lambda: "", **values: str) -> CliResult:
    """Run a block with ``bash -euo pipefail`` (an unset variable fails); check exit 0.

    On timeout the block's whole process group is killed (``run_cli``).
    """
    res = run_cli(["bash", "-euo", "pipefail", "-c", block(tag)], {**env, **values}, cwd,
                  timeout, context=context)
    assert res.returncode == 0, f"deploy-test: {tag}\n{res.report()}\n{context()}"
    return res


def command(tag: str, values: dict[str, str]) -> list[str]:
    """The argv of a one-command block: lines joined, ``$VARIABLES`` filled in, split."""
    text = block(tag).replace("\\\n", " ").strip()
    assert "\n" not in text, f"deploy-test: {tag} must be one command:\n{text}"
    argv = shlex.split(string.Template(text).substitute(values))  # a new variable: KeyError
    return [executable(argv[0]), *argv[1:]]


def test_every_command_of_the_section_is_tagged():
    section = _section()
    tags = [t for t, _, _ in re.findall(_TAG, section, re.S)]
    assert sorted(tags) == sorted(TAGS)
    fences = re.findall(r"^```\w+$", section, re.M)
    assert len(fences) == len(TAGS), "a fenced block of the section has no deploy-test tag"
    assert "--insecure" not in "".join(block(t) for t in TAGS)


# ------------------------------------------------------------------------ data, helpers
def _write_client_files(tmp: Path) -> list[Path]:
    """The Garst grid (beta = 10) over three clients, one file each (as the insecure test)."""
    from flwr_clustering.data.local_file import save_local_file
    from flwr_clustering.data.synthetic import GARST_OBSERVERS, garst_beta_split

    X, y, client = garst_beta_split(10.0, observers=GARST_OBSERVERS[:NUM_CLIENTS])
    (tmp / "data").mkdir()
    files = [tmp / "data" / name for name in ("client0.npz", "client1.csv", "client2.npz")]
    for i, path in enumerate(files):
        save_local_file(path, X[client == i], y[client == i])
    return files


def _centroids(out_dir: Path) -> np.ndarray:
    with np.load(out_dir / "centroids.npz") as npz:
        return npz["centroids"]


@pytest.fixture
def deployments():
    made: list[LocalDeployment] = []

    def make(*args, **kwargs) -> LocalDeployment:
        made.append(LocalDeployment(*args, **kwargs))
        return made[-1]

    try:
        yield make
    finally:
        for dep in made:
            survivors = dep.stop()
            assert not survivors, f"still running after stop:\n{describe(survivors)}"


def test_tls_and_supernode_auth_refuse_strangers_and_change_nothing(tmp_path, deployments):
    from flwr_clustering.algorithms.fkm import run_fkm
    from flwr_clustering.algorithms.lloyd import assign_to_nearest
    from flwr_clustering.data.local_file import load_local_file

    files = _write_client_files(tmp_path)
    labels = [tmp_path / "labels" / f"node{i}.npy" for i in range(NUM_CLIENTS)]
    # The machines' working folders: the SuperLink's and the SuperNodes' (one machine here),
    # and an impostor's with another CA and its own certificate.
    work, impostor = tmp_path / "work", tmp_path / "impostor"
    work.mkdir()
    impostor.mkdir()
    shell = dict(os.environ)
    t0 = time.monotonic()
    run_block("certificates", work, shell, SUPERLINK_HOST=HOST)
    run_block("certificates", impostor, shell, SUPERLINK_HOST=HOST)
    for node in range(NUM_CLIENTS + 1):  # 0-2 registered, 3 never registered
        run_block("supernode-key", work, shell, NODE=str(node))
    run_block("supernode-key", impostor, shell, NODE=str(NUM_CLIENTS + 1))
    assert (work / "ca.crt").read_bytes() != (impostor / "ca.crt").read_bytes()
    print(f"certificates (2 CAs) and 5 SuperNode keys: {time.monotonic() - t0:.1f} s")

    link_port, *node_ports = free_ports(NUM_CLIENTS + 4)
    values = {"SUPERLINK_HOST": HOST, "LISTEN": "127.0.0.1", "PORT": str(link_port),
              "NODES": str(NUM_CLIENTS), "CA_CERT": str(work / "ca.crt")}

    def node_values(i: int) -> dict[str, str]:
        # node 3 (unregistered) and 4 (wrong CA) never get to read a file
        return {**values, "NODE": str(i), "NODE_PORT": str(node_ports[i]),
                "DATA": str(files[min(i, NUM_CLIENTS - 1)]),
                "LABELS": str(tmp_path / "labels" / f"node{i}.npy")}

    cli_config = string.Template(block("cli-config")).substitute(values)
    connection = tomllib.loads(cli_config)["superlink"]["default"]
    # one more connection, not the guide's: the CLI speaking plain text to the TLS port
    cli_config += (f'\n[superlink.plain]\naddress = "{HOST}:{link_port}"\n'
                   "insecure = true\n")
    dep = deployments(
        tmp_path / "secure", NUM_CLIENTS, [{} for _ in range(NUM_CLIENTS)],
        link_port=link_port, node_ports=node_ports[:NUM_CLIENTS], cwd=work,
        superlink_args=command("superlink", values),
        supernode_args=lambda i: command("supernode", node_values(i)),
        cli_config=cli_config, connection=connection)
    assert "--insecure" not in dep.superlink_args
    dep.start_superlink()

    # Register the three SuperNodes' public keys (the guide's block, once per node).
    printed = "".join(run_block("register", work, dep.cli_env, context=dep.logs,
                                NODE=str(node)).output for node in range(NUM_CLIENTS))
    listed = dep.supernode_list()
    assert [n["status"] for n in listed] == ["registered"] * NUM_CLIENTS, listed
    registered = {n["node-id"] for n in listed}
    assert all(str(node_id) in printed for node_id in registered), printed

    # The three registered SuperNodes, and three that must not get in.
    for i in range(NUM_CLIENTS):
        dep.start_supernode(i)
    unregistered = dep.start_process("unregistered", command("supernode", node_values(3)))
    wrong_ca = dep.start_process("wrong-ca", command("supernode", node_values(4)), cwd=impostor)
    plain = dep.start_process("plaintext", [
        executable("flower-supernode"), "--insecure", "--superlink", f"{HOST}:{link_port}",
        "--host", "127.0.0.1", "--port", str(node_ports[5]),
        "--node-config", node_config({"partition-id": 0, "num-partitions": NUM_CLIENTS,
                                      "data-path": files[0]})])
    t_nodes = time.monotonic()
    dep.wait_online(NUM_CLIENTS)
    print(f"{NUM_CLIENTS} authenticated SuperNodes online after "
          f"{time.monotonic() - t_nodes:.1f} s")
    assert {n["node-id"] for n in dep.online_nodes()} == registered, dep.logs()
    # each runs under the node id registered for its key
    ids = [re.findall(r"SuperNode ID: (\d+)", dep.supernodes[i].log()) for i in
           range(NUM_CLIENTS)]
    assert {int(x[0]) for x in ids if x} == {int(x) for x in registered}, (ids, dep.logs())

    # b. The unregistered key is refused at once: Flower exit code 305, process status 1.
    # c. Another CA: the TLS handshake fails before anything is sent.
    wait_until(lambda: not unregistered.alive() and not wrong_ca.alive(), 60, 0.5, dep.logs)
    for proc, reason in ((unregistered, "Failed to activate SuperNode"),
                         (wrong_ca, "CERTIFICATE_VERIFY_FAILED")):
        log = proc.log()
        assert proc.popen.returncode == 1 and "Exit Code: 305" in log, proc.report()
        assert reason in log, proc.report()
        print(f"{proc.name}: exit status {proc.popen.returncode}, 'Exit Code: 305', {reason!r}")
    # c. Plain text: the --insecure SuperNode keeps retrying; a raw HTTP request gets no
    #    response at all, the same request over HTTPS with the CA gets an HTTP answer.
    wait_until(lambda: "Connection attempt failed" in plain.log(), 60, 0.5, dep.logs)
    assert plain.alive(), plain.report()
    conn = http.client.HTTPConnection("127.0.0.1", link_port, timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        conn.request("POST", "/", body=b"")
        conn.getresponse()
    conn.close()
    tls = http.client.HTTPSConnection(
        HOST, link_port, timeout=10, context=ssl.create_default_context(cafile=work / "ca.crt"))
    tls.request("POST", "/", body=b"")
    status = tls.getresponse().status
    tls.close()
    print(f"plain HTTP POST: no response; HTTPS POST with the CA: HTTP {status}")
    assert 100 <= status < 600
    plain_cli = dep.cli("supernode", "list", "plain", "--format", "json", timeout=60)
    try:
        answer = parse_cli_json(plain_cli.stdout)
    except ValueError:
        answer = {}
    assert plain_cli.returncode != 0 or answer.get("success") is not True, plain_cli.report()
    assert "nodes" not in answer, plain_cli.report()
    print(f"CLI with insecure = true: exit {plain_cli.returncode}, "
          f"{plain_cli.output.strip()[-300:]!r}")

    # a. The guide's run, on the three registered SuperNodes.
    out = tmp_path / "results-secure"
    t_run = time.monotonic()
    run = run_block("run", ROOT, dep.cli_env, timeout=RUN_TIMEOUT, context=dep.logs,
                    OUT=str(out))
    secure_wall = time.monotonic() - t_run
    run_id = parse_run_id(run.output)
    record = wait_for_run_finished(run_id, dep.cli_env, dep.tmp, connection=connection,
                                   timeout=120, context=dep.logs)
    assert record["status"] == "finished:completed", (record, dep.logs())
    result, history = read_json(out / "result.json"), read_json(out / "history.json")
    assert result["status"] == "completed" and 1 <= result["rounds"] <= MAX_ROUNDS, result
    assert [h["clients"] for h in history] == [NUM_CLIENTS] * result["rounds"], history
    centroids = _centroids(out)
    parts = [load_local_file(p) for p in files]
    # the guide's run scales the features across the sites (scaling='standard'): the
    # reference loop runs on the rows in the federation's units, as the clients hold them
    features = result["features"]
    assert features["scaling"] == "standard"
    center, scale = np.asarray(features["center"]), np.asarray(features["scale"])
    scaled = [(X - center) / scale for X, _ in parts]
    ref = run_fkm(scaled, 16, seed=0, max_rounds=MAX_ROUNDS, tol=1e-6)
    with np.load(out / "centroids.npz") as npz:
        model = npz["scaled_centroids"]
    np.testing.assert_array_equal(model, ref.centroids)
    np.testing.assert_allclose(centroids, model * scale + center, rtol=1e-12)
    for path, X_i in zip(labels, scaled, strict=True):  # written on each SuperNode
        np.testing.assert_array_equal(np.load(path), assign_to_nearest(X_i, model)[0])

    # Nobody else took part: still only the registered ids, the refused processes never
    # reached a ClientApp, and the plain-text SuperNode is still retrying.
    assert {n["node-id"] for n in dep.supernode_list()} == registered, dep.logs()
    assert {n["node-id"] for n in dep.online_nodes()} == registered, dep.logs()
    for i in range(NUM_CLIENTS):
        assert all(s in dep.supernodes[i].log() for s in ACTIVITY), dep.supernodes[i].report()
    for proc in (unregistered, wrong_ca, plain):
        assert not any(s in proc.log() for s in ACTIVITY), proc.report()
    assert plain.alive() and "Connection attempt failed" in plain.log(), plain.report()
    assert not stop_managed([plain]) and not plain.alive()  # stopped by its pid

    secure_seconds = round_seconds(out)
    survivors = dep.stop()
    assert not survivors, describe(survivors)
    assert not port_is_open(link_port)
    print(f"TLS + auth: rounds {[round(s, 2) for s in secure_seconds]} s, mean "
          f"{np.mean(secure_seconds):.2f} s; flwr run + flwr ls {secure_wall:.1f} s")
