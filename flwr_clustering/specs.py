"""The built-in algorithms, declared as data: one :class:`AlgorithmSpec` each.

Each declaration names its strategy and its client by dotted path (imported on first
read of ``spec.strategy`` / ``spec.client``), its options dataclass and pure loop (layer
1, no Flower), its message protocol (the docs' phases tables) and what it can do
(:class:`~flwr_clustering.algorithm_specs.Capabilities`). This module imports no strategy
and no client: :mod:`flwr_clustering.registry` registers :data:`BUILTINS` and lists
algorithms without loading the Flower layer. ``tests/test_algorithm_specs.py`` checks
that every path resolves and that the capabilities agree with the strategy classes.

Adding an algorithm: its declaration here, and its name in :data:`BUILTINS`.
"""

from __future__ import annotations

from .algorithm_specs import (
    EVALUATION_METRICS,
    EVALUATION_STATS,
    AlgorithmSpec,
    Capabilities,
    Phase,
)
from .algorithms.deepfeca import DeepFeCAOptions, run_deepfeca
from .algorithms.dgc import DGCOptions, run_dgc
from .algorithms.feca import FeCAOptions, run_feca
from .algorithms.ffcm import FFCMOptions, run_ffcm
from .algorithms.fkm import FKMOptions, run_fkm
from .algorithms.kdc import KDCOptions, run_kdc
from .algorithms.kfed import KFedOptions, run_kfed
from .algorithms.masked_federated import MaskedFederatedOptions, run_masked_federated
from .algorithms.masked_oneshot import MaskedOneShotOptions, run_masked_oneshot
from .algorithms.mavg import MAvgOptions, run_mavg

__all__ = ["BUILTINS"]

