"""S-set look-alikes (FeCA paper, Xu et al., Sec. 6.1) and a loader for the real S-set files.

The FeCA paper (Xu et al., "Jigsaw Game: Federated Clustering") evaluates on the S-sets S1-S4
of Fränti & Sieranoja: 5000 points in 2-D, 15 Gaussian clusters, coordinates in about
``[0, 1e6]^2``, with a published cluster overlap of 9 %, 22 %, 41 % and 44 %. The real files
cannot be downloaded at run time, so this module offers

- :func:`sset_lookalike` -- a deterministic generator of S-set look-alikes, one per level 1-4;
- :func:`sset_true_centers` / :func:`sset_true_covariances` -- the generator's true cluster
  centres and covariances, without drawing any points;
- :func:`cluster_overlap` -- the overlap measure the look-alikes are calibrated with;
- :func:`load_sset_files` -- a loader for the real files (``s1.txt``, ``s1-label.pa``,
  ``s1-cb.txt``) for a user who has them.

Look-alike recipe
-----------------
The 15 centres (:data:`SSET_CENTERS`) are the same at every level, as the real S1-S4 centres are
nearly the same and only the spread grows. They were drawn once, offline, by sequential
rejection sampling (``numpy.random.default_rng(2)``, uniform in ``[1.4e5, 8.6e5]^2``, minimum
separation ``1.65e5``) and rounded to multiples of 1000. Their nearest-neighbour distances are
168-209 k, close to those of the real S1 centres (about 170-210 k).

Cluster ``i`` is an anisotropic Gaussian with covariance ``sigma_level^2 * S_i S_i^T``, where
``S_i = R(angle_i) @ diag(scale_i * sqrt(aspect_i), scale_i / sqrt(aspect_i))`` is a fixed
shape (per-cluster size factor ``scale_i`` in ``[0.84, 1.23]``, axis ratio ``aspect_i`` in
``[1.08, 1.89]``, orientation ``angle_i``; drawn once from ``numpy.random.default_rng(12345)``
and hard-coded in :data:`SSET_SHAPES`) and ``sigma_level`` is the level's spread
(:data:`SSET_SPREADS`). Cluster ``i`` gets ``n_samples // 15`` points, plus one for the first
``n_samples % 15`` clusters (334 for clusters 0-4 and 333 for the others at 5000). Points are
stored cluster by cluster. A single ``numpy.random.default_rng(seed)`` draws all standard-normal
deviates at once, so for one seed the four levels are the same deviates at different spreads.

Overlap measure
---------------
The exact definition of overlap in Fränti & Sieranoja (2018), "K-means properties on six
clustering benchmark datasets", could not be retrieved here. So :func:`cluster_overlap` uses an
explicit reconstruction: a point is *in the overlap* when the centre of some other cluster is
less than twice as far from it as its own centre,

``min_{j != y(x)} ||x - c_j|| < factor * ||x - c_{y(x)}||``  with ``factor = 2``,

and the overlap is the fraction of such points. The centres are the cluster means of the labels
(or given centres). The rule was chosen because it is consistent with a second, independent
property of the real data. Fit the spreads instead so that the fraction of points nearest to
their own true centre equals FeCA's near-perfect purities on S1-S4 (0.99, 0.97, 0.86, 0.80;
the FeCA paper's Table 4). With those spreads, this rule gives 0.10, 0.19, 0.41 and 0.50,
against the published 0.09, 0.22, 0.41 and 0.44. At the parameter values tried, three other
rules fitted worse: a k-nearest-neighbour rule (a foreign point among the k nearest), a
Gaussian density-ratio rule and an "inside another cluster's ellipse" rule. Treat the rule as
this module's definition, not the paper's.

Calibration
-----------
The spreads were fitted offline (root finding on the mean overlap over seeds 0-29) and
hard-coded; nothing is searched at run time. Measured with :func:`cluster_overlap` at its
defaults on ``sset_lookalike(level, seed=s)``:

=====  ============  ======  ==============  =============  ===============  =================
level  sigma         target  seed 0          mean (0-49)    range (0-49)     nearest-centre acc
=====  ============  ======  ==============  =============  ===============  =================
1      31 940        0.09    0.0898          0.0897         0.080-0.101      0.992
2      42 660        0.22    0.2208          0.2207         0.207-0.234      0.957
3      58 370        0.41    0.4090          0.4112         0.392-0.427      0.860
4      61 140        0.44    0.4386          0.4410         0.423-0.452      0.841
=====  ============  ======  ==============  =============  ===============  =================

The standard deviation over seeds is about 0.005 at level 1 and 0.006 at levels 2-4. The last
column is the fraction of points whose nearest true centre is their own, a proxy for the best
purity a clustering can reach (mean over seeds 0-9). Like the real S-sets, the points lie
in about ``[0, 1e6]^2``: all of them at level 1, and 99.6 % at level 4, whose extremes reach
about ``-1e5`` and ``1.1e6``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = [
    "SSET_CENTERS",
    "SSET_SHAPES",
    "SSET_SPREADS",
    "SSET_OVERLAP_TARGETS",
    "SSET_N_SAMPLES",
    "cluster_overlap",
    "load_sset_files",
    "sset_lookalike",
    "sset_true_centers",
    "sset_true_covariances",
]

#: Number of points of each real S-set (and the look-alikes' default).
SSET_N_SAMPLES = 5000

#: The 15 true cluster centres of the look-alikes, the same at every level (label = row index).
SSET_CENTERS: np.ndarray = np.array(
    [
        (328000, 355000),
        (726000, 206000),
        (572000, 665000),
        (275000, 180000),
        (338000, 613000),
        (545000, 248000),
        (837000, 632000),
        (369000, 805000),
        (604000, 433000),
        (154000, 740000),
        (149000, 354000),
        (847000, 461000),
        (795000, 833000),
        (550000, 832000),
        (178000, 532000),
    ],
    dtype=np.float64,
)
SSET_CENTERS.setflags(write=False)

#: Fixed cluster shapes, one row per cluster: (size factor, axis ratio, orientation in degrees).
SSET_SHAPES: np.ndarray = np.array(
    [
        (0.90, 1.89, 154.0),
        (0.94, 1.70, 108.0),
        (1.16, 1.33, 168.0),
        (1.10, 1.73, 130.0),
        (0.98, 1.22, 155.0),
        (0.95, 1.08, 167.0),
        (1.07, 1.16, 98.0),
        (0.88, 1.34, 169.0),
        (1.10, 1.47, 89.0),
        (1.22, 1.27, 49.0),
        (0.91, 1.82, 81.0),
        (1.23, 1.19, 120.0),
        (1.10, 1.13, 60.0),
        (0.84, 1.09, 163.0),
        (1.00, 1.60, 46.0),
    ],
    dtype=np.float64,
)
SSET_SHAPES.setflags(write=False)

#: Spread ``sigma_level`` of each level, calibrated so that :func:`cluster_overlap` matches
#: :data:`SSET_OVERLAP_TARGETS` (see the module docstring).
SSET_SPREADS: MappingProxyType[int, float] = MappingProxyType(
    {1: 31940.0, 2: 42660.0, 3: 58370.0, 4: 61140.0}
)

#: Published overlap of the real S1-S4 (Fränti & Sieranoja 2018, quoted by the FeCA paper).
SSET_OVERLAP_TARGETS: MappingProxyType[int, float] = MappingProxyType(
    {1: 0.09, 2: 0.22, 3: 0.41, 4: 0.44}
)

_N_CLUSTERS = len(SSET_CENTERS)
_DASHES = re.compile(r"-{3,}")


def _check_level(level: Any) -> int:
    """Return ``level`` as an int after checking that it is one of 1, 2, 3, 4."""
    if isinstance(level, bool) or not isinstance(level, int | np.integer):
        raise ValueError(f"level must be one of 1, 2, 3, 4 (S1-S4), got {level!r}")
    if int(level) not in SSET_SPREADS:
        raise ValueError(f"level must be one of 1, 2, 3, 4 (S1-S4), got {level!r}")
    return int(level)


def _is_integral(value: Any) -> bool:
    """Return True if ``value`` is an int or an integral float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return False
    return bool(np.isfinite(value)) and int(value) == value


