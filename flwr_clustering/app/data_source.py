"""Where the clients' data came from: the App's check before round 1.

The ServerApp sends one ``QUERY`` message per node in round 0, phase ``data-source``
(:data:`~flwr_clustering.protocol.DATA_SOURCE_PHASE`), answered by the library for every
client without the algorithm's code. Each client replies ``data-local`` (1 local file, 0
partition of a built-in dataset, -1 not said), its rows, features and a hash of its rows.

* A run config that names a built-in dataset while nodes read local files (``data-path``),
  or ``dataset='local'`` while nodes load a built-in partition (or do not say), is refused,
  naming the clients and the fix.
* On a built-in dataset, every client's (rows, features, hash) is compared with the
  partition the server builds for the pooled data. On a mismatch the run goes on (its
  federated result is the clients' own), but the pooled and centralized side results are
  not computed: they would describe other data.
"""

from __future__ import annotations

import re
from typing import Any

from ..clients.integrity import data_hash
from ..data.registry import load_partition
from ..log import logger
from ..protocol import DATA_SOURCE_PHASE, MOMENTS_TRANSFORM_KEY
from ..strategies.features import data_source_config
from .config import dataset_kwargs

__all__ = ["NO_DATA_PATH", "absent_reasons", "check_data_sources", "check_enough_sources",
           "check_raw_row_consent", "identical_data_warning", "query_data_sources"]

#: Part of a client's error when the run config says ``dataset='local'`` and its node has
#: no ``data-path`` (the server refuses the run on it).
NO_DATA_PATH = "this node has no data-path in its node config"


def query_data_sources(grid, strategy, nodes: list[int], moments: bool = True
                       ) -> tuple[list[dict], dict[int, str]]:
    """Ask every node where its data came from (one ``QUERY`` message each, round 0).

    A plain run that declares its features asks for the feature moments in the same
    query (:func:`~flwr_clustering.strategies.features.moments_with_columns`), unless
    ``moments`` is false (a resumed run keeps the features of its checkpoint).

    Returns
    -------
    (list of dict, dict)
        One record per valid reply (client-id order): ``client-id``, ``source``
        (``"local file"``, ``"built-in"`` or ``"unknown"``), ``rows``, ``features``,
        ``hash`` and, for a built-in partition, ``partition-id`` and ``num-partitions``;
        and ``{node id: reason}`` of the nodes without a valid reply.
    """
    config = data_source_config(strategy)
    if not moments:
        config.pop(MOMENTS_TRANSFORM_KEY, None)
    replies = strategy.exchange(grid, 0, DATA_SOURCE_PHASE,
                                per_node={int(n): ([], config) for n in nodes}, min_replies=0)
    # the clients' column names and kinds: the strategy agrees on the features from them
    # before round 1 (strategies.features) without asking again; the replies themselves
    # give FKM's start its clients count, and the features step the moments they carry
    # (strategies.features.known_data_sources)
    strategy.site_columns = {r.client_id: r.columns for r in replies}
    strategy.site_absent = {strategy.who(n): why for n, why in replies.absent.items()}
    strategy.site_sources = replies
    sources = []
    for r in replies:
        local = int(r.metrics.get("data-local", -1))
        record: dict[str, Any] = {
            "client-id": r.client_id,
            "source": {1: "local file", 0: "built-in"}.get(local, "unknown"),
            "rows": int(r.metrics.get("num-examples", 0)),
            "features": int(r.metrics.get("num-features", -1)),
            "hash": int(r.metrics.get("data-hash", -1)),
        }
        for key in ("partition-id", "num-partitions", "allow-raw-rows"):
            if key in r.metrics:
                record[key] = int(r.metrics[key])
        sources.append(record)
    return sources, dict(replies.absent)


def _clients(records: list[dict]) -> str:
    return (f"client{'s' if len(records) > 1 else ''} "
            + ", ".join(str(s["client-id"]) for s in records))


def _verb(items: list, one: str, many: str) -> str:
    return one if len(items) == 1 else many


def _who(node: int, reason: str) -> str:
    named = re.search(r"\bclient (\d+)", reason)
    return f"node {node}" if named is None else f"client {named.group(1)} (node {node})"


