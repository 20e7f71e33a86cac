"""Tests for flwr_clustering.data: exact paper data, partitioners, local files, registry."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
from flwr_datasets.partitioner import IidPartitioner

from flwr_clustering.data import (
    DATASETS,
    GARST_CENTERS,
    GARST_OBSERVERS,
    PARTITIONERS,
    AssignmentPartitioner,
    BetaSpatialPartitioner,
    ClusterWisePartitioner,
    arrays_to_dataset,
    check_partitioning,
    dataset_to_arrays,
    garst_beta_split,
    garst_clusterwise,
    garst_grid,
    load_dataset,
    load_local_file,
    load_partition,
    load_pooled,
    partition_arrays,
    save_local_file,
    serving_partitioners,
    split_arrays,
)


def _sorted_rows(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Rows of [X | y] in lexicographic order, to compare multisets of rows."""
    Z = np.column_stack([X, y.astype(np.float64)])
    return Z[np.lexsort(Z.T[::-1])]


# --------------------------------------------------------------------------- synthetic (spec 4.1)


def test_centers_and_observers():
    assert GARST_CENTERS.shape == (16, 2)
    assert tuple(GARST_CENTERS[0]) == (-7.5, -7.5)
    assert tuple(GARST_CENTERS[1]) == (-7.5, -2.5)
    assert tuple(GARST_CENTERS[4]) == (-2.5, -7.5)
    assert tuple(GARST_CENTERS[15]) == (7.5, 7.5)
    assert GARST_OBSERVERS.shape == (5, 2)
    assert GARST_OBSERVERS[3, 1] == 8.331910708477391


def test_garst_grid_recipe():
    X, y = garst_grid()
    assert X.shape == (800, 2) and X.dtype == np.float64
    assert y.dtype == np.int64 and np.array_equal(np.bincount(y), [50] * 16)
    # The recipe: legacy RandomState(42), per centre x draws then y draws.
    rs = np.random.RandomState(42)
    x0 = rs.normal(-7.5, 1.0, 50)
    y0 = rs.normal(-7.5, 1.0, 50)
    np.testing.assert_array_equal(X[:50, 0], x0)
    np.testing.assert_array_equal(X[:50, 1], y0)
    # Cluster means are near their centres.
    means = np.array([X[y == k].mean(axis=0) for k in range(16)])
    assert np.abs(means - GARST_CENTERS).max() < 0.5


@pytest.mark.parametrize(
    ("ppc", "noise", "beta", "sizes"),
    [
        (50, 1.0, 0.1, [185, 144, 194, 74, 203]),
        (50, 1.0, 1, [174, 146, 187, 102, 191]),
        (50, 1.0, 10, [200, 162, 140, 158, 140]),
        (50, 1.5, 0.1, [182, 133, 196, 90, 199]),
        (50, 1.5, 1, [183, 135, 189, 106, 187]),
        (50, 1.5, 10, [162, 153, 157, 157, 171]),
        (200, 1.2, 0.1, [725, 557, 831, 317, 770]),
        (200, 1.2, 1, [709, 547, 771, 430, 743]),
        (200, 1.2, 10, [654, 659, 624, 647, 616]),
    ],
)
def test_beta_split_sizes_match_paper(ppc, noise, beta, sizes):
    X, y, client = garst_beta_split(beta, ppc=ppc, noise=noise)
    assert client.dtype == np.int64
    assert np.bincount(client, minlength=5).tolist() == sizes


@pytest.mark.parametrize(
    ("beta", "clusters"),
    [(0.1, [8, 9, 9, 10, 11]), (1, [15, 16, 15, 15, 16]), (10, [16, 16, 16, 16, 16])],
)
def test_beta_split_clusters_per_client(beta, clusters):
    _, y, client = garst_beta_split(beta)
    assert [len(np.unique(y[client == o])) for o in range(5)] == clusters


def test_beta_split_pooled_identical_across_beta():
    X_grid, y_grid = garst_grid()
    for beta in (0.1, 1, 10):
        X, y, _ = garst_beta_split(beta)
        assert X.shape == (800, 2)
        np.testing.assert_array_equal(X, X_grid)
        np.testing.assert_array_equal(y, y_grid)


