"""Choosing k inside the federation: ``k='auto'`` against the centralized choice.

``python -m simulations choose-k [--seeds 3] [--data NAME ...] [--algorithms A ...]
[--quick] [--out DIR]`` runs the library's search (:mod:`flwr_clustering.strategies.choose_k`,
through :class:`flwr_clustering.FederatedClustering` with ``n_clusters='auto'``,
``k = 2..10``: the real strategy and clients on the in-process grid) on labelled data
sets built from scikit-learn's bundled sets and generators, **in raw units**: the
federation scales them itself (``scaling='standard'``, from the clients' sums), as a
consortium would. Nothing is downloaded.

Data (true k; clients): ``iris`` (3; 5), ``wine`` (3; 5), ``breast-cancer`` (2; 10),
``digits`` (10; 10), ``blobs4`` (4 centres, 5 features, 2000 rows; 20), ``blobs5`` (5, 8,
3000; 30), ``blobs8`` (8, 10, 4000; 50), ``varied`` (3 blobs of different spreads, 1500
rows; 10), ``aniso`` (3 sheared blobs, 1500; 10). Splits: IID and Dirichlet(0.3) over the
labels (Flower Datasets' partitioners, :func:`flwr_clustering.data.registry.split_arrays`).
Seeds 0..S-1 draw the generated sets, the split and every algorithm's randomness.

The reference is **centralized**: the pooled rows standardised
(``StandardScaler``), ``KMeans(k, n_init=10)`` for every ``k`` of 2..10, and the ``k`` of
the best ``sklearn.metrics.silhouette_score`` (the full silhouette, which no federation
can compute), Calinski-Harabasz and Davies-Bouldin. Each federated run is compared with it
per rule (the ``k`` each of ``k-rule``'s choices picks) and with the true ``k``.

Columns of the agreement table, per algorithm (FKM with ``n-init`` 1 and 3; k-FED and
FeCA as they are and with ``refine-rounds=10``: up to 10 federated Lloyd rounds of every
candidate before the choice) and rule:
the share of runs whose chosen ``k`` equals the centralized silhouette choice, the
centralized choice of the same criterion, and the true ``k``. The cost table: rounds,
uploaded bytes per client (the privacy ledger's floats and integers, 8 bytes each; the
split check of the final model left out, the same feature in both runs at whichever
``k`` they end with) and seconds of the ``auto`` run against one run at the largest ``k``
(10), on the in-process grid (compute, no network: a deployment waits for messages, so
there the rounds set the time). The ``n-init`` table: FKM's SSE at the true ``k`` (the
kept start's model, on every pooled row) over centralized ``KMeans(n_init=10)``'s on the
same rows, the worst seed per data set, with one start and with three.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

K_MIN, K_MAX = 2, 10
SPLITS = ("iid", "dirichlet")
DIRICHLET_ALPHA = 0.3
#: name: (load_dataset arguments, true k, clients)
SETS: dict[str, tuple[dict[str, Any], int, int]] = {
    "iris": ({"name": "iris"}, 3, 5),
    "wine": ({"name": "wine"}, 3, 5),
    "breast-cancer": ({"name": "breast-cancer"}, 2, 10),
    "digits": ({"name": "digits"}, 10, 10),
    "blobs4": ({"name": "blobs", "n_samples": 2000, "n_features": 5, "centers": 4}, 4, 20),
    "blobs5": ({"name": "blobs", "n_samples": 3000, "n_features": 8, "centers": 5}, 5, 30),
    "blobs8": ({"name": "blobs", "n_samples": 4000, "n_features": 10, "centers": 8}, 8, 50),
    "varied": ({"name": "varied", "n_samples": 1500}, 3, 10),
    "aniso": ({"name": "aniso", "n_samples": 1500}, 3, 10),
}
#: The variants run on every case: (label, algorithm, options).
VARIANTS = (("fkm", "fkm", {}), ("fkm n-init=3", "fkm", {"n_init": 3}),
            ("kfed", "kfed", {}), ("kfed refine-rounds=10", "kfed", {"refine_rounds": 10}),
            ("feca", "feca", {}), ("feca refine-rounds=10", "feca", {"refine_rounds": 10}))
RULES = ("silhouette", "calinski-harabasz", "davies-bouldin", "sse-knee")
QUICK = {"data": ("iris", "blobs4"), "seeds": 1, "splits": ("iid",)}


def load(name: str, seed: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The raw rows, labels, true k and client count of a benchmark set."""
    from flwr_clustering.data.registry import load_dataset

    kwargs, k, clients = SETS[name]
    kwargs = dict(kwargs)
    X, y, _ = load_dataset(kwargs.pop("name"), seed=seed, **kwargs)
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64), k, clients


