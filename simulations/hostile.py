"""One hostile or broken client, file or run config against the App: what each does to a run.

``python -m simulations hostile [--cases a,b] [--out DIR] [--memory-gib 4] [--seconds 180]``
runs the Flower App's ServerApp (:func:`~flwr_clustering.app.server_app.run_server`, the
code a deployment runs) on the in-process grid: scikit-learn's iris as five sites' CSV
files (IID, named columns), FKM with ``k=3`` unless a case says otherwise. In each case
one thing is hostile or broken:

* a reply of one client tampered with at the message level (:class:`TamperGrid`: the
  honest client answers, then its reply is altered before the server sees it), in every
  phase a run has: ``data-source``, ``categories``, ``feature-moments``, ``k-moments``,
  ``k-spreads``, ``split-scatter``, ``split-histograms``, ``refine``, the evaluation and
  the training rounds;
* one site's file (a name in a numeric column, a ``;``-separated file);
* the run config (``graph='/etc/passwd'`` for DGC, ``seed=-5``).

Every case runs in a process of its own, under an address-space limit (``--memory-gib``)
and a time limit (``--seconds``), so that a case that exhausts the server is reported as
such rather than taking the machine. Written: ``hostile.json`` and ``hostile.md``, one row
per case: how the run ended (completed, refused, crashed, killed), the ARI of its model on
the pooled rows against iris' species, how many clients the model holds, what the log and
``result.json`` said about the hostile party (its first characters), whether a secret of
the case (a cell of a site, a line of a server file) reached the server's log or
``result.json``, and the seconds it took.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import resource
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

SITES = 5
HOSTILE = 1
#: A cell of site 1 that must never leave it (case ``cell-in-error``).
SECRET_CELL = "Jane Q Public 1961-02-03"

#: ``{case: (what it is, run config, phase tampered or None, how)}``.
CASES: dict[str, tuple[str, dict[str, Any], str | None, str]] = {
    "honest": ("no hostile party", {}, None, ""),
    "long-name": ("a 50,000-character feature name in data-source", {}, "data-source",
                  "long-name"),
    "many-columns": ("100,000 column names in data-source", {}, "data-source",
                     "many-columns"),
    "deep-json": ("a 200,000-deep JSON categories reply", {"categorical-columns": "band"},
                  "categories", "deep-json"),
    "long-level": ("a 50,000-character category level", {"categorical-columns": "band"},
                   "categories", "long-level"),
    "category-counts": ("category counts x1e9", {"categorical-columns": "band"},
                        "categories", "category-counts"),
    "sumsq-1e12": ("feature-moments: sum of squares x1e12 on one feature", {},
                   "feature-moments", "sumsq-1e12"),
    "sumsq-1e12-robust": ("the same, with robust-scaling=true", {"robust-scaling": True},
                          "feature-moments", "sumsq-1e12"),
    "sumsq-negative": ("feature-moments: a negative sum of squares", {}, "feature-moments",
                       "sumsq-negative"),
    "count-1e9": ("feature-moments: a count of 1e9 for a site of 30 rows", {},
                  "feature-moments", "count-1e9"),
    "k-moments": ("k='auto': k-moments statistics negated x1e12", {"k": "auto"},
                  "k-moments", "poison"),
    "k-spreads": ("k='auto': k-spreads statistics negated x1e12", {"k": "auto"},
                  "k-spreads", "poison"),
    "split-scatter": ("split check: scatter statistics negated x1e12", {},
                      "split-scatter", "poison"),
    "split-histograms": ("split check: histograms negated x1e12", {}, "split-histograms",
                         "poison"),
    "refine": ("refine-rounds=2: refine statistics negated x1e12", {"refine-rounds": 2},
               "refine", "poison"),
    "evaluate": ("evaluation statistics negated x1e12", {}, "evaluate", "poison"),
    "train-bytes": ("a training reply of 64 MiB", {}, "train", "bytes"),
    "error-reason": ("an error reply of 8 MiB", {}, "train", "error-reason"),
    "duplicate-id": ("client 1 claims client 0's client-id", {}, "*", "duplicate-id"),
    "duplicate-id-3": ("the same, min-nodes=3", {"min-nodes": 3}, "*", "duplicate-id"),
    "cell-in-error": ("a name and a birth date in a numeric column of site 1", {}, None,
                      "cell-file"),
    "semicolon-csv": ("site 1's CSV separated by ';'", {}, None, "semicolon-file"),
    "all-fail-round-0": ("every site's file missing", {}, None, "no-files"),
    "graph-path": ("algorithm='dgc' graph='/etc/passwd'",
                   {"algorithm": "dgc", "graph": "/etc/passwd", "iterations": 5}, None, ""),
    "seed-negative": ("seed=-5", {"seed": -5}, None, ""),
}


def _grid_class():
    from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord

    from flwr_clustering.testing import InProcessGrid

    class TamperGrid(InProcessGrid):
        """The in-process grid, with one node's replies of one phase altered."""

        def __init__(self, *args, node: int, phase: str | None, how: str, **kwargs):
            super().__init__(*args, **kwargs)
            self.node, self.phase, self.how = node, phase, how
            self.tampered = 0

        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            phases = {}
            for m in messages:
                cfg = dict(m.content["config"]) if "config" in m.content else {}
                # (the final evaluation may carry the split check's scatter: its phase too)
                phase = str(cfg.get("phase", "") or (
                    "split-scatter" if cfg.get("split-scatter") else ""))
                phases[m.metadata.dst_node_id] = (phase, str(m.metadata.message_type))
            replies = super().send_and_receive(messages, timeout=timeout)
            out = []
            for r in replies:
                node = r.metadata.src_node_id
                phase, mtype = phases.get(node, ("", ""))
                if node == self.node and self._hits(phase, mtype) and not r.has_error():
                    r = self._tamper(r, phase)
                    self.tampered += 1
                out.append(r)
            return out

        def _hits(self, phase: str, mtype: str) -> bool:
            if self.phase == "*":
                return True
            if self.phase == "evaluate":
                return mtype == "evaluate" and phase != "split-scatter"
            if self.phase == "train":
                return mtype == "train"
            return phase == self.phase

        def _tamper(self, r, phase):
            how = self.how
            content = r.content
            if how == "duplicate-id":
                metrics = dict(content["metrics"])
                metrics["client-id"] = 0
                content["metrics"] = MetricRecord(metrics)
                return r
            if how == "error-reason":
                return Message(Error(code=1, reason="client 1: " + "e" * (8 << 20)),
                               reply_to=self._sent_to(r))
            if how in ("long-name", "many-columns"):
                cols = dict(content["columns"])
                extra = (["x" * 50_000] if how == "long-name"
                         else [f"c{i}" for i in range(100_000)])
                cols["names"] = list(cols["names"]) + extra
                cols["kinds"] = list(cols["kinds"]) + ["numeric"] * len(extra)
                cols["unique"] = list(cols["unique"]) + [0] * len(extra)
                content["columns"] = ConfigRecord(cols)
                return r
            if how in ("deep-json", "long-level", "category-counts"):
                cols = dict(content["columns"])
                if how == "deep-json":
                    cols["categories"] = "[" * 200_000 + "]" * 200_000
                else:
                    counts = json.loads(str(cols["categories"]))
                    for column, values in counts.items():
                        if how == "long-level":
                            values["y" * 50_000] = 10
                        else:
                            counts[column] = {v: int(n) * 10**9 for v, n in values.items()}
                    cols["categories"] = json.dumps(counts)
                content["columns"] = ConfigRecord(cols)
                return r
            if how in ("sumsq-1e12", "sumsq-negative", "count-1e9"):
                stats = {k: v.numpy().copy() for k, v in content["stats"].items()}
                if how == "sumsq-1e12":
                    stats["moment-sumsq"][2] *= 1e12  # petal length
                elif how == "sumsq-negative":
                    stats["moment-sumsq"][0] = -abs(stats["moment-sumsq"][0]) - 1.0
                else:
                    stats["moment-count"][:] = 1e9
                content["stats"] = ArrayRecord({k: Array(v) for k, v in stats.items()})
                return r
            if how == "poison":
                for name in ("stats", "arrays"):
                    if name not in content:
                        continue
                    record = content[name]
                    items = list(record.items())
                    poisoned = {k: Array(-1e12 * np.abs(np.asarray(v.numpy(), dtype=float))
                                         - 1.0) for k, v in items}
                    content[name] = ArrayRecord(poisoned)
                metrics = dict(content["metrics"])
                for k, v in list(metrics.items()):
                    if k not in ("num-examples", "client-id") and isinstance(v, float):
                        metrics[k] = -1e12
                content["metrics"] = MetricRecord(metrics)
                return r
            if how == "bytes":
                arrays = content["arrays"].to_numpy_ndarrays()
                arrays.append(np.zeros(8 << 20))
                content["arrays"] = ArrayRecord(arrays)
                return r
            return r

        def _sent_to(self, reply):
            for m in reversed(self.sent):
                if m.metadata.message_id == reply.metadata.reply_to_message_id:
                    return m
            return self.sent[-1]

    return TamperGrid


