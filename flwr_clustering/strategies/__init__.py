"""Flower strategies (layer 3): one per algorithm, on a shared base."""

from .base import ClusteringStrategy
from .fkm import FedKMeans
from .kfed import KFed

__all__ = ["ClusteringStrategy", "FedKMeans", "KFed"]