def test_beta_split_low_beta_is_mostly_voronoi():
    X, _, client = garst_beta_split(0.1)
    nearest = np.argmin(np.linalg.norm(X[:, None] - GARST_OBSERVERS[None], axis=2), axis=1)
    assert (client == nearest).mean() > 0.9


def test_generator_argument_errors():
    with pytest.raises(ValueError, match="beta must be a positive"):
        garst_beta_split(0.0)
    with pytest.raises(ValueError, match="observers must have shape"):
        garst_beta_split(1.0, observers=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="ppc"):
        garst_grid(ppc=0)
    with pytest.raises(ValueError, match="amounts"):
        garst_clusterwise(amounts=(1, -1))


# ----------------------------------------------------------------------- cluster-wise (spec 4.2)


def test_clusterwise_sizes_and_clusters():
    X, y, client = garst_clusterwise()
    assert X.shape == (788, 2)
    assert np.bincount(client).tolist() == [473, 10, 34, 173, 98]
    assert [len(np.unique(y[client == o])) for o in range(5)] == [16, 1, 3, 10, 7]
    # Client 1 has the 10 points of cluster 0 only.
    assert np.unique(y[client == 1]).tolist() == [0]


def test_clusterwise_partitioner_reproduces_generator():
    X_grid, y_grid = garst_grid()
    X_cw, y_cw, client = garst_clusterwise()
    parts = partition_arrays(X_grid, y_grid, ClusterWisePartitioner((16, 1, 3, 10, 7)))
    assert len(parts) == 5
    for i, (X_i, y_i) in enumerate(parts):
        np.testing.assert_array_equal(X_i, X_cw[client == i])
        np.testing.assert_array_equal(y_i, y_cw[client == i])


def test_clusterwise_partitioner_discards_unwanted_classes():
    X = np.arange(12, dtype=float).reshape(-1, 1)
    y = np.repeat([0, 1, 2], 4)
    parts = partition_arrays(X, y, ClusterWisePartitioner((1, 2)))
    # class 0 -> both clients (2 rows each); class 1 -> client 1 (4 rows); class 2 -> nobody.
    assert parts[0][0].ravel().tolist() == [0, 1]
    assert parts[1][0].ravel().tolist() == [2, 3, 4, 5, 6, 7]


# ----------------------------------------------------------------------------- partitioners


def test_arrays_dataset_round_trip_exact_and_empty():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(7, 3))
    y = rng.integers(0, 4, 7)
    ds = arrays_to_dataset(X, y, extra={"client": np.arange(7)})
    assert set(ds.column_names) == {"features", "label", "client"}
    X2, y2 = dataset_to_arrays(ds)
    np.testing.assert_array_equal(X2, X)  # float64 kept exactly (no float32 detour)
    assert X2.dtype == np.float64 and y2.dtype == np.int64
    np.testing.assert_array_equal(y2, y)
    X3, y3 = dataset_to_arrays(ds.select([]))
    assert X3.shape == (0, 3) and y3.shape == (0,)
    X4, y4 = dataset_to_arrays(arrays_to_dataset(X))
    assert y4 is None and X4.shape == (7, 3)


def test_assignment_partitioner_with_empty_partition():
    X = np.arange(10, dtype=float).reshape(5, 2)
    y = np.array([0, 1, 0, 1, 0])
    client = np.array([2, 0, 2, 0, 2])
    parts = partition_arrays(X, y, AssignmentPartitioner(3), extra={"client": client})
    assert [len(p[0]) for p in parts] == [2, 0, 3]
    assert parts[1][0].shape == (0, 2)
    np.testing.assert_array_equal(parts[2][0], X[[0, 2, 4]])
    with pytest.raises(ValueError, match=r"partition_id must be in \[0, 3\)"):
        p = AssignmentPartitioner(3)
        p.dataset = arrays_to_dataset(X, y, {"client": client})
        p.load_partition(3)


def test_assignment_partitioner_rejects_out_of_range_ids():
    X = np.zeros((3, 2))
    with pytest.raises(ValueError, match="must hold integers in"):
        partition_arrays(X, None, AssignmentPartitioner(2), extra={"client": np.array([0, 1, 2])})