FKM = AlgorithmSpec(
    name="fkm", strategy="flwr_clustering.strategies.fkm:FedKMeans",
    client="flwr_clustering.clients.fkm:FedKMeansClient", options=FKMOptions, loop=run_fkm,
    summary="FKM, iterative federated k-means (Garst & Reinders 2023)",
    guide="algorithms/fkm.md",
    can=Capabilities(resume=True, choose_k=True, starts=True, secure={"server_update": "lloyd"},
                     secure_phases={"init": None, "update": "secure-update",
                                    "partial-update": "secure-partial-update"},
                     dp=True, refine=True, legacy=True),
    protocol=(
        Phase("init", "train", "round 1 (when no initial centroids are given)",
              sends=("nothing",),
              reply_arrays=("`means` (k_i, d) float64 (`dtype` float32: float32): local cluster "
                            "means, k_i <= min(n, k)",
                            "`counts` (k_i,) int64: rows behind each mean, each >= "
                            "privacy-threshold",
                            "`index` (k_i,) int64: all -1"),
              notes="The client seeds min(n, k) local clusters by k-means++; with `init` "
                    "\"private\" it runs max(1, local-iterations) Lloyd steps before the "
                    "upload, with \"paper\" it uploads the seeds themselves, **which are raw "
                    "rows**. Clusters of fewer than privacy-threshold rows are left out."),
        Phase("update", "train", "every later round (also round 1, given initial centroids)",
              sends=("`centroids` (k, d) float64 (`dtype` float32: float32): the global "
                     "centroids",),
              reply_arrays=("`means` (k_i, d) float64 (`dtype` float32: float32): means after "
                            "local-iterations Lloyd "
                            "steps from the global centroids that attract a local row, "
                            "k_i <= k",
                            "`counts` (k_i,) int64: rows behind each mean, each >= "
                            "privacy-threshold",
                            "`index` (k_i,) int64: the global centroid (0..k-1) each mean "
                            "grew from"),
              reply_metrics=("with `evaluate` true:", *EVALUATION_METRICS),
              reply_stats=("with `evaluate` true:", *EVALUATION_STATS),
              notes="With `evaluate` true the reply also scores the received centroids "
                    "(before the local step), so the rounds need no evaluation message."),
        Phase("partial-moments", "query", "round 0, with missing='partial' and no given "
              "centroids",
              sends=("none",),
              reply_arrays=("`count` (d,) float64: per feature, the rows that observe it",
                            "`sum-x` (d,) float64: the sum of its observed values",
                            "`sum-sq` (d,) float64: the sum of their squares (all three zero "
                            "for a feature observed in fewer than privacy-threshold rows)"),
              notes="Partial FKM's start (no row sent): the server adds the replies in "
                    "client-id order and draws k centroids uniformly in each feature's mean "
                    "+- 2 std of its observed values."),
        Phase("partial-update", "train", "every round, with missing='partial' "
              "(server-update 'lloyd')",
              sends=("`centroids` (k, d) float64 (`dtype` float32: float32): the global "
                     "centroids",),
              reply_arrays=("`means` (k_i, d) float64 (`dtype` float32: float32): per local "
                            "cluster, the mean of the observed values of each feature after "
                            "local-iterations partial-distance Lloyd steps (0 where the count "
                            "is 0)",
                            "`counts` (k_i,) int64: rows of each local cluster, each >= "
                            "privacy-threshold",
                            "`index` (k_i,) int64: the global centroid (0..k-1) each grew from",
                            "`feature-counts` (k_i, d) int64: the observed values behind each "
                            "mean, 0 or >= privacy-threshold, at most the cluster's rows"),
              reply_metrics=("with `evaluate` true:", *EVALUATION_METRICS),
              reply_stats=("with `evaluate` true: `sse`, `silhouette-sum`, `cluster-counts`, "
                           "`contingency` of the rescaled partial distances (no residual or "
                           "moment sums)",),
              notes="A row's squared distance to a centre is the sum over its observed "
                    "features, times d / (features observed); its nearest centre is the "
                    "model's masked-nearest-centroid labelling. The server sets each "
                    "coordinate to the count-weighted mean of the clients' means "
                    "(`fkm_partial.partial_server_step`); a coordinate nobody sent stays."),
        Phase("secure-partial-moments", "train", "round 0, with missing='partial', "
              "secure-aggregation and no given centroids",
              sends=("none",),
              reply_arrays=("as `partial-moments`",),
              notes="Through secure aggregation as `secure-moments`: the server learns the "
                    "federation's per-feature totals only, and draws the start from them."),
        Phase("secure-partial-update", "train", "every round, with missing='partial' and "
              "secure-aggregation",
              sends=("`centroids` (k, d) float64: the global centroids",),
              reply_arrays=("`sums` (k, d) float64: per global centroid and feature, the sum "
                            "of the observed values of the local cluster that grew from it "
                            "(the `partial-update` means times feature counts; zero where "
                            "withheld under privacy-threshold)",
                            "`counts` (k, d) float64: their counts"),
              notes="Through SecAgg+ as `secure-update`: the server receives the totals "
                    "only and sets each coordinate to total sum / total count where that "
                    "is > 0. The evaluation is the common `secure-evaluate`, without row "
                    "moments or residual sums."),
        Phase("data-source (DP, secure)", "query", "round 0, with dp-epsilon > 0 or "
              "secure-aggregation, when the run has not asked already (a ServerApp of "
              "one's own without the App's check or a scaling; or fraction < 1)",
              sends=("none",),
              reply_arrays=("none",),
              notes="The library's data-source query (below): its `num-features` and the "
                    "number of replies set the initial centroids' dimension and the "
                    "clients' share of the noise. The App's check (or the features step's "
                    "query) has these replies already: the start collects them again, "
                    "without a message, so a run of the App asks once. With fraction < 1 "
                    "the start's query samples its nodes from the sampling generator, so "
                    "it is still sent."),
        Phase("dp-moments", "query", "round 0, with dp-epsilon > 0 and dp-init 'moments' "
              "(no centroids given)",
              sends=("none",),
              config=("`dp-clients` int: m, the clients the noise is shared by",),
              reply_arrays=("`count` (1,) float64: the client's rows, plus noise",
                            "`sum` (d,) float64: the sum of its rows clipped to data-bound, "
                            "plus noise",
                            "`moments` (d, d) float64: the sum of their outer products "
                            "x x^T, plus symmetric noise (sensitivity sqrt(1 + B^2 + B^4))"),
              reply_metrics=("`dp-sigma` float: the noise standard deviation this client "
                             "added",),
              notes="The start's first mechanism (paid from the budget, dp-init-share / 2). "
                    "The server takes the top min(k, d) eigenvectors U of the noisy "
                    "covariance and draws 8 k candidate centres in that subspace from the "
                    "noisy mean and covariance. With secure-aggregation through secure "
                    "aggregation."),
        Phase("dp-candidates", "query", "round 0, after `dp-moments`",
              sends=("`subspace` (d, p) float64: U, p = min(k, d)",
                     "`candidates` (M, p) float64: candidate centres in the coordinates "
                     "U^T x"),
              config=("`dp-clients` int: m, the clients the noise is shared by",),
              reply_arrays=("`sums` (M, p) float64: per candidate, the sum of the projected "
                            "clipped rows U^T x nearest to it, plus noise",
                            "`counts` (M,) float64: their counts, plus noise"),
              reply_metrics=("`dp-sigma` float: the noise standard deviation this client "
                             "added",),
              notes="The start's second mechanism (dp-init-share / 2 of the budget). The "
                    "server keeps the candidates whose noisy count is at least twice the "
                    "noise, clusters their means by count-weighted k-means into k centres "
                    "and lifts them to d dimensions: the round-1 centroids."),
        Phase("dp-update", "train", "every round, with dp-epsilon > 0 (differential "
              "privacy; server-update 'lloyd')",
              sends=("`centroids` (k, d) float64: the global centroids (round 1: from "
                     "`dp-candidates`, or with dp-init 'random' drawn uniformly in the data "
                     "ball)",),
              config=("`dp-round` int: the round (the client's noise generator)",
                      "`dp-clients` int: m, the clients the noise is shared by"),
              reply_arrays=("`sums` (k, d) float64: per global centroid, the sum of the "
                            "rows nearest to it, clipped to data-bound, plus Gaussian "
                            "noise (distributed placement)",
                            "`counts` (k,) float64: their counts, plus noise"),
              reply_metrics=("`dp-sigma` float: the noise standard deviation this client "
                             "added",),
              notes="No evaluation statistics (they would be exact). The server sums the "
                    "replies in client-id order, adds the noise itself with placement "
                    "'central', and divides. With secure-aggregation the reply goes through "
                    "SecAgg+ (below) and the server sees only the total noise."),
        Phase("secure-moments", "train", "round 0, with secure-aggregation and no given "
              "centroids (not with dp-epsilon)",
              sends=("none",),
              reply_arrays=("`rows` (1,) float64: the client's row count",
                            "`sum-x` (d,) float64: the sum of its rows",
                            "`sum-sq` (d,) float64: the sum of their squares (all three "
                            "zero below privacy-threshold rows)"),
              notes="Sent through secure aggregation. With `secagg-keys='run'` (default): "
                    "the run's key setup (`keys`, `shares` stages) once, then each secure "
                    "exchange is an `upload` TRAIN message with the content above (the "
                    "client's reply arrays written in fixed point, 2**-32, split into "
                    "base-B digits, masked modulo 2**64; the server receives only the "
                    "`masked` uint64 array and its shapes) and an `unmask` message (the "
                    "client's self-mask seed of the exchange), plus `reveal`/`recover` "
                    "when a client drops (`flwr_clustering.secure.session`). With "
                    "`secagg-keys='exchange'`: Flower's SecAgg+, four TRAIN messages (setup, "
                    "share-keys, collect-masked-vectors, unmask; Flower's `secaggplus_mod` "
                    "answers them inside `flwr_clustering.secure.secure_aggregation_mod`), "
                    "the content above in the third, the server receiving "
                    "`secaggplus_configs` and an empty legacy fit result. Either way the "
                    "server learns the "
                    "totals, from which it draws the starting centroids."),
        Phase("secure-update", "train", "every round, with secure-aggregation "
              "(server-update 'lloyd', no dp-epsilon)",
              sends=("`centroids` (k, d) float64: the global centroids",),
              reply_arrays=("`sums` (k, d) float64: per global centroid, the sum of the rows "
                            "of the local cluster that grew from it (the `update` phase's "
                            "means times counts; zero where withheld under privacy-threshold)",
                            "`counts` (k,) float64: their counts"),
              notes="Through SecAgg+ as `secure-moments`: the server receives the "
                    "federation's totals only (counts exact, sums within n 2**-33) and sets "
                    "each centroid to total sum / total count. The evaluation is the "
                    "common `secure-evaluate`."),
    ))

