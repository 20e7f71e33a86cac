"""Federated and distributed clustering for Flower.

Importing the package is cheap: :class:`FederatedClustering` (the scikit-learn entry
point, :mod:`flwr_clustering.estimator`) loads scikit-learn and Flower on first use;
:func:`load_model` (a run's ``model.json``, to label new files at a site) loads NumPy only.
"""

from importlib.metadata import version as _version
from typing import Any

#: The installed distribution's version: declared once, in pyproject.toml.
__version__ = _version("flwr-clustering")

__all__ = ["ClusteringModel", "FederatedClustering", "__version__", "load_model"]

_LAZY = {"FederatedClustering": "flwr_clustering.estimator",
         "ClusteringModel": "flwr_clustering.model", "load_model": "flwr_clustering.model"}


def __getattr__(name: str) -> Any:
    # PEP 562: `from flwr_clustering import FederatedClustering` imports the estimator
    # module (scikit-learn, Flower) only then.
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
