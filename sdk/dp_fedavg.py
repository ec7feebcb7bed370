"""DP-FedAvg's aggregation (McMahan et al. 2018): clip each device's update, noise the sum.

The rule acts on exactly what a device uploads (the method's ``update_schema``): each update's
change to the round's global state, over all its floating tensors at once, is clipped to L2
norm ``C``; the clipped changes are summed, Gaussian noise ``N(0, (z * C)^2)`` is added to every
coordinate of the sum, and the sum is divided by the fixed ``m`` clients of the round, not by
their sample counts (a weight would let one device's contribution exceed ``C / m``). What the
paper leaves open, and what we chose: integer tensors (e.g. BatchNorm's batch counters) carry
no gradient signal and cannot be noised, so they keep the global state's value. The noise is
drawn from (run seed, "dp-noise", round): a seeded run is reproducible, and pfl-server's
close of a round draws the same noise as the simulator's.
"""

from __future__ import annotations

import math

import torch

from pflkit.sdk.algorithms.aggregators import Aggregator, State
from pflkit.sdk.privacy_accounting import DpRounds
from pflkit.sdk.seeding import torch_generator


def clip_delta(global_state: State, update: State, keys: list[str],
               max_norm: float) -> dict[str, torch.Tensor]:
    """The update's change on ``keys`` (float64), scaled to L2 norm <= ``max_norm``."""
    delta = {k: update[k].double() - global_state[k].double() for k in keys}
    norm = math.sqrt(sum(float((d ** 2).sum()) for d in delta.values()))
    if norm > max_norm:
        delta = {k: d * (max_norm / norm) for k, d in delta.items()}
    return delta


class DpFedAvgAggregator(Aggregator):
    """The noisy mean of clipped changes, O(model) memory (a float64 running sum)."""

    def __init__(self, global_state: State, dp: DpRounds, seed: int, round_index: int) -> None:
        self._global = global_state
        self._dp = dp
        self._seed = seed
        self._round = round_index
        self._sum: dict[str, torch.Tensor] = {}  # the uploaded floating tensors' running sum

    def add(self, weight: float, update: State) -> None:
        """Fold one update's clipped change into the sum (its sample count is not used)."""
        keys = [k for k, v in update.items() if v.is_floating_point()]
        for key, delta in clip_delta(self._global, update, keys, self._dp.clip_norm).items():
            self._sum[key] = self._sum[key] + delta if key in self._sum else delta

    def result(self) -> State:
        """Global state + (clipped sum + noise) / m on the uploaded floating tensors.

        Integer tensors and tensors nobody uploaded keep the global value.
        """
        gen = torch_generator(self._seed, "dp-noise", self._round)
        std = self._dp.noise_multiplier * self._dp.clip_norm
        out = dict(self._global)
        for key in sorted(self._sum):  # a fixed order: the same draws for the same key each run
            total = self._sum[key]
            noise = torch.randn(total.shape, generator=gen, dtype=torch.float64)
            noise = noise.to(total.device) * std
            ref = self._global[key]
            out[key] = (ref.double() + (total + noise) / self._dp.sample_size).to(ref.dtype)
        return out
