"""Round trips per run: how many exchanges each algorithm's run makes (issue 52, item 2).

Every exchange is one ``Grid.send_and_receive``: on a deployment each costs a SuperNode's
poll (up to 3 s, Flower's) and a fresh ``flwr-clientapp`` process per node, whatever it
computes. This benchmark runs the App in process (``InProcessGrid``, no Flower runtime) at
its defaults on three sites of the default data set, counts the grid's
``send_and_receive`` calls and names their phases: the rounds' own, and what comes before
round 1 and after the last one. Run with::

    python -m simulations bench exchanges --out bench/exchanges
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from flwr_clustering.protocol import SPLIT_IN_EVALUATION_PHASE
from flwr_clustering.testing import InProcessGrid

from .common import write_result

__all__ = ["CASES", "EXCHANGES_BEFORE_AFTER", "bench_exchanges", "count_exchanges",
           "exchanges_before_after_table", "exchanges_markdown"]

#: (label, run-config overrides): the App's defaults, and the settings that add (or save)
#: exchanges.
CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fkm", {"algorithm": "fkm"}),
    # declared columns: the feature moments come in the data-source reply
    ("fkm feature-columns", {"algorithm": "fkm", "feature-columns": "0,1"}),
    ("fkm secure", {"algorithm": "fkm", "server-update": "lloyd",
                    "secure-aggregation": True}),
    ("fkm k='auto'", {"algorithm": "fkm", "k": "auto"}),
    ("kfed", {"algorithm": "kfed"}),
    ("feca", {"algorithm": "feca"}),
    ("mavg", {"algorithm": "mavg"}),
    ("ffcm", {"algorithm": "ffcm"}),
    ("masked-federated", {"algorithm": "masked-federated"}),
    ("masked-oneshot", {"algorithm": "masked-oneshot"}),
    ("dgc", {"algorithm": "dgc"}),
    ("kdc", {"algorithm": "kdc"}),
)


#: Exchanges per run of every case (:data:`CASES`), ``(before, after)``: before issue 52's
#: merges (2026-12-07, main at c2ed83a) and after them (2026-12-08). docs/protocol.md's
#: table is made from it (``python -m simulations docs``); a test counts the cheap cases
#: again.
EXCHANGES_BEFORE_AFTER: dict[str, tuple[int, int]] = {
    "fkm": (10, 9),
    "fkm feature-columns": (10, 8),
    "fkm secure": (55, 53),
    "fkm k='auto'": (27, 26),
    "kfed": (6, 5),
    "feca": (6, 5),
    "mavg": (6, 5),
    "ffcm": (13, 12),
    "masked-federated": (9, 8),
    "masked-oneshot": (6, 5),
    "dgc": (106, 106),
    "kdc": (5, 5),
}


def exchanges_before_after_table() -> str:
    """The Markdown table of :data:`EXCHANGES_BEFORE_AFTER` (docs/protocol.md)."""
    lines = ["| run (3 sites, the App's defaults) | before | after |", "|---|---|---|"]
    lines += [f"| {case} | {before} | {after} |"
              for case, (before, after) in EXCHANGES_BEFORE_AFTER.items()]
    return "\n".join(lines) + "\n"


class _CountingGrid(InProcessGrid):
    """The in-process grid, noting each exchange: its round, message type and phase."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exchanges: list[tuple[int, str, str]] = []

    def send_and_receive(self, messages, *, timeout=None):  # noqa: D102
        messages = list(messages)
        if messages:
            msg = messages[0]
            # our messages' "config" record; a SecAgg+ stage's own record otherwise
            records = msg.content.config_records
            config = records.get("config") or next(iter(records.values()), {})
            # (the final model's delivery has no phase: its message type names it)
            phase = str(config.get("phase") or config.get("stage")
                        or msg.metadata.message_type)
            if config.get("split-scatter") and phase == "evaluate":
                phase = SPLIT_IN_EVALUATION_PHASE  # the split check's sums rode along
            self.exchanges.append((int(msg.metadata.group_id or 0),
                                   str(msg.metadata.message_type), phase))
        return super().send_and_receive(messages, timeout=timeout)


def count_exchanges(run_config: dict[str, Any], nodes: int = 3) -> dict[str, Any]:
    """One in-process App run: its rounds and its exchanges, grouped.

    Returns
    -------
    dict
        ``rounds``; ``total`` exchanges; ``before`` (before round 1) and ``rounds_part``
        (the rounds', with the split check and the final evaluation after the last one),
        each a ``{phase: count}``.
    """
    from flwr_clustering.app.client_app import app
    from flwr_clustering.app.server_app import run_server

    grid = _CountingGrid(app, nodes, run_config=run_config)
    out = run_server(grid, run_config)
    before = Counter(phase for group, _, phase in grid.exchanges if group == 0)
    during = Counter(phase for group, _, phase in grid.exchanges if group > 0)
    return {"rounds": len(out["strategy"].history), "total": len(grid.exchanges),
            "before": dict(before), "rounds_part": dict(during)}


def bench_exchanges(out_root: Path, cases=CASES, nodes: int = 3) -> list[dict[str, Any]]:
    """:func:`count_exchanges` of every case (results written under ``out_root``)."""
    rows = []
    for label, overrides in cases:
        cfg = {"min-nodes": nodes, "out-dir": str(Path(out_root) / label.replace(" ", "-")
                                                  .replace("'", "")), **overrides}
        rows.append({"case": label, **count_exchanges(cfg, nodes)})
    return rows


def _phases(counts: dict[str, int]) -> str:
    return ", ".join(f"{p or '?'} x{n}" if n > 1 else (p or "?")
                     for p, n in counts.items()) or "-"


def exchanges_markdown(result: dict[str, Any]) -> str:
    """The table of :func:`bench_exchanges`."""
    lines = [
        f"# Exchanges per run ({result['nodes']} sites, the App's defaults, in process)",
        "",
        "An exchange is one round trip (`Grid.send_and_receive`); on a deployment each "
        "costs a SuperNode's poll and a fresh `flwr-clientapp` per node.",
        "",
        "| run | rounds | exchanges | before round 1 | the rounds (and after the last) |",
        "|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(f"| {r['case']} | {r['rounds']} | {r['total']} | {_phases(r['before'])}"
                     f" | {_phases(r['rounds_part'])} |")
    return "\n".join(lines) + "\n"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``exchanges`` subcommand on ``bench``'s subparsers."""
    p = sub.add_parser("exchanges", help="round trips per run for every algorithm "
                                         "(in process, the App's defaults)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--out", default="bench-results")
    p.set_defaults(func=_cmd)
    return p


def _cmd(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="exchanges-") as tmp:
        rows = bench_exchanges(Path(tmp), nodes=args.nodes)
    result = {"benchmark": "exchanges", "nodes": args.nodes, "rows": rows}
    md = exchanges_markdown(result)
    paths = write_result(Path(args.out), "exchanges", result, md)
    print(md)
    print(f"written: {paths}")
    return 0
