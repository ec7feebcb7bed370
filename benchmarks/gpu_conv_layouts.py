"""The FedRoD ConvNet's batched forward written by hand, one layout per kernel path (issue 22).

vmap turns a convolution with per-client weights into one cuDNN grouped convolution, moving the
client dimension into the channels before each convolution and back after it. These forwards
take the stacked parameters ((K, ...) per name, the names of
:func:`pflkit.sdk.models.fedrod_convnet`) and the rows (K, B, 1, 28, 28) and return the logits
(K, B, C), so gpu_conv_probe.py can time each path against vmap's:

- ``grouped``: the clients stay in the channels from the first convolution to the flatten
  (B, K*C, H, W), so no layout copy runs between the layers;
- ``bmm``: each convolution as im2col (unfold) and one batched GEMM per layer
  (K, B*L, C*k*k) @ (K, C*k*k, O), which TF32 can run on tensor cores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

Params = dict[str, torch.Tensor]
CONVS = ("body.0", "body.3")


def linear(h: torch.Tensor, p: Params, name: str) -> torch.Tensor:
    """(K, B, F) @ each client's (O, F) weight, plus its bias."""
    return torch.baddbmm(p[f"{name}.bias"].unsqueeze(1), h, p[f"{name}.weight"].transpose(1, 2))


def grouped(p: Params, x: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
    k, b = x.shape[:2]
    h = x.transpose(0, 1).reshape(b, k * x.shape[2], *x.shape[3:])
    if channels_last:
        h = h.contiguous(memory_format=torch.channels_last)
    for name in CONVS:
        w = p[f"{name}.weight"]
        h = F.conv2d(h, w.reshape(-1, *w.shape[2:]), p[f"{name}.bias"].reshape(-1), groups=k)
        h = F.max_pool2d(F.relu(h), 2)
    h = h.reshape(b, k, -1).transpose(0, 1)  # (K, B, O*h*w), each client's flatten order
    return linear(F.relu(linear(h, p, "body.7")), p, "head")


def bmm_conv(h: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """(K, B, C, H, W) -> (K, B, O, H', W') for a valid stride-1 convolution per client."""
    k, b, c, height, width = h.shape
    o, size = w.shape[1], w.shape[-1]
    side_h, side_w = height - size + 1, width - size + 1
    cols = F.unfold(h.reshape(k * b, c, height, width), size)  # (K B, C k k, L)
    cols = cols.view(k, b, c * size * size, -1).transpose(2, 3).reshape(k, -1, c * size * size)
    out = torch.baddbmm(bias.unsqueeze(1), cols, w.reshape(k, o, -1).transpose(1, 2))
    return out.view(k, b, side_h, side_w, o).permute(0, 1, 4, 2, 3)  # (K, B, O, H', W')


def bmm(p: Params, x: torch.Tensor) -> torch.Tensor:
    h = x
    for name in CONVS:
        h = F.relu(bmm_conv(h, p[f"{name}.weight"], p[f"{name}.bias"]))
        k, b = h.shape[:2]
        pooled = F.max_pool2d(h.reshape(k * b, *h.shape[2:]), 2)
        h = pooled.view(k, b, *pooled.shape[1:])
    h = h.reshape(*h.shape[:2], -1)
    return linear(F.relu(linear(h, p, "body.7")), p, "head")
