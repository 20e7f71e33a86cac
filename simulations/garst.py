"""Experiments of Garst & Reinders, "Federated K-means clustering" (Sec. 3).

Registered in :data:`~simulations.framework.EXPERIMENTS` on import:

``garst-fig1b``
    Fig. 1(b), spec §5.1: base grid (ppc 50, noise 1), 5 clients, beta split, beta in
    {0.1, 1, 10}: central k-means, FKM, FKM as the paper's code ran it, k-FED untuned
    (``K_l = K_g = 16``).
``garst-noise``
    Figs 3(a-c) and 6, spec §5.2 and §5.3: the ppc = 50 rows of the noise sweep, beta in
    {0.1, 1, 10} x noise in {1.0, ..., 1.5}: central, FKM, FKM as the paper's code ran it,
    k-FED untuned; plus FKM's mean ARI by round (Fig. 3(d-f)).
``garst-clusterwise``
    Fig. 4(b), spec §4.2 and §5.4: the cluster-wise split (16/1/3/10/7 clusters per client):
    central, FKM with weighted and with unweighted server seeding, FKM as the paper's code
    ran it, k-FED with ``K_l = 14``; the median and the fraction of runs below 0.9 as well,
    since the paper's FKM result is bimodal.

Scoring (spec §4.4): FKM and k-FED get the sample-weighted mean of the per-client ARIs of
each client's nearest-global-centroid labels (``"ari-client-weighted"`` of
:func:`~flwr_clustering.evaluation.aggregate_evaluation_stats`); central k-means gets
``KMeans(16, n_init=10, random_state=seed)``'s ARI on the pooled data (``"ari"``). Run ``r``
uses seed ``seed0 + r`` for every method.

Default protocol: the paper's, 200 runs per setting and R = 100 FKM rounds.

- ``garst-fig1b`` and ``garst-noise`` stop a FKM run early once the Hungarian-matched shift
  of the global centroids is <= ``tol = 1e-6``. The clients' uploads then repeat, and the
  re-seeded server k-means kept returning the same centroids: in 420 runs on these settings
  (noise 1.0, 1.2 and 1.5; ``fkm`` and ``fkm-paper-code``) the early-stopped final ARI was
  identical to that of exactly 100 rounds. Runs stop after 4 to 11 rounds on average, which
  cuts the cost of the noise sweep (18 settings x 200 runs x 4 methods) several-fold.
- ``garst-clusterwise`` runs exactly 100 rounds (``tol = -1``): there the paper-era
  unweighted server seeding can still jump to another optimum at a later re-seed (1 run in
  40 moved by 0.06).

``--tol`` overrides either (``tol < 0``: exactly R rounds).
"""

from __future__ import annotations

import numpy as np

from flwr_clustering.data.synthetic import garst_beta_split, garst_clusterwise

from .framework import Experiment, FederatedData, Method, PaperValue, Setting, register

__all__ = ["garst_beta_data", "garst_clusterwise_data"]


def _split(X: np.ndarray, y: np.ndarray, client: np.ndarray) -> FederatedData:
    return FederatedData(X, y, client, n_classes=16)


def garst_beta_data(beta: float, ppc: int = 50, noise: float = 1.0) -> FederatedData:
    """The paper's grid data with the beta split over 5 clients (spec §4.1).

    Parameters
    ----------
    beta : float
        Spread of the split (0.1, 1 or 10).
    ppc : int, default 50
        Points per cluster.
    noise : float, default 1.0
        Cluster standard deviation.

    Returns
    -------
    FederatedData
        Exactly the authors' "abl" partition (``np.random.seed(42)`` stream).
    """
    return _split(*garst_beta_split(beta, ppc=ppc, noise=noise))


def garst_clusterwise_data(ppc: int = 50, noise: float = 1.0) -> FederatedData:
    """The cluster-wise data of Fig. 4 (16/1/3/10/7 clusters per client, spec §4.2).

    Parameters
    ----------
    ppc : int, default 50
        Points per cluster.
    noise : float, default 1.0
        Cluster standard deviation.

    Returns
    -------
    FederatedData
        Client sizes [473, 10, 34, 173, 98].
    """
    return _split(*garst_clusterwise(ppc=ppc, noise=noise))


_BETAS = (0.1, 1.0, 10.0)
_NOISES = (1.0, 1.1, 1.2, 1.3, 1.4, 1.5)
_ROUNDS = (1, 2, 3, 5, 10, 20, 50, 100)


def _beta_label(beta: float) -> str:
    return f"beta={beta:g}"


def _noise_label(beta: float, noise: float) -> str:
    return f"beta={beta:g},noise={noise:.1f}"


