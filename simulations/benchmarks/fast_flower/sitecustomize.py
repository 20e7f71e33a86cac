"""Shorter Flower polling for test deployments (loaded as ``sitecustomize``).

Flower 1.41 and 1.42 poll with waits written into their code: a SuperNode with no message waits
3 s before asking its SuperLink again, and a ServerApp's ``send_and_receive`` waits 3 s
between two pulls of replies (a SuperNode also waits 0.5 s between two looks for its
ClientApp's reply). A deployment round therefore costs seconds of waiting on top of its
work. :class:`~simulations.benchmarks.deployment.LocalDeployment` puts this folder first
on ``PYTHONPATH`` of every process it starts when ``poll_seconds`` is set (the processes
Flower launches inherit it); this module then shortens exactly those waits to
``FLWR_CLUSTERING_TEST_POLL_SECONDS``. Every other ``time.sleep`` is untouched.
"""

import os
import sys
import time

_POLL = os.environ.get("FLWR_CLUSTERING_TEST_POLL_SECONDS")

#: (calling module, the wait written in it): the polling waits that are shortened.
_POLLS = {
    ("flwr.supernode.start_client_internal", 3),
    ("flwr.supernode.start_client_internal", 0.5),
    ("flwr.superlink.grid.http_grid", 3),
}

if _POLL:
    _seconds = float(_POLL)
    _sleep = time.sleep

    def _polling_sleep(secs: float) -> None:
        name = sys._getframe(1).f_globals.get("__name__", "")
        _sleep(min(secs, _seconds) if (name, secs) in _POLLS else secs)

    time.sleep = _polling_sleep
