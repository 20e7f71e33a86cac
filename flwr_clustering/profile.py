"""Per-cluster profiles from the additive statistics that federated clients send.

Clients never send rows. For every cluster ``j`` they send the row count ``n_j``, the residual
sum ``R_j = sum(x - c_j)`` and the element-wise squared residual sum ``Q_j = sum((x - c_j)**2)``
over their rows ``x`` assigned to ``j`` (``c_j`` is the model's centre). Summed over the
sites, these give each cluster's exact mean and (population) standard deviation per feature:

``mean_j = c_j + R_j / n_j`` and ``var_j = Q_j / n_j - (R_j / n_j)**2``.

Residuals about the centre (rather than raw sums of ``x`` and ``x**2``) keep the subtraction
well conditioned when a feature has a large offset. :func:`cluster_profile` maps these back
to the data's original units (undoing an affine scaling the clients applied) and suppresses
small per-site counts; :func:`plot_profile` draws the profile; :func:`write_report` writes a
self-contained HTML report a domain expert can read offline.

Layer 2, next to :mod:`flwr_clustering.reporting`: imports only NumPy at import time;
pandas and matplotlib load when a function needs them.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flwr_clustering.reporting import _atomic, atomic_write_text, to_jsonable

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

__all__ = ["cluster_profile", "plot_profile", "write_report"]

#: Prefix of the per-site row-count columns of a profile.
SITE_PREFIX = "rows at "
#: What a missing value is shown as in the HTML report (a suppressed count is "suppressed").
_MISSING = "\u2013"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _as_counts(values: Any, name: str, k: int | None = None) -> np.ndarray:
    """Check a 1-D array of non-negative whole counts and return it as ``int64``."""
    arr = np.asarray(values)
    if arr.ndim != 1 or (k is not None and arr.shape[0] != k):
        expected = "(k,)" if k is None else f"({k},)"
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name} must hold integer counts, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
        raise ValueError(f"{name} must hold whole (finite, integer) counts")
    if np.any(arr < 0):
        raise ValueError(f"{name} must not be negative, got {arr.tolist()}")
    return arr.astype(np.int64)


def _as_matrix(values: Any, name: str, shape: tuple[int, int], ref: str) -> np.ndarray:
    """Return ``values`` as a float array of ``shape`` or raise naming both shapes."""
    arr = np.asarray(values, dtype=float)
    if arr.shape != shape:
        raise ValueError(
            f"{name} has shape {arr.shape} but {ref} implies shape {shape}; they must match"
        )
    return arr


def cluster_profile(
    counts: Any,
    residual_sums: Any,
    sq_residual_sums: Any,
    centroids: Any,
    feature_names: Sequence[str],
    *,
    center: Any = None,
    scale: Any = None,
    site_counts: Mapping[str, Any] | None = None,
    privacy_threshold: int = 2,
) -> pd.DataFrame:
    """Per-cluster size, share, rows per site, and mean and std of every feature.

    The means and standard deviations are exact (up to rounding) for the pooled rows of the
    federation, computed from additive statistics only, and reported in the data's original
    units.

    Parameters
    ----------
    counts : array-like of shape (k,)
        Rows per cluster in the federation (non-negative integers).
    residual_sums : array-like of shape (k, d)
        Per cluster, the sum over its rows ``x`` of ``x - c_j``, in the space of
        ``centroids``. A row of NaN marks a cluster whose statistics were withheld.
    sq_residual_sums : array-like of shape (k, d)
        Per cluster, the sum over its rows of ``(x - c_j)**2``, element-wise per feature, in
        the same space.
    centroids : array-like of shape (k, d)
        The model's centres in the space the clients computed in (possibly scaled).
    feature_names : sequence of str
        The ``d`` feature names, in column order.
    center, scale : array-like of shape (d,), optional
        An affine scaling ``z = (x - center) / scale`` the clients applied before computing
        the statistics; the profile maps back with ``center + scale * mean_z`` and
        ``|scale| * std_z``. ``None`` means no shift (0) or no scaling (1).
    site_counts : mapping of str to array-like of shape (k,), optional
        Each site's rows per cluster (plain runs only), in the order the columns should
        appear.
    privacy_threshold : int
        A site count ``c`` with ``0 < c < privacy_threshold`` is suppressed (NaN), so that
        no small group of rows can be singled out. Counts of 0 are kept.

    Returns
    -------
    pandas.DataFrame
        Index ``"cluster"`` (``0 .. k-1``); columns ``"size"`` (int), ``"fraction"``
        (size / total rows), one ``"rows at <site>"`` column per site (float, NaN where
        suppressed), then ``"<feature> mean"`` and ``"<feature> std"`` per feature
        (population std, ``ddof=0``). An empty cluster has NaN mean and std.

    Raises
    ------
    ValueError
        On mismatched shapes (naming the argument and both shapes), a ``feature_names``
        length other than ``d``, duplicate feature names, or negative or non-integer counts.
    """
    import pandas as pd

    n = _as_counts(counts, "counts")
    k = n.shape[0]
    C = np.asarray(centroids, dtype=float)
    if C.ndim != 2 or C.shape[0] != k:
        raise ValueError(
            f"centroids has shape {C.shape} but counts has shape {n.shape}; "
            f"centroids must have shape ({k}, d)"
        )
    d = C.shape[1]
    R = _as_matrix(residual_sums, "residual_sums", (k, d), f"centroids {C.shape}")
    Q = _as_matrix(sq_residual_sums, "sq_residual_sums", (k, d), f"centroids {C.shape}")
    names = [str(f) for f in feature_names]
    if len(names) != d:
        raise ValueError(
            f"feature_names has {len(names)} names but the statistics have d = {d} features "
            f"(centroids shape {C.shape})"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"feature_names must be unique, got {names}")
    shift = np.zeros(d)
    if center is not None:
        shift = np.asarray(center, dtype=float)
        if shift.shape != (d,):
            raise ValueError(f"center has shape {shift.shape} but centroids imply shape ({d},)")
    factor = np.ones(d)
    if scale is not None:
        factor = np.asarray(scale, dtype=float)
        if factor.shape != (d,):
            raise ValueError(f"scale has shape {factor.shape} but centroids imply shape ({d},)")
    sites: dict[str, np.ndarray] = {}
    for site, values in (site_counts or {}).items():
        column = f"{SITE_PREFIX}{site}"
        if column in sites:
            raise ValueError(f"site_counts has two sites named {str(site)!r}")
        sites[column] = _as_counts(values, f"site_counts[{site!r}]", k)

    with np.errstate(invalid="ignore", divide="ignore"):
        nn = np.where(n > 0, n, np.nan)[:, None]  # an empty cluster gives NaN, not 0/0 noise
        offset = R / nn  # mean - c_j, in the clients' space
        mean_z = C + offset
        var_z = np.maximum(Q / nn - offset**2, 0.0)  # NaN stays NaN through maximum
        std_z = np.sqrt(var_z)
    mean_x = shift + factor * mean_z
    std_x = np.abs(factor) * std_z

    total = int(n.sum())
    data: dict[str, Any] = {
        "size": n,
        "fraction": n / total if total > 0 else np.full(k, np.nan),
    }
    for column, values in sites.items():
        small = (values > 0) & (values < privacy_threshold)
        data[column] = np.where(small, np.nan, values.astype(float))
    for i, name in enumerate(names):
        data[f"{name} mean"] = mean_x[:, i]
        data[f"{name} std"] = std_x[:, i]
    frame = pd.DataFrame(data, index=pd.RangeIndex(k, name="cluster"))
    frame["size"] = frame["size"].astype(np.int64)
    return frame


def _standardised_means(means: np.ndarray) -> np.ndarray:
    """Standardise each column across rows (clusters); a constant column becomes 0."""
    out = np.full(means.shape, np.nan)
    for i in range(means.shape[1]):
        col = means[:, i]
        finite = np.isfinite(col)
        if not finite.any():
            continue
        mu = col[finite].mean()
        sd = col[finite].std()
        if sd > 0 and np.isfinite(sd):
            out[finite, i] = (col[finite] - mu) / sd
        else:
            out[finite, i] = 0.0
    return out


#: Longest feature or site name in a profile figure (the tables keep the full names).
LABEL_CHARS = 30
#: Largest profile figure, in inches (at 110 dpi): whatever the names or the counts.
MAX_FIGURE_INCHES = (24.0, 30.0)


def plot_profile(
    path: str | os.PathLike,
    profile: pd.DataFrame,
    feature_names: Sequence[str],
    *,
    title: str = "",
) -> None:
    """Save a PNG of a cluster profile: a heatmap of the means and the cluster sizes.

    One row per feature and one column per cluster, so that a profile of many features
    grows down the page, not across it. The heatmap colours each cell by the cluster's
    mean of that feature standardised across clusters (so features in different units
    share one colour scale; a constant feature is 0) and, when ``k * d <= 200``, prints
    the mean in original units (3 significant digits). Above it, one bar per cluster:
    stacked by site when the profile has ``"rows at <site>"`` columns (suppressed counts
    drawn as 0, noted in the legend), else the cluster size.

    The figure is bounded whatever the profile: names are shortened to
    :data:`LABEL_CHARS` characters (with an ellipsis; the report's tables hold them in
    full), at most about 90 features and 40 clusters are labelled (every second, third,
    ... beyond), and the canvas is at most :data:`MAX_FIGURE_INCHES` (at 110 dpi; a
    tight bounding box may add a few pixels).

    Parameters
    ----------
    path : path-like
        Output PNG, written atomically.
    profile : pandas.DataFrame
        A frame from :func:`cluster_profile`.
    feature_names : sequence of str
        Features to show, in order; each needs a ``"<feature> mean"`` column.
    title : str
        Figure title.

    Raises
    ------
    ValueError
        If the profile is empty, no features are given, or a feature's mean column is
        missing.
    """
    # The object-oriented API renders with Agg without touching pyplot's global backend or
    # figure registry, so an interactive session's backend is left alone and nothing leaks.
    from matplotlib.figure import Figure

    from flwr_clustering.reporting import short_label

    names = [str(f) for f in feature_names]
    missing = [f"{f} mean" for f in names if f"{f} mean" not in profile.columns]
    if missing:
        shown = [short_label(m, 80) for m in missing[:5]]
        raise ValueError(f"profile has no column(s) {shown}"
                         + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    k, d = len(profile), len(names)
    if k == 0 or d == 0:
        raise ValueError(f"nothing to plot: the profile has {k} clusters and {d} features")
    means = profile[[f"{f} mean" for f in names]].to_numpy(dtype=float)
    z = _standardised_means(means)  # (k, d); drawn transposed: features down, clusters across
    sizes = (
        profile["size"].to_numpy() if "size" in profile.columns else np.full(k, np.nan)
    )
    site_cols = [c for c in profile.columns if str(c).startswith(SITE_PREFIX)]

    max_w, max_h = MAX_FIGURE_INCHES
    legend_w = 2.5 if site_cols else 0.0
    heat_w = min(max(2.5, 0.6 * k), max_w - 4.5 - legend_w)
    heat_h = min(max(1.5, 0.3 * d), max_h - 4.0)
    fig = Figure(figsize=(heat_w + 4.5 + legend_w, heat_h + 4.0), dpi=110,
                 layout="constrained")
    grid = fig.add_gridspec(2, 1, height_ratios=[1.6, heat_h])
    ax_bar = fig.add_subplot(grid[0, 0])
    ax_heat = fig.add_subplot(grid[1, 0], sharex=ax_bar)

    import matplotlib

    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="lightgrey")
    vmax = max(1.0, float(np.nanmax(np.abs(z)))) if np.isfinite(z).any() else 1.0
    image = ax_heat.imshow(
        np.ma.masked_invalid(z.T), cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto",
        interpolation="nearest",
    )
    feature_step = max(1, math.ceil(d / 90))
    ax_heat.set_yticks(range(0, d, feature_step))
    ax_heat.set_yticklabels([short_label(names[i], LABEL_CHARS)
                             for i in range(0, d, feature_step)])
    cluster_step = max(1, math.ceil(k / 40))
    ax_heat.set_xticks(range(0, k, cluster_step))
    ax_heat.set_xticklabels([short_label(profile.index[j], 8)
                             for j in range(0, k, cluster_step)])
    ax_heat.set_xlabel("cluster")
    ax_heat.set_title("cluster means (colour: standardised across clusters)", fontsize="medium")
    if k * d <= 200:
        for j in range(k):
            for i in range(d):
                value = means[j, i]
                text = f"{value:.3g}" if np.isfinite(value) else _MISSING
                strong = np.isfinite(z[j, i]) and abs(z[j, i]) > 0.6 * vmax
                ax_heat.text(j, i, text, ha="center", va="center", fontsize="small",
                             color="white" if strong else "black")
    colorbar = fig.colorbar(image, ax=ax_heat, location="bottom", fraction=0.05,
                            aspect=40, shrink=min(1.0, 6.0 / heat_w))
    colorbar.set_label("standardised mean")

    xs = np.arange(k)
    if site_cols:
        counts = profile[site_cols].to_numpy(dtype=float)
        suppressed = int(np.isnan(counts).sum())
        drawn = np.nan_to_num(counts, nan=0.0)
        palette = matplotlib.colormaps["tab20" if len(site_cols) > 10 else "tab10"]
        bottom = np.zeros(k)
        for s, column in enumerate(site_cols):
            ax_bar.bar(xs, drawn[:, s], bottom=bottom, color=palette(s % palette.N),
                       label=short_label(str(column)[len(SITE_PREFIX):], LABEL_CHARS))
            bottom += drawn[:, s]
        legend_title = "site" if len(site_cols) <= 60 else f"site (60 of {len(site_cols)})"
        if suppressed:
            legend_title += f"\n({suppressed} suppressed small\ncount(s) drawn as 0)"
        handles, names_ = ax_bar.get_legend_handles_labels()
        fig.legend(handles[:60], names_[:60], title=legend_title, fontsize="small",
                   title_fontsize="small", loc="outside right upper",
                   ncol=max(1, math.ceil(min(len(site_cols), 60) / 30)))
        ax_bar.set_title("rows per site", fontsize="medium")
    else:
        ax_bar.bar(xs, np.nan_to_num(sizes.astype(float), nan=0.0), color="tab:blue")
        ax_bar.set_title("cluster size", fontsize="medium")
    ax_bar.set_xlim(-0.5, k - 0.5)
    ax_bar.tick_params(labelbottom=False)
    ax_bar.set_ylabel("rows")
    if title:
        fig.suptitle(short_label(title, 100))
    _atomic(path, lambda fh: fig.savefig(fh, format="png", bbox_inches="tight"))


def _fmt(value: Any, *, nan_text: str = _MISSING, whole: bool = False) -> str:
    """Format one table cell as (unescaped) text: numbers to 4 significant digits."""
    if value is None:
        return nan_text
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        v = float(value)
        if math.isnan(v):
            return nan_text
        if whole and math.isfinite(v) and v == round(v) and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}"
    if isinstance(value, dict | list | tuple | np.ndarray):
        return json.dumps(to_jsonable(value), ensure_ascii=False, default=str)
    return str(value)


def _table(
    header: Sequence[Any], rows: Sequence[Sequence[str]], *, numeric: Sequence[bool] | None = None
) -> str:
    """An HTML table from already formatted (unescaped) cells."""
    esc = html.escape
    numeric = numeric or [False] * len(header)
    head = "".join(f"<th>{esc(str(h))}</th>" for h in header)
    body = "\n".join(
        "<tr>" + "".join(
            f'<td class="num">{esc(c)}</td>' if num else f"<td>{esc(c)}</td>"
            for c, num in zip(row, numeric, strict=True)
        ) + "</tr>"
        for row in rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def _frame_table(frame: pd.DataFrame, *, profile: bool = False) -> str:
    """Render a DataFrame; in a profile, NaN counts read "suppressed" and counts are whole."""
    import pandas as pd

    show_index = not (
        isinstance(frame.index, pd.RangeIndex) and frame.index.name is None
        and frame.index.start == 0 and frame.index.step == 1
    )
    header: list[Any] = [frame.index.name or ""] if show_index else []
    header += [str(c) for c in frame.columns]
    numeric = [True] * show_index + [
        pd.api.types.is_numeric_dtype(frame[c].dtype) for c in frame.columns
    ]
    rules = []
    for c in frame.columns:
        site = profile and str(c).startswith(SITE_PREFIX)
        rules.append({
            "nan_text": "suppressed" if site else _MISSING,
            "whole": profile and (site or str(c) == "size"),
        })
    rows = []
    for idx, values in zip(frame.index, frame.itertuples(index=False, name=None), strict=True):
        cells = [_fmt(idx)] if show_index else []
        cells += [_fmt(v, **rule) for v, rule in zip(values, rules, strict=True)]
        rows.append(cells)
    return _table(header, rows, numeric=numeric)


#: Clusters per table of the report's feature means (a wider profile wraps into more tables).
CLUSTERS_PER_TABLE = 8


def _profile_features(profile: pd.DataFrame) -> list[str]:
    """The features of a profile: each ``"<f> mean"`` column with its ``"<f> std"``."""
    columns = [str(c) for c in profile.columns]
    present = set(columns)
    return [c[:-len(" mean")] for c in columns
            if c.endswith(" mean") and f"{c[:-len(' mean')]} std" in present]


def _profile_tables(profile: pd.DataFrame) -> str:
    """A profile as HTML that reads at page width, whatever its features and clusters.

    One table of the clusters (size, fraction, rows per site) and the means and standard
    deviations transposed: one row per feature (its full name), one column per cluster
    (``mean ± std``), :data:`CLUSTERS_PER_TABLE` clusters per table.
    """
    features = _profile_features(profile)
    feature_columns = {f"{f} {stat}" for f in features for stat in ("mean", "std")}
    clusters = profile[[c for c in profile.columns if str(c) not in feature_columns]]
    parts = [f'<div class="scroll">{_frame_table(clusters, profile=True)}</div>']
    if not features:
        return parts[0]
    sizes = profile["size"] if "size" in profile.columns else None
    for first in range(0, len(profile), CLUSTERS_PER_TABLE):
        block = profile.index[first:first + CLUSTERS_PER_TABLE]
        header = ["feature"] + [
            f"cluster {_fmt(j)}" + ("" if sizes is None else f" (n={_fmt(sizes.loc[j])})")
            for j in block]
        rows = [[name] + [f"{_fmt(profile.loc[j, f'{name} mean'])} \u00b1 "
                          f"{_fmt(profile.loc[j, f'{name} std'])}" for j in block]
                for name in features]
        table = _table(header, rows, numeric=[False] + [True] * len(block))
        parts.append(f'<div class="scroll">{table}</div>')
    return "\n".join(parts)


def _history_table(history: Sequence[Mapping[str, Any]]) -> str:
    """Round, clients, shift and every metric (in order of first appearance) per round."""
    keys: list[str] = []
    for record in history:
        for key in (record.get("metrics") or {}):
            if str(key) not in keys:
                keys.append(str(key))
    rows = []
    for record in history:
        metrics = {str(a): b for a, b in (record.get("metrics") or {}).items()}
        rows.append(
            [_fmt(record.get("round")), _fmt(record.get("clients")), _fmt(record.get("shift"))]
            + [_fmt(metrics.get(key)) for key in keys]
        )
    header = ["round", "clients", "shift", *keys]
    return _table(header, rows, numeric=[True] * len(header))


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 75em; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #bbb; }
table { border-collapse: collapse; margin: .6em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #fafafa; }
.scroll { overflow-x: auto; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: .9em; color: #555; }
.note { color: #8a5a00; }
""".strip()


