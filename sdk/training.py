"""The local SGD loop every client trainer shares.

Written once so that FedAvg, FedProx, fine-tuning and the baselines differ only in the loss
they pass in. A fresh optimizer per call (momentum does not carry across rounds), batches in
an order fixed by the round's generator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.data.tensors import LabeledTensors

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def sgd(params: Iterable[torch.Tensor], lr: float, momentum: float, weight_decay: float
        ) -> torch.optim.SGD:
    """The SGD optimizer all trainers use (one place to change it)."""
    return torch.optim.SGD(list(params), lr=lr, momentum=momentum, weight_decay=weight_decay)


def run_epochs(
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    data: LabeledTensors,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
) -> float:
    """Minimize ``loss_fn(x, y)`` over ``epochs`` passes; return the mean batch loss."""
    total, steps = 0.0, 0
    for _ in range(epochs):
        for xb, yb in data.batches(batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(xb, yb)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            steps += 1
    return total / steps if steps else float("nan")


def cross_entropy_of(model: nn.Module) -> LossFn:
    """The plain supervised loss of ``model``."""
    return lambda x, y: F.cross_entropy(model(x), y)
