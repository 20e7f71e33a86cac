"""What one lying site does to FKM, and what the mean bound and ``robust-trim`` undo.

``python -m simulations robust [--seeds 3] [--data iris] [--out DIR]`` runs FKM (federated Lloyd,
``server-update='lloyd'``, the Flower strategy on the in-process grid, so the server's
reply checks apply) on scikit-learn's iris, wine and breast cancer (standardised) and the
Garst grid, split over six clients IID and by Dirichlet(0.5) on the labels. Client 0 is
honest or lies in one of these ways, in every train reply:

* ``absurd``: its means replaced by 1e30 (counts unchanged);
* ``shift``: every mean +2 in every feature (about 2 standard deviations);
* ``shrink``: every mean pulled 80% towards the centre of its own rows (always inside
  what its declared sums allow: the bound cannot see it).

Each case runs with ``robust-trim`` 0 (the exact count-weighted mean), 0.2 and 0.5 (the
median). Written: ``robust.json`` and ``robust.md``, ARI against the labels and the SSE
of the model on the honest clients' pooled rows over scikit-learn's ``KMeans``
(``n_init=10``) on the same rows, mean over the seeds (the split and the seeding change),
and how many of client 0's replies the server dropped.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

CLIENTS = 6
TRIMS = (0.0, 0.2, 0.5)
CASES = ("honest", "absurd", "shift", "shrink")
LIAR = 0


def datasets() -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """``{name: (rows, labels, k)}``, standardised (the Garst grid as generated)."""
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine
    from sklearn.preprocessing import StandardScaler

    from flwr_clustering.data.synthetic import garst_beta_split

    out = {}
    for name, loader in (("iris", load_iris), ("wine", load_wine),
                         ("breast cancer", load_breast_cancer)):
        X, y = loader(return_X_y=True)
        out[name] = (StandardScaler().fit_transform(X), y, len(np.unique(y)))
    X, y, _ = garst_beta_split(1.0)
    out["garst grid"] = (X, y, 16)
    return out


def liar_class(cls, case: str):
    """A client class of ``cls`` that lies as ``case`` in every train reply."""
    class Liar(cls):
        def fit(self, parameters, config):
            arrays, n, metrics = super().fit(parameters, config)
            means = np.array(arrays[0], dtype=np.float64, copy=True)
            if case == "absurd":
                means[:] = 1e30
            elif case == "shift":
                means += 2.0
            elif case == "shrink":
                centre = np.nanmean(np.asarray(self.X, dtype=np.float64), axis=0)
                means = centre + 0.2 * (means - centre)
            return [means.astype(arrays[0].dtype), *arrays[1:]], n, metrics
    return Liar


def run_one(parts, k: int, case: str, trim: float, seed: int):
    """One FKM run; returns the strategy."""
    from flwr_clustering import registry
    from flwr_clustering.clients import client_app
    from flwr_clustering.testing import InProcessGrid

    spec = registry.get("fkm")
    cfg = {**spec.options.run_config_defaults(), "k": k, "server-update": "lloyd",
           "robust-trim": trim, "max-rounds": 20}
    strategy = spec.build_strategy(cfg, min_nodes=CLIENTS - 1, seed=seed, scaling="none")
    liar = liar_class(spec.client, case) if case != "honest" else spec.client

    def client_fn(ctx):
        i = int(ctx.node_config["partition-id"])
        cls = liar if i == LIAR else spec.client
        return cls(*parts[i], client_id=i)

    strategy.start(grid=InProcessGrid(client_app(client_fn), CLIENTS))
    return strategy


def run(seeds: int = 3, only: list[str] | None = None) -> list[dict]:
    """Every data set (or those in ``only``) x split x case x trim.

    ARI, SSE ratio and dropped replies of each.
    """
    logger = logging.getLogger("flwr_clustering")
    level = logger.level
    logger.setLevel(logging.ERROR)  # every liar's dropped reply is a WARNING
    try:
        return _run(seeds, only)
    finally:
        logger.setLevel(level)


def _run(seeds: int, only: list[str] | None) -> list[dict]:
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering.algorithms.lloyd import assign_to_nearest
    from flwr_clustering.data.registry import split_arrays

    rows = []
    for name, (X, y, k) in datasets().items():
        if only and name not in only:
            continue
        for split in ("iid", "dirichlet"):
            results: dict[tuple[str, float], list[tuple[float, float, int]]] = {}
            for seed in range(seeds):
                parts = split_arrays(X, y, CLIENTS, partitioner=split, dirichlet_alpha=0.5,
                                     seed=seed)
                Xh = np.vstack([p[0] for i, p in enumerate(parts) if i != LIAR])
                yh = np.concatenate([p[1] for i, p in enumerate(parts) if i != LIAR])
                inertia = KMeans(k, n_init=10, random_state=0).fit(Xh).inertia_
                for case in CASES:
                    for trim in TRIMS:
                        s = run_one(parts, k, case, trim, seed)
                        labels, d2 = assign_to_nearest(Xh, s.centroids)
                        dropped = sum(1 for h in s.history for a in h.get("absent", [])
                                      if a["client"] == LIAR)
                        results.setdefault((case, trim), []).append(
                            (adjusted_rand_score(yh, labels), float(d2.sum()) / inertia,
                             dropped))
            for (case, trim), values in results.items():
                ari, ratio, dropped = (np.array(v, dtype=float) for v in zip(*values, strict=True))
                rows.append({"data": name, "split": split, "k": k, "case": case,
                             "robust-trim": trim, "seeds": seeds,
                             "ari": float(ari.mean()), "sse-ratio": float(ratio.mean()),
                             "dropped": float(dropped.mean())})
    return rows


def markdown(rows: list[dict]) -> str:
    """One line per data set, split and case: ARI (SSE ratio) [dropped] per trim."""
    head = ("| data, split | case | " + " | ".join(f"robust-trim={t:g}" for t in TRIMS)
            + " |")
    lines = [head, "|" + "---|" * (len(TRIMS) + 2)]
    keys = dict.fromkeys((r["data"], r["split"], r["case"]) for r in rows)
    for data, split, case in keys:
        mine = sorted((r for r in rows if (r["data"], r["split"], r["case"])
                       == (data, split, case)), key=lambda r: r["robust-trim"])
        cells = [f"{r['ari']:.2f} ({r['sse-ratio']:.2f})"
                 + (f" [{r['dropped']:.0f} dropped]" if r["dropped"] else "") for r in mine]
        lines.append(f"| {data}, {split} | {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m simulations robust``."""
    parser = argparse.ArgumentParser(prog="python -m simulations robust",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data", action="append", help="only this data set (repeatable)")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    rows = run(args.seeds, args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "robust.json").write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    (out / "robust.md").write_text(table)
    print(table)
    print(f"{len(rows)} settings x {args.seeds} seeds in {time.monotonic() - t0:.0f} s; "
          f"written to {out}/robust.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
