"""Flower clients (layer 3): one NumPyClient per algorithm and the ClientApp adapter."""

from .base import ClusteringClient, client_app
from .fkm import FedKMeansClient
from .kfed import KFedClient

__all__ = ["ClusteringClient", "FedKMeansClient", "KFedClient", "client_app"]
