"""The ClientApp of the flwr-clustering Flower App.

Data: in deployment a SuperNode reads its own file from ``data-path`` in its node config
(CSV / NPY / NPZ / Parquet, optional ``label`` column; the node-config keys ``feature-columns``,
``label-column``, ``index-column`` and ``header`` declare its columns, see
:func:`~flwr_clustering.data.load_local_file`); in simulation the client loads
partition ``partition-id`` of ``num-partitions`` of the run config's dataset. Partitioning
is cached per process; the parsed file in memory and, for a deployment's fresh process per
message, on disk (:mod:`~flwr_clustering.data.site_cache`, node config ``data-cache``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context

from .. import registry
from ..clients import client_app
from ..clients.base import ClusteringClient
from ..clients.integrity import DECLARED_ROWS_KEY, data_hash
from ..data.local_file import LocalFile, read_local_file
from ..data.registry import DATASETS, feature_names, load_partition
from ..data.schema import FeatureTable, SiteDataError
from ..data.site_cache import default_cache_dir, read_cached
from ..log import configure_console, hide_actor_termination
from ..protocol import DP_MAX_EPSILON_KEY, RAW_ROWS_KEY, client_id_of
from .config import build_client, dataset_kwargs, merged_config, run_dtype

__all__ = ["ALLOW_ALGORITHMS_KEY", "DATA_CACHE_KEY", "FILE_KEYS", "app", "check_server_config",
           "client_fn", "data_cache_dir", "load_node_file"]

logger = logging.getLogger(__name__)

#: Node-config keys that describe the data file, and the loader's keyword for each.
FILE_KEYS: dict[str, str] = {
    "feature-columns": "feature_columns",
    "label-column": "label_column",
    "index-column": "index_column",
    "header": "header",
}


#: Node-config key: the folder of the parsed copy of ``data-path`` (read by the next
#: messages' processes instead of parsing the file again), or ``'none'`` for no copy on
#: disk (default: :func:`~flwr_clustering.data.site_cache.default_cache_dir`).
DATA_CACHE_KEY = "data-cache"

#: Node-config key: the ``module:ATTRIBUTE`` algorithms a SuperNode that reads its own
#: file (``data-path``) lets the run config load (comma-separated; default none).
ALLOW_ALGORITHMS_KEY = "allow-algorithms"


def check_server_config(run_config: dict[str, Any], node_config: dict[str, Any],
                        client_id: int) -> None:
    """Refuse what a run config could make this node open or run (before anything loads).

    The run config comes from whoever submitted the run, through the SuperLink: it is
    read as data only. A path is read only from the node config (``data-path``), so a
    ``dataset`` that is not a built-in data set's name is refused, never opened; and a
    node that reads its own file imports an algorithm given as ``module:ATTRIBUTE`` only
    if its node config lists it under ``allow-algorithms`` (a simulated node, which holds
    a built-in partition, may load one: the benchmarks' echo strategy is loaded so).

    Raises
    ------
    ValueError
        Naming the client, the run-config value and the node-config key that would allow it.
    """
    dataset = run_config.get("dataset")
    if dataset is not None and dataset != "local" and str(dataset) not in DATASETS:
        raise ValueError(
            f"client {client_id}: the run config's dataset={dataset!r} is not a built-in data "
            f"set ({', '.join(DATASETS)}, or 'local'); a client never opens a path it is sent: "
            "a SuperNode reads its own file from data-path in its node config "
            "(dataset='local')")
    algorithm = str(run_config.get("algorithm", ""))
    if ":" in algorithm and "data-path" in node_config:
        allowed = {a.strip() for a in str(node_config.get(ALLOW_ALGORITHMS_KEY, "")).split(",")}
        if algorithm not in allowed:
            raise ValueError(
                f"client {client_id}: the run config asks this node to import "
                f"algorithm={algorithm!r}; a node that reads its own data imports no module "
                f"named by the server unless its node config allows it: start the SuperNode "
                f"with --node-config \"... {ALLOW_ALGORITHMS_KEY}='{algorithm}'\"")


def node_flag(node_config: dict[str, Any], key: str, *, default: bool) -> bool:
    """A true/false node-config value (TOML ``true``/``false``, 1/0 or the strings).

    Raises
    ------
    ValueError
        For anything else, naming the key.
    """
    value = node_config.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"node config {key} must be true or false, got {value!r}")


def data_cache_dir(node_config: dict[str, Any]) -> Path | None:
    """The folder of the node's parsed-file copies (node config ``data-cache``), or None.

    ``'none'``, ``'false'`` or ``false`` keep no copy on disk (the parse is still kept
    in the process's memory); unset: :func:`~flwr_clustering.data.site_cache.default_cache_dir`.
    """
    value = node_config.get(DATA_CACHE_KEY)
    if value is None:
        return default_cache_dir()
    if value is False or str(value).strip().lower() in ("", "none", "false", "off"):
        return None
    return Path(str(value)).expanduser()


def load_node_file(
    node_config: dict[str, Any], client_id: int, *, allow_nan: bool = True,
    dtype: str = "float64", declared: tuple[int, int] | None = None,
) -> LocalFile:
    """Load the file named by ``data-path`` with the node config's file keys (cached).

    The parse is kept in memory and in the node's cache folder (:func:`data_cache_dir`;
    :mod:`~flwr_clustering.data.site_cache`): the next messages of a run, each a fresh
    process on a deployment, read that copy while the file is unchanged.

    ``dtype``: the type the rows are held in (the run's ``dtype`` option, when the
    algorithm has one). ``declared``: the ``(rows, fingerprint)`` the run declared in its
    ``data-source`` phase: a kept copy of other rows is not used (the file is read again,
    and the integrity check judges it).

    Errors name the client: ``FileNotFoundError`` for a missing file, ``ValueError`` for a
    file that cannot be used (the loader's message, which names the file).
    """
    path = str(node_config["data-path"])
    options = {kw: node_config[key] for key, kw in FILE_KEYS.items() if key in node_config}
    options["allow_nan"] = bool(allow_nan)
    accept = None
    if declared is not None:
        rows, fingerprint = int(declared[0]), int(declared[1])

        def accept(loaded: LocalFile) -> bool:
            return len(loaded.X) == rows and data_hash(loaded.X) == fingerprint
    try:
        loaded, origin = read_cached(path, options, dtype=str(dtype),
                                     cache_dir=data_cache_dir(node_config), accept=accept,
                                     reader=read_local_file)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"client {client_id}: data-path {path!r} of the node config: no such file"
        ) from exc
    except SiteDataError as exc:  # the server gets its public message (clients.errors)
        raise exc.prefixed(f"client {client_id}: ") from exc
    except ValueError as exc:  # pandas' or NumPy's words may quote a cell: the log only
        raise SiteDataError(
            f"client {client_id}: {Path(path).name}: {type(exc).__name__} while reading "
            "the file (the detail is in the site's log)",
            f"client {client_id}: {exc}") from exc
    if origin != "memory":  # once per process
        logger.info("data file %s%s", loaded.describe(),
                    " (its parsed copy)" if origin == "disk" else "")
    return loaded


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
    cid = client_id_of(context)
    check_server_config(dict(context.run_config), dict(context.node_config), cid)
    cfg = merged_config(context.run_config)
    if "data-path" in context.node_config:
        # a missing cell is kept as NaN: the masked algorithms read it as unobserved, the
        # others have it filled or its row dropped by the federation's transform (the
        # run's missing option); with missing='refuse' it is an error naming the file,
        # the column and the row
        accepts = getattr(registry.get(str(cfg["algorithm"])).client, "accepts_missing", False)
        declared = context.state.get(DECLARED_ROWS_KEY)  # (the run's data-source phase)
        loaded = load_node_file(context.node_config, cid,
                                allow_nan=bool(accepts) or cfg.get("missing") != "refuse",
                                dtype=run_dtype(cfg),
                                declared=None if declared is None
                                else (int(declared["rows"]), int(declared["hash"])))
        X, y = loaded.X, loaded.y
        source = {"local": True, "path": str(loaded.path)}
    elif cfg["dataset"] == "local":
        from .data_source import NO_DATA_PATH  # (the server's side: loads the strategies)

        raise ValueError(f"client {cid}: the run config says dataset='local' but {NO_DATA_PATH}")
    else:
        pid = int(context.node_config["partition-id"])
        num = int(context.node_config["num-partitions"])
        X, y = load_partition(pid, num, **dataset_kwargs(cfg))
        source = {"local": False, "partition-id": pid, "num-partitions": num}
    client = build_client(cfg, X, y, cid)
    # the columns by name (a file's header; a built-in partition's own names, wine's
    # "proline", or positions "0", "1", ... for a generated set): the federation agrees on
    # its features from them (strategies.features) and every message says which, in which
    # order and units. A built-in partition's table holds its float64 rows, so that a
    # float32 run rounds the scaled rows once, as the estimator's clients do (a float32
    # file is held as float32 only: half the memory)
    if "data-path" in context.node_config:
        client.feature_table = loaded.table()
    elif np.ndim(X) == 2:  # (not images)
        client.feature_table = FeatureTable(np.asarray(X),
                                            feature_names(str(cfg["dataset"])) or ())
    # told to the server in the library's data-source phase (protocol.DATA_SOURCE_PHASE)
    client.data_source = source
    client.allow_raw_rows = node_flag(context.node_config, RAW_ROWS_KEY,
                                      default=not source["local"])
    if DP_MAX_EPSILON_KEY in context.node_config:
        if not hasattr(client, "dp_phases"):
            raise PermissionError(
                f"client {cid}: this node takes part only in differentially private runs "
                f"(node config {DP_MAX_EPSILON_KEY}), and algorithm={cfg['algorithm']!r} "
                "has none: run algorithm='fkm' with server-update='lloyd' and dp-epsilon")
        client.dp_max_epsilon = float(context.node_config[DP_MAX_EPSILON_KEY])
    return client


app = client_app(client_fn)
configure_console()
hide_actor_termination()  # Flower's WARNING at a Ray actor's normal end
