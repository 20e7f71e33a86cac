"""Our clients in legacy Flower projects: ``ClientApp(client_fn=...)`` with ``.to_client()``.

The client half of :mod:`flwr_clustering.legacy`: legacy metrics hold scalars only, so
array-valued statistics travel as ``np.save`` bytes under keys prefixed by
:data:`ARRAY_PREFIX`, and the client id goes along as ``"client-id"``.
:meth:`ClusteringClient.to_client <flwr_clustering.clients.base.ClusteringClient.to_client>`
(:func:`to_client`, defined here and set on the client base by this module, which the
package ``flwr_clustering.clients`` imports) returns :func:`legacy_client`; the server side
is :class:`flwr_clustering.legacy.LegacyStrategy`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.client import Client, NumPyClient
from flwr.common import Scalar, bytes_to_ndarray, ndarray_to_bytes

from ..protocol import split_metrics
from .base import ClusteringClient
from .errors import error_reasons

__all__ = ["ARRAY_PREFIX", "LegacyClient", "decode_metrics", "encode_metrics", "legacy_client",
           "to_client"]

logger = logging.getLogger(__name__)

#: Prefix of the legacy metric keys that carry an array (``np.save`` bytes).
ARRAY_PREFIX = "ndarray:"


def encode_metrics(metrics: Mapping[str, Any], client_id: int | None = None) -> dict[str, Scalar]:
    """Turn a client's metrics into legacy Flower metrics (scalars only).

    Parameters
    ----------
    metrics : mapping
        What our ``fit``/``evaluate`` return: scalars and NumPy arrays.
    client_id : int, optional
        Added as ``"client-id"`` (the server orders replies by it).

    Returns
    -------
    dict
        Scalars as Python ``int``/``float`` (booleans as ``int``, as in the Message-API
        reply), arrays as ``np.save`` bytes under ``ARRAY_PREFIX + key``.

    Raises
    ------
    TypeError
        If a value is neither a number nor an array (the Message-API reply refuses it too).
    """
    scalars, arrays = split_metrics(dict(metrics))
    own = scalars.pop("client-id", None)
    out: dict[str, Scalar] = dict(scalars)
    out.update({ARRAY_PREFIX + k: ndarray_to_bytes(np.require(v, requirements="C"))
                for k, v in arrays.items()})
    if client_id is not None or own is not None:
        out["client-id"] = int(own if client_id is None else client_id)
    return out


def decode_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Split legacy metrics back into scalars and arrays (inverse of :func:`encode_metrics`).

    Parameters
    ----------
    metrics : mapping
        The ``metrics`` of a ``FitRes`` or ``EvaluateRes``.

    Returns
    -------
    tuple of dict
        ``(scalars, arrays)``; other ``bytes`` and ``str`` values are left out (the
        Message-API reply cannot carry them either).
    """
    scalars: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for key, value in metrics.items():
        if isinstance(value, bytes):
            if key.startswith(ARRAY_PREFIX):
                arrays[key[len(ARRAY_PREFIX):]] = bytes_to_ndarray(value)
        elif isinstance(value, bool):
            scalars[key] = int(value)
        elif isinstance(value, int | float):
            scalars[key] = value
    return scalars, arrays


class LegacyClient(NumPyClient):
    """A NumPyClient whose metrics fit the legacy API (wraps one of our clients).

    Parameters
    ----------
    client : flwr.client.NumPyClient
        One of our clients (or any NumPyClient whose metrics hold numbers and arrays).
    client_id : int, optional
        Sent as ``"client-id"``; defaults to ``client.client_id`` when it has one.
    """

    def __init__(self, client: NumPyClient, client_id: int | None = None) -> None:
        self.client = client
        self.client_id = getattr(client, "client_id", None) if client_id is None else client_id

    def _fail(self, ex: Exception, phase: str) -> RuntimeError:
        # Flower sends the message of the RuntimeError to the server: the vetted reason,
        # never a cell (clients.errors); the site's log keeps the whole message
        reason, detail, vetted = error_reasons(ex, self.client_id, phase)
        logger.warning("%s (%s)", detail, type(ex).__name__, exc_info=not vetted)
        return RuntimeError(f"{reason} ({type(ex).__name__})")

    def fit(self, parameters, config):
        """Run the wrapped client's ``fit`` (every protocol phase) and encode its metrics.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            What the server sent.
        config : dict
            The phase (``config["phase"]``) and the algorithm's options.

        Returns
        -------
        tuple
            ``(arrays, num_examples, encoded metrics)``.
        """
        try:
            arrays, n, metrics = self.client.fit(parameters, config)
            return list(arrays), int(n), encode_metrics(metrics, self.client_id)
        except Exception as ex:  # noqa: BLE001 - re-raised with the client id in front
            raise self._fail(ex, f"fit ({config.get('phase', 'train')})") from ex

    def evaluate(self, parameters, config):
        """Run the wrapped client's ``evaluate`` and encode its statistics.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            ``[centroids]`` (or the algorithm's model).
        config : dict
            Evaluation configuration.

        Returns
        -------
        tuple
            ``(loss, num_examples, encoded metrics)``.
        """
        try:
            if not config.get("evaluate", True):  # the final model only, no statistics
                n = len(getattr(self.client, "X", ()))
                return 0.0, n, encode_metrics({}, self.client_id)
            loss, n, metrics = self.client.evaluate(parameters, config)
            return float(loss), int(n), encode_metrics(metrics, self.client_id)
        except Exception as ex:  # noqa: BLE001 - re-raised with the client id in front
            raise self._fail(ex, "evaluate") from ex


def legacy_client(client: NumPyClient, client_id: int | None = None) -> Client:
    """Return a legacy :class:`flwr.client.Client` for one of our NumPyClients.

    What ``ClusteringClient.to_client()`` returns; use it in
    ``flwr.client.ClientApp(client_fn=lambda context: ...)``.

    Parameters
    ----------
    client : flwr.client.NumPyClient
        The client.
    client_id : int, optional
        See :class:`LegacyClient`.

    Returns
    -------
    flwr.client.Client
        The client, with array metrics encoded (:func:`encode_metrics`).
    """
    return NumPyClient.to_client(LegacyClient(client, client_id))


def to_client(self: ClusteringClient) -> Client:
    """Return a legacy ``flwr.client.Client`` (see :mod:`flwr_clustering.legacy`).

    :meth:`ClusteringClient.to_client`: array-valued metrics travel as ``np.save`` bytes,
    with ``"client-id"``; pair it with :class:`flwr_clustering.legacy.LegacyStrategy` on
    the server.
    """
    return legacy_client(self)


# Flower's way to a legacy client is a method of the client: the legacy API's one method
# on our clients is set here, so that the client base does not import the legacy client
ClusteringClient.to_client = to_client
