r"""Benchmark: the CPU of one message at a site, in a fresh process (issue 52, item 3).

On a real deployment Flower starts a fresh ``flwr-clientapp`` process for every message
(Flower 1.41/1.42 ``flwr/supernode/runtime/run_clientapp.py``: one message per process).
Each case here runs one message the same way, in a fresh ``python`` process, and splits its
CPU (``time.process_time``) into

- ``flower_s``: Flower's import (``import flwr.supernode.cli``, what ``flwr-clientapp``
  imports before it loads the App);
- ``ours_s``: our imports (``import flwr_clustering.app.client_app``);
- ``read_s``: the data read (the CPU inside the App's ``load_node_file``: opening and
  parsing the site's file, or its parsed copy, the imports it needs included);
- ``compute_s``: the rest of the message (building the client, the integrity check, the
  phase's own computation, the reply), the imports it needs included;

and records which of pandas, scikit-learn, SciPy and pyarrow the process loaded. The
messages are real ones: the benchmark first runs the App on an in-process grid with two
sites reading their own files (``dataset='local'``, FKM, k=3) and keeps node 0's
``data-source`` QUERY (round 0, the node's state empty) and an FKM ``update`` TRAIN message
(with the node's run state, its declared rows among it). No Flower process runs.

Files (``--formats``): ``npz`` (``X`` and ``y``) and ``csv`` (a header of wine's 13 column
names and ``label``), ``--rows`` rows made from scikit-learn's wine rows (resampled, with a
seeded jitter of 5 % of each column's spread, 4 decimals).

Cache states: ``cold`` (the site's parsed-file cache folder empty: the first message of a
node) and ``warm`` (one message of the same kind ran before, in another process, so its
parsed copy is on disk: every later message of a deployment). ``second_s`` is the CPU of
the same message once more in the same process (simulation, in-process runs: the
in-memory cache). ``--before`` renders a previous result (JSON) next to this one.

Usage::

    python -m simulations bench site-message --out bench-results
    python -m simulations bench site-message --before bench-results/site_message.json \
        --out bench-results/after

Timings on a shared machine are noisy: each figure is the median of ``--repeats`` runs and
the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .common import load_average, write_result

__all__ = ["PARTS", "add_parser", "bench_site_message", "make_files", "record_messages",
           "run_worker", "site_message_markdown"]

#: The parts of a message's CPU, in the table's order, and their headings.
PARTS = {"flower_s": "Flower's import", "ours_s": "our imports", "read_s": "data read",
         "compute_s": "computation", "total_s": "total"}

#: Packages whose presence after the message the benchmark records.
WATCHED = ("pandas", "sklearn", "scipy", "pyarrow")

#: Environment variable of the site's parsed-file cache folder (read by the App when it
#: exists; older code ignores it).
CACHE_ENV = "FLWR_CLUSTERING_CACHE_DIR"

# The child process: stdlib imports only before the timed parts.
_WORKER = r"""
import json, pickle, sys, time
spec = sys.argv[1]
t0 = time.process_time()
import flwr.supernode.cli  # noqa: F401
t1 = time.process_time()
import flwr_clustering.app.client_app as capp
t2 = time.process_time()
with open(spec, "rb") as fh:
    msg_bytes, ctx_bytes = pickle.load(fh)
spent = [0.0]
inner = capp.load_node_file
def timed(*args, **kwargs):
    start = time.process_time()
    try:
        return inner(*args, **kwargs)
    finally:
        spent[0] += time.process_time() - start
capp.load_node_file = timed
t3 = time.process_time()
reply = capp.app(pickle.loads(msg_bytes), pickle.loads(ctx_bytes))
t4 = time.process_time()
read = spent[0]
spent[0] = 0.0
t5 = time.process_time()
again = capp.app(pickle.loads(msg_bytes), pickle.loads(ctx_bytes))
t6 = time.process_time()
error = reply.error.reason if reply.has_error() else None
if error is None and again.has_error():
    error = again.error.reason
