"""Choosing ``k`` from sums: the criteria of several candidate models, without a row.

A federation that does not know ``k`` fits one model per candidate (``k = k_min..k_max``,
and several starts per ``k``) in one run (:mod:`flwr_clustering.strategies.choose_k`),
then scores every candidate from what its clients send:

1. **moments** (:func:`client_moments`): per cluster of each candidate (every row to its
   nearest centre) the row count ``n_j``, the sum of the rows ``S_j``, the sum of their
   squared distances to the centre ``E_j`` and the sum of their simplified silhouette
   values;
2. **spreads** (:func:`client_spreads`), once the server knows every cluster's mean
   ``m_j = S_j / n_j``: per cluster the sum of the rows' Euclidean distances to it.

Every one is a sum over rows, so the server's totals equal the pooled rows' values, and so
do the criteria (:func:`candidate_scores`), each equal to scikit-learn's on the pooled rows
and the model's labels (tested):

* ``sse``: ``sum_j E_j``, scikit-learn's ``inertia_`` of the model's centres;
* ``silhouette``: the mean simplified silhouette (Hruschka et al. 2004: ``a`` and ``b`` the
  distances to the nearest and second nearest centre, ``(b - a) / b``;
  :func:`~flwr_clustering.metrics.simplified_silhouette`);
* ``calinski-harabasz``: ``B / W * (n - k') / (k' - 1)`` with ``W = sum_j (E_j -
  n_j ||m_j - c_j||^2)`` (the within-cluster scatter about the means, from the scatter
  about the centres) and ``B = sum_j n_j ||m_j - m||^2``
  (``sklearn.metrics.calinski_harabasz_score``);
* ``davies-bouldin``: the mean over clusters of ``max_{j != i} (s_i + s_j) / ||m_i -
  m_j||``, ``s_i`` the mean distance of cluster ``i``'s rows to its mean
  (``sklearn.metrics.davies_bouldin_score``).

``k'`` is the number of non-empty clusters. :func:`choose` picks ``k`` by one rule
(:data:`RULES`) and names the runner-up.

A client holding fewer than ``threshold`` rows of a cluster sends nothing of that cluster
but its row count in ``withheld`` (its sums would be a row); the criteria then describe
the other rows only, and the server says so. Under secure aggregation only totals reach
the server and nothing is withheld.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .lloyd import cluster_sums, silhouette_values, squared_distances

__all__ = [
    "CRITERIA",
    "DEFAULT_RULE",
    "RULES",
    "CandidateMoments",
    "best_starts",
    "candidate_scores",
    "cluster_means",
    "lloyd_refine",
    "choose",
    "client_moments",
    "client_spreads",
    "run_choose_k",
    "score_candidates",
    "start_seed",
    "sse_knee",
]

#: The criteria of a candidate and whether a larger value is better.
CRITERIA: dict[str, bool] = {
    "silhouette": True, "calinski-harabasz": True, "davies-bouldin": False, "sse": False,
}

#: The rules :func:`choose` picks ``k`` by: the best value of one criterion, or the SSE's
#: knee (:func:`sse_knee`).
RULES = ("silhouette", "calinski-harabasz", "davies-bouldin", "sse-knee")
#: The rule a search uses unless told otherwise (run-config ``k-rule``): in the
#: ``choose-k`` benchmark it agreed most often with the centralized choice.
DEFAULT_RULE = RULES[0]


@dataclass
class CandidateMoments:
    """One candidate's per-cluster sums over some rows (one client's, or the totals).

    Attributes
    ----------
    counts : numpy.ndarray of shape (k,)
        Rows nearest to each centre (float: a secure total is a float).
    sums : numpy.ndarray of shape (k, d)
        Their sum.
    sse : numpy.ndarray of shape (k,)
        The sum of their squared distances to the centre.
    silhouette : numpy.ndarray of shape (k,)
        The sum of their simplified silhouette values.
    withheld : float
        Rows left out (clusters of fewer than the privacy threshold at a client).
    """

    counts: np.ndarray
    sums: np.ndarray
    sse: np.ndarray
    silhouette: np.ndarray
    withheld: float = 0.0

    def to_arrays(self) -> list[np.ndarray]:
        """``[counts, sums, sse, silhouette, [withheld]]``, float64 (a message's arrays)."""
        return [np.asarray(a, dtype=np.float64) for a in
                (self.counts, self.sums, self.sse, self.silhouette, [self.withheld])]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> CandidateMoments:
        """The inverse of :meth:`to_arrays`."""
        counts, sums, sse, sil, withheld = (np.asarray(a, dtype=np.float64) for a in arrays)
        return cls(counts, sums, sse, sil, float(withheld.reshape(-1)[0]))

    @staticmethod
    def total(parts: Sequence[CandidateMoments]) -> CandidateMoments:
        """The sum of several clients' moments (in the given order)."""
        return CandidateMoments(
            sum(p.counts for p in parts), sum(p.sums for p in parts),
            sum(p.sse for p in parts), sum(p.silhouette for p in parts),
            float(sum(p.withheld for p in parts)))


def _labels_and_d2(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d2 = squared_distances(X, C)
    return d2.argmin(axis=1), d2


def client_moments(X: np.ndarray, models: Sequence[np.ndarray], threshold: int = 0
                   ) -> list[CandidateMoments]:
    """A client's per-cluster moments of every candidate model (step 1).

    Parameters
    ----------
    X : numpy.ndarray of shape (n, d)
        The client's rows.
    models : sequence of numpy.ndarray of shape (k_c, d)
        The candidates' centres.
    threshold : int, default 0
        A cluster with ``0 < n_j < threshold`` rows here is withheld (zeros; its rows in
        ``withheld``).

    Returns
    -------
    list of CandidateMoments
        One per candidate, in order.
    """
    X = np.asarray(X, dtype=np.float64)
    out = []
    for C in models:
        C = np.asarray(C, dtype=np.float64)
        k, d = C.shape
        labels, d2 = _labels_and_d2(X, C)
        sums, counts = cluster_sums(X, labels, k)
        counts = counts.astype(np.float64)
        sse = np.bincount(labels, weights=d2[np.arange(len(X)), labels], minlength=k)
        sil = np.bincount(labels, weights=silhouette_values(d2), minlength=k)
        small = (counts > 0) & (counts < threshold)
        withheld = float(counts[small].sum())
        counts[small], sums[small], sse[small], sil[small] = 0.0, 0.0, 0.0, 0.0
        out.append(CandidateMoments(counts, sums, sse.astype(np.float64),
                                    sil.astype(np.float64), withheld))
    return out


def client_spreads(X: np.ndarray, models: Sequence[np.ndarray],
                   means: Sequence[np.ndarray], threshold: int = 0) -> list[np.ndarray]:
    """A client's per-cluster sums of distances to the clusters' means (step 2).

    Each row goes to its nearest centre of the candidate (the labels of step 1) and adds
    its Euclidean distance to that cluster's mean (``means``: the federation's, from step
    1). Withheld as in :func:`client_moments`.

    Returns
    -------
    list of numpy.ndarray of shape (k_c,)
        One per candidate.
    """
    X = np.asarray(X, dtype=np.float64)
    out = []
    for C, M in zip(models, means, strict=True):
        C = np.asarray(C, dtype=np.float64)
        M = np.nan_to_num(np.asarray(M, dtype=np.float64))  # an empty cluster's mean: unused
        labels, _ = _labels_and_d2(X, C)
        k = len(C)
        dist = np.sqrt(((X - M[labels]) ** 2).sum(axis=1))
        spread = np.bincount(labels, weights=dist, minlength=k).astype(np.float64)
        counts = np.bincount(labels, minlength=k)
        spread[(counts > 0) & (counts < threshold)] = 0.0
        out.append(spread)
    return out


def cluster_means(moments: CandidateMoments) -> np.ndarray:
    """The clusters' means ``S_j / n_j`` (NaN for an empty cluster)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return moments.sums / moments.counts[:, None]


def candidate_scores(C: np.ndarray, moments: CandidateMoments,
                     spreads: np.ndarray | None = None, k: int | None = None
                     ) -> dict[str, float]:
    """The criteria of one candidate from the federation's totals.

    Parameters
    ----------
    C : numpy.ndarray of shape (k, d)
        The candidate's centres.
    moments : CandidateMoments
        The totals of :func:`client_moments` over the clients.
    spreads : numpy.ndarray of shape (k,), optional
        The totals of :func:`client_spreads` (Davies-Bouldin: NaN without them).
    k : int, optional
        The ``k`` the candidate was fitted for (default: its centres; a one-shot model
        may return fewer, then ``clusters < k`` and :func:`choose` passes it over).

    Returns
    -------
    dict
        ``k``, ``clusters`` (non-empty), ``rows``, ``withheld-rows``, ``sse``,
        ``silhouette``, ``calinski-harabasz``, ``davies-bouldin`` (NaN where undefined:
        fewer than two non-empty clusters, as scikit-learn refuses).
    """
    C = np.asarray(C, dtype=np.float64)
    counts = np.rint(np.asarray(moments.counts, dtype=np.float64))
    full = counts > 0
    n = float(counts.sum())
    kk = int(full.sum())
    out = {"k": int(len(C) if k is None else k), "clusters": kk, "rows": int(n),
           "withheld-rows": int(round(moments.withheld)),
           "sse": math.fsum(moments.sse), "silhouette": float("nan"),
           "calinski-harabasz": float("nan"), "davies-bouldin": float("nan")}
    if n == 0:
        return out
    out["silhouette"] = math.fsum(moments.silhouette) / n
    if kk < 2 or kk >= n:  # scikit-learn: 2 <= labels <= n - 1
        return out
    means = cluster_means(moments)[full]
    nj = counts[full]
    centres = C[full]
    # W = sum_j sum_i ||x_i - m_j||^2 = E_j - n_j ||m_j - c_j||^2 (no cancellation of
    # large squares: both terms are about the cluster's own scatter)
    within = math.fsum(moments.sse[full] - nj * ((means - centres) ** 2).sum(axis=1))
    mean = moments.sums[full].sum(axis=0) / n
    between = math.fsum(nj * ((means - mean) ** 2).sum(axis=1))
    out["calinski-harabasz"] = (1.0 if within == 0.0 else
                                between * (n - kk) / (within * (kk - 1)))
    if spreads is not None:
        s = np.asarray(spreads, dtype=np.float64)[full] / nj
        gaps = np.sqrt(((means[:, None, :] - means[None, :, :]) ** 2).sum(axis=2))
        if np.allclose(s, 0) or np.allclose(gaps, 0):
            out["davies-bouldin"] = 0.0
        else:
            gaps[gaps == 0] = np.inf
            out["davies-bouldin"] = float(np.mean(np.max((s[:, None] + s[None, :]) / gaps,
                                                         axis=1)))
    return out


def sse_knee(ks: Sequence[int], sse: Sequence[float]) -> int:
    """The knee of the SSE curve: the index of the ``k`` farthest below its chord.

    Both axes are scaled to ``[0, 1]`` (``k`` from ``k_min`` to ``k_max``, the SSE from
    its smallest to its largest value); the knee is the ``k`` whose scaled SSE lies
    farthest below the straight line from the first candidate's point to the last one's
    (the Kneedle rule of Satopaa et al. 2011 for a decreasing convex curve). Ties: the
    smaller ``k``. Fewer than three candidates: the first.
    """
    ks = np.asarray(ks, dtype=np.float64)
    y = np.asarray(sse, dtype=np.float64)
    if len(ks) < 3 or not np.isfinite(y).all() or ks[-1] == ks[0]:
        return 0
    x = (ks - ks[0]) / (ks[-1] - ks[0])
    span = y.max() - y.min()
    if span <= 0:
        return 0
    yn = (y - y.min()) / span
    chord = yn[0] + (yn[-1] - yn[0]) * x
    return int(np.argmax(chord - yn))


def _order(scores: Sequence[dict[str, float]], criterion: str) -> list[int]:
    """Candidates from best to worst by ``criterion`` (NaN last; ties: smaller k)."""
    larger = CRITERIA[criterion]
    keyed = []
    for i, s in enumerate(scores):
        v = float(s[criterion])
        bad = not np.isfinite(v)
        keyed.append((bad, -v if larger and not bad else (v if not bad else 0.0),
                      s["k"], i))
    return [i for *_, i in sorted(keyed)]


def choose(scores: Sequence[dict[str, float]], rule: str = DEFAULT_RULE
           ) -> tuple[int, int | None, dict[str, int]]:
    """Pick a candidate by ``rule``.

    Only candidates with all their ``k`` clusters non-empty are eligible (a model with an
    empty cluster has fewer than ``k``); if none is, all are.

    Parameters
    ----------
    scores : sequence of dict
        :func:`candidate_scores` of each candidate (one ``k`` each, ascending).
    rule : str
        One of :data:`RULES`.

    Returns
    -------
    chosen : int
        The index of the chosen candidate.
    runner_up : int or None
        The next best by the same rule (``sse-knee``: by the knee's distance).
    picks : dict
        ``{criterion or rule: index}``, what every rule would pick.
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")
    if not scores:
        raise ValueError("no candidate to choose from")
    eligible = [i for i, s in enumerate(scores) if s["clusters"] == s["k"]] or \
        list(range(len(scores)))
    picks: dict[str, int] = {}
    orders: dict[str, list[int]] = {}
    for criterion in ("silhouette", "calinski-harabasz", "davies-bouldin"):
        order = [i for i in _order(scores, criterion) if i in eligible]
        orders[criterion] = order
        picks[criterion] = order[0]
    ks = [scores[i]["k"] for i in eligible]
    sse = [scores[i]["sse"] for i in eligible]
    knee = sse_knee(ks, sse)
    picks["sse-knee"] = eligible[knee]
    if len(eligible) >= 3 and np.ptp(sse) > 0:
        x = (np.asarray(ks, float) - ks[0]) / (ks[-1] - ks[0])
        yn = (np.asarray(sse) - min(sse)) / np.ptp(sse)
        gap = yn[0] + (yn[-1] - yn[0]) * x - yn
        orders["sse-knee"] = [eligible[j] for j in np.argsort(-gap, kind="stable")]
    else:
        orders["sse-knee"] = [eligible[knee]] + [i for i in eligible if i != eligible[knee]]
    order = orders[rule]
    chosen = picks[rule]
    runner = next((i for i in order if i != chosen), None)
    return chosen, runner, picks


def start_seed(seed: int, start: int) -> int:
    """The seed of start ``start`` of a run seeded ``seed``: ``seed`` itself for start 0.

    So a search's first start of every ``k`` is the single-``k`` run of the same seed,
    bit for bit; the others draw from ``SeedSequence([seed, start])`` (below ``2**31``).
    """
    if start == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(start)])
               .generate_state(1)[0] >> 1)


