"""DP FKM's privacy accountant behind Flower's ``PrivacyAccountant`` protocol.

:class:`FlowerPrivacyAccountant` adapts the plain accountant of the core
(:class:`~flwr_clustering.algorithms.dp_lloyd.GaussianAccountant`, the PLD or RDP
composition of Gaussian mechanisms) to ``flwr.serverapp.PrivacyAccountant`` (flwr 1.42):
the configuration, ``compose`` of a ``GaussianPrivacyEvent``, ``get_epsilon`` /
``get_delta`` / ``get_privacy_spent``, ``would_exceed``, and ``state_dict`` /
``load_state_dict``, which the FKM strategy's checkpoint carries so that a resumed run
goes on with the privacy it had spent. Flower's own ``RdpAccountant`` is the RDP one; this
one adds the PLD.

The unit of privacy is a row (add or remove one), and DP FKM asks every client every round
(no sampling): the configuration is ``add-or-remove-one`` with ``no-amplification``, and
the population and sample sizes of Flower's events (client sampling) are 1.
"""

from __future__ import annotations

import math
from typing import Any

from flwr.serverapp import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    PrivacySpent,
    SamplingMethod,
)

from ..algorithms.dp_lloyd import GaussianAccountant

__all__ = ["FlowerPrivacyAccountant"]

#: The version of :meth:`FlowerPrivacyAccountant.state_dict`'s layout.
_STATE_SCHEMA_VERSION = 1


class FlowerPrivacyAccountant:
    """Flower's ``PrivacyAccountant`` protocol over a :class:`GaussianAccountant`.

    Parameters
    ----------
    method : {"pld", "rdp"}
        The core accountant's method (``dp-accountant``).
    target_delta : float
        The ``delta`` of :meth:`get_privacy_spent` and :meth:`would_exceed`.
    max_epsilon : float, optional
        The budget (``dp-epsilon``) :meth:`would_exceed` checks against by default.
    """

    def __init__(self, method: str, target_delta: float,
                 max_epsilon: float | None = None) -> None:
        self.core = GaussianAccountant(method)
        budget = None if max_epsilon is None or math.isinf(max_epsilon) else max_epsilon
        self._config = PrivacyConfig(
            target_delta=float(target_delta), population_size=1,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION, max_epsilon=budget)

    @property
    def method(self) -> str:
        """``"pld"`` or ``"rdp"``."""
        return self.core.method

    @property
    def config(self) -> PrivacyConfig:
        """The privacy configuration (rows, no sampling; ``dp-delta``, ``dp-epsilon``)."""
        return self._config

    @property
    def num_releases(self) -> int:
        """The number of Gaussian mechanisms composed."""
        return self.core.num_releases

    def _check(self, event: GaussianPrivacyEvent) -> None:
        if event.population_size != self._config.population_size:
            raise ValueError("the privacy event's population_size does not match the "
                             f"accountant's: {event.population_size} != "
                             f"{self._config.population_size}")

    def compose(self, event: GaussianPrivacyEvent, count: int = 1) -> None:
        """Compose ``count`` Gaussian mechanisms of ``event.noise_multiplier``."""
        self._check(event)
        self.core.compose(event.noise_multiplier, count)

    def spend(self, noise_multiplier: float) -> None:
        """Compose one mechanism of ``noise_multiplier``, 0 (no noise) included.

        What the FKM strategy calls for every mechanism run; Flower's
        ``GaussianPrivacyEvent`` cannot hold a multiplier of 0 (``dp-epsilon=inf``).
        """
        self.core.compose(noise_multiplier)

    def get_epsilon(self, delta: float) -> float:
        """The cumulative ``epsilon`` at ``delta``."""
        return self.core.get_epsilon(delta)

    def get_delta(self, epsilon: float) -> float:
        """The cumulative ``delta`` at ``epsilon``."""
        return self.core.get_delta(epsilon)

    def get_privacy_spent(self, delta: float | None = None) -> PrivacySpent:
        """The cumulative ``(epsilon, delta)`` (``delta``: the configured one by default)."""
        delta = self._config.target_delta if delta is None else float(delta)
        return PrivacySpent(epsilon=self.core.get_epsilon(delta), delta=delta,
                            num_releases=self.num_releases, accounting_method=self.method)

    def would_exceed(self, event: GaussianPrivacyEvent, max_epsilon: float | None = None,
                     count: int = 1) -> bool:
        """Whether composing ``event`` ``count`` times would exceed ``max_epsilon``.

        The accountant itself is left as it is. ``max_epsilon`` defaults to the
        configured budget.
        """
        self._check(event)
        limit = self._config.max_epsilon if max_epsilon is None else float(max_epsilon)
        if limit is None:
            raise ValueError("max_epsilon must be given here or in the configuration")
        projected = self.core.copy()
        projected.compose(event.noise_multiplier, count)
        return projected.get_epsilon(self._config.target_delta) > limit

    def state_dict(self) -> dict[str, object]:
        """The JSON-able state, as Flower's ``RdpAccountant`` lays it out.

        The layout's version, the method (``backend``), the configuration and every
        mechanism composed, in order (:meth:`GaussianAccountant.state_dict`).
        """
        c = self._config
        return {"schema_version": _STATE_SCHEMA_VERSION, "backend": self.method,
                "config": {"target_delta": c.target_delta,
                           "population_size": c.population_size,
                           "neighboring_relation": c.neighboring_relation.value,
                           "sampling_method": c.sampling_method.value,
                           "max_epsilon": c.max_epsilon},
                **self.core.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: of the same layout, method and configuration."""
        if state.get("schema_version") != _STATE_SCHEMA_VERSION:
            raise ValueError("unsupported privacy accountant state version "
                             f"{state.get('schema_version')!r}")
        if state.get("backend") != self.method:
            raise ValueError(f"the privacy accountant state is of {state.get('backend')!r}, "
                             f"this run's accountant is {self.method!r}")
        if state.get("config") != self.state_dict()["config"]:
            raise ValueError("the privacy accountant state's configuration (dp-delta, "
                             "dp-epsilon) is not this run's")
        self.core.load_state_dict(state)
