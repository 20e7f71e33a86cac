"""Missing cells and units as sites hold them (``python -m simulations missing``).

What each ``missing`` policy costs, and how often the unit check is right. Two tables
(docs/data.md, "Missing cells" and "Units that differ by site"):

* ``--table missing``: ARI and SSE of FKM with ``missing='mean'``, ``'drop'`` and
  ``'partial'`` (``server-update='lloyd'``), against the centralized pipeline
  (``SimpleImputer(strategy="mean")`` then ``StandardScaler`` then ``KMeans(n_init=10)``;
  for ``drop``: the complete rows, ``StandardScaler``, ``KMeans``), at 5, 10 and 20 % of
  the cells missing completely at random and at 20 % missing not at random (one site misses
  the values above its median of one feature), on wine, breast cancer and iris over 3 and
  10 sites, IID and Dirichlet(0.3). The SSE is the model's on the centralized pipeline's
  rows (the federated centres mapped into them), as a ratio to k-means' SSE there.
* ``--table units``: the unit check (:func:`~flwr_clustering.data.schema.unit_mismatches`,
  on the per-site sums the server receives; also on digits' sparse pixels) on IID and
  non-IID splits without any unit change
  (false alarms), and with one site's feature multiplied by 1/1000, 1/100, 1/10 and 1000
  (hits).

No network: scikit-learn's bundled data sets.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.impute import SimpleImputer
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from flwr_clustering import FederatedClustering
from flwr_clustering.data.partitioners import partition_arrays
from flwr_clustering.data.schema import column_moments, unit_mismatches

LOADERS = {"wine": load_wine, "breast-cancer": load_breast_cancer, "iris": load_iris}
#: The unit check also on an image set: sparse pixels must not look like other units.
UNIT_LOADERS = {**LOADERS, "digits": load_digits}
SHARES = (0.05, 0.10, 0.20)
MNAR_SHARE = 0.20


def _split(X: np.ndarray, y: np.ndarray, sites: int, split: str, seed: int
           ) -> list[np.ndarray]:
    """Row indices of each site: IID, or Dirichlet(0.3) over the classes."""
    index = np.arange(len(X), dtype=np.float64)[:, None]
    if split == "iid":
        parts = partition_arrays(index, y, IidPartitioner(sites))
        return [part[0][:, 0].astype(np.int64) for part in parts]
    for attempt in range(20):  # Flower's partitioner gives up after 10 draws of its own
        partitioner = DirichletPartitioner(sites, partition_by="label", alpha=0.3,
                                           min_partition_size=5, self_balancing=True,
                                           seed=seed + 1000 * attempt)
        try:
            parts = partition_arrays(index, y, partitioner)
        except ValueError:
            continue
        return [part[0][:, 0].astype(np.int64) for part in parts]
    raise ValueError(f"no Dirichlet(0.3) split of {len(X)} rows over {sites} sites")


def _holes(X: np.ndarray, sites: list[np.ndarray], share: float, mnar: bool,
           rng: np.random.Generator) -> np.ndarray:
    """``X`` with ``share`` of its cells missing (MCAR), or MNAR at site 0 (see module)."""
    X = X.copy()
    if not mnar:
        X[rng.random(X.shape) < share] = np.nan
        return X
    X[rng.random(X.shape) < share / 2] = np.nan  # the rest at random
    site = sites[0]
    values = X[site, 0]
    high = site[values > np.nanmedian(values)]
    X[high, 0] = np.nan  # site 0 misses the high values of feature 0
    return X


def _sse(Z: np.ndarray, C: np.ndarray) -> float:
    d2 = ((Z[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    return float(d2.min(axis=1).sum())


def _run_missing(name: str, sites: int, split: str, share: float, mnar: bool,
                 seed: int) -> list[dict[str, Any]]:
    data = LOADERS[name](as_frame=True)
    frame = data.frame.drop(columns="target")
    X, y = frame.to_numpy(dtype=np.float64), data.target.to_numpy()
    k = len(np.unique(y))
    rng = np.random.default_rng(seed)
    idx = _split(X, y, sites, split, seed)
    Xm = _holes(X, idx, share, mnar, rng)
    frames = [pd.DataFrame(Xm[i], columns=frame.columns) for i in idx]
    labels = [y[i] for i in idx]
    order = np.concatenate(idx)
    pooled, truth = Xm[order], y[order]
    complete = ~np.isnan(pooled).any(axis=1)
    rows = []
    # the centralized pipelines
    Z = StandardScaler().fit_transform(SimpleImputer(strategy="mean").fit_transform(pooled))
    km = KMeans(k, n_init=10, random_state=seed).fit(Z)
    imputer_scale = StandardScaler().fit(SimpleImputer(strategy="mean").fit_transform(pooled))
    if complete.sum() >= 2 * k:
        Zc = StandardScaler().fit_transform(pooled[complete])
        kmc = KMeans(k, n_init=10, random_state=seed).fit(Zc)
        drop_scale = StandardScaler().fit(pooled[complete])
    else:  # 20 % of 30 features missing: almost no complete row
        Zc = kmc = drop_scale = None
    base = {"data": name, "sites": sites, "split": split,
            "missing": f"{share:.0%} MNAR" if mnar else f"{share:.0%} MCAR",
            "cells": float(np.isnan(pooled).mean()), "incomplete-rows": float(1 - complete.mean())}
    rows.append({**base, "method": "centralized mean", "ari": adjusted_rand_score(
        truth, km.labels_), "sse-ratio": 1.0, "rows": 1.0})
    if kmc is not None:
        rows.append({**base, "method": "centralized drop", "ari": adjusted_rand_score(
            truth[complete], kmc.labels_), "sse-ratio": 1.0, "rows": float(complete.mean())})
    else:
        rows.append({**base, "method": "centralized drop",
                     "error": f"{int(complete.sum())} complete rows"})
    runs = (("fkm mean", "fkm", "mean", {}), ("fkm drop", "fkm", "drop", {}),
            ("fkm partial", "fkm", "partial", {"server_update": "lloyd"}))
    for method, algorithm, policy, options in runs:
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = FederatedClustering(algorithm, n_clusters=k, random_state=seed,
                                          missing=policy, **options).fit(frames, labels)
        except (ValueError, RuntimeError) as ex:
            rows.append({**base, "method": method, "error": str(ex)[:200]})
            continue
        if any(lab is None for lab in est.labels_):  # a site left out of the model
            rows.append({**base, "method": method, "error": "a site without labels"})
            continue
        got = np.concatenate(est.labels_)
        kept = got >= 0
        C = np.asarray(est.cluster_centers_, dtype=np.float64)
        if policy == "drop" and kmc is None:
            ref_scale, ref_Z, ref_sse = imputer_scale, Z, km.inertia_
        elif policy == "drop":
            ref_scale, ref_Z, ref_sse = drop_scale, Zc, kmc.inertia_
        else:
            ref_scale, ref_Z, ref_sse = imputer_scale, Z, km.inertia_
        C_ref = (C - ref_scale.mean_) / ref_scale.scale_
        C_ref = np.where(np.isnan(C_ref), 0.0, C_ref)
        rows.append({**base, "method": method,
                     "ari": adjusted_rand_score(truth[kept], got[kept]),
                     "sse-ratio": _sse(ref_Z, C_ref) / ref_sse, "rows": float(kept.mean()),
                     "seconds": time.perf_counter() - t0})
    return rows


def missing_table(seeds: int = 1) -> list[dict[str, Any]]:
    """Every setting of the missing-cells table (see the module)."""
    out = []
    for name in LOADERS:
        for sites in (3, 10):
            for split in ("iid", "dirichlet"):
                for share, mnar in [*((s, False) for s in SHARES), (MNAR_SHARE, True)]:
                    for seed in range(seeds):
                        out += _run_missing(name, sites, split, share, mnar, seed)
    return out


def units_table(seeds: int = 10) -> dict[str, Any]:
    """The unit check's false alarms and hits (see the module)."""
    false_alarms, checks = [], 0
    hits: dict[str, list[int]] = {}
    for name, loader in UNIT_LOADERS.items():
        data = loader(as_frame=True)
        frame = data.frame.drop(columns="target")
        X, y = frame.to_numpy(dtype=np.float64), data.target.to_numpy()
        names = list(frame.columns)
        for sites in (3, 5, 10):
            for split in ("iid", "dirichlet"):
                for seed in range(seeds):
                    idx = _split(X, y, sites, split, seed)

                    def sums(parts):
                        return {f"client {i}": tuple(column_moments(P)[key] for key in
                                                     ("count", "sum", "sumsq"))
                                for i, P in enumerate(parts)}

                    parts = [X[i] for i in idx]
                    checks += len(parts) * len(names)
                    found = unit_mismatches(sums(parts), names)
                    false_alarms += [f"{name} {sites} {split} seed {seed}: {t[:90]}"
                                     for t in found]
                    j = int(np.random.default_rng(seed).integers(len(names)))
                    for factor in (1e-3, 1e-2, 1e-1, 1e3):
                        moved = [P.copy() for P in parts]
                        moved[0][:, j] *= factor
                        found = unit_mismatches(sums(moved), names)
                        right = any(t.startswith(f"client 0's {names[j]!r}") for t in found)
                        hits.setdefault(f"{factor:g}", []).append(int(right))
    return {"checks": checks, "false-alarms": false_alarms,
            "hit-rate": {f: float(np.mean(v)) for f, v in hits.items()},
            "cases": {f: len(v) for f, v in hits.items()}}


