"""k='auto' and FKM's starts through Flower (strategies/choose_k.py): every candidate is
its single-k run bit for bit, the scores are the pure loop's, the App writes them."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_blobs
from sklearn.preprocessing import StandardScaler

from flwr_clustering.algorithms.choose_k import run_choose_k, score_candidates, start_seed
from flwr_clustering.algorithms.feca import FeCAOptions
from flwr_clustering.algorithms.fkm import FKMOptions, run_fkm
from flwr_clustering.algorithms.kfed import KFedOptions
from flwr_clustering.app.client_app import app as the_client_app
from flwr_clustering.app.config import merged_config
from flwr_clustering.app.server_app import run_server
from flwr_clustering.clients import FeCAClient, FedKMeansClient, KFedClient
from flwr_clustering.strategies import FeCA, FedKMeans, KFed
from flwr_clustering.strategies.choose_k import search_strategy
from flwr_clustering.testing import InProcessGrid, client_app_for, run_app

N = 4


def _data(seed=2):
    X, y = make_blobs(800, centers=4, n_features=3, random_state=seed)
    X = StandardScaler().fit_transform(X)
    parts = np.array_split(np.random.default_rng(0).permutation(len(X)), N)
    return [(X[p], y[p]) for p in parts]


@pytest.mark.parametrize(("strategy_cls", "client_cls", "options"), [
    (FedKMeans, FedKMeansClient, FKMOptions),
    (KFed, KFedClient, KFedOptions),
    (FeCA, FeCAClient, FeCAOptions),
])
def test_every_candidate_is_its_single_k_run_bit_for_bit(strategy_cls, client_cls, options):
    data = _data()
    app = client_app_for(client_cls, data)
    ks = [2, 3, 4, 5]
    starts = 2 if strategy_cls is FedKMeans else 1
    search = search_strategy(strategy_cls, [options(k=k) for k in ks], starts=starts,
                             min_nodes=N, seed=5, split_check=False)
    search.start(grid=InProcessGrid(app, N, shuffle_seed=3))
    assert len(search.candidates) == len(ks) * starts
    for c in search.candidates:
        single = strategy_cls(options=options(k=c.k), min_nodes=N, seed=c.seed,
                              split_check=False)
        single.start(grid=InProcessGrid(app, N))
        np.testing.assert_array_equal(c.centroids, single.centroids)
        assert len(c.history) == len(single.history)
    # the start seeds: the run's seed first
    assert [c.seed for c in search.candidates[:starts]] == [start_seed(5, s)
                                                           for s in range(starts)]
    # the scores are the pure loop's on the clients' rows, exactly
    clients = [x for x, _ in data]
    pure = score_candidates(clients, [c.centroids for c in search.candidates], 2,
                            [c.k for c in search.candidates])
    kept = {(s["k"], s["seed"]): s for s in search.candidate_scores}
    for c, ref in zip(search.candidates, pure, strict=True):
        ours = kept[(c.k, c.seed)]
        for key in ("sse", "silhouette", "calinski-harabasz", "davies-bouldin", "rows"):
            assert ours[key] == ref[key] or (np.isnan(ours[key]) and np.isnan(ref[key]))
    # the run's model is the chosen candidate's
    assert search.k == search.search["k"] and len(search.centroids) == search.k
    assert search.search["k"] == 4  # four well-separated blobs
    assert search.final_metrics["ari"] > 0.95


def test_fkm_search_equals_the_pure_search_loop():
    data = _data(seed=7)
    clients = [x for x, _ in data]
    search = search_strategy(FedKMeans, [FKMOptions(k=k, max_rounds=6) for k in range(2, 7)],
                             starts=3, min_nodes=N, seed=1, split_check=False)
    search.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N))

    def fit(k, seed):
        return run_fkm(clients, k, seed=seed, max_rounds=6).centroids

    ref = run_choose_k(clients, fit, range(2, 7), starts=3, seed=1, threshold=2)
    np.testing.assert_array_equal(search.centroids, ref["models"][ref["chosen"]])
    assert [s["sse"] for s in search.k_scores] == [ref["scores"][i]["sse"]
                                                  for i in ref["kept"]]


def test_a_client_that_cannot_answer_one_candidate_is_left_out_of_that_one_only():
    data = _data()
    data[0] = (data[0][0][:5], data[0][1][:5])  # k-FED refuses k-local >= its 5 rows
    search = search_strategy(KFed, [KFedOptions(k=k) for k in (2, 3, 5, 6)], min_nodes=3,
                             seed=0, split_check=False)
    search.start(grid=InProcessGrid(client_app_for(KFedClient, data), N))
    by_k = {c.k: c for c in search.candidates}
    assert by_k[3].history[-1]["clients"] == N
    assert by_k[5].history[-1]["clients"] == N - 1
    assert by_k[6].history[-1]["absent"][0]["client"] == 0
    # the chosen model's absent client is the run's (every candidate here lacks it)
    without = search_strategy(KFed, [KFedOptions(k=k) for k in (5, 6)], min_nodes=3,
                              seed=0, split_check=False)
    without.start(grid=InProcessGrid(client_app_for(KFedClient, data), N))
    absent = without.diagnostics["absent"]
    assert list(absent) == ["client 0 (node 100)"] and "k'=5" in absent["client 0 (node 100)"]
    assert any("client 0" in w for w in without.warnings)
    single = KFed(5, min_nodes=3, seed=0, split_check=False)
    single.start(grid=InProcessGrid(client_app_for(KFedClient, data), N))
    np.testing.assert_array_equal(by_k[5].centroids, single.centroids)


def test_secure_search_scores_from_totals_and_matches_the_plain_one():
    data = _data()
    app = client_app_for(FedKMeansClient, data)
    opts = [FKMOptions(k=k, server_update="lloyd", max_rounds=5, tol=-1.0) for k in (3, 4, 5)]
    secure = search_strategy(FedKMeans, opts, min_nodes=N, seed=2, split_check=False,
                             secure_aggregation=True)
    secure.start(grid=InProcessGrid(app, N))
    phases = {e["phase"] for e in secure.ledger}
    assert {"k-moments (secure)", "k-spreads (secure)"} <= phases
    assert all(e["floats"] == 0 for e in secure.ledger if "(secure)" in e["phase"])
    # the same search in the clear, from the same starting centroids' totals: close
    pooled = np.vstack([x for x, _ in data])
    refs = {}
    for c in secure.candidates:
        ref = score_candidates([pooled], [c.centroids])[0]
        s = next(s for s in secure.candidate_scores if s["k"] == c.k)
        assert s["rows"] == len(pooled) and s["withheld-rows"] == 0
        for key in ("sse", "silhouette", "calinski-harabasz", "davies-bouldin"):
            assert s[key] == pytest.approx(ref[key], rel=1e-7)
        refs[c.k] = ref["silhouette"]
    assert secure.k == max(refs, key=refs.get)


def test_the_ledger_counts_the_scores_and_the_candidates():
    data = _data()
    search = search_strategy(FedKMeans, [FKMOptions(k=k) for k in (2, 3)], min_nodes=N,
                             split_check=False)
    search.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N))
    ledger = search.privacy_ledger()
    phases = {e["phase"] for e in ledger["messages"]}
    assert {"k-moments", "k-spreads"} <= phases
    moments = [e for e in search.ledger if e["phase"] == "k-moments"]
    # per client: 2 candidates x (counts k, sums k*d, sse k, silhouette k, withheld 1)
    assert moments[0]["floats"] == sum(k + k * 3 + k + k + 1 for k in (2, 3))
    assert all(e["raw-rows"] == 0 for e in search.ledger)
    # the smallest cluster behind a k-moments reply is its min-count (>= the threshold)
    assert all(e["min-count"] >= 2 for e in moments)


def test_the_app_runs_k_auto_and_writes_the_scores(tmp_path):
    rc = {"algorithm": "fkm", "k": "auto", "k-max": 6, "dataset": "blobs", "centers": 3,
          "n-samples": 600, "cluster-std": 0.5, "out-dir": str(tmp_path / "run")}
    out, _ = run_app(rc, 3)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["k-choice"]["k"] == 3 and out["strategy"].k == 3
    assert [s["k"] for s in result["k_scores"]] == [2, 3, 4, 5, 6]
    table = pd.read_csv(tmp_path / "run" / "k_scores.csv")
    assert table.loc[table["chosen"] == 1, "k"].tolist() == [3]
    assert (tmp_path / "run" / "k_scores.png").stat().st_size > 0
    assert len(out["centroids"]) == 3
    assert result["centralized"]["ari"] > 0.99
    # the last round's server evaluation (pooled rows) is the chosen model's
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert history[-1]["server-metrics"]["ari"] == pytest.approx(
        result["federated-on-pooled"]["ari"])
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert model["k"] == 3
    # report.html states the choice: the sentence, one row per candidate, k_scores.png
    report = (tmp_path / "run" / "report.html").read_text()
    section = report.split("<h2>Choice of k</h2>", 1)[1].split("<h2>", 1)[0]
    rule = result["k-choice"]["rule"]
    assert f"k = 3 chosen by {rule} among k = 2..6" in section
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td><td>(chosen)?</td>", section)
    assert rows == [("2", ""), ("3", "chosen"), ("4", ""), ("5", ""), ("6", "")]
    assert section.count("data:image/png;base64,") == 1 and "k_scores.png" in section
    settings = report.split("<h2>Settings</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<td>k-max</td><td>6</td>" in settings


@pytest.mark.parametrize(("extra", "match"), [
    ({"algorithm": "dgc"}, "fits one k per run.*take feca, fkm, kfed"),
    ({"algorithm": "fkm", "server-update": "lloyd", "dp-epsilon": 1.0, "data-bound": 5.0},
     "differential privacy"),
    ({"algorithm": "fkm", "k-min": 5, "k-max": 3}, "k-min <= k-max"),
    ({"algorithm": "fkm", "resume-from": "/tmp/x"}, "keeps no checkpoint"),
])
def test_k_auto_is_refused_before_round_1_where_it_cannot_run(extra, match):
    with pytest.raises(ValueError, match=match):
        merged_config({"k": "auto", **extra})


def test_n_init_starts_a_fixed_k_search_and_keeps_the_lowest_sse():
    data = _data(seed=11)
    search = search_strategy(FedKMeans, [FKMOptions(k=6, max_rounds=4)], starts=4,
                             min_nodes=N, split_check=False)
    search.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N))
    sse = [s["sse"] for s in search.candidate_scores]
    assert len(sse) == 4 and search.k == 6
    assert search.k_scores[0]["sse"] == min(sse)
    chosen = search.candidates[search.chosen]
    np.testing.assert_array_equal(search.centroids, chosen.centroids)
    cfg = merged_config({"k": 6, "n-init": 3})
    from flwr_clustering.app.config import build_strategy

    assert build_strategy(cfg).n_starts == 3
    assert merged_config({"k": 6})["n-init"] == 0  # one start: no search
    assert not hasattr(build_strategy(merged_config({"k": 6})), "n_starts")


def test_the_estimator_takes_n_clusters_auto():
    from flwr_clustering import FederatedClustering

    X, y = make_blobs(600, centers=3, n_features=2, cluster_std=0.4, random_state=6)
    frame = pd.DataFrame(X * [1.0, 1000.0], columns=["a", "b"])  # raw units
    parts = [frame.iloc[i::3] for i in range(3)]
    est = FederatedClustering("kfed", n_clusters="auto", k_max=6).fit(parts)
    assert est.n_clusters_ == 3 and est.cluster_centers_.shape == (3, 2)
    assert list(est.k_scores_["k"]) == [2, 3, 4, 5, 6]
    assert est.k_scores_.loc[est.k_scores_["chosen"] == 1, "k"].tolist() == [3]
    labels = est.predict(frame)
    assert len(np.unique(labels)) == 3
    fixed = FederatedClustering("kfed", n_clusters=3).fit(parts)
    assert fixed.n_clusters_ == 3 and fixed.k_scores_ is None
    with pytest.raises(ValueError, match="take feca, fkm, kfed"):
        FederatedClustering("ffcm", n_clusters="auto").fit(parts)


def test_a_search_refuses_initial_centroids():
    from flwr.app import Array, ArrayRecord

    search = search_strategy(FedKMeans, [FKMOptions(k=k) for k in (2, 3)], min_nodes=N)
    C0 = ArrayRecord({"centroids": Array(np.zeros((3, 3)))})
    with pytest.raises(ValueError, match="pass no initial_arrays"):
        search.start(grid=InProcessGrid(client_app_for(FedKMeansClient, _data()), N),
                     initial_arrays=C0)


def test_k_auto_on_three_sites_raw_csv_files_under_secure_aggregation(tmp_path):
    """A consortium's files: raw units, columns in another order, an id column."""
    from sklearn.datasets import load_wine

    from flwr_clustering import load_model

    data = load_wine(as_frame=True)
    frame = data.data
    configs = []
    for i in range(3):
        f = frame.iloc[i::3].copy()
        if i == 1:
            f = f[f.columns[::-1]]
        f.insert(0, "patient_id", 2_000_000_000 + np.arange(len(f)) * 7919 + i)
        path = tmp_path / f"site{i}.csv"
        f.to_csv(path, index=False)
        configs.append({"data-path": str(path)})
    rc = {"algorithm": "fkm", "k": "auto", "n-init": 2, "dataset": "local", "min-nodes": 3,
          "index-column": "patient_id", "server-update": "lloyd",
          "secure-aggregation": True, "out-dir": str(tmp_path / "run")}
    run_app(rc, 3, node_configs=configs)
    out = tmp_path / "run"
    result = json.loads((out / "result.json").read_text())
    assert result["k-choice"]["k"] == 3 and result["warnings"] == []
    assert all(s["withheld-rows"] == 0 and s["rows"] == len(frame)
               for s in result["k_scores"])
    model = load_model(out / "model.json")
    assert model.k == 3 and list(model.feature_names) == list(frame.columns)
    secure = {t["phase"] for t in json.loads((out / "privacy.json").read_text())[
        "secure-totals"]}
    assert {"search", "k-moments", "k-spreads"} <= secure
    # the chosen clustering is wine's: the model labels the pooled rows as the classes
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(data.target, model.predict(frame)) > 0.85