def centralized(X: np.ndarray, seed: int) -> dict[str, Any]:
    """Centralized choices on the standardised pooled rows (``KMeans(n_init=10)``)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score, silhouette_score
    from sklearn.preprocessing import StandardScaler

    Xs = StandardScaler().fit_transform(X)
    scores: dict[str, dict[int, float]] = defaultdict(dict)
    for k in range(K_MIN, K_MAX + 1):
        km = KMeans(k, n_init=10, random_state=seed).fit(Xs)
        scores["silhouette"][k] = float(silhouette_score(Xs, km.labels_))
        scores["calinski-harabasz"][k] = float(calinski_harabasz_score(Xs, km.labels_))
        scores["davies-bouldin"][k] = float(davies_bouldin_score(Xs, km.labels_))
        scores["sse"][k] = float(km.inertia_)
    return {
        "silhouette": max(scores["silhouette"], key=scores["silhouette"].get),
        "calinski-harabasz": max(scores["calinski-harabasz"],
                                 key=scores["calinski-harabasz"].get),
        "davies-bouldin": min(scores["davies-bouldin"], key=scores["davies-bouldin"].get),
        "sse": scores["sse"],
    }


#: Left out of the cost: the split check of the final model (``k d^2`` floats per client,
#: at whichever ``k`` the run ends with), the same feature in both runs.
SPLIT_PHASES = ("split-scatter", "split-histograms")


def _upload_bytes(strategy) -> tuple[float, int]:
    """Bytes uploaded per client (the ledger's floats and integers) and the messages.

    Every reply of the run but the split check's (:data:`SPLIT_PHASES`).
    """
    entries = [e for e in strategy.ledger if e["phase"] not in SPLIT_PHASES]
    clients = {e["client"] for e in entries} or {0}
    total = sum(8 * (int(e.get("floats", 0)) + int(e.get("integers", 0))) for e in entries)
    return total / len(clients), len(entries)


def _kept_model(strategy, k: int) -> np.ndarray | None:
    """The kept start's centres of candidate ``k`` (the model's scaled units)."""
    score = next((s for s in strategy.k_scores if s["k"] == k), None)
    if score is None:
        return None
    return next(c.centroids for c in strategy.candidates
                if c.k == k and c.seed == score["seed"])


def run_case(name: str, split: str, seed: int, algorithms: tuple[str, ...],
             cost: bool = True) -> list[dict[str, Any]]:
    """Every variant of one (set, split, seed); one row per variant."""
    from flwr_clustering import FederatedClustering
    from flwr_clustering.data.registry import split_arrays

    X, y, k_true, clients = load(name, seed)
    parts = split_arrays(X, y, clients, partitioner=split, dirichlet_alpha=DIRICHLET_ALPHA,
                         seed=seed)
    partitions = [p for p, _ in parts]
    central = centralized(X, seed)
    rows = []
    for label, algorithm, options in VARIANTS:
        if algorithm not in algorithms:
            continue
        row: dict[str, Any] = {"data": name, "split": split, "seed": seed,
                               "variant": label, "true-k": k_true,
                               "central-silhouette": central["silhouette"],
                               "central-calinski-harabasz": central["calinski-harabasz"],
                               "central-davies-bouldin": central["davies-bouldin"]}
        try:
            t0 = time.perf_counter()
            est = FederatedClustering(algorithm, n_clusters="auto", k_min=K_MIN, k_max=K_MAX,
                                      random_state=seed, **options).fit(partitions)
            row["seconds"] = time.perf_counter() - t0
            search = est.strategy_.search
            row.update({"k": est.n_clusters_, "picks": search["picks"],
                        "rounds": len(est.history_)})
            row["bytes-per-client"], row["messages"] = _upload_bytes(est.strategy_)
            true_k = _kept_model(est.strategy_, k_true)
            if true_k is not None:  # on every pooled row (the scores leave withheld out)
                from flwr_clustering.metrics import sse

                pooled = est.feature_transform_.transform(X)
                row["sse-ratio-at-true-k"] = sse(pooled, true_k) / central["sse"][k_true]
        except Exception as ex:  # noqa: BLE001 - a benchmark row records the failure
            row["error"] = f"{type(ex).__name__}: {ex}"[:300]
        if cost and not options and "error" not in row:
            try:
                t0 = time.perf_counter()
                one = FederatedClustering(algorithm, n_clusters=K_MAX, random_state=seed
                                          ).fit(partitions)
                row["single-seconds"] = time.perf_counter() - t0
                row["single-rounds"] = len(one.history_)
                row["single-bytes-per-client"], row["single-messages"] = _upload_bytes(
                    one.strategy_)
            except Exception as ex:  # noqa: BLE001 - the auto run's row stands
                row["single-error"] = f"{type(ex).__name__}: {ex}"[:300]
        rows.append(row)
    return rows


def _share(hits: list[bool]) -> str:
    return f"{100 * np.mean(hits):.0f} % ({sum(hits)}/{len(hits)})" if hits else "-"


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The agreement, cost and n-init tables as dicts (and Markdown)."""
    ok = [r for r in rows if "error" not in r]
    agreement = []
    for label in dict.fromkeys(r["variant"] for r in ok):
        mine = [r for r in ok if r["variant"] == label]
        for rule in RULES:
            criterion = "silhouette" if rule == "sse-knee" else rule
            agreement.append({
                "variant": label, "rule": rule, "runs": len(mine),
                "central-silhouette": _share([r["picks"][rule] == r["central-silhouette"]
                                              for r in mine]),
                "central-same-criterion": _share([r["picks"][rule]
                                                  == r[f"central-{criterion}"]
                                                  for r in mine])
                if rule != "sse-knee" else "-",
                "true-k": _share([r["picks"][rule] == r["true-k"] for r in mine])})
    central = [{"rule": c, "true-k": _share([r[f"central-{c}"] == r["true-k"]
                                             for r in ok if r["variant"] == "fkm"])}
               for c in ("silhouette", "calinski-harabasz", "davies-bouldin")]
    cost = []
    for label in dict.fromkeys(r["variant"] for r in ok if "single-seconds" in r):
        mine = [r for r in ok if r["variant"] == label and "single-seconds" in r]
        cost.append({
            "variant": label, "runs": len(mine),
            "rounds auto / k=10": f"{np.mean([r['rounds'] for r in mine]):.1f} / "
                                  f"{np.mean([r['single-rounds'] for r in mine]):.1f}",
            "replies per client auto / k=10":
                f"{np.mean([r['messages'] / SETS[r['data']][2] for r in mine]):.1f} / "
                f"{np.mean([r['single-messages'] / SETS[r['data']][2] for r in mine]):.1f}",
            "upload bytes per client auto / k=10":
                f"{np.mean([r['bytes-per-client'] for r in mine]):.0f} / "
                f"{np.mean([r['single-bytes-per-client'] for r in mine]):.0f}",
            "seconds auto / k=10": f"{np.mean([r['seconds'] for r in mine]):.2f} / "
                                   f"{np.mean([r['single-seconds'] for r in mine]):.2f}",
            "seconds ratio (median)": "{:.2f}".format(np.median(
                [r["seconds"] / r["single-seconds"] for r in mine])),
        })
    n_init = []
    for name in dict.fromkeys(r["data"] for r in ok):
        entry = {"data": name}
        for label in ("fkm", "fkm n-init=3"):
            vals = [r["sse-ratio-at-true-k"] for r in ok if r["data"] == name
                    and r["variant"] == label and "sse-ratio-at-true-k" in r]
            entry[f"{label}: worst SSE / k-means"] = f"{max(vals):.3f}" if vals else "-"
            entry[f"{label}: mean"] = f"{np.mean(vals):.3f}" if vals else "-"
        n_init.append(entry)
    errors = [f"{r['data']} {r['split']} seed {r['seed']} {r['variant']}: {r['error']}"
              for r in rows if "error" in r]
    return {"agreement": agreement, "centralized": central, "cost": cost, "n-init": n_init,
            "errors": errors}


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)\n"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    """The benchmark's Markdown report."""
    parts = [f"# Choosing k: the federated search against the centralized choice\n\n"
             f"{meta['cases']} cases ({', '.join(meta['data'])}; {', '.join(meta['splits'])}"
             f"; seeds 0..{meta['seeds'] - 1}), k = {K_MIN}..{K_MAX}; "
             f"{meta['seconds']:.0f} s.\n",
             "## Agreement (share of runs whose chosen k equals ...)\n", _table(
                 summary["agreement"]),
             "## The centralized criteria against the true k\n", _table(summary["centralized"]),
             "## Cost of k='auto' against one run at k=10\n", _table(summary["cost"]),
             "## n-init: FKM's SSE at the true k over k-means' (n_init=10)\n",
             _table(summary["n-init"])]
    if summary["errors"]:
        parts += ["## Errors\n", "\n".join(f"- {e}" for e in summary["errors"]) + "\n"]
    return "\n".join(parts)


