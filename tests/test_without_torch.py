"""Without PyTorch (an optional extra), the package imports and every other algorithm runs.

A child process refuses ``import torch`` with an import hook, and tells Hugging Face
``datasets`` (imported by Flower Datasets) what it would find without torch installed
(``USE_TORCH=0``: its probe ``find_spec("torch")`` would return None). DeepFeCA must then
fail with an ImportError that names the extra to install.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root holds `simulations`

SCRIPT = textwrap.dedent('''
    import importlib.abc
    import json
    import sys


    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, NoTorch())

    import flwr_clustering  # noqa: F401
    from flwr_clustering.app.client_app import app as client_app
    from flwr_clustering import registry
    from flwr_clustering.app.server_app import run_server
    from simulations.framework import EXPERIMENTS
    from flwr_clustering.strategies import DeepFeCA
    from flwr_clustering.testing import InProcessGrid, run_app

    base = {"dataset": "blobs", "n-samples": 240, "centers": 3, "k": 3, "min-nodes": 3,
            "max-rounds": 2, "partitioner": "iid"}
    extra = {"dgc": {"iterations": 2}, "kdc": {"sample-size": 90, "kdc-auto": False,
             "ik-t": 20}, "masked-federated": {"federated-rounds": 1}}
    nmi = {}
    for name in registry.names():
        if name in ("deepfeca", "echo"):
            continue
        cfg = {**base, **extra.get(name, {}), "algorithm": name,
               "out-dir": sys.argv[1] + "/" + name}
        out, _ = run_app(cfg, 3)
        nmi[name] = float(out["federated"]["nmi"])
    errors = []
    for make in (lambda: DeepFeCA(3),
                 lambda: run_server(InProcessGrid(client_app, 3, run_config={}),
                                    {**base, "algorithm": "deepfeca"})):
        try:
            make()
        except ImportError as err:
            errors.append(str(err))
    print(json.dumps({"torch-loaded": "torch" in sys.modules, "nmi": nmi, "errors": errors,
                      "experiments": sorted(EXPERIMENTS)}))
''')


def test_everything_but_deepfeca_works_without_torch(tmp_path):
    env = {**os.environ, "USE_TORCH": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["torch-loaded"] is False
    assert set(out["nmi"]) == {"dgc", "feca", "ffcm", "fkm", "kdc", "kfed", "masked-federated",
                               "masked-oneshot", "mavg"}
    assert all(v > 0.4 for v in out["nmi"].values()), out["nmi"]
    assert len(out["errors"]) == 2
    assert all('pip install "flwr-clustering[torch]"' in e for e in out["errors"])
    assert "deepfeca-digits" in out["experiments"] and "feca-table1" in out["experiments"]