KFED = AlgorithmSpec(
    name="kfed", strategy="flwr_clustering.strategies.kfed:KFed",
    client="flwr_clustering.clients.kfed:KFedClient", options=KFedOptions, loop=run_kfed,
    summary="k-FED, one-shot (Dennis, Li & Smith 2021)",
    guide="algorithms/fkm.md",
    can=Capabilities(choose_k=True, refine=True, legacy=True),
    protocol=(
        Phase("kfed", "train", "round 1 (one shot)",
              sends=("nothing",),
              reply_arrays=("`centres` (k_i, d) float64: Awasthi-Sheffet local centres, "
                            "k_i <= k-local",
                            "`counts` (k_i,) int64: rows behind each centre, each >= "
                            "privacy-threshold",
                            "`index` (k_i,) int64: all -1"),
              notes="`k-local` arrives resolved (0 in the run config means k). A client with "
                    "at most k-local rows refuses with an error reply (k-FED would upload raw "
                    "rows). `evaluate` is ignored."),
    ))

FECA = AlgorithmSpec(
    name="feca", strategy="flwr_clustering.strategies.feca:FeCA",
    client="flwr_clustering.clients.feca:FeCAClient", options=FeCAOptions, loop=run_feca,
    summary="FeCA, one-shot centroid aggregation (Xu et al. 2024)",
    guide="algorithms/feca.md",
    can=Capabilities(choose_k=True, refine=True, legacy=True),
    protocol=(
        Phase("feca", "train", "round 1 (one shot)",
              sends=("nothing",),
              reply_arrays=("`centroids` (k_m, d) float64: the local k-means centroids left "
                            "after the elimination and the privacy filter, k_m <= k-local",
                            "`radii` (k_m,) float64: the radius of each centroid (Algorithm 4, "
                            "or 3 with `radius` \"theoretical\")"),
              reply_metrics=("`removed` int: centroids the elimination dropped",
                             "`withheld` int: kept centroids of fewer than privacy-threshold "
                             "rows (not sent)"),
              notes="No counts and no labels leave the client, so the server cannot check "
                    "the privacy threshold. A client with fewer than k-local rows clusters "
                    "into n. `evaluate` is ignored."),
    ))