def main(argv=None) -> int:
    """``python -m simulations choose-k``."""
    parser = argparse.ArgumentParser(prog="python -m simulations choose-k",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--splits", nargs="+", choices=SPLITS, default=list(SPLITS))
    parser.add_argument("--algorithms", nargs="+", default=["fkm", "kfed", "feca"])
    parser.add_argument("--no-cost", action="store_true",
                        help="skip the single-k runs of the cost table")
    parser.add_argument("--quick", action="store_true", help="two sets, one seed, IID")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    if args.quick:
        args.data, args.seeds, args.splits = (list(QUICK["data"]), QUICK["seeds"],
                                              list(QUICK["splits"]))
    library = logging.getLogger("flwr_clustering")
    level = library.level
    library.setLevel(logging.ERROR)  # (restored below: the tests run main in process)
    try:
        return _run(args)
    finally:
        library.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    rows = []
    cases = [(d, s, seed) for d in args.data for s in args.splits for seed in range(args.seeds)]
    for i, (name, split, seed) in enumerate(cases):
        rows += run_case(name, split, seed, tuple(args.algorithms), cost=not args.no_cost)
        print(f"[{i + 1}/{len(cases)}] {name} {split} seed {seed}: "
              + ", ".join(f"{r['variant']} k={r.get('k', 'failed')}"
                          for r in rows[-len(VARIANTS):] if r["data"] == name
                          and r["split"] == split and r["seed"] == seed)
              + f" (central silhouette {rows[-1]['central-silhouette']}, true "
              f"{rows[-1]['true-k']}); {time.monotonic() - t0:.0f} s", flush=True)
    meta = {"cases": len(cases), "data": args.data, "splits": args.splits,
            "seeds": args.seeds, "seconds": time.monotonic() - t0}
    summary = summarize(rows)
    from simulations.benchmarks.common import write_result

    text = markdown(summary, meta)
    paths = write_result(Path(args.out), "choose_k", {"meta": meta, "summary": summary,
                                                      "rows": rows}, text)
    print(text)
    print(f"written: {json.dumps(paths)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
