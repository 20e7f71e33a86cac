"""Per-round files, checkpoints and failure reports of the App (nothing lost).

Before round 1 :func:`check_out_dir` makes sure ``out-dir`` exists and is writable. After
every round :class:`RoundWriter` (the strategy's ``on_round`` hook) writes, each file
atomically (temporary file in the same directory, then ``os.replace``):

- ``centroids.npz``: the current model (``centroids``) and every round's (``round_<r>``);
- ``history.json``: the per-round history;
- ``checkpoint.npz``: everything a resumed run needs (the strategy's
  :meth:`~flwr_clustering.strategies.base.ClusteringStrategy.state_dict`, the round, the
  algorithm, the run config), in one file: its arrays, plus its JSON part under ``__meta__``;
- ``checkpoint.json``: a readable summary of the checkpoint (round, algorithm, run config).

A run that fails writes ``result.json`` with ``"status": "failed"`` (:func:`write_failure`);
``resume-from='<dir>'`` continues an interrupted iterative run from ``<dir>/checkpoint.npz``
(:func:`load_checkpoint`, :func:`check_resume`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .. import registry
from ..log import logger
from ..reporting import atomic_savez, atomic_write_text, to_jsonable

__all__ = [
    "CHECKPOINT",
    "LOCK",
    "OutDirLock",
    "RUN_FILES",
    "centroid_arrays",
    "PRIVACY_LEDGER",
    "RESUME_FREE_KEYS",
    "RoundWriter",
    "check_out_dir",
    "check_resume",
    "check_resumed_data",
    "load_checkpoint",
    "run_files",
    "run_status",
    "pack",
    "unpack",
    "write_failure",
]

#: The privacy ledger of a run (``ClusteringStrategy.privacy_ledger``), written at its end
#: and when it fails; a resumed run continues it (the checkpoint carries it).
PRIVACY_LEDGER = "privacy.json"

#: The checkpoint file in ``out-dir``.
CHECKPOINT = "checkpoint.npz"
#: Run-config keys that may differ between an interrupted run and its resumption.
RESUME_FREE_KEYS = ("out-dir", "round-timeout", "resume-from", "resume-changed-data")
_FORMAT = 1


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """Create ``out_dir`` and check that a file can be written there (and removed).

    Raises
    ------
    PermissionError
        Naming the directory, when it cannot be created or written.
    """
    out = Path(out_dir)
    probe = out / f".write-probe-{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as ex:
        raise PermissionError(
            f"out-dir {str(out)!r} cannot be written ({ex.strerror or ex}): choose another "
            "directory (run config 'out-dir') before the run starts") from ex
    return out


# ------------------------------------------------------------ one run per out-dir
#: The files that make a directory another run's results (any one of them).
RUN_FILES = ("result.json", "history.json", "centroids.npz", CHECKPOINT)
#: The lock a running run holds on its out-dir (removed when it ends, however it ends).
LOCK = ".run.lock"


class OutDirLock:
    """A run's hold on its out-dir: one writer at a time, nothing overwritten.

    :meth:`acquire` takes the lock (a file created exclusively, naming the process, its
    host and its start) and then refuses a directory that holds another run's results,
    unless this run resumes from that very directory. A lock whose process is gone (the
    run was killed, its machine lost) is stale: it is taken over, and if that run left no
    ``result.json`` one is written with ``"status": "interrupted"`` first, so that the
    directory says what happened. :meth:`release` removes the lock.
    """

    def __init__(self, out_dir: str | os.PathLike) -> None:
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / LOCK
        self.held = False

    def acquire(self, cfg: dict[str, Any]) -> OutDirLock:
        """Lock the out-dir for this run, then check that it holds no other run's results.

        Raises
        ------
        FileExistsError
            Naming the process, host and start of the run that holds the directory, or the
            other run whose results are there, and the options: another ``out-dir`` (or
            none: a folder of its own), or ``resume-from``.
        """
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and _alive(holder):
                    raise FileExistsError(
                        f"out-dir {str(self.out_dir)!r} is being written by another run "
                        f"(process {holder.get('pid')} on {holder.get('host')}, started "
                        f"{holder.get('started')}): choose another out-dir, or leave it empty "
                        "for a folder of its own. If that run is gone (another machine), "
                        f"delete {self.path}") from None
                self._mark_interrupted(holder)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            self.held = True
            break
        else:
            raise FileExistsError(f"out-dir {str(self.out_dir)!r}: could not take {self.path}")
        try:
            self._refuse_other_run(cfg)
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        """Remove the lock (if this run holds it)."""
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def _holder(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None  # unreadable or half-written: treated as stale

    def _mark_interrupted(self, holder: dict[str, Any] | None,
                          found: str = "when the next run took this out-dir") -> None:
        """Record, in ``result.json``, a run that ended without writing one."""
        result = self.out_dir / "result.json"
        if result.exists() or not any((self.out_dir / f).exists() for f in RUN_FILES):
            return
        last = _checkpoint_round(self.out_dir)
        who = (f"process {holder.get('pid')} on {holder.get('host')}, started "
               f"{holder.get('started')}" if holder else "its process")
        summary = {
            "status": "interrupted", "last-round": last,
            "reason": (f"the run ({who}) ended after round {last} without a word: killed, or "
                       f"its machine lost (found {found}); "
                       f"resume-from='{self.out_dir}' continues an iterative run"),
        }
        atomic_write_text(result, json.dumps(summary, indent=2))
        logger.warning("out-dir %s: %s", self.out_dir, summary["reason"])

    def _refuse_other_run(self, cfg: dict[str, Any]) -> None:
        found = run_files(self.out_dir)
        if not found:
            return
        resume = cfg.get("resume-from")
        if resume and Path(str(resume)).expanduser().resolve() == self.out_dir.resolve():
            return  # continuing the run whose files these are
        raise FileExistsError(
            f"out-dir {str(self.out_dir)!r} holds another run's results "
            f"({_describe_run(self.out_dir, found)}); nothing was overwritten. Choose "
            "another out-dir (or leave it empty for a folder of its own), or continue that "
            f"run with resume-from='{self.out_dir}' if it was interrupted")


def run_status(out_dir: str | os.PathLike) -> dict[str, Any]:
    """What an out-dir says about its run; an interrupted run is marked so on disk.

    ``python -m flwr_clustering status <out-dir>`` prints it. A run whose lock names a
    live process is ``"running"`` (with its last checkpointed round). A lock whose process
    is gone, or run files without a ``result.json`` (a killed ServerApp, a SIGTERM'd
    SuperLink), are an interrupted run: ``result.json`` is written with ``"status":
    "interrupted"``, the round it reached and how to resume, and the stale lock removed.
    Otherwise ``result.json`` as it is (``completed``, ``failed``, ``stopped``).

    Raises
    ------
    FileNotFoundError
        When the directory holds no run's files.
    """
    out = Path(out_dir)
    lock = OutDirLock(out)
    if lock.path.exists():
        holder = lock._holder()
        if holder is not None and _alive(holder):
            return {"status": "running", "last-round": _checkpoint_round(out),
                    "process": holder}
        lock._mark_interrupted(holder, found="when the out-dir was inspected")
        lock.path.unlink(missing_ok=True)
    else:
        lock._mark_interrupted(None, found="when the out-dir was inspected")
    result = out / "result.json"
    if not result.exists():
        raise FileNotFoundError(f"{str(out)!r} holds no run's results (none of "
                                f"{', '.join(RUN_FILES)})")
    return json.loads(result.read_text())


def _alive(holder: dict[str, Any]) -> bool:
    """Whether the lock's process still runs (on another host: assumed so)."""
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    except (KeyError, TypeError, ValueError):
        return False
    return True


