"""Paper-specific partitioners (Flower Datasets ``Partitioner`` subclasses) and array helpers.

The generic splits are Flower Datasets' own: use
:class:`flwr_datasets.partitioner.IidPartitioner` (on a shuffled data set) and
:class:`flwr_datasets.partitioner.DirichletPartitioner` (``partition_by="label"``). This module
adds the splits the clustering papers define, as ``Partitioner`` subclasses so they plug into the
same place:

- :class:`BetaSpatialPartitioner` -- Garst & Reinders' spatial beta split (Eq. 2), any data;
- :class:`ClusterWisePartitioner` -- client ``i`` gets ``amounts[i]`` whole classes (Fig. 4);
- :class:`AssignmentPartitioner` -- a precomputed client column (e.g. a generator's split);
- :class:`SortedChunkPartitioner` -- every class sorted by one feature and cut into contiguous
  chunks, one per client (biased local clusters, Maritan & Schenato's Assumption 2);
- :class:`FeatureMaskPartitioner` -- wraps any row partitioner and gives client ``i`` only the
  features of its mask (NaN elsewhere): partially overlapping feature spaces.

and two converters between NumPy arrays and an in-memory ``datasets.Dataset``
(:func:`arrays_to_dataset`, :func:`dataset_to_arrays`) plus :func:`partition_arrays`, which runs
any partitioner on arrays and returns every partition as arrays.

The data set layout is: a ``"features"`` column holding a fixed-length list of float64 per row,
an optional int64 ``"label"`` column, and any extra columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import datasets
import numpy as np
from flwr_datasets.partitioner import Partitioner

from .splits import assignment_indices, cluster_wise_indices, sorted_chunk_indices

__all__ = [
    "arrays_to_dataset",
    "dataset_to_arrays",
    "BetaSpatialPartitioner",
    "ClusterWisePartitioner",
    "AssignmentPartitioner",
    "FeatureMaskPartitioner",
    "SortedChunkPartitioner",
    "partition_arrays",
]

FEATURES_COLUMN = "features"
LABEL_COLUMN = "label"


def arrays_to_dataset(
    X: np.ndarray,
    y: np.ndarray | None = None,
    extra: dict[str, np.ndarray] | None = None,
) -> datasets.Dataset:
    """Build an in-memory ``datasets.Dataset`` from a feature matrix and optional labels.

    Parameters
    ----------
    X : numpy.ndarray
        ``(n, d)`` numeric feature matrix; stored as float64 in a fixed-length list column
        ``"features"`` (so ``d`` survives even in an empty partition).
    y : numpy.ndarray, optional
        ``(n,)`` integer labels, stored as int64 column ``"label"``.
    extra : dict of str to numpy.ndarray, optional
        Further ``(n,)`` columns (for example ``{"client": client}``), stored with their own
        dtype.

    Returns
    -------
    datasets.Dataset
        The data set, rows in the order of ``X``.

    Raises
    ------
    ValueError
        If ``X`` is not 2-D, or a column's length differs from ``len(X)``, or a name is reused.
    """
    # Numeric columns go to ``from_dict`` as Arrow arrays: given NumPy arrays, it encodes
    # them row by row (the features as Python lists), which dominates partitioning time.
    import pyarrow as pa  # a dependency of ``datasets``

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {X.shape}")
    n, d = X.shape
    columns: dict[str, object] = {FEATURES_COLUMN: X}
    if d > 0:
        columns[FEATURES_COLUMN] = _feature_array(X)
    feats: dict[str, object] = {FEATURES_COLUMN: datasets.List(datasets.Value("float64"), length=d)}
    if y is not None:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},) to match X, got {y.shape}")
        columns[LABEL_COLUMN] = pa.array(y.astype(np.int64), type=pa.int64())
        feats[LABEL_COLUMN] = datasets.Value("int64")
    for name, values in (extra or {}).items():
        if name in columns:
            raise ValueError(f"extra column {name!r} clashes with an existing column")
        values = np.asarray(values)
        if values.shape != (n,):
            raise ValueError(f"extra column {name!r} must have shape ({n},), got {values.shape}")
        columns[name] = pa.array(values) if values.dtype.kind in "biuf" else values
        feats[name] = datasets.Value(str(values.dtype) if values.dtype.kind != "U" else "string")
    return datasets.Dataset.from_dict(columns, features=datasets.Features(feats))


def dataset_to_arrays(
    ds: datasets.Dataset,
    features_column: str = FEATURES_COLUMN,
    label_column: str = LABEL_COLUMN,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Turn a data set (or a partition of one) back into NumPy arrays, exactly.

    The conversion goes through Arrow rather than the ``"numpy"`` formatter, which would cast
    the features to float32.

    Parameters
    ----------
    ds : datasets.Dataset
        A data set made by :func:`arrays_to_dataset`, or any partition of one.
    features_column : str, default "features"
        Name of the list-of-floats feature column.
    label_column : str, default "label"
        Name of the label column; if absent, ``y`` is ``None``.

    Returns
    -------
    X : numpy.ndarray
        ``(n, d)`` float64 features (``(0, d)`` for an empty fixed-length partition).
    y : numpy.ndarray or None
        ``(n,)`` int64 labels, or ``None`` if the data set has no label column.
    """
    table = ds.with_format("arrow")[:]
    col = table.column(features_column).combine_chunks()
    flat = col.flatten().to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    n = table.num_rows
    if n == 0:
        feat = ds.features[features_column]
        d = getattr(feat, "length", -1)
        X = np.empty((0, d if d is not None and d >= 0 else 0), dtype=np.float64)
    else:
        X = flat.reshape(n, -1)
    y = None
    if label_column in table.column_names:
        y = table.column(label_column).to_numpy(zero_copy_only=False).astype(np.int64)
    return X, y


