"""How busy the GPU is while rounds run, as the driver reports it (NVML, through nvidia-smi).

The profiler's kernel events miss most kernels of a CUDA graph replay (its op table summed
277 ms of CUDA time for a (b) round whose kernel events gave 43 ms, results/scale_gpu.md), so
bench-scale's "GPU busy" is read from the driver: ``utilization.gpu``, the share of each sample
period (1/6 s to 1 s, by product) in which a kernel ran, sampled every 100 ms while rounds run
for at least a few seconds. Samples from the first ``SETTLE_S`` are dropped: their period
reaches back before the rounds.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

import torch

QUERY = ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits",
         "-lms", "100"]
STAMP = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi's timestamp field
SETTLE_S = 1.0


def mean_utilization(lines: Iterable[str], start: datetime, end: datetime) -> float | None:
    """The mean busy share (0-1) of the samples stamped between ``start`` + SETTLE_S and
    ``end``; None if there are none (lines that are not samples are skipped)."""
    values = []
    for line in lines:
        stamp, _, value = line.rpartition(",")
        try:
            when, busy = datetime.strptime(stamp.strip(), STAMP), float(value)
        except ValueError:
            continue
        if start + timedelta(seconds=SETTLE_S) <= when <= end:
            values.append(busy / 100)
    return sum(values) / len(values) if values else None


def busy_share(run_round: Callable[[], object], seconds: float, index: int = 0) -> float | None:
    """Run rounds for at least ``seconds`` while nvidia-smi samples GPU ``index``; the mean
    busy share of those rounds, or None where nvidia-smi is missing or gave no sample."""
    if shutil.which("nvidia-smi") is None:
        return None
    with subprocess.Popen([*QUERY, "-i", str(index)], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as sampler:
        start = datetime.now()
        began = time.monotonic()
        try:
            while True:
                run_round()
                torch.cuda.synchronize()
                if time.monotonic() - began >= seconds:
                    break
            end = datetime.now()
        finally:
            sampler.terminate()
        out = sampler.communicate()[0]
    return mean_utilization(out.splitlines(), start, end)
