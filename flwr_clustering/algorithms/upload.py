"""What an upload claims, for the server's reply rules: one small protocol for every payload.

A strategy's parser turns a client's arrays into a payload (``LocalCentroids``,
``FeCAUpload``, ``GaussianUpload``, ...). The rules every reply keeps, whatever the
algorithm, read three things from it: the row counts it claims, the local means it claims
(with the rows behind each) and the feature dimension it reveals. A payload says them
itself, through :class:`Upload` (one method, ``claims``, returning :class:`Claims`); the
strategy base reads them with :func:`claims_of`, so no algorithm overrides a hook per
claim. A payload that does not keep the protocol (a bare array, a tuple) claims nothing.

No Flower import here (layer 1 of the architecture).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Arrays", "Claims", "Upload", "centre_claims", "claims_of"]


@dataclass(frozen=True)
class Claims:
    """What one upload claims (``None``: it claims nothing of the kind).

    Attributes
    ----------
    counts : numpy.ndarray of shape (k,) or (k, d), optional
        The rows behind each entry; per cluster and feature for masked data. The rules
        refuse counts that are negative or sum (per feature) to more than the client's
        rows.
    means : numpy.ndarray of shape (k, d), optional
        Local means of the client's rows (NaN where a feature is unobserved). The rules
        refuse a mean that no subset of the client's rows can have
        (:func:`~flwr_clustering.algorithms.local_centroids.check_means_within_rows`).
    mean_rows : numpy.ndarray of shape (k,) or (k, d), optional
        The rows each mean is held to; ``None``: :attr:`counts`. Ones hold a mean to the
        bound of a single row, which every row and every convex combination of rows
        keeps (a centre whose count is not of exactly the rows averaged).
    features : int, optional
        The feature dimension the upload reveals (replies of another dimension than the
        federation's are dropped).
    """

    counts: np.ndarray | None = None
    means: np.ndarray | None = None
    mean_rows: np.ndarray | None = None
    features: int | None = None

    def means_and_rows(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The claimed means and the rows behind each (``None``: no means claimed)."""
        if self.means is None:
            return None
        return self.means, self.counts if self.mean_rows is None else self.mean_rows

    def claims(self) -> Claims:
        """A ``Claims`` keeps the protocol itself (a payload that is nothing but claims)."""
        return self


@runtime_checkable
class Upload(Protocol):
    """A parsed payload that says what it claims."""

    def claims(self) -> Claims:
        """Return what this upload claims."""
        ...


_NOTHING = Claims()


def claims_of(payload: Any) -> Claims:
    """What ``payload`` claims: its :meth:`Upload.claims`, else nothing."""
    return payload.claims() if isinstance(payload, Upload) else _NOTHING


class Arrays(tuple):
    """A payload of plain arrays (a tuple of them) that says what it claims.

    For protocols whose upload is a few arrays the aggregation reads as they are
    (``payload[0]``, ``centres, supports = payload``): the parser wraps them with their
    :class:`Claims`, known when it reads them.

    Parameters
    ----------
    arrays : iterable
        The payload's items.
    claims : Claims, optional
        What they claim (default: nothing).
    """

    def __new__(cls, arrays: Any, claims: Claims | None = None) -> Arrays:
        """Build the tuple of ``arrays`` claiming ``claims``."""
        self = super().__new__(cls, arrays)
        self._claims = _NOTHING if claims is None else claims
        return self

    def claims(self) -> Claims:
        """What the arrays claim (:class:`Upload`)."""
        return self._claims


def centre_claims(centres: np.ndarray, counts: np.ndarray | None = None, *,
                  single_row: bool = False) -> Claims:
    """The claims of local centres ``(k, d)`` with the rows behind each (or none sent).

    Parameters
    ----------
    centres : numpy.ndarray of shape (k, d)
        The local centres (``k`` may be 0: then no dimension is revealed).
    counts : numpy.ndarray of shape (k,), optional
        The rows behind each centre; ``None``: the upload sends no counts.
    single_row : bool, default False
        Hold each centre to the bound of a single row (``m = 1``) instead of its count:
        for centres that are not the mean of exactly the rows counted, or whose count is
        not sent.
    """
    ones = np.ones(len(centres))
    return Claims(counts=counts, means=centres,
                  mean_rows=ones if single_row or counts is None else None,
                  features=int(centres.shape[1]) if len(centres) else None)
