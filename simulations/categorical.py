"""Categorical columns against the measurements: ``categorical-weight`` measured.

``python -m simulations categorical [--seeds 5] [--clients 4] [--data wine] [--out DIR]``
adds to scikit-learn's iris, wine and breast cancer (their measurements, raw units) one
text column derived from a known variable, and clusters them with FKM through the estimator
(``FederatedClustering("fkm", n_clusters=k)``, the rows dealt IID over ``--clients``
DataFrames) and with scikit-learn's ``KMeans`` (``n_init=10``) on the pooled rows encoded
the same way:

* ``sex``: 2 levels partly following the class (``"f"`` for 80 % of class 0's rows and
  30 % of the others'), like a demographic column in a clinical export;
* ``sex, 20 % empty``: the same with a fifth of its cells empty (its own level
  ``missing``);
* ``quartile``: the quartile of the first measurement, 4 equal levels (information the
  measurements already hold);
* ``noise``: 6 levels of shares 50/20/10/10/5/5 %, independent of everything (a column
  that should not matter; its rare levels are what ``standard`` inflates);
* ``rare``: 2 levels of shares 95/5 %, independent of everything (with 2 levels the
  ``balanced`` scale is the ``standard`` one times ``sqrt(2)``: a rare level still weighs).

Each with (a) the measurements only, (b) ``categorical_weight='standard'`` (each one-hot
feature standardised: the former behaviour), (c) ``'balanced'`` (the default: the column
weighs like one standardised feature). Centralized, the measurements are standardised with
``StandardScaler`` and the one-hot features (``pandas.get_dummies``, an empty cell a level
of its own) with ``StandardScaler``
(b) or centred at their shares and divided by
:func:`~flwr_clustering.data.schema.categorical_scales` (c). Written: ``categorical.json``
and ``categorical.md``: ARI against the classes, mean over the seeds (the derived column,
the split and the start change), and in how many runs the clusters followed the
categorical column (the run's warning, :func:`~flwr_clustering.diagnostics.dominant_categories`).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np

WEIGHTS = ("standard", "balanced")
CASES = ("sex", "sex, 20 % empty", "quartile", "noise", "rare")
#: The text column each case adds.
COLUMN = {"sex": "sex", "sex, 20 % empty": "sex", "quartile": "quartile", "noise": "code",
          "rare": "flag"}
NOISE_SHARES = (0.5, 0.2, 0.1, 0.1, 0.05, 0.05)


def datasets() -> dict[str, tuple[object, np.ndarray, int]]:
    """``{name: (measurements as a DataFrame, classes, k)}``, in their own units."""
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine

    out = {}
    for name, loader in (("iris", load_iris), ("wine", load_wine),
                         ("breast cancer", load_breast_cancer)):
        data = loader(as_frame=True)
        y = data.target.to_numpy()
        out[name] = (data.frame.drop(columns="target"), y, len(np.unique(y)))
    return out


def derived_column(case: str, frame, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The text column of ``case`` for these rows (``None`` for an empty cell)."""
    n = len(y)
    if case.startswith("sex"):
        female = rng.random(n) < np.where(y == 0, 0.8, 0.3)
        values = np.where(female, "f", "m").astype(object)
        if case != "sex":
            values[rng.random(n) < 0.2] = None
        return values
    if case == "quartile":
        first = frame.iloc[:, 0].to_numpy()
        edges = np.quantile(first, [0.25, 0.5, 0.75])
        return np.array([f"q{q + 1}" for q in np.searchsorted(edges, first, side="right")],
                        dtype=object)
    if case == "noise":
        return np.array([f"c{c}" for c in rng.choice(len(NOISE_SHARES), n, p=NOISE_SHARES)],
                        dtype=object)
    if case == "rare":
        return np.where(rng.random(n) < 0.05, "yes", "no").astype(object)
    raise ValueError(f"unknown case {case!r}: one of {CASES}")


def central_rows(frame, numeric: list[str], column: str | None, weight: str) -> np.ndarray:
    """The pooled rows encoded as the federation does, with scikit-learn and pandas."""
    import pandas as pd
    from sklearn.preprocessing import StandardScaler

    from flwr_clustering.data.schema import categorical_scales

    X = StandardScaler().fit_transform(frame[numeric].to_numpy(dtype=np.float64))
    if column is None:
        return X
    # an empty cell is a level of its own, as the federation's level 'missing'
    H = pd.get_dummies(frame[column], dummy_na=True).to_numpy(dtype=np.float64)
    if weight == "standard":
        H = StandardScaler().fit_transform(H)
    else:
        p = H.mean(axis=0)
        H = (H - p) / categorical_scales([H.shape[1]], p)
    return np.hstack([X, H])


