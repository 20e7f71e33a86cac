"""The command line of the reproductions: reproduce paper experiments, list them, run benchmarks.

Usage, from the repository root::

    python -m simulations list
    python -m simulations reproduce garst-fig1b [--runs N] [--rounds R] [--tol T] [--seed S]
                                                [--out DIR] [--methods M ...] [--jobs J]
    python -m simulations reproduce all --out results
    python -m simulations bench <bench arguments>      # simulations.benchmarks.bench
    python -m simulations quality [--quick] [--out DIR] ...  # simulations.benchmarks.quality
    python -m simulations docs [--check]               # regenerate docs/protocol.md
    python -m simulations dp-utility [--runs N] [--rounds R] [--out DIR]  # DP's cost
    python -m simulations robust [--seeds N] [--out DIR]  # one lying site, robust-trim
    python -m simulations robust-scaling [--seeds N] [--out DIR]  # extreme feature moments
    python -m simulations categorical [--seeds N] [--out DIR]  # categorical-weight's ARI
    python -m simulations secagg [--clients N ...] [--rounds R] [--out DIR]  # SecAgg+'s
    python -m simulations hostile [--cases a,b] [--out DIR]  # one hostile party per phase

``reproduce`` writes ``<out>/<experiment>.json`` (one row per method and setting:
``experiment, method, setting, metric, ours_mean, ours_std, paper, runs`` and more),
``<out>/<experiment>.md`` (ours, mean ± std over runs, against the paper's mean) and PNG box
plots.

Defaults are the paper's protocol: 200 runs per setting and R = 100 FKM rounds. On the
beta-split data (``garst-fig1b``, ``garst-noise``) FKM stops early once the
Hungarian-matched shift of the global centroids is <= 1e-6: from that fixed point the
remaining rounds changed nothing in 420 runs checked against exactly 100 rounds, and the
early stop cuts the cost several-fold. ``garst-clusterwise`` runs exactly 100 rounds, since
the paper-era unweighted server seeding can still jump between optima there. Measured CPU
time with one process: about 150 s for ``garst-fig1b``, 450 s for ``garst-noise`` and
150 s for ``garst-clusterwise`` (wall time is higher on a loaded machine; ``--jobs 2`` uses
both cores). ``--tol`` overrides the early stop (negative: exactly R rounds).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from collections.abc import Sequence

from .framework import DEFAULT_ROUNDS, DEFAULT_RUNS, DEFAULT_TOL, EXPERIMENTS, reproduce

__all__ = ["build_parser", "main"]

logger = logging.getLogger("simulations")

#: The command, as the help and the messages show it.
PROG = "python -m simulations"

#: The benchmark module, imported only by ``bench``.
BENCH_MODULE = "simulations.benchmarks.bench"
#: The quality benchmark, imported only by ``quality``.
QUALITY_MODULE = "simulations.benchmarks.quality"

_DEFAULTS_HELP = (
    f"Defaults follow the paper: {DEFAULT_RUNS} runs per setting, R = {DEFAULT_ROUNDS} FKM "
    f"rounds. garst-fig1b and garst-noise stop FKM early once the matched centroid shift is "
    f"<= {DEFAULT_TOL:g} (a fixed point: in 420 runs checked against exactly R rounds the "
    "result never changed), which keeps the full protocol at minutes on two cores; "
    "garst-clusterwise runs exactly R rounds (there the paper's unweighted server seeding "
    "can still jump between optima late)."
)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of ``python -m simulations``.

    Returns
    -------
    argparse.ArgumentParser
        With subcommands ``reproduce``, ``list``, ``bench``, ``quality`` and ``docs``.
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Federated clustering for Flower: paper reproductions and benchmarks.",
        epilog=_DEFAULTS_HELP,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    rep = sub.add_parser(
        "reproduce",
        help="run a paper experiment; write <out>/<name>.json, .md and .png",
        description="Run paper experiments and compare with the paper's numbers. "
        + _DEFAULTS_HELP,
    )
    rep.add_argument("experiments", nargs="+", metavar="EXPERIMENT",
                     help=f"experiment name(s), or 'all': {', '.join(EXPERIMENTS)}")
    rep.add_argument("--runs", type=_positive_int, default=DEFAULT_RUNS,
                     help=f"runs per method and setting (default {DEFAULT_RUNS}, the paper's)")
    rep.add_argument("--rounds", type=_positive_int, default=DEFAULT_ROUNDS,
                     help=f"FKM round cap R (default {DEFAULT_ROUNDS}, the paper's)")
    rep.add_argument("--tol", type=float, default=None,
                     help="FKM early stop on the matched centroid shift (negative: exactly R "
                          "rounds); default: the experiment's, "
                          + ", ".join(f"{n} {e.tol:g}" for n, e in EXPERIMENTS.items()))
    rep.add_argument("--seed", type=int, default=0,
                     help="seed of run 0; run r uses seed+r for every method (default 0)")
    rep.add_argument("--out", default="./results", help="output directory (default ./results)")
    rep.add_argument("--methods", nargs="+", metavar="METHOD",
                     help="only these methods (default: all of the experiment's)")
    rep.add_argument("--jobs", type=_positive_int, default=1,
                     help="worker processes, one BLAS thread each (default 1); results do "
                          "not depend on it")
    rep.add_argument("--no-plot", action="store_true", help="do not write PNG files")
    rep.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    sub.add_parser("list", help="list the experiments", description="List the experiments.")

    docs = sub.add_parser(
        "docs", help="regenerate docs/protocol.md (the message protocol) from the registry",
        description="Write docs/protocol.md from the registry: the wire form, and per "
        "algorithm its config keys and messages.",
    )
    docs.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 if the page is out of date")
    docs.add_argument("--root", default=".",
                      help="the repository root (default: the current directory)")

    sub.add_parser(
        "bench", help=f"benchmarks ({BENCH_MODULE}); arguments pass through",
        add_help=False,
    )
    sub.add_parser(
        "quality", help=f"every algorithm at its defaults on public data ({QUALITY_MODULE}); "
        "arguments pass through", add_help=False,
    )
    sub.add_parser(
        "secagg", help="secure aggregation's cost per round and the differencing attack "
        "(simulations.secagg); arguments pass through", add_help=False,
    )
    sub.add_parser(
        "dp-utility", help="what differential privacy costs: DP federated Lloyd against "
        "k-means (simulations.dp_utility); arguments pass through", add_help=False,
    )
    sub.add_parser(
        "choose-k", help="k='auto' against the centralized choice of k "
        "(simulations.choose_k); arguments pass through", add_help=False,
    )
    sub.add_parser(
        "robust", help="one lying site against FKM: the mean bound and robust-trim "
        "(simulations.robust); arguments pass through", add_help=False,
    )
    sub.add_parser(
        "robust-scaling", help="one site's extreme feature moments against the scaling: "
        "robust-scaling (simulations.robust_scaling); arguments pass through",
        add_help=False,
    )
    sub.add_parser(
        "missing", help="missing cells (mean, drop, partial against the centralized "
        "pipeline) and the unit check's hits and false alarms (simulations.missing_data); "
        "arguments pass through", add_help=False,
    )
    sub.add_parser(
        "hostile", help="one hostile or broken client, file or run config against the "
        "App, per phase (simulations.hostile); arguments pass through", add_help=False,
    )
    sub.add_parser(
        "categorical", help="a categorical column against the measurements: "
        "categorical-weight's ARI (simulations.categorical); arguments pass through",
        add_help=False,
    )
    return parser


def _list() -> int:
    for name, exp in EXPERIMENTS.items():
        print(f"{name}")
        print(f"    {exp.title}")
        print(f"    paper numbers: {exp.source}")
        print(f"    settings ({len(exp.settings)}): "
              f"{', '.join(s.label for s in exp.settings)}")
        print(f"    methods: {', '.join(m.name for m in exp.methods)}")
    return 0


def _bench(argv: Sequence[str]) -> int:
    try:
        bench = importlib.import_module(BENCH_MODULE)
    except ModuleNotFoundError as err:
        if err.name != BENCH_MODULE:
            raise
        print(f"{PROG} bench: the benchmark module {BENCH_MODULE} is not available in this "
              "installation", file=sys.stderr)
        return 2
    return int(bench.main(list(argv)) or 0)


def _quality(argv: Sequence[str]) -> int:
    quality = importlib.import_module(QUALITY_MODULE)
    return int(quality.main(list(argv)) or 0)


def _docs(args: argparse.Namespace) -> int:
    from .docs import PROTOCOL_PAGE, write_protocol_page

    up_to_date = write_protocol_page(args.root, check=args.check)
    if up_to_date:
        print(f"{PROTOCOL_PAGE} is up to date")
        return 0
    if args.check:
        print(f"{PROTOCOL_PAGE} is out of date: run {PROG} docs", file=sys.stderr)
        return 1
    print(f"wrote {PROTOCOL_PAGE}")
    return 0


def _reproduce(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    names = list(EXPERIMENTS) if "all" in args.experiments else list(args.experiments)
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        parser.error(f"unknown experiment(s) {', '.join(map(repr, unknown))}; "
                     f"available: {', '.join(EXPERIMENTS)} (or 'all')")
    if args.methods:
        for name in names:
            try:
                for m in args.methods:
                    EXPERIMENTS[name].method(m)
            except ValueError as err:
                parser.error(str(err))
    if not args.quiet:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                            datefmt="%H:%M:%S")
        logger.setLevel(logging.INFO)
    for name in names:
        start = time.perf_counter()
        result = reproduce(
            name, args.out, runs=args.runs, rounds=args.rounds, tol=args.tol, seed=args.seed,
            methods=args.methods, jobs=args.jobs, plot=not args.no_plot,
        )
        print(f"{name}: {time.perf_counter() - start:.1f} s; wrote "
              + ", ".join(result["files"]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m simulations``.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit code: 0 on success, 2 when the benchmark module is missing, 1 when
        ``docs --check`` finds the page out of date. Bad arguments
        (e.g. an unknown experiment) raise ``SystemExit(2)`` with a message, as argparse does.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    if argv and argv[0] == "quality":
        return _quality(argv[1:])
    if argv and argv[0] == "secagg":
        return int(importlib.import_module("simulations.secagg").main(argv[1:]) or 0)
    if argv and argv[0] == "dp-utility":
        return int(importlib.import_module("simulations.dp_utility").main(argv[1:]) or 0)
    if argv and argv[0] == "choose-k":
        return int(importlib.import_module("simulations.choose_k").main(argv[1:]) or 0)
    if argv and argv[0] == "robust":
        return int(importlib.import_module("simulations.robust").main(argv[1:]) or 0)
    if argv and argv[0] == "robust-scaling":
        return int(importlib.import_module("simulations.robust_scaling").main(argv[1:]) or 0)
    if argv and argv[0] == "missing":
        return int(importlib.import_module("simulations.missing_data").main(argv[1:]) or 0)
    if argv and argv[0] == "hostile":
        return int(importlib.import_module("simulations.hostile").main(argv[1:]) or 0)
    if argv and argv[0] == "categorical":
        return int(importlib.import_module("simulations.categorical").main(argv[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "docs":
        return _docs(args)
    return _reproduce(parser, args)

