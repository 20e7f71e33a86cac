"""The Message-API ClientApp of our NumPyClients: the client adapter with its plugins.

:func:`client_app` composes the client adapter (:mod:`flwr_clustering.clients.handlers`: one
handler per message type) with secure aggregation's mod
(:func:`flwr_clustering.secure.secure_aggregation_mod`), which sits above the adapter: the
adapter does not know it.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp

from ..secure import secure_aggregation_mod
from .handlers import handle_evaluate, handle_query, handle_train

__all__ = ["client_app"]


def client_app(client_fn: Callable[[Context], NumPyClient]) -> ClientApp:
    """Make a Message-API ClientApp from a function that builds one of our NumPyClients.

    Parameters
    ----------
    client_fn : callable
        ``client_fn(context) -> NumPyClient``. Called for every message; keep data
        loading cached (see :mod:`flwr_clustering.data.registry`).

    Returns
    -------
    flwr.clientapp.ClientApp
        Handles ``train`` messages with :func:`handle_train`, ``query`` messages (the
        phases of a protocol that are not training: sizes, moments, feature counts, ...)
        with :func:`handle_query` and ``evaluate`` messages with :func:`handle_evaluate`;
        its mod :func:`~flwr_clustering.secure.secure_aggregation_mod` answers the
        SecAgg+ stages of a run with ``secure-aggregation`` (other messages pass through).
    """
    app = ClientApp(mods=[secure_aggregation_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return handle_train(msg, context, client_fn)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return handle_query(msg, context, client_fn)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return handle_evaluate(msg, context, client_fn)

    return app
