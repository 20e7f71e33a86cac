"""The federation's features before round 1: one schema, one scaling (a part of the base).

Before the algorithm's first message, :func:`prepare_features`

1. reads what every client said about its columns in the library's ``data-source`` phase
   (names and kinds, never values; the App asked already, else it asks now) and agrees on
   the federation's features (:func:`~flwr_clustering.data.schema.agree_schema`): a site
   that lacks a column, has another, names one differently, or an undeclared identifier
   or text column stops the run here, naming the site, the columns and the option;
2. asks every client for its per-feature count, sum and sum of squares (one ``QUERY``
   message per node, phase ``feature-moments``; through secure aggregation when it is
   on) and derives the scaling (``standard``, ``minmax``) or, with ``scaling='none'``,
   warns when the features' spreads differ by more than 10x; with ``robust-scaling``
   a site whose moments of a numeric feature lie far from the median site's is set aside
   from that feature's mean and scale
   (:func:`~flwr_clustering.data.schema.robust_moments`);
3. keeps the result as the strategy's ``feature_transform``, which every later message
   carries (``feature-transform`` in its config): each client takes its columns by name
   in the federation's order and scales them before the algorithm sees them.

Privacy: the column names and kinds are metadata; the sums are sums over at least
``privacy-threshold`` rows (a smaller site withholds them and is scaled with the others'
totals); under secure aggregation the server sees only the federation's totals, and a site
tells only the power of two above each feature's largest ``|value|`` (so that the totals
stay in the fixed-point range). ``minmax`` needs each site's extremes, one row's value each:
it is refused under secure aggregation.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..algorithms.local_centroids import RowMoments
from ..data.schema import (
    DROP_LEAVES_NO_ROW,
    MAX_MISSING_SHARE,
    ColumnInfo,
    FeatureTransform,
    Schema,
    SchemaError,
    agree_categories,
    agree_schema,
    categorical_scales,
    one_hot_name,
    robust_moments,
    robust_scaling_warnings,
    scaling_from_moments,
    self_scaled_warning,
    spread_warning,
    unit_mismatches,
)
from ..log import logger
from ..protocol import (
    CATEGORIES_PHASE,
    DATA_SOURCE_PHASE,
    FEATURE_MOMENTS_PHASE,
    MOMENT_KEYS,
    MOMENTS_TRANSFORM_KEY,
)
from ..replies import Collected
from ..run_options import UNIT_CHECKS, RunOptions

__all__ = ["UNIT_CHECKS", "FeatureOptions", "columns_of", "data_source_config",
           "known_data_sources", "moments_with_columns", "prepare_features"]

#: Whether a plain run that declares its features asks for the feature moments in the
#: ``data-source`` query (:func:`moments_with_columns`); a private switch for the tests
#: that compare the run with the two exchanges it replaces.
_MERGE_MOMENTS = True

#: What a missing cell becomes in the clients' transform, per ``missing`` policy.
_TRANSFORM_MISSING = {"mean": "mean", "drop": "drop", "partial": "keep", "refuse": "refuse"}


@dataclass(frozen=True)
class FeatureOptions:
    """How the federation's features are chosen and scaled.

    Attributes
    ----------
    scaling : str or None
        ``"standard"`` (z-scores from the federation's sums), ``"minmax"`` (``[0, 1]``
        from the sites' extremes), ``"none"`` (the rows as they are, with a warning when
        the features' spreads differ by more than 10x) or ``None``: no features step at
        all (the rows as the clients hold them, no extra message), unless columns are
        named.
    feature_columns : tuple of str or None
        The features in this order (each site's other columns are ignored); ``None``:
        every column the sites share, in the order most of them use.
    index_column : str or None
        A declared identifier column, never a feature.
    categorical_columns : tuple of str
        Columns of categories (text or codes), one-hot encoded with the levels agreed
        across the sites (one more message per node; not under secure aggregation).
    missing : str
        What a missing cell of a numeric feature becomes (:data:`~flwr_clustering.data.
        schema.MISSING`): ``mean`` (the federation's mean, from the scaling's sums),
        ``drop`` (the row is left out and labelled -1), ``partial`` (the row is clustered
        on its observed features: the masked algorithms, and FKM with partial distances),
        ``refuse``; ``auto``:
        ``partial`` for an algorithm that reads NaN as unobserved, else ``mean``.
    unit_check : str
        ``warn`` (default), ``refuse`` or ``off``: a site whose feature looks recorded in
        other units than the other sites' (plain runs, from the sites' sums).
    categorical_weight : str
        How the one-hot features are scaled with ``scaling='standard'``: ``"balanced"``
        (each categorical variable weighs like one standardised numeric feature,
        :func:`~flwr_clustering.data.schema.categorical_scales`) or ``"standard"`` (each
        one-hot column standardised like a measurement). ``minmax`` and ``none`` leave
        the one-hot features 0/1 either way.
    datetime_columns : tuple of str
        Date/time columns used as features: each site converts them to float seconds
        since 1970-01-01 00:00 UTC (an undeclared date column is refused).
    robust_scaling : bool
        ``scaling='standard'`` only: a site whose moments of a numeric feature lie far from
        the median site's is set aside from that feature's mean and scale
        (:func:`~flwr_clustering.data.schema.robust_moments`; plain runs, 3 sites or more).
    """

    scaling: str | None = None
    feature_columns: tuple[str, ...] | None = None
    index_column: str | None = None
    categorical_columns: tuple[str, ...] = ()
    missing: str = "auto"
    unit_check: str = "warn"
    categorical_weight: str = "balanced"
    datetime_columns: tuple[str, ...] = ()
    robust_scaling: bool = False

    @property
    def active(self) -> bool:
        """Whether the run agrees on its features at all (a scaling or a column was named)."""
        return (self.scaling is not None or self.feature_columns is not None
                or self.index_column is not None or bool(self.categorical_columns)
                or bool(self.datetime_columns))

    def __post_init__(self) -> None:
        # the rules of these values are the run options' declaration (one for every door)
        RunOptions(scaling=self.scaling, missing=self.missing, unit_check=self.unit_check,
                   categorical_weight=self.categorical_weight,
                   robust_scaling=self.robust_scaling)

    def policy(self, reads_missing: bool) -> str:
        """The ``missing`` policy of a run (``auto`` resolved for its algorithm)."""
        if self.missing == "auto":
            return "partial" if reads_missing else "mean"
        return self.missing

    @classmethod
    def from_values(cls, scaling: str | None = None, feature_columns: Any = None,
                    index_column: Any = None, categorical_columns: Any = None,
                    missing: str = "auto", unit_check: str = "warn",
                    categorical_weight: str = "balanced",
                    datetime_columns: Any = None,
                    robust_scaling: bool = False) -> FeatureOptions:
        """From run-config values (comma-separated column lists; ``""``: none)."""
        def names(value: Any) -> tuple[str, ...]:
            if isinstance(value, str):
                value = [c.strip() for c in value.split(",") if c.strip()]
            return tuple(str(c) for c in value) if value else ()

        index = None if index_column in (None, "", "none") else str(index_column)
        return cls(None if scaling is None else str(scaling),
                   names(feature_columns) or None, index, names(categorical_columns),
                   str(missing), str(unit_check), str(categorical_weight),
                   names(datetime_columns), bool(robust_scaling))


def data_source_config(strategy: Any) -> dict[str, Any]:
    """The ``data-source`` query's config: what the run's summing exchange needs of it.

    Under secure aggregation a scaling also asks each site for its features' magnitudes
    (:func:`flwr_clustering.secure.features.data_source_config`); a plain run that
    declares its features asks for the ``feature-moments`` statistics in the same reply
    (:func:`moments_with_columns`: ``moments-transform``, ``scaling`` and
    ``privacy-threshold``, the config that phase would send); else nothing more.
    """
    options = getattr(strategy, "feature_options", None)
    summer = getattr(strategy, "summer", None)
    if options is None or not options.active or summer is None:
        return {}
    transform = moments_with_columns(strategy)
    if transform is not None:
        return {MOMENTS_TRANSFORM_KEY: transform.to_json(), **_moments_config(
            strategy, options.scaling or "none")}
    return summer.feature_config(options.scaling, tuple(options.datetime_columns))


def known_data_sources(strategy: Any) -> Collected | None:
    """The run's ``data-source`` replies when it asked for them already; ``None`` if not.

    The features step's own query (``strategy.record.data_sources``, made in
    :func:`prepare_features` when no caller asked), else the App's check before
    :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.start`
    (``strategy.site_sources``, :func:`flwr_clustering.app.data_source.query_data_sources`).
    An algorithm that needs the replies again before round 1 (FKM's clients count and
    feature width under DP or secure aggregation) collects these
    (:meth:`~flwr_clustering.strategies.exchange.Exchange.collect_again`) instead of
    asking every node a second time.
    """
    for replies in (getattr(getattr(strategy, "record", None), "data_sources", None),
                    getattr(strategy, "site_sources", None)):
        if replies is not None and replies.asked is not None:
            return replies
    return None


def moments_with_columns(strategy: Any) -> FeatureTransform | None:
    """The features a plain run's ``data-source`` query asks the feature moments in.

    The ``feature-moments`` phase's sums ride in the ``data-source`` reply (one round trip
    fewer) only where the server knows, before any site has described its columns,
    exactly the features that phase would take them in, and that phase would go to the
    same nodes with the same config:

    * the run declares ``feature-columns`` (the features in that order, the declared
      ``datetime-columns`` converted to seconds; not listing the index column, nor a
      column twice, nor a date column outside them: those are refused before any sum);
    * a plain exchange: no secure aggregation (its sums are summed securely), no
      differential privacy (no sums at all), no ``categorical-columns`` (their levels
      are agreed from the sites' counts first);
    * the algorithm scales features, ``fraction`` is 1 (the phase goes to every node
      and draws nothing from the sampling generator), and the run's ``missing`` policy
      holds for the algorithm (else its refusal comes after the schema, as before).

    The moments then leave the sites with their columns' names, before the schema is
    agreed; a site whose own columns do not make the declared features sends none.
    :func:`prepare_features` uses them only if the features it agrees equal these and
    every node sent them; otherwise it sends the ``feature-moments`` phase as before.

    Returns
    -------
    FeatureTransform or None
        The moments' transform (the columns, no fill, no scaling), or ``None``: the
        moments come in their own phase.
    """
    options = getattr(strategy, "feature_options", None)
    if (not _MERGE_MOMENTS or options is None or not options.active
            or not options.feature_columns
            or options.categorical_columns or getattr(strategy, "secure_aggregation", False)
            or getattr(strategy, "dp", False) or not getattr(strategy, "scales_features", False)
            or float(getattr(strategy, "fraction", 1.0)) < 1.0
            or getattr(getattr(strategy, "summer", None), "sums_only", True)):
        return None
    features = tuple(options.feature_columns)
    if (len(set(features)) != len(features) or options.index_column in features
            or not set(options.datetime_columns) <= set(features)):
        return None
    try:
        policy = _missing_policy(strategy, options)
    except ValueError:
        return None
    return FeatureTransform(features, missing=_TRANSFORM_MISSING[policy],
                            datetimes=tuple(options.datetime_columns))


def _moments_config(strategy: Any, scaling: str) -> dict[str, Any]:
    """The ``feature-moments`` phase's config (and the ``data-source`` query's with it)."""
    return {"scaling": scaling,
            "privacy-threshold": int(getattr(strategy, "privacy_threshold", 2))}


def columns_of(record: dict[str, Any] | None) -> list[ColumnInfo] | None:
    """The columns a ``data-source`` reply described (``None``: it described none).

    Raises
    ------
    ValueError
        On a malformed record.
    """
    if record is None:
        return None
    names, kinds = list(record["names"]), list(record["kinds"])
    unique = list(record["unique"])
    if not (len(names) == len(kinds) == len(unique)):
        raise ValueError("malformed columns record: names, kinds and unique differ in length")
    rows = int(record.get("rows", 0))
    return [ColumnInfo(str(n), str(k), bool(u), rows) for n, k, u in zip(names, kinds, unique,
                                                                          strict=True)]


def _set(strategy: Any, transform: FeatureTransform | None) -> None:
    strategy.record.set_features(transform)


def prepare_features(strategy: Any, grid: Any, timeout: float) -> FeatureTransform | None:
    """Agree on the features and their scaling before round 1 (see the module).

    Returns
    -------
    FeatureTransform or None
        ``None`` when the algorithm takes its rows as they are (``scales_features`` false,
        e.g. DeepFeCA's images) or no client described its columns.

    Raises
    ------
    SchemaError
        When the sites' columns do not make one federation (before any training message).
    ValueError
        When a scaling cannot be computed (a client without named columns, ``minmax``
        under secure aggregation).
    """
    options: FeatureOptions = strategy.feature_options
    _set(strategy, None)
    if not options.active:
        return None
    if options.scaling is None:  # columns named, rows not scaled (no spread check)
        options = dataclasses.replace(options, scaling="none")
    if not strategy.scales_features:
        if options.scaling != "none":
            logger.info("%s: scaling=%r does not apply (%s); its rows are used as they are",
                        strategy.name, options.scaling, strategy.scales_features_why)
        return None
    records = getattr(strategy, "site_columns", None)
    absent = getattr(strategy, "site_absent", None) or {}
    if records is None:
        nodes = strategy.wait_for_nodes(grid)
        before = dict(getattr(strategy, "run_absent", {}))
        config = data_source_config(strategy)
        replies = strategy.exchange(grid, 0, DATA_SOURCE_PHASE,
                                    per_node={int(n): ([], config) for n in nodes},
                                    min_replies=0, timeout=timeout)
        # a client whose description was dropped (logged) may still answer the rounds
        strategy.run_absent = before
        strategy.record.data_sources = replies  # (the algorithm's start reads them too)
        records = {r.client_id: r.columns for r in replies}
        absent = {strategy.who(n): why for n, why in replies.absent.items()}
    described = {}
    for cid, rec in sorted(records.items()):
        try:
            columns = columns_of(rec)
        except (KeyError, TypeError, ValueError) as ex:  # checked first by the contract
            logger.warning("%s: dropping the columns of client %d: %s", DATA_SOURCE_PHASE,
                           cid, ex)
            continue
        if columns is not None:
            described[cid] = columns
    silent = sorted(cid for cid, rec in records.items() if rec is None)
    if len(records) < strategy.min_nodes:  # never past round 0 with fewer than min-nodes
        reasons = "; ".join(f"{who} {why}" for who, why in absent.items()) or "no reply"
        raise ValueError(
            f"round 0: {len(records)} client(s) described their data, fewer than "
            f"min-nodes={strategy.min_nodes}: {reasons}. Fix those sites (each reason "
            "above), raise round-timeout if they did not reply in time, or lower min-nodes")
    if not described:
        if options.scaling != "none" or options.feature_columns:
            raise ValueError(
                f"scaling={options.scaling!r}: client(s) {', '.join(map(str, silent))} "
                "answered without describing their columns (clients that are not "
                "flwr-clustering's ClusteringClient): run with scaling='none'")
        return None
    if silent:
        raise SchemaError(
            f"client(s) {', '.join(map(str, silent))} did not describe their columns while "
            "the others did: every client must be a flwr-clustering client (or run the "
            "federation without them)")
    schema = agree_schema({f"client {cid}": cols for cid, cols in described.items()},
                          feature_columns=options.feature_columns,
                          index_column=options.index_column,
                          categorical_columns=options.categorical_columns,
                          datetime_columns=options.datetime_columns)
    strategy.feature_schema = schema
    for note in schema.notes:
        logger.warning("%s", note)
        strategy.run_warnings.append(note)
    policy = _missing_policy(strategy, options)
    if getattr(strategy, "dp", False):
        return _names_only_under_dp(strategy, schema, options, len(described), policy)
    categories = _categories(strategy, grid, schema, timeout) if schema.categorical else ()
    encoded = tuple(one_hot_name(c, level) for c, levels in categories for level in levels)
    features = schema.features + encoded
    missing = _TRANSFORM_MISSING[policy]
    # the moments' transform: the columns, no fill yet (a missing cell stays NaN and is
    # left out of the sums; with 'drop' its row is left out)
    dates = schema.datetime
    _set(strategy, FeatureTransform(features, categories=categories, missing=missing,
                                    datetimes=dates))
    merged = _merged_moments(strategy, grid)
    count, total, sumsq, lo, hi, sites, rows = _moments(strategy, grid, features, records,
                                                        timeout, options.scaling, merged)
    if options.robust_scaling:  # the sites' medians decide whose sums set mean and scale
        total, sumsq = _robust_totals(strategy, features, len(schema.features))
    if policy == "drop":  # a site left without rows is refused, never silently dropped
        empty = [why for why in rows.absent.values() if DROP_LEAVES_NO_ROW in why]
        if empty:
            raise ValueError("missing='drop' leaves a site without rows: " + "; ".join(empty))
    fill, imputed_rows = _missing_cells(strategy, policy, features, count, total, rows)
    if policy == "drop":
        _declare_kept_rows(strategy, rows)
    center, scale = scaling_from_moments(options.scaling, count, total, sumsq, lo, hi,
                                         rows=imputed_rows)
    if categories and options.scaling == "standard" and options.categorical_weight == "balanced":
        # each categorical variable weighs like one standardised feature; its one-hot
        # features keep their centre (the level's share), the variable's scale from the
        # same sums (sum / count of a one-hot feature is its level's share)
        numeric = len(schema.features)
        shares = np.divide(total[numeric:], count[numeric:],
                           out=np.zeros(len(encoded)), where=count[numeric:] > 0)
        scale = np.concatenate([scale[:numeric], categorical_scales(
            [len(levels) for _, levels in categories], shares)])
    if options.scaling == "none":
        warning = spread_warning(count, total, sumsq, features)
        if warning is not None:
            logger.warning("%s", warning)
            strategy.run_warnings.append(warning)
        transform = FeatureTransform(features, categories=categories, missing=missing,
                                     fill=fill, datetimes=dates)
    else:
        transform = FeatureTransform(features, options.scaling,
                                     tuple(map(float, center)), tuple(map(float, scale)),
                                     categories, missing, fill, datetimes=dates)
    _unit_check(strategy, options, schema.features)
    _set(strategy, transform)
    _totals_unit_check(strategy, grid, options, schema.features, timeout)
    # each client's sums of its rows as it holds them from now on (filled cells included):
    # they bound the means it may send (check_means_within_rows)
    strategy.rules.client_moments = {
        cid: RowMoments.from_sums(*_filled_sums(sums, fill, strategy, cid), transform.center,
                                  transform.scale)
        for cid, sums in getattr(strategy, "client_sums", {}).items()}
    strategy.feature_summary = {
        "features": list(features), "index-column": schema.index_column,
        "categorical-columns": {c: list(levels) for c, levels in categories},
        **({"categorical-weight": options.categorical_weight} if categories else {}),
        **({"robust-scaling": {"set-aside": strategy.robust_set_aside}}
           if options.robust_scaling else {}),
        "datetime-columns": list(dates), "scaling": options.scaling,
        "rows": int(count.max()) if count.size else 0,
        "sites": sites, "center": list(transform.center), "scale": list(transform.scale),
        "missing": policy, "fill": list(transform.fill),
        "missing-cells": {f: int(m) for f, m in zip(features, rows.read - count,
                                                    strict=True) if m > 0}
        if policy != "drop" else {},
        "rows-read": int(rows.read.max()) if rows.read.size else 0,
        "incomplete-rows": int(rows.incomplete.sum()),
        "incomplete-rows-per-site": dict(rows.per_site)}
    names = ", ".join(features[:8]) + (", ..." if len(features) > 8 else "")
    logger.info("features: %d agreed by %d clients [%s]; scaling %s from %d rows of %d "
                "sites", len(features), len(described), names, options.scaling,
                int(count.max()) if count.size else 0, sites)
    return transform


def _robust_totals(strategy: Any, features: tuple[str, ...], numeric: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``robust-scaling``: the federation's sum and sum of squares of every feature.

    The sites whose moments of a numeric feature lie far from the median site's are set
    aside from it and named (:func:`~flwr_clustering.data.schema.robust_moments`).
    """
    sums = strategy.client_sums
    found = robust_moments({f"client {cid}": s for cid, s in sorted(sums.items())}, numeric)
    # result.json's features: the sites set aside, per feature name
    strategy.robust_set_aside = {site: [features[j] for j in sorted(aside)]
                                 for site, aside in sorted(found.set_aside.items())}
    for text in robust_scaling_warnings(found, features, len(sums)):
        logger.warning("%s", text)
        strategy.run_warnings.append(text)
    return found.total, found.sumsq


def _missing_policy(strategy: Any, options: FeatureOptions) -> str:
    """The run's ``missing`` policy, checked against its algorithm.

    Raises
    ------
    ValueError
        ``missing='partial'`` for an algorithm that needs complete rows (naming the ones
        that cluster on observed features, and the other policies).
    """
    reads = bool(getattr(strategy, "reads_missing", False))
    policy = options.policy(reads)
    if policy == "partial" and not reads:
        # an algorithm that clusters rows with NaN only when asked (FKM: partial distances)
        if getattr(strategy, "partial_rows", False):
            problem = strategy.partial_rows_problem()
            if problem is not None:
                raise ValueError(f"missing='partial' with {strategy.name}: {problem}")
            return policy
        if getattr(getattr(strategy, "inner", None), "partial_rows", False):
            raise ValueError(
                f"missing='partial' with {strategy.name} runs one start at a given k: run with "
                "a number k and n-init=1 (a search over k or starts scores whole rows)")
        raise ValueError(
            f"missing='partial' clusters each row on its observed features, which "
            f"{strategy.name} does not do (it needs complete rows): run with missing='mean' "
            "(the federation's mean of each feature) or missing='drop' (rows with a "
            "missing cell left out), or with a masked algorithm (masked-federated, "
            "masked-oneshot) or fkm (server-update='lloyd')")
    return policy


@dataclass(frozen=True)
class _Rows:
    """The rows behind the feature moments: as read, and with a missing cell."""

    read: np.ndarray  # per feature: the rows of the sites that sent moments
    incomplete: np.ndarray  # 0-d: the rows with a missing cell (federation)
    per_site: tuple[tuple[str, int], ...] = ()  # plain runs: each site's
    absent: dict = field(default_factory=dict)  # plain runs: {node: why} without moments


def _missing_cells(strategy: Any, policy: str, features: tuple[str, ...], count: np.ndarray,
                   total: np.ndarray, rows: _Rows
                   ) -> tuple[tuple[float, ...], np.ndarray | None]:
    """The fill of ``missing='mean'`` (and the rows it scales over), checks and warnings.

    Raises
    ------
    ValueError
        A feature without any observed value, a feature missing at more than
        :data:`MAX_MISSING_SHARE` of the rows at every site (``mean``), or no complete row
        (``drop``), naming the feature or the option.
    """
    incomplete = int(rows.incomplete)
    per_site = ", ".join(f"{site}: {n}" for site, n in rows.per_site if n)
    if policy == "drop":
        if count.size and int(count.max()) == 0:
            raise ValueError(
                "missing='drop': every row at every site has a missing cell, so no row is "
                "left: run with missing='mean' (the federation's mean of each feature)")
        if incomplete:
            text = (f"missing='drop': {incomplete} of {int(rows.read.max())} rows have a "
                    f"missing cell and are left out of the training (labelled -1)"
                    + (f" ({per_site})" if per_site else ""))
            logger.warning("%s", text)
            strategy.run_warnings.append(text)
        return (), None
    if policy not in ("mean", "partial"):
        return (), None
    missing = rows.read - count
    unseen = [f for f, c in zip(features, count, strict=True) if c == 0]
    if unseen and policy == "mean":
        raise ValueError(
            f"no site observes the feature(s) {_names(unseen)} (every cell missing): leave "
            "them out (list the other columns in feature-columns)")
    share = np.where(rows.read > 0, missing / np.maximum(rows.read, 1), 0.0)
    too_many = _mostly_missing(strategy, features, share)
    if too_many and policy == "mean":
        raise ValueError(
            f"the feature(s) {_names(too_many)} are missing at more than "
            f"{MAX_MISSING_SHARE:.0%} of the rows of every site: most of their values "
            "would be the federation's mean, not data. Leave them out (list the other "
            "columns in feature-columns), or run with missing='drop' to use only the rows "
            "that have them")
    if policy == "partial":
        return (), None
    # the fill is kept even where no cell is missing: predict and model.json use it
    fill = tuple(float(v) for v in np.where(count > 0, total / np.maximum(count, 1), 0.0))
    if not missing.any():
        return fill, None
    shares = "; ".join(f"{f!r} {s:.1%} ({int(m)} of {int(n)} rows)"
                       for f, s, m, n in zip(features, share, missing, rows.read, strict=True)
                       if m > 0)
    text = (f"missing cells filled with the federation's mean of the feature "
            f"(missing='mean'): {shares}; {incomplete} rows had a missing cell"
            + (f" ({per_site})" if per_site else ""))
    logger.warning("%s", text)
    strategy.run_warnings.append(text)
    return fill, rows.read


def _declare_kept_rows(strategy: Any, rows: _Rows) -> None:
    """With ``missing='drop'`` a client's replies count its complete rows from now on.

    Plain runs know each site's (rows read minus rows with a missing cell); under secure
    aggregation (and differential privacy) the first training reply declares them.
    """
    incomplete = {int(site.split()[-1]): n for site, n in rows.per_site}
    for cid, read in strategy.rules.client_read_rows.items():
        if cid in incomplete:
            strategy.rules.client_rows[(cid, False)] = int(read) - incomplete[cid]


def _filled_sums(sums: tuple[np.ndarray, ...], fill: tuple[float, ...], strategy: Any,
                 cid: int) -> tuple[np.ndarray, ...]:
    """A site's (count, sum, sumsq) after its missing cells are filled with ``fill``."""
    count, total, sumsq = sums[:3]
    if not fill:
        return count, total, sumsq
    holes = strategy.rules.client_read_rows[cid] - count
    value = np.asarray(fill, dtype=np.float64)
    return count + holes, total + holes * value, sumsq + holes * value * value


def _mostly_missing(strategy: Any, features: tuple[str, ...], share: np.ndarray) -> list[str]:
    """Features missing at more than :data:`MAX_MISSING_SHARE` of every site's rows.

    Plain runs test every site (a feature one site records well is kept); under secure
    aggregation, where only the federation's totals are known, the federation's share.
    """
    sites = strategy.rules.client_read_rows
    sums = getattr(strategy, "client_sums", {})
    if sites and sums:
        mostly = np.ones(len(features), dtype=bool)
        for cid, read in sites.items():
            count = np.asarray(sums[cid][0], dtype=np.float64)
            mostly &= (read - count) > MAX_MISSING_SHARE * read
        return [f for f, m in zip(features, mostly, strict=True) if m]
    return [f for f, s in zip(features, share, strict=True) if s > MAX_MISSING_SHARE]


def _unit_check(strategy: Any, options: FeatureOptions, numeric: tuple[str, ...]) -> None:
    """Warn (or refuse, ``unit-check='refuse'``) where a site's feature looks in other units.

    From each site's sums of the rows as read (plain runs: the server has them); under
    secure aggregation the server has only the totals and does not check.
    """
    sums = getattr(strategy, "client_sums", {})
    if options.unit_check == "off" or len(sums) < 2:
        return
    d = len(numeric)
    found = unit_mismatches({f"client {cid}": tuple(a[:d] for a in parts)
                             for cid, parts in sorted(sums.items())}, numeric)
    if not found:
        return
    if options.unit_check == "refuse":
        raise ValueError("unit-check='refuse': " + " ".join(found))
    for text in found:
        logger.warning("%s", text)
        strategy.run_warnings.append(text)


def _totals_unit_check(strategy: Any, grid: Any, options: FeatureOptions,
                       numeric: tuple[str, ...], timeout: float) -> None:
    """The unit check of the summing exchange: under secure aggregation each site flags itself.

    The plain exchange has nothing to add (:func:`_unit_check` read each site's sums); the
    secure one runs one more exchange (:func:`flwr_clustering.secure.features.unit_check`)
    and the server learns how many sites flagged each feature, never which.
    """
    transform = strategy.feature_transform
    if options.unit_check == "off" or transform is None or transform.scaling != "standard":
        return
    found, malformed = strategy.summer.unit_check(grid, transform.features, numeric, timeout)
    if malformed is not None:
        logger.warning("%s", malformed)
        strategy.run_warnings.append(malformed)
        return
    if found and options.unit_check == "refuse":
        raise ValueError("unit-check='refuse': " + " ".join(found))
    for text in found:
        logger.warning("%s", text)
        strategy.run_warnings.append(text)


def _names(features: list[str]) -> str:
    return ", ".join(repr(f) for f in features[:10]) + (", ..." if len(features) > 10 else "")


def _names_only_under_dp(strategy: Any, schema: Schema, options: FeatureOptions,
                         clients: int, policy: str) -> FeatureTransform:
    """A differentially private run: the columns by name, no per-site statistic.

    The scaling's per-feature sums (and the category counts) would leave the sites without
    noise, outside the guarantee ``privacy.json`` reports, so a DP run takes its rows in
    the data's units and sends no ``feature-moments`` (nor ``categories``) message.
    """
    if options.robust_scaling:
        raise ValueError(
            "dp-epsilon > 0 with robust-scaling=true: a differentially private run sends no "
            "per-feature sums (they would leave the sites without noise), so there is no "
            "site's moments to set aside: run with robust-scaling=false and scaling='none'")
    if options.scaling != "none":
        raise ValueError(
            f"dp-epsilon > 0 with scaling={options.scaling!r}: the scaling needs each site's "
            "per-feature sums, which the differential-privacy guarantee does not cover; run "
            "with scaling='none' (rows in the data's units: give data-bound, the largest L2 "
            "norm of a row, in those units, and put the features on comparable scales at "
            "the sites with a scaling agreed beforehand)")
    if schema.categorical:
        raise ValueError(
            "dp-epsilon > 0 with categorical-columns: agreeing on the levels needs each "
            "site's category counts, which the differential-privacy guarantee does not "
            "cover; encode those columns at the sites beforehand")
    if options.missing == "mean":
        raise ValueError(
            "dp-epsilon > 0 with missing='mean': the federation's means would need each "
            "site's per-feature sums without noise, which the differential-privacy "
            "guarantee does not cover; run with missing='drop' (rows with a missing cell "
            "left out at their site)")
    # missing='auto' under DP: a site with a missing cell refuses (no federation mean)
    transform = FeatureTransform(schema.features, missing=_TRANSFORM_MISSING[policy],
                                 datetimes=schema.datetime)
    _set(strategy, transform)
    strategy.rules.client_moments = {
        cid: RowMoments.from_sums(*sums, transform.center, transform.scale)
        for cid, sums in getattr(strategy, "client_sums", {}).items()}
    strategy.feature_summary = {
        "features": list(schema.features), "index-column": schema.index_column,
        "categorical-columns": {}, "datetime-columns": list(schema.datetime),
        "scaling": "none", "rows": None, "sites": clients,
        "center": [], "scale": []}
    logger.info("features: %d agreed by %d clients; dp-epsilon > 0: no per-feature sums "
                "are sent", len(schema.features), clients)
    # without the sums nothing can tell raw units that drown the other features: say so
    warning = ("dp-epsilon > 0: the features are clustered in their own units, unchecked "
               "(their spreads would need per-site sums without noise); a feature with a "
               "much wider range than the others decides the clusters: scale them at the "
               "sites with an agreed scaling beforehand")
    logger.warning("%s", warning)
    strategy.run_warnings.append(warning)
    return transform


def _categories(strategy: Any, grid: Any, schema: Schema, timeout: float
                ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The levels of the declared categorical columns, agreed from the sites' counts."""
    if strategy.summer.categories_problem is not None:
        raise ValueError(strategy.summer.categories_problem)
    threshold = int(getattr(strategy, "privacy_threshold", 2))
    config = {"categorical-columns": json.dumps(list(schema.categorical)),
              "privacy-threshold": threshold}
    before = dict(getattr(strategy, "run_absent", {}))
    replies = strategy.exchange(grid, 0, CATEGORIES_PHASE, (), config, timeout=timeout)
    strategy.run_absent = before
    sites, continuous = {}, {}
    for r in replies:
        try:
            counts = json.loads(str((r.columns or {})["categories"]))
            sites[f"client {r.client_id}"] = {
                str(c): {str(v): int(n) for v, n in dict(values).items()}
                for c, values in dict(counts).items()}
            # the declared columns the client found continuous (names only)
            flagged = json.loads(str((r.columns or {}).get("continuous", "[]")))
            if flagged:
                continuous[f"client {r.client_id}"] = [str(c) for c in flagged]
        except (KeyError, TypeError, ValueError, RecursionError) as ex:
            # the reply contract checks these first: a second line, a drop as there
            sites.pop(f"client {r.client_id}", None)
            continuous.pop(f"client {r.client_id}", None)
            _drop_round_zero(strategy, replies.absent, r, CATEGORIES_PHASE,
                             f"malformed categories: {type(ex).__name__}")
    categories = agree_categories(sites, schema.categorical, threshold,
                                  continuous=continuous)
    for column, levels in categories:
        logger.info("categorical column %r: %d levels agreed by %d clients %s", column,
                    len(levels), len(sites), list(levels[:10]))
    return categories


def _drop_round_zero(strategy: Any, absent: dict[int, str], reply: Any, phase: str,
                     why: str) -> None:
    """Leave a malformed round-0 reply out (into ``absent``), logged at WARNING.

    The log names the rule, never a value.
    """
    logger.warning("round 0 %s: dropping reply of %s: %s", phase, strategy.who(reply.node_id),
                   why)
    absent[reply.node_id] = why


def _merged_moments(strategy: Any, grid: Any) -> Collected | None:
    """The feature moments the ``data-source`` replies carried, as the phase's replies.

    The run's ``data-source`` exchange as it happened (:func:`known_data_sources`: what
    it sent, what it collected). ``None`` (the ``feature-moments`` phase is sent) unless
    the query asked for them in the features the run agreed (:func:`moments_with_columns`,
    the transform just set), with the same scaling and privacy threshold, every node
    replied with them and the nodes connected now are those (the phase would go to every
    connected node). Each reply then passes the rules its
    ``feature-moments`` reply would have (the row count of round 0), and the node is
    known by its client id, as that exchange leaves them.
    """
    known = known_data_sources(strategy)  # the data-source exchange, as it happened
    if known is None or not known.asked.messages:
        return None
    sent = dict(known.asked.messages[0].content["config"])  # (every node's the same)
    if MOMENTS_TRANSFORM_KEY not in sent:
        return None
    replies, absent = list(known), known.absent
    options = strategy.feature_options
    asked = {**_moments_config(strategy, options.scaling or "none"),
             MOMENTS_TRANSFORM_KEY: strategy.record.feature_json}
    why = None
    if any(sent.get(key) != value for key, value in asked.items()):
        why = "the agreed features are not the ones the data-source query named"
    elif absent or not replies or any(not set(MOMENT_KEYS[:4]) <= set(r.stats)
                                      for r in replies):
        why = "not every node sent them with its columns"
    elif sorted(r.node_id for r in replies) != sorted(int(n) for n in
                                                      strategy.wait_for_nodes(grid)):
        why = "the connected nodes changed since the data-source query"
    if why is not None:
        logger.info("%s: the feature moments come in their own phase (%s)", strategy.name,
                    why)
        return None
    for r in replies:  # the rules a feature-moments reply keeps (a row count repeated)
        try:
            strategy.check_reply(FEATURE_MOMENTS_PHASE, r.client_id, {
                "num-examples": int(np.asarray(r.stats[MOMENT_KEYS[3]])[0]),
                "client-id": r.client_id}, None, r.stats)
        except (KeyError, ValueError, TypeError, IndexError) as ex:
            logger.info("%s: the feature moments come in their own phase (client %d: %s)",
                        strategy.name, r.client_id, ex)
            return None
    for r in replies:
        strategy.nodes.client_of[int(r.node_id)] = int(r.client_id)
    logger.info("%s: the feature moments of %d clients came with their columns "
                "(data-source): no feature-moments exchange", strategy.name, len(replies))
    return Collected(replies, received=len(replies))


def _moments(strategy: Any, grid: Any, features: tuple[str, ...], records: dict[int, Any],
             timeout: float, scaling: str, merged: Collected | None = None
             ) -> tuple[Any, ...]:
    """The federation's per-feature totals (count, sum, sumsq, min, max), its sites, rows.

    Each reply's counts are checked against the rows the site says it read (a count above
    them is a malformed reply). ``merged``: the ``data-source`` replies that carried the
    moments (:func:`_merged_moments`), read as the phase's replies, which is not sent.
    """
    config = _moments_config(strategy, scaling)
    d = len(features)
    # under secure aggregation the totals only (each site's sums stay hidden)
    secure = strategy.summer.feature_moments(grid, features, records, config, timeout)
    if secure is not None:
        rows = _Rows(np.full(d, secure.read), np.asarray(secure.incomplete))
        return secure.count, secure.total, secure.sumsq, None, None, secure.sites, rows
    # a site with fewer rows than the privacy threshold withholds its sums; its rows are
    # scaled with the others' totals (it takes part in every later round)
    replies = merged
    if replies is None:
        before = dict(getattr(strategy, "run_absent", {}))
        replies = strategy.exchange(grid, 0, FEATURE_MOMENTS_PHASE, (), config,
                                    min_replies=1, timeout=timeout)
        # a client without moments still takes part in the run: not absent from the model
        strategy.run_absent = before
    failed = {node: why for node, why in replies.absent.items()
              if "privacy threshold" not in why}
    if len(replies.absent) - len(failed) + len(replies) < strategy.min_nodes:
        # withheld sums (a small site) still take part; a failed site does not
        raise ValueError(
            f"round 0 {FEATURE_MOMENTS_PHASE}: {len(replies)} client(s) sent their feature "
            f"sums, fewer than min-nodes={strategy.min_nodes} with the ones that withheld "
            "them: " + "; ".join(f"{strategy.who(node)} {why}" for node, why in failed.items())
            + ". Fix those sites (each reason above), raise round-timeout if they did not "
            "reply in time, or lower min-nodes")
    if replies.absent:
        text = ("feature scaling without " + "; ".join(
            f"{strategy.who(node)} ({why})" for node, why in replies.absent.items())
            + ": the scaling comes from the other sites' sums")
        logger.warning("%s", text)
        strategy.run_warnings.append(text)
    absent = replies.absent  # the exchange's, with the replies dropped below
    parts, read, kept = [], {}, []
    for r in replies:
        try:
            arrays = [np.asarray(r.stats[k], dtype=np.float64) for k in MOMENT_KEYS[:3]]
            if any(a.shape != (d,) for a in arrays) or not all(
                    np.isfinite(a).all() for a in arrays) or (arrays[0] < 0).any():
                raise ValueError(f"expected 3 finite arrays of {d} values")
            counted = np.asarray(r.stats[MOMENT_KEYS[3]], dtype=np.float64)
            if counted.shape != (2,) or not np.isfinite(counted).all() or not (
                    0 <= counted[1] <= counted[0]) or (arrays[0] > counted[0]).any():
                raise ValueError("expected the rows read and the rows with a missing cell, "
                                 "at least every feature's count")
            if scaling == "minmax":
                arrays += [np.asarray(r.stats[k], dtype=np.float64) for k in MOMENT_KEYS[4:]]
        except (KeyError, ValueError) as ex:
            # the reply contract checks these first: a second line, a drop as there
            _drop_round_zero(strategy, absent, r, FEATURE_MOMENTS_PHASE,
                             f"malformed feature moments: {ex}")
            continue
        parts.append(arrays)
        kept.append(r)
        read[int(r.client_id)] = counted
    replies = kept
    if not parts:
        raise ValueError("no client sent its feature moments")
    # each site's rows as read, for the share of missing cells per site
    strategy.rules.client_read_rows = {cid: float(c[0]) for cid, c in read.items()}
    # each client's own sums bound the means it may send later (check_means_within_rows)
    strategy.rules.client_sums = {int(r.client_id): tuple(p[:3])
                                  for r, p in zip(replies, parts, strict=True)}
    warning = self_scaled_warning({f"client {r.client_id}": tuple(p[:3])
                                   for r, p in zip(replies, parts, strict=True)})
    if warning is not None:
        logger.warning("%s", warning)
        strategy.run_warnings.append(warning)
    count = np.sum([p[0] for p in parts], axis=0)
    total = np.sum([p[1] for p in parts], axis=0)
    sumsq = np.sum([p[2] for p in parts], axis=0)
    lo = hi = None
    if scaling == "minmax":
        with np.errstate(all="ignore"):
            lo = np.nanmin([p[3] for p in parts], axis=0)
            hi = np.nanmax([p[4] for p in parts], axis=0)
    counted = np.sum(list(read.values()), axis=0)
    rows = _Rows(np.full(d, counted[0]), np.asarray(counted[1]),
                 tuple((f"client {cid}", int(c[1])) for cid, c in sorted(read.items())),
                 absent)
    return count, total, sumsq, lo, hi, len(parts), rows
