"""The clients' learning-rate schedule: one object the simulator, the server and devices share.

A run's rate decays exponentially: round ``r`` trains with ``lr * decay ** r``. The run config
declares it (``training.lr``, ``training.lr_decay``), the simulator's rounds read it, the server
stores it with the run and sends it in every task unchanged, and each device computes its own
round's rate from it with :meth:`LearningRateSchedule.at`: no per-round list is kept or edited
anywhere, so the device's rate of a round is the simulator's by construction (the Java client's
``Task.learningRate`` is the same formula).
"""

from __future__ import annotations

from typing import Annotated

import pydantic
from pydantic import Strict

from pflkit.sdk.config_types import STRICT_CONFIG, LearningRate, in_range

# the last round's rate may not fall below float32's smallest normal: SGD would round it to 0
MIN_LR = 2.0**-126
Decay = Annotated[float, Strict(), in_range(0.0, 1.0, open_low=True)]  # 1: a constant rate


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class LearningRateSchedule:
    """The round-0 rate and its per-round decay (validated: both ranges of docs/simulator.md)."""

    lr: LearningRate = 0.01  # round 0's client learning rate
    decay: Decay = 0.99  # the rate of round r is lr * decay ** r

    def at(self, round_index: int) -> float:
        """The rate of a round (``round_index`` = the run's rounds: the post-federation stage)."""
        return self.lr * self.decay**round_index

    def check_until(self, rounds: int) -> None:
        """Refuse a schedule whose rate falls below :data:`MIN_LR` within ``rounds`` rounds.

        Called once with the run's length, so no round's rate can become 0 mid-run.
        """
        last = self.at(rounds)  # the ranges above: no overflow, maybe 0
        if last < MIN_LR:
            raise ValueError(f"lr x lr_decay ** rounds = {self.lr:g} x {self.decay:g} ** "
                             f"{rounds} = {last:g} is below {MIN_LR:.3g} (float32's smallest "
                             "normal)")