def _feature_array(X: np.ndarray) -> object:
    """``(n, d)`` float64 rows as an Arrow fixed-size-list array (``d >= 1``)."""
    import pyarrow as pa

    flat = pa.array(np.ascontiguousarray(X, dtype=np.float64).reshape(-1), type=pa.float64())
    return pa.FixedSizeListArray.from_arrays(flat, X.shape[1])


def _column(ds: datasets.Dataset, name: str) -> np.ndarray:
    """One column of a data set as a NumPy array (through Arrow, not a Python list)."""
    table = ds.select_columns([name]).with_format("arrow")[:]
    return np.asarray(table.column(name).to_numpy())


def _check_partition_id(partition_id: int, num_partitions: int) -> None:
    """Raise ``ValueError`` unless ``0 <= partition_id < num_partitions``."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition_id must be in [0, {num_partitions}), got {partition_id}")


class BetaSpatialPartitioner(Partitioner):
    """Garst & Reinders' spatial beta split (Eq. 2) of any data with at least two features.

    Every client sits at a fixed location in the plane of the first two features. For each row
    and each client ``o``, with ``d_o`` the distance from the row to the client,

    ``P_o = 1 - exp(-beta / d_o)``

    is the probability that client ``o`` "hits" the row. A row hit by no client goes to the
    nearest client (lowest index on ties); otherwise to one of the hitting clients, chosen
    uniformly. Small ``beta`` gives an almost Voronoi (strongly non-IID) split; large ``beta``
    approaches IID.

    This partitioner has its own ``np.random.default_rng(seed)``, so it gives the paper's
    *distribution* of splits but not the paper's exact split. The paper-exact split of the
    paper's data continues the data generator's RNG stream and is
    :func:`flwr_clustering.data.synthetic.garst_beta_split`.

    Parameters
    ----------
    num_partitions : int
        Number of clients; must equal ``len(locations)``.
    beta : float
        Spread parameter of Eq. 2; must be > 0.
    locations : array-like of shape (num_partitions, 2)
        Client locations in the plane of the first two features.
    seed : int, default 0
        Seed of the partitioner's generator.
    features_column : str, default "features"
        Name of the list-of-floats feature column.
    """

    def __init__(
        self,
        num_partitions: int,
        beta: float,
        locations: np.ndarray | Sequence[Sequence[float]],
        seed: int = 0,
        features_column: str = FEATURES_COLUMN,
    ) -> None:
        super().__init__()
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        if not np.isfinite(beta) or beta <= 0:
            raise ValueError(f"beta must be a positive finite number, got {beta!r}")
        locs = np.asarray(locations, dtype=np.float64)
        if locs.shape != (num_partitions, 2):
            raise ValueError(
                f"locations must have shape ({num_partitions}, 2) for {num_partitions} "
                f"partitions, got {locs.shape}"
            )
        self._num_partitions = int(num_partitions)
        self._beta = float(beta)
        self._locations = locs
        self._seed = seed
        self._features_column = features_column
        self._assignment: np.ndarray | None = None
        self._indices: list[np.ndarray] | None = None

    @property
    def num_partitions(self) -> int:
        """Total number of partitions."""
        return self._num_partitions

    @property
    def assignment(self) -> np.ndarray:
        """Partition index of every row of the data set, ``(n,)`` int64."""
        self._determine_if_needed()
        assert self._assignment is not None
        return self._assignment

    def _determine_if_needed(self) -> None:
        """Draw the split of the whole data set once."""
        if self._indices is not None:
            return
        X, _ = dataset_to_arrays(self.dataset, self._features_column, label_column="")
        if X.shape[1] < 2:
            raise ValueError(f"BetaSpatialPartitioner needs at least 2 features, got {X.shape[1]}")
        rng = np.random.default_rng(self._seed)
        dist = np.linalg.norm(X[:, None, :2] - self._locations[None, :, :], axis=2)
        with np.errstate(divide="ignore"):
            prob = 1.0 - np.exp(-self._beta / dist)  # a row on a location gets P = 1
        hit = rng.random(dist.shape) < prob
        # Uniform choice among the hitting clients: the largest of i.i.d. uniform keys.
        keys = np.where(hit, rng.random(dist.shape), -1.0)
        chosen = np.argmax(keys, axis=1)
        nearest = np.argmin(dist, axis=1)
        assignment = np.where(hit.any(axis=1), chosen, nearest).astype(np.int64)
        self._assignment = assignment
        self._indices = [np.flatnonzero(assignment == i) for i in range(self._num_partitions)]

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        """Load the rows given to one client.

        Parameters
        ----------
        partition_id : int
            Client index in ``[0, num_partitions)``.

        Returns
        -------
        datasets.Dataset
            The client's rows, in data set order.
        """
        _check_partition_id(partition_id, self._num_partitions)
        self._determine_if_needed()
        assert self._indices is not None
        return self.dataset.select(self._indices[partition_id])


class ClusterWisePartitioner(Partitioner):
    """Give client ``i`` exactly ``amounts[i]`` whole classes (Garst & Reinders, Fig. 4).

    The rule of the authors' code behind Fig. 4 (Sec. 3, "High variability in number of
    local clusters"), applied to the label column: for each class in sorted order, the
    clients whose remaining amount is not zero (in client order) each take an equal
    consecutive block of that class's rows (in data set order): the j-th of them takes rows
    ``[j*q, (j+1)*q)`` with ``q = n_class // n_selected``. Leftover rows are discarded, and
    so is a class that no client wants any more. Then every selected client's amount drops
    by one.

    Applied to ``garst_grid()`` this gives exactly the points of
    :func:`flwr_clustering.data.synthetic.garst_clusterwise` (client sizes
    ``[473, 10, 34, 173, 98]`` for ``amounts=(16, 1, 3, 10, 7)``).

    Parameters
    ----------
    amounts : sequence of int
        Number of classes for each client; ``len(amounts)`` is the number of partitions.
    label_column : str, default "label"
        Name of the class column.
    """

    def __init__(self, amounts: Sequence[int], label_column: str = LABEL_COLUMN) -> None:
        super().__init__()
        amts = [int(a) for a in amounts]
        if not amts or any(a < 0 for a in amts):
            raise ValueError(f"amounts must be a non-empty sequence of ints >= 0, got {amounts!r}")
        self._amounts = tuple(amts)
        self._label_column = label_column
        self._indices: list[np.ndarray] | None = None

    @property
    def num_partitions(self) -> int:
        """Total number of partitions (``len(amounts)``)."""
        return len(self._amounts)

    def _determine_if_needed(self) -> None:
        """Split the whole data set once."""
        if self._indices is not None:
            return
        self._indices = cluster_wise_indices(_column(self.dataset, self._label_column),
                                             self._amounts)

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        """Load the rows given to one client.

        Parameters
        ----------
        partition_id : int
            Client index in ``[0, num_partitions)``.

        Returns
        -------
        datasets.Dataset
            The client's rows, class by class.
        """
        _check_partition_id(partition_id, self.num_partitions)
        self._determine_if_needed()
        assert self._indices is not None
        return self.dataset.select(self._indices[partition_id])


class AssignmentPartitioner(Partitioner):
    """Partition by a precomputed integer client column: partition ``i`` is the rows with ``i``.

    Unlike :class:`flwr_datasets.partitioner.NaturalIdPartitioner`, which numbers the distinct
    values it finds, the partition ids here *are* the column values ``0..num_partitions-1``, so a
    client without rows gets an empty partition instead of shifting everyone's id. Use it for
    splits that a generator draws together with the data (e.g. ``garst_beta_split``).

    Parameters
    ----------
    num_partitions : int
        Number of clients.
    assignment_column : str, default "client"
        Name of the integer column holding each row's client.
    """

    def __init__(self, num_partitions: int, assignment_column: str = "client") -> None:
        super().__init__()
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        self._num_partitions = int(num_partitions)
        self._assignment_column = assignment_column
        self._indices: list[np.ndarray] | None = None

    @property
    def num_partitions(self) -> int:
        """Total number of partitions."""
        return self._num_partitions

    def _determine_if_needed(self) -> None:
        """Group the row indices by client once."""
        if self._indices is not None:
            return
        self._indices = assignment_indices(_column(self.dataset, self._assignment_column),
                                           self._num_partitions, self._assignment_column)

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        """Load the rows whose assignment column equals ``partition_id``.

        Parameters
        ----------
        partition_id : int
            Client index in ``[0, num_partitions)``.

        Returns
        -------
        datasets.Dataset
            The client's rows, in data set order (possibly none).
        """
        _check_partition_id(partition_id, self._num_partitions)
        self._determine_if_needed()
        assert self._indices is not None
        return self.dataset.select(self._indices[partition_id])


class SortedChunkPartitioner(AssignmentPartitioner):
    """Every class sorted by one feature, cut into ``num_partitions`` contiguous chunks.

    Client ``i`` gets chunk ``i`` of every class (``numpy.array_split`` sizes), so each
    client holds every class, but only one end of it along the sort feature: its local
    cluster means are biased (Maritan & Schenato, Assumption 2 / Fig. 5). The chunks are
    computed once, then served as by :class:`AssignmentPartitioner`.

    Parameters
    ----------
    num_partitions : int
        Number of clients.
    feature : int, default 0
        Index of the sort feature.
    label_column, features_column : str
        Column names.
    """

    def __init__(self, num_partitions: int, feature: int = 0,
                 label_column: str = LABEL_COLUMN,
                 features_column: str = FEATURES_COLUMN) -> None:
        super().__init__(num_partitions)
        self._feature = int(feature)
        self._label_column, self._features_column = label_column, features_column

    def _determine_if_needed(self) -> None:
        """Sort every class along the feature and deal its chunks once."""
        if self._indices is not None:
            return
        X, y = dataset_to_arrays(self.dataset, self._features_column, self._label_column)
        if y is None:
            raise ValueError(f"SortedChunkPartitioner needs a {self._label_column!r} column")
        self._indices = sorted_chunk_indices(X, y, self._num_partitions, self._feature)


class FeatureMaskPartitioner(Partitioner):
    """A row partitioner whose partition ``i`` keeps only the features of ``masks[i]``.

    The rows come from ``inner`` (any Flower Datasets partitioner); the features outside
    client ``i``'s mask become NaN, the representation of partially overlapping feature
    spaces (Maritan & Schenato).

    Parameters
    ----------
    inner : flwr_datasets.partitioner.Partitioner
        The row split (its data set is set through this partitioner).
    masks : numpy.ndarray of shape (num_partitions, d), bool
        The observed features of every client.
    features_column : str, default "features"
        The list-of-floats column.
    """

    def __init__(self, inner: Partitioner, masks: np.ndarray,
                 features_column: str = FEATURES_COLUMN) -> None:
        super().__init__()
        self._inner = inner
        self._masks = np.asarray(masks, dtype=bool)
        if self._masks.ndim != 2 or not self._masks.any(axis=1).all():
            raise ValueError("masks must be (num_partitions, d) with a feature per client")
        self._features_column = features_column

    @property
    def dataset(self) -> datasets.Dataset:
        """The data set (shared with the inner partitioner)."""
        return self._inner.dataset

    @dataset.setter
    def dataset(self, value: datasets.Dataset) -> None:
        self._inner.dataset = value

    def is_dataset_assigned(self) -> bool:
        """Whether the inner partitioner has its data set."""
        return self._inner.is_dataset_assigned()

    @property
    def num_partitions(self) -> int:
        """Total number of partitions (that of the inner partitioner)."""
        return self._inner.num_partitions

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        """Client ``partition_id``'s rows with NaN outside its mask."""
        _check_partition_id(partition_id, len(self._masks))
        part = self._inner.load_partition(partition_id)
        hidden = ~self._masks[partition_id]
        column = self._features_column
        # Rebuilt through Arrow (not ``Dataset.map``, which re-encodes every row as lists);
        # whole arrays, not chunked columns, which the data set's fingerprint pickles slowly.
        X = dataset_to_arrays(part, column, label_column="")[0].copy()
        X[:, hidden] = np.nan
        table = part.with_format("arrow")[:]
        mapping = {name: _feature_array(X) if name == column and X.shape[1] else
                   table.column(name).combine_chunks() for name in table.column_names}
        return datasets.Dataset.from_dict(mapping, features=part.features)