_CENTRAL = Method("central", "central",
                  "scikit-learn KMeans(16, n_init=10, random_state=seed) on the pooled data; "
                  "ARI on the pooled data", {"n_init": 10})
_FKM = Method("fkm", "fkm",
              "FKM, this library's defaults: private init (one Lloyd step before the first "
              "upload), weighted server seeding (scikit-learn >= 1.3), p = 2, L = 1, "
              "n_init = 10",
              {"privacy_threshold": 2, "local_iters": 1, "init": "private",
               "seeding": "weighted"})
_FKM_UNWEIGHTED = Method(
    "fkm-unweighted", "fkm",
    "FKM with private init and unweighted server seeding (scikit-learn < 1.3 semantics: "
    "unweighted k-means++ seeds, weighted Lloyd, best weighted inertia of 10)",
    {"privacy_threshold": 2, "local_iters": 1, "init": "private",
     "seeding": "unweighted"})
_FKM_PAPER = Method(
    "fkm-paper-code", "fkm",
    "FKM as the paper's code ran it: raw k-means++ seeds uploaded at init (init='paper'), "
    "unweighted server seeding, counts after a final E-step (recount)",
    {"privacy_threshold": 2, "local_iters": 1, "init": "paper", "seeding": "unweighted",
     "recount": True})


def _kfed(k_local: int) -> Method:
    return Method(
        "kfed", "kfed",
        f"k-FED (Dennis et al. 2021), K_l = {k_local}, one shot; p = 1 like the reference "
        "code the paper ran (no privacy filter: a client with n <= K_l uploads its rows)",
        {"k_local": k_local, "privacy_threshold": 1}, tolerance=0.05)


_GARST_COMMON_NOTES = (
    "Scoring as in the paper (spec §4.4): FKM and k-FED report the per-client ARI of each "
    "client's nearest-global-centroid labels averaged with weights n_i "
    "(`ari-client-weighted`); central k-means reports the ARI on the pooled data (`ari`). "
    "The two are different quantities: a client-weighted ARI can exceed the pooled one.",
    "Data: regenerated exactly (the authors' `np.random.seed(42)` stream); the beta split is "
    "the authors' 'abl' partition, which reproduces their stored client sizes.",
    "FKM init: our default (`init='private'`) runs one Lloyd step before the first upload, so "
    "only means of >= p points leave a client. The paper's code uploaded the raw k-means++ "
    "seeds (data rows) at init; `fkm-paper-code` rows run that, with the paper-era "
    "unweighted server seeding. The paper's FKM number, from the code it ran, is the paper "
    "column of every FKM variant.",
    "FKM rounds: at most R; with tol >= 0 a run stops once the Hungarian-matched shift of "
    "the global centroids is <= tol. The clients' uploads then repeat, and on the beta-split "
    "data the re-seeded server k-means kept returning the same centroids: in 420 runs "
    "(Fig. 1(b) settings, noise 1.2 and 1.5; `fkm` and `fkm-paper-code`) the early-stopped "
    "final ARI was identical to that of exactly 100 rounds (`--tol -1`). On the cluster-wise "
    "data the unweighted seeding of the paper's code can still jump to another optimum at a "
    "later re-seed (1 run in 40 moved by 0.06), so `garst-clusterwise` runs exactly R rounds "
    "by default.",
    "k-FED runs with p = 1, as the authors' k-FED code (no privacy filter); with our library "
    "default p = 2 its mean ARI on beta = 0.1 drops by about 0.02 (singleton local clusters "
    "withheld).",
)


def _fig1b_paper() -> dict[tuple[str, str], PaperValue]:
    fkm = {0.1: (0.949, 0.009, 0.950), 1.0: (0.958, 0.003, None), 10.0: (0.957, 0.008, None)}
    kfed = {0.1: (0.643, 0.078), 1.0: (0.735, 0.058), 10.0: (0.841, 0.056)}
    # Same-partition k-FED (the noise sweep's noise 1.0 column, spec §5.2).
    kfed_same = {0.1: 0.690, 1.0: 0.729, 10.0: 0.852}
    paper: dict[tuple[str, str], PaperValue] = {}
    for beta in _BETAS:
        label = _beta_label(beta)
        conv = dict(zip(_ROUNDS, _CONVERGENCE[(beta, 1.0)], strict=True))
        mean, std, median = fkm[beta]
        for m in ("fkm", "fkm-unweighted", "fkm-paper-code"):
            paper[(m, label)] = PaperValue(mean, std, median, by_round=conv)
        paper[("kfed", label)] = PaperValue(
            *kfed[beta],
            note=f"other split; same split: {kfed_same[beta]:.3f}",
        )
        paper[("central", label)] = PaperValue(0.955, 0.001)
    return paper


