"""A scikit-learn entry point: :class:`FederatedClustering` runs a federation in-process.

``FederatedClustering(algorithm, n_clusters, random_state=0, **options).fit(partitions)``
takes one array per client and runs the algorithm's real strategy and real clients (the
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
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

__all__ = ["FederatedClustering"]

#: Largest seed: the seed travels to the clients in a ConfigRecord (signed 64-bit).
_MAX_SEED = 2**63 - 1


def _option_fields(algorithm: str) -> dict[str, dataclasses.Field]:
    """The options of ``algorithm`` that a run config sets, by field name (``k`` excluded)."""
    from . import registry

    spec = registry.get(algorithm)
    return {f.name: f for f in spec.options.fields_by_key(run_config_only=True).values()
            if f.name != "k"}


def _describe_options(algorithm: str) -> str:
    from . import registry

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


def _check_option_names(algorithm: Any, options: dict[str, Any]) -> None:
    """Raise ``TypeError`` for a keyword that is not an option of ``algorithm``.

    An unknown or malformed ``algorithm`` is not checked here (``fit`` reports it). An
    option set to ``None`` ("the algorithm's default") is never an error.
    """
    if not isinstance(algorithm, str):
        return
    from . import registry

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

    ``fit(partitions)`` starts one simulated client per array of ``partitions`` and runs the
    algorithm's strategy and clients through an in-process Flower grid, exactly as
    ``flwr run`` would with one SuperNode per array: same classes, same run config, same
    seeds, same messages, hence the same model bit for bit. The clients label their own
    rows with the final model (``labels_``), as clients of a real federation do.

    Parameters
    ----------
    algorithm : str, default "fkm"
        A registered algorithm (``flwr_clustering.registry.names()``: ``"fkm"``, ``"kfed"``,
        ``"feca"``, ``"mavg"``, ``"ffcm"``, ``"masked-federated"``, ``"masked-oneshot"``,
        ``"dgc"``, ``"kdc"``, ``"deepfeca"``) or ``"module:ATTRIBUTE"`` of an
        :class:`~flwr_clustering.registry.AlgorithmSpec`.
    n_clusters : int, default 16
        The number of global clusters (run-config key ``k``).
    random_state : int or None, default 0
        The seed of the federation (run-config key ``seed``): it seeds the server's
        generator and, with each client's id, every client's. ``None`` draws a fresh seed
        at every ``fit`` (kept in ``seed_``). A ``numpy.random.RandomState`` or
        ``Generator`` is refused: the seed travels to the clients, so it must be an int.
    min_nodes : int or None, default None
        The fewest valid client replies a round may aggregate (run-config key
        ``min-nodes``); ``None``: every client (a client's failure stops the fit).
    early_stop : bool, default True
        Stop an iterative algorithm when it converges (its ``tol``); ``False`` runs every
        round (run-config key ``early-stop``).
    evaluate : bool, default True
        Ask the clients for evaluation statistics (``metrics_``). ``False`` leaves
        ``metrics_`` empty and is slightly faster; the model and ``labels_`` are the same.
        (The App always evaluates, so this is the one parameter ``flwr run`` lacks.)
    **algorithm_options
        The algorithm's options, by the field names of its options dataclass (snake case:
        ``max_rounds=5``, ``privacy_threshold=0``, ``tol=1e-4``, ...), exactly the
        run-config keys of ``flwr run`` (``max-rounds``, ...; see
        ``docs/configuration.md``). A name the algorithm does not have is a ``TypeError``
        that lists the valid ones; a bad value is the options' own ``ValueError`` at
        ``fit``. ``None`` means the algorithm's default.

    Attributes
    ----------
    cluster_centers_ : numpy.ndarray of shape (n_clusters, n_features)
        The global model's centroids (the App's ``centroids.npz``). DGC: the mean of the
        nodes' own centres; KDC: the input-space means of the initial clusters (plots
        only: KDC labels with its kernel); DeepFeCA: ``C*`` in the network's feature space
        (``proj_dim`` columns); masked algorithms: NaN where no client observed a feature
        of a cluster.
    labels_ : list of numpy.ndarray
        ``labels_[i]`` is the cluster of every row of ``partitions[i]``, computed by client
        ``i`` itself with the final model (DGC: with its own centres); ``None`` for a
        client that failed (possible only with ``min_nodes`` below the number of clients).
    user_centers_ : numpy.ndarray of shape (n_clients, n_clusters, n_features) or None
        DGC: every node's own final centres (``user_centers_[i]`` labels ``labels_[i]``);
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
    warnings_ : list of str
        One sentence per degenerate result (collapsed or empty centres, NaN entries, the
        round cap hit, clients withheld or dropped, no consensus, too few cores), naming
        the cause and the option to change; empty when nothing is wrong. Each was also
        logged as a WARNING of the ``flwr_clustering`` logger.
    n_iter_ : int
        Train rounds run.
    n_features_in_ : int
        Features of the rows.
    n_clients_ : int
        Number of clients (arrays in ``partitions``).
    seed_ : int
        The seed of the run (``random_state``, or the one drawn for ``None``).
    strategy_ : ClusteringStrategy
        The fitted strategy (advanced use: its hooks, ``describe()``, ``artifacts()``).

    Notes
    -----
    ``fit`` takes a federation (a list of per-client arrays), not one ``X``: the
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
        **algorithm_options: Any,
    ) -> None:
        self.algorithm = algorithm
        self.n_clusters = n_clusters
        self.random_state = random_state
        self.min_nodes = min_nodes
        self.early_stop = early_stop
        self.evaluate = evaluate
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
        from . import registry

        if not isinstance(self.algorithm, str):
            raise ValueError(f"algorithm must be a string, got {self.algorithm!r}")
        registry.get(self.algorithm)  # ValueError naming the registered algorithms
        _check_option_names(self.algorithm, self.algorithm_options)
        min_nodes = n_clients if self.min_nodes is None else self.min_nodes
        if isinstance(min_nodes, bool) or not isinstance(min_nodes, numbers.Integral):
            raise ValueError(f"min_nodes must be an int or None, got {min_nodes!r}")
        if not 1 <= min_nodes <= n_clients:
            raise ValueError(f"min_nodes must be between 1 and the number of clients "
                             f"({n_clients}), got {min_nodes}")
        fields = _option_fields(self.algorithm)
        spec = registry.get(self.algorithm)
        run_config = {"algorithm": self.algorithm, "k": _plain(self.n_clusters),
                      "seed": seed, "min-nodes": int(min_nodes),
                      "early-stop": _plain(self.early_stop)}
        for name, value in self.algorithm_options.items():
            if value is not None:
                run_config[spec.options.key_of(fields[name])] = _plain(value)
        return run_config

    @staticmethod
    def _partitions(partitions: Any, labels: Any) -> tuple[list[np.ndarray], list]:
        """Check the per-client arrays and labels; return them as float64 / int64."""
        if isinstance(partitions, np.ndarray) and partitions.ndim != 3:
            raise ValueError(
                f"partitions must be a list of 2-D arrays, one per client; got one array of "
                f"shape {partitions.shape} (split it, e.g. np.array_split(X, 4))")
        if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence | np.ndarray):
            raise ValueError(f"partitions must be a list of 2-D arrays, one per client; got "
                             f"{type(partitions).__name__}")
        if len(partitions) == 0:
            raise ValueError("partitions is empty: give one 2-D array per client")
        parts = []
        for i, part in enumerate(partitions):
            if hasattr(part, "toarray") or hasattr(part, "tocsr"):
                raise ValueError(f"partitions[{i}] is sparse; pass dense arrays")
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
            return parts, [None] * len(parts)
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
        return parts, ys

    # ------------------------------------------------------------------ fit
    def fit(self, partitions: Sequence[np.ndarray], labels: Sequence[np.ndarray] | None = None
            ) -> FederatedClustering:
        """Run the federation: one in-process client per array of ``partitions``.

        Parameters
        ----------
        partitions : list of array_like of shape (n_i, n_features)
            The rows of every client (client ``i`` gets ``partitions[i]``; its Flower
            ``partition-id`` is ``i``). Masked algorithms: NaN on the features a client
            does not observe.
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
            On malformed input (not a list of 2-D arrays, an empty client, feature counts
            that differ, NaN where the algorithm does not allow it, labels that do not
            match), an unknown algorithm, or a bad option value.
        TypeError
            On an option the algorithm does not have, or a ``random_state`` that is not
            an int.
        RuntimeError
            If the run fails (e.g. too few valid client replies); the message carries the
            clients' reasons.
        """
        from .app.config import build_client, build_strategy, merged_config, run_dtype
        from .clients import client_app, stored_labels
        from .clients.base import client_id_of
        from .testing import InProcessGrid

        parts, ys = self._partitions(partitions, labels)
        seed = self._seed()
        run_config = self._run_config(len(parts), seed)
        cfg = merged_config(run_config)
        for i, (X, y) in enumerate(zip(parts, ys, strict=True)):
            build_client(cfg, X, y, i)  # the client's own checks (NaN, labels), up front
        strategy = build_strategy(cfg, evaluate=bool(self.evaluate))

        def client_fn(context):
            # what the App's ClientApp does (flwr_clustering.app.client_app.client_fn),
            # with the node's rows in memory instead of in a data-path file
            cid = client_id_of(context)
            return build_client(cfg, parts[cid], ys[cid], cid)

        grid = InProcessGrid(client_app(client_fn), len(parts), run_config=run_config)
        try:
            strategy.start(grid=grid)
        except (RuntimeError, ValueError) as ex:
            # the strategy logs why it dropped a reply; say it here too (the library's
            # logger prints nothing unless the program configures logging)
            reasons = sorted({m.error.reason for m in grid.received if m.has_error()})
            if not reasons:
                raise
            raise RuntimeError(f"the federated run failed: {ex}; client errors: "
                               f"{'; '.join(reasons[:5])}") from ex
        self.strategy_ = strategy
        self.seed_ = seed
        self.n_clients_ = len(parts)
        self.n_features_in_ = int(parts[0].shape[1])
        # float64, or float32 when the run computes in it (scikit-learn's KMeans keeps
        # float32 data's centres float32 too)
        self.cluster_centers_ = (None if strategy.centroids is None
                                 else np.array(strategy.centroids, dtype=run_dtype(cfg)))
        self.labels_ = [stored_labels(grid.contexts[100 + i]) for i in range(len(parts))]
        models = strategy.user_models()
        self.user_centers_ = None if models is None else np.array(models, dtype=np.float64)
        self.history_ = strategy.history
        self.metrics_ = dict(strategy.final_metrics)
        self.diagnostics_ = dict(strategy.diagnostics)
        self.warnings_ = list(strategy.warnings)
        self.n_iter_ = int(strategy.history[-1]["round"]) if strategy.history else 0
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
        from . import registry
        from .clients.masked import MaskedClient

        return issubclass(registry.get(self.algorithm).client, MaskedClient)

    def predict(self, X: np.ndarray, client: int | None = None) -> np.ndarray:
        """Assign rows to the fitted clusters, as the federation's model does.

        Per algorithm:

        - FKM, k-FED, FeCA, M-Avg, FFCM: the nearest of ``cluster_centers_`` (FFCM: the
          hard label of the fuzzy model, the highest membership);
        - masked algorithms: the nearest centroid on each row's observed (non-NaN)
          features, as the clients label their own rows;
        - KDC: the kernel model (Isolation Kernel and the clusters' kernel mean maps),
          as the sites label their rows, not ``cluster_centers_``;
        - DeepFeCA: the nearest ``C*`` to the row's feature under the final network;
        - DGC: every node keeps its own centres. ``predict(X)`` is the nearest of the
          network mean ``cluster_centers_``; ``predict(X, client=i)`` the nearest of node
          ``i``'s own centres ``user_centers_[i]``, which is how node ``i`` labelled its
          rows in ``labels_[i]``.

        For every algorithm ``predict(partitions[i], client=i)`` equals ``labels_[i]``,
        and for every algorithm but DGC ``client`` changes nothing (every client holds the
        same model).

        Parameters
        ----------
        X : array_like of shape (n, n_features)
            Rows to assign (masked algorithms: NaN on unobserved features).
        client : int, optional
            Label as client ``client`` would (differs from the global model for DGC only).

        Returns
        -------
        numpy.ndarray of shape (n,)
            Cluster indices (int64).
        """
        from .algorithms.lloyd import nearest_labels
        from .algorithms.masked import pooled_masked_squared_distances

        check_is_fitted(self, "strategy_")
        masked = self._masked()
        # a float32 model labels float32 rows, as its clients held theirs
        dtype = getattr(self.cluster_centers_, "dtype", np.float64)
        X = np.asarray(X, dtype=np.float32 if dtype == np.float32 else np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape "
                             f"{X.shape} (one row: reshape(1, -1))")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                             f"fitted with {self.n_features_in_}")
        if not masked and not np.isfinite(X).all():
            raise ValueError(f"X contains NaN or inf ({self.algorithm!r} is not a "
                             "masked-feature algorithm)")
        if client is not None and not (isinstance(client, numbers.Integral)
                                       and 0 <= client < self.n_clients_):
            raise ValueError(f"client must be a client index in [0, {self.n_clients_}), "
                             f"got {client!r}")
        if len(X) == 0:
            return np.empty(0, dtype=np.int64)
        labels = self.strategy_.pooled_labels(X)  # KDC, DeepFeCA: the model labels rows
        if labels is not None:
            return np.asarray(labels, dtype=np.int64)
        C = self.cluster_centers_
        if client is not None and self.user_centers_ is not None:
            C = self.user_centers_[int(client)]
        if masked:
            return pooled_masked_squared_distances(X, C).argmin(axis=1).astype(np.int64)
        return nearest_labels(X, C).astype(np.int64)
