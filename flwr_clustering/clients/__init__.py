"""Flower clients (layer 3): one NumPyClient per algorithm and the ClientApp adapter."""

from .adapter import client_app
from .base import (
    ClusteringClient,
    handle_evaluate,
    handle_query,
    handle_train,
    stored_labels,
)
from .deepfeca import DeepFeCAClient
from .dgc import DGCClient
from .feca import FeCAClient, MAvgClient
from .ffcm import FFCMClient
from .fkm import FedKMeansClient
from .kdc import KDCClient
from .kfed import KFedClient
from .masked import MaskedFederatedClient, MaskedOneShotClient

__all__ = [
    "ClusteringClient",
    "DGCClient",
    "DeepFeCAClient",
    "FFCMClient",
    "FeCAClient",
    "FedKMeansClient",
    "KDCClient",
    "KFedClient",
    "MAvgClient",
    "MaskedFederatedClient",
    "MaskedOneShotClient",
    "client_app",
    "handle_evaluate",
    "handle_query",
    "handle_train",
    "stored_labels",
]
