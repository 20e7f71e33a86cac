"""Flower clients (layer 3): one NumPyClient per algorithm and the ClientApp adapter."""

from ..protocol import client_id_of
from . import legacy  # noqa: F401 - sets ClusteringClient.to_client (the legacy API)
from .adapter import client_app
from .base import ClusteringClient
from .deepfeca import DeepFeCAClient
from .dgc import DGCClient
from .feca import FeCAClient, MAvgClient
from .ffcm import FFCMClient
from .fkm import FedKMeansClient
from .handlers import handle_evaluate, handle_query, handle_train
from .kdc import KDCClient
from .kfed import KFedClient
from .labels import stored_labels
from .masked import MaskedFederatedClient, MaskedOneShotClient
from .messages import pack_reply

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
    "client_id_of",
    "handle_evaluate",
    "handle_query",
    "handle_train",
    "pack_reply",
    "stored_labels",
]