def test_search_k_is_k_auto_in_your_own_server_app():
    from flwr_clustering.strategies.choose_k import search_k

    data = _data()
    app = client_app_for(FedKMeansClient, data)
    ours = search_k(FedKMeans, range(2, 6), starts=2, max_rounds=5, min_nodes=N, seed=4,
                    split_check=False)
    ours.start(grid=InProcessGrid(app, N))
    ref = search_strategy(FedKMeans, [FKMOptions(k=k, max_rounds=5) for k in range(2, 6)],
                          starts=2, min_nodes=N, seed=4, split_check=False)
    ref.start(grid=InProcessGrid(app, N))
    np.testing.assert_array_equal(ours.centroids, ref.centroids)
    assert ours.search == ref.search
    with pytest.raises(ValueError, match="search_k"):
        FedKMeans("auto")


def test_refine_rounds_refine_every_candidate_as_the_pure_loop():
    from flwr_clustering.algorithms.kfed import run_kfed

    data = _data(seed=9)
    clients = [x for x, _ in data]
    search = search_strategy(KFed, [KFedOptions(k=k) for k in range(2, 7)], min_nodes=N,
                             seed=3, split_check=False, refine_rounds=5)
    search.start(grid=InProcessGrid(client_app_for(KFedClient, data), N))

    def fit(k, seed):
        return run_kfed(clients, k, seed=seed)

    ref = run_choose_k(clients, fit, range(2, 7), seed=3, threshold=2, refine_rounds=5)
    assert search.search["lloyd-rounds"] >= 1
    for c, model in zip(search.candidates, ref["models"], strict=True):
        np.testing.assert_array_equal(c.centroids, model)
    assert [s["sse"] for s in search.k_scores] == [ref["scores"][i]["sse"]
                                                  for i in ref["kept"]]


