"""The train method's graph, shaped for ExecuTorch's portable CPU kernels.

A training program's ``train`` method runs on the portable kernels (the XNNPACK delegate
cannot hold weights that change). In executorch 1.5.1 one of them is wrong and two are slow:

* ``max_pool2d_with_indices_backward`` adds into its output buffer without zeroing it first, so
  the gradient of every layer before a max pool is garbage plus the true one (and grows with
  each call); it is lowered as PyTorch's own decomposition, a scatter of zeros and a
  ``scatter_add``.
* ``addmm`` (every ``nn.Linear``) and ``convolution`` / ``convolution_backward`` are scalar
  reference loops, while ``mm`` is the optimized (BLAS) kernel. Measured on one thread, batch
  16: TwoCNN's 3136 -> 512 linear took 357-391 ms in ``addmm`` and 4.3 ms as ``mm``; its
  32 -> 64 5x5 convolution 1215 ms forward (16 ms in eager PyTorch). So ``addmm`` is lowered
  as ``mm`` plus the bias, and each ``nn.Conv2d`` of the program as im2col (zero padding and
  ``kh * kw`` strided slices) and one ``mm``, whose backward autograd writes as ``mm`` and
  slices too. On an FMNIST client the SuPerFed TwoCNN program went from 0.59 to 5.2 steps
  per second (eager PyTorch: 36.8; docs/on-device.md).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

aten = torch.ops.aten
WRONG_KERNELS = (aten.max_pool2d_with_indices_backward.default,)
SLOW_KERNELS = (aten.addmm.default,)


def joint_decompositions() -> dict[Any, Any]:
    """Decompositions applied to the joint forward + backward graph before lowering."""
    from torch._decomp import get_decompositions

    return get_decompositions([*WRONG_KERNELS, *SLOW_KERNELS])


def _zero_pad(x: torch.Tensor, ph: int, pw: int) -> torch.Tensor:
    """Zeros around H and W by concatenation (``constant_pad_nd`` cannot trace a dynamic batch)."""
    n, c, h, w = x.shape
    if pw:
        side = x.new_zeros(n, c, h, pw)
        x = torch.cat([side, x, side], 3)
    if ph:
        band = x.new_zeros(n, c, ph, w + 2 * pw)
        x = torch.cat([band, x, band], 2)
    return x


def conv2d_as_matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     stride: tuple[int, ...], padding: tuple[int, ...],
                     dilation: tuple[int, ...]) -> torch.Tensor:
    """``F.conv2d`` (one group) as im2col and one matrix product."""
    n, c, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    x = _zero_pad(x, ph, pw)
    cols = torch.stack([x[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                          j * dw:j * dw + sw * (wo - 1) + 1:sw]
                        for i in range(kh) for j in range(kw)], 2)  # (N, C, kh*kw, Ho, Wo)
    cols = cols.permute(0, 3, 4, 1, 2).reshape(n * ho * wo, c * kh * kw)
    out = torch.mm(cols, weight.reshape(out_channels, c * kh * kw).t())  # (N*Ho*Wo, C_out)
    # NCHW in memory again: the portable kernels refuse inputs of mixed dim orders
    out = out.reshape(n, ho, wo, out_channels).permute(0, 3, 1, 2).contiguous()
    return out if bias is None else out + bias.reshape(1, out_channels, 1, 1)


class Conv2dAsMatmul(nn.Conv2d):
    """An ``nn.Conv2d`` (same parameters and names) computed by :func:`conv2d_as_matmul`."""

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002
                      bias: torch.Tensor | None) -> torch.Tensor:
        return conv2d_as_matmul(input, weight, bias, self.stride, self.padding,  # type: ignore[arg-type]
                                self.dilation)


def convolutions_as_matmul(module: nn.Module) -> nn.Module:
    """Turn every plain ``nn.Conv2d`` of ``module`` (in place) into a :class:`Conv2dAsMatmul`.

    Grouped, non-zero-padded and ``padding="same"`` convolutions keep the portable kernel.
    """
    for conv in module.modules():
        if (type(conv) is nn.Conv2d and conv.groups == 1 and conv.padding_mode == "zeros"
                and not isinstance(conv.padding, str)):
            conv.__class__ = Conv2dAsMatmul
    return module
