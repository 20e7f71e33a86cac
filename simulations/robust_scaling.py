"""What one site's extreme feature moments do to the scaling, and what ``robust-scaling`` undoes.

``python -m simulations robust-scaling [--seeds 2] [--data wine] [--out DIR]`` runs FKM (the
estimator: the Flower strategy on the in-process grid, ``scaling='standard'``) on
scikit-learn's iris, wine and breast cancer in their own units, split over five clients
IID and by Dirichlet(0.5) on the labels. Client 2 answers the ``feature-moments`` phase
honestly or in one of these ways, on one numeric feature at a time (every feature in
turn), each a consistent reply (its sum of squares at least ``sum**2 / count``):

* ``sumsq``: its sum of squares x1e12 (the issue's case: the mean kept, the spread 1e6x);
* ``rows``: its sum x1e6 and sum of squares x1e12, as if its rows were multiplied by 1e6
  (its later train replies, honest, are then dropped by the mean bound: they cannot come
  from the rows it declared).

Each case runs with ``robust-scaling`` false and true. Written: ``robust_scaling.json`` and
``robust_scaling.md``: ARI against the labels on every client's rows, the mean over the
features poisoned (and the worst feature), mean over the seeds; and how many (site,
feature) pairs the rule set aside (honest: its false alarms; lying: client 2 found).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path
from unittest import mock

import numpy as np

CLIENTS = 5
LIAR = 2
CASES = ("honest", "sumsq", "rows")
FACTOR = 1e6


def datasets() -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """``{name: (rows, labels, k)}`` in the data's own units."""
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine

    return {name: (*loader(return_X_y=True), 3 if name != "breast cancer" else 2)
            for name, loader in (("iris", load_iris), ("wine", load_wine),
                                 ("breast cancer", load_breast_cancer))}


def lying_moments(case: str, feature: int):
    """``clients.statistics.feature_moments_arrays`` as client :data:`LIAR` answers in ``case``.

    Patched where the library's ``feature-moments`` handler
    (:mod:`flwr_clustering.clients.phases`) calls it.
    """
    import flwr_clustering.clients.phases as client_phases

    honest = client_phases.feature_moments_arrays

    def reply(client, config):
        arrays = honest(client, config)
        if client.client_id != LIAR or case == "honest":
            return arrays
        arrays = [np.array(a, dtype=np.float64) for a in arrays]
        if case == "rows":
            arrays[1][feature] *= FACTOR
        arrays[2][feature] *= FACTOR * FACTOR
        return arrays

    return mock.patch.object(client_phases, "feature_moments_arrays", reply)


def run_one(parts, ys, k: int, case: str, feature: int, robust: bool, seed: int):
    """One fit; returns (ARI on every client's rows, (site, feature) pairs set aside)."""
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering import FederatedClustering

    with lying_moments(case, feature), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FederatedClustering("fkm", n_clusters=k, random_state=seed,
                                  robust_scaling=robust).fit(parts, ys)
        labels = np.concatenate([est.predict(p) for p in parts])
    aside = sum(map(len, getattr(est.strategy_, "robust_set_aside", {}).values()))
    return adjusted_rand_score(np.concatenate(ys), labels), aside


def run(seeds: int = 2, only: list[str] | None = None) -> list[dict]:
    """Every data set (or those in ``only``) x split x case x robust-scaling."""
    logger = logging.getLogger("flwr_clustering")
    level = logger.level
    logger.setLevel(logging.ERROR)  # every set-aside site and dropped reply is a WARNING
    try:
        return _run(seeds, only)
    finally:
        logger.setLevel(level)


def _run(seeds: int, only: list[str] | None) -> list[dict]:
    from flwr_clustering.data.registry import split_arrays

    rows = []
    for name, (X, y, k) in datasets().items():
        if only and name not in only:
            continue
        for split in ("iid", "dirichlet"):
            for robust in (False, True):
                for case in CASES:
                    means, worst, aside = [], [], []
                    for seed in range(seeds):
                        split_parts = split_arrays(X, y, CLIENTS, partitioner=split,
                                                   dirichlet_alpha=0.5, seed=seed)
                        parts = [p[0] for p in split_parts]
                        ys = [p[1] for p in split_parts]
                        features = [0] if case == "honest" else range(X.shape[1])
                        got = [run_one(parts, ys, k, case, j, robust, seed) for j in features]
                        aris = [a for a, _ in got]
                        means.append(np.mean(aris))
                        worst.append(np.min(aris))
                        aside.append(sum(n for _, n in got))
                    rows.append({"data": name, "split": split, "case": case,
                                 "robust-scaling": robust, "seeds": seeds,
                                 "ari": float(np.mean(means)), "worst-ari": float(np.mean(worst)),
                                 "set-aside": float(np.mean(aside)),
                                 "features": 1 if case == "honest" else int(X.shape[1])})
    return rows


def markdown(rows: list[dict]) -> str:
    """One line per data set, split and case: ARI (worst feature) [set aside] per option."""
    lines = ["| data, split | case | robust-scaling=false | robust-scaling=true |",
             "|---|---|---|---|"]
    keys = dict.fromkeys((r["data"], r["split"], r["case"]) for r in rows)
    for data, split, case in keys:
        mine = sorted((r for r in rows if (r["data"], r["split"], r["case"])
                       == (data, split, case)), key=lambda r: r["robust-scaling"])
        cells = [f"{r['ari']:.3f}" + (f" (worst {r['worst-ari']:.3f})" if case != "honest"
                                      else "")
                 + (f" [{r['set-aside']:g} set aside]" if case == "honest"
                    else f" [{r['set-aside']:g} of {r['features']} set aside]")
                 * bool(r["robust-scaling"]) for r in mine]
        lines.append(f"| {data}, {split} | {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m simulations robust-scaling``."""
    parser = argparse.ArgumentParser(prog="python -m simulations robust-scaling",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--data", action="append", help="only this data set (repeatable)")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    rows = run(args.seeds, args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "robust_scaling.json").write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    (out / "robust_scaling.md").write_text(table)
    print(table)
    print(f"{len(rows)} settings x {args.seeds} seeds in {time.monotonic() - t0:.0f} s; "
          f"written to {out}/robust_scaling.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
