"""The ClientApp of the flwr-clustering Flower App.

Data: in deployment a SuperNode reads its own file from ``data-path`` in its node config
(CSV / NPY / NPZ / Parquet, optional ``label`` column); in simulation the client loads
partition ``partition-id`` of ``num-partitions`` of the run config's dataset. Loading
and partitioning are cached per process.
"""

from __future__ import annotations

from functools import lru_cache

from flwr.app import Context

from ..clients import client_app
from ..clients.base import ClusteringClient, client_id_of
from ..data.local_file import load_local_file
from ..data.registry import load_partition
from ..log import configure_console
from .config import build_client, dataset_kwargs, merged_config

__all__ = ["app", "client_fn"]

_load_file = lru_cache(maxsize=4)(load_local_file)


def client_fn(context: Context) -> ClusteringClient:
    """Build this node's NumPyClient from its node config and the run config.

    Parameters
    ----------
    context : flwr.app.Context
        The ClientApp context.

    Returns
    -------
    ClusteringClient
        The algorithm's client around the node's local data.
    """
    cfg = merged_config(context.run_config)
    cid = client_id_of(context)
    if "data-path" in context.node_config:
        X, y = _load_file(str(context.node_config["data-path"]))
    elif cfg["dataset"] == "local":
        raise ValueError(
            f"client {cid}: the run config says dataset='local' but this node has no "
            "data-path in its node config"
        )
    else:
        X, y = load_partition(
            int(context.node_config["partition-id"]),
            int(context.node_config["num-partitions"]),
            **dataset_kwargs(cfg),
        )
    return build_client(cfg, X, y, cid)


app = client_app(client_fn)
configure_console()
