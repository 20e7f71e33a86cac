"""Non-convex and uneven 2-D data sets (Zhang et al.'s property (c), Sec. 1 and 6.1).

The four sets of scikit-learn's clustering comparison, from its generators (nothing is
downloaded): two interleaved moons, two concentric circles, three anisotropic (sheared)
blobs, and three blobs of varied density.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SHAPES", "shapes"]

#: Names of :func:`shapes` and their number of clusters.
SHAPES: dict[str, int] = {"moons": 2, "circles": 2, "aniso": 3, "varied": 3}


def shapes(name: str, n_samples: int = 1500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One of :data:`SHAPES`, as in scikit-learn's clustering comparison example.

    ``moons``: ``make_moons(noise=0.05)``; ``circles``: ``make_circles(factor=0.5,
    noise=0.05)``; ``aniso``: 3 blobs times ``[[0.6, -0.6], [-0.4, 0.8]]``; ``varied``:
    3 blobs with standard deviations 1.0, 2.5 and 0.5.

    Returns
    -------
    X : numpy.ndarray of shape (n_samples, 2), float64
    y : numpy.ndarray of shape (n_samples,), int64
    """
    from sklearn.datasets import make_blobs, make_circles, make_moons  # heavy: import on use

    if name == "moons":
        X, y = make_moons(n_samples, noise=0.05, random_state=seed)
    elif name == "circles":
        X, y = make_circles(n_samples, factor=0.5, noise=0.05, random_state=seed)
    elif name == "aniso":
        X, y = make_blobs(n_samples, random_state=seed + 170)
        X = X @ np.array([[0.6, -0.6], [-0.4, 0.8]])
    elif name == "varied":
        X, y = make_blobs(n_samples, cluster_std=[1.0, 2.5, 0.5], random_state=seed + 170)
    else:
        raise ValueError(f"unknown shape {name!r}; valid: {', '.join(SHAPES)}")
    return X.astype(np.float64), y.astype(np.int64)
