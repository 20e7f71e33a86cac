"""Experiments of Maritan & Schenato on partially overlapping feature spaces (Sec. 6).

The paper: "Distributed clustering in partially overlapping feature spaces".

Registered in :data:`~simulations.framework.EXPERIMENTS` on import:

``masked-table2``
    Table 2: Algorithm 1 (federated, Method A, alpha 0.8, F = 3) under Assumption 1 (chain
    masks with 30 % overlap between consecutive clients, rows split at random).
``masked-table3``
    Table 3: Algorithm 1 with Method B under Assumption 2 (10 % of the features shared by
    all, the rest in disjoint private blocks; biased row split).
``masked-table4``
    Table 4: Algorithm 2 (one-shot Gaussian proxies of 30..100 points, force exponent
    w = 2) on the data of Table 2.
``masked-table5``
    Table 5: Algorithm 2 on the data of Table 3.

Data (all offline, :func:`~flwr_clustering.data.registry.load_partition`), standing in for
the paper's rows: ``dim-128`` (DIM-set128 look-alike, K = 16; the clients choose ``K_i`` by
silhouette) for DIM, ``digits-037`` (scikit-learn digits 0/3/7, 64 features, K = 3,
``K_i = K``) for QMNIST {0, 3, 7} and ``digits-46`` (digits 4/6, K = 2, ``K_i = K``) for the
two-class HAR subset. Every data set runs with the paper's n = 10 clients; the digits sets
also with n = 3, since 64 pixels over 10 clients leave each one only 9-12 features (QMNIST's
784 over 10 clients leave 108-149).

Protocol: run ``r`` loads the data with ``seed=r`` (masks, row split and, for ``dim-128``,
the generator) and runs the algorithm with ``seed=r``. Metrics per run (spec §7.3): E1 / E4
(:func:`~flwr_clustering.algorithms.masked.aggregation_correctness` of the uploaded local
clusters, labelled by their majority true class), E2 / E5 accuracy in % (Hungarian-matched), the
accuracy of centralized k-means on the complete unmasked rows (``KMeans(K, n_init=10,
random_state=r)``), E3 (cosine and relative distance of the Hungarian-matched global
centroids to the optimal mask-aware centroids of Eq. 1), the floats uploaded by all clients
over all rounds (the Flower payloads of :mod:`flwr_clustering.clients.masked`) and the
number of uploaded local clusters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.cluster import KMeans

from flwr_clustering.algorithms.masked import (
    aggregation_correctness,
    assumption8_rate,
    centroid_agreement,
    client_mask,
    mask_aware_means,
    masked_squared_distances,
)
from flwr_clustering.algorithms.masked_federated import run_masked_federated
from flwr_clustering.algorithms.masked_oneshot import run_masked_oneshot
from flwr_clustering.data.registry import load_partition, load_pooled
from flwr_clustering.metrics import contingency, hungarian_accuracy

from .framework import (
    Experiment,
    FederatedData,
    Method,
    PaperValue,
    Setting,
    register,
    register_runner,
    self_scoring,
)

__all__ = [
    "DATASETS",
    "MaskedData",
    "federated_upload_floats",
    "masked_federation",
    "oneshot_upload_floats",
    "score_federated",
    "score_oneshot",
    "uploaded_classes",
]

#: Data sets of the tables: name -> (K, the paper's data set it stands in for).
DATASETS: dict[str, tuple[int, str]] = {
    "dim-128": (16, "DIM"),
    "digits-037": (3, "QMNIST"),
    "digits-46": (2, "HAR"),
}

#: Feature masks of the two assumptions (spec §7.1): registry ``feature_mask`` options.
_MASKS: dict[int, dict[str, Any]] = {
    1: {"feature_mask": "chain", "mask_overlap": 0.3},
    2: {"feature_mask": "shared", "mask_shared": 0.1},
}

#: Privacy threshold of both algorithms (the library default): clusters of fewer points
#: are not uploaded.
PRIVACY_THRESHOLD = 2


@dataclass(frozen=True)
class MaskedData(FederatedData):
    """Client arrays with NaN outside each client's mask, plus the complete rows.

    Attributes
    ----------
    complete : numpy.ndarray of shape (n, d)
        The same rows unmasked, in the same order (centralized k-means' data).
    k_local : int, optional
        ``K_i`` of every client; ``None``: each client chooses ``K_i <= K`` by silhouette.
    """

    complete: np.ndarray | None = None
    k_local: int | None = None


def _partitioner(dataset: str, assumption: int) -> str:
    """Return the row split of a data set under an assumption.

    Random and even (``"iid"``) under Assumption 1, the data set's own biased split
    (``"natural"``) under Assumption 2; ``dim-128`` always uses its natural split, the
    paper's dealing of every cluster to 3-6 clients.
    """
    return "iid" if assumption == 1 and dataset != "dim-128" else "natural"


def masked_federation(
    dataset: str, clients: int = 10, assumption: int = 1, *, seed: int = 0
) -> MaskedData:
    """One run's data: a registry data set masked and split as under an assumption.

    Parameters
    ----------
    dataset : str
        A key of :data:`DATASETS`.
    clients : int, default 10
        Number of clients ``n``.
    assumption : {1, 2}, default 1
        1: chain masks (30 % overlap between consecutive clients), rows split at random
        (``dim-128``: every cluster to a run of 3-6 consecutive clients). 2: 10 % of the
        features shared by all plus disjoint private blocks, biased rows (pseudo-writer
        groups for the digits, first-coordinate-sorted chunks for ``dim-128``).
    seed : int, default 0
        Seed of the masks, the row split and the ``dim-128`` generator.

    Returns
    -------
    MaskedData
        Rows grouped by client; ``n_classes = K``; clients left without rows by the split
        take no part (none did in the registered runs).
    """
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {list(DATASETS)}, got {dataset!r}")
    if assumption not in _MASKS:
        raise ValueError(f"assumption must be 1 or 2, got {assumption!r}")
    k = DATASETS[dataset][0]
    options = dict(dataset=dataset, partitioner=_partitioner(dataset, assumption), seed=seed,
                   **_MASKS[assumption])
    parts = [load_partition(i, clients, **options) for i in range(clients)]
    complete, y_all = load_pooled(clients, complete=True, **options)
    keep = np.concatenate([np.full(len(X_i), len(X_i) > 0) for X_i, _ in parts])
    parts = [p for p in parts if len(p[0])]
    client = np.concatenate([np.full(len(X_i), i) for i, (X_i, _) in enumerate(parts)])
    X = np.concatenate([X_i for X_i, _ in parts])
    y = np.concatenate([y_i for _, y_i in parts])
    if not np.array_equal(y, y_all[keep]):  # pragma: no cover - registry guarantee
        raise RuntimeError("load_pooled(complete=True) rows are not in partition order")
    return MaskedData(X, y, client, n_classes=k, complete=complete[keep],
                      k_local=None if dataset == "dim-128" else k)


# ------------------------------------------------------------------------------ scoring


def uploaded_classes(
    labels: Sequence[np.ndarray], local_labels: Sequence[np.ndarray],
    uploaded: Sequence[np.ndarray], n_classes: int,
) -> np.ndarray:
    """Majority true class of every uploaded local cluster, in upload order.

    Parameters
    ----------
    labels : sequence of numpy.ndarray
        True classes of every client's rows.
    local_labels : sequence of numpy.ndarray
        Local cluster of every row.
    uploaded : sequence of numpy.ndarray
        Per client, the uploaded local clusters in upload order.
    n_classes : int
        Number of true classes.

    Returns
    -------
    numpy.ndarray of shape (total uploaded,), int64
        The classes E1 / E4 compare the grouping with (ties: the lowest class).
    """
    out = []
    for y_i, lab, keep in zip(labels, local_labels, uploaded, strict=True):
        table = contingency(lab, y_i, int(lab.max()) + 1, n_classes)
        out.append(table[np.asarray(keep, dtype=np.int64)].argmax(axis=1))
    return np.concatenate(out).astype(np.int64)


def federated_upload_floats(uploaded: Sequence[np.ndarray], d: int, k: int,
                            rounds: int) -> int:
    """Floats that Algorithm 1's clients upload in total (:class:`MaskedFederatedClient`).

    Initialisation: ``[sums (K_i, d), counts (K_i, d)]`` of the ``K_i`` uploaded local
    clusters; each of the ``F`` federated rounds: ``[sums (K, d), counts (K, d)]``.

    Parameters
    ----------
    uploaded : sequence of numpy.ndarray
        Per client, the local clusters uploaded at initialisation.
    d : int
        Global dimension.
    k : int
        Global clusters ``K``.
    rounds : int
        Federated rounds ``F``.

    Returns
    -------
    int
        ``sum_i 2 K_i d + F n 2 K d``.
    """
    return int(sum(2 * len(u) * d for u in uploaded) + rounds * len(uploaded) * 2 * k * d)


def oneshot_upload_floats(clients: Sequence[np.ndarray],
                          uploaded: Sequence[np.ndarray]) -> int:
    """Numbers that Algorithm 2's clients upload (:class:`MaskedOneShotClient`, one round).

    Per client ``[mask (d,), means (K_i, d_i), covariances (K_i, d_i, d_i), counts
    (K_i,)]``: the full covariance matrices, as the payload sends them.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Client rows (NaN outside the mask).
    uploaded : sequence of numpy.ndarray
        Per client, the uploaded local clusters.

    Returns
    -------
    int
        ``sum_i d + K_i (d_i + d_i^2 + 1)``.
    """
    total = 0
    for X, keep in zip(clients, uploaded, strict=True):
        d_i = int(client_mask(X).sum())
        total += X.shape[1] + len(keep) * (d_i + d_i * d_i + 1)
    return int(total)


def _common_scores(data: MaskedData, centroids: np.ndarray, pred: Sequence[np.ndarray],
                   seed: int) -> dict[str, float]:
    """Accuracy, centralized accuracy and E3 of one run."""
    k = data.n_classes
    central = KMeans(k, n_init=10, random_state=seed).fit_predict(data.complete)
    cos, rel = centroid_agreement(centroids, mask_aware_means(data.clients, data.labels, k))
    return {
        "accuracy": 100.0 * hungarian_accuracy(data.y, np.concatenate(pred)),
        "centralized-accuracy": 100.0 * hungarian_accuracy(data.y, central),
        "E3-cosine": cos,
        "E3-relative-distance": rel,
    }


def score_federated(data: MaskedData, k: int | None = None, seed: int = 0,
                    **options: Any) -> dict[str, float]:
    """Run Algorithm 1 once and compute the metrics of Tables 2 and 3.

    Parameters
    ----------
    data : MaskedData
        The run's data (``K = data.n_classes``).
    k : int, optional
        Ignored: ``K`` is the data set's (the framework passes the experiment's ``k``).
    seed : int, default 0
        Seed of :func:`run_masked_federated`.
    **options
        :func:`run_masked_federated` options (``method``, ``alpha``, ``rounds``, ...).

    Returns
    -------
    dict
        ``"E1"``, ``"E2-accuracy"`` (%), ``"centralized-accuracy"`` (%), ``"E3-cosine"``,
        ``"E3-relative-distance"``, ``"floats-uploaded"``, ``"local-clusters"``. Each
        point is labelled by the nearest final global centroid on its client's features.
    """
    K = data.n_classes
    clients = data.clients
    result = run_masked_federated(clients, K, k_local=data.k_local, seed=seed,
                                  privacy_threshold=PRIVACY_THRESHOLD, **options)
    classes = uploaded_classes(data.labels, result.local_labels, result.uploaded, K)
    pred = [masked_squared_distances(X, result.centroids).argmin(axis=1) for X in clients]
    common = _common_scores(data, result.centroids, pred, seed)
    bounds = np.cumsum([0] + [len(X) for X in clients])
    return {
        "E1": aggregation_correctness(result.groups, classes),
        "E2-accuracy": common.pop("accuracy"),
        **common,
        "floats-uploaded": float(federated_upload_floats(
            result.uploaded, data.X.shape[1], K, len(result.history) - 1)),
        "local-clusters": float(len(classes)),
        "assumption-8-rate": assumption8_rate(
            clients, [data.complete[bounds[c]:bounds[c + 1]] for c in range(len(clients))],
            data.labels, np.random.default_rng(seed)),
    }


def score_oneshot(data: MaskedData, k: int | None = None, seed: int = 0,
                  **options: Any) -> dict[str, float]:
    """Run Algorithm 2 once and compute the metrics of Tables 4 and 5.

    Parameters
    ----------
    data : MaskedData
        The run's data (``K = data.n_classes``).
    k : int, optional
        Ignored: ``K`` is the data set's.
    seed : int, default 0
        Seed of :func:`run_masked_oneshot`.
    **options
        :func:`run_masked_oneshot` options (``w``, ``min_size``, ``max_size``, ...).

    Returns
    -------
    dict
        ``"E4"``, ``"E5-accuracy"`` (%), ``"centralized-accuracy"`` (%), ``"E3-cosine"``,
        ``"E3-relative-distance"``, ``"floats-uploaded"``, ``"local-clusters"``. A point
        takes the global label of its local cluster; the points of a withheld cluster
        (fewer than the privacy threshold) take the nearest global centroid on the
        client's features.
    """
    K = data.n_classes
    clients = data.clients
    result = run_masked_oneshot(clients, K, k_local=data.k_local, seed=seed,
                                privacy_threshold=PRIVACY_THRESHOLD, **options)
    # The upload filter of run_masked_oneshot / MaskedOneShotClient (it keeps no record).
    uploaded = [np.flatnonzero(np.bincount(lab) >= max(PRIVACY_THRESHOLD, 1))
                for lab in result.local_labels]
    if [len(u) for u in uploaded] != [len(a) for a in result.assignment]:
        raise RuntimeError("uploaded local clusters do not match the assignment")
    classes = uploaded_classes(data.labels, result.local_labels, uploaded, K)
    pred = []
    for X, lab, keep, glob in zip(clients, result.local_labels, uploaded, result.assignment,
                                  strict=True):
        label_of = np.full(int(lab.max()) + 1, -1, dtype=np.int64)
        label_of[keep] = glob
        p = label_of[lab]
        withheld = p < 0
        if withheld.any():
            p[withheld] = masked_squared_distances(X, result.centroids)[withheld].argmin(axis=1)
        pred.append(p)
    common = _common_scores(data, result.centroids, pred, seed)
    return {
        "E4": aggregation_correctness(result.groups, classes),
        "E5-accuracy": common.pop("accuracy"),
        **common,
        "floats-uploaded": float(oneshot_upload_floats(clients, uploaded)),
        "local-clusters": float(len(classes)),
    }


register_runner("masked-federated", self_scoring(score_federated))
register_runner("masked-oneshot", self_scoring(score_oneshot))


# ------------------------------------------------------------------ settings and methods


def _settings(assumption: int) -> tuple[Setting, ...]:
    out = [Setting("dim-128 n=10", {"dataset": "dim-128", "clients": 10,
                                    "assumption": assumption},
                   panel="dim-128", group="n=10")]
    for dataset in ("digits-037", "digits-46"):
        for n in (10, 3):
            out.append(Setting(f"{dataset} n={n}", {"dataset": dataset, "clients": n,
                                                    "assumption": assumption},
                               panel=dataset, group=f"n={n}"))
    return tuple(out)


def _alg1(method: str) -> Method:
    return Method(
        f"alg1-{method}", "masked-federated",
        f"Algorithm 1, Method {method}: local k-means (10 restarts) at initialisation, "
        f"alpha = 0.8, F = 3 federated rounds of 10 warm-started k-means iterations, privacy "
        f"threshold {PRIVACY_THRESHOLD}",
        {"method": method, "alpha": 0.8, "rounds": 3})


_ALG2 = Method(
    "alg2", "masked-oneshot",
    "Algorithm 2: local k-means (10 restarts), a Gaussian (MLE) per local cluster, "
    "30 <= M <= 100 proxy points per cluster, force exponent w = 2, privacy threshold "
    f"{PRIVACY_THRESHOLD}",
    {"w": 2.0, "min_size": 30, "max_size": 100})

_ALG2_VALID = Method(
    "alg2-valid-pairs", "masked-oneshot",
    "Algorithm 2 as `alg2`, but the group force (Eq. 11) divides by the point pairs that "
    "have a distance (clusters sharing a feature) instead of all pairs: spec §4.1's "
    "`normalize=\"valid_pairs\"` alternative",
    {"w": 2.0, "min_size": 30, "max_size": 100, "normalize": "valid_pairs"})


# ------------------------------------------------------------------- the paper's numbers

#: Spec §8 Tables 2-5: paper data set -> (E1/E4, (accuracy, std), centralized accuracy,
#: (cosine, std), (relative distance, std)).
_PAPER: dict[str, dict[str, tuple]] = {
    "masked-table2": {
        "HAR": (1.0, (99.87, 0.04), 99.91, (1.000, 0.000), (0.005, 0.001)),
        "QMNIST": (1.0, (92.16, 1.28), 93.99, (0.998, 0.001), (0.058, 0.021)),
        "DIM": (1.0, (100.0, 0.0), 100.0, (1.0, 0.0), (0.0, 0.0)),
    },
    "masked-table3": {
        "HAR": (1.0, (99.94, 0.01), 99.90, (1.000, 0.000), (0.002, 0.001)),
        "QMNIST": (1.0, (94.59, 0.46), 96.66, (0.998, 0.001), (0.059, 0.009)),
        "DIM": (1.0, (100.0, 0.0), 100.0, (1.0, 0.0), (0.0, 0.0)),
    },
    "masked-table4": {
        "HAR": (1.0, (99.87, 0.04), 99.91, (1.0, 0.0), (0.005, 0.001)),
        "QMNIST": (1.0, (91.37, 1.35), 93.99, (0.998, 0.002), (0.066, 0.024)),
        "DIM": (1.0, (100.0, 0.0), 100.0, (1.0, 0.0), (0.0, 0.0)),
    },
    "masked-table5": {
        "HAR": (1.0, (99.94, 0.00), 99.90, (1.0, 0.0), (0.002, 0.001)),
        "QMNIST": (1.0, (94.36, 0.45), 96.66, (0.998, 0.001), (0.062, 0.011)),
        "DIM": (1.0, (100.0, 0.0), 100.0, (1.0, 0.0), (0.0, 0.0)),
    },
}

#: Spec §8 Table 1: satisfaction rate of Assumption 8, (Assumption 1, Assumption 2).
_PAPER_A8 = {"HAR": (0.999, 0.999), "QMNIST": (0.948, 0.976), "DIM": (1.0, 1.0)}

#: The paper's number of clients per data set (spec §7.2).
_PAPER_CLIENTS = {"HAR": 30, "QMNIST": 10, "DIM": 10}


def _paper(table: str, method: str, e: str, acc: str,
           settings: Sequence[Setting]) -> dict[tuple[str, str, str], PaperValue]:
    paper: dict[tuple[str, str, str], PaperValue] = {}
    for s in settings:
        source = DATASETS[s.params["dataset"]][1]
        e_val, (a, a_std), central, (cos, cos_std), (rel, rel_std) = _PAPER[table][source]
        note = f"paper's {source} row ({_PAPER_CLIENTS[source]} clients)"
        for metric, value in ((e, PaperValue(e_val, 0.0, note=note)),
                              (acc, PaperValue(a, a_std, note=note)),
                              ("centralized-accuracy", PaperValue(central, note=note)),
                              ("E3-cosine", PaperValue(cos, cos_std, note=note)),
                              ("E3-relative-distance", PaperValue(rel, rel_std, note=note))):
            paper[(method, s.label, metric)] = value
        if table in ("masked-table2", "masked-table3"):
            rate = _PAPER_A8[source][0 if table == "masked-table2" else 1]
            paper[(method, s.label, "assumption-8-rate")] = PaperValue(rate, note=note)
    return paper


# ----------------------------------------------------------------------------- claims


def _cells(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["setting"], r["metric"]): r for r in rows}


def _make_checks(e: str, acc: str):
    """Build the check of the paper's claims (spec §8) on our rows.

    Exactness on the DIM look-alike; on the digits, perfect aggregation and a mean accuracy
    at most 3 points below centralized k-means.
    """

    def checks(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        methods = list(dict.fromkeys(r.get("method") for r in rows))
        out = []
        for m in methods:
            for c in method_checks([r for r in rows if r.get("method") == m]):
                if len(methods) > 1:
                    c["claim"] = f"{m}, {c['claim']}"
                out.append(c)
        return out

    def method_checks(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        cells = _cells(rows)
        settings = list(dict.fromkeys(r["setting"] for r in rows))
        out = []
        for s in settings:
            def row(metric: str, s: str = s) -> dict[str, Any] | None:
                return cells.get((s, metric))

            if s.startswith("dim-128"):
                for metric, claim, ok, worst in (
                    (e, f"{e} = 1 on every run", lambda v: v == 1.0, "min"),
                    (acc, "accuracy 100 % on every run", lambda v: v >= 100.0 - 1e-9, "min"),
                    ("E3-cosine", "E3 cosine >= 1 - 1e-9 on every run",
                     lambda v: v >= 1.0 - 1e-9, "min"),
                    ("E3-relative-distance", "E3 relative distance <= 1e-9 on every run",
                     lambda v: v <= 1e-9, "max"),
                ):
                    r = row(metric)
                    if r is None:
                        continue
                    scores = np.array(r["scores"], dtype=float)
                    out.append({
                        "claim": f"{s}: {claim} (paper: DIM-set128 exact)",
                        "holds": bool(all(ok(v) for v in scores)),
                        "detail": f"{worst} {getattr(scores, worst)():.12g} over "
                                  f"{len(scores)} runs, mean {scores.mean():.12g}",
                    })
                continue
            r_acc, r_central, r_e = row(acc), row("centralized-accuracy"), row(e)
            if r_acc is not None and r_central is not None:
                gap = r_acc["ours_mean"] - r_central["ours_mean"]
                out.append({
                    "claim": f"{s}: mean accuracy at most 3 points below centralized k-means "
                             "on the complete data (paper: within 2.6 points, sometimes "
                             "above)",
                    "holds": bool(gap >= -3.0),
                    "detail": f"{acc} {r_acc['ours_mean']:.2f} %, centralized "
                              f"{r_central['ours_mean']:.2f} %, difference {gap:+.2f}",
                })
            if r_e is not None:
                scores = np.array(r_e["scores"], dtype=float)
                out.append({
                    "claim": f"{s}: {e} = 1 on every run (paper: aggregation always perfect)",
                    "holds": bool((scores == 1.0).all()),
                    "detail": f"{int((scores == 1.0).sum())} of {len(scores)} runs, mean "
                              f"{scores.mean():.3f}, min {scores.min():.3f}",
                })
        return out

    return checks


# --------------------------------------------------------------------------- registration

_COMMON_NOTES = (
    "Data are offline stand-ins (spec §7.2): `dim-128` is the DIM-set128 look-alike (1024 "
    "points, d = 128, 16 Gaussian clusters about 140 standard deviations apart, regenerated "
    "with each run's seed); `digits-037` (540 rows, scikit-learn 8x8 digits 0/3/7, 64 "
    "features) stands in for QMNIST {0, 3, 7} (784 features); `digits-46` (362 rows, digits "
    "4/6) for the paper's two-class HAR subset (561 features, 30 clients). The paper's "
    "numbers are attached to the matching rows as ballpark targets; only the DIM rows are "
    "expected to reproduce exactly.",
    "Clients: the paper's n = 10 everywhere (the paper used 30 for HAR); the digits sets also "
    "with n = 3, because 64 pixels over 10 clients leave each client 9-12 features under "
    "these masks (QMNIST: about 108-149 of 784) and n = 3 about 25.",
    "K_i: `dim-128` clients choose K_i <= 16 by silhouette (K_i = 1 when the best silhouette "
    "is below 0.25); the digits clients use K_i = K, as the paper.",
    "Run r seeds the masks, the row split, the `dim-128` generator and the algorithm with r; "
    "centralized k-means is scikit-learn KMeans(K, n_init=10, random_state=r) on the "
    "complete unmasked rows (the paper's number in brackets is its centralized k-means).",
    "E1 / E4: every uploaded local cluster is labelled by the majority true class of its "
    "points; groups are matched to classes by the Hungarian method; the score is the "
    "fraction of local clusters in the group matched to their class (spec §7.3; the paper "
    "gives no formula). Accuracy is Hungarian-matched, in %. E3 compares the "
    "Hungarian-matched global centroids with the optimal mask-aware centroids of Eq. 1 "
    "(the true classes' per-feature means over the clients observing each feature).",
    "`floats-uploaded`: numbers sent by all clients in all rounds, counted from the Flower "
    "payloads (downloads not counted); `local-clusters`: local clusters uploaded in total "
    "(clusters of fewer than 2 points are withheld).",
)

_A1_NOTES = (
    "Assumption 1: chain masks, block s = ceil(d / (n - 0.3 (n - 1))) on a random feature "
    "permutation, consecutive blocks sharing about 30 % (spec §7.1); rows split at random "
    "and evenly (`iid`); `dim-128`: every cluster to a run of 3-6 consecutive clients, "
    "split at random (the registry's natural split, the paper's dealing).",
)
_A2_NOTES = (
    "Assumption 2: 10 % of the features shared by all clients, the rest split into "
    "disjoint private blocks (spec §7.1); biased rows: the digits sets' pseudo-writer groups "
    "(every class split into n k-means sub-styles, one per client; the bundled digits have "
    "no writer ids), `dim-128`: every cluster to 3-6 random clients in chunks sorted by the "
    "first coordinate (the registry's natural split).",
)

_ALG1_NOTES = (
    "Communication of Algorithm 1 (1 + F = 4 rounds): initialisation sends [sums, counts] "
    "of shape (K_i, d) per client, each federated round [sums, counts] of shape (K, d) per "
    "client: sum_i 2 K_i d + 3 n 2 K d floats.",
)
_ALG2_NOTES = (
    "Communication of Algorithm 2 (one round): per client the mask (d), and per uploaded "
    "local cluster its mean (d_i), full covariance matrix (d_i^2) and count (1).",
    "Algorithm 2's accuracy: a point takes the global group of its local cluster; points of "
    "a withheld cluster (fewer than 2 points) take the nearest global centroid.",
)

_METRICS_ALG1 = ("E1", "E2-accuracy", "centralized-accuracy", "E3-cosine",
                 "E3-relative-distance", "floats-uploaded", "local-clusters",
                 "assumption-8-rate")
_METRICS_ALG2 = ("E4", "E5-accuracy", "centralized-accuracy", "E3-cosine",
                 "E3-relative-distance", "floats-uploaded", "local-clusters")


def _register(name: str, title: str, table: int, methods: tuple[Method, ...],
              assumption: int) -> None:
    settings = _settings(assumption)
    method = methods[0]  # the paper's; the others are variants
    alg1 = method.kind == "masked-federated"
    metrics = _METRICS_ALG1 if alg1 else _METRICS_ALG2
    register(Experiment(
        name=name,
        title=title,
        source=f"Maritan & Schenato, Table {table} (mean ± std over the paper's repetitions)",
        k=16,
        load=masked_federation,
        settings=settings,
        methods=methods,
        paper=_paper(name, method.name, metrics[0], metrics[1], settings),
        notes=_COMMON_NOTES + (_A1_NOTES if assumption == 1 else _A2_NOTES)
        + (_ALG1_NOTES if alg1 else _ALG2_NOTES)
        + ("K is each data set's (16, 3 or 2); the experiment's k = 16 is not used.",),
        metrics=metrics,
        per_run_data=True,
        checks=_make_checks(metrics[0], metrics[1]),
    ))


_register("masked-table2",
          "Maritan & Schenato Table 2: Algorithm 1, Method A, Assumption 1 (chain masks, "
          "random rows)", 2, (_alg1("A"),), 1)
_register("masked-table3",
          "Maritan & Schenato Table 3: Algorithm 1, Method B, Assumption 2 (shared block + "
          "private features, biased rows)", 3, (_alg1("B"),), 2)
_register("masked-table4",
          "Maritan & Schenato Table 4: Algorithm 2 (one-shot), Assumption 1 (chain masks, "
          "random rows)", 4, (_ALG2, _ALG2_VALID), 1)
_register("masked-table5",
          "Maritan & Schenato Table 5: Algorithm 2 (one-shot), Assumption 2 (shared block + "
          "private features, biased rows)", 5, (_ALG2,), 2)
