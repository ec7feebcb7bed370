"""The local SGD loop every client trainer shares.

Written once so that FedAvg, FedProx, fine-tuning and the baselines differ only in the loss
they pass in. A fresh optimizer per call (momentum does not carry across rounds), batches in
an order fixed by the round's generator. Under :func:`autocast_training` the loss (the
forward pass, :func:`forward_autocast`) runs in bf16 autocast; the backward pass and the SGD
step stay in fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.data.tensors import LabeledTensors

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Set by whoever runs a fit (an executor, the SDK client), read by run_epochs: every trainer
# gets the same precision without each algorithm threading a flag through its loops.
_AUTOCAST: ContextVar[torch.dtype | None] = ContextVar("pflkit_autocast", default=None)


@contextlib.contextmanager
def autocast_training(dtype: torch.dtype | None) -> Iterator[None]:
    """Run the training forward passes in this block under autocast to ``dtype``.

    ``None`` keeps fp32. On CPUs with AVX-512 BF16 / AMX and on GPUs, bf16 convolutions and
    matrix products are faster; results are no longer bit-identical to fp32.
    """
    token = _AUTOCAST.set(dtype)
    try:
        yield
    finally:
        _AUTOCAST.reset(token)


def forward_autocast(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """The block a training loss runs in: autocast to the dtype of :func:`autocast_training`.

    Every training loop enters it around its forward pass (:func:`run_epochs`, the batched
    trainer, methods with their own loops), so a precision reaches every method alike;
    outside :func:`autocast_training` (fp32) it does nothing.
    """
    dtype = _AUTOCAST.get()
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


@dataclass(frozen=True)
class Batch:
    """One mini-batch as a loss sees it, whether one client trains or many train batched.

    ``weight`` (B,) is set by batched training, whose batches are padded: 1/b on the b real
    rows, 0 on padding. None: every row is real and the loss is the plain mean.
    """

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None = None

    def cross_entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of ``logits`` (B, C) over the batch's real rows."""
        if self.weight is None:
            return F.cross_entropy(logits, self.y)
        # -sum_i w_i log p_i[y_i]: nll_loss's value, without its ignore_index masks (under vmap
        # they cost eight more kernels per step, issue 22); at least float32, as autocast runs it
        dtype = torch.promote_types(logits.dtype, torch.float32)
        picked = F.log_softmax(logits, -1, dtype=dtype).gather(-1, self.y.unsqueeze(-1)).squeeze(-1)
        return -(picked * self.weight).sum()


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
) -> torch.Tensor:
    """Minimize ``loss_fn(x, y)`` over ``epochs`` passes; return the mean batch loss.

    The mean is a float64 scalar on the data's device (NaN without a step): reading it waits
    for the device, so executors read a round's losses together (issue 22).
    """
    losses: list[torch.Tensor] = []  # no kernel and no host synchronization per step
    for _ in range(epochs):
        for xb, yb in data.batches(batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            with forward_autocast(xb.device):
                loss = loss_fn(xb, yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
    return mean_loss(losses, data.y.device)


def mean_loss(losses: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The mean of a fit's step losses, kept on the device: a float64 scalar (NaN: no step).

    Loops that read each step's loss (``float(loss)``) waited for the device every step; the
    mean is read once, with the round's other losses (issue 22).
    """
    if not losses:
        return torch.tensor(float("nan"), dtype=torch.float64, device=device)
    # float64 sums in step order (a CPU cumsum adds as a Python loop over floats would)
    return torch.stack(losses).double().cumsum(0)[-1] / len(losses)


def cross_entropy_of(model: nn.Module) -> LossFn:
    """The plain supervised loss of ``model``."""
    return lambda x, y: F.cross_entropy(model(x), y)