#: Spec §5.3: FKM mean ARI by round (r = 1, 2, 3, 5, 10, 20, 50, 100), ppc 50.
_CONVERGENCE: dict[tuple[float, float], tuple[float, ...]] = {
    (0.1, 1.0): (0.950, 0.953, 0.952, 0.952, 0.952, 0.951, 0.950, 0.949),
    (0.1, 1.2): (0.845, 0.870, 0.876, 0.878, 0.880, 0.880, 0.879, 0.880),
    (0.1, 1.5): (0.610, 0.645, 0.662, 0.679, 0.689, 0.693, 0.696, 0.697),
    (1.0, 1.0): (0.946, 0.955, 0.957, 0.958, 0.958, 0.958, 0.958, 0.958),
    (1.0, 1.2): (0.840, 0.871, 0.879, 0.884, 0.886, 0.886, 0.886, 0.886),
    (1.0, 1.5): (0.602, 0.635, 0.655, 0.678, 0.697, 0.705, 0.706, 0.707),
    (10.0, 1.0): (0.940, 0.956, 0.957, 0.957, 0.957, 0.957, 0.957, 0.957),
    (10.0, 1.2): (0.828, 0.870, 0.881, 0.886, 0.887, 0.887, 0.887, 0.887),
    (10.0, 1.5): (0.615, 0.651, 0.670, 0.689, 0.703, 0.707, 0.709, 0.709),
}
#: Spec §5.3, other noise levels at beta = 0.1: round 1 and round 100 only.
_CONVERGENCE_ENDS: dict[tuple[float, float], dict[int, float]] = {
    (0.1, 1.1): {1: 0.907, 100: 0.926},
    (0.1, 1.3): {1: 0.769, 100: 0.834},
    (0.1, 1.4): {1: 0.688, 100: 0.777},
}

#: Spec §5.2, ppc 50 rows: (central, FKM, k-FED) per beta, for noise 1.0 .. 1.5.
_NOISE_TABLE: dict[float, tuple[tuple[float, float, float], ...]] = {
    0.1: ((0.955, 0.949, 0.690), (0.924, 0.926, 0.640), (0.888, 0.880, 0.598),
          (0.840, 0.834, 0.542), (0.785, 0.777, 0.480), (0.725, 0.697, 0.432)),
    1.0: ((0.955, 0.958, 0.729), (0.924, 0.922, 0.703), (0.888, 0.886, 0.650),
          (0.840, 0.844, 0.613), (0.785, 0.786, 0.568), (0.725, 0.707, 0.520)),
    10.0: ((0.955, 0.957, 0.852), (0.924, 0.927, 0.819), (0.888, 0.887, 0.775),
           (0.840, 0.840, 0.729), (0.785, 0.768, 0.680), (0.725, 0.709, 0.607)),
}
#: Spec §5.2: FKM std at beta = 0.1, ppc 50, noise 1.0 .. 1.5.
_NOISE_FKM_STD_B01 = (0.009, 0.002, 0.018, 0.019, 0.031, 0.016)


def _noise_paper() -> dict[tuple[str, str], PaperValue]:
    paper: dict[tuple[str, str], PaperValue] = {}
    for beta, cells in _NOISE_TABLE.items():
        for i, (noise, (central, fkm, kfed)) in enumerate(zip(_NOISES, cells, strict=True)):
            label = _noise_label(beta, noise)
            if (beta, noise) in _CONVERGENCE:
                conv = dict(zip(_ROUNDS, _CONVERGENCE[(beta, noise)], strict=True))
            else:
                conv = _CONVERGENCE_ENDS.get((beta, noise))
            std = _NOISE_FKM_STD_B01[i] if beta == 0.1 else None
            paper[("central", label)] = PaperValue(central)
            for m in ("fkm", "fkm-paper-code"):
                paper[(m, label)] = PaperValue(fkm, std, by_round=conv)
            paper[("kfed", label)] = PaperValue(kfed)
    return paper


def _clusterwise_paper() -> dict[tuple[str, str], PaperValue]:
    fkm = PaperValue(0.902, 0.053, 0.949, frac_below=0.465,
                     by_round={1: 0.856, 2: 0.886, 5: 0.898, 10: 0.901, 100: 0.902})
    return {
        ("central", "cluster-wise"): PaperValue(0.952, 0.001, 0.952),
        ("fkm", "cluster-wise"): fkm,
        ("fkm-unweighted", "cluster-wise"): fkm,
        ("fkm-paper-code", "cluster-wise"): fkm,
        ("kfed", "cluster-wise"): PaperValue(0.863, 0.060, 0.866),
    }


