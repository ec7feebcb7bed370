"""Replay batched training's steps as CUDA graphs: launch a step's hundreds of kernels at once.

A batched step of small models is bound by the CPU launching its kernels (issue 22: SuPerFed's
TwoNN step kept an H100 busy 4.9% of the time). Within a round, the steps between two changes of
the active clients have the same shapes and read every changing input (the step number) from
device memory, so one step is captured into a CUDA graph and replayed for the others. The first
step of each such segment runs eagerly on a side stream (it warms cuDNN/cuBLAS and the caching
allocator outside the capture, as PyTorch's whole-network capture asks); the capture itself runs
nothing, so the segment's remaining steps are exactly the graph's replays.

Off the GPU, or when the executor turns it off (``execution.cuda_graphs = false``), every step
runs eagerly: the same function, the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from pflkit.sdk.switches import Switch

# The fewest steps with the same shapes worth a capture (a capture costs about two eager steps)
MIN_SEGMENT = 4

CUDA_GRAPHS = Switch("cuda_graphs")


class CaptureError(RuntimeError):
    """A step that cannot be recorded (it syncs with the host or allocates host memory)."""


cuda_graphs = CUDA_GRAPHS.turned  # capture and replay CUDA steps within the block


def segments(actives: Sequence[int]) -> list[tuple[int, int]]:
    """(active clients, steps) for each run of equal counts, in order."""
    runs: list[tuple[int, int]] = []
    for active in actives:
        if runs and runs[-1][0] == active:
            runs[-1] = (active, runs[-1][1] + 1)
        else:
            runs.append((active, 1))
    return runs


def run_steps(step: Callable[[int], None], actives: Sequence[int], device: torch.device) -> None:
    """Call ``step(actives[t])`` for every step t, replaying captured graphs where it pays.

    ``step`` must read everything that changes between steps from device tensors it updates
    itself (the step number), never from Python values, and must not synchronize with the host.
    """
    capture = CUDA_GRAPHS.on and device.type == "cuda"
    pool = None
    graphs = []  # alive until the last replay: the pool they share lives as long as one does
    for active, count in segments(actives):
        if not capture or count < MIN_SEGMENT:
            for _ in range(count):
                step(active)
            continue
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            step(active)  # a real step, outside the capture
        torch.cuda.current_stream(device).wait_stream(side)
        pool = torch.cuda.graph_pool_handle() if pool is None else pool
        graphs.append(torch.cuda.CUDAGraph())
        try:
            # thread_local: runs side by side in other threads (their own streams) go on
            # allocating and launching while this thread records its stream
            with torch.cuda.graph(graphs[-1], pool=pool, capture_error_mode="thread_local"):
                step(active)  # recorded, not run
        except RuntimeError as error:  # e.g. a loss that reads a value on the host
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
            raise CaptureError(f"a batched step could not be captured as a CUDA graph "
                               f"({first}); set execution.cuda_graphs = false to run the steps "
                               "eagerly") from error
        for _ in range(count - 1):
            graphs[-1].replay()
