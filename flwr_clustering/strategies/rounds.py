"""The round loop's helpers (the loop itself is the strategy base's ``start``)."""

from __future__ import annotations

import numpy as np

from ..log import format_metrics, logger

__all__ = ["log_server_evaluation"]


def log_server_evaluation(rnd: int, num_rounds: int, server: dict[str, float],
                           federated: dict[str, float] | None) -> None:
    """Log the ``evaluate_fn``'s metrics of a round, once.

    When the round's federated evaluation (just logged) has the same values, as the exact
    federated statistics give on the pooled rows of a simulation, the line says so instead
    of repeating every value.
    """
    if federated and set(server) <= set(federated) and all(
            np.isclose(float(server[k]), float(federated[k]), rtol=1e-9, atol=1e-12)
            for k in server):
        logger.info("[ROUND %d/%d] server evaluation: the federated evaluation's values",
                    rnd, num_rounds)
    else:
        logger.info("[ROUND %d/%d] server evaluation: %s", rnd, num_rounds, format_metrics(server))