MAVG = AlgorithmSpec(
    name="mavg", strategy="flwr_clustering.strategies.feca:MAvg",
    client="flwr_clustering.clients.feca:MAvgClient", options=MAvgOptions, loop=run_mavg,
    summary="M-Avg, Hungarian match averaging (baseline of Xu et al. 2024)",
    guide="algorithms/feca.md",
    can=Capabilities(refine=True, legacy=True),
    protocol=(
        Phase("mavg", "train", "round 1 (one shot)",
              sends=("nothing",),
              reply_arrays=("`centroids` (k, d) float64: the client's single-start k-means "
                            "centroids, exactly k",),
              notes="A client with fewer than k rows, or whose k-means leaves a cluster of "
                    "fewer than privacy-threshold rows, refuses with an error reply. "
                    "`evaluate` is ignored."),
    ))

FFCM = AlgorithmSpec(
    name="ffcm", strategy="flwr_clustering.strategies.ffcm:FFCM",
    client="flwr_clustering.clients.ffcm:FFCMClient", options=FFCMOptions, loop=run_ffcm,
    summary="FFCM, federated fuzzy c-means (Stallmann & Wilbik 2022; baseline of Xu et al.)",
    guide="algorithms/feca.md",
    can=Capabilities(resume=True, secure={"version": 1}, secure_phases={"ffcm": "secure-ffcm"},
                     refine=True, legacy=True),
    protocol=(
        Phase("moments", "query", "round 0 (unless initial centroids are given and the "
              "fuzzifier is fixed)",
              sends=("nothing",),
              reply_arrays=("`n` (1,) int64: local rows",
                            "`sum` (d,) float64: per-feature sum",
                            "`sumsq` (d,) float64: per-feature sum of squares"),
              notes="The server draws the k initial centres uniformly in the box mean ± "
                    "init-width · std of the pooled data and, with fuzzifier 0, chooses the "
                    "fuzzifier from d and the pooled row count; it rejects the moments of "
                    "fewer than privacy-threshold rows."),
        Phase("ffcm", "train", "every round",
              sends=("`centres` (k, d) float64: the global centres",),
              reply_arrays=("`centres` (k, d) float64: local fuzzy c-means from the global "
                            "centres (fuzzifier, local-max-iter, local-tol, criterion)",
                            "`supports` (k,) float64: s_j = sum over the rows of u_xj"),
              reply_metrics=("with `evaluate` true:", *EVALUATION_METRICS),
              reply_stats=("with `evaluate` true:", *EVALUATION_STATS),
              notes="With `evaluate` true the reply also scores the received centres. A "
                    "client with fewer than privacy-threshold rows refuses every phase "
                    "(error reply). With secure-aggregation the `moments` reply goes "
                    "through SecAgg+ (a TRAIN exchange, as `secure-ffcm`): the server learns "
                    "the pooled triple only."),
        Phase("secure-ffcm", "train", "every round, with secure-aggregation (ffcm-version 1)",
              sends=("`centres` (k, d) float64: the global centres",),
              reply_arrays=("`weighted` (k, d) float64: s_j times the local centre j",
                            "`supports` (k,) float64: s_j"),
              notes="Through secure aggregation (see FKM's `secure-update`): the "
                    "server receives the federation's sums only and sets centre j to "
                    "sum s_j V_j / sum s_j (the previous centre where the sum is 0), "
                    "version 1's step. The evaluation is the common `secure-evaluate`."),
    ))

