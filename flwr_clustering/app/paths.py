"""What a run config may make the ServerApp read: the operator's allowed paths.

A run config comes from whoever submits the run; the ServerApp runs with the operator's
rights. So the App reads no file a run config names unless the operator allowed the
directory it is in:

* ``graph`` (DGC) takes a built-in topology (``ring``, ``complete``, ``star``, ``grid``,
  ``erdos-renyi``), an inline edge list (``'0-1,1-2,2-0'``), or an adjacency file **only
  inside an allowed directory**;
* ``resume-from`` reads only ``<dir>/checkpoint.npz`` in the App's own format; when the
  operator set allowed directories, ``<dir>`` must be inside one of them too;
* ``out-dir`` is where the run writes (checked writable, never another run's results): as
  before.

The allowed directories are the ServerApp's ``allowed_paths`` argument
(:func:`~flwr_clustering.app.server_app.run_server`) or, by default, the environment
variable :data:`ALLOWED_PATHS_ENV` of the ServerApp process (directories separated by
``os.pathsep``, ``:`` on Linux). A path is resolved (``..`` and symbolic links followed)
before it is compared, so a link inside an allowed directory to a file outside it is
refused. A refusal names the key and the fix, never anything of the file.

A Python program that builds ``DGC(graph=path)`` itself is its own operator: the
strategy reads the file it is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..algorithms.dgc import GRAPHS, is_edge_list

__all__ = ["ALLOWED_PATHS_ENV", "allowed_roots", "check_run_config_paths"]

#: Environment variable of the ServerApp process: the directories whose files a run
#: config may name (``os.pathsep``-separated).
ALLOWED_PATHS_ENV = "FLWR_CLUSTERING_ALLOWED_PATHS"


def allowed_roots(allowed_paths: Iterable[str | os.PathLike] | str | None = None
                  ) -> tuple[Path, ...] | None:
    """The operator's allowed directories, resolved; ``None`` when none is set.

    Parameters
    ----------
    allowed_paths : iterable of path-like, str or None
        The ServerApp's argument; ``None``: the environment variable
        :data:`ALLOWED_PATHS_ENV` (unset or empty: ``None``). A string is split at
        ``os.pathsep``.

    Returns
    -------
    tuple of pathlib.Path or None
    """
    if allowed_paths is None:
        allowed_paths = os.environ.get(ALLOWED_PATHS_ENV, "")
    if isinstance(allowed_paths, str | os.PathLike):
        allowed_paths = str(allowed_paths).split(os.pathsep)
    roots = tuple(Path(p).expanduser().resolve() for p in allowed_paths if str(p).strip())
    return roots or None


def _inside(path: str, roots: tuple[Path, ...] | None) -> bool:
    if roots is None:
        return False
    resolved = Path(path).expanduser().resolve()
    return any(resolved.is_relative_to(root) for root in roots)


def _how_to_allow(roots: tuple[Path, ...] | None) -> str:
    where = ("the allowed directories are " + os.pathsep.join(map(str, roots))
             if roots is not None else "no directory is allowed")
    return (f"{where}; the operator allows one by starting the SuperLink (the ServerApp "
            f"process) with {ALLOWED_PATHS_ENV}=/dir/one{os.pathsep}/dir/two, or by passing "
            "allowed_paths to run_server")


def check_run_config_paths(cfg: dict[str, Any],
                           allowed_paths: Iterable[str | os.PathLike] | str | None = None
                           ) -> None:
    """Refuse a run config that would make the ServerApp read a file it may not.

    Parameters
    ----------
    cfg : dict
        A merged run config.
    allowed_paths : iterable of path-like, str or None
        The operator's directories (see :func:`allowed_roots`).

    Raises
    ------
    PermissionError
        Naming the key, what it accepts and how the operator allows a directory; nothing
        of the file is read.
    """
    roots = allowed_roots(allowed_paths)
    graph = cfg.get("graph")
    if (str(cfg.get("algorithm")) == "dgc" and isinstance(graph, str)
            and graph not in GRAPHS and not is_edge_list(graph) and not _inside(graph, roots)):
        raise PermissionError(
            f"run-config key 'graph': {graph!r} is neither a built-in topology "
            f"({', '.join(GRAPHS)}) nor an edge list such as '0-1,1-2,2-0', and a run config "
            "may name a graph file only inside a directory the operator allowed: give a "
            f"topology or an edge list, or ask the operator ({_how_to_allow(roots)})")
    resume = cfg.get("resume-from")
    if resume and roots is not None and not _inside(str(resume), roots):
        raise PermissionError(
            f"run-config key 'resume-from': {str(resume)!r} is outside the directories the "
            f"operator allowed: resume a run whose out-dir is inside one ({_how_to_allow(roots)})")