def test_beta_spatial_partitioner_deterministic_and_covering():
    X, y = garst_grid()

    def split(seed):
        p = BetaSpatialPartitioner(5, 0.1, GARST_OBSERVERS, seed=seed)
        parts = partition_arrays(X, y, p)
        return p.assignment, parts

    a1, parts = split(3)
    a2, _ = split(3)
    a3, _ = split(4)
    np.testing.assert_array_equal(a1, a2)
    assert not np.array_equal(a1, a3)
    assert sum(len(p[0]) for p in parts) == len(X)
    for i, (X_i, _) in enumerate(parts):
        np.testing.assert_array_equal(X_i, X[a1 == i])
    # Same statistical behaviour as the paper's split: small beta is close to Voronoi.
    nearest = np.argmin(np.linalg.norm(X[:, None] - GARST_OBSERVERS[None], axis=2), axis=1)
    assert (a1 == nearest).mean() > 0.9
    # Large beta is close to uniform.
    p = BetaSpatialPartitioner(5, 10.0, GARST_OBSERVERS, seed=0)
    sizes = [len(part[0]) for part in partition_arrays(X, y, p)]
    assert min(sizes) > 100


def test_beta_spatial_partitioner_uses_first_two_features():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    p = BetaSpatialPartitioner(2, 1.0, [[0, 0], [1, 1]], seed=0)
    parts = partition_arrays(X, None, p)
    assert sum(len(q[0]) for q in parts) == 50 and parts[0][0].shape[1] == 4
    with pytest.raises(ValueError, match="locations must have shape"):
        BetaSpatialPartitioner(3, 1.0, [[0, 0], [1, 1]])


def test_partition_arrays_with_flower_iid():
    X = np.arange(20, dtype=float).reshape(10, 2)
    parts = partition_arrays(X, None, IidPartitioner(3))
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), X)


# ---------------------------------------------------------------------------------- registry


def test_registry_natural_matches_generators():
    X, y, client = garst_beta_split(1.0)
    for i in range(5):
        X_i, y_i = load_partition(i, 5, dataset="garst-grid", beta=1.0)
        np.testing.assert_array_equal(X_i, X[client == i])
        np.testing.assert_array_equal(y_i, y[client == i])
    Xp, _ = load_pooled(5, dataset="garst-clusterwise")
    assert Xp.shape == (788, 2)
    sizes = [len(load_partition(i, 5, dataset="garst-clusterwise")[0]) for i in range(5)]
    assert sizes == [473, 10, 34, 173, 98]


def test_registry_returns_copies():
    X_i, _ = load_partition(0, 5, dataset="garst-grid")
    X_i[:] = 0.0
    X_j, _ = load_partition(0, 5, dataset="garst-grid")
    assert np.abs(X_j).sum() > 0


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet"])
@pytest.mark.parametrize("dataset", ["garst-grid", "iris", "digits"])
def test_registry_iid_dirichlet_cover_every_row_once(dataset, partitioner):
    X, y, _ = load_dataset(dataset)
    kwargs = dict(dataset=dataset, partitioner=partitioner, seed=1, dirichlet_alpha=0.5)
    parts = [load_partition(i, 4, **kwargs) for i in range(4)]
    X_all = np.concatenate([p[0] for p in parts])
    y_all = np.concatenate([p[1] for p in parts])
    assert len(X_all) == len(X)
    np.testing.assert_array_equal(_sorted_rows(X_all, y_all), _sorted_rows(X, y))
    Xp, yp = load_pooled(4, **kwargs)
    np.testing.assert_array_equal(Xp, X_all)
    np.testing.assert_array_equal(yp, y_all)
    # Seeded: same partition on a second call, different one for another seed.
    np.testing.assert_array_equal(load_partition(2, 4, **kwargs)[0], parts[2][0])
    other = load_partition(2, 4, **{**kwargs, "seed": 2})[0]
    assert other.shape != parts[2][0].shape or not np.array_equal(other, parts[2][0])


def test_registry_iid_is_shuffled():
    # garst-grid is stored cluster by cluster; IID shards must still mix the clusters.
    for i in range(5):
        _, y_i = load_partition(i, 5, dataset="garst-grid", partitioner="iid")
        assert len(np.unique(y_i)) == 16


