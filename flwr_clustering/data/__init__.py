"""Data sets, synthetic generators, partitioners and local-file loading (layer 2).

No ``flwr`` import here: only NumPy, SciPy, scikit-learn, ``datasets`` and ``flwr_datasets``.
Nothing is downloaded at run time.

- :mod:`~flwr_clustering.data.synthetic` -- exact regeneration of Garst & Reinders' data.
- :mod:`~flwr_clustering.data.ssets` -- S-set look-alikes (FeCA paper), their overlap measure
  and a loader for the real S-set files.
- :mod:`~flwr_clustering.data.partitioners` -- paper-specific Flower Datasets partitioners.
- :mod:`~flwr_clustering.data.masks` -- feature masks (chain, shared block), the DIM look-alike and
  pseudo-writer groups.
- :mod:`~flwr_clustering.data.local_file` -- one client's data file (CSV/NPY/NPZ/Parquet).
- :mod:`~flwr_clustering.data.registry` -- data sets by name and cached client partitions.

Importing this package is cheap: the partitioners (which need Flower Datasets, ``datasets``,
pandas and pyarrow) load on first use of one of their names, and pandas and scikit-learn load
inside the functions that need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from flwr_clustering.data.local_file import load_local_file, save_local_file
from flwr_clustering.data.masks import (
    MASK_SCHEMES,
    apply_mask,
    chain_masks,
    dim_assignment,
    dim_federation,
    dim_lookalike,
    feature_masks,
    shared_block_masks,
    style_groups,
)
from flwr_clustering.data.registry import (
    DATASETS,
    PARTITIONERS,
    check_partitioning,
    default_cluster_amounts,
    load_dataset,
    load_partition,
    load_pooled,
    serving_partitioners,
    split_arrays,
)
from flwr_clustering.data.ssets import (
    SSET_CENTERS,
    SSET_SPREADS,
    cluster_overlap,
    load_sset_files,
    sset_lookalike,
    sset_true_centers,
    sset_true_covariances,
)
from flwr_clustering.data.synthetic import (
    GARST_CENTERS,
    GARST_CLUSTERWISE_AMOUNTS,
    GARST_OBSERVERS,
    garst_beta_split,
    garst_clusterwise,
    garst_grid,
)

if TYPE_CHECKING:
    from flwr_clustering.data.partitioners import (
        AssignmentPartitioner,
        BetaSpatialPartitioner,
        ClusterWisePartitioner,
        FeatureMaskPartitioner,
        SortedChunkPartitioner,
        arrays_to_dataset,
        dataset_to_arrays,
        partition_arrays,
    )

#: Names served by :func:`__getattr__` from their module on first use (PEP 562).
_LAZY: dict[str, str] = {
    name: "flwr_clustering.data.partitioners"
    for name in (
        "AssignmentPartitioner",
        "BetaSpatialPartitioner",
        "ClusterWisePartitioner",
        "FeatureMaskPartitioner",
        "SortedChunkPartitioner",
        "arrays_to_dataset",
        "dataset_to_arrays",
        "partition_arrays",
    )
}


def __getattr__(name: str) -> Any:
    """Import a lazily served name (see :data:`_LAZY`) on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the eager and the lazily served names."""
    return sorted({*globals(), *_LAZY})


__all__ = [
    "MASK_SCHEMES",
    "apply_mask",
    "chain_masks",
    "dim_assignment",
    "dim_federation",
    "dim_lookalike",
    "feature_masks",
    "shared_block_masks",
    "style_groups",
    "AssignmentPartitioner",
    "FeatureMaskPartitioner",
    "SortedChunkPartitioner",
    "BetaSpatialPartitioner",
    "ClusterWisePartitioner",
    "DATASETS",
    "GARST_CENTERS",
    "GARST_CLUSTERWISE_AMOUNTS",
    "GARST_OBSERVERS",
    "PARTITIONERS",
    "SSET_CENTERS",
    "SSET_SPREADS",
    "arrays_to_dataset",
    "check_partitioning",
    "cluster_overlap",
    "dataset_to_arrays",
    "default_cluster_amounts",
    "garst_beta_split",
    "garst_clusterwise",
    "garst_grid",
    "load_dataset",
    "load_local_file",
    "load_partition",
    "load_pooled",
    "split_arrays",
    "load_sset_files",
    "partition_arrays",
    "save_local_file",
    "serving_partitioners",
    "sset_lookalike",
    "sset_true_centers",
    "sset_true_covariances",
]
