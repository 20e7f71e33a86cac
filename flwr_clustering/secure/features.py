"""The feature steps of round 0 under secure aggregation: from the federation's totals only.

The plain exchange gives the server each site's feature sums, so the features step checks
every site on its own (its units, its rows, robust scaling). Under secure aggregation the
server learns only the totals; these are the steps that work from them, which the
:class:`~flwr_clustering.secure.exchange.SecureExchange` runs for the features step
(:mod:`flwr_clustering.strategies.features`):

- :func:`data_source_config`: the ``data-source`` query also asks each site for the power
  of two above each feature's largest magnitude, so that every total stays inside the
  secure sum's fixed-point range;
- :func:`feature_moments`: the per-feature count, sum and sum of squares (and the rows read)
  as one secure sum, scaled by those powers;
- :func:`unit_check`: each site compares its rows with the federation's mean and spread and
  flags a feature in other units; the server learns how many sites flagged each feature,
  never which;
- :data:`CATEGORIES_PROBLEM`: declared categorical columns need each site's category
  counts over values the server does not know, which a secure sum cannot give.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.schema import unit_factor
from ..protocol import FEATURE_MOMENTS_PHASE, UNIT_CHECK_PHASE

__all__ = ["CATEGORIES_PROBLEM", "FeatureTotals", "data_source_config", "feature_moments",
           "unit_check"]

#: Why declared categorical columns cannot run under secure aggregation.
CATEGORIES_PROBLEM = (
    "secure-aggregation=true: categorical-columns needs each site's category counts, which "
    "secure aggregation cannot sum over values the server does not know: run without "
    "categorical-columns (leave those columns out with feature-columns), or without secure "
    "aggregation")


@dataclass
class FeatureTotals:
    """The federation's per-feature moments, from one secure sum.

    Attributes
    ----------
    count, total, sumsq : numpy.ndarray
        Per feature: the values summed, their sum and their sum of squares.
    read : float
        The rows the sites read.
    incomplete : float
        The rows with a missing cell.
    sites : int
        The sites in the sums.
    """

    count: np.ndarray
    total: np.ndarray
    sumsq: np.ndarray
    read: float
    incomplete: float
    sites: int


def data_source_config(scaling: str, datetime_columns: tuple[str, ...]) -> dict[str, Any]:
    """The ``data-source`` query's config: a scaling asks for each feature's magnitude.

    With declared ``datetime-columns`` it names them too (a JSON list), so that a client
    gives the magnitude of a text column of dates in seconds since the epoch.
    """
    if scaling == "none":
        return {}
    if datetime_columns:
        return {"magnitudes": True, "datetime-columns": json.dumps(list(datetime_columns))}
    return {"magnitudes": True}


def feature_moments(summer: Any, grid: Any, features: tuple[str, ...],
                    records: dict[int, Any], config: dict[str, Any],
                    timeout: float | None) -> FeatureTotals:
    """The per-feature count, sum and sum of squares of every site's rows, summed securely.

    ``summer`` is the run's :class:`~flwr_clustering.secure.exchange.SecureExchange`.
    Each site scales its sums by the power of two above the federation's largest
    magnitude of the feature (from the ``data-source`` replies, ``records``), so that
    every total stays in the fixed-point range of the secure sum.

    Raises
    ------
    ValueError
        If the totals did not come back in their shapes.
    """
    magnitudes = [dict(zip(rec["names"], rec.get("magnitude", []), strict=False))
                  for rec in records.values() if rec is not None]
    exponents = [max(int(m.get(f, 0)) for m in magnitudes) for f in features]
    config = {**config, "moment-exponents": json.dumps(exponents), "moments-secure": True}
    totals = summer.send(grid, 0, FEATURE_MOMENTS_PHASE, (), config, timeout=timeout).totals
    if len(totals.sums) < 3:
        raise ValueError("secure feature moments: fewer than 3 totals came back")
    power = np.exp2(np.asarray(exponents, dtype=np.float64))
    if len(totals.sums) < 4 or np.shape(totals.sums[3]) != (2,):
        raise ValueError("secure feature moments: the rows' totals did not come back")
    count = np.round(np.asarray(totals.sums[0], dtype=np.float64))
    total = np.asarray(totals.sums[1], dtype=np.float64) * power
    sumsq = np.asarray(totals.sums[2], dtype=np.float64) * power * power
    read, incomplete = np.round(np.asarray(totals.sums[3], dtype=np.float64))
    return FeatureTotals(count, total, sumsq, read, incomplete, len(totals.nodes))


def unit_check(summer: Any, grid: Any, features: tuple[str, ...],
               numeric: tuple[str, ...], timeout: float | None) -> tuple[list[str], str | None]:
    """The unit check under secure aggregation: each site flags itself, the server sums.

    One more secure exchange (phase ``unit-check``): every client compares its rows with
    the federation's mean and spread, which its feature transform carries, and sends per
    feature a flag and the power of ten (:func:`~flwr_clustering.data.schema.
    site_unit_powers`).

    Returns
    -------
    found : list of str
        One text per feature that some site flagged (how many sites, the factor).
    malformed : str or None
        Why the check was left out (totals outside what the sites can send).
    """
    totals = summer.send(grid, 0, UNIT_CHECK_PHASE, (), {}, timeout=timeout).totals
    d = len(numeric)
    if len(totals.sums) < 2 or any(np.shape(a) != (len(features),) for a in totals.sums[:2]):
        raise ValueError("secure unit check: the flags' totals did not come back")
    flags = np.round(np.asarray(totals.sums[0], dtype=np.float64))[:d]
    powers = np.asarray(totals.sums[1], dtype=np.float64)[:d]
    sites = len(totals.nodes)
    # a site flags a feature once, with a power of ten a float64 can hold: totals outside
    # that come from a malformed reply (they are not used)
    if not (np.isfinite(flags).all() and np.isfinite(powers).all()
            and ((flags >= 0) & (flags <= sites)).all()
            and (np.abs(powers) <= 308 * np.maximum(flags, 0)).all()):
        return [], ("secure unit check: the flags' totals are outside what the sites can "
                    "send (a malformed reply): the check is left out")
    found = []
    for j in np.flatnonzero(flags > 0):
        n = int(flags[j])
        power = int(np.round(powers[j] / n))
        found.append(
            f"{n} site{'s' if n > 1 else ''}{chr(39)}{'' if n > 1 else 's'} {numeric[j]!r} "
            f"{'are' if n > 1 else 'is'} about "
            f"{unit_factor(power)} of the federation's (each site compared its rows with the "
            "federation's mean and spread; under secure aggregation the server does not "
            "know which site: its own log names it): a unit mismatch? Export that column in "
            "the other sites' units (unit-check='refuse' makes this an error, "
            "unit-check='off' silences it)")
    return found, None
