"""Replies pulled at a short interval: Flower's ``send_and_receive`` without its 3-s wait.

Flower 1.41 and 1.42's ``Grid.send_and_receive`` on a deployment pushes the messages, then
pulls the replies every 3 s until all have come back (``flwr.superlink.grid.http_grid``):
an exchange whose replies are ready after 0.5 s waits 3 s. Our ServerApps send through
:class:`FastPulls`, a ``Grid`` that does the same with the grid's public ``push_messages``
and ``pull_messages``, pulling every ``poll-interval`` seconds (0.1 by default). Every
other call goes to the wrapped grid. A grid without ``push_messages`` (the in-process
test grid) keeps its own ``send_and_receive``.

Each pull is one request to the SuperLink (its ``PullMessages``): 10 a second at 0.1 s
while an exchange waits, none between exchanges.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

__all__ = ["DEFAULT_POLL_INTERVAL", "FastPulls", "poll_interval_problem"]

#: Seconds between two pulls of replies (run-config key ``poll-interval``).
DEFAULT_POLL_INTERVAL = 0.1


def poll_interval_problem(value: float) -> str | None:
    """Why ``value`` cannot be the seconds between two pulls (``None``: it can)."""
    return None if 0.0 < value <= 3.0 else "must lie in (0, 3] seconds (Flower's own wait is 3)"


class FastPulls(Grid):
    """A ``Grid`` whose ``send_and_receive`` pulls the replies every ``interval`` seconds.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The ServerApp's grid; every call but ``send_and_receive`` goes to it.
    interval : float
        Seconds between two pulls (:data:`DEFAULT_POLL_INTERVAL`).
    """

    def __init__(self, grid: Grid, interval: float = DEFAULT_POLL_INTERVAL) -> None:
        problem = poll_interval_problem(float(interval))
        if problem is not None:
            raise ValueError(f"poll-interval {problem}, got {interval!r}")
        self.grid = grid
        self.interval = float(interval)

    @classmethod
    def wrap(cls, grid: Grid, interval: float = DEFAULT_POLL_INTERVAL) -> FastPulls:
        """``grid`` with fast pulls (a :class:`FastPulls` is re-wrapped, never nested)."""
        if isinstance(grid, FastPulls):
            grid = grid.grid
        return cls(grid, interval)

    # -- Flower's Grid, delegated ---------------------------------------------------------
    @property
    def run(self) -> Any:  # noqa: D102
        return self.grid.run

    def set_run(self, run_id: int) -> None:  # noqa: D102
        self.grid.set_run(run_id)

    def create_message(self, content, message_type, dst_node_id, group_id,  # noqa: D102
                       ttl=None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        return self.grid.push_messages(messages)

    def pull_messages(self, *args: Any, **kwargs: Any) -> Iterable[Message]:
        """The wrapped grid's (Flower 1.43 renames its argument ``reply_to_message_ids``)."""
        return self.grid.pull_messages(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        """Anything else the wrapped grid has (a test grid's record of what it sent)."""
        if name == "grid":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.grid, name)

    # -- the one change ------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> list[Message]:
        """Push ``messages``; pull their replies every :attr:`interval` s until all came back.

        As Flower's: ``timeout=None`` waits for every reply; otherwise the replies that
        came back within ``timeout`` seconds.
        """
        messages = list(messages)
        try:
            waiting = set(self.grid.push_messages(messages))
        except NotImplementedError:  # a grid that only sends and receives (in-process)
            return list(self.grid.send_and_receive(messages, timeout=timeout))
        end = None if timeout is None else time.monotonic() + float(timeout)
        replies: list[Message] = []
        while waiting:
            # by position: 1.41/1.42 name it message_ids, 1.43 reply_to_message_ids
            got = list(self.grid.pull_messages(waiting))
            replies.extend(got)
            waiting.difference_update(m.metadata.reply_to_message_id for m in got)
            if not waiting:
                break
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                break
            time.sleep(self.interval if left is None else min(self.interval, left))
        return replies
