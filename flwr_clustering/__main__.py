"""``python -m flwr_clustering status <out-dir>``: what a run's out-dir says about it.

Prints the run's status (``running``, ``completed``, ``failed``, ``stopped`` or
``interrupted``), the last round on disk and the reason; a run that ended without a word
(killed, its machine lost) is marked ``interrupted`` in its ``result.json`` on the way
(:func:`~flwr_clustering.app.checkpoint.run_status`). Exit code 0 for a completed or
running run, 1 otherwise, 2 for a directory without a run.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m flwr_clustering``."""
    parser = argparse.ArgumentParser(prog="python -m flwr_clustering",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="the status of the run in an out-dir")
    status.add_argument("out_dir", help="the run's out-dir")
    args = parser.parse_args(argv)

    from .app.checkpoint import run_status

    try:
        result = run_status(args.out_dir)
    except FileNotFoundError as ex:
        print(ex, file=sys.stderr)
        return 2
    state = result.get("status", "?")
    line = f"{args.out_dir}: {state}"
    last = result.get("last-round", result.get("rounds"))
    if last is not None:
        line += f", round {last}"
    if result.get("process"):
        proc = result["process"]
        line += f" (process {proc.get('pid')} on {proc.get('host')}, started {proc.get('started')})"
    print(line)
    if result.get("reason"):
        print(result["reason"])
    return 0 if state in ("completed", "running") else 1


if __name__ == "__main__":
    raise SystemExit(main())
