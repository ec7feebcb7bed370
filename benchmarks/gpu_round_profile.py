"""Where a batched round's wall time goes: one profiled round per workload, split by phase.

For each of bench-scale's workloads (scale_workloads.py; WORKLOADS, default "a,b,c'") on the
batched executor: WARMUP rounds, then one round under torch.profiler (CPU, and CUDA where the
device is a GPU). One JSON line per workload:

- ``wall_s``: the last warm-up round (synchronized, no profiler); ``profiled_wall_s`` the
  profiled one; ``phases``: each ``pflkit.<phase>`` range (sdk/phases.py) with its CPU time
  in total, as a share of the profiled round and without its sub-phases (``self_s``), calls,
  and on CUDA the stream's time from its entry to its exit (``gpu_span_s``: CUDA events,
  reliable where graph replays hide kernels from the profiler), the memory allocated and the
  round's peak at entry and the peak at exit (GB); ``covered``: the share of the profiled
  round inside a top-level phase;
- ``launches`` (cudaLaunchKernel / cudaGraphLaunch ... counts), ``cuda_api`` (every CUDA runtime
  call: count, ms; D2H copies and synchronizations show here), ``kernel_s`` (the kernels' time);
- ``top_outside_steps``: the 10 CPU ops with the most self CPU time outside ``pflkit.steps``;
- ``memory``: the round's peak allocated / reserved GB, what is allocated when the round starts,
  the device copy of the data (``data_gb``) and the size of one (K, ...) weight stack.

Knobs: DEVICE (default cuda if present), WARMUP (2), CLIENTS (clients per round), EPOCHS,
CUDA_GRAPHS (1), PFLKIT_THREADS (CPU runs' torch threads, default 1; a GPU run keeps torch's
default, as bench-scale's GPU section does). On the CPU, e.g.:

    cd benchmarks && DEVICE=cpu WORKLOADS="c'" CLIENTS=200 python gpu_round_profile.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from common import set_threads
from scale_workloads import fedavg_config, many_clients_config, superfed_config
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from pflkit.sdk.phases import PREFIX, watching
from pflkit.sdk.run_config import ExecutionConfig, SimConfig
from pflkit.server.simulator import Simulation

CONFIGS = {"a": fedavg_config, "b": superfed_config, "c'": many_clients_config}
WORKLOADS = [w for w in os.environ.get("WORKLOADS", "a,b,c'").split(",") if w]
DEVICE = os.environ.get("DEVICE", "cuda" if torch.cuda.is_available() else "cpu")
WARMUP = int(os.environ.get("WARMUP", "2"))
CLIENTS = int(os.environ["CLIENTS"]) if os.environ.get("CLIENTS") else None
EPOCHS = int(os.environ["EPOCHS"]) if os.environ.get("EPOCHS") else None
GRAPHS = os.environ.get("CUDA_GRAPHS", "1") != "0"
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
            "cudaGraphLaunch", "cuGraphLaunch")
STEPS = PREFIX + "steps"
GB = 2**30


def config_of(workload: str) -> SimConfig:
    """The workload on the batched executor, shrunk by CLIENTS / EPOCHS where they are set."""
    config = CONFIGS[workload](ExecutionConfig(executor="batched", device=DEVICE,
                                               cuda_graphs=GRAPHS))
    training = config.training
    if CLIENTS is not None:  # the clients keep their rows: (c') samples CLIENTS of its 1000
        training = dataclasses.replace(
            training, clients_per_round=min(CLIENTS, config.data.num_clients))
    if EPOCHS is not None:
        training = dataclasses.replace(training, epochs=EPOCHS)
    return config.replace(training=training)


class Marks:
    """At each phase's entry and exit: a CUDA event and the allocator's counters (CUDA only)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.open: list[tuple[str, Any, int, int]] = []
        self.spans: dict[str, list[tuple[Any, Any, int, int, int]]] = defaultdict(list)

    def __call__(self, name: str, entering: bool) -> None:
        if not self.cuda:
            return
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        if entering:
            self.open.append((name, event, torch.cuda.memory_allocated(),
                              torch.cuda.max_memory_allocated()))
            return
        opened, start, allocated, peak = self.open.pop()
        assert opened == name, (opened, name)
        self.spans[name].append((start, event, allocated, peak, torch.cuda.max_memory_allocated()))

    def summary(self) -> dict[str, dict[str, float]]:
        """Per phase: stream time entry -> exit (s); allocated and the round's peak so far at
        its first entry, the peak at its last exit (GB)."""
        torch.cuda.synchronize()
        return {name: {"gpu_span_s": sum(s[0].elapsed_time(s[1]) for s in spans) / 1e3,
                       "mem_in_gb": spans[0][2] / GB, "peak_in_gb": spans[0][3] / GB,
                       "peak_out_gb": spans[-1][4] / GB}
                for name, spans in self.spans.items()}


def sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def timed_round(sim: Simulation) -> float:
    sync()
    started = time.perf_counter()
    sim.run_round()
    sync()
    return time.perf_counter() - started


def enclosing(event: Any) -> Any:
    """The nearest enclosing phase range on the event's thread, or None."""
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith(PREFIX):
        parent = parent.cpu_parent
    return parent


