"""Gradient plumbing the baselines share: frozen parameters, added gradients, scratch buffers.

Adding a term to a gradient through a tensor hook is cheaper than adding a penalty to the loss
for tiny models (no extra autograd graph per step) and leaves the reported loss the plain
cross-entropy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn


@contextmanager
def frozen(params: Iterable[nn.Parameter]) -> Iterator[None]:
    """Exclude ``params`` from autograd for a block (cheaper backward), then restore them."""
    params = [p for p in params if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


@contextmanager
def added_gradient(model: nn.Module,
                   term: Callable[[str, nn.Parameter], torch.Tensor]) -> Iterator[None]:
    """Inside the block, every parameter's gradient gets ``term(name, param)`` added."""
    hooks = [p.register_hook(lambda g, n=n, p=p: g + term(n, p))
             for n, p in model.named_parameters() if p.requires_grad]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def gradient_term(params: Mapping[str, torch.Tensor],
                  term: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """A loss term of value 0 whose gradient is ``term[name]`` for every tensor of ``params``.

    :func:`added_gradient` for a functional loss (a batched trainer has no module to hook):
    the reported loss stays the plain cross-entropy, the gradient gets the term.
    """
    return sum((term[n].detach() * (p - p.detach())).sum()  # type: ignore[return-value]
               for n, p in params.items())


def scratch_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of ``model``'s buffers, for forward passes that are not its own training steps.

    ``functional_call(model, {**weights, **scratch}, ...)`` in train mode updates the copies in
    place (batch norm's running statistics and ``num_batches_tracked``), not the module's: the
    statistics a client sends are those of the model's own steps only, as FedAvg's are.
    """
    return {n: b.detach().clone() for n, b in model.named_buffers()}
