"""DP-FedAvg's aggregation (McMahan et al. 2018): clip each device's update, noise the sum.

The rule acts on exactly what a device uploads (the method's ``update_schema``): each update's
change to the round's global state, over all its floating tensors at once, is clipped to L2
norm ``C``; the clipped changes are summed, Gaussian noise ``N(0, (z * C)^2)`` is added to every
coordinate of the sum, and the sum is divided by the fixed ``m`` clients of the round, not by
their sample counts (a weight would let one device's contribution exceed ``C / m``). What the
paper leaves open, and what we chose: integer tensors (e.g. BatchNorm's batch counters) carry
no gradient signal and cannot be noised, so they keep the global state's value. The noise is
drawn from (seed, "dp-noise", round) with the seed ``AggregationConfig.hidden_seed`` gives: a
run is reproducible, and on pfl-server it is a secret (devices know the run seed, and could
subtract noise drawn from it: docs/privacy.md). With adaptive clipping
(:mod:`pflkit.sdk.adaptive_clipping`) the round's C comes from a :class:`ClipNorm` that the
aggregator moves after the round; the sum's noise is then ``z_delta * C``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pflkit.sdk.algorithms.aggregators import Aggregator, State
from pflkit.sdk.privacy_accounting import DpRounds
from pflkit.sdk.seeding import torch_generator


@dataclass
class ClipNorm:
    """DP's clip norm, carried from round to round: adaptive clipping moves it after each."""

    value: float


def clip_delta(global_state: State, update: State, keys: list[str],
               max_norm: float) -> tuple[dict[str, torch.Tensor], float]:
    """The update's change on ``keys`` (float64) scaled to L2 norm <= ``max_norm``; its norm."""
    delta = {k: update[k].double() - global_state[k].double() for k in keys}
    norm = math.sqrt(sum(float((d ** 2).sum()) for d in delta.values()))
    if norm > max_norm:
        delta = {k: d * (max_norm / norm) for k, d in delta.items()}
    return delta, norm


class DpFedAvgAggregator(Aggregator):
    """The noisy mean of clipped changes, O(model) memory (a float64 running sum)."""

    def __init__(self, global_state: State, dp: DpRounds, seed: int, round_index: int,
                 clip: ClipNorm | None = None) -> None:
        self._global = global_state
        self._dp = dp
        self._seed = seed
        self._round = round_index
        self._clip = clip or ClipNorm(dp.clip_norm)
        self.clip_norm = self._clip.value  # this round's C
        self._within = 0  # updates whose change had norm <= C (adaptive clipping's count)
        self._sum: dict[str, torch.Tensor] = {}  # the uploaded floating tensors' running sum

    def add(self, weight: float, update: State) -> None:
        """Fold one update's clipped change into the sum (its sample count is not used)."""
        keys = [k for k, v in update.items() if v.is_floating_point()]
        clipped, norm = clip_delta(self._global, update, keys, self.clip_norm)
        self._within += norm <= self.clip_norm
        for key, delta in clipped.items():
            self._sum[key] = self._sum[key] + delta if key in self._sum else delta

    def result(self) -> State:
        """Global state + (clipped sum + noise) / m on the uploaded floating tensors.

        Integer tensors and tensors nobody uploaded keep the global value. With adaptive
        clipping, the :class:`ClipNorm` moves to the next round's C.
        """
        adaptive = self._dp.adaptive
        if adaptive is not None:
            count = torch_generator(self._seed, "dp-clip-count", self._round)
            draw = float(torch.randn((), generator=count, dtype=torch.float64))
            self._clip.value = adaptive.next_clip_norm(self.clip_norm, self._within,
                                                       self._dp.sample_size, draw)
        gen = torch_generator(self._seed, "dp-noise", self._round)
        std = self._dp.sum_noise_multiplier * self.clip_norm
        out = dict(self._global)
        for key in sorted(self._sum):  # a fixed order: the same draws for the same key each run
            total = self._sum[key]
            noise = torch.randn(total.shape, generator=gen, dtype=torch.float64)
            noise = noise.to(total.device) * std
            ref = self._global[key]
            out[key] = (ref.double() + (total + noise) / self._dp.sample_size).to(ref.dtype)
        return out
