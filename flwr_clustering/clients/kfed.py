"""NumPyClient of k-FED (Dennis et al. 2021): the client side of KFed."""

from __future__ import annotations

from ..algorithms.kfed import KFedOptions, kfed_client
from ..algorithms.lloyd import client_rng
from .base import ClusteringClient

__all__ = ["KFedClient"]


class KFedClient(ClusteringClient):
    """k-FED client: one Awasthi-Sheffet local clustering, uploaded once.

    ``config`` carries ``k-local`` (``k'``), ``seed`` and ``privacy-threshold``.
    ``fit`` returns ``[centres (k_i, d), counts (k_i,), index (k_i,)]`` with centres of
    fewer than ``privacy-threshold`` points withheld.

    A client with at most ``k'`` points raises: the original k-FED would upload its raw
    rows; here the reply is refused with a message naming the client, and the server
    drops it.

    Parameters
    ----------
    X, y, client_id
        See :class:`~flwr_clustering.clients.base.ClusteringClient`.
    """

    def fit(self, parameters, config):
        """Run the k-FED local step.

        Parameters
        ----------
        parameters : list of numpy.ndarray
            Unused (k-FED needs nothing from the server).
        config : dict
            See the class docstring.

        Returns
        -------
        tuple
            ``([centres, counts, index], n, {})``.
        """
        options = KFedOptions.from_config(config)
        k_local = options.k_local
        if len(self.X) <= k_local:
            raise ValueError(
                f"client {self.client_id} has {len(self.X)} rows, not more than "
                f"k'={k_local}: k-FED would upload raw rows, so this client withholds its reply"
            )
        rng = client_rng(int(config.get("seed", 0)), self.client_id)
        upload = kfed_client(self.X, k_local, rng, privacy_threshold=options.privacy_threshold)
        return upload.to_arrays(), len(self.X), {}