MASKED_FEDERATED = AlgorithmSpec(
    name="masked-federated", strategy="flwr_clustering.strategies.masked:MaskedFederated",
    client="flwr_clustering.clients.masked:MaskedFederatedClient",
    options=MaskedFederatedOptions, loop=run_masked_federated,
    summary="masked-feature clustering, Algorithm 1 (Maritan & Schenato 2025)",
    guide="algorithms/masked.md",
    can=Capabilities(labels="masked-nearest-centroid", resume=True, secure={},
                     secure_note="its federated rounds; round 1, the grouping of the "
                                 "local clusters, runs in the clear", refine=False, legacy=True),
    protocol=(
        Phase("init", "train", "round 1",
              sends=("nothing",),
              reply_arrays=("`sums` (K_i, d) float64: per cluster and feature, the sum of the "
                            "observed values (0 where unobserved)",
                            "`counts` (K_i, d) float64: per cluster and feature, the rows "
                            "that observe it"),
              notes="K_i is k-local, or (k-local 0) chosen <= k by silhouette; clusters of "
                    "fewer than max(privacy-threshold, 1) rows are left out. The client's "
                    "rows carry NaN on the features it does not observe; its mask shows in "
                    "the counts. `evaluate` is ignored."),
        Phase("update", "train", "rounds 2 .. federated-rounds + 1 (`tol` >= 0 may stop "
              "earlier)",
              sends=("`centroids` (k, d) float64: the global centroids (NaN where a centroid "
                     "has no value)",),
              reply_arrays=("`sums` (k, d) float64: the client's k warm-started local "
                            "clusters aligned to the global centroids",
                            "`counts` (k, d) float64: rows observing each feature"),
              reply_metrics=("with `evaluate` true, on the observed features:",
                             *EVALUATION_METRICS),
              reply_stats=("with `evaluate` true:", *EVALUATION_STATS),
              notes="Every phase other than `init` runs this step. `local-algorithm` "
                    "\"kmedoids\" uploads medoids, **which are real rows**. With "
                    "secure-aggregation this reply goes through secure aggregation "
                    "(see FKM's `secure-update`) and the server learns only the "
                    "federation's sums and counts; `init` (round 1) still runs in the clear, "
                    "and the evaluation is the common `secure-evaluate`."),
    ))

