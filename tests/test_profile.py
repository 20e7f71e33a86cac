"""Cluster profiles from additive federated statistics, their figure and the HTML report."""

from __future__ import annotations

import html
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from flwr_clustering.profile import cluster_profile, plot_profile, write_report

FEATURES = ["age", "income", "area", "ratio"]
UNITS = np.array([1.0, 100.0, 1e4, 0.01])
SHIFT = np.array([40.0, -300.0, 2e5, 0.7])
SITES = {"north": 40, "south": 60, "east": 55}
PNG = b"\x89PNG\r\n\x1a\n"


def _pooled(seed: int = 0):
    """Rows of three sites in different units, centroids (data rows) and nearest labels."""
    rng = np.random.default_rng(seed)
    blobs = rng.normal(size=(3, 4)) * 3
    parts = []
    for n in SITES.values():
        base = blobs[rng.integers(0, 3, size=n)] + rng.normal(size=(n, 4))
        parts.append(base * UNITS + SHIFT)
    X = np.vstack(parts)
    C = X[rng.choice(len(X), size=3, replace=False)]
    site = np.repeat(np.arange(len(SITES)), list(SITES.values()))
    return X, C, site


def _nearest(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    scaled_X, scaled_C = (X - SHIFT) / UNITS, (C - SHIFT) / UNITS
    return np.argmin(((scaled_X[:, None, :] - scaled_C[None]) ** 2).sum(-1), axis=1)


def _site_stats(X: np.ndarray, C: np.ndarray, labels: np.ndarray, site: np.ndarray):
    """What each site sends (counts, R, Q), summed over the sites as the server does."""
    k, d = C.shape
    counts, R, Q = np.zeros(k, dtype=np.int64), np.zeros((k, d)), np.zeros((k, d))
    per_site = {}
    for s, name in enumerate(SITES):
        Xs, Ls = X[site == s], labels[site == s]
        n_s = np.bincount(Ls, minlength=k)
        for j in range(k):
            diff = Xs[Ls == j] - C[j]
            R[j] += diff.sum(axis=0)
            Q[j] += (diff**2).sum(axis=0)
        counts += n_s
        per_site[name] = n_s
    return counts, R, Q, per_site


def _expected(X: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(X, columns=FEATURES).groupby(labels).agg(
        ["mean", lambda s: s.std(ddof=0)]
    )


def _assert_matches_groupby(profile: pd.DataFrame, X: np.ndarray, labels: np.ndarray):
    expected = _expected(X, labels)
    for f in FEATURES:
        np.testing.assert_allclose(profile[f"{f} mean"].to_numpy(),
                                   expected[(f, "mean")].to_numpy(), rtol=1e-12, atol=0)
        np.testing.assert_allclose(profile[f"{f} std"].to_numpy(),
                                   expected[(f, "<lambda_0>")].to_numpy(), rtol=1e-12, atol=0)
    sizes = pd.Series(labels).value_counts().sort_index()
    np.testing.assert_array_equal(profile["size"].to_numpy(), sizes.to_numpy())
    assert profile["size"].dtype == np.int64


def test_profile_equals_pooled_groupby_in_original_units():
    X, C, site = _pooled()
    labels = _nearest(X, C)
    assert len(np.unique(labels)) == 3
    counts, R, Q, per_site = _site_stats(X, C, labels, site)

    profile = cluster_profile(counts, R, Q, C, FEATURES, site_counts=per_site)

    _assert_matches_groupby(profile, X, labels)
    np.testing.assert_allclose(profile["fraction"].to_numpy(), counts / len(X), rtol=1e-15)
    assert profile.index.name == "cluster"
    assert list(profile.index) == list(range(3))
    site_cols = [f"rows at {s}" for s in SITES]
    feature_cols = [f"{f} {stat}" for f in FEATURES for stat in ("mean", "std")]
    assert list(profile.columns) == ["size", "fraction", *site_cols, *feature_cols]
    for name, col in zip(SITES, site_cols, strict=True):  # default threshold 2
        np.testing.assert_array_equal(profile[col].to_numpy(),
                                      np.where((per_site[name] == 1), np.nan, per_site[name]))


def test_profile_undoes_the_clients_scaling():
    X, C, site = _pooled(1)
    labels = _nearest(X, C)
    center = X.mean(axis=0) + np.array([0.3, -20.0, 500.0, 1e-3])
    scale = X.std(axis=0) * np.array([1.0, -1.0, 2.0, 0.5])  # a negative scale flips, |.| std
    Z, Cz = (X - center) / scale, (C - center) / scale
    counts, R, Q, _ = _site_stats(Z, Cz, labels, site)

    profile = cluster_profile(counts, R, Q, Cz, FEATURES, center=center, scale=scale)

    _assert_matches_groupby(profile, X, labels)
    # Without the scaling the same statistics describe z, not x.
    unscaled = cluster_profile(counts, R, Q, Cz, FEATURES)
    assert not np.allclose(unscaled["income mean"], profile["income mean"])


def test_profile_with_large_offsets_stays_exact():
    # Residuals about the centroids avoid the cancellation of raw sums of x and x**2.
    X, C, site = _pooled(2)
    X, C = X + 1e8, C + 1e8
    labels = _nearest(X - 1e8, C - 1e8)
    counts, R, Q, _ = _site_stats(X, C, labels, site)
    profile = cluster_profile(counts, R, Q, C, FEATURES)
    expected = _expected(X, labels)
    np.testing.assert_allclose(profile["area std"].to_numpy(),
                               expected[("area", "<lambda_0>")].to_numpy(), rtol=1e-9)


@pytest.mark.parametrize("threshold", [1, 2, 3])
def test_small_site_counts_are_suppressed(threshold):
    k, d = 3, 2
    site_counts = {"a": np.array([1, 0, 5]), "b": np.array([2, 4, 1])}
    counts = site_counts["a"] + site_counts["b"]
    zeros = np.zeros((k, d))
    profile = cluster_profile(counts, zeros, zeros, zeros, ["x", "y"],
                              site_counts=site_counts, privacy_threshold=threshold)
    for name, values in site_counts.items():
        col = profile[f"rows at {name}"].to_numpy()
        small = (values > 0) & (values < threshold)
        assert np.isnan(col[small]).all()
        np.testing.assert_array_equal(col[~small], values[~small])
        assert (col[values == 0] == 0).all()  # a zero is no small group: kept
    if threshold == 2:
        assert np.isnan(profile.loc[0, "rows at a"]) and profile.loc[1, "rows at a"] == 0
        assert profile.loc[0, "rows at b"] == site_counts["b"][0]
    # the totals are never suppressed
    np.testing.assert_array_equal(profile["size"].to_numpy(), counts)


def test_empty_and_withheld_clusters_give_nan():
    X, C, site = _pooled(3)
    labels = _nearest(X, C)
    labels[labels == 1] = 0  # cluster 1 ends up empty
    counts, R, Q, _ = _site_stats(X, C, labels, site)
    assert counts[1] == 0
    profile = cluster_profile(counts, R, Q, C, FEATURES)
    assert profile.loc[1, "size"] == 0 and profile.loc[1, "fraction"] == 0
    assert profile.loc[1, [f"{f} mean" for f in FEATURES]].isna().all()
    assert profile.loc[1, [f"{f} std" for f in FEATURES]].isna().all()
    assert profile.loc[[0, 2], [f"{f} std" for f in FEATURES]].notna().all().all()

    R[2] = np.nan  # statistics withheld for cluster 2
    withheld = cluster_profile(counts, R, Q, C, FEATURES)
    assert withheld.loc[2, [f"{f} mean" for f in FEATURES]].isna().all()
    pd.testing.assert_series_equal(withheld.loc[0], profile.loc[0])


def test_errors_name_the_problem():
    k, d = 3, 2
    counts, zeros = np.array([1, 2, 3]), np.zeros((k, d))
    with pytest.raises(ValueError, match="feature_names.*3 names.*d = 2"):
        cluster_profile(counts, zeros, zeros, zeros, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"residual_sums has shape \(3, 3\).*\(3, 2\)"):
        cluster_profile(counts, np.zeros((k, 3)), zeros, zeros, ["a", "b"])
    with pytest.raises(ValueError, match=r"sq_residual_sums has shape \(2, 2\)"):
        cluster_profile(counts, zeros, np.zeros((2, d)), zeros, ["a", "b"])
    with pytest.raises(ValueError, match=r"centroids has shape \(2, 2\).*counts has shape \(3,\)"):
        cluster_profile(counts, zeros, zeros, np.zeros((2, d)), ["a", "b"])
    with pytest.raises(ValueError, match="counts must not be negative"):
        cluster_profile(np.array([1, -2, 3]), zeros, zeros, zeros, ["a", "b"])
    with pytest.raises(ValueError, match=r"center has shape \(3,\)"):
        cluster_profile(counts, zeros, zeros, zeros, ["a", "b"], center=np.zeros(3))
    with pytest.raises(ValueError, match=r"scale has shape \(1,\)"):
        cluster_profile(counts, zeros, zeros, zeros, ["a", "b"], scale=np.ones(1))
    with pytest.raises(ValueError, match=r"site_counts\['s'\] must have shape \(3,\)"):
        cluster_profile(counts, zeros, zeros, zeros, ["a", "b"], site_counts={"s": [1, 2]})
    with pytest.raises(ValueError, match="site_counts.*negative"):
        cluster_profile(counts, zeros, zeros, zeros, ["a", "b"], site_counts={"s": [1, -2, 3]})
    with pytest.raises(ValueError, match="unique"):
        cluster_profile(counts, zeros, zeros, zeros, ["a", "a"])


def _sample_profile(with_sites: bool = True, features=FEATURES) -> pd.DataFrame:
    X, C, site = _pooled(4)
    labels = _nearest(X, C)
    counts, R, Q, per_site = _site_stats(X, C, labels, site)
    if with_sites:
        per_site = {name: values.copy() for name, values in per_site.items()}
        per_site["east"][0] = 1  # one suppressed count (and 1 fewer row in cluster 0)
        counts = sum(per_site.values())
    return cluster_profile(counts, R, Q, C, features,
                           site_counts=per_site if with_sites else None)


@pytest.mark.parametrize("with_sites", [False, True])
def test_plot_profile_writes_a_png(tmp_path, with_sites):
    import matplotlib
    import matplotlib.pyplot as plt

    backend, figures = matplotlib.get_backend(), plt.get_fignums()
    profile = _sample_profile(with_sites)
    assert profile.filter(like="rows at").isna().any().any() == with_sites
    out = tmp_path / "profile.png"
    plot_profile(out, profile, FEATURES, title="three clusters")
    data = out.read_bytes()
    assert data.startswith(PNG) and len(data) > 1000
    assert plt.get_fignums() == figures and matplotlib.get_backend() == backend
    assert [p.name for p in tmp_path.iterdir()] == ["profile.png"]  # no temporary file left


def test_plot_profile_single_cluster_single_feature(tmp_path):
    profile = cluster_profile([5], [[2.0]], [[3.0]], [[1.0]], ["only"])
    out = tmp_path / "one.png"
    plot_profile(out, profile, ["only"])
    assert out.read_bytes().startswith(PNG)
    with pytest.raises(ValueError, match="missing mean"):
        plot_profile(tmp_path / "bad.png", profile, ["missing"])


def test_write_report_is_self_contained_and_escaped(tmp_path):
    evil = "<script>x</script>"
    features = [*FEATURES[:3], evil]
    profile = _sample_profile(with_sites=True, features=features)
    png = tmp_path / "profile.png"
    plot_profile(png, profile, features)
    history = [
        {"round": r, "shift": 10.0 ** -r, "clients": 3, "metrics": {"ari": 0.5 + r / 10}}
        for r in range(1, 4)
    ]
    history[0]["metrics"] = {}
    extra = pd.DataFrame({"site": list(SITES), "rows": list(SITES.values())})
    out = tmp_path / "report.html"
    write_report(
        out, title="Profile <run>", settings={"k": 3, "features": features, "opts": {"a": 1}},
        warnings=[], profile=profile,
        images={"cluster profile": png, "not there": tmp_path / "missing.png"},
        history=history, extra_tables={"Sites": extra},
    )
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<style>" in text
    profile_section = text.split("<h2>Cluster profile</h2>", 1)[1].split("<h2>", 1)[0]
    for feature in FEATURES[:3]:  # one row per feature, its full name first
        assert f"<tr><td>{feature}</td>" in profile_section
    assert all(site in text for site in SITES)
    assert "http://" not in text and "https://" not in text
    assert "<script" not in text and evil not in text
    assert f"<tr><td>{html.escape(evil)}</td>" in profile_section
    assert html.escape("Profile <run>") in text
    assert text.count("data:image/png;base64,") == 1
    assert "not there" in text and "skipped" in text
    warnings_section = text.split("<h2>Warnings</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<p>none</p>" in warnings_section
    assert profile_section.count("suppressed</td>") == int(
        profile.filter(like="rows at").isna().sum().sum())
    assert f">{profile.loc[2, 'fraction']:.4g}</td>" in profile_section  # 4 significant digits
    for feature in ("income", "area"):  # mean ± std, 4 significant digits each
        cell = f"{profile.loc[2, f'{feature} mean']:.4g} ± {profile.loc[2, f'{feature} std']:.4g}"
        assert f">{cell}</td>" in profile_section
    convergence = text.split("<h2>Convergence</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<th>ari</th>" in convergence
    assert f">{history[-1]['metrics']['ari']:.4g}</td>" in convergence
    assert f">{history[-1]['shift']:.4g}</td>" in convergence
    assert "<h2>Sites</h2>" in text
    assert html.escape('{"a": 1}') in text  # dict settings rendered as JSON
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.png", "report.html"]


def test_write_report_warnings_and_missing_values(tmp_path):
    counts = np.array([4, 0])
    profile = cluster_profile(counts, np.zeros((2, 1)), np.ones((2, 1)), np.zeros((2, 1)),
                              ["x"], site_counts={"s": counts})
    out = tmp_path / "r.html"
    write_report(out, title="t", settings={}, warnings=["few rows <5"], profile=profile,
                 images={"gone": tmp_path / "nope.png"})
    text = out.read_text(encoding="utf-8")
    warnings_section = text.split("<h2>Warnings</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<li>few rows &lt;5</li>" in warnings_section and "none" not in warnings_section
    assert "data:image/png" not in text and "skipped" in text
    # the empty cluster's mean is a dash, its (zero, unsuppressed) site count a 0
    profile_section = text.split("<h2>Cluster profile</h2>", 1)[1].split("<h2>", 1)[0]
    assert "\u2013" in profile_section and "suppressed</td>" not in profile_section


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG)
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _wide_profile(k: int, d: int, names: list[str], n_sites: int = 4):
    rng = np.random.default_rng(1)
    C = rng.normal(size=(k, d))
    sites = {f"client {s}": rng.integers(0, 30, size=k) for s in range(n_sites)}
    counts = sum(sites.values())
    R = rng.normal(size=(k, d))
    Q = R**2 / np.maximum(counts, 1)[:, None] + counts[:, None] * rng.uniform(0.5, 2, (k, d))
    return cluster_profile(counts, R, Q, C, names, site_counts=sites)


def test_a_wide_profile_with_a_huge_name_keeps_a_bounded_figure_and_wraps_its_table(tmp_path):
    from flwr_clustering.profile import CLUSTERS_PER_TABLE, LABEL_CHARS, MAX_FIGURE_INCHES

    k, d = 12, 13
    huge = "n" * 10_000  # a name of tens of thousands of characters grew the canvas
    names = [huge] + [f"measurement {i}" for i in range(1, d)]
    profile = _wide_profile(k, d, names)
    png = tmp_path / "profile.png"
    plot_profile(png, profile, names, title="wide")
    width, height = _png_size(png)
    short = _png_size_of_names(tmp_path, k, d)  # the same profile with short names
    assert (width, height) == short  # the long name is cut to LABEL_CHARS in the figure
    bound = [(inches + 0.2) * 110 for inches in MAX_FIGURE_INCHES]  # + the tight bbox's pad
    assert width <= bound[0] and height <= bound[1]
    # the largest a profile may draw: hundreds of features, clusters and sites
    big_names = [f"{i}{huge}" for i in range(300)]
    plot_profile(tmp_path / "big.png", _wide_profile(60, 300, big_names, n_sites=80),
                 big_names)
    width, height = _png_size(tmp_path / "big.png")
    assert width <= bound[0] and height <= bound[1]
    # the report: the full name once per table, the clusters wrapped CLUSTERS_PER_TABLE a table
    out = tmp_path / "report.html"
    write_report(out, title="wide", settings={}, warnings=[], profile=profile)
    section = out.read_text(encoding="utf-8").split("<h2>Cluster profile</h2>", 1)[1]
    tables = -(-k // CLUSTERS_PER_TABLE)
    assert section.count(f"<tr><td>{huge}</td>") == tables == 2
    assert section.count("<table>") == 1 + tables  # the clusters' sizes, then the means
    assert section.count("<th>cluster 11 (n=") == 1 and LABEL_CHARS < 40


def _png_size_of_names(tmp_path, k: int, d: int) -> tuple[int, int]:
    names = ["n" * 40] + [f"measurement {i}" for i in range(1, d)]
    plot_profile(tmp_path / "short.png", _wide_profile(k, d, names), names, title="wide")
    return _png_size(tmp_path / "short.png")


def test_importing_profile_stays_cheap():
    code = ("import sys, flwr_clustering.profile; "
            "print(' '.join(m for m in ('pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []
