"""Secure aggregation as one wing: the client mod, the session, the sums, the exchange.

* :mod:`~flwr_clustering.secure.mod`: the ClientApp mod
  (:func:`~flwr_clustering.secure.mod.secure_aggregation_mod`) and one exchange summed by
  Flower's SecAgg+ as shipped (:func:`~flwr_clustering.secure.mod.secure_sum`);
* :mod:`~flwr_clustering.secure.session`: the same masking with keys agreed once per run;
* :mod:`~flwr_clustering.secure.sums`: fixed-point encoding and the sums' error bound;
* :mod:`~flwr_clustering.secure.exchange`: :class:`~flwr_clustering.secure.exchange.
  SecureExchange`, the server's exchange with the plain one's call
  (:meth:`~flwr_clustering.strategies.exchange.Exchange.send`), chosen once per run by the
  strategy base's ``start``. (Imported on its own: it sits on the strategies' floor, the
  mod on the clients'.)
"""

from .mod import (
    DEFAULT_SECAGG_KEYS,
    MODULUS,
    SECAGG_KEYS,
    digit_base,
    secure_aggregation_mod,
    secure_sum,
)
from .sums import (
    FRACTION_BITS,
    SECAGG_THRESHOLD,
    VALUE_LIMIT,
    SecureSum,
    decode_fixed,
    encode_fixed,
    neighbours,
    sum_error_bound,
)

__all__ = [
    "FRACTION_BITS",
    "MODULUS",
    "DEFAULT_SECAGG_KEYS",
    "SECAGG_KEYS",
    "SECAGG_THRESHOLD",
    "VALUE_LIMIT",
    "SecureSum",
    "decode_fixed",
    "digit_base",
    "encode_fixed",
    "neighbours",
    "secure_aggregation_mod",
    "secure_sum",
    "sum_error_bound",
]