MASKED_ONESHOT = AlgorithmSpec(
    name="masked-oneshot", strategy="flwr_clustering.strategies.masked:MaskedOneShot",
    client="flwr_clustering.clients.masked:MaskedOneShotClient",
    options=MaskedOneShotOptions, loop=run_masked_oneshot,
    summary="masked-feature clustering, Algorithm 2, one-shot Gaussian proxies "
            "(Maritan & Schenato 2025)",
    guide="algorithms/masked.md",
    can=Capabilities(labels="masked-nearest-centroid", refine=False, legacy=True),
    protocol=(
        Phase("oneshot", "train", "round 1 (one shot)",
              sends=("nothing",),
              reply_arrays=("`mask` (d,) uint8: the features this client observes (d_i of "
                            "them)",
                            "`means` (K_i, d_i) float64: a Gaussian per local cluster, on the "
                            "observed features",
                            "`covariances` (K_i, d_i, d_i) float64",
                            "`counts` (K_i,) int64: rows per cluster, each >= "
                            "max(privacy-threshold, 1)"),
              notes="K_i is k-local (over-clustering allowed), or (k-local 0) chosen <= "
                    "k-max by silhouette (k-max 0 means k). The client does not read the "
                    "phase. `evaluate` is ignored."),
    ))

DGC = AlgorithmSpec(
    name="dgc", strategy="flwr_clustering.strategies.dgc:DGC",
    client="flwr_clustering.clients.dgc:DGCClient", options=DGCOptions, loop=run_dgc,
    summary="DGC-rho, decentralized gradient clustering over a graph (Armacki et al. 2025)",
    guide="algorithms/dgc.md",
    can=Capabilities(resume=True, needs_every_client=True, refine=False, legacy=False),
    protocol=(
        Phase("init", "train", "round 1",
              sends=("nothing",),
              config=("no `evaluate` key",),
              reply_arrays=("`centres` (k, d) float64: the node's initial centres",),
              notes="Client ids must be 0..m-1 (the graph index) and every node must answer "
                    "every round. `node-init` \"kmeans\" starts a local cluster of fewer "
                    "than privacy-threshold rows at the node's mean; \"random\" (the "
                    "paper's) sends **raw rows**."),
        Phase("step", "train", "rounds 2 .. 1 + iterations · inner-steps (`dgc-tol` >= 0 "
              "may stop earlier)",
              sends=("`x_i` (k, d) float64: this node's centres",
                     "`neighbour_sum` (k, d) float64: the sum of its neighbours' centres",
                     "`anchor` (k, d) float64: the centres at the iteration's start; left "
                     "out at an iteration's first step (it equals `x_i` then)"),
              config=("`degree` float: the node's degree in the graph",
                      "`alpha` float: the step (replaces the option's value; the server "
                      "computes it when the option is 0)",
                      "`evaluate` false"),
              reply_arrays=("`centres` (k, d) float64: the node's new centres",),
              reply_metrics=("`local-cost` float: J_i(x_i, C_i), clusters from the anchor",),
              notes="Each node gets its own message (per-node content); the server relays, "
                    "it never averages into the iterate."),
        Phase("evaluate", "evaluate", "once, after the last round",
              sends=("`centroids` (k, d) float64: the network mean",
                     "`node-centres` (s, k, d) float64: the scored users' centres, every "
                     "node's when m <= `user-eval-nodes` (s = m), else that many evenly "
                     "spaced users'",
                     "`own` (k, d) float64: this node's own centres (its final labels)"),
              config=("as the common evaluation message",),
              reply_metrics=("`loss` float: sse / n of the network mean", *EVALUATION_METRICS),
              reply_stats=(*EVALUATION_STATS,
                           "`model-sse` (s,) float64: SSE of each scored user's centres "
                           "on the local rows",
                           "`model-contingency` (s, k, n_classes) int64: each scored "
                           "user's clusters x true classes (only with labels)"),
              notes="The common statistics score the network mean; summed, the per-user "
                    "arrays score the scored users' own centres on the joint data. One "
                    "message per node (its own centres)."),
    ))