def test_registry_datasets_load():
    shapes = {
        "garst-grid": (800, 2),
        "garst-clusterwise": (788, 2),
        "blobs": (1000, 2),
        "iris": (150, 4),
        "wine": (178, 13),
        "digits": (1797, 64),
        "breast-cancer": (569, 30),
        **{f"sset-{level}": (5000, 2) for level in range(1, 5)},
        "dim-128": (1024, 128),
        "digits-037": (540, 64),
        "digits-46": (362, 64),
        **{name: (1000, 2) for name in ("moons", "circles", "aniso", "varied")},
    }
    assert set(DATASETS) == set(shapes)
    for name, shape in shapes.items():
        X, y, natural = load_dataset(name)
        assert X.shape == shape and X.dtype == np.float64 and y.dtype == np.int64
        assert (natural is not None) == name.startswith("garst-")
    Xb, yb, _ = load_dataset("blobs", n_samples=60, n_features=3, centers=4, seed=5)
    assert Xb.shape == (60, 3) and len(np.unique(yb)) == 4
    np.testing.assert_array_equal(
        Xb, load_dataset("blobs", n_samples=60, n_features=3, centers=4, seed=5)[0]
    )


def test_registry_cluster_wise_partitioner_on_other_data():
    parts = [
        load_partition(i, 3, dataset="iris", partitioner="cluster-wise", cluster_amounts="1,2,3")
        for i in range(3)
    ]
    assert [len(np.unique(p[1])) for p in parts] == [1, 2, 3]


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown dataset 'nope'; valid names: garst-grid"):
        load_dataset("nope")
    with pytest.raises(ValueError, match="unknown partitioner 'odd'"):
        load_partition(0, 5, dataset="iris", partitioner="odd")
    with pytest.raises(ValueError, match="'iris' has no natural split"):
        load_partition(0, 5, dataset="iris")
    with pytest.raises(ValueError, match="natural split into 5 clients, but the federation has "
                       "4; partitioners that serve 4 clients: iid, dirichlet, cluster-wise, "
                       "sorted \\(run config: partitioner='iid'\\)"):
        load_partition(0, 4, dataset="garst-grid")
    with pytest.raises(ValueError, match=r"partition_id must be in \[0, 5\), got 5"):
        load_partition(5, 5, dataset="garst-grid")
    with pytest.raises(ValueError, match=r"partition_id must be in \[0, 5\), got -1"):
        load_partition(-1, 5, dataset="garst-grid")
    with pytest.raises(ValueError, match="cluster_amounts has 2 entries but num_partitions is 3"):
        load_partition(0, 3, dataset="iris", partitioner="cluster-wise", cluster_amounts="1,2")
    with pytest.raises(ValueError, match="num_partitions must be >= 1, got 0"):
        check_partitioning(0, dataset="iris", partitioner="iid")
    with pytest.raises(ValueError, match="unknown dataset 'local'"):
        check_partitioning(2, dataset="local", partitioner="iid")



def test_registry_default_cluster_amounts_repeat_the_paper_pattern():
    from flwr_clustering.data import default_cluster_amounts

    assert default_cluster_amounts(5) == (16, 1, 3, 10, 7)
    assert default_cluster_amounts(1) == (16,)
    assert default_cluster_amounts(7) == (16, 1, 3, 10, 7, 16, 1)
    # one client of cluster-wise gets every class of a data set with at most 16
    X, y = load_partition(0, 1, dataset="iris", partitioner="cluster-wise")
    assert X.shape == (150, 4) and set(y.tolist()) == {0, 1, 2}


def test_check_partitioning_messages():
    check_partitioning(5, dataset="garst-grid")  # the paper's setting passes
    check_partitioning(1, dataset="dim-128", partitioner="natural", feature_mask="chain")
    with pytest.raises(ValueError, match=r"^dataset 'garst-grid' has a natural split into 5 "
                       r"clients, but the federation has 2; partitioners that serve 2 clients: "
                       r"iid, dirichlet, cluster-wise, sorted \(run config: partitioner='iid'\)$"):
        check_partitioning(2, dataset="garst-grid", partitioner="natural")
    with pytest.raises(ValueError, match="'sorted' cuts every class into 60 chunks, but the "
                       "largest class of 'iris' has 50 rows; partitioners that serve 60 "
                       "clients: iid, dirichlet"):
        check_partitioning(60, dataset="iris", partitioner="sorted")
    with pytest.raises(ValueError, match="has 150 rows for 200 clients; no partitioner serves "
                       "200 clients of 'iris'"):
        check_partitioning(200, dataset="iris", partitioner="dirichlet")
    with pytest.raises(ValueError, match="feature_mask 'chain' needs at least one feature per "
                       "client, but the data set has 2 features and the federation 3 clients, "
                       "so no partitioner serves 3 clients"):
        check_partitioning(3, dataset="moons", partitioner="iid", feature_mask="chain")
    with pytest.raises(ValueError, match=r"cluster_amounts \(1, 0\) leaves 1 of 2 clients "
                       r"without rows"):
        check_partitioning(2, dataset="iris", partitioner="cluster-wise", cluster_amounts="1,0")
    assert serving_partitioners(2, dataset="garst-grid") == (
        "iid", "dirichlet", "cluster-wise", "sorted")
    assert serving_partitioners(3, dataset="moons", feature_mask="chain") == ()
    assert serving_partitioners(1, dataset="digits-46") == PARTITIONERS


