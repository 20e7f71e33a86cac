"""What both secure-aggregation protocols share: exact fixed-point digits and the outcome.

A client writes every value to sum in fixed point (:data:`FRACTION_BITS` fractional bits)
and splits the integer into balanced digits of a base ``B`` (a power of two) small enough
that ``n`` clients' digits sum without leaving the modulus; the server rebuilds the totals
from the digit sums (:func:`encode_fixed`, :func:`decode_fixed`). Integer totals are exact;
a float total is within :func:`sum_error_bound` of the exact sum. Used by Flower's SecAgg+
per exchange (:mod:`flwr_clustering.secure`, modulus ``2**32``) and by the run-level
protocol (:mod:`flwr_clustering.secure.session`, modulus ``2**64``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "FRACTION_BITS",
    "SECAGG_THRESHOLD",
    "VALUE_LIMIT",
    "SecureSum",
    "checked_values",
    "decode_fixed",
    "digits_for",
    "encode_fixed",
    "neighbours",
    "secagg_threshold_problem",
    "sum_error_bound",
]

#: Fixed-point resolution of the summed values: ``2**-FRACTION_BITS``.
FRACTION_BITS = 32
#: The largest magnitude a summed value may have (its fixed-point integer stays below
#: ``2**62``).
VALUE_LIMIT = float(2**30)
#: The default ``secagg-threshold``: the fraction of a client's neighbours whose shares
#: rebuild its keys (the others may drop out).
SECAGG_THRESHOLD = 0.6


def secagg_threshold_problem(threshold: float) -> str | None:
    """Why ``threshold`` cannot be a ``secagg-threshold`` (``None``: it can).

    The one rule of the threshold (the run config, the strategy and both protocols ask it):
    a fraction in ``(0, 1]``, as Flower's ``SecAggPlusWorkflow`` takes a float
    ``reconstruction_threshold`` (``0 < t <= 1``): at 0 no share would rebuild a key,
    above 1 more shares than a client has. Both protocols then ask at least 2 shares.
    """
    return None if 0.0 < threshold <= 1.0 else "must lie in (0, 1]"


def digits_for(base: int) -> int:
    """How many balanced base-``base`` digits hold a 63-bit signed integer."""
    return -(-63 // (base.bit_length() - 1))


def neighbours(clients: int) -> int:
    """How many clients (itself included) each client shares its keys with.

    SecAgg+'s sparse graph (Bell et al. 2020): ``2 ceil(log2 n) + 1`` (odd, as Flower
    asks), all clients when that is more. Costs grow with ``n`` times this, not ``n**2``
    (Flower's Shamir sharing is the dominant cost).
    """
    return min(int(clients), 2 * max(1, math.ceil(math.log2(max(clients, 2)))) + 1)


def encode_fixed(a: np.ndarray, base: int) -> np.ndarray:
    """Write ``a`` in fixed point and split it into balanced base-``base`` digits.

    Parameters
    ----------
    a : numpy.ndarray
        Finite values of magnitude at most :data:`VALUE_LIMIT`.
    base : int
        A power of two (:func:`digit_base`).

    Returns
    -------
    numpy.ndarray of shape ``(L,) + a.shape``, float64
        Integers in ``[-base/2, base/2)`` with ``round(a * 2**32) = sum_l d_l base**l``.
    """
    q = np.rint(np.asarray(a, dtype=np.float64) * 2.0**FRACTION_BITS).astype(np.int64)
    half = base // 2
    out = np.empty((digits_for(base),) + q.shape, dtype=np.float64)
    for level in range(len(out)):
        d = (q + half) % base - half
        out[level] = d
        q = (q - d) // base
    if np.any(q != 0):  # cannot happen below VALUE_LIMIT
        raise ValueError("a value does not fit the fixed-point digits")
    return out


def decode_fixed(digit_sums: np.ndarray, base: int) -> np.ndarray:
    """The totals from the summed digits of :func:`encode_fixed` (float64)."""
    d = np.rint(np.asarray(digit_sums, dtype=np.float64))
    total = np.zeros(d.shape[1:], dtype=np.float64)
    for level in range(len(d) - 1, -1, -1):
        total = total * float(base) + d[level]
    return total / 2.0**FRACTION_BITS


def sum_error_bound(clients: int) -> float:
    """The largest difference between a securely summed value and the exact float sum.

    Each client rounds each value to the fixed-point grid (at most ``2**-33``); the
    digits are summed exactly. (Float64 rounding of the totals comes on top, as in any
    float sum.) Integer totals are exact.
    """
    return clients * 2.0 ** -(FRACTION_BITS + 1)


@dataclass
class SecureSum:
    """The outcome of one secure exchange.

    Attributes
    ----------
    sums : list of numpy.ndarray
        Element-wise sums of the replies' arrays over :attr:`nodes` (float64).
    nodes : list of int
        The node ids whose replies are in the sums (sorted).
    failed : dict
        ``{node id: reason}`` of the sampled nodes that are not.
    error_bound : float
        :func:`sum_error_bound` for the sampled clients.
    received : dict
        ``{node id: bytes}``: what the server received from each node in the four
        stages (public keys, encrypted shares, the masked vector, key shares).
    """

    sums: list[np.ndarray]
    nodes: list[int]
    failed: dict[int, str] = field(default_factory=dict)
    error_bound: float = 0.0
    received: dict[int, int] = field(default_factory=dict)


def checked_values(values, client: int) -> list[np.ndarray]:
    """A client's reply arrays as float64, refused unless every value can be summed.

    Raises
    ------
    ValueError
        Naming the client: a value is not finite, or exceeds :data:`VALUE_LIMIT` in
        magnitude (the fixed-point range: scale the data).
    """
    out = []
    for a in values:
        a = np.asarray(a, dtype=np.float64)
        if not np.isfinite(a).all():
            raise ValueError(f"client {client}: secure aggregation: a value to sum is not "
                             "finite")
        if a.size and float(np.abs(a).max()) > VALUE_LIMIT:
            raise ValueError(
                f"client {client}: secure aggregation: a value to sum exceeds "
                f"{VALUE_LIMIT:.0f} in magnitude (the fixed-point range): scale the data")
        out.append(a)
    return out
