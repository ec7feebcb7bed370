"""Where the batched ConvNet step spends its GPU time: one step, per kernel option and layout.

CLIENTS x BATCH rows (environment; default 20 x 40, workload (a)) of FMNIST-shaped input
through the FedRoD ConvNet (MODEL=twocnn: the TwoCNN; VARIANTS=a,b: only those), forward and
backward, timed per step (CUDA-synchronized mean of STEPS after warm-up): vmap's step (what
:func:`pflkit.sdk.batched_training.train_together` runs) in fp32, TF32, bf16 autocast,
channels-last, with cuDNN's autotuner (``cudnn.benchmark``), and the hand-written layouts of
gpu_conv_layouts.py (grouped convolutions without layout copies; im2col + batched GEMM), vmap's
step with ``execution.conv_gemm``'s patch GEMMs (sdk/conv_gemm.py), each also replayed as a
CUDA graph (and, when VARIANTS names them, the vmapped loss through ``torch.compile``:
``compiled_graph``, ``compiled_tf32_graph``, ``gemm_compiled_tf32_graph``); plus the heaviest
kernels of four of them. It tells which kernel path can bring (a)
under issue 22's 0.15 s/round (tests/gpu_check.sh runs it; it prints one JSON line).
"""

from __future__ import annotations

import contextlib
import json
import os
import time

import gpu_conv_layouts as layouts
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from pflkit.sdk.conv_gemm import gemm_convolutions, rewritten
from pflkit.sdk.models import fedrod_convnet, two_cnn

K, B = int(os.environ.get("CLIENTS", "20")), int(os.environ.get("BATCH", "40"))
STEPS = int(os.environ.get("STEPS", "50"))
MODEL = os.environ.get("MODEL", "fedrod_convnet")  # or twocnn (bench-baselines' TwoCNN)
ONLY = [v for v in os.environ.get("VARIANTS", "").split(",") if v]  # default: every variant


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


def flags(tf32: bool = False, benchmark: bool = False) -> None:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = benchmark


def top_kernels(step, count: int = 8) -> list[list]:  # noqa: ANN001
    """The ``count`` kernels with the most CUDA time over 10 steps: [name, ms per step]."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:count]
    return [[e.key[:70], round(e.device_time_total / 1e4, 3)] for e in events]


def main() -> None:
    device = torch.device("cuda")
    model = {"fedrod_convnet": fedrod_convnet, "twocnn": two_cnn}[MODEL]((1, 28, 28), 10).to(device)
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

    def by_hand(forward):  # noqa: ANN001, ANN202 - a step through a hand-written layout
        def step() -> None:
            logits = forward(params, x)
            loss = F.cross_entropy(logits.reshape(K * B, -1), y.reshape(-1), reduction="none")
            torch.autograd.grad(loss.view(K, B).mean(1).sum(), list(params.values()))
        return step

    def gemm() -> None:  # what the batched executor runs with execution.conv_gemm
        with gemm_convolutions(True), rewritten():
            step()

    def compiled(patches: bool):  # noqa: ANN202 - the vmapped loss through torch.compile
        def loss(p, xb, yb):  # noqa: ANN001, ANN202
            with gemm_convolutions(patches), rewritten():
                return losses(p, xb, yb)
        fused = torch.compile(loss)  # inductor fuses the elementwise and pooling kernels

        def step() -> None:
            torch.autograd.grad(fused(params, x, y).sum(), list(params.values()))
        return step

    grouped, bmm = by_hand(layouts.grouped), by_hand(layouts.bmm)
    grouped_last = by_hand(lambda p, xb: layouts.grouped(p, xb, channels_last=True))
    last = x.view(K * B, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    # name -> (step, tf32, cudnn.benchmark, captured)
    variants = {
        "fp32": (step, False, False, False), "tf32": (step, True, False, False),
        "bf16": (lambda: step(dtype=torch.bfloat16), False, False, False),
        "channels_last": (lambda: step(last.view(K, B, 1, 28, 28)), False, False, False),
        "fp32_graph": (step, False, False, True), "cudnn_benchmark": (step, False, True, False),
        "cudnn_benchmark_graph": (step, False, True, True),
        "tf32_benchmark_graph": (step, True, True, True),
        "grouped": (grouped, False, False, False), "grouped_graph": (grouped, False, False, True),
        "grouped_benchmark_graph": (grouped, False, True, True),
        "grouped_last_benchmark": (grouped_last, False, True, False),
        "grouped_tf32_benchmark_graph": (grouped, True, True, True),
        "bmm": (bmm, False, False, False), "bmm_tf32": (bmm, True, False, False),
        "bmm_graph": (bmm, False, False, True), "bmm_tf32_graph": (bmm, True, False, True),
        "gemm": (gemm, False, False, False), "gemm_graph": (gemm, False, False, True),
        "gemm_tf32_graph": (gemm, True, False, True),
    }
    # compiling takes a minute or more each: only when VARIANTS names them
    opt_in = {"compiled_graph": (compiled(False), False, False, True),
              "compiled_tf32_graph": (compiled(False), True, False, True),
              "gemm_compiled_tf32_graph": (compiled(True), True, False, True)}
    variants |= {n: v for n, v in opt_in.items() if n in ONLY}
    if MODEL != "fedrod_convnet":  # the hand-written layouts are the FedRoD ConvNet's
        variants = {n: v for n, v in variants.items() if not n.startswith(("grouped", "bmm"))}
    variants = {n: v for n, v in variants.items() if not ONLY or n in ONLY}
    result = {"model": MODEL, "clients": K, "batch": B, "device": torch.cuda.get_device_name(0)}
    for name, (run, tf32, benchmark, capture) in variants.items():
        flags(tf32, benchmark)
        try:
            result[f"{name}_ms"] = probe(captured(run) if capture else run)
        except Exception as error:  # noqa: BLE001 - the capture itself failed: say so
            result[f"{name}_ms"] = f"capture failed: {type(error).__name__}: {error}"[:200]
    flags()
    result["fp32_top_kernels"] = top_kernels(step)
    if MODEL == "fedrod_convnet" and not ONLY:
        result["grouped_top_kernels"] = top_kernels(grouped)
        result["bmm_top_kernels"] = top_kernels(bmm)
    result["gemm_top_kernels"] = top_kernels(gemm)
    flags(tf32=True)
    result["gemm_tf32_top_kernels"] = top_kernels(gemm)
    flags()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
