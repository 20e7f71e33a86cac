"""Secure aggregation's figures: its cost per round, and what the differencing attack still gets.

``python -m simulations secagg [--clients 10 100 1000] [--rounds R] [--exchange-max N]
[--out DIR]``

Cost
    FKM with ``server-update='lloyd'`` on the Garst grid (``ppc`` rows per cluster, the
    rows dealt IID to ``n`` clients), the same start and rounds without secure
    aggregation, with it (``secagg-keys='run'``: keys agreed once per run) and, up to
    ``--exchange-max`` clients, with Flower's SecAgg+ per exchange
    (``secagg-keys='exchange'``), through the in-process grid (every ClientApp in this
    process, no Ray and no network: the protocol's own computation, key agreement, Shamir
    sharing, masking, unmasking, is what is measured, one client after the other). Median
    seconds per round (the first round, which holds the run's key setup, apart), and the
    bytes the server received per client per round.

Attack
    The differencing attack (:func:`simulations.privacy.differencing_attack`) on the Garst
    grid's paper split (800 rows, 5 clients, beta = 0.1, 1, 10), 20 rounds of federated
    Lloyd from the same start: on each client's uploads of the plain run, and on the
    federation's totals, which are all a secure run's server holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord

from flwr_clustering.algorithms.fkm import dense_totals, fkm_client_update, lloyd_from_totals
from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.clients import FedKMeansClient, client_app
from flwr_clustering.data.synthetic import garst_beta_split, garst_grid
from flwr_clustering.strategies import FedKMeans
from flwr_clustering.testing import InProcessGrid
from simulations.privacy import differencing_attack, fkm_uploads, recovered_rows

__all__ = ["attack", "cost", "main"]


def _app(parts):
    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        return FedKMeansClient(parts[i], client_id=i)
    return client_app(client_fn)


def _run(parts, C0, rounds, keys):
    """One run: ``keys`` None (plain), 'run' or 'exchange'; (strategy, s/round, first, bytes)."""
    grid = InProcessGrid(_app(parts), len(parts))
    strategy = FedKMeans(len(C0), server_update="lloyd", tol=-1.0, max_rounds=rounds,
                         min_nodes=len(parts), secure_aggregation=keys is not None,
                         secagg_keys=keys or "run", evaluate=False, split_check=False)
    strategy.start(grid=grid, initial_arrays=ArrayRecord({"centroids": Array(C0)}))
    seconds = [h["seconds"] for h in strategy.history]
    received = sum(len(a.data) for m in grid.received if m.metadata.message_type == "train"
                   for r in m.content.array_records.values() for a in r.values())
    later = len(strategy.history)
    if keys is not None:  # the rounds after the first (which holds the run's key setup)
        received = sum(e.get("masked-bytes", 0) for e in strategy.ledger
                       if e["phase"].startswith("secure-update") and e["round"] > 1)
        later -= 1
    return (strategy, statistics.median(seconds[1:]), seconds[0],
            received / (len(parts) * later))


def cost(clients=(10, 100, 1000), rounds: int = 4, ppc: int = 250,
         exchange_max: int = 100) -> list[dict]:
    """Seconds per round and bytes per client, plain and secure, for each client count."""
    X, _ = garst_grid(ppc=ppc, seed=0)
    rng = np.random.default_rng(0)
    C0 = X[rng.choice(len(X), 16, replace=False)]
    rows = []
    for n in clients:
        parts = np.array_split(X[rng.permutation(len(X))], n)
        plain, t_plain, _, b_plain = _run(parts, C0, rounds, None)
        secure, t_secure, t_first, b_secure = _run(parts, C0, rounds, "run")
        row = {"clients": n, "rows": len(X), "rounds": rounds,
               "plain-seconds": t_plain, "secure-seconds": t_secure,
               "ratio": t_secure / t_plain, "first-round-seconds": t_first,
               "plain-bytes": b_plain, "secure-bytes": b_secure,
               "max-centroid-difference": float(np.abs(plain.centroids
                                                       - secure.centroids).max())}
        if n <= exchange_max:
            flower, t_flower, _, b_flower = _run(parts, C0, rounds, "exchange")
            row.update({"secaggplus-seconds": t_flower, "secaggplus-ratio": t_flower / t_plain,
                        "secaggplus-bytes": b_flower})
        rows.append(row)
        print(row, flush=True)
    return rows


def _totals_view(parts, C0, rounds):
    """The federation's totals of every round (what a secure run's server holds)."""
    C, seen = C0, []
    for _ in range(rounds):
        totals = [dense_totals(fkm_client_update(x, C), len(C0), C0.shape[1]) for x in parts]
        sums, counts = sum(t[0] for t in totals), sum(t[1] for t in totals)
        ok = counts > 0
        seen.append(LocalCentroids(sums[ok] / counts[ok, None], counts[ok].astype(np.int64),
                                   np.flatnonzero(ok).astype(np.int64)))
        C = lloyd_from_totals(sums, counts, C)
    return seen


def attack(betas=(0.1, 1.0, 10.0), rounds: int = 20) -> list[dict]:
    """Rows the differencing attack recovers: per-client uploads vs the secure totals."""
    rows = []
    for beta in betas:
        X, _, c = garst_beta_split(beta)
        parts = [X[c == i] for i in range(5)]
        C0 = X[np.random.default_rng(0).choice(len(X), 16, replace=False)]
        grid = InProcessGrid(_app(parts), 5)
        FedKMeans(16, server_update="lloyd", tol=-1.0, max_rounds=rounds, min_nodes=5).start(
            grid=grid, initial_arrays=ArrayRecord({"centroids": Array(C0)}))
        per_client = sum(recovered_rows(differencing_attack(u), parts[cid])
                         for cid, u in fkm_uploads(grid.received).items())
        on_totals = recovered_rows(differencing_attack(_totals_view(parts, C0, rounds)), X,
                                   atol=1e-6)
        rows.append({"beta": beta, "rows": len(X), "rounds": rounds,
                     "plain": per_client, "secure": on_totals})
    return rows


def markdown(costs: list[dict], attacks: list[dict]) -> str:
    """The two tables of docs/privacy.md."""
    lines = ["| clients | plain s/round | secure s/round (keys once per run) | ratio | first "
             "secure round (with the key setup) s | Flower's SecAgg+ per exchange s/round "
             "| ratio | bytes per client per round, plain / secure / SecAgg+ | largest "
             "centroid difference |", "|---|---|---|---|---|---|---|---|---|"]
    for r in costs:
        flower = (f"{r['secaggplus-seconds']:.3f} | {r['secaggplus-ratio']:.1f}"
                  if "secaggplus-seconds" in r else "- | -")
        fb = f"{r['secaggplus-bytes']:.0f}" if "secaggplus-bytes" in r else "-"
        lines.append(f"| {r['clients']} | {r['plain-seconds']:.3f} | {r['secure-seconds']:.3f} "
                     f"| {r['ratio']:.1f} | {r['first-round-seconds']:.2f} | {flower} "
                     f"| {r['plain-bytes']:.0f} / {r['secure-bytes']:.0f} / {fb} "
                     f"| {r['max-centroid-difference']:.1e} |")
    lines += ["", "| beta | rows recovered from each client's uploads (plain) | from the "
              "federation's totals (secure) |", "|---|---|---|"]
    for r in attacks:
        lines.append(f"| {r['beta']:g} | {r['plain']} of {r['rows']} | {r['secure']} of "
                     f"{r['rows']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m simulations secagg``."""
    parser = argparse.ArgumentParser(prog="python -m simulations secagg",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--exchange-max", type=int, default=100,
                        help="run Flower's SecAgg+ per exchange up to this many clients")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    costs = cost(args.clients, args.rounds, exchange_max=args.exchange_max)
    attacks = attack()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "secagg.json").write_text(json.dumps({"cost": costs, "attack": attacks}, indent=1))
    table = markdown(costs, attacks)
    (out / "secagg.md").write_text(table)
    print(table)
    print(f"in {time.monotonic() - t0:.0f} s; written to {out}/secagg.json and .md")
    return 0
