"""How a round's client updates become the next global state: streamed, one at a time.

An aggregator keeps O(model) memory whatever the number of clients, so the server and the
simulator fold updates as they arrive (in client-id order) instead of holding them all. A
batched fit's updates arrive as (K, ...) stacks (:meth:`Aggregator.add_stacked`): folding a
stack in a few calls instead of K spares the per-client work (issue 22, 1000 clients a round).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from pflkit.sdk.tensorio import State

__all__ = ["Aggregator", "State", "WeightedMean"]

FOLD_ELEMENTS = 1 << 22  # float64 terms made at once in WeightedMean.add_stacked (32 MB)


class Aggregator(ABC):
    """Folds client updates into the next global state, one update at a time."""

    # True: add_stacked takes stacks on a GPU (its result stays on the CPU, the same bits)
    folds_on_device = False

    @abstractmethod
    def add(self, weight: float, update: State) -> None:
        """Fold in one client's update with aggregation weight ``weight``."""

    def add_stacked(self, weights: Sequence[float], stacks: State) -> None:
        """Fold in ``len(weights)`` updates, row k of every (K, ...) stack with ``weights[k]``.

        The same result as :meth:`add` on each row in order (the default does just that).
        """
        for k, weight in enumerate(weights):
            self.add(weight, {name: stack[k] for name, stack in stacks.items()})

    @abstractmethod
    def result(self) -> State:
        """The next global state."""


class WeightedMean(Aggregator):
    """Streaming n-weighted mean: a running sum in float64, O(model) memory for any count.

    Keys no client sent keep their global value; with no updates the global state is kept.
    Integer buffers (BatchNorm's ``num_batches_tracked``) are averaged and rounded.
    """

    folds_on_device = True

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

    def add_stacked(self, weights: Sequence[float], stacks: State) -> None:
        """:meth:`add` for every row, with the same float64 sums bit for bit.

        Each row's float64 term is added to the running sum in row order, as :meth:`add` does,
        one vectorized add per row (a cumulative sum over the stack gives the same bits but
        wrote every partial sum, strided: 5x slower on the CPU, issue 22). The terms are made
        ``FOLD_ELEMENTS`` at a time.
        """
        if any(w < 0 for w in weights):
            raise ValueError(f"aggregation weight must be >= 0, got {min(weights)}")
        if not weights:
            return
        for key, stack in stacks.items():
            # on a GPU the same float64 products and adds, in the same order, give the same
            # bits, one kernel a row instead of host work a row
            scale = torch.tensor(weights, dtype=torch.float64, device=stack.device)
            acc = self._sum.get(key)
            acc = None if acc is None else acc.to(stack.device)
            span = max(1, FOLD_ELEMENTS // max(1, stack[0].numel()))
            for start in range(0, len(weights), span):
                rows = stack[start : start + span].detach()
                # (span, ...) float64: the product is computed in float64, as add's
                terms = rows * scale[start : start + span].view(-1, *(1,) * (rows.dim() - 1))
                if acc is None:
                    acc, terms = terms[0].clone(), terms[1:]
                for term in terms:
                    acc.add_(term)
            self._sum[key] = acc.cpu()
            total = self._weight.get(key, 0.0)
            for weight in weights:
                total += weight
            self._weight[key] = total

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
