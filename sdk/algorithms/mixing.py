"""W(lambda) = (1 - lambda) w_f + lambda w_l: blend two endpoints; serve lambda at run time.

SuPerFed's personalized model is a point on the line between the federated model w_f and the
local model w_l. A fixed lambda is baked into one set of weights (:func:`mix_states`); training
mixes named tensors with one lambda each (:func:`mixed_weights`, layer mixing). For
lambda as a model INPUT (:class:`RuntimeMixture`), computing W(lambda) inside the graph makes
every weight a runtime value, and mobile backends (XNNPACK) only accelerate layers whose
weights are constants. Layers that are linear in their parameters (fully connected,
convolution) satisfy f(x; W(lambda)) = (1 - lambda) f(x; w_f) + lambda f(x; w_l) for the SAME
input x, so the runtime graph runs each of them at both endpoints with constant weights and
blends the two outputs; batch norm (eval) blends its per-channel statistics and affine
parameters, a few vectors. The result is W(lambda)'s function exactly (up to float rounding)
at twice the multiply-adds, all of them delegable. A model with any other parameterized layer
falls back to blending the weights in the graph.

A runtime lambda is sanitized in the graph before any use (:func:`sanitize_lambda`): values
outside [0, 1] are clamped to the nearest endpoint (W(lambda) would extrapolate silently) and
NaN becomes the module's ``nan_lambda`` (a NaN would make every logit NaN), so every input
value gives one of the models of the subspace, in every runtime.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _BatchNorm

from pflkit.sdk.algorithms.base import State

LINEAR_IN_PARAMETERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def mix(wf: torch.Tensor, wl: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """W(lambda) = (1 - lambda) w_f + lambda w_l, one fused kernel (exact at lambda = 0 and 1)."""
    return torch.lerp(wf, wl, lam)


def mixed_weights(wf: Mapping[str, torch.Tensor], wl: Mapping[str, torch.Tensor],
                  names: Sequence[str], lam: torch.Tensor) -> dict[str, torch.Tensor]:
    """W(lambda) tensor by tensor: (1 - lam[i]) w_f + lam[i] w_l for the i-th of ``names``."""
    return {n: mix(wf[n], wl[n], lam[i]) for i, n in enumerate(names)}


def sanitize_lambda(lam: torch.Tensor, nan_lambda: float) -> torch.Tensor:
    """Clamp lambda into [0, 1] (+-inf to the endpoints) and replace NaN by ``nan_lambda``."""
    return torch.where(torch.isnan(lam), torch.full_like(lam, nan_lambda), lam).clamp(0.0, 1.0)


def float_buffers(model: nn.Module) -> list[str]:
    """Names of the floating-point buffers (running statistics) that mix like weights."""
    return [n for n, b in model.named_buffers() if b.is_floating_point()]


def mix_states(federated: nn.Module, local: nn.Module, names: list[str], lam: torch.Tensor
               ) -> State:
    """W(lambda) over ``names`` (parameters and float buffers) of two same-shaped modules."""
    wf = dict(federated.named_parameters()) | dict(federated.named_buffers())
    wl = dict(local.named_parameters()) | dict(local.named_buffers())
    return {n: mix(wf[n], wl[n], lam) for n in names}


class _Lambda:
    """The lambda of the forward pass in progress, shared by every two-endpoint layer."""

    value: torch.Tensor | None = None


class TwoEndpointLayer(nn.Module):
    """A layer linear in its parameters, run at both endpoints; the outputs are blended."""

    def __init__(self, federated: nn.Module, local: nn.Module, lam: _Lambda) -> None:
        super().__init__()
        self.federated = federated
        self.local = local
        self._lam = lam

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """f(x; W(lambda)) = lerp(f(x; w_f), f(x; w_l), lambda)."""
        assert self._lam.value is not None, "called outside RuntimeMixture.forward"
        return mix(self.federated(x), self.local(x), self._lam.value)


class TwoEndpointBatchNorm(TwoEndpointLayer):
    """Eval-mode batch norm whose statistics and affine parameters are blended by lambda."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize as x * scale + shift, per-channel vectors taken from W(lambda)."""
        lam, f, loc = self._lam.value, self.federated, self.local
        assert lam is not None, "called outside RuntimeMixture.forward"
        assert isinstance(f, _BatchNorm) and isinstance(loc, _BatchNorm)
        mean = mix(f.running_mean, loc.running_mean, lam)  # type: ignore[arg-type]
        var = mix(f.running_var, loc.running_var, lam)  # type: ignore[arg-type]
        scale = torch.rsqrt(var + f.eps)
        shift = -mean * scale
        if f.affine:
            weight = mix(f.weight, loc.weight, lam)
            scale = scale * weight
            shift = shift * weight + mix(f.bias, loc.bias, lam)
        view = (1, -1) + (1,) * (x.dim() - 2)
        return x * scale.view(view) + shift.view(view)


def _owns_state(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False)) or any(
        b.is_floating_point() for b in module.buffers(recurse=False))


def _two_endpoint_graph(federated: nn.Module, local: nn.Module, lam: _Lambda
                        ) -> nn.Module | None:
    """A copy of ``federated`` whose parameterized layers run at both endpoints, or None."""
    graph = copy.deepcopy(federated)
    local_modules = dict(local.named_modules())
    swaps: list[tuple[str, nn.Module]] = []
    for name, module in federated.named_modules():
        if not _owns_state(module):
            continue
        other = local_modules[name]
        if isinstance(module, LINEAR_IN_PARAMETERS):
            swaps.append((name, TwoEndpointLayer(module, other, lam)))
        elif isinstance(module, _BatchNorm) and module.running_mean is not None:
            swaps.append((name, TwoEndpointBatchNorm(module, other, lam)))
        else:
            return None
    for name, replacement in swaps:
        parent_name, _, child = name.rpartition(".")
        setattr(graph.get_submodule(parent_name) if parent_name else graph, child, replacement)
    return graph


class RuntimeMixture(nn.Module):
    """``forward(x, lam)``: the client's subspace with lambda as an input, float32 of shape (1,).

    Two-endpoint layers where the model allows it (see the module docstring); otherwise both
    endpoints as plain submodules and W(lambda) computed in the graph. ``nan_lambda`` is the
    lambda a NaN input stands for; other inputs are clamped into [0, 1].
    """

    def __init__(self, federated: nn.Module, local: nn.Module, mixed: list[str],
                 nan_lambda: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= nan_lambda <= 1.0:
            raise ValueError(f"nan_lambda must be in [0, 1], got {nan_lambda}")
        self.nan_lambda = float(nan_lambda)
        self._lam = _Lambda()
        federated, local = federated.eval(), local.eval()
        self.network = _two_endpoint_graph(federated, local, self._lam)
        if self.network is None:
            self.federated = federated
            self.local = local
        self.mixed = mixed
        self.eval()

    @property
    def two_endpoint(self) -> bool:
        """Whether every parameterized layer runs at both endpoints with constant weights."""
        return self.network is not None

    def forward(self, x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) of W(lam) for inputs (B, C, H, W); lam: a (1,) tensor (sanitized)."""
        lam = sanitize_lambda(lam, self.nan_lambda)
        if self.network is None:
            return functional_call(self.federated, mix_states(self.federated, self.local,
                                                              self.mixed, lam), (x,))
        self._lam.value = lam
        try:
            return self.network(x)
        finally:
            self._lam.value = None
