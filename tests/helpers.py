"""Helpers shared by test modules that are not about running Flower.

(How to run a strategy or the App in process is :mod:`flwr_clustering.testing`, public.)
"""

from __future__ import annotations

import numpy as np


def missing_cell_sites(loader, n_sites=3, share=0.1, seed=0):
    """A scikit-learn data set split over sites, ``share`` of its cells missing at random.

    ``loader`` is a ``sklearn.datasets.load_*`` function. Returns the sites' frames (the
    features, with NaN in the missing cells) and their labels.
    """
    data = loader(as_frame=True)
    frame = data.frame.drop(columns="target")
    rng = np.random.default_rng(seed)
    frame = frame.mask(rng.random(frame.shape) < share)
    idx = np.array_split(rng.permutation(len(frame)), n_sites)
    return ([frame.iloc[i].reset_index(drop=True) for i in idx],
            [data.target.to_numpy()[i] for i in idx])
