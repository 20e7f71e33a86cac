"""The library's logger: ``logging.getLogger("flwr_clustering")``.

A library does not decide where its records go: the logger has a ``NullHandler`` and
propagates. The Flower App calls :func:`configure_console` to print them.
"""

from __future__ import annotations

import logging

__all__ = ["configure_console", "logger"]

logger = logging.getLogger("flwr_clustering")
logger.addHandler(logging.NullHandler())

_FORMAT = "%(levelname)s flwr-clustering: %(message)s"


def configure_console(level: int = logging.INFO) -> None:
    """Print the library's records on the console (idempotent; the App calls it).

    Adds one ``StreamHandler`` to the ``flwr_clustering`` logger unless one is there, and
    sets the level. Records still propagate to the root logger's handlers, if any.
    """
    logger.setLevel(level)
    if not any(getattr(h, "_flwr_clustering", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(_FORMAT))
        handler._flwr_clustering = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