def partition_arrays(
    X: np.ndarray,
    y: np.ndarray | None,
    partitioner: Partitioner,
    num_partitions: int | None = None,
    extra: dict[str, np.ndarray] | None = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Partition arrays with any Flower Datasets partitioner and return every partition.

    Builds the data set with :func:`arrays_to_dataset`, assigns it to ``partitioner`` (which
    must not have a data set yet) and converts each partition back with
    :func:`dataset_to_arrays`.

    Parameters
    ----------
    X : numpy.ndarray
        ``(n, d)`` features.
    y : numpy.ndarray or None
        ``(n,)`` integer labels (needed by label-based partitioners).
    partitioner : flwr_datasets.partitioner.Partitioner
        A fresh partitioner, e.g. ``IidPartitioner(5)`` or ``ClusterWisePartitioner(...)``.
    num_partitions : int, optional
        How many partitions to return; defaults to ``partitioner.num_partitions``.
    extra : dict of str to numpy.ndarray, optional
        Extra columns the partitioner needs (e.g. ``{"client": client}`` for
        :class:`AssignmentPartitioner`).

    Returns
    -------
    list of tuple
        ``[(X_0, y_0), (X_1, y_1), ...]``, float64 features and int64 labels (or ``None``).
    """
    partitioner.dataset = arrays_to_dataset(X, y, extra)
    count = partitioner.num_partitions if num_partitions is None else int(num_partitions)
    return [dataset_to_arrays(partitioner.load_partition(i)) for i in range(count)]
