"""The options of a run that are not an algorithm's: declared once, for every door.

:class:`RunOptions` declares (as the algorithms declare theirs, :mod:`flwr_clustering.options`)
what every clustering strategy takes besides its algorithm's options: the nodes to wait for,
the seed, the timeouts, secure aggregation, the features step (scaling, missing cells, unit
check) and the end-of-run checks. Its fields are the run-config keys of the Flower App and the
keyword arguments of :class:`~flwr_clustering.strategies.base.ClusteringStrategy`; the
strategy's constructor, the App's run config (:func:`flwr_clustering.app.config.merged_config`)
and so the estimator (which runs through the run config) all build it, so the same bad value
gets the same refusal, in the same words, from every door.

Each rule that is more than one field's type and bounds is one function here (or, for the
secure-aggregation threshold, :func:`flwr_clustering.secure.sums.secagg_threshold_problem`),
called by the declaration and by whoever else must keep it:

* :func:`scaling_problem`: ``robust-scaling`` needs ``scaling='standard'``; under secure
  aggregation neither ``scaling='minmax'`` nor ``robust-scaling`` (they need each site's own
  statistics);
* :func:`is_auto_k` and :func:`refuse_k_auto`: ``k='auto'`` is a search over candidates (the
  App's and the estimator's), never one strategy's ``k``.

Defaults are the App's (its run config's); the strategy's constructor keeps its own where
they differ (``scaling=None``: no features step; ``round_timeout=3600``) and passes them in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import registry  # the declarations only (help texts name the able algorithms)
from .data.schema import CATEGORICAL_WEIGHTS, MISSING, SCALINGS
from .options import Options, option
from .pulls import DEFAULT_POLL_INTERVAL, poll_interval_problem
from .secure import DEFAULT_SECAGG_KEYS, SECAGG_KEYS
from .secure.sums import SECAGG_THRESHOLD, secagg_threshold_problem

__all__ = ["K_AUTO", "UNIT_CHECKS", "RunOptions", "fraction_problem", "is_auto_k",
           "refuse_k_auto", "scaling_problem"]

#: Values of the ``unit-check`` option: warn about a site whose feature looks recorded in
#: other units (:func:`~flwr_clustering.data.schema.unit_mismatches`), refuse the run, or
#: do not check.
UNIT_CHECKS: tuple[str, ...] = ("warn", "refuse", "off")

#: The value of ``k`` (run config) or ``n_clusters`` (estimator) that asks for a search.
K_AUTO = "auto"


def is_auto_k(k: Any) -> bool:
    """Whether ``k`` asks for a search over candidates (``'auto'``, any case and spaces).

    The one test of ``k='auto'``: the App's run config, its search and the strategy's
    refusal all ask this.
    """
    return isinstance(k, str) and k.strip().lower() == K_AUTO


def refuse_k_auto(strategy_name: str, k: Any) -> None:
    """Refuse ``k='auto'`` given to one strategy, naming the search that does it.

    Any other value (a string that is not ``'auto'`` among them) is left to the algorithm's
    options, which refuse it as the App does.

    Parameters
    ----------
    strategy_name : str
        The strategy's class name (``FedKMeans``).
    k : any
        The ``k`` given to its constructor.

    Raises
    ------
    ValueError
        If ``k`` is ``'auto'``.
    """
    if is_auto_k(k):
        raise ValueError(
            f"k={k!r}: a {strategy_name} fits one k; choosing k is a search over candidates: "
            f"flwr_clustering.strategies.choose_k.search_k({strategy_name}, range(2, 11), "
            f"...) ({registry.listing('choose_k')})")


def scaling_problem(scaling: str | None, robust_scaling: bool, secure_aggregation: bool
                    ) -> str | None:
    """Why a features step cannot scale this way (``None``: it can).

    The one place of these rules (the run config, the strategy and the features step ask it):
    ``robust-scaling`` sets aside a site's means and spreads, which only
    ``scaling='standard'`` uses; under secure aggregation the server learns only totals, so
    neither ``scaling='minmax'`` (every site's extremes) nor ``robust-scaling`` (every site's
    sums) can run.

    Parameters
    ----------
    scaling : {"standard", "minmax", "none"} or None
        The scaling (``None``: no features step).
    robust_scaling : bool
        Whether a site far from the others is set aside.
    secure_aggregation : bool
        Whether the run sums securely.

    Returns
    -------
    str or None
        The refusal, naming what to change.
    """
    if robust_scaling and scaling != "standard":
        return (f"robust-scaling=true with scaling={scaling!r}: the robust rule sets aside a "
                "site's means and spreads, which only scaling='standard' uses: run with "
                "scaling='standard', or robust-scaling=false")
    if secure_aggregation and scaling == "minmax":
        return ("secure-aggregation=true: scaling='minmax' needs every site's minimum and "
                "maximum (one row's value each), which secure aggregation cannot sum: run "
                "with scaling='standard'")
    if secure_aggregation and robust_scaling:
        return ("secure-aggregation=true: robust-scaling=true needs each site's per-feature "
                "sums, which secure aggregation hides (the server learns only their "
                "totals): run with robust-scaling=false (unit-check still flags a site in "
                "other units)")
    return None


def fraction_problem(fraction: float) -> str | None:
    """Why ``fraction`` cannot be the share of nodes asked each round (``None``: it can)."""
    return None if 0.0 < fraction <= 1.0 else "must lie in (0, 1]"


def _secure(cfg: Mapping[str, Any]) -> bool:
    return bool(cfg.get("secure-aggregation"))


@dataclasses.dataclass(frozen=True)
class RunOptions(Options):
    """The options of a run besides its algorithm's (see the module docstring).

    The fields without a run-config key (``fraction``, ``node_wait_timeout``,
    ``evaluate``) are the strategy constructor's only.
    """

    int_ceiling = None  # seeds are any integer; min-nodes is bounded by the federation

    min_nodes: int = option(2, minimum=1, help="nodes to wait for, and the fewest valid "
                            "replies a round may aggregate (Flower's default federation "
                            "has 2); others are left out and named. Use more than half "
                            "of your sites; DGC needs every node")
    fraction: float = option(1.0, check=fraction_problem, run_config=False,
                             help="fraction of the available nodes asked in each round")
    seed: int = option(0, minimum=0, help="server and client random generators (an "
                       "integer >= 0, NumPy's seeds)")
    round_timeout: float = option(600.0, minimum=0.0, help="seconds to wait for the replies "
                                  "of one round")
    poll_interval: float = option(DEFAULT_POLL_INTERVAL, check=poll_interval_problem,
                                  help="seconds between two pulls of an exchange's replies "
                                  "from the SuperLink (Flower's own wait is 3 s); see "
                                  "docs/deployment.md")
    node_wait_timeout: float = option(600.0, run_config=False, help="seconds to wait for "
                                      "min-nodes nodes to connect")
    evaluate: bool = option(True, run_config=False, help="a federated evaluation of the "
                            "final model")
    early_stop: bool = option(True, help="stop before the last round when the algorithm "
                              "converges (its tol); false: run every round")
    evaluate_every_round: bool = option(False, help="a federated evaluation after every "
                                        "round (the final model is always evaluated)")
    secure_aggregation: bool = option(False, help="the server receives only the sum of "
                                      "the clients' replies (SecAgg+; "
                                      f"{registry.secure_modes()}); see docs/privacy.md")
    secagg_threshold: float = option(SECAGG_THRESHOLD, check=secagg_threshold_problem,
                                     help="secure aggregation: the fraction of a round's "
                                     "clients whose key shares rebuild a key (the others "
                                     "may drop out), in (0, 1]", when=_secure)
    secagg_keys: str = option(DEFAULT_SECAGG_KEYS, choices=SECAGG_KEYS,
                              help="secure aggregation: run "
                              "(keys agreed once per run, fresh masks per exchange: near a "
                              "plain round's cost) or exchange (Flower's SecAgg+ as shipped, "
                              "all four stages per exchange); see docs/privacy.md",
                              when=_secure)
    scaling: str | None = option("standard", choices=SCALINGS, help="scale the features "
                                 "across the sites before round 1, from the clients' sums: "
                                 "standard (z-scores), minmax ([0, 1]; not with secure "
                                 "aggregation) or none (warns when the spreads differ by "
                                 "more than 10x); see docs/data.md")
    missing: str = option("auto", choices=MISSING, help="a missing (empty, NaN) cell of a "
                          "numeric feature: mean (the federation's mean, from the scaling's "
                          "sums), drop (the row is left out, labelled -1), partial (the row "
                          "clustered on its observed features: masked algorithms, fkm with "
                          "server-update='lloyd'), refuse; "
                          "auto: partial for the masked algorithms, else mean; see "
                          "docs/data.md")
    unit_check: str = option("warn", choices=UNIT_CHECKS, help="a site whose feature looks "
                             "recorded in other units than the other sites' (size and "
                             "spread off by the same factor of about 16 or more; under "
                             "secure aggregation each site flags itself): warn, refuse the "
                             "run, or off")
    categorical_weight: str = option("balanced", choices=CATEGORICAL_WEIGHTS,
                                     help="with scaling='standard', the weight of a "
                                     "categorical column: balanced (its one-hot features "
                                     "together weigh like one standardised feature) or "
                                     "standard (each one-hot feature standardised like a "
                                     "measurement); see docs/data.md",
                                     when=lambda cfg: bool(cfg.get("categorical-columns")))
    robust_scaling: bool = option(False, help="scaling='standard': a site whose moments of "
                                  "a numeric feature lie far from the median site's (its "
                                  "rows' deviation from the sites' median mean over 10x the "
                                  "median site's) is set aside from that feature's mean and "
                                  "scale, and named; plain runs of 3 sites or more; see "
                                  "docs/data.md",
                                  when=lambda cfg: cfg.get("scaling", "standard") == "standard")
    split_check: bool = option(True, help="after the last round, check from per-cluster "
                               "sums whether a cluster looks like two groups (a poor local "
                               "optimum, or k too small) and warn")
    refine_rounds: int = option(0, minimum=0, help="refine the final model: up to this many "
                                "federated Lloyd rounds, then split-and-merge repairs of "
                                "clusters that look like two groups (kept where the SSE "
                                f"falls); {registry.listing('refine')}")

    def validate(self) -> None:
        """The rules across fields: :func:`scaling_problem`."""
        problem = scaling_problem(self.scaling, self.robust_scaling, self.secure_aggregation)
        if problem is not None:
            raise ValueError(problem)