def _shape_factors(level: int) -> np.ndarray:
    """Return the ``(15, 2, 2)`` matrices ``L_i`` with covariance ``L_i L_i^T`` at ``level``."""
    scale, aspect, angle = SSET_SHAPES[:, 0], SSET_SHAPES[:, 1], np.deg2rad(SSET_SHAPES[:, 2])
    cos, sin = np.cos(angle), np.sin(angle)
    rot = np.stack([np.stack([cos, -sin], axis=-1), np.stack([sin, cos], axis=-1)], axis=-2)
    axes = np.stack([scale * np.sqrt(aspect), scale / np.sqrt(aspect)], axis=-1)
    return SSET_SPREADS[level] * rot * axes[:, None, :]


def sset_true_centers(level: int) -> np.ndarray:
    """Return the true cluster centres of the S-set look-alike of ``level`` (no points drawn).

    The centres are the same at every level (:data:`SSET_CENTERS`); the level is checked so that
    a wrong level fails here as it would in :func:`sset_lookalike`.

    Parameters
    ----------
    level : int
        The S-set level, one of 1, 2, 3, 4 (S1-S4).

    Returns
    -------
    numpy.ndarray
        ``(15, 2)`` float64 centres, a fresh writable copy; row ``i`` is the centre of label ``i``.

    Raises
    ------
    ValueError
        If ``level`` is not one of 1, 2, 3, 4.
    """
    _check_level(level)
    return SSET_CENTERS.copy()


