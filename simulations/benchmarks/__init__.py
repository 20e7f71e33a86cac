"""Benchmarks and the helpers that drive real Flower processes.

- :mod:`simulations.benchmarks.bench` -- speed and memory benchmarks
  (``python -m simulations bench client-step | server-step | rounds | inprocess``).
- :mod:`simulations.benchmarks.processes` -- Flower subprocesses: environment, free ports,
  ``/proc``, stopping by PID, the ``flwr`` CLI; used by the benchmarks and by the
  integration tests.
"""