def check_data_sources(cfg: dict, sources: list[dict], absent: dict[int, str],
                       num_nodes: int) -> str | None:
    """Refuse a run config that does not match the clients' data; say if pooled is wrong.

    Parameters
    ----------
    cfg : dict
        The merged run config.
    sources : list of dict
        From :func:`query_data_sources` (each gets ``matches-server`` on a built-in dataset).
    absent : dict
        ``{node id: reason}`` of the nodes that sent no valid reply.
    num_nodes : int
        Connected nodes (the server's ``num-partitions``).

    Returns
    -------
    str or None
        Why the pooled data is not the clients' data (the side results are skipped), or
        ``None`` when it is.

    Raises
    ------
    ValueError
        If nodes read local files while the run config names a built-in dataset, or the
        run config says ``dataset='local'`` while nodes do not read local files.
    """
    dataset = str(cfg["dataset"])
    if dataset == "local":
        wrong = [s for s in sources if s["source"] != "local file"]
        missing = [_who(n, why) for n, why in absent.items() if NO_DATA_PATH in why]
        if wrong or missing:
            who = ", ".join(filter(None, [
                f"{_clients(wrong)} {_verb(wrong, 'does', 'do')} not read a local file ("
                + ", ".join(f"{s['client-id']}: {s['source']}" for s in wrong) + ")"
                if wrong else "",
                f"{', '.join(missing)} {_verb(missing, 'has', 'have')} no data-path in "
                "the node config" if missing else ""]))
            others = {_who(n, why): why for n, why in absent.items() if NO_DATA_PATH not in why}
            raise ValueError(
                f"data source: the run config says dataset='local' but {who}: give every "
                "SuperNode a data file (flower-supernode --node-config \"data-path='...'\"), "
                "or run with -c \"dataset='<a built-in dataset>'\""
                + (f"; also without a valid reply: {absent_reasons(others)}" if others else ""))
        return None
    local = [s for s in sources if s["source"] == "local file"]
    if local:
        reads = _verb(local, "reads a local file", "read local files")
        raise ValueError(
            f"data source: {_clients(local)} {reads} (data-path in the node "
            f"config) but the run config says dataset={dataset!r}: run with "
            "-c \"dataset='local'\" (or remove data-path from those nodes' config)")
    kwargs = dataset_kwargs(cfg)
    differ = []
    for s in sources:
        cid = s["client-id"]
        if not 0 <= cid < num_nodes:
            s["matches-server"] = False
            differ.append(f"client {cid}: no partition {cid} of {num_nodes}")
            continue
        X, _ = load_partition(cid, num_nodes, **kwargs)
        features = int(X[0].size) if len(X) else 0
        expected = (len(X), features, data_hash(X))
        got = (s["rows"], s["features"], s["hash"])
        s["matches-server"] = got == expected
        if got != expected:
            extra = (f", num-partitions={s['num-partitions']}"
                     if s.get("num-partitions") not in (None, num_nodes) else "")
            differ.append(f"client {cid}: {got[0]} rows x {got[1]} features{extra}, "
                          f"partition {cid} of {num_nodes} has {expected[0]} x {expected[1]}"
                          + (" (other values)" if got[:2] == expected[:2] else ""))
    if differ:
        return ("the clients' data is not the server's partition of "
                f"dataset={dataset!r} over {num_nodes} nodes: " + "; ".join(differ))
    return None


def absent_reasons(absent: dict[str, str]) -> str:
    """``"client 1 (node 101) failed: ...; node 102 did not reply ..."``, one per client.

    ``absent`` maps who (``strategy.who(node)``) to why it sent no valid reply, as an
    exchange leaves it (``failed: client 1: <the client's error>``); the client's own
    prefix is not repeated.
    """
    parts = []
    for who, why in absent.items():
        why = re.sub(r"^(failed: )client \d+: ", r"\1", str(why))
        parts.append(f"{who} {why}")
    return "; ".join(parts)