def test_split_arrays_dirichlet_failure_is_explained():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 2)), np.arange(40) % 4
    with pytest.warns(UserWarning), pytest.raises(
            ValueError, match="'dirichlet' \\(dirichlet_alpha=0.05, seed=0\\) could not give "
                              "each of 15 clients at least 2 rows"):
        split_arrays(X, y, 15, partitioner="dirichlet", dirichlet_alpha=0.05, seed=0)


# ------------------------------------------------------------------------------- local files


@pytest.mark.parametrize("ext", [".csv", ".npz", ".parquet"])
def test_local_file_round_trip_with_labels(tmp_path, ext):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(25, 3)) * 1e3
    y = rng.integers(0, 5, 25)
    path = tmp_path / f"client0{ext}"
    save_local_file(path, X, y)
    X2, y2 = load_local_file(path)
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    assert X2.dtype == np.float64 and y2.dtype == np.int64


@pytest.mark.parametrize("ext", [".csv", ".npz", ".npy", ".parquet"])
def test_local_file_round_trip_without_labels(tmp_path, ext):
    X = np.random.default_rng(1).normal(size=(10, 2))
    path = tmp_path / f"data{ext}"
    save_local_file(path, X)
    X2, y2 = load_local_file(path)
    np.testing.assert_array_equal(X2, X)
    assert y2 is None


def test_local_file_csv_written_by_hand(tmp_path):
    path = tmp_path / "hand.csv"
    path.write_text("a,b,target\n1,2.5,0\n3,4,1\n5,,1\n")
    X, y = load_local_file(path, label_column="target")
    assert X.shape == (3, 2) and y.tolist() == [0, 1, 1]
    assert np.isnan(X[2, 1])  # NaN passes through; the clients reject it with their own message
    X_all, y_none = load_local_file(path, label_column=None)
    assert X_all.shape == (3, 3) and y_none is None


def test_local_file_parquet_written_by_pandas(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"f1": [1.0, 2.0], "f2": [3, 4], "label": [7, 8]}).to_parquet(path)
    X, y = load_local_file(path)
    np.testing.assert_array_equal(X, [[1.0, 3.0], [2.0, 4.0]])
    assert y.tolist() == [7, 8]