KDC = AlgorithmSpec(
    name="kdc", strategy="flwr_clustering.strategies.kdc:KDC",
    client="flwr_clustering.clients.kdc:KDCClient", options=KDCOptions, loop=run_kdc,
    summary="KDC, distributional-kernel clustering with kBCC (Zhang et al. 2024)",
    guide="algorithms/kdc.md",
    can=Capabilities(labels="kernel", refine=False, legacy=False),
    protocol=(
        Phase("stats", "query", "round 0",
              sends=("nothing",),
              reply_arrays=("`n` (1,) int64: local rows",
                            "`min` (d,) float64: per-feature minimum (only with normalize)",
                            "`max` (d,) float64: per-feature maximum (only with normalize)"),
              notes="The server allocates the sample s = sample-size (capped at the total "
                    "rows) to the sites in proportion to their sizes."),
        Phase("sample", "train", "round 1",
              sends=("`min` (d,) float64: the global minimum (only with normalize)",
                     "`max` (d,) float64: the global maximum (only with normalize)"),
              config=("`size` int: this site's share s_l of the sample (each site its own "
                      "message)", "no `evaluate` key"),
              reply_arrays=("`sample` (s_l, d) float64: s_l rows drawn uniformly without "
                            "replacement, scaled to [0, 1]",),
              reply_metrics=("`sample-rows` int: s_l", "`raw-rows` int: s_l, the raw rows sent"),
              notes="**Raw rows leave the site**: KDC needs them. The server pools the "
                    "samples in client-id order and builds the Isolation Kernel and the k "
                    "initial clusters; a sample of the wrong length is dropped."),
        Phase("assign", "train", "round 2",
              sends=("`maps` (k, t·psi) float64: the kernel mean map of each cluster",
                     "`centres` (t, psi, d) float64: the Isolation Kernel's centres (scaled "
                     "rows of the pooled sample)",
                     "`radii` (t, psi) float64: only with `ik-variant` \"inne\"",
                     "`min` (d,) float64, `max` (d,) float64: the global scaling (only with "
                     "normalize)"),
              config=("no `evaluate` key",),
              reply_arrays=("`counts` (k,) int64: local rows per cluster",),
              reply_metrics=("`ari-local` float: only with labels",),
              reply_stats=("`contingency` (k, n_classes) int64: only with labels",
                           "`labels` (n,) int64: the cluster of every row, only with "
                           "return-labels"),
              notes="The site labels every row by the most similar cluster distribution and "
                    "keeps the labels (`KDCClient.labels`); the reply carries no SSE."),
        Phase("evaluate", "evaluate", "never",
              notes="KDC sends no evaluation message: the assign round returns the "
                    "statistics (`KDCClient.evaluate` raises)."),
    ))

