"""Paper reproductions and benchmarks of flwr-clustering (layer 5; not part of the wheel).

Run from the repository root::

    python -m simulations list
    python -m simulations reproduce garst-fig1b [--runs N] [--rounds R] ... [--out DIR]
    python -m simulations bench client-step | server-step | rounds | inprocess [...]

- :mod:`simulations.framework` -- experiment definitions (:class:`Experiment`), the
  experiment registry :data:`EXPERIMENTS`, the method registry
  :data:`~simulations.framework.RUNNERS` (kind -> runner), the run loop and the JSON /
  Markdown / PNG reports with the paper's numbers and claims.
- One module per paper, each registering its experiments when imported (the list
  :data:`PAPERS`, imported here and nowhere else): :mod:`simulations.garst` (Garst &
  Reinders, FKM and k-FED), :mod:`simulations.feca` (Xu et al., FeCA),
  :mod:`simulations.deepfeca` (Xu et al., DeepFeCA; PyTorch is imported only when it runs),
  :mod:`simulations.dgc` (Armacki et al.), :mod:`simulations.kdc` (Zhang et al.),
  :mod:`simulations.masked` (Maritan & Schenato).
- :mod:`simulations.cli` -- the command line (``python -m simulations``).
- :mod:`simulations.benchmarks` -- speed and memory benchmarks, and the helpers that drive
  real Flower processes (also used by the integration tests).

Only the library's layers 1 and 2 are used by the reproductions (the pure algorithm loops,
data and metrics); the library never imports this package.
"""

from importlib import import_module

from .framework import (
    EXPERIMENTS,
    RUNNERS,
    Experiment,
    FederatedData,
    Method,
    PaperValue,
    RunOutcome,
    Setting,
    register,
    register_runner,
    reproduce,
    run_experiment,
)

#: The paper modules, in listing order; importing one registers its experiments.
PAPERS = ("garst", "feca", "deepfeca", "dgc", "kdc", "masked")

for _paper in PAPERS:
    import_module(f"{__name__}.{_paper}")

__all__ = [
    "EXPERIMENTS",
    "PAPERS",
    "RUNNERS",
    "Experiment",
    "FederatedData",
    "Method",
    "PaperValue",
    "RunOutcome",
    "Setting",
    "register",
    "register_runner",
    "reproduce",
    "run_experiment",
]