def _figure(caption: str, image_path: str | os.PathLike) -> str:
    """A PNG as an HTML figure (a data URI), or a note why it is skipped."""
    esc = html.escape
    file = Path(image_path)
    data = file.read_bytes() if file.is_file() else None
    if data is None or not data.startswith(_PNG_MAGIC):
        reason = "file not found" if data is None else "not a PNG file"
        return (f'<p class="note">Figure &ldquo;{esc(str(caption))}&rdquo; '
                f"skipped: {reason} ({esc(str(image_path))}).</p>")
    encoded = base64.b64encode(data).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{encoded}" '
            f'alt="{esc(str(caption))}"><figcaption>{esc(str(caption))}</figcaption>'
            "</figure>")


def write_report(
    path: str | os.PathLike,
    *,
    title: str,
    settings: Mapping[str, Any],
    warnings: Sequence[str],
    profile: pd.DataFrame | None = None,
    images: Mapping[str, str | os.PathLike] | None = None,
    history: Sequence[Mapping[str, Any]] | None = None,
    extra_tables: Mapping[str, pd.DataFrame] | None = None,
    k_choice: Mapping[str, Any] | None = None,
) -> None:
    """Write one self-contained HTML report (inline style, images as data URIs, no scripts).

    Sections: the title, "Settings", "Choice of k" (if given), "Warnings", "Cluster
    profile" (if given), "Figures" (if given), "Convergence" (if given), then one section
    per extra table. Every text is HTML-escaped; the file loads nothing from the network.

    Parameters
    ----------
    path : path-like
        Output HTML file (UTF-8), written atomically.
    title : str
        Report title.
    settings : mapping
        Run settings shown as a two-column table; lists, tuples, dicts and arrays are
        rendered as JSON.
    warnings : sequence of str
        Shown as a list, or "none" when empty.
    profile : pandas.DataFrame, optional
        A frame from :func:`cluster_profile`, shown as one table of the clusters (size,
        fraction, rows per site) and the means and standard deviations transposed (one
        row per feature, ``mean ± std`` per cluster, :data:`CLUSTERS_PER_TABLE` clusters
        a table); numbers to 4 significant digits, a NaN reads "suppressed" in ``"rows
        at"`` columns and "–" elsewhere.
    images : mapping of str to path-like, optional
        Caption -> PNG file. Each is embedded as a ``data:image/png;base64`` URI; a missing
        (or non-PNG) file is skipped with a note.
    history : sequence of dict, optional
        Per-round records with ``"round"`` and optional ``"clients"``, ``"shift"`` and
        ``"metrics"`` (a dict); shown as a table.
    extra_tables : mapping of str to pandas.DataFrame, optional
        Heading -> further table.
    k_choice : mapping, optional
        The choice of ``k`` of a ``k='auto'`` run: ``"text"`` (a sentence), ``"scores"``
        (a DataFrame, one row per candidate ``k``) and ``"figure"`` (a PNG, optional).
    """
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(str(title))}</title>",
        f"<style>\n{_STYLE}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(str(title))}</h1>",
        "<h2>Settings</h2>",
    ]
    if settings:
        rows = [[str(key), _fmt(value, nan_text="NaN")] for key, value in settings.items()]
        parts.append(_table(["setting", "value"], rows))
    else:
        parts.append("<p>none</p>")

    if k_choice is not None:
        parts.append("<h2>Choice of k</h2>")
        parts.append(f"<p>{esc(str(k_choice.get('text', '')))}</p>")
        if k_choice.get("scores") is not None:
            parts.append(f'<div class="scroll">{_frame_table(k_choice["scores"])}</div>')
        if k_choice.get("figure"):
            parts.append(_figure("criteria against k (k_scores.png)", k_choice["figure"]))

    parts.append("<h2>Warnings</h2>")
    if warnings:
        parts.append("<ul>\n" + "\n".join(f"<li>{esc(str(w))}</li>" for w in warnings)
                     + "\n</ul>")
    else:
        parts.append("<p>none</p>")

    if profile is not None:
        parts.append("<h2>Cluster profile</h2>")
        parts.append(
            "<p>The clusters' sizes and fractions of all rows; a per-site count below the "
            "privacy threshold reads &ldquo;suppressed&rdquo;. Then each feature's mean "
            "&plusmn; standard deviation (population, ddof = 0) per cluster, in the data's "
            "original units.</p>"
        )
        parts.append(_profile_tables(profile))

    if images:
        parts.append("<h2>Figures</h2>")
        for caption, image_path in images.items():
            parts.append(_figure(caption, image_path))

    if history:
        parts.append("<h2>Convergence</h2>")
        parts.append(f'<div class="scroll">{_history_table(history)}</div>')

    for heading, frame in (extra_tables or {}).items():
        parts.append(f"<h2>{esc(str(heading))}</h2>")
        parts.append(f'<div class="scroll">{_frame_table(frame)}</div>')

    parts += ["</body>", "</html>", ""]
    atomic_write_text(path, "\n".join(parts))
