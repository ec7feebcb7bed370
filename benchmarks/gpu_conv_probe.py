"""Where workload (a)'s batched step spends its GPU time: one vmapped ConvNet step, per variant.

K clients x B rows of FMNIST-shaped input through the FedRoD ConvNet, forward and backward
under vmap (what :func:`pflkit.sdk.batched_training.train_together` runs), timed per step
(CUDA-synchronized mean of STEPS after warm-up) for: fp32, TF32, bf16 autocast, channels-last
input, and the same fp32 step replayed as a CUDA graph. It tells which kernel option can bring
(a) under issue 22's 0.15 s/round (run by tests/gpu_check.sh; prints one JSON line).
"""

from __future__ import annotations

import contextlib
import json
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from pflkit.sdk.models import fedrod_convnet

K, B, STEPS = 20, 40, 50


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
    try:
        result["fp32_graph_ms"] = probe(captured(step))
    except Exception as error:  # noqa: BLE001 - the capture itself failed: say so
        result["fp32_graph_ms"] = f"capture failed: {type(error).__name__}: {error}"[:200]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
