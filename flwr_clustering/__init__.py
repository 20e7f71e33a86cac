"""Federated and distributed clustering for Flower.

Importing the package is cheap: :class:`FederatedClustering` (the scikit-learn entry
point, :mod:`flwr_clustering.estimator`) loads scikit-learn and Flower on first use;
:func:`load_model` (a run's ``model.json``, to label new files at a site) loads NumPy only.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import Any


def _declared_version() -> str:
    """The version, declared once in pyproject.toml.

    The installed distribution's, or the file's where the package runs from its source
    without being installed (a Flower App Bundle unpacked on a SuperNode carries
    ``pyproject.toml`` beside the package).
    """
    try:
        return _version("flwr-clustering")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__ = _declared_version()

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
