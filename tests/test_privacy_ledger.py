"""The privacy ledger (``privacy.json``): what every client sent, as the server received it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flwr_clustering.app.client_app import app as client_app
from flwr_clustering.app.server_app import run_server
from flwr_clustering.data.registry import load_partition
from flwr_clustering.testing import InProcessGrid
from simulations.privacy import differencing_attack, fkm_uploads, recovered_rows


def _run(tmp_path, **config):
    run_config = {"beta": 10.0, "out-dir": str(tmp_path), **config}
    grid = InProcessGrid(client_app, 5, run_config=run_config)
    run_server(grid, run_config)
    return grid, json.loads((tmp_path / "privacy.json").read_text())


def _carried(msg):
    arrays = []
    for name in ("arrays", "stats"):
        if name in msg.content:
            arrays += msg.content[name].to_numpy_ndarrays()
    return (sum(a.size for a in arrays if a.dtype.kind == "f"),
            sum(a.size for a in arrays if a.dtype.kind in "iub"))


def test_the_ledger_counts_every_reply_the_server_received(tmp_path):
    grid, ledger = _run(tmp_path, **{"max-rounds": 3, "tol": -1.0})
    replies = [m for m in grid.received if not m.has_error()]
    assert ledger["totals"]["replies"] == len(replies) == len(ledger["messages"])
    floats = sum(_carried(m)[0] for m in replies)
    ints = sum(_carried(m)[1] for m in replies)
    assert ledger["totals"]["floats"] == floats and ledger["totals"]["integers"] == ints
    assert ledger["totals"]["raw-rows"] == 0 and ledger["raw-rows-setting"] is None
    assert ledger["secure-aggregation"] is False and ledger["epsilon"] is None
    assert ledger["privacy-threshold"] == 2
    assert set(ledger["clients"]) == {"0", "1", "2", "3", "4"}
    # per client: the same sums
    for cid, per in ledger["clients"].items():
        mine = [e for e in ledger["messages"] if e["client"] == int(cid)]
        assert per["floats"] == sum(e["floats"] for e in mine)
    # the smallest count behind an FKM mean is at least the privacy threshold, and equals
    # the smallest count the clients uploaded
    counts = [m.content["arrays"].to_numpy_ndarrays()[1] for m in replies
              if m.metadata.message_type == "train"]
    smallest = min(int(c[c > 0].min()) for c in counts if len(c))
    assert ledger["totals"]["min-count"] <= smallest
    train = [e for e in ledger["messages"] if e["phase"] == "train"]
    assert min(e["min-count"] for e in train) == smallest >= 2


def test_raw_rows_are_in_the_ledger(tmp_path):
    _, ledger = _run(tmp_path, **{"init": "paper", "max-rounds": 2, "tol": -1.0})
    assert ledger["raw-rows-setting"] == "init='paper'"
    first = [e for e in ledger["messages"] if e["phase"] == "train" and e["round"] == 1]
    # every seed is a raw row (2 floats each; a client may seed fewer than 16)
    assert len(first) == 5 and all(e["raw-rows"] == e["floats"] // 2 > 0 for e in first)
    assert ledger["totals"]["raw-rows"] == sum(e["raw-rows"] for e in first)


def test_feca_centroids_carry_no_count_the_server_can_check(tmp_path):
    _, ledger = _run(tmp_path, algorithm="feca")
    train = [e for e in ledger["messages"] if e["phase"] == "train"]
    assert train and all(e["min-count"] is None for e in train)
    assert np.isfinite(ledger["totals"]["floats"])


@pytest.mark.parametrize("beta", [0.1, 1.0, 10.0])
def test_the_differencing_attack_recovers_rows_from_default_fkm(tmp_path, beta):
    """The threat the ledger names: no single reply holds a row, the sequence does."""
    run_config = {"beta": beta, "partitioner": "natural", "out-dir": str(tmp_path),
                  "early-stop": False}
    grid = InProcessGrid(client_app, 5, run_config=run_config)
    run_server(grid, run_config)
    uploads = fkm_uploads(grid.received)
    assert all(len(u) == 20 for u in uploads.values())
    # the clients hold their rows in the federation's scaled units (scaling='standard'),
    # which the server knows: a row recovered there is a raw row
    import json

    features = json.loads((tmp_path / "result.json").read_text())["features"]
    assert features["scaling"] == "standard"
    center, scale = np.asarray(features["center"]), np.asarray(features["scale"])
    recovered = 0
    for cid, rounds in uploads.items():
        X, _ = load_partition(cid, 5, dataset="garst-grid", beta=beta, partitioner="natural")
        X = (X - center) / scale
        candidates = differencing_attack(rounds)
        recovered += recovered_rows(candidates, X)
        # ... although every single upload is a mean of at least privacy-threshold rows
        assert all((u.counts >= 2).all() for u in rounds)
    print(f"beta={beta}: {recovered} of 800 rows recovered")
    assert recovered >= 1
