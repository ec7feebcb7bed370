"""How a round's client updates become the next global state: streamed, one at a time.

An aggregator keeps O(model) memory whatever the number of clients, so the server and the
simulator fold updates as they arrive (in client-id order) instead of holding them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from pflkit.sdk.tensorio import State

__all__ = ["Aggregator", "State", "WeightedMean"]


class Aggregator(ABC):
    """Folds client updates into the next global state, one update at a time."""

    @abstractmethod
    def add(self, weight: float, update: State) -> None:
        """Fold in one client's update with aggregation weight ``weight``."""

    @abstractmethod
    def result(self) -> State:
        """The next global state."""


class WeightedMean(Aggregator):
    """Streaming n-weighted mean: a running sum in float64, O(model) memory for any count.

    Keys no client sent keep their global value; with no updates the global state is kept.
    Integer buffers (BatchNorm's ``num_batches_tracked``) are averaged and rounded.
    """

    def __init__(self, global_state: State) -> None:
        self._global = global_state
        self._sum: dict[str, torch.Tensor] = {}
        self._weight: dict[str, float] = {}

    def add(self, weight: float, update: State) -> None:
        """Add ``weight * update`` to the running sums."""
        if weight < 0:
            raise ValueError(f"aggregation weight must be >= 0, got {weight}")
        for key, value in update.items():
            acc = self._sum.get(key)
            term = value.detach().to(torch.float64) * weight
            self._sum[key] = term if acc is None else acc.add_(term)
            self._weight[key] = self._weight.get(key, 0.0) + weight

    def result(self) -> State:
        """sum_k n_k u_k / sum_k n_k per key, cast back to the global dtype."""
        out = dict(self._global)
        for key, acc in self._sum.items():
            total = self._weight[key]
            if total <= 0:
                continue
            ref = self._global.get(key, acc)
            mean = acc / total
            out[key] = (mean.round() if not ref.is_floating_point() else mean).to(ref.dtype)
        return out