print(json.dumps({
    "flower_s": t1 - t0, "ours_s": t2 - t1, "read_s": read,
    "compute_s": (t4 - t3) - read, "total_s": (t1 - t0) + (t2 - t1) + (t4 - t3),
    "second_s": t6 - t5, "second_read_s": spent[0],
    "loaded": [m for m in WATCHED if m in sys.modules], "error": error,
}))
""".replace("WATCHED", repr(WATCHED))


def make_files(folder: Path, rows: int = 5000, seed: int = 0) -> dict[str, list[Path]]:
    """Write two sites' files per format, ``rows`` rows each, from wine's rows.

    Returns
    -------
    dict
        ``{"npz": [site0, site1], "csv": [site0, site1]}``.
    """
    import pandas as pd
    from sklearn.datasets import load_wine

    from flwr_clustering.data.local_file import save_local_file

    wine = load_wine()
    names = list(wine.feature_names)
    rng = np.random.default_rng(seed)
    spread = wine.data.std(axis=0)
    files: dict[str, list[Path]] = {"npz": [], "csv": []}
    folder.mkdir(parents=True, exist_ok=True)
    for site in range(2):
        pick = rng.integers(0, len(wine.data), size=rows)
        X = np.round(wine.data[pick] + rng.normal(0, 0.05, (rows, len(names))) * spread, 4)
        y = wine.target[pick].astype(np.int64)
        npz = folder / f"site{site}.npz"
        save_local_file(npz, X, y)
        frame = pd.DataFrame(X, columns=names)
        frame["label"] = y
        csv = folder / f"site{site}.csv"
        frame.to_csv(csv, index=False)
        files["npz"].append(npz)
        files["csv"].append(csv)
    return files


def record_messages(paths: list[Path], out: Path) -> dict[str, tuple[Any, Any]]:
    """Run the App in-process on the sites' files; keep node 0's two messages.

    Returns
    -------
    dict
        ``{"data-source": (message, context), "fkm-update": (message, context)}``:
        the message as node 0 received it and its context then (node config with
        ``data-path``, run config; the ``data-source`` message with an empty state, the
        ``update`` message with the node's state at the end of the run).
    """
    from flwr.app import Context, MessageType, RecordDict

    from flwr_clustering.protocol import DATA_SOURCE_PHASE
    from flwr_clustering.testing import run_app

    rc = {"algorithm": "fkm", "dataset": "local", "k": 3, "max-rounds": 3, "tol": -1.0,
          "min-nodes": len(paths), "out-dir": str(out)}
    _, grid = run_app(rc, len(paths), node_configs=[{"data-path": str(p)} for p in paths])
    node = min(grid.contexts)
    mine = [m for m in grid.sent if m.metadata.dst_node_id == node]

    def phase(m):
        return m.content["config"]["phase"] if "config" in m.content else None

    source = next(m for m in mine if phase(m) == DATA_SOURCE_PHASE)
    update = next(m for m in mine if m.metadata.message_type == MessageType.TRAIN
                  and phase(m) == "update")
    ctx = grid.contexts[node]
    empty = Context(run_id=ctx.run_id, node_id=ctx.node_id, node_config=dict(ctx.node_config),
                    state=RecordDict(), run_config=dict(ctx.run_config))
    return {"data-source": (source, empty), "fkm-update": (update, ctx)}


def run_worker(spec: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run the message of ``spec`` (its pickled message and context) in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _WORKER, str(spec)], capture_output=True,
                         text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"site-message worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_site_message(
    folder: Path,
    formats: tuple[str, ...] = ("npz", "csv"),
    messages: tuple[str, ...] = ("data-source", "fkm-update"),
    rows: int = 5000,
    repeats: int = 3,
) -> list[dict[str, Any]]:
    """Measure one message's CPU in fresh processes, cold and warm, per format and message.

    Parameters
    ----------
    folder : pathlib.Path
        Work folder (the sites' files, the recorded messages, the cache folder).
    formats, messages : tuple of str
        ``"npz"``/``"csv"``; ``"data-source"``/``"fkm-update"``.
    rows : int, default 5000
        Rows per site.
    repeats : int, default 3
        Fresh processes per case (the median of each part is reported).

    Returns
    -------
    list of dict
        One row per ``(format, message, cache)``: the medians of :data:`PARTS`,
        ``second_s`` and the packages loaded (of :data:`WATCHED`).
    """
    files = make_files(folder / "data", rows)
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    cache = folder / "cache"
    env[CACHE_ENV] = str(cache)
    results = []
    for fmt in formats:
        recorded = record_messages(files[fmt], folder / f"run-{fmt}")
        for name in messages:
            msg, ctx = recorded[name]
            spec = folder / f"{fmt}-{name}.pkl"
            spec.write_bytes(pickle.dumps((pickle.dumps(msg), pickle.dumps(ctx))))
            for state in ("cold", "warm"):
                runs = []
                for _ in range(repeats):
                    if state == "cold":
                        shutil.rmtree(cache, ignore_errors=True)
                    else:
                        run_worker(spec, env)  # a message before, in another process
                    runs.append(run_worker(spec, env))
                bad = [r["error"] for r in runs if r["error"]]
                if bad:
                    raise RuntimeError(f"{fmt} {name}: the message failed: {bad[0]}")
                row: dict[str, Any] = {"format": fmt, "message": name, "cache": state,
                                       "rows": rows, "repeats": repeats}
                for key in (*PARTS, "second_s"):
                    row[key] = statistics.median(r[key] for r in runs)
                row["loaded"] = sorted({m for r in runs for m in r["loaded"]})
                results.append(row)
    return results


def _cell(seconds: float) -> str:
    return f"{seconds:.3f}"


def _value(row: dict[str, Any], key: str) -> float:
    """A row's figure (``ours_all_s``: our imports + the data read + the computation).

    That is the total without Flower's import, the noisiest part on a shared machine.
    """
    if key == "ours_all_s":
        return row["ours_s"] + row["read_s"] + row["compute_s"]
    return row[key]


def site_message_markdown(result: dict[str, Any], before: dict[str, Any] | None = None
                          ) -> str:
    """The result as a Markdown table (with the ``before`` result's figures, if given)."""
    lines = [
        "# CPU of one message at a site, in a fresh process",
        "",
        f"{result['rows'][0]['rows'] if result['rows'] else 0} rows x 13 columns per site; "
        f"CPU seconds (`time.process_time`), median of {result['repeats']} fresh processes "
        "per case. cold: no parsed copy of the file yet (a node's first message); warm: a "
        "message before, in another process (every later message of a deployment). 'ours in "
        "all': our imports, the data read and the computation (the total without Flower's "
        "import). "
        "'same process' is the same message once more in the same process (simulation). "
        f"Load average before/after: {result['load_before']} / {result['load_after']}.",
        "",
    ]
    old = {(r["format"], r["message"], r["cache"]): r for r in (before or {}).get("rows", [])}
    head = [*PARTS.values(), "ours in all", "same process", "loaded"]
    if old:
        lines += ["Each cell: before -> after.", ""]
    lines += ["| file | message | cache | " + " | ".join(head) + " |",
              "|---|---|---|" + "---|" * len(head)]
    for r in result["rows"]:
        prev = old.get((r["format"], r["message"], r["cache"]))
        cells = []
        for key in (*PARTS, "ours_all_s", "second_s"):
            cells.append(_cell(_value(r, key)) if prev is None
                         else f"{_cell(_value(prev, key))} -> {_cell(_value(r, key))}")
        loaded = ", ".join(r["loaded"]) or "none"
        if prev is not None:
            loaded = f"{', '.join(prev['loaded']) or 'none'} -> {loaded}"
        lines.append(f"| {r['format']} | {r['message']} | {r['cache']} | "
                     + " | ".join(cells) + f" | {loaded} |")
    return "\n".join(lines) + "\n"


def _cmd(args: argparse.Namespace) -> int:
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="site-message-") as tmp:
        rows = bench_site_message(Path(tmp), tuple(args.formats), tuple(args.messages),
                                  args.rows, args.repeats)
    result = {"benchmark": "site-message", "repeats": args.repeats, "rows": rows,
              "python": sys.version.split()[0], "load_before": load_before,
              "load_after": load_average()}
    before = json.loads(Path(args.before).read_text()) if args.before else None
    md = site_message_markdown(result, before)
    paths = write_result(Path(args.out), "site_message", result, md)
    print(md)
    print(f"written: {paths}")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``site-message`` subcommand on ``bench``'s subparsers."""
    p = sub.add_parser("site-message",
                       help="one message's CPU at a site in a fresh process: Flower's "
                            "import, ours, the data read, the computation")
    p.add_argument("--formats", nargs="+", default=["npz", "csv"], choices=["npz", "csv"])
    p.add_argument("--messages", nargs="+", default=["data-source", "fkm-update"],
                   choices=["data-source", "fkm-update"])
    p.add_argument("--rows", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--before", default=None,
                   help="a previous site_message.json to show next to this result")
    p.add_argument("--out", default="bench-results")
    p.set_defaults(func=_cmd)
    return p
