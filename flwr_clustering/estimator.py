"""A scikit-learn entry point: :class:`FederatedClustering` runs a federation in-process.

``FederatedClustering(algorithm, n_clusters, random_state=0, **options).fit(partitions)``
takes one array or pandas DataFrame per client and runs the algorithm's real strategy and
real clients (the
registry's classes, configured by the App's own run config,
:func:`flwr_clustering.app.config.merged_config`) over an
:class:`~flwr_clustering.testing.InProcessGrid`: the messages, the seeds and the arithmetic
are those of ``flwr run`` with one SuperNode per array, so the model is bit for bit the
model of the App on the same data (a test checks it against the App's
``run_server`` and ``ClientApp``). Nothing is written to disk.

This module is the library's application layer (like :mod:`flwr_clustering.app`): it
imports scikit-learn and the whole Flower stack, so :mod:`flwr_clustering` imports it on
first use only.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

from . import registry  # the declarations only: no strategy, no client, no Flower
from .algorithms.choose_k import DEFAULT_RULE
from .log import quiet
from .run_options import RunOptions

__all__ = ["FederatedClustering", "default_min_nodes"]

#: Largest seed: the seed travels to the clients in a ConfigRecord (signed 64-bit).
_MAX_SEED = 2**63 - 1


def default_min_nodes(algorithm: str, n_clients: int) -> int:
    """The estimator's ``min_nodes`` when it is ``None``: a majority of the clients.

    A round aggregates the valid replies of at least this many clients and names the
    others (withheld under the privacy threshold, failed). More than half, so that a
    model never stands for a minority of the federation's sites; every client where the
    algorithm's rounds need all of them (:attr:`ClusteringStrategy.needs_every_client
    <flwr_clustering.strategies.base.ClusteringStrategy.needs_every_client>`: DGC).

    Parameters
    ----------
    algorithm : str
        A registered algorithm's name.
    n_clients : int
        The number of clients.

    Returns
    -------
    int
        ``n_clients`` or ``n_clients // 2 + 1``.
    """
    if registry.get(algorithm).capabilities.needs_every_client:
        return n_clients
    return n_clients // 2 + 1


def _option_fields(algorithm: str) -> dict[str, dataclasses.Field]:
    """The options of ``algorithm`` that a run config sets, by field name (``k`` excluded)."""
    spec = registry.get(algorithm)
    return {f.name: f for f in spec.options.fields_by_key(run_config_only=True).values()
            if f.name != "k"}


def _describe_options(algorithm: str) -> str:
    spec = registry.get(algorithm)
    out = []
    for name, f in sorted(_option_fields(algorithm).items()):
        key = spec.options.key_of(f)
        out.append(f"{name} (run-config key {key!r})" if key != name.replace("_", "-")
                   else name)
    return ", ".join(out)


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python scalar a run config holds (``np.int64(8)`` -> ``8``)."""
    return value.item() if isinstance(value, np.generic) else value


def _is_frame(obj: Any) -> bool:
    """Whether ``obj`` is a pandas DataFrame (without importing pandas: none exists then)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def _with_parameter_names(ex: Exception) -> str:
    """A schema error's message, with the estimator's names of the run-config keys it cites."""
    message = str(ex)
    keys = [k for k in ("index-column", "feature-columns", "categorical-columns",
                        "datetime-columns") if k in message]
    if not keys:
        return message
    params = {"index-column": "index_column='...'", "feature-columns": "feature_columns=[...]",
              "categorical-columns": "categorical_columns=[...]",
              "datetime-columns": "datetime_columns=[...]"}
    return (f"{message} [FederatedClustering: client i is partitions[i]; the run-config keys "
            f"{' and '.join(keys)} are the parameters "
            f"{' and '.join(params[k] for k in keys)}]")


def _check_option_names(algorithm: Any, options: dict[str, Any]) -> None:
    """Raise ``TypeError`` for a keyword that is not an option of ``algorithm``.

    An unknown or malformed ``algorithm`` is not checked here (``fit`` reports it). An
    option set to ``None`` ("the algorithm's default") is never an error.
    """
    if not isinstance(algorithm, str):
        return
    try:
        spec = registry.get(algorithm)
    except ValueError:
        return
    valid = _option_fields(algorithm)
    unknown = sorted(k for k, v in options.items() if k not in valid and v is not None)
    if not unknown:
        return
    hints = []
    if "k" in unknown:
        hints.append("the number of clusters is n_clusters")
    if "seed" in unknown:
        hints.append("the seed is random_state")
    fields = {f.name for f in dataclasses.fields(spec.options)}
    message_only = [k for k in unknown if k in fields and k != "k"]
    if message_only:
        hints.append(f"{message_only} cannot be set by a run config (nor by `flwr run`): "
                     f"build {spec.strategy.__name__} yourself for those")
    hint = f" ({'; '.join(hints)})" if hints else ""
    raise TypeError(
        f"unknown option(s) {unknown} for algorithm {algorithm!r}{hint}; its options are: "
        f"{_describe_options(algorithm)}")


class FederatedClustering(ClusterMixin, BaseEstimator):
    """Federated clustering with a scikit-learn interface, run in-process.

    ``fit(partitions)`` starts one simulated client per array (or DataFrame) of
    ``partitions`` and runs the algorithm's strategy and clients through an in-process
    Flower grid, exactly as ``flwr run`` would with one SuperNode per array: same classes,
    same run config, same seeds, same messages, hence the same model bit for bit. The
    clients label their own rows with the final model (``labels_``), as clients of a real
    federation do.

    Before round 1 the federation agrees on its features by name (DataFrames: the column
    names; arrays: the positions ``"0"``, ``"1"``, ...) and scales them from the clients'
    sums (``scaling``); the model is computed in those scaled units, and everything the
    estimator returns (``cluster_centers_``, ``user_centers_``) is mapped back to the
    data's own units (``feature_transform_``).

    Parameters
    ----------
    algorithm : str, default "fkm"
        A registered algorithm (``flwr_clustering.registry.names()``: ``"fkm"``, ``"kfed"``,
        ``"feca"``, ``"mavg"``, ``"ffcm"``, ``"masked-federated"``, ``"masked-oneshot"``,
        ``"dgc"``, ``"kdc"``, ``"deepfeca"``) or ``"module:ATTRIBUTE"`` of an
        :class:`~flwr_clustering.registry.AlgorithmSpec`.
    n_clusters : int or "auto", default 16
        The number of global clusters (run-config key ``k``). ``"auto"`` (fkm, kfed,
        feca): fit every ``k`` of ``k_min..k_max`` in the messages of one run, score them
        from per-cluster sums and keep the one ``k_rule`` picks (``n_clusters_``,
        ``k_scores_``; docs/choosing.md).
    k_min, k_max : int, default 2 and 10
        ``n_clusters="auto"``: the candidates (run-config keys ``k-min``, ``k-max``).
    k_rule : str, default "silhouette"
        ``n_clusters="auto"``: ``"silhouette"`` (the best simplified silhouette),
        ``"calinski-harabasz"``, ``"davies-bouldin"`` or ``"sse-knee"`` (run-config key
        ``k-rule``).
    random_state : int or None, default 0
        The seed of the federation (run-config key ``seed``): it seeds the server's
        generator and, with each client's id, every client's. ``None`` draws a fresh seed
        at every ``fit`` (kept in ``seed_``). A ``numpy.random.RandomState`` or
        ``Generator`` is refused: the seed travels to the clients, so it must be an int.
    min_nodes : int or None, default None
        The fewest valid client replies a round may aggregate (run-config key
        ``min-nodes``). ``None``: more than half of the clients (``n // 2 + 1``,
        :func:`default_min_nodes`), so a round in which a minority withholds its reply
        (the privacy threshold) or fails completes with the rest, names them in
        ``warnings_`` and the log, and the model still stands for most of the federation;
        every client for DGC, whose rounds need every node of its graph. An int: at least
        that many valid replies (the number of clients: one client's failure stops the fit).
    early_stop : bool, default True
        Stop an iterative algorithm when it converges (its ``tol``); ``False`` runs every
        round (run-config key ``early-stop``).
    evaluate : bool, default True
        Ask the clients for evaluation statistics (``metrics_``). ``False`` leaves
        ``metrics_`` empty and is slightly faster; the model and ``labels_`` are the same.
        (The App always evaluates, so this is the one parameter ``flwr run`` lacks.)
    scaling : {"standard", "minmax", "none"}, default "standard"
        How the features are scaled across the clients before round 1 (run-config key
        ``scaling``), from the clients' counts and sums (never rows): ``"standard"``
        z-scores with the federation's mean and standard deviation (as
        ``sklearn.preprocessing.StandardScaler`` on the pooled rows), ``"minmax"`` ``[0, 1]``
        from the clients' extremes (``MinMaxScaler``), ``"none"`` the rows as they are (a
        sentence in ``warnings_`` when the features' spreads differ by more than 10x).
        DeepFeCA takes its rows as they are whatever the value (``scaling_`` says
        ``"none"``).
    feature_columns : list of str or None, default None
        The federation's features, in this order (run-config key ``feature-columns``,
        comma-joined); every client must have them, its other columns are ignored (a text
        column, an identifier). ``None``: every column the clients share, in the order
        most of them use (a client with a column the others lack, or without one they
        have, is an error naming it). With arrays the names are the positions ``"0"``,
        ``"1"``, ...
    index_column : str or None, default None
        An identifier column the clients have (a patient or record id; run-config key
        ``index-column``): never a feature, and ignored by ``predict``. An undeclared
        column that looks like an identifier (named like one, or a different whole number
        or text on every row) is refused at ``fit``.
    categorical_columns : list of str or None, default None
        Columns of categories (text or integer codes; run-config key
        ``categorical-columns``): one-hot encoded with the levels agreed across the
        clients (a value held by fewer than ``privacy_threshold`` rows at a client, or in
        the federation, becomes ``"other"``); their features are named
        ``"<column>=<level>"``, after the numeric ones; a missing cell is the level
        ``"missing"``. DataFrames only.
    missing : {"auto", "mean", "drop", "partial", "refuse"}, default "auto"
        A missing cell (NaN, None, an empty cell) of a numeric feature (run-config key
        ``missing``): ``"mean"`` fills it with the federation's mean of the feature,
        computed from the same counts and sums as the scaling (the pooled pipeline
        ``SimpleImputer(strategy="mean")`` then ``StandardScaler``; ``predict`` fills a
        new row's missing cells the same way); ``"drop"`` leaves the row out of the
        training (its label in ``labels_`` is -1, and ``predict`` gives -1 to a row with a
        missing cell); ``"partial"`` clusters the row on its observed features (the masked
        algorithms, and ``"fkm"`` with ``server_update="lloyd"``: the partial-distance
        Lloyd step, ``predict`` labels a row with missing cells by its observed
        features); ``"refuse"`` raises. ``"auto"``: ``"partial"`` for the masked
        algorithms, else ``"mean"``. The share of filled cells per feature is in
        ``warnings_``.
    unit_check : {"warn", "refuse", "off"}, default "warn"
        A client whose feature looks recorded in other units than the others' (its size
        and spread differ by the same factor of about 16 or more; run-config key
        ``unit-check``): a sentence in ``warnings_`` naming the client, the feature and
        the factor, an error (``"refuse"``), or no check.
    categorical_weight : {"balanced", "standard"}, default "balanced"
        With ``scaling="standard"``, the weight of each categorical column (run-config key
        ``categorical-weight``): ``"balanced"`` divides its one-hot features by
        ``sqrt(sum_l p_l (1 - p_l))`` (``p_l`` the federation's share of each level), so
        that the column weighs like one standardised numeric feature; ``"standard"``
        standardises each one-hot feature like a measurement (a rare level then weighs
        most). ``"minmax"`` and ``"none"`` leave the one-hot features 0/1.
    datetime_columns : list of str or None, default None
        Date/time columns to use as features (run-config key ``datetime-columns``):
        every client converts them to float seconds since 1970-01-01 00:00 UTC, whatever
        their unit (``datetime64[ns]``, ``[ms]``, ...), a time zone converted to UTC and
        a time without one taken as UTC; text columns so declared are read with
        ``pandas.to_datetime``. Such a feature is in seconds since the epoch in
        ``cluster_centers_`` and the profile. An undeclared ``datetime64`` column among
        the features is refused at ``fit``. DataFrames only.
    robust_scaling : bool, default False
        With ``scaling="standard"`` (run-config key ``robust-scaling``): a client whose
        moments of a numeric feature lie far from the median client's (its rows' deviation
        from the clients' median mean more than 10 times the median client's) is set
        aside from that feature's mean and scale, and named in ``warnings_``
        (:func:`~flwr_clustering.data.schema.robust_moments`); at least 3 clients.
    split_check : bool, default True
        After the last round, check from per-cluster sums whether a cluster looks like
        two groups along its main axis (run-config key ``split-check``): a poor local
        optimum of the centres, or ``n_clusters`` too small; found, a sentence in
        ``warnings_`` naming ``refine_rounds``.
    refine_rounds : int, default 0
        Refine the final model (run-config key ``refine-rounds``): up to this many
        federated Lloyd rounds from it, then split-and-merge repairs of the clusters that
        look like two groups, each followed by Lloyd rounds and kept where the SSE falls
        (``diagnostics_["refine"]``). For fkm, kfed, feca, mavg and ffcm.
    **algorithm_options
        The algorithm's options, by the field names of its options dataclass (snake case:
        ``max_rounds=5``, ``privacy_threshold=0``, ``tol=1e-4``, ...), exactly the
        run-config keys of ``flwr run`` (``max-rounds``, ...; see
        ``docs/configuration.md``). A name the algorithm does not have is a ``TypeError``
        that lists the valid ones; a bad value is the options' own ``ValueError`` at
        ``fit``. ``None`` means the algorithm's default.

    Attributes
    ----------
    cluster_centers_ : numpy.ndarray of shape (n_clusters, n_features_in_)
        The global model's centroids in the data's own units (the model,
        ``strategy_.centroids``, is in the scaled units: ``cluster_centers_`` is
        ``feature_transform_.inverse(strategy_.centroids)``), columns in the order of
        ``feature_names_in_``. DGC: the mean of the
        nodes' own centres; KDC: the input-space means of the initial clusters (plots
        only: KDC labels with its kernel); DeepFeCA: ``C*`` in the network's feature space
        (``proj_dim`` columns); masked algorithms: NaN where no client observed a feature
        of a cluster.
    n_clusters_ : int
        The number of clusters of the model: ``n_clusters``, or the chosen one.
    k_scores_ : pandas.DataFrame or None
        ``n_clusters="auto"``: one row per candidate ``k`` (its best start): ``chosen``,
        ``sse``, ``silhouette`` (simplified), ``calinski-harabasz``, ``davies-bouldin``,
        ``clusters`` (non-empty), ``rows``, ``withheld-rows``, ``rounds``; the App's
        ``k_scores.csv``. ``None`` for a fixed ``n_clusters``.
    labels_ : list of numpy.ndarray
        ``labels_[i]`` is the cluster of every row of ``partitions[i]``, computed by client
        ``i`` itself with the final model (DGC: with its own centres); ``None`` for a
        client that failed (possible only with ``min_nodes`` below the number of clients).
    user_centers_ : numpy.ndarray of shape (n_clients, n_clusters, n_features_in_) or None
        DGC: every node's own final centres, in the data's own units
        (``user_centers_[i]`` labels ``labels_[i]``, in the scaled units);
        ``None`` for the other algorithms (every client holds the global model).
    history_ : list of dict
        The strategy's per-round records (the App's ``history.json``).
    metrics_ : dict
        The federated evaluation of the final model (the App's ``result.json``
        ``"federated"``): SSE, and with ``labels`` also ARI, NMI, purity, accuracy.
    diagnostics_ : dict
        The run's diagnostics (the App's ``result.json`` ``"diagnostics"``), from counts and
        sums only: ``non-empty-clusters`` of ``k`` and ``cluster-counts``,
        ``distinct-centres`` (centres closer than 1e-6 times the data's RMS spread count as
        one), ``non-finite-entries``, ``sse``, ``sst`` and ``sse-ratio`` (SSE over the
        total sum of squares), ``lloyd-gain`` (the SSE decrease of one Lloyd step from
        the model over the SSE: a better clustering exists when it is large),
        ``converged``/``round-cap-hit`` with ``last-shift``
        (iterative algorithms with a ``tol``), ``absent``/``withheld``/``dropped`` clients
        with the reason, and per algorithm DGC's ``consensus-distance`` and
        ``consensus-relative``, KDC's ``psi``, ``tau`` and ``cores``
        (:meth:`~flwr_clustering.strategies.base.ClusteringStrategy.diagnose`).
    cluster_profile_ : pandas.DataFrame or None
        Per cluster its size and share, its rows at every client (a count below the
        privacy threshold is NaN), and per feature its mean and standard deviation in the
        original units (the App's ``profile.csv``), from the clients' per-cluster sums of
        the final evaluation; ``None`` without an evaluation, or for algorithms without a
        centre-based profile (masked, KDC, DeepFeCA).
    warnings_ : list of str
        One sentence per degenerate result (collapsed or empty centres, NaN entries, the
        round cap hit, clients withheld or dropped, no consensus, too few cores), naming
        the cause and the option to change; empty when nothing is wrong. Each was also
        logged as a WARNING of the ``flwr_clustering`` logger.
    n_iter_ : int
        Train rounds run.
    n_features_in_ : int
        The federation's features (DataFrames: the agreed columns, ``index_column`` and
        the columns left out of ``feature_columns`` excluded; arrays: their columns).
    feature_names_in_ : numpy.ndarray of str (dtype object)
        The agreed features, in the federation's order (the order of the columns of
        ``cluster_centers_``). Only when ``fit`` was given DataFrames (scikit-learn's
        convention: absent for arrays).
    feature_transform_ : FeatureTransform or None
        The features and scaling every client applied
        (:class:`~flwr_clustering.data.schema.FeatureTransform`: ``features``, ``center``,
        ``scale``, ``transform``, ``inverse``); ``None`` for DeepFeCA, whose clients take
        their rows as they are.
    scaling_ : str
        The scaling used: ``scaling``, or ``"none"`` for DeepFeCA.
    n_clients_ : int
        Number of clients (arrays in ``partitions``).
    seed_ : int
        The seed of the run (``random_state``, or the one drawn for ``None``).
    strategy_ : ClusteringStrategy
        The fitted strategy (advanced use: its hooks, ``describe()``, ``artifacts()``).

    Notes
    -----
    ``fit`` takes a federation (a list of per-client arrays or DataFrames), not one
    ``X``: the
    estimator does not follow scikit-learn's ``fit(X)`` contract and is not meant for
    :func:`sklearn.utils.estimator_checks.check_estimator`; ``get_params``,
    ``set_params`` and :func:`sklearn.base.clone` work, with the algorithm options among
    the parameters. What ``predict`` means per algorithm is in its docstring.

    Examples
    --------
    >>> import numpy as np
    >>> from flwr_clustering import FederatedClustering
    >>> rng = np.random.default_rng(0)
    >>> parts = [rng.normal(size=(50, 2)) + [5 * (i % 2), 0] for i in range(4)]
    >>> est = FederatedClustering("fkm", n_clusters=2, max_rounds=10).fit(parts)
    >>> est.cluster_centers_.shape, len(est.labels_)
    ((2, 2), 4)

    DataFrames: columns matched by name, whatever their order at each client.

    >>> import pandas as pd
    >>> frames = [pd.DataFrame(P, columns=["x", "y"]) for P in parts]
    >>> frames[1] = frames[1][["y", "x"]]
    >>> est = FederatedClustering("fkm", n_clusters=2, max_rounds=10).fit(frames)
    >>> list(est.feature_names_in_), est.scaling_
    (['x', 'y'], 'standard')
    """

    def __init__(
        self,
        algorithm: str = "fkm",
        n_clusters: int = 16,
        *,
        random_state: int | None = 0,
        min_nodes: int | None = None,
        early_stop: bool = True,
        evaluate: bool = True,
        scaling: str = "standard",
        feature_columns: Sequence[str] | None = None,
        index_column: str | None = None,
        categorical_columns: Sequence[str] | None = None,
        missing: str = "auto",
        unit_check: str = "warn",
        categorical_weight: str = "balanced",
        datetime_columns: Sequence[str] | None = None,
        robust_scaling: bool = False,
        split_check: bool = True,
        refine_rounds: int = 0,
        k_min: int = 2,
        k_max: int = 10,
        k_rule: str = DEFAULT_RULE,
        **algorithm_options: Any,
    ) -> None:
        self.algorithm = algorithm
        self.n_clusters = n_clusters
        self.random_state = random_state
        self.min_nodes = min_nodes
        self.early_stop = early_stop
        self.evaluate = evaluate
        # stored as given (clone checks identity); validated at fit
        self.scaling = scaling
        self.feature_columns = feature_columns
        self.index_column = index_column
        self.categorical_columns = categorical_columns
        self.missing = missing
        self.unit_check = unit_check
        self.categorical_weight = categorical_weight
        self.datetime_columns = datetime_columns
        self.robust_scaling = robust_scaling
        self.split_check = split_check
        self.refine_rounds = refine_rounds
        self.k_min = k_min
        self.k_max = k_max
        self.k_rule = k_rule
        _check_option_names(algorithm, algorithm_options)
        self.algorithm_options = dict(algorithm_options)

    # ------------------------------------------------------------- parameters
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Get the parameters, the algorithm options included.

        Parameters
        ----------
        deep : bool, default True
            Ignored (no parameter is an estimator).

        Returns
        -------
        dict
            The constructor's named parameters, then the algorithm options by name.
        """
        params = super().get_params(deep=deep)
        params.update(self.algorithm_options)
        return params

    def set_params(self, **params: Any) -> FederatedClustering:
        """Set parameters; names other than the constructor's are algorithm options.

        Parameters
        ----------
        **params
            ``algorithm``, ``n_clusters``, ..., or options of the (new) algorithm. An
            option set to ``None`` takes the algorithm's default (use it to drop an option
            when switching to an algorithm that lacks it).

        Returns
        -------
        FederatedClustering
            ``self``.

        Raises
        ------
        TypeError
            If a name is neither a parameter nor an option of the algorithm (nothing is
            changed then).
        """
        names = set(self._get_param_names())
        base = {k: v for k, v in params.items() if k in names}
        options = {**self.algorithm_options,
                   **{k: v for k, v in params.items() if k not in names}}
        _check_option_names(base.get("algorithm", self.algorithm), options)
        for key, value in base.items():
            setattr(self, key, value)
        self.algorithm_options = options
        return self

    # ------------------------------------------------------------ validation
    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return int(np.random.SeedSequence().generate_state(1, np.uint32)[0])
        if isinstance(rs, bool) or not isinstance(rs, numbers.Integral):
            raise TypeError(
                f"random_state must be an int or None, got {type(rs).__name__}: the seed "
                "travels to the clients in a message, so a RandomState or Generator cannot "
                "be used (pass e.g. random_state=0)")
        if not 0 <= int(rs) <= _MAX_SEED:
            raise ValueError(f"random_state must be in [0, 2**63 - 1], got {rs}")
        return int(rs)

    def _run_config(self, n_clients: int, seed: int) -> dict[str, Any]:
        """The run config of ``flwr run`` that this estimator's parameters stand for."""
        if not isinstance(self.algorithm, str):
            raise ValueError(f"algorithm must be a string, got {self.algorithm!r}")
        registry.get(self.algorithm)  # ValueError naming the registered algorithms
        _check_option_names(self.algorithm, self.algorithm_options)
        min_nodes = (default_min_nodes(self.algorithm, n_clients) if self.min_nodes is None
                     else _plain(self.min_nodes))
        # the strategy's rule and words (RunOptions), then the estimator's own bound
        min_nodes = RunOptions.from_config({"min-nodes": min_nodes}).min_nodes
        if min_nodes > n_clients:
            raise ValueError(f"min_nodes must be between 1 and the number of clients "
                             f"({n_clients}), got {min_nodes}")
        fields = _option_fields(self.algorithm)
        spec = registry.get(self.algorithm)
        run_config = {"algorithm": self.algorithm, "k": _plain(self.n_clusters),
                      "seed": seed, "min-nodes": min_nodes,
                      "early-stop": _plain(self.early_stop),
                      # merged_config checks the value against the App's choices
                      "scaling": _plain(self.scaling),
                      "feature-columns": self._feature_columns_key(),
                      "index-column": self._index_column_key(),
                      "categorical-columns": self._feature_columns_key("categorical_columns"),
                      "missing": _plain(self.missing), "unit-check": _plain(self.unit_check),
                      "categorical-weight": _plain(self.categorical_weight),
                      "datetime-columns": self._feature_columns_key("datetime_columns"),
                      "robust-scaling": _plain(self.robust_scaling),
                      "split-check": _plain(self.split_check),
                      "refine-rounds": _plain(self.refine_rounds),
                      "k-min": _plain(self.k_min), "k-max": _plain(self.k_max),
                      "k-rule": _plain(self.k_rule)}
        for name, value in self.algorithm_options.items():
            if value is not None:
                run_config[spec.options.key_of(fields[name])] = _plain(value)
        return run_config

    def _feature_columns_key(self, which: str = "feature_columns") -> str:
        """A list of columns as the run config's comma-separated value (``feature-columns``)."""
        columns = getattr(self, which)
        if columns is None:
            return ""
        if isinstance(columns, str | bytes):
            raise ValueError(f"{which} must be a list of column names (or None), got "
                             f"the string {columns!r}: e.g. {which}=['a', 'b']")
        try:
            names = [str(_plain(c)) for c in columns]
        except TypeError as ex:
            raise ValueError(f"{which} must be a list of column names (or None), got "
                             f"{columns!r}") from ex
        if not names:
            raise ValueError(f"{which} is empty: list the columns, or None")
        bad = [n for n in names if "," in n or n != n.strip() or not n]
        key = which.replace("_", "-")
        if bad:
            raise ValueError(f"{which}: the name(s) {bad} cannot travel in the run "
                             f"config's comma-separated {key} (a comma, an empty "
                             "name, or leading/trailing spaces): rename those columns")
        return ",".join(names)

    def _index_column_key(self) -> str:
        """``index_column`` as the run config's ``index-column`` (``""``: none)."""
        index = self.index_column
        if index is None:
            return ""
        if isinstance(index, bool) or not isinstance(index, str | numbers.Integral):
            raise ValueError(f"index_column must be a column name (or None), got {index!r}")
        name = str(_plain(index))
        if not name or name != name.strip() or name == "none":
            raise ValueError(f"index_column {index!r} cannot travel in the run config's "
                             "index-column: rename that column")
        return name

    @staticmethod
    def _partitions(partitions: Any, labels: Any
                    ) -> tuple[list[np.ndarray], list, list | None]:
        """Check the per-client rows and labels.

        Returns the rows as float64 arrays, the labels as int64 (or ``None``s), and for
        DataFrames every client's :class:`~flwr_clustering.data.schema.FeatureTable`
        (``None`` for arrays).
        """
        from .data.schema import COMPLEX_HINT, FeatureTable

        if isinstance(partitions, np.ndarray) and partitions.ndim != 3:
            raise ValueError(
                f"partitions must be a list of 2-D arrays, one per client; got one array of "
                f"shape {partitions.shape} (split it, e.g. np.array_split(X, 4))")
        if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence | np.ndarray):
            raise ValueError(f"partitions must be a list of 2-D arrays, one per client; got "
                             f"{type(partitions).__name__}")
        if len(partitions) == 0:
            raise ValueError("partitions is empty: give one 2-D array per client")
        frames = [_is_frame(part) for part in partitions]
        if any(frames) and not all(frames):
            raise ValueError(
                f"partitions mixes DataFrames (partitions[{frames.index(True)}]) and arrays "
                f"(partitions[{frames.index(False)}]): give every client a DataFrame (columns "
                "matched by name) or every client an array (columns matched by position)")
        parts: list[np.ndarray] = []
        tables: list | None = None
        if all(frames):
            tables = []
            for i, frame in enumerate(partitions):
                try:
                    table = FeatureTable.from_frame(frame)
                except ValueError as ex:
                    raise ValueError(f"partitions[{i}]: {ex}") from ex
                if table.X.shape[0] == 0:
                    raise ValueError(f"partitions[{i}] is empty (shape {frame.shape})")
                if table.X.shape[1] == 0:
                    raise ValueError(f"partitions[{i}] has no numeric column (text columns: "
                                     f"{list(table.text)})")
                tables.append(table)
                parts.append(np.ascontiguousarray(table.X, dtype=np.float64))
        for i, part in enumerate(partitions if tables is None else ()):
            if hasattr(part, "toarray") or hasattr(part, "tocsr"):
                raise ValueError(f"partitions[{i}] is sparse; pass dense arrays")
            if np.iscomplexobj(part):  # float64 would keep the real part, with a warning
                raise ValueError(f"partitions[{i}] holds complex numbers: {COMPLEX_HINT}")
            try:
                X = np.asarray(part, dtype=np.float64)
            except (TypeError, ValueError) as ex:
                raise ValueError(f"partitions[{i}] is not a numeric array: {ex}") from ex
            if X.ndim != 2:
                raise ValueError(f"partitions[{i}] must be a 2-D array (n_samples, n_features), "
                                 f"got shape {X.shape} (one row: reshape(1, -1))")
            if X.shape[0] == 0 or X.shape[1] == 0:
                raise ValueError(f"partitions[{i}] is empty (shape {X.shape})")
            if parts and X.shape[1] != parts[0].shape[1]:
                raise ValueError(
                    f"partitions[{i}] has {X.shape[1]} features, partitions[0] has "
                    f"{parts[0].shape[1]}: every client's rows have the same features (masked "
                    "algorithms: NaN on the features a client does not observe)")
            parts.append(np.ascontiguousarray(X))
        if labels is None:
            return parts, [None] * len(parts), tables
        if (isinstance(labels, np.ndarray) and labels.ndim < 2) or len(labels) != len(parts):
            raise ValueError(f"labels must be a list of {len(parts)} arrays, one per client "
                             "(or None)")
        ys = []
        for i, (X, y) in enumerate(zip(parts, labels, strict=True)):
            y = np.asarray(y)
            if y.shape != (len(X),):
                raise ValueError(f"labels[{i}] has shape {y.shape}, partitions[{i}] has "
                                 f"{len(X)} rows")
            if y.dtype.kind not in "iub" and not (
                    y.dtype.kind == "f" and np.isfinite(y).all() and (y == np.round(y)).all()):
                raise ValueError(f"labels[{i}] must be integers (ground truth for the "
                                 f"metrics), got dtype {y.dtype}")
            ys.append(y.astype(np.int64))
        return parts, ys, tables

    # ------------------------------------------------------------------ fit
    def fit(self, partitions: Sequence[Any], labels: Sequence[np.ndarray] | None = None
            ) -> FederatedClustering:
        """Run the federation: one in-process client per array of ``partitions``.

        Parameters
        ----------
        partitions : list of array_like of shape (n_i, n_features), or list of DataFrame
            The rows of every client (client ``i`` gets ``partitions[i]``; its Flower
            ``partition-id`` is ``i``). Arrays: every client the same columns, matched by
            position. pandas DataFrames (all of them, or none): columns matched by name,
            in any order at each client; numeric columns are features (``bool`` as 0/1,
            a nullable type's ``pd.NA`` as a missing cell), text columns are refused
            unless left out (``feature_columns``), date/time columns unless declared
            (``datetime_columns``), an identifier column must be declared
            (``index_column``). Masked algorithms: NaN on the features a client does not
            observe.
        labels : list of array_like of shape (n_i,), optional
            Ground-truth classes per client, for the metrics only (``metrics_`` then has
            ARI, NMI, purity, accuracy); the clustering never sees them.

        Returns
        -------
        FederatedClustering
            ``self``, fitted.

        Raises
        ------
        ValueError
            On malformed input (not a list of 2-D arrays or DataFrames, DataFrames mixed
            with arrays, an empty client, feature counts that differ, a column mixing
            numbers and text, NaN where the algorithm does not allow it, labels that do not
            match), an unknown algorithm, or a bad option value. Columns that do not make
            one federation (a client lacks a column or names it differently, a text or an
            undeclared identifier column among the features) raise the strategy's
            :class:`~flwr_clustering.data.schema.SchemaError` (a ``ValueError``), naming
            the client and the columns, before any training message.
        TypeError
            On an option the algorithm does not have, or a ``random_state`` that is not
            an int.
        RuntimeError
            If the run fails (e.g. too few valid client replies); the message carries the
            clients' reasons.
        """
        from .app.config import build_client, build_strategy, merged_config, run_dtype
        from .clients import client_app, stored_labels
        from .data.schema import FeatureTable, SchemaError
        from .protocol import client_id_of
        from .testing import InProcessGrid

        parts, ys, tables = self._partitions(partitions, labels)
        seed = self._seed()
        run_config = self._run_config(len(parts), seed)
        cfg = merged_config(run_config)
        scales = bool(registry.get(self.algorithm).strategy.scales_features)
        if tables is not None and not scales:
            strategy_cls = registry.get(self.algorithm).strategy
            raise ValueError(
                f"algorithm {self.algorithm!r} takes its rows as they are, without agreeing "
                f"on columns by name ({strategy_cls.scales_features_why or 'no feature step'}"
                "): pass arrays with the same columns in the same order at every client "
                "(e.g. frame[columns].to_numpy())")
        if tables is None and scales:
            # the rows by position ("0", "1", ...), as the App's ClientApp names a file's
            # columns: the federation's transform then rounds float64 rows once, as there
            tables = [FeatureTable(X) for X in parts]

        def make_client(cid: int):
            client = build_client(cfg, parts[cid], ys[cid], cid)
            if tables is not None:
                client.feature_table = tables[cid]  # the columns by name (round 0 agrees)
            return client

        for i in range(len(parts)):
            make_client(i)  # the client's own checks (NaN, labels), up front
        strategy = build_strategy(cfg, evaluate=bool(self.evaluate))

        def client_fn(context):
            # what the App's ClientApp does (flwr_clustering.app.client_app.client_fn),
            # with the node's rows in memory instead of in a data-path file
            return make_client(client_id_of(context))

        grid = InProcessGrid(client_app(client_fn), len(parts), run_config=run_config)
        try:
            with quiet():  # silent as KMeans, unless the program configures logging
                strategy.start(grid=grid)
        except SchemaError as ex:
            # the sites' columns do not make one federation: the strategy's own sentence
            # (naming the client, the columns and the option), raised before round 1
            raise SchemaError(_with_parameter_names(ex)) from ex
        except (RuntimeError, ValueError) as ex:
            # the strategy logs why it dropped a reply; say it here too (the library's
            # logger prints nothing unless the program configures logging)
            reasons = sorted({m.error.reason for m in grid.received if m.has_error()})
            if not reasons:
                raise
            raise RuntimeError(f"the federated run failed: {ex}; client errors: "
                               f"{'; '.join(reasons[:5])}") from ex
        transform = strategy.feature_transform

        def original(A: Any) -> np.ndarray:
            """Model entries (scaled units) in the data's own units; NaN stays NaN."""
            return np.asarray(A, dtype=np.float64) if transform is None \
                else transform.inverse(A)

        self.strategy_ = strategy
        self._fit_config = cfg  # the run config, for save_model (the App's model.json)
        self.seed_ = seed
        self.n_clients_ = len(parts)
        self.feature_transform_ = transform
        self.scaling_ = "none" if transform is None else transform.scaling
        #: the columns predict takes as an array (every client's, by position)
        self._n_columns = int(parts[0].shape[1])
        self.__dict__.pop("feature_names_in_", None)  # a refit on arrays has none
        if transform is not None and _is_frame(partitions[0]):
            self.feature_names_in_ = np.asarray(transform.features, dtype=object)
        self.n_features_in_ = (self._n_columns if transform is None
                               else len(transform.features))
        # float64, or float32 when the run computes in it (scikit-learn's KMeans keeps
        # float32 data's centres float32 too)
        self.cluster_centers_ = (None if strategy.centroids is None
                                 else np.array(original(strategy.centroids),
                                               dtype=run_dtype(cfg)))
        self.labels_ = [stored_labels(grid.contexts[100 + i]) for i in range(len(parts))]
        models = strategy.user_models()
        self.user_centers_ = None if models is None else np.array(original(models),
                                                                  dtype=np.float64)
        self.n_clusters_ = int(strategy.k)
        scores = getattr(strategy, "k_scores", None)
        if scores:
            import pandas as pd

            table = pd.DataFrame(scores)
            table.insert(1, "chosen", (table["k"] == self.n_clusters_).astype(int))
            self.k_scores_ = table
        else:
            self.k_scores_ = None
        self.history_ = strategy.history
        self.metrics_ = dict(strategy.final_metrics)
        self.diagnostics_ = dict(strategy.diagnostics)
        self.warnings_ = list(strategy.warnings)
        self.n_iter_ = int(strategy.history[-1]["round"]) if strategy.history else 0
        absent = self.diagnostics_.get("absent") or {}
        if absent:  # a model without some sites is never silent, log configured or not
            named = "; ".join(f"{who}: {why}" for who, why in absent.items())
            warnings.warn(
                f"{type(self).__name__}: the model was built without {len(absent)} of "
                f"{len(parts)} clients ({named}); min_nodes={cfg['min-nodes']} allowed it "
                f"(min_nodes={len(parts)} makes it an error)", UserWarning, stacklevel=2)
        from .app.results import cluster_profile_of

        self.cluster_profile_ = (cluster_profile_of(strategy, int(
            cfg.get("privacy-threshold", 2))) if self.evaluate else None)
        return self

    def fit_predict(self, partitions: Sequence[np.ndarray],
                    labels: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """Fit and return ``labels_``, the clients' own labels of their rows.

        Parameters
        ----------
        partitions, labels
            As in :meth:`fit`.

        Returns
        -------
        list of numpy.ndarray
            ``labels_``: one array per client.
        """
        return self.fit(partitions, labels).labels_

    # -------------------------------------------------------------- predict
    def _masked(self) -> bool:
        """Whether rows are labelled on their observed features.

        The masked algorithms, and FKM with ``missing='partial'`` (the model's
        ``masked-nearest-centroid`` labelling).
        """
        fitted = getattr(self, "strategy_", None)
        if getattr(fitted, "labelling", None) == "masked-nearest-centroid":
            return True
        return registry.get(self.algorithm).capabilities.labels == "masked-nearest-centroid"

    def _frame_rows(self, frame: Any) -> np.ndarray:
        """A DataFrame's feature columns, by name, in the federation's order (float64)."""
        from .data.schema import FeatureTable, FeatureTransform

        transform = self.feature_transform_
        if transform is not None and transform.categories:  # the columns a client reads
            features = [*transform.numeric_features, *(c for c, _ in transform.categories)]
        else:
            features = [str(f) for f in self.feature_names_in_]
        names = [str(c) for c in frame.columns]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"X has the column name(s) {twice} twice")
        missing = [f for f in features if f not in names]
        if missing:
            raise ValueError(f"X lacks the feature column(s) {missing}: "
                             f"{type(self).__name__} is fitted with {features}")
        options = self.strategy_.feature_options  # as they were at fit
        if options.feature_columns is None:  # the other columns are the index only
            extra = [n for n in names if n not in features and n != options.index_column]
            if extra:
                declared = ("" if options.index_column is None
                            else f", except the index_column {options.index_column!r}")
                raise ValueError(
                    f"X has the column(s) {extra}, which {type(self).__name__} was not "
                    f"fitted with: drop them (X's columns must be the features "
                    f"{features}{declared}; fit with feature_columns=[...] to have the "
                    "other columns ignored)")
        position = {n: j for j, n in enumerate(names)}
        chosen = frame.iloc[:, [position[f] for f in features]]
        if len(chosen) == 0:
            return np.empty((0, len(self.feature_names_in_)))
        # the same parsing and column selection as the clients' (FeatureTable.from_frame);
        # categorical columns one-hot encoded with the agreed levels, unscaled
        table = FeatureTable.from_frame(chosen)
        if transform is not None and (transform.categories or transform.datetimes):
            return FeatureTransform(transform.features, categories=transform.categories,
                                    datetimes=transform.datetimes).apply(table)
        return table.columns(features)

    def _rows(self, X: Any) -> np.ndarray:
        """``X`` as float64 rows in the federation's features, unscaled (checked)."""
        from .data.schema import FeatureTable

        name = type(self).__name__
        named = hasattr(self, "feature_names_in_")
        if _is_frame(X):
            if named:
                return self._frame_rows(X)
            warnings.warn(f"X has feature names, but {name} was fitted without feature "
                          "names", UserWarning, stacklevel=3)
            X = X.to_numpy()
        elif named:
            warnings.warn(f"X does not have valid feature names, but {name} was fitted with "
                          "feature names", UserWarning, stacklevel=3)
        if np.iscomplexobj(X):  # float64 would keep the real part, with a warning
            from .data.schema import COMPLEX_HINT

            raise ValueError(f"X holds complex numbers: {COMPLEX_HINT}")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape "
                             f"{X.shape} (one row: reshape(1, -1))")
        # an array's columns: the fitted ones by position (fitted on DataFrames: the
        # features in the order of feature_names_in_)
        width = self.n_features_in_ if named else getattr(self, "_n_columns",
                                                          self.n_features_in_)
        if X.shape[1] != width:
            raise ValueError(f"X has {X.shape[1]} features, but {name} is fitted with {width}"
                             + ("" if width == self.n_features_in_ else
                                f" columns (of which {self.n_features_in_} are features)"))
        transform = self.feature_transform_
        if named or transform is None:
            return X
        # the clients took their features from their columns by position ("0", "1", ...)
        return FeatureTable(X).columns(transform.features)

    def predict(self, X: Any, client: int | None = None) -> np.ndarray:
        """Assign rows to the fitted clusters, as the federation's model does.

        ``X`` is taken in the federation's features (a DataFrame's columns by name) and
        scaled with ``feature_transform_``, as the clients scaled their rows; then, per
        algorithm:

        - FKM, k-FED, FeCA, M-Avg, FFCM: the nearest of ``cluster_centers_`` (FFCM: the
          hard label of the fuzzy model, the highest membership);
        - masked algorithms, and FKM with ``missing="partial"``: the nearest centroid on
          each row's observed (non-NaN) features, as the clients label their own rows;
        - KDC: the kernel model (Isolation Kernel and the clusters' kernel mean maps),
          as the sites label their rows, not ``cluster_centers_``;
        - DeepFeCA: the nearest ``C*`` to the row's feature under the final network;
        - DGC: every node keeps its own centres. ``predict(X)`` is the nearest of the
          network mean ``cluster_centers_``; ``predict(X, client=i)`` the nearest of node
          ``i``'s own centres ``user_centers_[i]``, which is how node ``i`` labelled its
          rows in ``labels_[i]``.

        (Nearest in the scaled units the model was computed in: the nearest of the
        centres ``strategy_.centroids`` to ``feature_transform_.transform(rows)``.) For
        every algorithm ``predict(partitions[i], client=i)`` equals ``labels_[i]``, and
        for every algorithm but DGC ``client`` changes nothing (every client holds the
        same model).

        Parameters
        ----------
        X : array_like of shape (n, n_features) or DataFrame
            Rows to assign (masked algorithms: NaN on unobserved features). Fitted on
            DataFrames: a DataFrame with the columns ``feature_names_in_`` in any order
            (the ``index_column``, and with ``feature_columns`` any other column, are
            ignored; another extra column is an error), or an array of those columns in
            that order (with a ``UserWarning``, as scikit-learn's). Fitted on arrays: an
            array with the partitions' columns.
        client : int, optional
            Label as client ``client`` would (differs from the global model for DGC only).

        Returns
        -------
        numpy.ndarray of shape (n,)
            Cluster indices (int64).
        """
        check_is_fitted(self, "strategy_")
        masked = self._masked()
        X = self._rows(X)
        transform = self.feature_transform_
        policy = "keep" if transform is None else transform.missing
        if policy == "drop":  # a row with a missing cell: -1, as the clients' at fit
            keep = transform.complete_rows(X)
            if not keep.all():
                out = np.full(len(X), -1, dtype=np.int64)
                out[keep] = self._labels(X[keep], client, masked)
                return out
        filled = policy == "mean" and bool(transform.fill)
        if np.isinf(X).any() or (not masked and not filled and np.isnan(X).any()):
            raise ValueError(f"X contains NaN or inf ({self.algorithm!r} is not a "
                             "masked-feature algorithm, and the run had "
                             f"missing={self.strategy_.feature_options.missing!r})")
        return self._labels(X, client, masked)

    def _labels(self, X: np.ndarray, client: int | None, masked: bool) -> np.ndarray:
        """:meth:`predict`'s labels of checked rows in the federation's features."""
        from .algorithms.lloyd import nearest_labels
        from .algorithms.masked import pooled_masked_squared_distances

        if client is not None and not (isinstance(client, numbers.Integral)
                                       and 0 <= client < self.n_clients_):
            raise ValueError(f"client must be a client index in [0, {self.n_clients_}), "
                             f"got {client!r}")
        if len(X) == 0:
            return np.empty(0, dtype=np.int64)
        # the rows as the clients held theirs: scaled in float64 from the float64 rows
        # (FeatureTransform.apply), then in the run's dtype (a float32 model labels
        # float32 rows)
        dtype = getattr(self.cluster_centers_, "dtype", np.float64)
        dtype = np.float32 if dtype == np.float32 else np.float64
        transform = self.feature_transform_
        Z = np.asarray(X if transform is None else transform.transform(X), dtype=dtype)
        labels = self.strategy_.pooled_labels(Z)  # KDC, DeepFeCA: the model labels rows
        if labels is not None:
            return np.asarray(labels, dtype=np.int64)
        # the model in the scaled units (cluster_centers_ is in the data's own units)
        C = np.asarray(self.strategy_.centroids, dtype=dtype)
        models = self.strategy_.user_models() if client is not None else None
        if models is not None:
            C = np.asarray(models[int(client)], dtype=np.float64)
        if masked:
            return pooled_masked_squared_distances(Z, C).argmin(axis=1).astype(np.int64)
        return nearest_labels(Z, C).astype(np.int64)

    def save_model(self, path: str | os.PathLike[str]) -> Path:
        """Write the fitted model as the App writes its ``model.json``.

        The same file as an App run on the same data: feature names, scaling, centroids
        and the run's settings; :func:`flwr_clustering.load_model` reads it to label new
        rows at any site, and ``python -m flwr_clustering check <file> --schema <path>``
        checks a site's file against it.

        Parameters
        ----------
        path : str or os.PathLike
            The file, conventionally ``model.json``; its directory must exist.

        Returns
        -------
        pathlib.Path
            ``path``.

        Raises
        ------
        ValueError
            For a model that is not centroids (DeepFeCA's network).
        """
        from .app.results import run_model

        check_is_fitted(self, "strategy_")
        model = run_model(self.strategy_, self._fit_config)
        if model is None:
            raise ValueError(f"{self.algorithm!r}: the model is not centroids over the "
                             "features, so it has no model.json")
        return model.save(path)