def sset_true_covariances(level: int) -> np.ndarray:
    """Return the true covariance matrices of the look-alike's 15 Gaussian clusters at ``level``.

    Cluster ``i`` has covariance ``L_i L_i^T`` with
    ``L_i = sigma_level * R(angle_i) @ diag(scale_i * sqrt(aspect_i), scale_i / sqrt(aspect_i))``
    (:data:`SSET_SPREADS`, :data:`SSET_SHAPES`).

    Parameters
    ----------
    level : int
        The S-set level, one of 1, 2, 3, 4 (S1-S4).

    Returns
    -------
    numpy.ndarray
        ``(15, 2, 2)`` float64 covariance matrices, in label order.

    Raises
    ------
    ValueError
        If ``level`` is not one of 1, 2, 3, 4.
    """
    factors = _shape_factors(_check_level(level))
    return factors @ np.swapaxes(factors, -1, -2)


def sset_lookalike(
    level: int, *, n_samples: int = SSET_N_SAMPLES, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generate an S-set look-alike: 15 anisotropic 2-D Gaussian clusters with S-set overlap.

    With ``rng = numpy.random.default_rng(seed)`` and ``Z = rng.standard_normal((n_samples, 2))``,
    the points of cluster ``i`` are ``SSET_CENTERS[i] + Z_i @ L_i.T``, where ``Z_i`` is the
    cluster's consecutive block of rows of ``Z`` and ``L_i`` is the factor of
    :func:`sset_true_covariances`. Cluster ``i`` has ``n_samples // 15`` points, plus one if
    ``i < n_samples % 15``. The level sets only the spread; its overlap
    (:func:`cluster_overlap`) is close to the real S-set's 9 %, 22 %, 41 % or 44 % (table in
    the module docstring).

    Parameters
    ----------
    level : int
        The S-set level, one of 1, 2, 3, 4 (S1-S4).
    n_samples : int, default 5000
        Number of points, at least 15 (one per cluster). The calibration holds for 5000.
    seed : int, default 0
        Seed of ``numpy.random.default_rng``; a non-negative integer.

    Returns
    -------
    X : numpy.ndarray
        ``(n_samples, 2)`` float64 points, cluster by cluster.
    y : numpy.ndarray
        ``(n_samples,)`` int64 true labels in ``0..14``.
    centers : numpy.ndarray
        ``(15, 2)`` float64 true centres (as :func:`sset_true_centers`); row ``i`` is the centre
        of label ``i``.

    Raises
    ------
    ValueError
        If ``level`` is not one of 1, 2, 3, 4, ``n_samples`` is not an integer >= 15, or
        ``seed`` is not a non-negative integer.

    Examples
    --------
    >>> X, y, centers = sset_lookalike(1)
    >>> X.shape, np.bincount(y)[[0, 5]].tolist(), centers.shape
    ((5000, 2), [334, 333], (15, 2))
    """
    level = _check_level(level)
    if not _is_integral(n_samples) or n_samples < _N_CLUSTERS:
        raise ValueError(
            f"n_samples must be an integer >= {_N_CLUSTERS} (one point per cluster), "
            f"got {n_samples!r}"
        )
    if not _is_integral(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    n_samples = int(n_samples)

    sizes = np.full(_N_CLUSTERS, n_samples // _N_CLUSTERS, dtype=np.int64)
    sizes[: n_samples % _N_CLUSTERS] += 1
    y = np.repeat(np.arange(_N_CLUSTERS, dtype=np.int64), sizes)
    Z = np.random.default_rng(int(seed)).standard_normal((n_samples, 2))
    factors = _shape_factors(level)
    X = SSET_CENTERS[y] + np.einsum("nj,nij->ni", Z, factors[y])
    return X, y, SSET_CENTERS.copy()


def cluster_overlap(
    X: np.ndarray,
    y: np.ndarray,
    centers: np.ndarray | None = None,
    *,
    factor: float = 2.0,
) -> float:
    """Fraction of points that some other cluster's centre is "almost as close to" as their own.

    A point ``x`` with label ``y(x)`` is *in the overlap* when

    ``min_{j != y(x)} ||x - c_j|| < factor * ||x - c_{y(x)}||``

    (strict inequality). With the default ``factor = 2`` this is the overlap the S-set
    look-alikes are calibrated with. It is a reconstruction, not the published definition of
    Fränti & Sieranoja (2018); the module docstring says why this rule was chosen.
    ``factor = 1`` gives the fraction of points that are closer to another centre than to their
    own.

    Parameters
    ----------
    X : numpy.ndarray
        ``(n, d)`` points; finite numbers.
    y : numpy.ndarray
        ``(n,)`` integer cluster labels; any integer values, at least two distinct ones.
    centers : numpy.ndarray, optional
        ``(k, d)`` centres, row ``j`` for label ``j`` (labels must then lie in ``0..k-1``).
        Default: the mean of each label's points, one row per distinct label.
    factor : float, default 2.0
        Distance ratio of the rule; a finite number >= 1.

    Returns
    -------
    float
        The fraction of points in the overlap, in ``[0, 1]``.

    Raises
    ------
    ValueError
        If ``X`` is not a non-empty finite 2-D array, ``y`` does not match it or is not
        integer-valued, there are fewer than two clusters, ``centers`` has the wrong shape or
        does not cover the labels, or ``factor`` is not a finite number >= 1.

    Examples
    --------
    >>> X = np.array([[1.0, 0.0], [4.0, 0.0], [9.0, 0.0], [10.0, 0.0]])
    >>> cluster_overlap(X, np.array([0, 0, 1, 1]), np.array([[0.0, 0.0], [10.0, 0.0]]))
    0.25
    """
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X must be a non-empty 2-D array (n_samples, n_features), got {X.shape}")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"X must be numeric, got dtype {X.dtype}")
    X = X.astype(np.float64, copy=False)
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values")
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
    if y.dtype.kind not in "iub":
        if y.dtype.kind != "f" or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise ValueError("y must hold integer cluster labels")
    y = y.astype(np.int64)
    if not np.isfinite(factor) or factor < 1:
        raise ValueError(f"factor must be a finite number >= 1, got {factor!r}")

    if centers is None:
        labels, index = np.unique(y, return_inverse=True)
        C = np.zeros((len(labels), X.shape[1]))
        np.add.at(C, index, X)
        C /= np.bincount(index)[:, None]
    else:
        C = np.asarray(centers, dtype=np.float64)
        if C.ndim != 2 or C.shape[1] != X.shape[1]:
            raise ValueError(f"centers must have shape (k, {X.shape[1]}) to match X, got {C.shape}")
        if not np.all(np.isfinite(C)):
            raise ValueError("centers contains NaN or infinite values")
        if y.min() < 0 or y.max() >= len(C):
            raise ValueError(
                f"labels must lie in 0..{len(C) - 1} to index the {len(C)} centers, "
                f"got {y.min()}..{y.max()}"
            )
        index = y
    if len(C) < 2:
        raise ValueError(f"need at least two clusters to measure overlap, got {len(C)}")

    dist = np.sqrt(((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2))
    rows = np.arange(len(X))
    own = dist[rows, index].copy()
    dist[rows, index] = np.inf
    return float(np.mean(dist.min(axis=1) < factor * own))


def _read_lines(path: Path, what: str) -> list[tuple[int, str]]:
    """Read a text file and return its non-blank data lines as ``(line_number, text)``.

    An optional SIPU header (a few text lines ending with a line of dashes) is skipped.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {what} file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: {what} file is not a text file ({exc})") from exc
    lines = [(no, line.strip()) for no, line in enumerate(text.splitlines(), start=1)]
    for pos, (_, line) in enumerate(lines):
        if _DASHES.fullmatch(line):
            lines = lines[pos + 1 :]
            break
    return [(no, line) for no, line in lines if line]


