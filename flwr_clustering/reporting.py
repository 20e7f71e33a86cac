"""Writing run results to disk: centroids (.npz), history and metrics (JSON), a PNG.

Layer 2: used by the strategies (federated runs) and by the reproduction CLI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_savez",
    "atomic_write_text",
    "plot_curves",
    "plot_run",
    "save_run",
    "short_label",
    "to_jsonable",
]


def _atomic(path: str | os.PathLike, write) -> None:
    """Write ``path`` through a temporary file in the same directory, then rename it.

    A reader (or a crash) sees the old file or the new one, never half of one.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (temporary file + ``os.replace``)."""
    _atomic(path, lambda fh: fh.write(text.encode("utf-8")))


def atomic_savez(path: str | os.PathLike, **arrays: Any) -> None:
    """``numpy.savez`` to ``path`` atomically (temporary file + ``os.replace``)."""
    _atomic(path, lambda fh: np.savez(fh, **arrays))


def to_jsonable(obj: Any) -> Any:
    """Convert NumPy scalars/arrays (recursively) into JSON-serialisable Python values.

    Parameters
    ----------
    obj : Any
        A nested structure of dicts, lists, NumPy values and plain values.

    Returns
    -------
    Any
        The same structure with lists and Python floats/ints; non-finite floats become
        ``None``.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.integer | bool | np.bool_):
        return obj.item() if hasattr(obj, "item") else obj
    if isinstance(obj, float | np.floating):
        value = float(obj)
        return value if np.isfinite(value) else None
    return obj


def plot_run(
    path: str | os.PathLike,
    centroids: np.ndarray,
    history: list[dict[str, Any]],
    X: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    title: str = "",
    *,
    space: str = "",
    feature_names: Sequence[str] | None = None,
) -> None:
    """Save a two-panel PNG: the clusters and the convergence curve.

    Clusters are drawn in 2-D (on the first two principal components above two features,
    along one axis with the points jittered for one feature); the panel's title says
    which rows (``space``) and which projection. The curve shows the centroid shift and,
    if present, federated metrics per round.

    Parameters
    ----------
    path : path-like
        Output file.
    centroids : numpy.ndarray of shape (k, d)
        Final centroids.
    history : list of dict
        Per-round records with ``"round"``, ``"shift"`` and optional ``"metrics"``.
    X : numpy.ndarray, optional
        Pooled data to scatter (simulation only; a deployment server has no data).
    labels : numpy.ndarray, optional
        Cluster labels of ``X`` for colouring.
    title : str
        Figure title.
    space : str
        What the rows and centroids are, for the panel's title (e.g. ``"scaled rows
        (standard)"``, the space the model was computed in); empty: not said.
    feature_names : sequence of str, optional
        Axis labels of one or two features (shortened to 40 characters); default
        ``feature 1``, ``feature 2``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.decomposition import PCA

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    C = np.asarray(centroids, dtype=float)
    names = [short_label(f, 40) for f in feature_names or ()]
    if len(names) != C.shape[1]:
        names = [f"feature {j + 1}" for j in range(C.shape[1])]
    projection = ""
    points = None if X is None else np.asarray(X, dtype=float)
    if points is not None and (points.ndim != 2 or points.shape[1] != C.shape[1]):
        points = None  # the centroids live in another space (DeepFeCA's embedding)
    if np.isnan(C).any():
        # Masked-feature centroids may lack coordinates that no contributor observed: plot
        # them at the data's (or the other centroids') mean there.
        fill = np.nanmean(points if points is not None else C, axis=0)
        C = np.where(np.isnan(C), np.nan_to_num(fill)[None, :], C)
    if C.shape[1] == 1:
        # One feature: along x; the points jittered in y (a fixed generator) to be seen
        C = np.column_stack([C[:, 0], np.zeros(len(C))])
        if points is not None:
            jitter = np.random.default_rng(0).uniform(-0.4, 0.4, len(points))
            points = np.column_stack([points[:, 0], jitter])
        ax1.set_ylim(-1, 1)
        ax1.set_yticks([])
        ax1.set_xlabel(names[0])
        projection = "points jittered vertically"
    elif C.shape[1] == 2:
        ax1.set_xlabel(names[0])
        ax1.set_ylabel(names[1])
    else:
        fit = points if points is not None else C
        pca = PCA(min(2, *fit.shape)).fit(fit)
        projection = ("PCA of the rows" if points is not None else "PCA of the centroids")

        def project(A: np.ndarray) -> np.ndarray:  # two columns, even from one component
            Z = pca.transform(A)
            return np.column_stack([Z, np.zeros((len(Z), 2 - Z.shape[1]))])

        C = project(C)
        points = None if points is None else project(points)
        ax1.set_xlabel("PC 1")
        ax1.set_ylabel("PC 2")
    if points is not None:
        ax1.scatter(points[:, 0], points[:, 1], c=labels, s=6, cmap="tab20", alpha=0.6)
    ax1.scatter(C[:, 0], C[:, 1], marker="x", c="black", s=60, label="centroids")
    ax1.legend(loc="best")
    ax1.set_title(", ".join(p for p in ("clusters", short_label(space, 60), projection) if p),
                  fontsize="medium")
    rounds = [h["round"] for h in history]
    shifts = [h.get("shift") for h in history]
    finite = [
        (r, s) for r, s in zip(rounds, shifts, strict=True) if s is not None and np.isfinite(s)
    ]
    if finite:
        ax2.semilogy([r for r, _ in finite], [max(s, 1e-16) for _, s in finite], "ko-",
                     label="centroid shift")
        ax2.set_ylabel("Hungarian-matched shift")
    ax2.set_xlabel("round")
    ax3 = ax2.twinx()
    for key in ("ari-client-weighted", "ari", "simplified-silhouette"):
        pts = [(h["round"], h["metrics"][key]) for h in history if key in h.get("metrics", {})]
        if pts:
            ax3.plot([r for r, _ in pts], [v for _, v in pts], "s--", label=key)
    if ax3.lines:
        ax3.set_ylabel("metric")
        ax3.legend(loc="center right")
    ax2.set_title("convergence")
    fig.suptitle(short_label(title, 120))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def short_label(text: Any, width: int) -> str:
    """``text`` on one line of at most ``width`` characters (cut with an ellipsis).

    For the labels of a figure, whose canvas would otherwise grow with a long name; the
    tables keep the full text.
    """
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:max(width - 1, 0)] + "\u2026"


def save_run(
    out_dir: str | os.PathLike,
    centroids: np.ndarray,
    centroid_history: list[np.ndarray],
    history: list[dict[str, Any]],
    summary: dict[str, Any],
    X: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    extra_arrays: dict[str, np.ndarray] | None = None,
    *,
    plot_centroids: np.ndarray | None = None,
    space: str = "",
    feature_names: Sequence[str] | None = None,
) -> dict[str, str]:
    """Write ``centroids.npz``, ``history.json``, ``result.json`` and ``clusters.png``.

    Parameters
    ----------
    out_dir : path-like
        Directory, created if missing.
    centroids : numpy.ndarray
        Final model.
    centroid_history : list of numpy.ndarray
        Global centroids after every round (stored as ``round_<r>`` in the npz).
    history : list of dict
        Per-round records.
    summary : dict
        Final metrics, configuration and anything else worth keeping.
    X, labels : numpy.ndarray, optional
        Pooled data and labels for the scatter plot.
    extra_arrays : dict, optional
        More arrays for ``centroids.npz`` (e.g. ``scaled_centroids``).
    plot_centroids : numpy.ndarray, optional
        The centroids to draw with ``X`` (default ``centroids``), in ``X``'s space.
    space, feature_names :
        As for :func:`plot_run`.

    Returns
    -------
    dict
        The written paths by kind.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "centroids": str(out / "centroids.npz"),
        "history": str(out / "history.json"),
        "result": str(out / "result.json"),
        "plot": str(out / "clusters.png"),
    }
    rounds = {f"round_{i + 1}": np.asarray(c) for i, c in enumerate(centroid_history)}
    atomic_savez(paths["centroids"], centroids=np.asarray(centroids), **rounds,
                 **(extra_arrays or {}))
    atomic_write_text(paths["history"], json.dumps(to_jsonable(history), indent=2))
    atomic_write_text(paths["result"],
                      json.dumps(to_jsonable({**summary, "files": paths}), indent=2))
    plot_run(paths["plot"], centroids if plot_centroids is None else plot_centroids, history,
             X, labels, title=str(summary.get("algorithm", "")), space=space,
             feature_names=feature_names)
    return paths


