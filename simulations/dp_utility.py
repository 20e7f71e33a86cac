"""What differential privacy costs: DP federated Lloyd against centralized k-means.

``python -m simulations dp-utility [--runs 10] [--rounds 10] [--out DIR]`` runs
:func:`~flwr_clustering.algorithms.dp_lloyd.run_dp_lloyd` (the loop the Flower run equals
bit for bit) on the Garst grid's paper split (five clients; beta does not matter, since
federated Lloyd uses only the federation's sums: 0.1, 1 and 10 gave equal numbers) and on
scikit-learn's iris, wine and breast cancer (standardised, split IID over five clients),
for epsilon in {0.5, 1, 2, 4, 8, inf} (delta = 1e-5, distributed noise), and writes
``dp-utility.json`` and ``dp-utility.md``: ARI and the SSE ratio to scikit-learn's
``KMeans`` (``n_init=10``) on the same pooled rows, mean and standard deviation over the
runs (seeds 0..runs-1: the initial centroids and the noise change, the data do not).

The data bound ``B`` is the 95th percentile of the centred rows' norms. That choice looks
at the data, so it is not private: a deployment fixes ``B`` from public knowledge (for
standardised features, a few times ``sqrt(d)``). The rows are centred with the pooled mean
(also not private) because the initial centroids are drawn around the origin.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, math.inf)
DELTA = 1e-5
CLIENTS = 5


def datasets() -> dict[str, tuple[list[np.ndarray], np.ndarray, np.ndarray, int]]:
    """``{name: (client rows, pooled rows, pooled labels, k)}``, centred."""
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine
    from sklearn.preprocessing import StandardScaler

    from flwr_clustering.data.synthetic import garst_beta_split

    out = {}
    # Federated Lloyd sees only the federation's sums and counts, so its result does not
    # depend on the split: beta = 0.1, 1 and 10 give the same numbers (checked), one row.
    X, y, c = garst_beta_split(1.0)
    X = X - X.mean(axis=0)
    out["garst grid (any beta)"] = ([X[c == i] for i in range(CLIENTS)], X, y, 16)
    for name, loader in (("iris", load_iris), ("wine", load_wine),
                         ("breast cancer", load_breast_cancer)):
        X, y = loader(return_X_y=True)
        X = StandardScaler().fit_transform(X)
        order = np.random.default_rng(0).permutation(len(X))
        parts = [X[i] for i in np.array_split(order, CLIENTS)]
        out[name] = (parts, X, y, len(np.unique(y)))
    return out


def run(runs: int = 10, rounds: int = 10) -> list[dict]:
    """Every dataset x epsilon: ARI and SSE ratio, mean and std over ``runs`` seeds."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering.algorithms.dp_lloyd import run_dp_lloyd
    from flwr_clustering.algorithms.lloyd import assign_to_nearest

    rows = []
    for name, (parts, X, y, k) in datasets().items():
        km = KMeans(k, n_init=10, random_state=0).fit(X)
        bound = float(np.quantile(np.linalg.norm(X, axis=1), 0.95))
        for eps in EPSILONS:
            aris, ratios, sigma = [], [], None
            for seed in range(runs):
                res = run_dp_lloyd(parts, k, epsilon=eps, delta=DELTA, bound=bound,
                                   rounds=rounds, seed=seed)
                labels, d2 = assign_to_nearest(X, res.centroids)
                aris.append(adjusted_rand_score(y, labels))
                ratios.append(float(d2.sum()) / float(km.inertia_))
                sigma = res.sigma
            rows.append({
                "data": name, "k": k, "bound": bound, "epsilon": eps, "delta": DELTA,
                "rounds": rounds, "runs": runs, "sigma": sigma,
                "ari": float(np.mean(aris)), "ari-std": float(np.std(aris)),
                "sse-ratio": float(np.mean(ratios)), "sse-ratio-std": float(np.std(ratios)),
                "kmeans-ari": float(adjusted_rand_score(y, km.labels_)),
            })
    return rows


def markdown(rows: list[dict]) -> str:
    """The table: one line per data set, ARI (SSE ratio) per epsilon."""
    head = "| data (k, B) | k-means ARI | " + " | ".join(
        f"epsilon={e:g}" if math.isfinite(e) else "no noise" for e in EPSILONS) + " |"
    lines = [head, "|" + "---|" * (len(EPSILONS) + 2)]
    for name in dict.fromkeys(r["data"] for r in rows):
        mine = [r for r in rows if r["data"] == name]
        cells = [f"{r['ari']:.2f} ± {r['ari-std']:.2f} ({r['sse-ratio']:.2f})" for r in mine]
        lines.append(f"| {name} ({mine[0]['k']}, {mine[0]['bound']:.1f}) | "
                     f"{mine[0]['kmeans-ari']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m simulations dp-utility``."""
    parser = argparse.ArgumentParser(prog="python -m simulations dp-utility",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    rows = run(args.runs, args.rounds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dp-utility.json").write_text(json.dumps(
        [{**r, "epsilon": r["epsilon"] if math.isfinite(r["epsilon"]) else "inf"}
         for r in rows], indent=1))
    table = markdown(rows)
    (out / "dp-utility.md").write_text(table)
    print(table)
    print(f"{len(rows)} settings x {args.runs} runs in {time.monotonic() - t0:.0f} s; "
          f"written to {out}/dp-utility.json and .md")
    return 0
