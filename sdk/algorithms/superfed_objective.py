"""SuPerFed's training objective (eq. 4-6) as pure functions, shared by every way it trains.

The per-client loss of one mini-batch on flat weight vectors: W(lambda) mixing, cross-entropy,
the proximal and cosine regularizers with a closed-form backward, and the per-batch lambda
draws. :mod:`pflkit.sdk.algorithms.superfed` trains with it one client at a time or many
clients batched (the regularizer is vmappable), so both run the same maths. The
post-federation objective (w_l alone against a frozen w_f), which a device runs as an
ExecuTorch training program, is :class:`LocalMixtureProgram`: the same mixing and terms on
named parameters (w_l are the program's own, the ones a device updates), with plain autograd.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from pflkit.sdk.algorithms.mixing import mix, mixed_weights
from pflkit.sdk.training import Batch


def cosine(wf: torch.Tensor, wl: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of two flat weight vectors (all parameters concatenated)."""
    return wf @ wl / torch.sqrt((wf @ wf) * (wl @ wl))


@dataclass(frozen=True)
class FlatLayout:
    """Named tensors <-> one flat vector, so the regularizers and SGD run on one tensor each."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, tensors: Mapping[str, torch.Tensor]) -> FlatLayout:
        """Record the names, shapes and sizes of ``tensors`` in their iteration order."""
        return cls(tuple(tensors), tuple(t.shape for t in tensors.values()),
                   tuple(t.numel() for t in tensors.values()))

    def flatten(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """One detached 1-d copy of ``tensors`` (in layout order)."""
        return torch.cat([tensors[n].detach().reshape(-1) for n in self.names])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split ``flat`` into views shaped like the named tensors (differentiable)."""
        return {n: chunk.view(shape)
                for n, shape, chunk in zip(self.names, self.shapes, flat.split(self.sizes),
                                           strict=True)}

    def spread(self, lam: torch.Tensor) -> torch.Tensor:
        """One lambda per tensor (..., n) -> one per element (..., P), one kernel; (..., 1) stays.

        Mixing the flat vectors at once is one lerp and a two-kernel backward; mixing tensor by
        tensor costs six kernels per tensor (issue 22: per-kernel latency bounds a GPU step).
        """
        if lam.shape[-1] == 1:
            return lam  # one lambda for every tensor: it broadcasts
        return torch.cat([lam[..., i:i + 1].expand(*lam.shape[:-1], size)
                          for i, size in enumerate(self.sizes)], dim=-1)

    def layers(self) -> tuple[torch.Tensor, int]:
        """(layer index of every tensor, number of layers); a layer = a parameter-owning module."""
        owners: dict[str, int] = {}
        per_tensor = [owners.setdefault(n.rpartition(".")[0], len(owners)) for n in self.names]
        return torch.tensor(per_tensor), len(owners)


def lambda_sampler(mixing: str, layout: FlatLayout, gen: torch.Generator
                   ) -> Callable[[], torch.Tensor]:
    """Draw lambda ~ U(0, 1) per batch, one value per tensor: shared (MM) or per layer (LM)."""
    if mixing == "model":
        return lambda: torch.rand((), generator=gen).expand(len(layout.names))
    layer, count = layout.layers()
    return lambda: torch.rand(count, generator=gen)[layer]


def lambda_draws(mixing: str, layout: FlatLayout, gen: torch.Generator, steps: int
                 ) -> torch.Tensor:
    """(steps, tensors): :func:`lambda_sampler`'s first ``steps`` draws in one call.

    ``torch.rand`` fills a tensor in order from the generator, so these are the same values as
    ``steps`` calls of the sampler, without ~5 host ops per draw (a batched SuPerFed round of
    870 steps x 5 clients spent 85 ms drawing them one by one on an H100 host, issue 22).
    """
    if mixing == "model":
        return torch.rand(steps, 1, generator=gen).expand(steps, len(layout.names))
    layer, count = layout.layers()
    return torch.rand(steps, count, generator=gen)[:, layer]


def compact_lambda(mixing: str, lam: torch.Tensor) -> torch.Tensor:
    """Draws (..., n) as :func:`superfed_loss` mixes them: model mixing's one value as (..., 1)."""
    return lam[..., :1] if mixing == "model" else lam


def superfed_loss(model: nn.Module, layout: FlatLayout, wf: torch.Tensor, wl: torch.Tensor,
                  wg: torch.Tensor, lam: torch.Tensor, batch: Batch, mu: float, nu: float
                  ) -> torch.Tensor:
    """Eq. 4 on one batch: CE of W(lambda) + mu ||w_f - w_g||^2 + nu cos^2(w_f, w_l).

    ``wf``, ``wl``, ``wg`` are flat (``layout``); ``lam`` holds one lambda per tensor, or one
    for all of them (shape (1,), :func:`compact_lambda`).
    """
    mixed = layout.unflatten(mix(wf, wl, layout.spread(lam)))
    loss = batch.cross_entropy(functional_call(model, mixed, (batch.x,)))  # logits (B, C)
    if mu or nu:
        loss = loss + regularizer(wf, wl, wg, mu, nu)
    return loss


