"""Convolutions as one matrix multiply over strided patches, for the batched step (issue 22).

vmap turns a convolution with per-client weights into one cuDNN grouped convolution (one group a
client). At the batched executor's shapes cuDNN runs those with slow kernels: the FedRoD
ConvNet's second convolution took most of an H100 step of 20 clients x 40 rows (implicit GEMM
without tensor cores), the first one depthwise kernels (one input channel a group). Written as
patches (two ``Tensor.unfold`` views, copied once into rows) times the weight, each convolution
is one batched matrix multiply across the clients, which vmap batches like any other matmul and
TF32 runs on tensor cores; its input's gradient folds the patches' gradients back
(``unfold``'s backward), and a convolution of the data needs none.

The result is the same convolution up to float rounding (another summation order).
:func:`gemm_convolutions` enables it for a block (the batched executor's steps, when
``execution.conv_gemm``); :func:`rewritten` applies it to the block's ``conv2d`` calls.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from pflkit.sdk.switches import Switch

GEMM_CONVOLUTIONS = Switch("conv_gemm")


def _pair(value: int | tuple[int, ...] | list[int]) -> tuple[int, int] | None:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    return pair if len(pair) == 2 else None  # type: ignore[return-value]


def conv2d_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                groups: int = 1) -> torch.Tensor | None:
    """``F.conv2d`` of (N, C, H, W) rows as patches @ weight; None where it does not apply.

    Applies to ungrouped, undilated convolutions with numeric (or "valid") padding; the output
    has (N, O, H', W') shape in channels-last memory (the GEMM's row order), which the layers
    after a convolution (ReLU, pooling, flatten) read as they are.
    """
    padding = (0, 0) if padding == "valid" else padding
    if groups != 1 or isinstance(padding, str) or x.dim() != 4 or weight.dim() != 4:
        return None
    strides, pads, dilations = _pair(stride), _pair(padding), _pair(dilation)
    if strides is None or pads is None or dilations != (1, 1):
        return None
    if pads != (0, 0):
        x = F.pad(x, (pads[1], pads[1], pads[0], pads[0]))
    out_channels, _, kh, kw = weight.shape
    patches = x.unfold(2, kh, strides[0]).unfold(3, kw, strides[1])  # (N, C, H', W', kh, kw)
    n, _, height, width = patches.shape[:4]
    rows = patches.permute(0, 2, 3, 1, 4, 5).reshape(n * height * width, -1)
    flat = weight.reshape(out_channels, -1).t()
    out = rows @ flat if bias is None else torch.addmm(bias, rows, flat)
    return out.view(n, height, width, out_channels).permute(0, 3, 1, 2)


class _GemmMode(TorchFunctionMode):
    """Route ``conv2d`` calls that :func:`conv2d_gemm` covers through it."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.conv2d:
            out = conv2d_gemm(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


gemm_convolutions = GEMM_CONVOLUTIONS.turned  # rewritten() blocks within run GEMMs


def rewritten() -> contextlib.AbstractContextManager[Any]:
    """Within :func:`gemm_convolutions` (enabled): convolutions as GEMMs; else nothing."""
    return _GemmMode() if GEMM_CONVOLUTIONS.on else contextlib.nullcontext()