def _fixes(reasons: list[str]) -> str:
    """What to change, from the kinds of reasons the clients gave."""
    fixes = []
    if any("round-timeout" in why for why in reasons):
        fixes.append("raise round-timeout (a site that reads a large file needs longer) or "
                     "check the nodes that did not reply")
    if any(NO_DATA_PATH in why for why in reasons):
        fixes.append("give every SuperNode a data file (flower-supernode --node-config "
                     "\"data-path='...'\")")
    if any(why.startswith("failed") and "round-timeout" not in why and NO_DATA_PATH not in why
           for why in reasons):
        fixes.append("fix each failing site's data as its reason says (the site's own log "
                     "has the details)")
    if any(not why.startswith("failed") and "round-timeout" not in why for why in reasons):
        fixes.append("check the clients whose replies were dropped")
    return "; ".join(fixes)


def check_enough_sources(strategy, sources: list[dict], absent: dict[int, str],
                         num_nodes: int) -> None:
    """Refuse the run before round 1 when fewer than ``min-nodes`` clients described their data.

    Raises
    ------
    ValueError
        Listing every client without a valid reply with its own reason (never the
        first one only), and the fixes those reasons call for, or a lower ``min-nodes``.
    """
    if len(sources) >= strategy.min_nodes:
        return
    named = {strategy.who(n): why for n, why in absent.items()}
    fixes = _fixes(list(named.values()))
    if sources:
        fixes = "; ".join(filter(None, [fixes, "or lower min-nodes (run config 'min-nodes') "
                                        "to run without them"]))
    raise ValueError(
        f"round 0: {len(sources)} of {num_nodes} node(s) described their data, fewer than "
        f"min-nodes={strategy.min_nodes}: {absent_reasons(named) or 'no reply'}"
        + (f". To go on: {fixes}" if fixes else ""))


def identical_data_warning(sources: list[dict]) -> str | None:
    """A warning naming the clients with identical rows (``None``: none).

    Equal row counts and fingerprints: the same file on several nodes counts its rows once
    per node.
    """
    groups: dict[tuple[int, int], list[dict]] = {}
    for s in sources:
        if s.get("hash", -1) != -1 and s.get("rows", 0) > 0:
            groups.setdefault((s["rows"], s["hash"]), []).append(s)
    same = [g for g in groups.values() if len(g) > 1]
    if not same:
        return None
    return ("identical data: " + "; ".join(
        f"{_clients(g)} hold the same {g[0]['rows']} rows (equal fingerprints)"
        for g in same) + ": the same file on several nodes counts every row once per node "
        "and weighs those nodes over the others; check their data-path")


def describe(sources: list[dict]) -> None:
    """Log the clients' data sources (one line)."""
    logger.info("data sources: %s", "; ".join(
        f"client {s['client-id']} {s['source']} {s['rows']}x{s['features']}"
        for s in sources))


def check_raw_row_consent(strategy, sources: list[dict]) -> None:
    """Stop before round 1 when the run would send raw rows from a node that refuses them.

    The strategy names the setting that sends raw rows (:meth:`raw_rows_option`, e.g.
    FKM's ``init='paper'``, KDC's sample); every client said in the ``data-source`` phase
    whether its node allows raw rows (node config ``allow-raw-rows``; a node that reads its
    own file refuses by default). The client would refuse the step itself; this says so
    once, before any training message, naming the clients and the two ways out.

    Raises
    ------
    PermissionError
        Naming the option, the refusing clients and the node-config key.
    """
    option = strategy.raw_rows_option()
    refusing = [s for s in sources if s.get("allow-raw-rows") == 0]
    if option is None or not refusing:
        return
    raise PermissionError(
        f"{option} sends raw rows, and {_clients(refusing)} "
        f"{_verb(refusing, 'does', 'do')} not allow raw rows to leave "
        f"{_verb(refusing, 'its node', 'their nodes')} (a SuperNode that reads its own "
        "data-path refuses them unless its node config says allow-raw-rows=true): run "
        f"without {option}, or start {_verb(refusing, 'that SuperNode', 'those SuperNodes')}"
        " with --node-config \"... allow-raw-rows=true\" if the data owners agree")