def regularizer(wf: torch.Tensor, wl: torch.Tensor, wg: torch.Tensor, mu: float, nu: float
                ) -> torch.Tensor:
    """Return mu ||w_f - w_g||^2 + nu cos^2(w_f, w_l) of flat vectors (closed-form backward)."""
    return Regularizer.apply(wf, wl, wg, mu, nu)[0]


class Regularizer(torch.autograd.Function):
    """:func:`regularizer` with a closed-form backward, row by row over the last dimension.

    Autograd through the plain expression makes ~18 passes over the weights per batch; the
    closed form (the last terms of eq. 5-6) makes ~10. For small nets such as TwoNN, weight-sized
    work dominates a step, so this is a third of SuPerFed's step time. Forward and backward
    work on one flat vector or on a stack of them (K, P), one client per row; the vmap rule
    (batched clients) therefore runs the stack through the same code instead of letting vmap
    turn each dot product into a batched matrix product (5x slower on CPU).
    """

    @staticmethod
    def forward(wf: torch.Tensor, wl: torch.Tensor, wg: torch.Tensor, mu: float, nu: float
                ) -> tuple[torch.Tensor, ...]:
        """(value, w_f - w_g, cos, |w_f|^2, |w_l|^2, |w_f||w_l|), each per row."""
        gap = wf - wg
        ff, ll = torch.linalg.vecdot(wf, wf), torch.linalg.vecdot(wl, wl)
        norms = torch.sqrt(ff * ll)
        cos = torch.linalg.vecdot(wf, wl) / norms
        value = torch.addcmul(mu * torch.linalg.vecdot(gap, gap), cos, cos, value=nu)
        return value, gap, cos, ff, ll, norms

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]
                      ) -> None:
        """Keep what the backward needs (the intermediates are outputs, as vmap requires)."""
        wf, wl, _, mu, nu = inputs
        _, gap, cos, ff, ll, norms = output
        ctx.mark_non_differentiable(gap, cos, ff, ll, norms)
        ctx.set_materialize_grads(False)  # no zero gradients for the intermediates
        ctx.save_for_backward(wf, wl, gap, cos, ff, ll, norms)
        ctx.mu, ctx.nu = mu, nu

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple[torch.Tensor | None, ...]:
        """d/dw_f = 2 mu (w_f - w_g) + nu dcos^2/dw_f;  d/dw_l = nu dcos^2/dw_l."""
        wf, wl, gap, cos, ff, ll, norms = ctx.saved_tensors
        k = 2 * ctx.nu * cos * grad  # d(nu cos^2)/dcos, times the incoming gradient
        kc = k * cos

        def per_row(scalar: torch.Tensor) -> torch.Tensor:
            return scalar.unsqueeze(-1)  # (K,) -> (K, 1) against (K, P); () -> (1,)

        # dcos/dw_f = w_l / (|w_f||w_l|) - cos w_f / |w_f|^2, and symmetrically for w_l
        across = per_row(k / norms)
        grad_f = torch.addcmul(torch.addcmul(wl * across, wf, per_row(kc / ff), value=-1), gap,
                               per_row(2 * ctx.mu * grad))
        grad_l = torch.addcmul(wf * across, wl, per_row(kc / ll), value=-1)
        return grad_f, grad_l, None, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], wf: torch.Tensor, wl: torch.Tensor,
             wg: torch.Tensor, mu: float, nu: float) -> tuple[tuple[torch.Tensor, ...], int]:
        """Batched clients: stack the rows and run the row-wise forward on them."""
        def rows(t: torch.Tensor, dim: int | None) -> torch.Tensor:
            return t.expand(info.batch_size, -1) if dim is None else t.movedim(dim, 0)

        stacked = Regularizer.apply(rows(wf, in_dims[0]), rows(wl, in_dims[1]),
                                    rows(wg, in_dims[2]) if in_dims[2] is not None else wg,
                                    mu, nu)
        return stacked, 0


class LocalMixtureProgram(nn.Module):
    """The local model ``local.*`` trained inside W(lam) against the frozen ``federated`` model.

    ``forward(image, label, lam) -> (loss, logits)``; ``lam`` holds one value per local tensor.
    """

    def __init__(self, federated: nn.Module, local: nn.Module, nu: float) -> None:
        super().__init__()
        self.federated = federated.requires_grad_(False)
        self.local = local.train()
        self.names = [n for n, _ in local.named_parameters()]
        self.nu = nu

    def forward(self, image: torch.Tensor, label: torch.Tensor, lam: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """CE of W(lam) plus nu cos^2(w_f, w_l) (one cosine over all tensors)."""
        wf, wl = dict(self.federated.named_parameters()), dict(self.local.named_parameters())
        mixed = mixed_weights(wf, wl, self.names, lam)
        logits = functional_call(self.federated, mixed, (image,))  # (B, C)
        loss = F.cross_entropy(logits, label)
        if self.nu:
            flat_f = torch.cat([wf[n].reshape(-1) for n in self.names])
            flat_l = torch.cat([wl[n].reshape(-1) for n in self.names])
            loss = loss + self.nu * cosine(flat_f, flat_l) ** 2
        return loss, logits.detach()