def plot_curves(
    path: str | os.PathLike, history: list[dict[str, Any]], keys: tuple[str, ...],
    title: str = "",
) -> None:
    """Save a PNG with one panel per history key plotted against the round.

    Parameters
    ----------
    path : path-like
        Output file.
    history : list of dict
        Per-round records with ``"round"``.
    keys : tuple of str
        Numeric keys of the records to plot (missing or non-finite values are skipped).
    title : str
        Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.6), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        pts = [(h["round"], h[key]) for h in history
               if isinstance(h.get(key), int | float) and np.isfinite(h[key])]
        if pts:
            ax.plot([r for r, _ in pts], [v for _, v in pts], "o-")
        ax.set_xlabel("round")
        ax.set_title(key)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_k_scores(path: str | os.PathLike, scores: list[dict[str, Any]], chosen: int,
                  rule: str, title: str = "") -> None:
    """Save a PNG with every criterion of a search against ``k``, the chosen ``k`` marked.

    Parameters
    ----------
    path : path-like
        Output file.
    scores : list of dict
        One record per candidate ``k`` (``k``, ``silhouette``, ``calinski-harabasz``,
        ``davies-bouldin``, ``sse``).
    chosen : int
        The chosen ``k`` (a vertical line in every panel).
    rule : str
        The rule that chose it (in the title).
    title : str
        Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("silhouette", "simplified silhouette (higher is better)"),
              ("calinski-harabasz", "Calinski-Harabasz (higher is better)"),
              ("davies-bouldin", "Davies-Bouldin (lower is better)"),
              ("sse", "SSE (the knee)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (key, name) in zip(axes[0], panels, strict=True):
        pts = [(s["k"], s[key]) for s in scores if np.isfinite(float(s.get(key, np.nan)))]
        if pts:
            ax.plot([k for k, _ in pts], [v for _, v in pts], "o-")
        ax.axvline(chosen, color="tab:red", linestyle="--", linewidth=1)
        ax.set_xlabel("k")
        ax.set_title(name, fontsize=9)
    fig.suptitle(f"{title} (k={chosen} by {rule})".strip())
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
