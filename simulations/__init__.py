"""Layer 5: paper reproductions and benchmarks, run by the ``flwr-clustering`` command.

- :mod:`~flwr_clustering.simulations.experiments` -- the experiment registry
  (:data:`EXPERIMENTS`: name -> :class:`Experiment` with data, split, methods and the
  paper's numbers), the runner and the JSON / Markdown / PNG reports. The Garst & Reinders
  experiments ``garst-fig1b``, ``garst-noise`` and ``garst-clusterwise`` are registered.
- :mod:`~flwr_clustering.simulations.cli` -- ``flwr-clustering reproduce | list | bench``.
- :mod:`~flwr_clustering.simulations.bench` -- speed and memory benchmarks.

Only layers 1 and 2 are used (the pure algorithm loops, data and metrics); no Flower import.
"""

from flwr_clustering.simulations.experiments import (
    EXPERIMENTS,
    Experiment,
    FederatedData,
    Method,
    PaperValue,
    RunOutcome,
    Setting,
    register,
    reproduce,
    run_experiment,
)

__all__ = [
    "EXPERIMENTS",
    "Experiment",
    "FederatedData",
    "Method",
    "PaperValue",
    "RunOutcome",
    "Setting",
    "register",
    "reproduce",
    "run_experiment",
]