def test_local_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.csv: data file not found"):
        load_local_file(tmp_path / "missing.csv")

    bad_ext = tmp_path / "data.txt"
    bad_ext.write_text("1,2\n")
    with pytest.raises(ValueError, match=r"data.txt: unsupported file extension '.txt'"):
        load_local_file(bad_ext)

    text = tmp_path / "text.csv"
    text.write_text("a,b\n1,2\n3,hello\n")
    with pytest.raises(ValueError, match=r"text.csv: non-numeric value 'hello' in column 'b'"):
        load_local_file(text)

    bad_label = tmp_path / "badlabel.csv"
    bad_label.write_text("a,label\n1,cat\n")
    with pytest.raises(ValueError, match="non-numeric value 'cat' in label column 'label'"):
        load_local_file(bad_label)

    frac_label = tmp_path / "fraclabel.csv"
    frac_label.write_text("a,label\n1,0.5\n")
    with pytest.raises(ValueError, match="label column 'label' must be integers"):
        load_local_file(frac_label)

    header_only = tmp_path / "header.csv"
    header_only.write_text("a,b\n")
    with pytest.raises(ValueError, match=r"header.csv: file is empty \(no data rows\)"):
        load_local_file(header_only)

    blank = tmp_path / "blank.csv"
    blank.write_text("")
    with pytest.raises(ValueError, match="blank.csv: file is empty"):
        load_local_file(blank)

    labels_only = tmp_path / "labels_only.csv"
    labels_only.write_text("label\n1\n2\n")
    with pytest.raises(ValueError, match="labels_only.csv: file has no feature columns"):
        load_local_file(labels_only)

    one_d = tmp_path / "vec.npy"
    np.save(one_d, np.arange(5.0))
    with pytest.raises(ValueError, match=r"vec.npy: features must be a 2-D array .* shape \(5,\)"):
        load_local_file(one_d)

    empty_npy = tmp_path / "empty.npy"
    np.save(empty_npy, np.empty((0, 3)))
    with pytest.raises(ValueError, match="empty.npy: file is empty"):
        load_local_file(empty_npy)

    strings = tmp_path / "strings.npy"
    np.save(strings, np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="strings.npy: features must be numeric"):
        load_local_file(strings)

    no_x = tmp_path / "nox.npz"
    np.savez(no_x, data=np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"nox.npz: .npz file must contain an array named 'X'"):
        load_local_file(no_x)

    bad_y = tmp_path / "bady.npz"
    np.savez(bad_y, X=np.zeros((3, 2)), y=np.zeros(2))
    with pytest.raises(ValueError, match=r"bady.npz: array 'y' must have shape \(3,\)"):
        load_local_file(bad_y)

    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"not a numpy file")
    with pytest.raises(ValueError, match="garbage.npy: cannot read as a NumPy .npy array"):
        load_local_file(garbage)

    with pytest.raises(ValueError, match="a .npy file holds features only"):
        save_local_file(tmp_path / "x.npy", np.zeros((2, 2)), np.zeros(2))


# ------------------------------------------------------------------------------------ layering


def test_data_layer_does_not_import_flwr():
    import subprocess

    code = (
        "import sys, flwr_clustering.data, flwr_clustering.data.registry; "
        "print(any(m == 'flwr' or m.startswith('flwr.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_sorted_chunks_and_feature_masks_as_flower_partitioners():
    from flwr_clustering.data.masks import chain_masks
    from flwr_clustering.data.partitioners import (
        FeatureMaskPartitioner,
        SortedChunkPartitioner,
        partition_arrays,
    )

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 6))
    y = np.repeat([0, 1, 2], 20)
    parts = partition_arrays(X, y, SortedChunkPartitioner(4))
    assert sorted(np.concatenate([Xi[:, 0] for Xi, _ in parts])) == sorted(X[:, 0])
    for c in range(3):  # client i holds the i-th quarter of every class along feature 0
        firsts = [np.sort(Xi[yi == c, 0]) for Xi, yi in parts]
        assert all(len(f) == 5 for f in firsts)
        assert all(firsts[i].max() < firsts[i + 1].min() for i in range(3))
    masks = chain_masks(6, 3, 0.3, seed=1)
    masked = partition_arrays(X, y, FeatureMaskPartitioner(SortedChunkPartitioner(3), masks))
    plain = partition_arrays(X, y, SortedChunkPartitioner(3))
    for (Xm, ym), (Xp, yp), m in zip(masked, plain, masks, strict=True):
        assert np.isnan(Xm[:, ~m]).all() and np.array_equal(Xm[:, m], Xp[:, m])
        assert np.array_equal(ym, yp)


def test_registry_feature_masks_and_complete_pooled_rows():
    from flwr_clustering.algorithms.masked import client_mask

    parts = [load_partition(i, 4, dataset="digits-037", partitioner="iid",
                            feature_mask="shared", mask_shared=0.25) for i in range(4)]
    masks = np.array([client_mask(X) for X, _ in parts])
    shared = masks.all(axis=0)
    assert shared.sum() == 16 and (masks.sum(axis=0)[~shared] == 1).all()
    X, y = load_pooled(4, dataset="digits-037", partitioner="iid", feature_mask="shared",
                       mask_shared=0.25)
    Xc, yc = load_pooled(4, dataset="digits-037", partitioner="iid", feature_mask="shared",
                         mask_shared=0.25, complete=True)
    obs = ~np.isnan(X)
    assert np.array_equal(X[obs], Xc[obs]) and np.array_equal(y, yc) and not np.isnan(Xc).any()
    # natural split of the stand-ins: one pseudo-writer per client, every class at each
    nat = [load_partition(i, 5, dataset="digits-46", partitioner="natural") for i in range(5)]
    assert sum(len(Xi) for Xi, _ in nat) == 362
    assert all(set(np.unique(yi)) == {0, 1} for _, yi in nat)
    with pytest.raises(ValueError, match="feature mask"):
        load_partition(0, 4, dataset="digits-46", partitioner="iid", feature_mask="diagonal")