def _read_matrix(path: Path, what: str) -> np.ndarray:
    """Parse a file of whitespace-separated numbers, two per line, into a float64 array."""
    rows = []
    for no, line in _read_lines(path, what):
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(
                f"{path}: line {no} of the {what} file has {len(fields)} columns, expected 2 "
                f"(x y): {line[:60]!r}"
            )
        try:
            rows.append((float(fields[0]), float(fields[1])))
        except ValueError as exc:
            raise ValueError(
                f"{path}: line {no} of the {what} file is not numeric: {line[:60]!r}"
            ) from exc
    if not rows:
        raise ValueError(f"{path}: the {what} file has no data lines")
    values = np.array(rows, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{path}: the {what} file contains NaN or infinite values")
    return values


def _read_labels(path: Path, n: int) -> np.ndarray:
    """Parse a SIPU partition file (optional header, one 1-based label per line) to 0-based."""
    labels = []
    for no, line in _read_lines(path, "labels"):
        fields = line.split()
        if len(fields) != 1:
            raise ValueError(
                f"{path}: line {no} of the labels file has {len(fields)} columns, expected 1: "
                f"{line[:60]!r}"
            )
        try:
            labels.append(int(fields[0]))
        except ValueError as exc:
            raise ValueError(
                f"{path}: line {no} of the labels file is not an integer label: {line[:60]!r}"
            ) from exc
    if len(labels) != n:
        raise ValueError(
            f"{path}: the labels file has {len(labels)} labels but the points file has {n} points"
        )
    y = np.array(labels, dtype=np.int64)
    if y.min() < 1:
        raise ValueError(
            f"{path}: labels must be 1-based (>= 1) as in SIPU partition files, found {y.min()}"
        )
    return y - 1


def load_sset_files(
    points_path: str | os.PathLike[str],
    labels_path: str | os.PathLike[str] | None = None,
    centers_path: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Load a real S-set in its published SIPU format (``s1.txt``, ``s1-label.pa``, ``s1-cb.txt``).

    - Points (``s1.txt``) and centres (``s1-cb.txt``): whitespace-separated numbers, one point per
      line, two columns.
    - Labels (``s1-label.pa``): a header of a few text lines ending with a line of dashes
      (``-----``), then one 1-based integer label per line.

    Blank lines anywhere, surrounding whitespace and a dashed header in any of the files are
    ignored; the header of the labels file is optional too. Nothing is downloaded: the user
    supplies the files.

    Parameters
    ----------
    points_path : str or os.PathLike
        The points file.
    labels_path : str or os.PathLike, optional
        The ground-truth partition file.
    centers_path : str or os.PathLike, optional
        The ground-truth centroid (codebook) file.

    Returns
    -------
    X : numpy.ndarray
        ``(n, 2)`` float64 points, in file order.
    y : numpy.ndarray or None
        ``(n,)`` int64 labels, converted to 0-based, or ``None`` without ``labels_path``.
    centers : numpy.ndarray or None
        ``(k, 2)`` float64 centres, in file order, or ``None`` without ``centers_path``.

    Raises
    ------
    FileNotFoundError
        If a given file does not exist.
    ValueError
        If a file is not text, a line has the wrong number of columns or a non-numeric value, a
        file has no data lines, a value is NaN or infinite, the number of labels differs from
        the number of points, or a label is below 1. The message names the file and line.
    """
    X = _read_matrix(Path(points_path), "points")
    y = None if labels_path is None else _read_labels(Path(labels_path), len(X))
    centers = None if centers_path is None else _read_matrix(Path(centers_path), "centers")
    return X, y, centers
