"""What a client computes for the library's phases: counts, sums and names, never a row.

The phases every client answers without its algorithm's code (:mod:`.phases` holds the
table that answers them) read the client's rows through these functions:

* :func:`data_source_metrics` and :func:`columns_record`: the ``data-source`` reply (where
  the rows came from, their fingerprint, the columns' names and kinds);
* :func:`feature_moments_arrays`: the per-feature sums of the federation's scaling;
* :func:`unit_check_arrays`: the unit check under secure aggregation;
* :func:`split_check_arrays`: the split check and the refinement after the last round;
* :func:`secure_evaluation_arrays`: the evaluation's statistics as secure aggregation sums
  them.

Each takes the client (duck-typed: its ``X``, ``client_id`` and the attributes
:class:`~flwr_clustering.clients.base.ClusteringClient` sets) and returns plain numbers and
arrays; packing them into a reply is the phase handler's job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from flwr.app import ConfigRecord

from ..algorithms.cluster_split import AxisBins, client_histograms, client_scatter, refine_stats
from ..data.schema import (
    FeatureTable,
    FeatureTransform,
    SchemaError,
    SiteDataError,
    column_moments,
    describe_columns,
    site_unit_powers,
    unit_factor,
)
from ..protocol import SPLIT_HISTOGRAM_PHASE, SPLIT_SCATTER_PHASE
from .integrity import data_hash

__all__ = [
    "columns_record",
    "data_source_metrics",
    "feature_moments_arrays",
    "secure_evaluation_arrays",
    "split_check_arrays",
    "unit_check_arrays",
]

logger = logging.getLogger(__name__)




def data_source_metrics(client: Any) -> tuple[int, dict[str, int]]:
    """The reply to the ``data-source`` phase: ``(num-examples, metrics)``.

    ``data-local`` is 1 for rows read from a local file, 0 for a partition of a built-in
    dataset (then ``partition-id`` and ``num-partitions``), -1 when the client does not say
    (its ``data_source`` attribute, set by the App's ``client_fn``, is missing);
    ``num-features`` and ``data-hash``
    (:func:`~flwr_clustering.clients.integrity.data_hash`) describe the client's rows.
    """
    source = getattr(client, "data_source", None)
    metrics: dict[str, int] = {"data-local": -1 if source is None
                               else int(bool(source.get("local"))),
                               "allow-raw-rows": int(bool(getattr(client, "allow_raw_rows",
                                                                  True)))}
    for key in ("partition-id", "num-partitions"):
        if source is not None and source.get(key) is not None:
            metrics[key] = int(source[key])
    X = getattr(client, "X", None)
    if X is None:
        return 0, {**metrics, "num-features": -1, "data-hash": -1}
    X = np.asarray(X)
    metrics["num-features"] = int(np.prod(X.shape[1:], dtype=np.int64))
    metrics["data-hash"] = data_hash(X)
    return len(X), metrics


def columns_record(client: Any, magnitudes: bool = False,
                   datetimes: Sequence[str] = ()) -> ConfigRecord | None:
    """The ``columns`` record of a ``data-source`` reply: names and kinds, never values.

    ``names``, ``kinds`` (``numeric``, ``integer``, ``text``, ``datetime``), ``unique`` (1
    where every row holds another integer or text value), ``rows`` and, when the server
    asks (``magnitudes``: a secure scaling exchange needs it), ``magnitude``: per numeric
    or date column the power of two above its largest ``|value|`` (a date's in seconds
    since the epoch, as is a text column the run declares in ``datetimes``; 0 for other
    text), an order of magnitude, not a value. ``None`` for a client without rows.
    """
    X = getattr(client, "X", None)
    if getattr(client, "feature_table", None) is not None:
        table = client.feature_table
    elif X is not None and np.ndim(X) == 2:  # not images (DeepFeCA): no columns to name
        table = client.table() if hasattr(client, "table") else FeatureTable(np.asarray(X))
    else:
        return None
    infos = describe_columns(table)
    record: dict[str, Any] = {
        "names": [c.name for c in infos], "kinds": [c.kind for c in infos],
        "unique": [int(c.unique) for c in infos], "rows": int(len(table.X))}
    if not magnitudes:
        return ConfigRecord(record)
    # the columns in describe_columns' order: numbers, text (a date as text: its
    # seconds), dates
    seconds = [_seconds_or_none(table, c.name) if c.kind == "datetime" or c.name in datetimes
               else np.zeros(0) for c in infos[table.X.shape[1]:]]
    with np.errstate(all="ignore"):
        largest = np.nanmax(np.abs(np.asarray(table.X, dtype=np.float64)), axis=0,
                            initial=0.0) if table.X.size else np.zeros(table.X.shape[1])
        largest = [*np.atleast_1d(largest), *(np.nanmax(np.abs(v), initial=0.0)
                                              for v in seconds)]
    exponents = [int(np.ceil(np.log2(v))) if np.isfinite(v) and v > 0 else 0
                 for v in largest]
    return ConfigRecord({**record, "magnitude": exponents})


def _seconds_or_none(table: FeatureTable, name: str) -> np.ndarray:
    """A date column's seconds, for its magnitude.

    None for text that is not dates: the federation's transform refuses it later, naming
    the row.
    """
    try:
        return table.seconds(name)
    except SchemaError:
        return np.zeros(0)


def feature_moments_arrays(client: Any, config: dict[str, Any]) -> list[np.ndarray]:
    """The reply to the ``feature-moments`` phase: per-feature sums for the scaling.

    ``[count, sum, sumsq]`` of the client's rows in the federation's features (NaN left
    out; with ``missing='drop'`` the complete rows only), each value divided by ``2**e``
    of the config's ``moment-exponents`` (a secure exchange keeps its totals in the
    fixed-point range), then ``rows``: the rows as read and the rows with a missing cell
    (two counts); with ``scaling='minmax'`` also ``[min, max]`` (one row's value each:
    refused under secure aggregation by the server).

    Raises
    ------
    ValueError
        When the client has fewer rows than the config's ``privacy-threshold`` (its sums
        would be its rows): the reply is withheld.
    """
    X = np.asarray(client.X, dtype=np.float64)
    threshold = int(config.get("privacy-threshold", 2))
    if len(X) < threshold:
        raise ValueError(f"client {client.client_id}: {len(X)} rows, fewer than the privacy "
                         f"threshold ({threshold}): its feature sums are withheld")
    exponents = config.get("moment-exponents")
    if exponents:
        exponents = json.loads(exponents) if isinstance(exponents, str) else exponents
        if len(exponents) != X.shape[1]:
            raise ValueError(f"client {client.client_id}: {len(exponents)} moment exponents "
                             f"for {X.shape[1]} features")
        X = X / np.exp2(np.asarray(exponents, dtype=np.float64))
    with np.errstate(over="ignore"):
        m = column_moments(X)
    overflow = ~(np.isfinite(m["sum"]) & np.isfinite(m["sumsq"]))
    if overflow.any():
        j = int(np.flatnonzero(overflow)[0])
        top = float(np.nanmax(np.abs(X[:, j])))
        key = getattr(client, "_features_key", None)
        names = FeatureTransform.from_json(key).features if key else ()
        name = names[j] if j < len(names) else None
        what = f"column {name!r}" if name is not None else f"feature {j}"
        why = (f"its sum of squares overflows float64 (above "
               f"{np.finfo(np.float64).max:.3g}), so no scaling (nor a centroid's squared "
               "distance) can be computed in these units. Rescale that column before the "
               "run (for example divide it by a power of ten), with the same factor at "
               "every site")
        # the largest value is one row's: the site's log only
        raise SiteDataError(f"client {client.client_id}: {what}: {why}",
                            f"client {client.client_id}: {what} reaches {top:.3g}: {why}")
    mask = getattr(client, "row_mask", None)
    if mask is not None:  # missing='drop': the rows as read, those left out
        rows = [len(mask), int(len(mask) - np.count_nonzero(mask))]
    else:
        rows = [len(X), int(np.count_nonzero(np.isnan(X).any(axis=1))) if X.size else 0]
    arrays = [m["count"], m["sum"], m["sumsq"], np.asarray(rows, dtype=np.float64)]
    if config.get("scaling") == "minmax":
        arrays += [m["min"], m["max"]]
    return arrays


def unit_check_arrays(client: Any) -> list[np.ndarray]:
    """A client's unit check under secure aggregation: ``[flags (d,), powers (d,)]``.

    The client's rows in the federation's features, back in original units, against the
    federation's mean and standard deviation that its feature transform carries
    (:func:`~flwr_clustering.data.schema.site_unit_powers`). A flagged feature is logged
    on the node, naming it; the server receives only the totals over the sites.
    """
    key = getattr(client, "_features_key", None)
    transform = FeatureTransform.from_json(key) if key else None
    if transform is None or not transform.scaled:
        raise ValueError(f"client {client.client_id}: the unit check needs the federation's "
                         "scaling (scaling='standard')")
    d = len(transform.numeric_features)
    X = transform.inverse(np.asarray(client.X, dtype=np.float64))[:, :d]
    powers = site_unit_powers(X, transform.center[:d], transform.scale[:d])
    for j in np.flatnonzero(powers):
        logger.warning("client %d: its %r is about %s of the federation's (mean %.3g vs %.3g): "
                       "a unit mismatch? Export that column in the other sites' units",
                       client.client_id, transform.features[j], unit_factor(int(powers[j])),
                       float(np.nanmean(X[:, j])), transform.center[j])
    pad = np.zeros(len(transform.features) - d)
    return [np.concatenate([(powers != 0).astype(np.float64), pad]),
            np.concatenate([powers.astype(np.float64), pad])]


def split_check_arrays(client: Any, phase: str, params: list[np.ndarray],
                       config: dict[str, Any]) -> list[np.ndarray]:
    """A client's reply to a phase of the split check or the refinement (float64 arrays).

    ``split-scatter`` (arrays ``[C]``): per cluster the count, sum and sum of outer
    products of the rows nearest to it; ``split-histograms`` (``[C, means, axes,
    edges]``): per cluster the counts of its rows in the bins along its main axis;
    ``refine`` (``[C]``): per cluster the sum and count of its rows, and the SSE of ``C``
    (:mod:`flwr_clustering.algorithms.cluster_split`). Only complete rows take part; a
    client with a cluster of fewer rows than the config's ``privacy-threshold`` (0 under
    secure aggregation, where only totals reach the server) sends zeros only.
    """
    X = np.asarray(client.X, dtype=np.float64)
    C = np.asarray(params[0], dtype=np.float64)
    if C.ndim != 2 or C.shape[1] != X.shape[1]:
        raise ValueError(f"client {client.client_id}: {phase}: centroids of shape {C.shape} "
                         f"for rows of {X.shape[1]} features")
    threshold = int(config.get("privacy-threshold", 2))
    if phase == SPLIT_SCATTER_PHASE:
        return list(client_scatter(X, C, threshold))
    if phase == SPLIT_HISTOGRAM_PHASE:
        means, axes, edges = (np.asarray(a, dtype=np.float64) for a in params[1:4])
        return [client_histograms(X, C, AxisBins(means, axes, edges), threshold)]
    sums, counts, sse = refine_stats(X, C, threshold)
    return [sums, counts, np.array([sse])]


def secure_evaluation_arrays(client: Any, C: np.ndarray, config: dict[str, Any]
                             ) -> list[np.ndarray]:
    """A client's evaluation statistics as the arrays secure aggregation sums.

    ``[head (5,), cluster-counts (k,), sum-x (d,), cluster-residuals (k, d)]`` and, with
    ``config["n-classes"]``, ``contingency (k, n_classes)``; ``head`` is rows, SSE,
    silhouette sum, whether the client has labels (0 or 1) and the sum of squares of its
    rows. The client's own
    :meth:`~flwr_clustering.clients.base.ClusteringClient.local_stats` computes them (a
    masked client's on its observed features; unobserved entries count 0), with nothing
    withheld under the privacy threshold: only the federation's totals reach the server
    (:mod:`flwr_clustering.secure`).
    """
    X = np.asarray(client.X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    k, d = C.shape
    width = int(config.get("n-classes") or 0)
    labelled = width > 0 and getattr(client, "y", None) is not None
    cfg = {key: v for key, v in config.items() if key != "n-classes"}
    if labelled:
        cfg["n-classes"] = width
    stats = client.local_stats(C, {**cfg, "privacy-threshold": 0})
    n = int(stats["num-examples"])
    head = np.array([n, stats["sse"], stats["silhouette-sum"], float(labelled),
                     float(np.nansum(np.square(X)))], dtype=np.float64)
    out = [head, np.asarray(stats["cluster-counts"], dtype=np.float64),
           np.nan_to_num(np.nansum(X, axis=0) if n else np.zeros(d)),
           np.nan_to_num(np.asarray(stats.get("cluster-residuals", np.zeros((k, d))),
                                    dtype=np.float64))]
    if width:
        table = np.zeros((k, width))
        if labelled:
            table = np.asarray(stats["contingency"], dtype=np.float64)
            if table.shape != (k, width):
                raise ValueError(f"labels outside the {width} classes of n-classes")
        out.append(table)
    if config.get("profile"):  # the cluster profile's spreads, last
        out.append(np.nan_to_num(np.asarray(
            stats.get("cluster-sq-residuals", np.zeros((k, d))), dtype=np.float64)))
    return out