def lloyd_refine(clients: Sequence[np.ndarray], models: Sequence[np.ndarray],
                 rounds: int, threshold: int = 0) -> tuple[list[np.ndarray], int]:
    """Up to ``rounds`` federated Lloyd rounds of every candidate, from step-1 sums.

    Each round every centre moves to the mean of its cluster (the clients'
    :func:`client_moments`, summed in client order; a cluster without rows keeps its
    centre); it stops early when no candidate moves. Returns the models and the rounds run.
    """
    models = [np.asarray(C, dtype=np.float64) for C in models]
    done = 0
    for _ in range(int(rounds)):
        per_client = [client_moments(X, models, threshold) for X in clients]
        totals = [CandidateMoments.total([p[c] for p in per_client])
                  for c in range(len(models))]
        new = [np.where(t.counts[:, None] > 0, np.nan_to_num(cluster_means(t)), C)
               for C, t in zip(models, totals, strict=True)]
        if all(np.array_equal(a, b) for a, b in zip(new, models, strict=True)):
            break
        models, done = new, done + 1
    return models, done


def score_candidates(clients: Sequence[np.ndarray], models: Sequence[np.ndarray],
                     threshold: int = 0, ks: Sequence[int] | None = None
                     ) -> list[dict[str, float]]:
    """Every candidate's criteria from clients' rows, as the federation computes them.

    The pure form of the two exchanges: the clients' :func:`client_moments`, summed in
    client order; the clusters' means; the clients' :func:`client_spreads`, summed; then
    :func:`candidate_scores`.
    """
    per_client = [client_moments(X, models, threshold) for X in clients]
    totals = [CandidateMoments.total([p[c] for p in per_client]) for c in range(len(models))]
    means = [cluster_means(t) for t in totals]
    spreads = [client_spreads(X, models, means, threshold) for X in clients]
    return [candidate_scores(C, totals[c], sum(s[c] for s in spreads),
                             None if ks is None else int(ks[c]))
            for c, C in enumerate(models)]