def run(seeds: int = 5, clients: int = 4, only: list[str] | None = None) -> list[dict]:
    """Every data set (or those in ``only``) x case: the ARIs of both settings."""
    logger = logging.getLogger("flwr_clustering")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _run(seeds, clients, only)
    finally:
        logger.setLevel(level)


def _run(seeds: int, clients: int, only: list[str] | None) -> list[dict]:
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from flwr_clustering import FederatedClustering

    def fkm(frames, y_parts, k, seed, column=None, weight="balanced"):
        est = FederatedClustering(
            "fkm", n_clusters=k, random_state=seed, categorical_weight=weight,
            categorical_columns=None if column is None else [column]).fit(frames)
        ari = adjusted_rand_score(np.concatenate(y_parts), np.concatenate(est.labels_))
        warned = any("the clusters follow the categorical column" in w
                     for w in est.warnings_)
        return ari, warned

    def kmeans(X, y, k, seed):
        return adjusted_rand_score(y, KMeans(k, n_init=10, random_state=seed).fit_predict(X))

    rows = []
    for name, (frame, y, k) in datasets().items():
        if only and name not in only:
            continue
        numeric = list(frame.columns)
        plain: dict[str, list[float]] = {"fkm": [], "kmeans": []}
        results: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            order = rng.permutation(len(y))
            parts = np.array_split(order, clients)
            data = frame.copy()
            frames = [data.iloc[i].reset_index(drop=True) for i in parts]
            y_parts = [y[i] for i in parts]
            plain["fkm"].append(fkm(frames, y_parts, k, seed)[0])
            plain["kmeans"].append(kmeans(central_rows(data, numeric, None, ""), y, k, seed))
            for case in CASES:
                column = COLUMN[case]
                data = frame.copy()
                data[column] = derived_column(case, frame, y, rng)
                frames = [data.iloc[i].reset_index(drop=True) for i in parts]
                for weight in WEIGHTS:
                    ari, warned = fkm(frames, y_parts, k, seed, column, weight)
                    central = kmeans(central_rows(data, numeric, column, weight), y, k, seed)
                    results.setdefault((case, weight), []).append((ari, central, warned))
        base = {"data": name, "k": k, "clients": clients, "seeds": seeds}
        rows.append({**base, "case": "measurements only", "weight": "",
                     "fkm-ari": float(np.mean(plain["fkm"])),
                     "kmeans-ari": float(np.mean(plain["kmeans"])), "warned": 0})
        for (case, weight), values in results.items():
            ari, central, warned = zip(*values, strict=True)
            rows.append({**base, "case": case, "weight": weight,
                         "fkm-ari": float(np.mean(ari)), "kmeans-ari": float(np.mean(central)),
                         "warned": int(sum(warned))})
    return rows


def markdown(rows: list[dict]) -> str:
    """One line per data set and case: FKM's and KMeans' ARI per setting."""
    lines = ["| data | categorical column | FKM: measurements only | FKM: standard | "
             "FKM: balanced | KMeans: measurements only | KMeans: standard | "
             "KMeans: balanced | warned (standard / balanced) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["data"] for r in rows):
        mine = [r for r in rows if r["data"] == name]
        plain = next(r for r in mine if r["case"] == "measurements only")
        for case in dict.fromkeys(r["case"] for r in mine if r["weight"]):
            by = {r["weight"]: r for r in mine if r["case"] == case}
            std, bal = by["standard"], by["balanced"]
            lines.append(
                f"| {name} | {case} | {plain['fkm-ari']:.2f} | {std['fkm-ari']:.2f} | "
                f"{bal['fkm-ari']:.2f} | {plain['kmeans-ari']:.2f} | "
                f"{std['kmeans-ari']:.2f} | {bal['kmeans-ari']:.2f} | "
                f"{std['warned']} / {bal['warned']} of {std['seeds']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m simulations categorical``."""
    parser = argparse.ArgumentParser(prog="python -m simulations categorical",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--data", action="append", help="only this data set (repeatable)")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    rows = run(args.seeds, args.clients, args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "categorical.json").write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    (out / "categorical.md").write_text(table)
    print(table)
    print(f"{len(rows)} settings x {args.seeds} seeds in {time.monotonic() - t0:.0f} s; "
          f"written to {out}/categorical.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