def test_a_failed_search_keeps_every_finished_rounds_candidates_on_disk(tmp_path):
    from flwr.app import MessageType

    from flwr_clustering.app.checkpoint import load_checkpoint

    class Crashing(InProcessGrid):
        trains = 0

        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages and messages[0].metadata.message_type == MessageType.TRAIN:
                self.trains += 1
                if self.trains == 3:
                    raise RuntimeError("SuperLink gone")
            return super().send_and_receive(messages, timeout=timeout)

    rc = {"algorithm": "fkm", "k": "auto", "k-max": 4, "dataset": "blobs", "centers": 3,
          "n-samples": 300, "out-dir": str(tmp_path / "run"), "tol": -1.0}
    with pytest.raises(RuntimeError, match="SuperLink gone"):
        run_server(Crashing(the_client_app, 3, run_config=rc), rc)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "failed" and result["last-round"] == 2
    state = load_checkpoint(tmp_path / "run")["state"]
    assert [c["k"] for c in state["candidates"]] == [2, 3, 4]
    for c in state["candidates"]:
        assert c["centroids"].shape == (c["k"], 2) and len(c["history"]) == 2


@pytest.mark.parametrize("lie", ["small-cluster", "shape", "nan"])
def test_a_client_lying_in_the_scores_is_dropped_with_a_reason(lie, caplog):
    data = _data()
    from flwr_clustering.clients import candidates as cand

    honest = cand.score_arrays

    def lying(client, phase, params, config):
        out = honest(client, phase, params, config)
        if client.client_id == 0 and phase == "k-moments":
            out = [np.array(a, dtype=np.float64, copy=True) for a in out]
            if lie == "small-cluster":
                out[0][0] = 1.0  # a cluster of one row: its sum would be that row
            elif lie == "shape":
                out[1] = out[1][:, :1]
            else:
                out[2][0] = np.nan
        return out

    import flwr_clustering.clients.phases as phases

    phases.score_arrays, saved = lying, phases.score_arrays
    try:
        search = search_strategy(FedKMeans, [FKMOptions(k=k) for k in (2, 3)],
                                 min_nodes=N - 1, split_check=False)
        with caplog.at_level("WARNING"):
            search.start(grid=InProcessGrid(client_app_for(FedKMeansClient, data), N))
    finally:
        phases.score_arrays = saved
    assert "dropping reply of client 0" in caplog.text and "k-moments" in caplog.text
    # the scores hold the three honest clients' rows only, and the run says so
    assert all(s["rows"] < 800 for s in search.candidate_scores)
    assert any("client 0" in key for key in search.diagnostics["absent"])


def test_a_search_s_candidates_keep_its_secure_aggregation_arrangement():
    from flwr_clustering.strategies import FedKMeans
    from flwr_clustering.strategies.choose_k import search_k

    search = search_k(FedKMeans, range(2, 4), server_update="lloyd",
                      secure_aggregation=True, secagg_keys="exchange")
    assert search.secagg_keys == "exchange"
    assert {c.secagg_keys for c in search.candidates} == {"exchange"}
