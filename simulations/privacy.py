"""Privacy experiments: attacks on what the clients send (reference, not a defence).

:func:`differencing_attack` is the attack the privacy ledger names: FKM's clients send, in
every round, the mean and the count of each cluster (aligned to the global centroid it
started from). Where a cluster's count differs by one between two rounds, the difference
of the two sums (mean x count) is one row, exactly, if no other row moved in or out of
that cluster in between. The server can compute it from the messages it
receives; the test suite measures how many rows it recovers, and will measure that secure
aggregation and differential privacy recover none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flwr_clustering.algorithms.local_centroids import LocalCentroids

__all__ = ["differencing_attack", "fkm_uploads", "recovered_rows"]


def differencing_attack(uploads: Sequence[LocalCentroids]) -> np.ndarray:
    """Candidate rows from one client's consecutive FKM uploads.

    Parameters
    ----------
    uploads : sequence of LocalCentroids
        The client's uploads in round order (the initial one, with index -1, is skipped).

    Returns
    -------
    numpy.ndarray of shape (m, d)
        ``sum_s - sum_r`` (or its negative) for every cluster (global index) whose count
        differs by exactly one between any two rounds ``r < s``.
    """
    candidates = []
    aligned = [u for u in uploads if not (u.index < 0).any()]
    pairs = [(a, b) for i, a in enumerate(aligned) for b in aligned[i + 1:]]
    for before, after in pairs:
        b = {int(j): (c, m) for j, c, m in zip(before.index, before.counts, before.means,
                                                  strict=True)}
        for j, c, m in zip(after.index, after.counts, after.means, strict=True):
            if int(j) not in b:
                continue
            c0, m0 = b[int(j)]
            step = int(c) - int(c0)
            if abs(step) == 1:
                candidates.append(step * (m * c - m0 * c0))
    d = uploads[0].means.shape[1] if len(uploads) and uploads[0].means.ndim == 2 else 0
    return np.asarray(candidates, dtype=np.float64).reshape(-1, d)


def recovered_rows(candidates: np.ndarray, X: np.ndarray, atol: float = 1e-8) -> int:
    """How many distinct rows of ``X`` the candidates hit (within ``atol``, every feature)."""
    if len(candidates) == 0:
        return 0
    hit = np.zeros(len(X), dtype=bool)
    for c in candidates:
        hit |= np.all(np.abs(X - c) <= atol, axis=1)
    return int(hit.sum())


def fkm_uploads(received) -> dict[int, list[LocalCentroids]]:
    """Every client's FKM train uploads, in round order, from the replies a server received."""
    out: dict[int, list[tuple[int, LocalCentroids]]] = {}
    for msg in received:
        if msg.has_error() or msg.metadata.message_type != "train":
            continue
        cid = int(msg.content["metrics"]["client-id"])
        upload = LocalCentroids.from_arrays(msg.content["arrays"].to_numpy_ndarrays())
        out.setdefault(cid, []).append((int(msg.metadata.group_id), upload))
    return {cid: [u for _, u in sorted(v, key=lambda t: t[0])] for cid, v in out.items()}
