"""What differential privacy costs: DP federated Lloyd against centralized k-means.

``python -m simulations dp-utility [--runs 10] [--rounds 2] [--gaussian-runs 3] [--out DIR]``
runs :func:`~flwr_clustering.algorithms.dp_lloyd.run_dp_lloyd` (the loop the Flower run
equals bit for bit; its DP start ``init='moments'``, the budget split half to the start,
half to the rounds) on the Garst grid's paper split (five clients; beta does not matter, since
federated Lloyd uses only the federation's sums: 0.1, 1 and 10 gave equal numbers) and on
scikit-learn's iris, wine and breast cancer (standardised, split IID over five clients),
for epsilon in {0.5, 1, 2, 4, 8, inf} (delta = 1e-5, distributed noise), and writes
``dp-utility.json`` and ``dp-utility.md``: ARI and the SSE ratio to scikit-learn's
``KMeans`` (``n_init=10``) on the same pooled rows, mean and standard deviation over the
runs (seeds 0..runs-1: the initial centroids and the noise change, the data do not).

A second table is FedDP-KMeans' own Gaussian-mixture setting (Scott et al., ICML 2025,
data-point DP; the recipe of its code's ``GaussianMixtureUniform``, regenerated here with
numpy, data seed 0): ``k = 10`` means uniform in ``[0, 1]^100``, variance 0.5 per
coordinate, 100 clients of 1000 rows drawn from the uniform mixture, ``delta = 1e-6``,
data bound ``B = 11`` (its clipping bound: public, no look at the data, no centring).
For epsilon in {0.25, 0.5, 1} it reports the k-means cost (SSE) over scikit-learn
``KMeans(n_init=10)``'s on the pooled rows and the ARI, for our start
(``init='moments'``, ``--rounds`` steps) and for the former one (``init='random'``, 10
rounds). FedDP-KMeans itself uses ~200 server-side rows for its start, which we do not have.

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
#: FedDP-KMeans' Gaussian mixture (data-point DP): its epsilons, delta and clipping bound.
GAUSSIAN_EPSILONS = (0.25, 0.5, 1.0)
GAUSSIAN_DELTA = 1e-6
GAUSSIAN_BOUND = 11.0
#: The former DP FKM: random start in the data ball, 10 rounds.
FORMER = {"init": "random", "rounds": 10}


def feddp_gaussian_mixture(seed: int = 0, clients: int = 100, rows: int = 1000, k: int = 10,
                           d: int = 100, variance: float = 0.5
                           ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """FedDP-KMeans' ``GaussianMixtureUniform``: ``(client rows, pooled rows, labels)``.

    ``k`` means uniform in ``[0, 1]^d``, isotropic variance ``variance``, every client
    ``rows`` rows of the uniform mixture (the recipe of Scott et al.'s code, drawn with
    numpy's ``default_rng(seed)``, so not their exact numbers).
    """
    rng = np.random.default_rng(seed)
    means = rng.uniform(0.0, 1.0, size=(k, d))
    parts, labels = [], []
    for _ in range(clients):
        y = rng.integers(0, k, size=rows)
        parts.append(means[y] + rng.normal(0.0, math.sqrt(variance), size=(rows, d)))
        labels.append(y)
    return parts, np.vstack(parts), np.concatenate(labels)


def run_gaussians(runs: int = 3, rounds: int = 2) -> list[dict]:
    """FedDP-KMeans' setting: cost ratio and ARI per epsilon, our start and the former one."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering.algorithms.dp_lloyd import run_dp_lloyd
    from flwr_clustering.algorithms.lloyd import assign_to_nearest

    parts, X, y = feddp_gaussian_mixture()
    km = KMeans(10, n_init=10, random_state=0).fit(X)
    rows = []
    for label, how in (("moments", {"init": "moments", "rounds": rounds}),
                       ("random (former)", FORMER)):
        for eps in GAUSSIAN_EPSILONS:
            ratios, aris, epsilons = [], [], []
            for seed in range(runs):
                res = run_dp_lloyd(parts, 10, epsilon=eps, delta=GAUSSIAN_DELTA,
                                   bound=GAUSSIAN_BOUND, seed=seed, **how)
                labels, d2 = assign_to_nearest(X, res.centroids)
                ratios.append(float(d2.sum()) / float(km.inertia_))
                aris.append(adjusted_rand_score(y, labels))
                epsilons.append(res.epsilon)
            rows.append({
                "data": "FedDP-KMeans gaussians", "init": label, "rounds": how["rounds"],
                "epsilon": eps, "delta": GAUSSIAN_DELTA, "bound": GAUSSIAN_BOUND,
                "runs": runs, "accountant-epsilon": max(epsilons),
                "cost-ratio": float(np.mean(ratios)), "cost-ratio-max": float(np.max(ratios)),
                "ari": float(np.mean(aris)), "ari-std": float(np.std(aris)),
                "kmeans-ari": float(adjusted_rand_score(y, km.labels_)),
            })
    return rows


def gaussians_markdown(rows: list[dict]) -> str:
    """The Gaussian table: per start, cost ratio mean (max) and ARI per epsilon."""
    eps = sorted({r["epsilon"] for r in rows})
    lines = ["| FedDP-KMeans gaussians (100 clients, k=10, d=100, B=11, delta=1e-6) | "
             + " | ".join(f"epsilon={e:g}" for e in eps) + " |",
             "|" + "---|" * (len(eps) + 1)]
    for init in dict.fromkeys(r["init"] for r in rows):
        mine = [r for r in rows if r["init"] == init]
        cells = [f"{r['cost-ratio']:.4f} (max {r['cost-ratio-max']:.4f}), ARI {r['ari']:.2f}"
                 for r in mine]
        lines.append(f"| start {init}, {mine[0]['rounds']} rounds | " + " | ".join(cells)
                     + " |")
    lines.append(f"| k-means ARI | {rows[0]['kmeans-ari']:.2f} |" + " |" * (len(eps) - 1))
    return "\n".join(lines) + "\n"


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


def run(runs: int = 10, rounds: int = 2) -> list[dict]:
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
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gaussian-runs", type=int, default=3,
                        help="runs of FedDP-KMeans' Gaussian setting (0: skip it)")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    rows = run(args.runs, args.rounds)
    gaussians = run_gaussians(args.gaussian_runs, args.rounds) if args.gaussian_runs else []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dp-utility.json").write_text(json.dumps(
        [{**r, "epsilon": r["epsilon"] if math.isfinite(r["epsilon"]) else "inf"}
         for r in rows + gaussians], indent=1))
    table = markdown(rows) + ("\n" + gaussians_markdown(gaussians) if gaussians else "")
    (out / "dp-utility.md").write_text(table)
    print(table)
    print(f"{len(rows) + len(gaussians)} settings in {time.monotonic() - t0:.0f} s; "
          f"written to {out}/dp-utility.json and .md")
    return 0
