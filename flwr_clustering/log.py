"""The library's logger, ``logging.getLogger("flwr_clustering")``.

A library must not decide where log records go: :data:`logger` only carries a
:class:`logging.NullHandler` (so that an unconfigured program does not print Python's
"last resort" warnings for us) and propagates to the root logger, where the application's
own configuration (``logging.basicConfig``, pytest's ``caplog``, ...) picks the records up.
Modules of the package log through this logger or a child of it
(``logging.getLogger(__name__)``).

The Flower App is an application, not a library: it calls :func:`configure_console` so that
a ``flwr run`` shows our progress as ``INFO flwr-clustering: message`` when nothing else
handles the records.
"""

from __future__ import annotations

import logging

__all__ = ["CONSOLE_FORMAT", "LOGGER_NAME", "configure_console", "logger"]

#: Name of the package's logger; every module logger is this or a child of it.
LOGGER_NAME = "flwr_clustering"

#: Format of :func:`configure_console`'s records.
CONSOLE_FORMAT = "%(levelname)s flwr-clustering: %(message)s"

logger = logging.getLogger(LOGGER_NAME)
if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
    logger.addHandler(logging.NullHandler())

#: Attribute that marks the handler :func:`configure_console` installed.
_CONSOLE_MARK = "_flwr_clustering_console"


def _console_handler() -> logging.Handler | None:
    return next((h for h in logger.handlers if getattr(h, _CONSOLE_MARK, False)), None)


def _handled_elsewhere() -> bool:
    """Whether a handler other than ours (and other than a NullHandler) gets our records."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if not isinstance(handler, logging.NullHandler) and not getattr(
                handler, _CONSOLE_MARK, False
            ):
                return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def configure_console(level: int = logging.INFO) -> logging.Handler | None:
    """Print the package's records on stderr when nothing else handles them.

    For applications (the Flower App calls it), never called by the library itself. The
    logger's level becomes ``level``. If a handler of the program already receives our
    records (a handler on the root logger, as ``logging.basicConfig`` or pytest install, or
    one on :data:`logger`), that handler prints them as the program configured it.
    Otherwise a :class:`logging.StreamHandler` with the format
    ``INFO flwr-clustering: message`` is added to :data:`logger`; it falls silent if the
    program configures a handler later. Calling it again does not add a second handler; it
    only updates the level.

    Parameters
    ----------
    level : int, default logging.INFO
        Lowest level printed.

    Returns
    -------
    logging.Handler or None
        The console handler, or ``None`` when another handler takes the records.
    """
    logger.setLevel(level)
    handler = _console_handler()
    if handler is None:
        if _handled_elsewhere():
            return None
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(CONSOLE_FORMAT))
        # Should the program configure logging later, its handlers take over: no record
        # is printed twice.
        handler.addFilter(lambda record: not _handled_elsewhere())
        setattr(handler, _CONSOLE_MARK, True)
        logger.addHandler(handler)
    handler.setLevel(level)
    return handler
