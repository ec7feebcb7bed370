"""Where a CPU round of workload (b) goes, batched vs sequential (results/scale_cpu_profile.md).

Batching K clients removes per-op costs (Python, dispatch, autograd bookkeeping, vmap) that the
sequential executor pays K times, but the arithmetic stays the same: every client still makes
its matmuls and its passes over the weights. One round of (b) with E = EPOCHS (default 1: the
same steps as E = 10, a tenth of them) per executor, after a warm-up round: the fastest of
REPEATS rounds' wall time, then REPEATS rounds under torch.profiler, the one with the least
wall time kept (the machine is shared), with every op's self time put in one of

- matmul: mm / bmm / addmm (the FLOPs, the same for both);
- weight-sized: ops with an input of at least WEIGHT_SIZED elements per client (TwoNN's
  flat weights are 199,210; its biggest activation, 10 rows x 784, is 7,840): mixing, the
  regularizer, SGD, the gradient's assembly;
- small: the other ops (activations, losses, indexing, the scalars);
- outside ops: wall minus the ops' self time (Python, autograd engine, vmap; the profiler's
  own cost inflates it, so it is shown as a share of the profiled wall).

    cd benchmarks && THREADS=2 ../.venv/bin/python scale_cpu_profile.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import RESULTS
from scale_workloads import superfed_config
from torch.profiler import ProfilerActivity, profile

from pflkit.sdk.run_config import ExecutionConfig
from pflkit.server.simulator import Simulation

EPOCHS = int(os.environ.get("EPOCHS", "1"))
THREADS = int(os.environ.get("THREADS", "2"))
REPEATS = int(os.environ.get("REPEATS", "3"))
WEIGHT_SIZED = 30_000  # elements per client
MATMUL = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}


def category(event: Any, clients: int) -> str:
    """matmul, weight-sized or small (see the module docstring)."""
    if event.key in MATMUL:
        return "matmul"
    sizes = [torch.Size(s).numel() for s in event.input_shapes if isinstance(s, list)]
    return "weight-sized" if max(sizes, default=0) >= WEIGHT_SIZED * clients else "small"


def profile_round(executor: str, workdir: Path) -> dict[str, Any]:
    """Wall time of one round, then the same round's op time by category."""
    config = superfed_config(ExecutionConfig(executor=executor))
    config = dataclasses.replace(config, training=dataclasses.replace(config.training,
                                                                      epochs=EPOCHS))
    sim = Simulation(config, workdir / executor, progress=False)
    sim.run_round()  # warm-up: data, caches, first-step layouts
    walls = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        sim.run_round()
        walls.append(time.perf_counter() - started)
    clients = 1 if executor == "sequential" else config.training.clients_per_round
    profiled, prof = float("inf"), None
    for _ in range(REPEATS):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as this:
            started = time.perf_counter()
            sim.run_round()
            seconds = time.perf_counter() - started
        if seconds < profiled:
            profiled, prof = seconds, this
    sim.close()
    assert prof is not None
    seconds = {"matmul": 0.0, "weight-sized": 0.0, "small": 0.0}
    ops = 0
    for event in prof.key_averages(group_by_input_shape=True):
        if event.key.startswith("aten::"):
            seconds[category(event, clients)] += event.self_cpu_time_total / 1e6
            ops += event.count
    shares = {k: v / profiled for k, v in seconds.items()}
    shares["outside ops"] = 1 - sum(shares.values())
    return {"wall_s": min(walls), "walls_s": walls, "profiled_wall_s": profiled, "aten_ops": ops,
            "op_seconds": seconds, "shares_of_profiled_wall": shares}


def main() -> None:
    torch.set_num_threads(THREADS)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {name: profile_round(name, Path(tmp)) for name in ("sequential", "batched")}
    result = {"epochs": EPOCHS, "threads": THREADS, "repeats": REPEATS, "load_start": load,
              "load_end": os.getloadavg(), "torch": torch.__version__, "rows": rows}
    name = os.environ.get("NAME", f"scale_cpu_profile_t{THREADS}")
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))
    json.dump(result, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