register(Experiment(
    name="garst-fig1b",
    title="Garst & Reinders Fig. 1(b): grid data ppc 50, noise 1, 5 clients, beta split",
    source="Fig. 1(b), re-derived from the authors' result arrays (200 runs, FKM R = 100)",
    k=16,
    load=garst_beta_data,
    settings=tuple(Setting(_beta_label(b), {"beta": b, "ppc": 50, "noise": 1.0},
                           group=f"β={b:g}") for b in _BETAS),
    methods=(_CENTRAL, _FKM, _FKM_PAPER, _kfed(16)),
    paper=_fig1b_paper(),
    notes=_GARST_COMMON_NOTES + (
        "Paper's central and k-FED boxes in Fig. 1(b) come from another random split of the "
        "same 800 points (the 'regular' files, spec §4.1); central does not depend on the "
        "split, k-FED does. The k-FED numbers of the paper on *our* split are the noise-1.0 "
        "column of the noise sweep: 0.690 / 0.729 / 0.852.",
        "FKM by round: the paper's row is spec §5.3 (noise 1.0), the same result arrays as "
        "the Fig. 1(b) FKM boxes.",
    ),
))

register(Experiment(
    name="garst-noise",
    title="Garst & Reinders Figs 3 and 6: noise sweep, ppc 50, 5 clients, beta split",
    source=("Figs 3(a-c) and 6 (means, ppc 50 rows) and 3(d-f) (FKM by round), re-derived "
            "from the authors' result arrays; 200 runs, R = 100"),
    k=16,
    load=garst_beta_data,
    settings=tuple(
        Setting(_noise_label(b, n), {"beta": b, "ppc": 50, "noise": n},
                panel=f"β={b:g}", group=f"{n:.1f}")
        for b in _BETAS for n in _NOISES
    ),
    methods=(_CENTRAL, _FKM, _FKM_PAPER, _kfed(16)),
    paper=_noise_paper(),
    notes=_GARST_COMMON_NOTES + (
        "At high noise our default FKM (`fkm`) scores 0.01-0.02 above the paper while "
        "`fkm-paper-code` matches it, round by round from r = 1: the difference is the "
        "initial upload. Means after one local Lloyd step give the server a better first "
        "C_g than raw k-means++ seeds (the paper's code), and FKM keeps that advantage "
        "(spec §5.6 found init irrelevant at noise 1 only, where both agree).",
        "The paper gives FKM standard deviations for beta = 0.1 only; central's is <= 0.006 "
        "and k-FED's 0.04-0.09 throughout (spec §5.2).",
        "Box-plot x axis: noise (cluster standard deviation); one panel per beta.",
    ),
))

register(Experiment(
    name="garst-clusterwise",
    title="Garst & Reinders Fig. 4(b): cluster-wise split, 16/1/3/10/7 clusters per client",
    source="Fig. 4(b), re-derived from the authors' result arrays (200 runs, FKM R = 100)",
    k=16,
    load=garst_clusterwise_data,
    settings=(Setting("cluster-wise", {"ppc": 50, "noise": 1.0}, group="cluster-wise"),),
    methods=(_CENTRAL, _FKM, _FKM_UNWEIGHTED, _FKM_PAPER, _kfed(14)),
    paper=_clusterwise_paper(),
    frac_threshold=0.9,
    tol=-1.0,
    notes=_GARST_COMMON_NOTES + (
        "The paper's FKM result is bimodal (53.5% of runs >= 0.94, 46.5% < 0.87), hence the "
        "median and the fraction of runs below 0.9. The paper blames initialisation; spec "
        "§2.5 item 5 blames the unweighted server seeding of scikit-learn < 1.3. The three FKM "
        "rows separate the two: in the 200-run default, weighted seeding (`fkm`) never falls "
        "below 0.9, unweighted seeding after the private init (`fkm-unweighted`) does in about "
        "one run in ten, and only the paper's code path, raw-seed init *and* unweighted "
        "seeding (`fkm-paper-code`), gives the paper's bimodal split, mean, median and "
        "by-round curve.",
        "Client 1 holds 10 points of one cluster: FKM seeds 10 singletons and never uploads "
        "(p = 2); k-FED (K_l = 14 >= 10, p = 1) uploads its 10 raw points, as the reference "
        "code does.",
        "k-FED uses the paper's informed K_l = 14 (spec §3.2).",
    ),
))

