"""Choosing k from sums (algorithms/choose_k.py): the criteria equal scikit-learn's."""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris, make_blobs
from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score
from sklearn.preprocessing import StandardScaler

from flwr_clustering.algorithms.choose_k import (
    CandidateMoments,
    candidate_scores,
    choose,
    client_moments,
    run_choose_k,
    score_candidates,
    sse_knee,
    start_seed,
)
from flwr_clustering.algorithms.lloyd import nearest_labels
from flwr_clustering.metrics import simplified_silhouette, sse


def _split(X, parts, seed=0):
    idx = np.random.default_rng(seed).permutation(len(X))
    return [X[i] for i in np.array_split(idx, parts)]


@pytest.mark.parametrize("k", [2, 3, 5, 8])
def test_the_criteria_equal_scikit_learns_on_the_pooled_rows(k):
    X = StandardScaler().fit_transform(load_iris().data)
    # centres that are not the clusters' means (a model mid-run), and k-means' own
    C = np.random.default_rng(k).normal(size=(k, X.shape[1]))
    C_km = KMeans(k, n_init=3, random_state=0).fit(X).cluster_centers_
    clients = _split(X, 4)
    for model in (C, C_km):
        scores = score_candidates(clients, [model])[0]
        labels = nearest_labels(X, model)
        used = len(np.unique(labels))
        assert scores["clusters"] == used and scores["rows"] == len(X)
        assert scores["sse"] == pytest.approx(sse(X, model), rel=1e-12)
        assert scores["silhouette"] == pytest.approx(simplified_silhouette(X, model),
                                                     rel=1e-12, abs=1e-15)
        if used >= 2:
            assert scores["calinski-harabasz"] == pytest.approx(
                calinski_harabasz_score(X, labels), rel=1e-9)
            assert scores["davies-bouldin"] == pytest.approx(
                davies_bouldin_score(X, labels), rel=1e-9)


def test_client_split_does_not_change_the_scores():
    X, _ = make_blobs(600, centers=4, n_features=3, random_state=1)
    C = KMeans(4, n_init=2, random_state=0).fit(X).cluster_centers_
    one = score_candidates([X], [C])[0]
    many = score_candidates(_split(X, 7), [C])[0]
    for key in ("sse", "silhouette", "calinski-harabasz", "davies-bouldin"):
        assert many[key] == pytest.approx(one[key], rel=1e-10)


def test_a_small_cluster_at_a_client_is_withheld_and_counted():
    X = np.array([[0.0, 0], [0.1, 0], [5, 5]])
    C = np.array([[0.0, 0], [5, 5]])
    m = client_moments(X, [C], threshold=2)[0]
    assert m.counts.tolist() == [2.0, 0.0] and m.withheld == 1.0
    assert np.all(m.sums[1] == 0) and m.sse[1] == 0 and m.silhouette[1] == 0
    # round trip through a message's arrays
    back = CandidateMoments.from_arrays(m.to_arrays())
    assert back.withheld == 1.0 and np.array_equal(back.sums, m.sums)
    scores = candidate_scores(C, m)
    assert scores["withheld-rows"] == 1 and scores["clusters"] == 1
    assert np.isnan(scores["calinski-harabasz"])  # one cluster: undefined, as sklearn


def test_sse_knee_finds_the_elbow_and_breaks_ties_low():
    ks = list(range(2, 11))
    sse_curve = [100, 60, 20, 18, 16, 14, 12, 10, 8]  # elbow at k = 4
    assert ks[sse_knee(ks, sse_curve)] == 4
    assert sse_knee([2, 3], [5.0, 1.0]) == 0
    assert sse_knee(ks, [1.0] * len(ks)) == 0


def test_choose_picks_the_best_eligible_and_names_the_runner_up():
    scores = [
        {"k": 2, "clusters": 2, "sse": 10.0, "silhouette": 0.5, "calinski-harabasz": 10.0,
         "davies-bouldin": 0.9},
        {"k": 3, "clusters": 3, "sse": 4.0, "silhouette": 0.7, "calinski-harabasz": 30.0,
         "davies-bouldin": 0.5},
        # the best silhouette, but an empty cluster: not eligible
        {"k": 4, "clusters": 3, "sse": 3.0, "silhouette": 0.9, "calinski-harabasz": 40.0,
         "davies-bouldin": 0.2},
        {"k": 5, "clusters": 5, "sse": 2.5, "silhouette": 0.6, "calinski-harabasz": 20.0,
         "davies-bouldin": 0.7},
    ]
    chosen, runner, picks = choose(scores, "silhouette")
    assert (chosen, runner) == (1, 3)
    assert picks["calinski-harabasz"] == 1 and picks["davies-bouldin"] == 1
    assert choose(scores, "davies-bouldin")[1] == 3
    with pytest.raises(ValueError, match="unknown rule"):
        choose(scores, "gap")


def test_start_seed_keeps_the_first_start_and_differs_after():
    assert start_seed(7, 0) == 7
    seeds = {start_seed(7, s) for s in range(1, 6)}
    assert len(seeds) == 5 and 7 not in seeds and all(0 <= s < 2**31 for s in seeds)


def test_run_choose_k_finds_well_separated_blobs():
    X, _ = make_blobs(800, centers=5, n_features=4, cluster_std=0.6, random_state=3)
    X = StandardScaler().fit_transform(X)
    clients = _split(X, 5)
    pooled = np.vstack(clients)

    def fit(k, seed):
        return KMeans(k, n_init=1, random_state=seed).fit(pooled).cluster_centers_

    out = run_choose_k(clients, fit, range(2, 9), starts=2, seed=0)
    assert len(out["models"]) == 14 and len(out["kept"]) == 7
    assert len(out["models"][out["chosen"]]) == 5
    for rule in ("silhouette", "calinski-harabasz", "davies-bouldin"):
        assert len(out["models"][out["picks"][rule]]) == 5
    # the kept start of each k has the lower SSE of its two
    for i in out["kept"]:
        k = out["scores"][i]["k"]
        pair = [s["sse"] for s in out["scores"] if s["k"] == k]
        assert out["scores"][i]["sse"] == min(pair)
