"""Where the batched ConvNet step spends its GPU time: one vmapped step, per kernel option.

CLIENTS x BATCH rows (environment; default 20 x 40, workload (a)) of FMNIST-shaped input through
the FedRoD ConvNet, forward and backward under vmap (what
:func:`pflkit.sdk.batched_training.train_together` runs), timed per step (CUDA-synchronized mean
of STEPS after warm-up) for: fp32, TF32, bf16 autocast, channels-last input, the convolutions
written as unfold + matmul (fp32 and TF32), and the fp32 step replayed as a CUDA graph. It tells
which kernel option can bring (a) under issue 22's 0.15 s/round (tests/gpu_check.sh runs it;
it prints one JSON line).
"""

from __future__ import annotations

import contextlib
import json
import os
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from pflkit.sdk.models import fedrod_convnet

K, B = int(os.environ.get("CLIENTS", "20")), int(os.environ.get("BATCH", "40"))
STEPS = int(os.environ.get("STEPS", "50"))


def probe(step, steps: int = STEPS) -> float | str:  # noqa: ANN001 - a no-argument callable
    try:
        return _time(step, steps)
    except Exception as error:  # noqa: BLE001 - one variant's failure must not lose the others
        return f"failed: {type(error).__name__}: {error}"[:200]


def _time(step, steps: int) -> float:  # noqa: ANN001
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps * 1e3  # ms


def captured(step):  # noqa: ANN001, ANN201
    """``step`` recorded once as a CUDA graph; its replay."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def conv_as_matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A valid stride-1 convolution as unfold + matmul (under vmap: one batched GEMM)."""
    out, _, k, _ = weight.shape
    cols = F.unfold(x, k)  # (B, C k k, L)
    side = x.shape[-1] - k + 1
    return (weight.reshape(out, -1) @ cols + bias[:, None]).view(x.shape[0], out, side, side)


def convnet_as_matmuls(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The FedRoD ConvNet's forward with its convolutions as matmuls."""
    h = F.max_pool2d(F.relu(conv_as_matmul(x, p["body.0.weight"], p["body.0.bias"])), 2)
    h = F.max_pool2d(F.relu(conv_as_matmul(h, p["body.3.weight"], p["body.3.bias"])), 2)
    h = F.relu(F.linear(h.flatten(1), p["body.7.weight"], p["body.7.bias"]))
    return F.linear(h, p["head.weight"], p["head.bias"])


def main() -> None:
    device = torch.device("cuda")
    model = fedrod_convnet((1, 28, 28), 10).to(device)
    params = {n: p.detach().unsqueeze(0).repeat(K, *(1,) * p.dim()).requires_grad_()
              for n, p in model.named_parameters()}
    x = torch.randn(K, B, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (K, B), device=device)

    def one(p, xb, yb):  # noqa: ANN001, ANN202
        return F.cross_entropy(functional_call(model, p, (xb,)), yb)

    losses = vmap(one)

    def step(inputs: torch.Tensor = x, dtype: torch.dtype | None = None) -> None:
        cast = torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext()
        with cast:
            total = losses(params, inputs, y).sum()
        torch.autograd.grad(total, list(params.values()))

    result = {"clients": K, "batch": B, "device": torch.cuda.get_device_name(0)}
    result["fp32_ms"] = probe(step)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    result["tf32_ms"] = probe(step)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    result["bf16_ms"] = probe(lambda: step(dtype=torch.bfloat16))
    last = x.view(K * B, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    result["channels_last_ms"] = probe(lambda: step(last.view(K, B, 1, 28, 28)))
    matmul_losses = vmap(lambda p, xb, yb: F.cross_entropy(convnet_as_matmuls(p, xb), yb))

    def matmul_step() -> None:
        torch.autograd.grad(matmul_losses(params, x, y).sum(), list(params.values()))

    result["matmul_fp32_ms"] = probe(matmul_step)
    torch.backends.cuda.matmul.allow_tf32 = True
    result["matmul_tf32_ms"] = probe(matmul_step)
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        result["fp32_graph_ms"] = probe(captured(step))
    except Exception as error:  # noqa: BLE001 - the capture itself failed: say so
        result["fp32_graph_ms"] = f"capture failed: {type(error).__name__}: {error}"[:200]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
