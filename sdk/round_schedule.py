"""The round schedule the Coordinator follows: how many rounds, who takes part, the lr schedule.

:class:`Sampling` is declared once, as ``[training]``'s sampling keys of the run config
(sdk/run_config.py), and read by pfl-sim, pfl-server and ``pfl-export``'s privacy card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

import pydantic
from pydantic import Strict

from pflkit.sdk.config_types import MAX_CLIENTS, STRICT_CONFIG, Fraction, in_range, refuse_unused
from pflkit.sdk.lr_schedule import LearningRateSchedule


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class Sampling:
    """Who takes part in a round: a count, or a share of the clients."""

    # a count (at most data.num_clients), or None to use fraction
    clients_per_round: Annotated[int, Strict(), in_range(1, MAX_CLIENTS)] | None = None
    fraction: Fraction = 0.2  # share of clients sampled when clients_per_round is None

    def __post_init__(self) -> None:
        if self.clients_per_round is not None:  # a share beside the count would be ignored
            refuse_unused(self, {"fraction": "clients_per_round sets the sample's size"})

    def sample_size(self, num_clients: int) -> int:
        """Clients per round for a federation of ``num_clients``."""
        if self.clients_per_round is not None:
            k = self.clients_per_round
        else:
            k = max(1, math.floor(self.fraction * num_clients + 0.5))
        if not 1 <= k <= num_clients:
            raise ValueError(f"cannot sample {k} of {num_clients} clients per round")
        return k


@dataclass(frozen=True)
class Schedule:
    """The Coordinator's part: how many rounds, who takes part, the learning-rate schedule."""

    rounds: int
    sampling: Sampling = field(default_factory=Sampling)
    lr_schedule: LearningRateSchedule = field(default_factory=LearningRateSchedule)

    def sample_size(self, num_clients: int) -> int:
        """Clients per round for a federation of ``num_clients``."""
        return self.sampling.sample_size(num_clients)

    def lr_at(self, round_index: int) -> float:
        """The decayed learning rate of a round."""
        return self.lr_schedule.at(round_index)