def test_dim_dealing_gives_every_client_rows():
    from flwr_clustering.data.masks import dim_assignment, dim_lookalike

    X, y, _ = dim_lookalike(seed=0)
    for seed in range(20):
        for scheme, split in (("chain", "iid"), ("shared", "sorted")):
            client = dim_assignment(X, y, 10, scheme=scheme, split=split, seed=seed)
            assert np.bincount(client, minlength=10).min() > 0, (seed, scheme)
            for c in range(16):  # every cluster on 3..6 clients, as dealt
                assert 3 <= len(np.unique(client[y == c])) <= 6


def test_shapes_are_the_sklearn_comparison_sets():
    from flwr_clustering.data.shapes import SHAPES, shapes

    for name, k in SHAPES.items():
        X, y = shapes(name, 300, seed=1)
        assert X.shape == (300, 2) and sorted(set(y.tolist())) == list(range(k))
        np.testing.assert_array_equal(shapes(name, 300, seed=1)[0], X)
    # the circles are concentric: radii 1 and 0.5 (plus noise)
    X, y = shapes("circles", 400)
    r = np.hypot(*X.T)
    assert abs(r[y == 0].mean() - 1.0) < 0.05 and abs(r[y == 1].mean() - 0.5) < 0.05
    with pytest.raises(ValueError, match="unknown shape"):
        shapes("spirals")


# ------------------------------------------------------------- client counts (any N >= 1)


def _partition_digest(num_partitions: int, **kwargs) -> str:
    """A short hash of every partition's size, rows (rounded to 1e-9) and labels, in order."""
    import hashlib

    h = hashlib.sha256()
    for i in range(num_partitions):
        X, y = load_partition(i, num_partitions, **kwargs)
        h.update(np.int64(len(X)).tobytes())
        h.update(np.round(X, 9).tobytes())
        h.update(y.astype(np.int64).tobytes())
    return h.hexdigest()[:20]


#: Partitions the reproductions depend on, pinned before the any-client-count change
#: (commit 682c62d): widening the client counts must not move a single row of these.
_PINNED_PARTITIONS = [
    (5, {"dataset": "garst-grid", "partitioner": "natural"}, "e42fdb3856a7fe0ffa6b"),
    (5, {"dataset": "garst-grid", "partitioner": "iid"}, "d47a7ad475bf31ad690b"),
    (5, {"dataset": "garst-clusterwise", "partitioner": "natural"}, "478e298c4b781395670e"),
    (5, {"dataset": "garst-grid", "partitioner": "cluster-wise"}, "478e298c4b781395670e"),
    (5, {"dataset": "iris", "partitioner": "cluster-wise"}, "3318dee6e1e784a41c21"),
    (3, {"dataset": "iris", "partitioner": "dirichlet"}, "ed640813b3cde19db82e"),
    (7, {"dataset": "wine", "partitioner": "sorted"}, "30ae509eeed9046a4442"),
    (5, {"dataset": "dim-128", "partitioner": "natural", "feature_mask": "chain"},
     "6e3b4c588670f97b9c46"),
    (4, {"dataset": "dim-128", "partitioner": "natural", "feature_mask": "shared"},
     "33dae00e92a2330465b6"),
    (3, {"dataset": "digits-46", "partitioner": "iid", "feature_mask": "shared"},
     "69cc0ca01fce8a9beca2"),
]


@pytest.mark.parametrize(("num_partitions", "kwargs", "digest"), _PINNED_PARTITIONS,
                         ids=[f"{kw['dataset']}-{kw['partitioner']}-{n}"
                              f"-{kw.get('feature_mask', 'none')}"
                              for n, kw, _ in _PINNED_PARTITIONS])
def test_registry_partitions_pinned(num_partitions, kwargs, digest):
    assert _partition_digest(num_partitions, **kwargs) == digest


