"""What an upload claims (algorithms/upload.py), and the one-shot strategy base.

Every parsed payload says its counts, means and dimension itself (the ``Upload``
protocol); no strategy overrides a hook per claim, and the four one-shot algorithms share
:class:`~flwr_clustering.strategies.oneshot.OneShotStrategy`.
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_clustering import registry
from flwr_clustering.algorithms.feca import FeCAUpload
from flwr_clustering.algorithms.fkm_partial import PartialCentroids
from flwr_clustering.algorithms.local_centroids import LocalCentroids
from flwr_clustering.algorithms.masked import MaskedStats
from flwr_clustering.algorithms.masked_oneshot import GaussianUpload
from flwr_clustering.algorithms.mavg import MAvgUpload
from flwr_clustering.algorithms.upload import Arrays, Claims, Upload, claims_of
from flwr_clustering.strategies import FedKMeans, KFed
from flwr_clustering.strategies.base import ClusteringStrategy
from flwr_clustering.strategies.oneshot import OneShotStrategy

ONE_SHOT = ("kfed", "feca", "mavg", "masked-oneshot")


def _centroids(n: int, d: int = 2) -> LocalCentroids:
    return LocalCentroids(np.arange(n * d, dtype=float).reshape(n, d),
                          np.arange(2, 2 + n, dtype=np.int64), np.full(n, -1, np.int64))


def test_local_centroids_claim_their_counts_means_and_dimension():
    upload = _centroids(3)
    claims = claims_of(upload)
    assert isinstance(upload, Upload)
    assert claims.counts is upload.counts and claims.features == 2
    means, rows = claims.means_and_rows()
    assert means is upload.means and rows is upload.counts


def test_single_row_holds_each_mean_to_one_row_and_an_empty_upload_reveals_no_dimension():
    upload = _centroids(3)
    upload.single_row = True
    means, rows = claims_of(upload).means_and_rows()
    np.testing.assert_array_equal(rows, np.ones(3))
    assert claims_of(upload).counts is upload.counts
    assert claims_of(_centroids(0)).features is None


def test_uploads_without_counts_claim_means_of_at_least_one_row():
    C = np.array([[1.0, 2.0], [3.0, 4.0]])
    for upload in (FeCAUpload(C, np.array([0.5, 0.5])), MAvgUpload(C)):
        claims = claims_of(upload)
        assert claims.counts is None and claims.features == 2
        means, rows = claims.means_and_rows()
        assert means is C
        np.testing.assert_array_equal(rows, [1.0, 1.0])


def test_masked_uploads_claim_per_feature_counts_and_observed_means():
    gauss = GaussianUpload(np.array([True, False, True]), np.array([[1.0, 3.0]]),
                           np.eye(2)[None], np.array([5]))
    claims = claims_of(gauss)
    assert claims.features == 3 and claims.counts is gauss.counts
    means, rows = claims.means_and_rows()
    np.testing.assert_array_equal(means, [[1.0, np.nan, 3.0]])
    assert rows is gauss.counts
    stats = MaskedStats(np.array([[4.0, 0.0]]), np.array([[2.0, 0.0]]))
    means, rows = claims_of(stats).means_and_rows()
    np.testing.assert_array_equal(means, [[2.0, np.nan]])
    assert rows is stats.counts and claims_of(stats).features == 2
    medoids = MaskedStats(stats.sums, stats.counts, single_row=True)
    np.testing.assert_array_equal(claims_of(medoids).means_and_rows()[1], [[1.0, 0.0]])


def test_partial_centroids_hold_each_mean_to_the_values_behind_it():
    upload = PartialCentroids(np.ones((2, 3)), np.array([4, 5]), np.array([0, 1]),
                              np.array([[4, 0, 2], [5, 5, 0]]))
    claims = claims_of(upload)
    assert claims.counts is upload.counts and claims.features == 3
    assert claims.means_and_rows()[1] is upload.feature_counts


def test_plain_arrays_claim_nothing_unless_wrapped_with_their_claims():
    C = np.ones((2, 3))
    assert claims_of(C) == Claims() and claims_of((C, C)) == Claims()
    assert claims_of([C]).means_and_rows() is None
    wrapped = Arrays((C, np.array([1.0, 2.0])), Claims(features=3))
    centres, supports = wrapped  # still the tuple the aggregation reads
    assert centres is C and len(wrapped) == 2 and wrapped[1][1] == 2.0
    assert claims_of(wrapped).features == 3 and claims_of(wrapped).counts is None
    assert claims_of(Claims(features=4)).features == 4  # a payload of claims only


@pytest.mark.parametrize("name", registry.names(listed_only=False))
def test_no_strategy_overrides_a_hook_per_claim(name):
    strategy = registry.get(name).strategy
    for hook in ("payload_counts", "payload_means", "payload_features"):
        assert getattr(strategy, hook) is getattr(ClusteringStrategy, hook), (name, hook)


@pytest.mark.parametrize("name", ONE_SHOT)
def test_the_one_shot_algorithms_share_the_one_shot_base(name):
    spec = registry.get(name)
    strategy = spec.strategy(k=3)
    assert isinstance(strategy, OneShotStrategy)
    assert strategy.protocol_rounds() == 1 and strategy.max_rounds == 1
    assert strategy.train_arrays(1) == []
    assert strategy.train_config(1)["phase"] == spec.protocol[0].name
    assert strategy.converged(1) is True


def test_the_base_reads_the_claims_a_parser_put_on_the_payload():
    arrays = _centroids(2).to_arrays()
    kfed = KFed(k=2)
    payload = kfed.parse_payload(1, arrays)
    np.testing.assert_array_equal(kfed.payload_means(payload)[1], [1.0, 1.0])
    np.testing.assert_array_equal(kfed.payload_counts(payload), [2, 3])
    fkm = FedKMeans(k=2)
    assert fkm.payload_means(fkm.parse_payload(1, arrays))[1] is not None
    np.testing.assert_array_equal(fkm.payload_means(fkm.parse_payload(1, arrays))[1], [2, 3])
    recount = FedKMeans(k=2, recount=True)
    np.testing.assert_array_equal(
        recount.payload_means(recount.parse_payload(1, arrays))[1], [1.0, 1.0])
    assert kfed.payload_features(payload) == 2
