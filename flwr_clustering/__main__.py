"""``python -m flwr_clustering status|check``: a run's status; a site's check of its file.

``status <out-dir>`` prints the run's status (``running``, ``completed``, ``failed``,
``stopped`` or ``interrupted``), the last round on disk and the reason; a run that ended
without a word (killed, its machine lost) is marked ``interrupted`` in its ``result.json``
on the way (:func:`~flwr_clustering.app.checkpoint.run_status`). Exit code 0 for a
completed or running run, 1 otherwise, 2 for a directory without a run.

``check <file> [--schema schema.json|model.json]`` prints what a run would see of a
site's data file and whether the federation would accept it, in the server's words
(:func:`~flwr_clustering.data.site_check.check_file`); nothing leaves the machine. Exit
code 0 if the file would be accepted, 1 if not, 2 for an unreadable file or bad arguments.
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
    check = sub.add_parser(
        "check", help="check a data file before joining a federation (nothing is sent)",
        description="Print what a run would see of a data file (rows, columns and kinds, "
        "missing cells, identifier-like and text columns) and whether the federation "
        "would accept it. Exit code 0: accepted, 1: refused, 2: unreadable file or bad "
        "arguments.")
    check.add_argument("file", help="the site's data file (CSV, NPY, NPZ, Parquet)")
    check.add_argument("--schema", help="the federation's schema.json, or a run's model.json")
    check.add_argument("--index-column", help="the identifier column (dropped when read)")
    check.add_argument("--feature-columns", help="comma-separated: the run's features "
                       "(without --schema)")
    check.add_argument("--categorical-columns", help="comma-separated (without --schema)")
    check.add_argument("--datetime-columns", help="comma-separated (without --schema)")
    check.add_argument("--label-column", default="label",
                       help="the label column ('none': every column is data)")
    check.add_argument("--header", default="auto", help="true, false or auto (CSV)")
    check.add_argument("--missing", default="auto",
                       help="the run's missing-cell policy, without --schema "
                       "(auto, the App's default: mean, or partial for the masked "
                       "algorithms; mean, drop, partial, refuse)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as ex:  # argparse: 2 for bad arguments, 0 for --help
        return int(ex.code or 0)
    if args.command == "check":
        return _check(args)

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


def _names(value: str | None) -> list[str]:
    return [c.strip() for c in (value or "").split(",") if c.strip()]


def _check(args: argparse.Namespace) -> int:
    """``check``: print the file's report; 0 accepted, 1 refused, 2 unreadable."""
    from .data.site_check import check_file, load_schema

    header = {"true": True, "false": False}.get(str(args.header).strip().lower(), args.header)
    try:
        schema = None if args.schema is None else load_schema(args.schema)
        report = check_file(
            args.file, schema, feature_columns=_names(args.feature_columns) or None,
            index_column=args.index_column or None,
            categorical_columns=_names(args.categorical_columns),
            datetime_columns=_names(args.datetime_columns),
            label_column=args.label_column, header=header, missing=args.missing,
            schema_source=args.schema)
    except (FileNotFoundError, ValueError) as ex:
        print(f"check: {ex}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0 if report.accepted else 1


if __name__ == "__main__":
    raise SystemExit(main())