#: The client counts of the grid below.
_CLIENT_COUNTS = (1, 2, 3, 7)


def _allowed_refusal(dataset: str, partitioner: str, n: int, feature_mask: str, d: int) -> bool:
    """The only (dataset, partitioner, N) cells of the grid that may refuse, with defaults."""
    if feature_mask == "chain" and d < n:  # a block of features per client: impossible
        return True
    if partitioner != "natural":
        return False
    if dataset in ("garst-grid", "garst-clusterwise"):  # fixed natural split of 5 clients
        return n != 5
    return dataset not in ("dim-128", "digits-037", "digits-46")  # no natural split at all


def _row_counts(X: np.ndarray, y: np.ndarray):
    """Multiset of the rows of [X | y] (as bytes), to compare row sets exactly."""
    from collections import Counter

    Z = np.ascontiguousarray(np.column_stack([X, y.astype(np.float64)]))
    return Counter(row.tobytes() for row in Z)


@pytest.mark.parametrize("feature_mask", ["none", "chain"])
@pytest.mark.parametrize("dataset", DATASETS)
def test_registry_serves_any_client_count(dataset, feature_mask):
    """Every data set x partitioner x N in {1, 2, 3, 7} works or refuses clearly, at the start.

    Works: every client gets rows, the partitions concatenate to ``load_pooled``, and the
    complete pooled rows are the data set's rows (a subset for cluster-wise, which discards
    rows). Refuses: ``check_partitioning`` and ``load_partition`` raise the same ValueError,
    which names exactly the partitioners that do serve N (or says that none does); only the
    cells of :func:`_allowed_refusal` may refuse.
    """
    X_full, y_full, _ = load_dataset(dataset)
    d = X_full.shape[1]
    full_rows = _row_counts(X_full, y_full)
    for n in _CLIENT_COUNTS:
        refusals: dict[str, str] = {}
        for partitioner in PARTITIONERS:
            kwargs = {"dataset": dataset, "partitioner": partitioner, "feature_mask": feature_mask}
            cell = f"{dataset} {partitioner} N={n} mask={feature_mask}"
            try:
                check_partitioning(n, **kwargs)
            except ValueError as exc:
                refusals[partitioner] = str(exc)
                with pytest.raises(ValueError) as info:
                    load_partition(0, n, **kwargs)
                assert str(info.value) == str(exc), cell
                assert _allowed_refusal(dataset, partitioner, n, feature_mask, d), (cell, exc)
                continue
            assert not _allowed_refusal(dataset, partitioner, n, feature_mask, d), cell
            parts = [load_partition(i, n, **kwargs) for i in range(n)]
            assert all(len(X_i) > 0 and X_i.shape[1] == d and len(y_i) == len(X_i)
                       for X_i, y_i in parts), (cell, [len(X_i) for X_i, _ in parts])
            Xp, yp = load_pooled(n, **kwargs)
            np.testing.assert_array_equal(Xp, np.concatenate([X_i for X_i, _ in parts]))
            np.testing.assert_array_equal(yp, np.concatenate([y_i for _, y_i in parts]))
            Xc, yc = Xp, yp
            if feature_mask != "none":
                Xc, yc = load_pooled(n, complete=True, **kwargs)
                np.testing.assert_array_equal(yc, yp)
                observed = ~np.isnan(Xp)
                assert not np.isnan(Xc).any() and np.array_equal(Xc[observed], Xp[observed])
                for X_i, _ in parts:  # a client sees whole features, at least one
                    seen = ~np.isnan(X_i)
                    assert (seen.all(axis=0) | ~seen.any(axis=0)).all() and seen.any(), cell
            rows = _row_counts(Xc, yc)
            if partitioner == "cluster-wise":  # it discards the rows no client takes
                assert not rows - full_rows, cell
            else:
                assert rows == full_rows, cell
        serving = [p for p in PARTITIONERS if p not in refusals]
        assert tuple(serving) == serving_partitioners(n, dataset=dataset,
                                                      feature_mask=feature_mask)
        for message in refusals.values():
            if serving:
                assert (f"partitioners that serve {n} clients: {', '.join(serving)} "
                        f"(run config: partitioner={serving[0]!r})") in message, message
            else:
                assert f"no partitioner serves {n} clients" in message, message
