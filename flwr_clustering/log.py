"""The library's logger, ``logging.getLogger("flwr_clustering")``.

A library must not decide where log records go: :data:`logger` only carries a
:class:`logging.NullHandler` (so that an unconfigured program does not print Python's
"last resort" warnings for us) and propagates to the root logger, where the application's
own configuration (``logging.basicConfig``, pytest's ``caplog``, ...) picks the records up.
Modules of the package log through this logger or a child of it
(``logging.getLogger(__name__)``).

Our records reach the console as Flower's strategies' do. Flower's ``FedAvg`` logs to the
``flwr`` logger, which carries Flower's console handler from ``import flwr`` on; a
strategy's :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.start` (and the
Flower App) calls :func:`configure_console`, which adds *that* handler (Flower's, never one
of ours) to :data:`logger` when nothing of the program handles our records: in a user's
own ServerApp with no logging set up, ``[ROUND 2/20]``, "waiting for nodes" and the
warnings show formatted as Flower's lines (``INFO :      [ROUND 2/20]``). A program that
configures logging (before or after) gets our records through its own handlers only.
The scikit-learn estimator fits inside :func:`quiet`: silent, as ``KMeans`` is, unless the
program configures logging.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LOGGER_NAME", "configure_console", "format_metrics", "hide_actor_termination",
           "logger", "quiet", "show_progress"]

#: Name of the package's logger; every module logger is this or a child of it.
LOGGER_NAME = "flwr_clustering"

logger = logging.getLogger(LOGGER_NAME)
if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
    logger.addHandler(logging.NullHandler())

#: Attribute that marks the handler :func:`configure_console` installed.
_CONSOLE_MARK = "_flwr_clustering_console"

#: How many :func:`quiet` blocks are open (process-wide: the in-process grid's clients may
#: log from other threads).
_quiet_depth = 0


@contextmanager
def quiet() -> Iterator[None]:
    """Within the block, Flower's console handler prints none of our records.

    Handlers the program configured itself still get them. The estimator fits inside it.
    """
    global _quiet_depth
    _quiet_depth += 1
    try:
        yield
    finally:
        _quiet_depth -= 1


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


def _ours(record: logging.LogRecord) -> bool:
    return record.name == LOGGER_NAME or record.name.startswith(LOGGER_NAME + ".")


def configure_console(level: int = logging.INFO) -> logging.Handler | None:
    """Print the package's records through Flower's console handler, when nothing else does.

    For applications (the Flower App calls it), never called by the library itself. The
    logger's level becomes ``level``. If a handler of the program already receives our
    records (a handler on the root logger, as ``logging.basicConfig`` or pytest install, or
    one on :data:`logger`), that handler prints them as the program configured it.
    Otherwise Flower's own console handler (``flwr.common.logger.console_handler``, the
    one of the ``flwr`` logger, with its format and ``FLWR_LOG_LEVEL``) is added to
    :data:`logger`: our lines look like Flower's. It skips our records if the program
    configures a handler later. Calling it again does not add it twice.

    Parameters
    ----------
    level : int, default logging.INFO
        Lowest level of our records.

    Returns
    -------
    logging.Handler or None
        Flower's console handler, or ``None`` when another handler takes the records.
    """
    logger.setLevel(level)
    handler = _console_handler()
    if handler is None:
        if _handled_elsewhere():
            return None
        from flwr.common.logger import console_handler as handler

        if not getattr(handler, _CONSOLE_MARK, False):
            # Should the program configure logging later, its handlers take over: none of
            # our records is printed twice. Flower's own records pass unchanged.
            # Within quiet(), none of ours either.
            handler.addFilter(lambda record: not (
                _ours(record) and (_quiet_depth > 0 or _handled_elsewhere())))
            setattr(handler, _CONSOLE_MARK, True)
        logger.addHandler(handler)
    return handler


def format_metrics(metrics: dict[str, float]) -> str:
    """Metrics as one log line's text: ``sse=45.91, ari=0.9523`` (4 significant digits)."""
    return ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())


def show_progress() -> None:
    """A strategy's ``start``: our progress on the console as ``FedAvg``'s, if nobody else's.

    When no handler of the program receives our records, :func:`configure_console` (the
    logger's level, if unset, becomes INFO). When the program configured logging, nothing
    changes: neither its handlers nor our logger's level (an INFO level here would pass our
    INFO records to a program that asked its root logger for warnings only).
    """
    if not _handled_elsewhere():
        configure_console(logger.level or logging.INFO)


def _not_actor_termination(record: logging.LogRecord) -> bool:
    """False for Flower's "Manually terminating ClientAppActor" (a Ray actor's normal end)."""
    return not (record.msg == "Manually terminating %s"
                and record.pathname.endswith("ray_actor.py"))


def hide_actor_termination() -> None:
    """Drop Flower's "WARNING : Manually terminating ClientAppActor" in this process.

    For applications (the Flower App's ClientApp module calls it on import), never called by
    the library. Flower's Ray backend ends every actor of a simulation at its normal end
    with that WARNING, which reads as a failure when nothing failed
    (``flwr.simulation.ray_transport.ray_actor.VirtualClientEngineActor.terminate``); this
    filter on the ``flwr`` logger drops that one record, in the actor processes that loaded
    the App's ClientApp. Every other record of Flower's passes unchanged.
    """
    flwr_logger = logging.getLogger("flwr")
    if _not_actor_termination not in flwr_logger.filters:
        flwr_logger.addFilter(_not_actor_termination)