def run_files(out_dir: str | os.PathLike) -> list[str]:
    """The files of :data:`RUN_FILES` that make ``out_dir`` another run's results.

    Empty when there are none, or only the ``result.json`` of a run refused before round 1
    (``"refused": true``): the corrected run may use the directory.
    """
    out = Path(out_dir)
    found = [f for f in RUN_FILES if (out / f).exists()]
    if found == ["result.json"]:
        try:
            if json.loads((out / "result.json").read_text()).get("refused") is True:
                return []
        except (OSError, ValueError, AttributeError):
            pass
    return found


def _checkpoint_round(out_dir: Path) -> int:
    try:
        return int(json.loads((out_dir / "checkpoint.json").read_text())["round"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _describe_run(out_dir: Path, found: list[str]) -> str:
    """A few words on the run whose files are in ``out_dir``."""
    try:
        result = json.loads((out_dir / "result.json").read_text())
        mtime = (out_dir / "result.json").stat().st_mtime
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(mtime))
        return (f"result.json: {result.get('algorithm', '?')}, status "
                f"{result.get('status', '?')}, written {when}")
    except (OSError, ValueError):
        return f"{', '.join(found)}; last round on disk {_checkpoint_round(out_dir)}"


# ----------------------------------------------------------------- (de)serialising
def pack(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Turn a state (nested dicts, lists, arrays, scalars) into JSON plus named arrays.

    Every array goes to ``arrays`` and is replaced by ``{"__array__": name}``; dicts with
    keys that are not strings become ``{"__items__": [[key, value], ...]}``; NumPy
    scalars become Python scalars. Floats are kept exactly (non-finite ones too).
    """
    if isinstance(obj, np.ndarray):
        name = f"a{len(arrays)}"
        arrays[name] = obj
        return {"__array__": name}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: pack(v, arrays) for k, v in obj.items()}
        return {"__items__": [[pack(k, arrays), pack(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, list | tuple):
        return [pack(v, arrays) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def unpack(obj: Any, arrays) -> Any:
    """The inverse of :func:`pack` (``arrays``: a mapping such as an open ``.npz``)."""
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            return np.asarray(arrays[obj["__array__"]])
        if set(obj) == {"__items__"}:
            return {unpack(k, arrays): unpack(v, arrays) for k, v in obj["__items__"]}
        return {k: unpack(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unpack(v, arrays) for v in obj]
    return obj


# ------------------------------------------------------------------- writing
class RoundWriter:
    """The App's ``on_round`` hook: the round's model, history and checkpoint, atomically.

    Parameters
    ----------
    out_dir : path-like
        The run's directory (checked by :func:`check_out_dir`).
    run_config : dict
        The merged run config, saved in the checkpoint.
    last_round : int, default 0
        The last completed round so far (a resumed run's checkpoint round).

    Attributes
    ----------
    last_round : int
        The last round written.
    num_nodes : int or None
        Connected nodes (set by the App; checked on resume).
    data_sources : list of dict
        The clients' data records of round 0 (set by the App; a resumed run's data must
        match them, :func:`check_resumed_data`).
    write_seconds : list of float
        Seconds spent writing, per round.
    """

    def __init__(self, out_dir: str | os.PathLike, run_config: dict[str, Any],
                 last_round: int = 0) -> None:
        self.out = Path(out_dir)
        self.run_config = dict(run_config)
        self.last_round = int(last_round)
        self.num_nodes: int | None = None
        self.data_sources: list[dict[str, Any]] = []
        self.write_seconds: list[float] = []

    def __call__(self, strategy, server_round: int) -> None:
        """Write ``centroids.npz``, ``history.json``, ``checkpoint.npz`` and ``.json``."""
        t0 = time.perf_counter()
        atomic_savez(self.out / "centroids.npz", **centroid_arrays(strategy))
        # compact JSON (the C encoder); the final save_results writes it indented
        atomic_write_text(self.out / "history.json",
                          json.dumps(to_jsonable(strategy.history), separators=(",", ":")))
        arrays: dict[str, np.ndarray] = {}
        meta = {
            "format": _FORMAT, "algorithm": strategy.name, "round": int(server_round),
            "stopped": bool(strategy.stopped), "num-nodes": self.num_nodes,
            "data-sources": self.data_sources,
            "run-config": self.run_config,
            "state": pack(strategy.state_dict(), arrays),
        }
        text = json.dumps(meta)
        atomic_savez(self.out / CHECKPOINT, **arrays,
                     __meta__=np.frombuffer(text.encode("utf-8"), dtype=np.uint8))
        atomic_write_text(self.out / "checkpoint.json", json.dumps({
            "algorithm": strategy.name, "round": int(server_round),
            "stopped": bool(strategy.stopped), "num-nodes": self.num_nodes,
            "data-sources": self.data_sources,
            "file": CHECKPOINT, "run-config": self.run_config}))
        self.last_round = int(server_round)
        self.write_seconds.append(time.perf_counter() - t0)
        logger.debug("round %d written to %s in %.1f ms", server_round, self.out,
                     1e3 * self.write_seconds[-1])


def centroid_arrays(strategy) -> dict[str, np.ndarray]:
    """``centroids.npz``: the model and every round's, in the data's own units.

    With a scaling (``scaling='standard'``, the default) the arrays are mapped back to
    the original units, and ``scaled_centroids`` keeps the model as computed.
    """
    out = {f"round_{i + 1}": np.asarray(strategy.in_original_units(c))
           for i, c in enumerate(strategy.centroid_history)}
    if strategy.centroids is not None:
        out["centroids"] = np.asarray(strategy.in_original_units(strategy.centroids))
        transform = getattr(strategy, "feature_transform", None)
        if transform is not None and transform.scaled:
            out["scaled_centroids"] = np.asarray(strategy.centroids)
    return out


def write_failure(out_dir: str | os.PathLike, strategy, run_config: dict[str, Any],
                  error: BaseException, last_round: int, *, refused: bool = False) -> Path:
    """Write ``result.json`` of a failed run (``status``, ``reason``, ``last-round``, ...).

    The per-round files of the completed rounds stay as they are. A run ended by
    ``SystemExit`` or ``KeyboardInterrupt`` (``flwr stop``, Ctrl-C, a signal to the
    ServerApp: Flower's handlers exit the process) is recorded as ``"stopped"`` by the
    user, not as failed, with the way to continue it. ``refused``: the App's checks
    refused the run before round 1 (its run config, options, paths or the clients' data):
    ``"refused": true`` and the ERROR line says "run refused before round 1".
    """
    stopped = isinstance(error, SystemExit | KeyboardInterrupt)
    reason = str(error) or repr(error)
    if stopped:
        reason = (f"stopped by the user (flwr stop, Ctrl-C or a signal to the ServerApp) "
                  f"after round {int(last_round)}")
        if int(last_round) > 0 and getattr(strategy, "resumable", False):
            reason += f"; resume-from='{Path(out_dir)}' continues it"
    summary: dict[str, Any] = {
        "status": "stopped" if stopped else "failed", "reason": reason,
        "error-type": type(error).__name__, "last-round": int(last_round),
        "algorithm": getattr(strategy, "name", run_config.get("algorithm")),
    }
    if refused and not stopped:
        summary["refused"] = True
    if strategy is not None:
        summary.update({
            "config": strategy.describe(), "rounds": len(strategy.history),
            "federated": strategy.final_metrics,
            "warnings": list(getattr(strategy, "warnings", [])),
        })
    summary["run-config"] = run_config
    path = Path(out_dir) / "result.json"
    if strategy is not None and hasattr(strategy, "privacy_ledger"):
        atomic_write_text(Path(out_dir) / PRIVACY_LEDGER,
                          json.dumps(to_jsonable(strategy.privacy_ledger()), indent=1))
    atomic_write_text(path, json.dumps(to_jsonable(summary), indent=2))
    if summary.get("refused"):
        logger.error("run refused before round 1: %s (written to %s)", summary["reason"], path)
    else:
        logger.log(logging.WARNING if stopped else logging.ERROR, "run %s after round %d: %s "
                   "(written to %s)", summary["status"], last_round, summary["reason"], path)
    return path


# ------------------------------------------------------------------- resuming
def load_checkpoint(directory: str | os.PathLike) -> dict[str, Any]:
    """Read ``<directory>/checkpoint.npz``.

    Returns ``algorithm``, ``round``, ``run-config``, ``num-nodes``, ``stopped`` and the
    strategy's ``state``.

    Raises
    ------
    FileNotFoundError
        Naming the directory, when it holds no checkpoint.
    ValueError
        Naming the file and the choices (restore it, or start afresh), when it is damaged
        (cut short, overwritten, not a checkpoint) or of another format.
    """
    path = Path(str(directory)).expanduser() / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"resume-from: no checkpoint {path} (a run writes it after "
                                "every round into its out-dir)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(npz["__meta__"].tobytes().decode("utf-8"))
            if meta.get("format") != _FORMAT:
                raise ValueError(f"resume-from: {path} has checkpoint format "
                                 f"{meta.get('format')!r}, expected {_FORMAT}")
            meta["state"] = unpack(meta["state"], npz)
    except ValueError as ex:
        if str(ex).startswith("resume-from:"):
            raise
        raise _damaged(path, ex) from ex
    except (OSError, EOFError, KeyError, zipfile.BadZipFile) as ex:
        raise _damaged(path, ex) from ex
    return meta


def _damaged(path: Path, ex: BaseException) -> ValueError:
    """The refusal of a checkpoint that cannot be read, with the user's two choices."""
    return ValueError(
        f"resume-from: the checkpoint {path} is damaged and cannot be read "
        f"({type(ex).__name__}: {ex}). Restore it from a copy (each run writes it "
        "atomically after every round, so a damaged one was changed afterwards), or start "
        "afresh without resume-from (into another out-dir to keep this run's files)")


def check_resumed_data(checkpoint: dict[str, Any], sources: list[dict[str, Any]],
                       where: str, accept: bool = False
                       ) -> tuple[list[dict[str, Any]], str | None]:
    """Refuse to resume on other data than the interrupted run's; return its record.

    Returns the run's data record and, when a change was accepted, the warning (logged
    here, for the run's ``warnings`` in ``result.json``).

    Every client of the checkpoint's round-0 record (``data-sources``: rows and
    fingerprint per client id) must come back with the same rows; a client that the
    interrupted run did not have is refused too. A checkpoint written before the record
    existed is not checked (the current record is returned). With ``accept``
    (``resume-changed-data``) a change is a WARNING instead, the record returned is the
    interrupted run's with each changed client's new rows and fingerprint under
    ``"at-resume"``, and the changed clients' declared sums are dropped from the
    checkpoint's state (they no longer describe their rows: their means go unbounded).

    Raises
    ------
    ValueError
        Naming each client whose data differs, then and now, and the choices.
    """
    before = {int(s["client-id"]): s for s in checkpoint.get("data-sources") or []}
    if not before:
        return sources, None
    changed, ids = [], []
    for s in sources:
        old = before.get(int(s["client-id"]))
        if old is None:
            changed.append(f"client {s['client-id']} was not in the interrupted run")
        elif (old["rows"], old["hash"]) != (s["rows"], s["hash"]):
            changed.append(f"client {s['client-id']} has {s['rows']} rows (fingerprint "
                           f"{s['hash']}) where the interrupted run had {old['rows']} "
                           f"(fingerprint {old['hash']})")
        else:
            continue
        ids.append(int(s["client-id"]))
    if changed and not accept:
        raise ValueError(
            f"resume-from {where!r}: the data changed since the interrupted run: "
            + "; ".join(changed) + ". Restore those files to resume, start a new run "
            "on the new data (another out-dir), or set resume-changed-data=true to go on "
            "with the new rows knowingly")
    warning = None
    if changed:
        warning = (f"resume-from {where!r}: the data changed since the interrupted run, "
                   f"going on as resume-changed-data=true asks: {'; '.join(changed)}; the "
                   "model so far was computed on the old rows, and these clients' means "
                   "are no longer bounded by their declared sums")
        logger.warning("%s", warning)
        sums = (checkpoint.get("state") or {}).get("client_sums") or {}
        for cid in ids:
            sums.pop(str(cid), None)
    now = {int(s["client-id"]): s for s in sources}
    record = [dict(s) for s in checkpoint["data-sources"]]
    for entry in record:
        cid = int(entry["client-id"])
        if cid in ids and cid in now:
            entry["at-resume"] = {"rows": now[cid]["rows"], "hash": now[cid]["hash"]}
    record += [{**now[cid], "new-at-resume": True} for cid in ids if cid not in before]
    return record, warning


def check_resume(checkpoint: dict[str, Any], cfg: dict[str, Any]) -> None:
    """Refuse to resume a run of another algorithm or another result-relevant config.

    Every run-config key but :data:`RESUME_FREE_KEYS` must equal the checkpoint's; the
    algorithm must be resumable (iterative) and the checkpointed run unfinished.

    Raises
    ------
    ValueError
        Naming the algorithm, or every differing key with both values.
    """
    where = cfg.get("resume-from")
    spec = registry.get(str(cfg["algorithm"]))
    if not spec.capabilities.resume:
        names = registry.able("resume")
        raise ValueError(f"resume-from: algorithm {cfg['algorithm']!r} cannot resume (a "
                         f"one-shot protocol has no rounds to continue); resumable: {names}")
    if checkpoint["algorithm"] != spec.strategy.name:
        raise ValueError(f"resume-from {where!r}: the checkpoint is of algorithm "
                         f"{checkpoint['algorithm']!r}, the run config says "
                         f"{cfg['algorithm']!r}")
    saved = checkpoint["run-config"]
    keys = sorted((set(saved) | set(cfg)) - set(RESUME_FREE_KEYS))
    differ = [k for k in keys if saved.get(k) != cfg.get(k)]
    if differ:
        pairs = ", ".join(f"{k} ({saved.get(k)!r} in the checkpoint, {cfg.get(k)!r} now)"
                          for k in differ)
        raise ValueError(f"resume-from {where!r}: the run config differs from the "
                         f"interrupted run's in {pairs}; only {list(RESUME_FREE_KEYS)} "
                         "may change")
    if checkpoint.get("stopped"):
        raise ValueError(f"resume-from {where!r}: that run completed at round "
                         f"{checkpoint['round']}; nothing to resume")