def _write_sites(root: Path, how: str) -> tuple[list[str], np.ndarray, Any]:
    """Five sites' CSV files of iris (IID); returns their paths, the labels, the rows."""
    from sklearn.datasets import load_iris

    data = load_iris(as_frame=True)
    frame = data.frame.drop(columns="target")
    if how in ("deep-json", "long-level", "category-counts"):
        frame["band"] = np.where(frame["petal width (cm)"] > 1.0, "wide", "narrow")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(frame))
    parts = np.array_split(order, SITES)
    paths = []
    for i, idx in enumerate(parts):
        site = frame.iloc[idx].reset_index(drop=True)
        path = root / f"site{i}.csv"
        if i == HOSTILE and how == "cell-file":
            site = site.astype({"sepal length (cm)": object})
            site.loc[3, "sepal length (cm)"] = SECRET_CELL
        if i == HOSTILE and how == "semicolon-file":
            site.to_csv(path, index=False, sep=";")
        else:
            site.to_csv(path, index=False)
        paths.append(str(path) if how != "no-files" else str(root / f"missing{i}.csv"))
    labels = data.target.to_numpy()[np.concatenate(parts)]
    rows = frame.iloc[np.concatenate(parts)].reset_index(drop=True)
    return paths, labels, rows


def _secret_of(case: str) -> str | None:
    if case == "cell-in-error":
        return SECRET_CELL
    if case == "graph-path":
        try:
            return Path("/etc/passwd").read_text().splitlines()[0]
        except OSError:
            return None
    return None


