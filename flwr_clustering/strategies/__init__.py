"""Flower strategies (layer 3): one per algorithm, on a shared base."""

from .base import ClusteringStrategy
from .deepfeca import DeepFeCA
from .dgc import DGC
from .feca import FeCA, MAvg
from .ffcm import FFCM
from .fkm import FedKMeans
from .kdc import KDC
from .kfed import KFed
from .masked import MaskedFederated, MaskedOneShot

__all__ = [
    "DGC",
    "FFCM",
    "ClusteringStrategy",
    "DeepFeCA",
    "FeCA",
    "FedKMeans",
    "KDC",
    "KFed",
    "MAvg",
    "MaskedFederated",
    "MaskedOneShot",
]
