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
  before;
* ``algorithm='module:ATTRIBUTE'`` imports code: only a module of the App the run runs (a
  package beside ``flwr_clustering`` in the App's directory, as ``flwr run .`` packs it:
  the submitter's own code, e.g. ``simulations.benchmarks.echo:ECHO``) or inside an
  allowed directory; any other module installed on the server is refused **before it is
  imported** (:func:`check_run_config_algorithm`), as a SuperNode refuses one its node
  config does not list (``allow-algorithms``).

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

import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..algorithms.dgc import GRAPHS, is_edge_list

__all__ = ["ALLOWED_PATHS_ENV", "allowed_roots", "check_run_config_algorithm",
           "check_run_config_paths"]

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


def _app_root() -> Path | None:
    """The directory that holds the running App's ``flwr_clustering`` package.

    ``None`` when that is an installation's ``site-packages`` (``dist-packages``): every
    installed package lies there, none of them the run's own.
    """
    root = Path(__file__).resolve().parents[2]
    return None if root.name in ("site-packages", "dist-packages") else root


def _module_location(top: str) -> Path | None:
    """Where the top-level package or module ``top`` lies, found without importing it."""
    module = sys.modules.get(top)
    if module is not None:
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__",
                                                                       [])), None)
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        where = spec.origin if spec.origin not in (None, "built-in", "frozen") else next(
            iter(spec.submodule_search_locations or []), None)
    return None if where is None else Path(where).resolve()


def check_run_config_algorithm(algorithm: Any,
                               allowed_paths: Iterable[str | os.PathLike] | str | None = None
                               ) -> None:
    """Refuse a run config's ``module:ATTRIBUTE`` algorithm from outside the App, unimported.

    Parameters
    ----------
    algorithm : Any
        The run config's ``algorithm`` (a registered name passes).
    allowed_paths : iterable of path-like, str or None
        The operator's directories (see :func:`allowed_roots`).

    Raises
    ------
    PermissionError
        Naming the key, the module and how the operator allows it; the module is not
        imported (its package is located by :func:`importlib.util.find_spec`, which runs
        none of its code).
    """
    if not isinstance(algorithm, str) or ":" not in algorithm:
        return
    module = algorithm.split(":", 1)[0].strip()
    top = module.split(".", 1)[0]
    if not top:
        return  # the registry refuses the malformed name
    where = _module_location(top)
    if where is None:
        return  # not installed: the registry's "cannot import" says so
    app, roots = _app_root(), allowed_roots(allowed_paths)
    # the App's own packages: under its directory, but never an installation in it (a
    # virtualenv inside a project directory holds every installed package)
    own = app is not None and where.is_relative_to(app) and not {
        "site-packages", "dist-packages"} & set(where.relative_to(app).parts)
    if own or (
            roots is not None and any(where.is_relative_to(r) for r in roots)):
        return
    raise PermissionError(
        f"run-config key 'algorithm': {algorithm!r} names module {top!r}, which is not part "
        "of this App (a package beside flwr_clustering in the App's directory) nor inside a "
        "directory the operator allowed, so the ServerApp does not import it: ship the "
        f"algorithm inside the App, or ask the operator ({_how_to_allow(roots)})")