def _one(case: str, out: str, memory_gib: float, queue) -> None:
    """Run ``case`` (in a process of its own) and put its row on ``queue``."""
    limit = int(memory_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
    os.environ.setdefault("MPLBACKEND", "Agg")
    row: dict[str, Any] = {"case": case, "what": CASES[case][0]}
    start = time.monotonic()
    log_lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.name.startswith(("flwr_clustering.clients",  # the site's own log
                                       "flwr_clustering.app.client_app")):
                return
            try:
                log_lines.append(record.getMessage())
            except Exception:  # noqa: BLE001
                log_lines.append(str(record.msg))

    handler = Keep(level=logging.WARNING)
    logging.getLogger("flwr_clustering").addHandler(handler)
    try:
        from sklearn.metrics import adjusted_rand_score

        from flwr_clustering.app.client_app import app
        from flwr_clustering.app.server_app import run_server
        from flwr_clustering.data.schema import FeatureTable

        what, extra, phase, how = CASES[case]
        root = Path(out) / case
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        paths, labels, rows = _write_sites(root, how)
        cfg = {"algorithm": "fkm", "dataset": "local", "k": 3, "max-rounds": 10,
               "out-dir": str(root / "run"), "min-nodes": SITES - 1, "round-timeout": 60.0,
               **extra}
        grid = _grid_class()(app, SITES, run_config=cfg,
                             node_configs=[{"data-path": p} for p in paths],
                             node=100 + HOSTILE, phase=phase, how=how)
        try:
            try:
                result = run_server(grid, cfg)
            finally:
                row["tampered replies"] = grid.tampered
            strategy = result["strategy"]
            row["ended"] = "completed"
            transform = strategy.feature_transform
            C = np.asarray(strategy.centroids, dtype=float)
            if transform is not None and C.ndim == 2:
                Z = transform.apply(FeatureTable.from_frame(rows))
                pred = np.argmin(((Z[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
                row["ari"] = round(float(adjusted_rand_score(labels, pred)), 3)
            history = getattr(strategy, "history", [])
            if history:
                row["clients"] = history[-1].get("clients")
        except MemoryError:
            row["ended"] = "killed: out of memory"
        except Exception as ex:  # noqa: BLE001
            row["ended"] = "refused" if isinstance(ex, ValueError | RuntimeError
                                                   | PermissionError) else "crashed"
            row["error"] = f"{type(ex).__name__}: {str(ex)[:300]}"
            row["traceback-lines"] = len(traceback.format_exc().splitlines())
        said = [line for line in log_lines if f"client {HOSTILE}" in line
                or "node 101" in line or "graph" in line]
        row["log"] = [line[:200] for line in said[:3]]
        result_file = root / "run" / "result.json"
        row["result.json"] = result_file.exists()
        run_dir = root / "run"
        row["empty out-dir left"] = run_dir.is_dir() and not any(run_dir.iterdir())
        if result_file.exists():
            text = result_file.read_text()
            row["result.json bytes"] = len(text)
            status = json.loads(text)
            row["result error"] = str(status.get("reason", ""))[:300]
        secret = _secret_of(case)
        if secret:
            seen = "\n".join(log_lines)
            if result_file.exists():
                seen += result_file.read_text()
            row["secret left"] = secret in seen
    except MemoryError:
        row["ended"] = "killed: out of memory"
    except BaseException as ex:  # noqa: BLE001
        row["ended"] = "crashed"
        row["error"] = f"{type(ex).__name__}: {str(ex)[:300]}"
    row["seconds"] = round(time.monotonic() - start, 1)
    queue.put(row)


def run_case(case: str, out: str, memory_gib: float, seconds: float) -> dict[str, Any]:
    """Run one case in a process of its own under the memory and time limits."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_one, args=(case, out, memory_gib, queue))
    start = time.monotonic()
    proc.start()
    proc.join(seconds)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"case": case, "what": CASES[case][0],
                "ended": f"killed: over {seconds:g} s", "seconds": round(seconds, 1)}
    try:
        return queue.get(timeout=5)
    except Exception:  # noqa: BLE001
        return {"case": case, "what": CASES[case][0],
                "ended": f"killed (exit code {proc.exitcode})",
                "seconds": round(time.monotonic() - start, 1)}


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of the rows."""
    lines = ["| case | ended | ARI | clients | tampered | secret left | s | what the server said |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        said = r.get("error") or r.get("result error") or "; ".join(r.get("log", []))
        said = said.replace("|", "/").replace("\n", " ")[:160]
        lines.append(f"| {r['case']} | {r['ended']} | {r.get('ari', '')} | "
                     f"{r.get('clients', '')} | {r.get('tampered replies', '')} | "
                     f"{r.get('secret left', '')} | "
                     f"{r.get('seconds', '')} | {said} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the cases; write hostile.json and hostile.md."""
    parser = argparse.ArgumentParser(prog="python -m simulations hostile",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated (default: all)")
    parser.add_argument("--out", default="", help="directory (default: a temporary one)")
    parser.add_argument("--memory-gib", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=180.0)
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c] or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    out = Path(args.out or tempfile.mkdtemp(prefix="hostile-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases:
        row = run_case(case, str(out), args.memory_gib, args.seconds)
        print(json.dumps(row), flush=True)
        rows.append(row)
    (out / "hostile.json").write_text(json.dumps(rows, indent=1))
    (out / "hostile.md").write_text(table(rows))
    print(table(rows))
    print(f"written: {out / 'hostile.json'}, {out / 'hostile.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