def _markdown_missing(rows: list[dict[str, Any]]) -> str:
    frame = pd.DataFrame(rows)
    def cell(row: pd.Series) -> str:
        if isinstance(row.get("error"), str):
            return ("refused" if "missing" in row["error"] or "complete" in row["error"]
                    else "error")
        text = f"{row['ari']:.2f} / {row['sse-ratio']:.2f}"
        return text + (f" ({row['rows']:.0%} rows)" if row.get("rows", 1.0) < 1 else "")

    frame["cell"] = frame.apply(cell, axis=1)
    table = frame.pivot_table(index=["data", "sites", "split", "missing"], columns="method",
                              values="cell", aggfunc="first", sort=False)
    methods = ["centralized mean", "fkm mean", "centralized drop", "fkm drop", "fkm partial"]
    lines = ["| data | sites | split | missing | " + " | ".join(methods) + " |",
             "|" + "---|" * (4 + len(methods))]
    for key, row in table.iterrows():
        lines.append("| " + " | ".join(map(str, key)) + " | "
                     + " | ".join(str(row.get(m, "")) for m in methods) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m simulations missing [--table missing|units|both] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m simulations missing",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", choices=("missing", "units", "both"), default="both")
    parser.add_argument("--seeds", type=int, default=1, help="missing table: seeds")
    parser.add_argument("--out", default="results/missing",
                        help="directory of the JSON results")
    args = parser.parse_args(argv)
    # Flower's Dirichlet partitioner warns at every redraw of a split of small sites
    warnings.filterwarnings("ignore", message="The specified min_partition_size")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.table in ("missing", "both"):
        t0 = time.perf_counter()
        rows = missing_table(args.seeds)
        (out / "missing.json").write_text(json.dumps(rows, indent=1))
        print("ARI / SSE over k-means' on the centralized pipeline's rows "
              f"({time.perf_counter() - t0:.0f} s)")
        print(_markdown_missing(rows))
    if args.table in ("units", "both"):
        units = units_table()
        (out / "units.json").write_text(json.dumps(units, indent=1))
        print(f"unit check: {len(units['false-alarms'])} false alarms in {units['checks']} "
              f"(site, feature) checks; hit rate by factor {units['hit-rate']} over "
              f"{units['cases']} cases")
        for text in units["false-alarms"][:20]:
            print("  " + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