DEEPFECA = AlgorithmSpec(
    name="deepfeca", strategy="flwr_clustering.strategies.deepfeca:DeepFeCA",
    client="flwr_clustering.clients.deepfeca:DeepFeCAClient", options=DeepFeCAOptions,
    loop=run_deepfeca,
    # the App's side run (simulation only): linear probes, centralized training
    pooled_report="flwr_clustering.app.reports:deepfeca_linear_probe",
    summary="DeepFeCA, FeCA pseudo-labels + FedAvg representation learning (Xu et al. 2024)",
    guide="algorithms/deepfeca.md",
    can=Capabilities(labels="network", resume=True, refine=False, legacy=False),
    protocol=(
        Phase("describe", "query", "round 0",
              sends=("nothing",),
              config=("only `phase` and `seed`",),
              reply_arrays=("`n_features` (1,) int64: the length of the client's rows",),
              notes="The server builds the network from the feature count, with seeded "
                    "initial weights."),
        Phase("cluster", "query", "every round, before its train message",
              sends=("the network's weights: the arrays of its `state_dict` in order, dtypes "
                     "and shapes unchanged",),
              config=("`server-round` int: the round",
                      "`network`, `input-shape`, `proj-dim`: the resolved network spec "
                      "(replace the options' values; `input-shape` like \"1x8x8\")"),
              reply_arrays=("the labeller's upload computed on the client's features "
                            "(proj-dim wide): `pseudo-labels` \"feca\": `[centroids (k_m, "
                            "proj-dim), radii (k_m,)]`; \"mavg\": `[centroids (k, "
                            "proj-dim)]`; \"kfed\": `[centres (k_i, proj-dim), counts "
                            "(k_i,), index (k_i,)]`",),
              reply_metrics=("`seconds` float: client time",),
              notes="Statistics of features, never a row. The exchange accepts any number "
                    "of valid uploads (at least one): an M-Avg or k-FED client with too few "
                    "rows refuses here and only trains."),
        Phase("train", "train", "every round",
              sends=("the network's weights (as in `cluster`)",
                     "`C*` (k_out, proj-dim) float64: the aggregated centroids, last"),
              config=("`server-round` and the network spec, as in `cluster`",
                      "no `evaluate` key"),
              reply_arrays=("the trained weights, same dtypes and shapes as sent",),
              reply_metrics=("`loss` float: mean training loss over the steps",
                             "`steps` int: SGD steps",
                             "`clusters-used` int: distinct pseudo-labels on this client",
                             "`seconds` float: client time"),
              notes="The client labels its rows by the nearest centroid of C* in feature "
                    "space and trains local-epochs epochs; the server averages the weights "
                    "by `num-examples` (FedAvg)."),
        Phase("evaluate", "evaluate", "once, after the last round",
              sends=("the network's weights", "`C*` (k_out, proj-dim) float64, last"),
              config=("`phase` \"evaluate\", `seed`, `server-round`, the options and the "
                      "network spec, as in `train`",
                      "`n-classes` int, optional: as the common evaluation message"),
              reply_metrics=("`loss` float: sse / n", *EVALUATION_METRICS),
              reply_stats=EVALUATION_STATS,
              notes="The statistics score C* on the client's features under the global "
                    "network (k is k_out)."),
    ))

#: The built-in algorithms, in the order they are registered.
BUILTINS: tuple[AlgorithmSpec, ...] = (FKM, KFED, FECA, MAVG, FFCM, MASKED_FEDERATED,
                                       MASKED_ONESHOT, DGC, KDC, DEEPFECA)