def covered_us(ranges: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(ranges):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def phase_split(events: list[Any]) -> tuple[dict[str, dict[str, float]], float]:
    """Each phase's CPU seconds (total and without sub-phases) and calls; covered microseconds."""
    phases = [e for e in events if e.name.startswith(PREFIX)]
    out: dict[str, dict[str, float]] = {}
    for e in phases:
        row = out.setdefault(e.name[len(PREFIX):], {"cpu_s": 0.0, "self_s": 0.0, "calls": 0})
        row["cpu_s"] += e.cpu_time_total / 1e6
        row["self_s"] += e.cpu_time_total / 1e6
        row["calls"] += 1
    for e in phases:
        parent = enclosing(e)
        if parent is not None:
            out[parent.name[len(PREFIX):]]["self_s"] -= e.cpu_time_total / 1e6
    top = [(e.time_range.start, e.time_range.end) for e in phases if enclosing(e) is None]
    return out, covered_us(top)


def host_ops(events: list[Any]) -> list[list[Any]]:
    """The 10 CPU ops (and phase ranges: their Python) with most self CPU time outside steps.

    Inside means within the steps range's time on any thread (CUDA backward runs on autograd's
    device thread, whose ops have no parent on the main thread).
    """
    steps = [(e.time_range.start, e.time_range.end) for e in events if e.name == STEPS]
    self_us: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for e in events:
        inside = any(a <= e.time_range.start and e.time_range.end <= b for a, b in steps)
        if e.device_type == DeviceType.CPU and e.name != STEPS and not inside:
            self_us[e.name] += e.self_cpu_time_total
            calls[e.name] += 1
    ranked = sorted(self_us, key=self_us.__getitem__, reverse=True)[:10]
    return [[n, round(self_us[n] / 1e3, 2), calls[n]] for n in ranked]


def runtime_calls(events: list[Any]) -> dict[str, list[float]]:
    """CUDA runtime / driver calls on the host: name -> [count, total ms]."""
    out: dict[str, list[float]] = {}
    for e in events:
        if e.device_type == DeviceType.CPU and e.name.startswith("cu"):
            row = out.setdefault(e.name, [0, 0.0])
            row[0] += 1
            row[1] += e.cpu_time_total / 1e3
    return {n: [c, round(ms, 2)] for n, (c, ms) in sorted(out.items(), key=lambda i: -i[1][1])}


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def data_tensors(sim: Simulation) -> Iterable[torch.Tensor]:
    fed = sim.federation
    for part in [fed.test, *(d for c in fed.all_clients.values() for d in (c.train, c.test))]:
        yield from (part.x, part.y)


def profile_workload(workload: str, config: SimConfig, workdir: Path) -> dict[str, Any]:
    """WARMUP rounds, then one profiled round; the JSON line's fields."""
    cuda = DEVICE.startswith("cuda")
    sim = Simulation(config, workdir / workload.replace("'", "p"), progress=False)
    try:
        wall = [timed_round(sim) for _ in range(WARMUP)]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        marks = Marks(cuda)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            at_start = torch.cuda.memory_allocated()
        with profile(activities=activities) as prof, watching(marks):
            profiled = timed_round(sim)
        events = list(prof.events())
        phases, covered = phase_split(events)
        for name, gpu in (marks.summary() if cuda else {}).items():
            phases.setdefault(name, {}).update(gpu)
        for split in phases.values():
            split["share"] = split.get("cpu_s", 0.0) / profiled
        row: dict[str, Any] = {
            "workload": workload, "device": DEVICE, "cuda_graphs": GRAPHS,
            "clients": config.training.clients_per_round, "epochs": config.training.epochs,
            "wall_s": wall[-1] if wall else None, "profiled_wall_s": profiled,
            "covered": covered / 1e6 / profiled,
            "phases": {n: {k: round(v, 4) for k, v in p.items()} for n, p in phases.items()},
            "launches": {n: sum(e.name == n for e in events) for n in LAUNCHES
                         if any(e.name == n for e in events)},
            "kernel_s": sum(e.device_time_total for e in events
                            if e.device_type == DeviceType.CUDA) / 1e6,
            "cuda_api": runtime_calls(events),
            "top_outside_steps": host_ops(events),
        }
        if cuda:
            row["memory"] = {
                "peak_allocated_gb": torch.cuda.max_memory_allocated() / GB,
                "peak_reserved_gb": torch.cuda.max_memory_reserved() / GB,
                "at_round_start_gb": at_start / GB,
                "data_gb": tensor_bytes(data_tensors(sim)) / GB,
                # one (K, ...) copy of the clients' weights (a stack, its gradients, momenta)
                "weight_stack_gb": tensor_bytes(sim.coordinator.global_state.values())
                * len(sim.coordinator.sample(0)) / GB,
            }
        return row
    finally:
        sim.close()


def main() -> int:
    """One JSON line per workload; a failed one says why, the others still run (exit 1)."""
    if DEVICE == "cpu":
        set_threads()
    workdir = Path(tempfile.mkdtemp(prefix="round-profile-"))
    failed = 0
    for workload in WORKLOADS:
        try:
            row = profile_workload(workload, config_of(workload), workdir)
        except Exception as error:  # noqa: BLE001 - one workload's failure must not lose the rest
            failed, row = 1, {"workload": workload, "failed": f"{type(error).__name__}: {error}"}
            traceback.print_exc()
        print(json.dumps(row), flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