def best_starts(scores: Sequence[dict[str, float]]) -> list[int]:
    """Per ``k``, the index of the start of lowest SSE (ties: the earlier start)."""
    best: dict[int, int] = {}
    for i, s in enumerate(scores):
        j = best.get(s["k"])
        if j is None or s["sse"] < scores[j]["sse"]:
            best[s["k"]] = i
    return [best[k] for k in sorted(best)]


def run_choose_k(clients: Sequence[np.ndarray], fit, ks: Sequence[int], *, starts: int = 1,
                 seed: int = 0, rule: str = DEFAULT_RULE, threshold: int = 0,
                 refine_rounds: int = 0) -> dict:
    """The whole search on in-memory clients: the reference loop of the Flower search.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        The clients' rows.
    fit : callable
        ``fit(k, seed) -> centres``: one run of the algorithm (its own pure loop).
    ks : sequence of int
        The candidate ``k``, ascending.
    starts : int, default 1
        Runs per ``k`` (seeds :func:`start_seed`); the lowest SSE is kept.
    seed : int
        The run's seed.
    rule, threshold
        See :func:`choose` and :func:`client_moments`.
    refine_rounds : int, default 0
        :func:`lloyd_refine` every candidate before it is scored.

    Returns
    -------
    dict
        ``models`` (every candidate's centres, ``k`` major, start minor), ``scores``
        (theirs), ``kept`` (the best start of each ``k``), ``chosen`` and ``runner-up``
        (indices into ``models``), ``picks``.
    """
    models = [np.asarray(fit(int(k), start_seed(seed, s)), dtype=np.float64)
              for k in ks for s in range(starts)]
    if refine_rounds:
        models, _ = lloyd_refine(clients, models, refine_rounds, threshold)
    scores = score_candidates(clients, models, threshold,
                              [int(k) for k in ks for _ in range(starts)])
    kept = best_starts(scores)
    chosen, runner, picks = choose([scores[i] for i in kept], rule)
    return {"models": models, "scores": scores, "kept": kept, "chosen": kept[chosen],
            "runner-up": None if runner is None else kept[runner],
            "picks": {r: kept[i] for r, i in picks.items()}}
