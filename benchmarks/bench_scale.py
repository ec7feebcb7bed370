"""bench-scale: seconds per round of every executor, the plain loop and Flower, in one run.

(a) FedAvg, FMNIST Dir(0.3), 100 clients, 20 per round, E=5, B=40, FedRoD ConvNet;
(b) SuPerFed-MM, FMNIST 2 shards per client, 50 clients, TwoNN, 5 per round, E=10, B=10
(definitions: scale_workloads.py). Each system runs WARMUP + ROUNDS rounds of the same run
(same seed, clients, batches); the first WARMUP rounds start workers and fill caches and are
not timed. Seconds per round = mean of the timed rounds; accuracy = the global model's top-1
on the 10k test set after the last timed round (a check that every system did the same work,
not a converged number). Threads: the sequential and batched executors and the plain loop use
both cores (2 torch threads); Ray, Flower and plain-2x1 (the plain loop split over 2 spawned
processes: what 2 x 1 thread can reach, plain_processes.py) run 2 processes x 1 thread, and
sequential-1t one thread (half its round is the best 2 x 1 thread can do on the machine).

End-of-run evaluation: the final per-client evaluation of (a) (100 clients, own-class-weighted
and plain global test, the generic model) after the timed rounds, timed on its own; its share
of a 100-round run is eval / (100 x the best measured seconds per round + eval).

    make bench-scale                 (creates benchmarks/.venv-flower with flwr[simulation])
    ROUNDS=3 WARMUP=1 THREADS=2 SYSTEMS=sequential,ray make bench-scale
    RENDER_ONLY=1 make bench-scale   (rewrite results/scale.md from results/scale.json)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_overhead import plain_rounds
from bench_scale_gpu import gpu_section
from bench_scale_gpu import render as gpu_lines
from common import RESULTS, machine, save, subset
from plain_processes import plain_process_rounds
from scale_targets import cpu_targets, fmt, ratio
from scale_workloads import fedavg_config, superfed_config

from pflkit.sdk.metrics import predict, top_k_accuracy
from pflkit.sdk.run_config import ExecutionConfig, SimConfig
from pflkit.sdk.tensorio import save_state
from pflkit.server.simulator import Simulation

HERE = Path(__file__).resolve().parent
FLOWER_PYTHON = HERE / ".venv-flower" / "bin" / "python"
ROUNDS = int(os.environ.get("ROUNDS", "3"))
WARMUP = int(os.environ.get("WARMUP", "1"))
# torch threads of the in-process systems (sequential, batched, plain loop). 2 = both cores; on
# a machine shared with other jobs, 2-thread OpenMP regions stall whenever one core is taken,
# so THREADS=1 can be the fairer baseline (the table says which was used).
THREADS = int(os.environ.get("THREADS", "2"))

# name -> (ExecutionConfig fields, torch threads in this process)
EXECUTIONS: dict[str, dict[str, Any]] = {
    "sequential": {"executor": "sequential"},
    "sequential-1t": {"executor": "sequential"},  # 1 torch thread: what one process gets
    "batched": {"executor": "batched"},
    "batched-compiled": {"executor": "batched", "compile_loss": True},  # compiles in warm-up
    "ray": {"executor": "ray", "workers": 2, "num_cpus": 1.0},
    "ray-bf16": {"executor": "ray", "workers": 2, "num_cpus": 1.0, "precision": "bf16"},
}
SYSTEMS = [*EXECUTIONS, "plain", "plain-2x1", "flower"]
# Systems run with 1 torch thread whatever THREADS says. 2 x 1-thread processes can at best
# halve sequential-1t's round, so 2 x sequential / sequential-1t bounds how much faster than the
# THREADS-thread sequential executor any 2 x 1-thread executor (Ray, Flower) can be on a machine.
ONE_THREAD = {"sequential-1t"}
# Systems that do the same work end with the same top-1 up to rounding: float32 sums in another
# order or bf16 move it by about 0.1 points; other clients or batches move it by more (Flower
# sampling its own clients: 71.14 vs 73.95).
TOP1_TOLERANCE = 0.003


def accuracy(sim: Simulation, state: dict[str, torch.Tensor]) -> float:
    test = sim.federation.test
    return top_k_accuracy(predict(sim.algorithm.inference.global_model(state), test), test.y, 1)


def time_pflkit(config: SimConfig, name: str, workdir: Path, threads: int
                ) -> tuple[dict[str, Any], Simulation]:
    """WARMUP + ROUNDS rounds of one executor; the simulation stays open for more work."""
    torch.set_num_threads(threads)
    sim = Simulation(config, workdir / name, progress=False)
    seconds = []
    for _ in range(WARMUP + ROUNDS):
        started = time.perf_counter()
        sim.run_round()
        seconds.append(time.perf_counter() - started)
    return timed_row(seconds, accuracy(sim, sim.coordinator.global_state)), sim


def threads_of(system: str) -> int:
    return 1 if system in ONE_THREAD else THREADS


def timed_row(seconds: list[float], top1: float | None) -> dict[str, Any]:
    """A table row from every round's seconds (the WARMUP first ones are not timed)."""
    timed = seconds[WARMUP:]
    return {"seconds": timed, "per_round": sum(timed) / len(timed), "top1": top1}


def time_plain(config: SimConfig, workdir: Path, processes: int = 1) -> dict[str, Any]:
    """bench-overhead's loop on the same clients and batches: here, or in 1-thread processes."""
    torch.set_num_threads(THREADS)
    sim = Simulation(config, workdir / f"plain-{processes}", progress=False)
    seconds, state = plain_rounds(sim, WARMUP + ROUNDS) if processes == 1 else \
        plain_process_rounds(sim, fedavg_config, WARMUP + ROUNDS, processes)
    return timed_row(seconds, accuracy(sim, state))


def flower_plan(config: SimConfig, workdir: Path) -> Path:
    """pflkit's draw for every round and its initial weights, for Flower to train the same."""
    sim = Simulation(config, workdir / "flower-plan", progress=False)
    clients = [sim.coordinator.sample(r) for r in range(WARMUP + ROUNDS)]
    save_state(workdir / "initial.safetensors", sim.coordinator.global_state)
    sim.close()
    (workdir / "plan.json").write_text(json.dumps({"clients": clients}))
    return workdir


def time_flower(config: SimConfig, workdir: Path) -> dict[str, Any]:
    """Flower 1.42's simulation engine (its own venv) on workload (a), 2 workers."""
    if not FLOWER_PYTHON.is_file():
        return {"skipped": "benchmarks/.venv-flower missing (make bench-scale creates it)"}
    out = workdir / "flower.json"
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    subprocess.run([str(FLOWER_PYTHON), str(HERE / "flower_fedavg.py"), str(out),
                    str(flower_plan(config, workdir)), "2"], check=True, env=env, cwd=HERE)
    raw = json.loads(out.read_text())
    return {**timed_row(raw["round_seconds"], raw["top1"]), "flwr": raw["flwr"]}


def top1_check(rows: dict[str, Any]) -> str:
    """One line: every system's top-1 against the first one's, mismatches flagged."""
    done = {k: v["top1"] for k, v in rows.items() if v.get("top1") is not None}
    if not done:
        return "Top-1 check: no system ran."
    ref, value = next(iter(done.items()))
    off = [f"{name} {100 * top1:.2f}" for name, top1 in done.items()
           if abs(top1 - value) > TOP1_TOLERANCE]
    if off:
        return (f"Top-1 check: MISMATCH, not the same work: {', '.join(off)} vs {ref} "
                f"{100 * value:.2f} (tolerance {100 * TOP1_TOLERANCE:.1f} points).")
    return (f"Top-1 check: every system within {100 * TOP1_TOLERANCE:.1f} points of {ref} "
            f"({100 * value:.2f}): the same work.")


def workload_a(systems: list[str], workdir: Path) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    evaluation: dict[str, Any] = {}
    for name in systems:
        if name in ("plain", "plain-2x1"):
            rows[name] = time_plain(fedavg_config(), workdir, 2 if name == "plain-2x1" else 1)
        elif name == "flower":
            rows[name] = time_flower(fedavg_config(), workdir)
        else:
            row, sim = time_pflkit(fedavg_config(ExecutionConfig(**EXECUTIONS[name])),
                                   f"a-{name}", workdir, threads_of(name))
            if name == "sequential":  # the end-of-run evaluation, timed on its own
                started = time.perf_counter()
                final = sim.final_evaluation()
                evaluation = {"seconds": time.perf_counter() - started,
                              "class_weighted_mean":
                                  final["clients"]["summary"]["class_weighted_mean"]}
            sim.close()
            rows[name] = row
        print(f"(a) {name}: {rows[name]}", flush=True)
    print(f"(a) {top1_check(rows)}", flush=True)
    return {"rows": rows, "evaluation": evaluation}


def workload_b(systems: list[str], workdir: Path) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name in systems:
        if name in ("plain", "plain-2x1", "flower") or name.endswith("bf16"):
            continue  # no plain loop or Flower port of SuPerFed; bf16 is a ConvNet question
        row, sim = time_pflkit(superfed_config(ExecutionConfig(**EXECUTIONS[name])),
                               f"b-{name}", workdir, threads_of(name))
        sim.close()
        rows[name] = row
        print(f"(b) {name}: {row}", flush=True)
    print(f"(b) {top1_check(rows)}", flush=True)
    return {"rows": rows}


def best(rows: dict[str, Any]) -> str:
    pflkit = {k: v for k, v in rows.items() if k in EXECUTIONS and "per_round" in v}
    return min(pflkit, key=lambda k: pflkit[k]["per_round"])


def table(title: str, rows: dict[str, Any], baseline: str, rounds: int, warmup: int) -> str:
    lines = [f"### {title}", "",
             f"| system | s / round (mean of {rounds}) | rounds (s) | top-1 after "
             f"{warmup + rounds} rounds | speed-up vs {baseline} |", "|---|---|---|---|---|"]
    for name, row in rows.items():
        if "per_round" not in row:
            lines.append(f"| {name} | not run: {row.get('skipped', '')} | | | |")
            continue
        lines.append(f"| {name} | {row['per_round']:.2f} | "
                     f"{', '.join(f'{s:.1f}' for s in row['seconds'])} | "
                     f"{100 * row['top1']:.2f} | {fmt(ratio(rows, name, baseline), 2, 'x')} |")
    return "\n".join([*lines, "", top1_check(rows)])


def render(result: dict[str, Any]) -> str:
    a, b = result["a"]["rows"], result["b"]["rows"]
    top = best(a) if a else None
    counts = result["rounds"], result["warmup"]
    parts = [
        "# bench-scale",
        "",
        f"Command: `ROUNDS={result['rounds']} WARMUP={result['warmup']} "
        f"THREADS={result.get('threads', THREADS)} make bench-scale` (one "
        "run, every system one after another on the same machine, under the speed lock). "
        f"Sequential, batched and the plain loop: {result.get('threads', THREADS)} torch "
        "thread(s); sequential-1t: 1 thread; Ray, Flower and plain-2x1 (the plain loop in 2 "
        "processes, each round's clients split by rows before it starts: no framework, the "
        "most a 2 x 1-thread executor could reach; plain_processes.py): 2 workers x 1 thread. "
        "Flower "
        f"{a.get('flower', {}).get('flwr', '1.42')} in its own venv (benchmarks/.venv-flower), "
        "plain-PyTorch client, Flower's FedAvg on its Ray backend, training the clients "
        "pflkit's coordinator draws from pflkit's initial weights (flower_fedavg.py).",
        "",
        f"Machine: {result.get('machine', {}).get('cpu', 'not recorded')}, "
        f"{result.get('machine', {}).get('cores', '?')} cores.",
        "",
        table("(a) FedAvg, FMNIST Dir(0.3), 100 clients, 20/round, E=5, B=40, FedRoD ConvNet",
              a, "sequential", *counts),
        "",
        table("(b) SuPerFed-MM, FMNIST 2 shards/client, 50 clients, TwoNN, 5/round, E=10, B=10",
              b, "sequential", *counts),
        "",
        "### Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    parts += cpu_targets(a, b, result["a"]["evaluation"], top)
    if result.get("note"):
        parts += ["", result["note"]]
    load = result.get("load_average")
    if load:
        parts += ["", f"Load average (1, 5, 15 min) of the 2-core machine: "
                  f"{', '.join(f'{v:.1f}' for v in load['start'])} at the start, "
                  f"{', '.join(f'{v:.1f}' for v in load['end'])} at the end (the benchmark's "
                  "own threads count in it). The machine is a VM on a shared host: the same "
                  "round measured again differs by up to ~15%, so ratios near a target are "
                  "within noise of it."]
    parts += ["", "### GPU", "", *gpu_lines(result["gpu"])]
    return "\n".join(parts) + "\n"


def main() -> None:
    if os.environ.get("RENDER_ONLY"):  # rewrite scale.md from the stored results
        result = json.loads((RESULTS / "scale.json").read_text())
        (RESULTS / "scale.md").write_text(render(result))
        return
    systems = subset("SYSTEMS", SYSTEMS)
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    load_before = os.getloadavg()
    # (b) first: (a)'s many step shapes use up torch's recompiles of the compiled batched loss
    b = workload_b(systems, workdir)
    result = {"machine": machine(), "rounds": ROUNDS, "warmup": WARMUP, "threads": THREADS,
              "a": workload_a(systems, workdir), "b": b,
              "gpu": gpu_section(workdir), "python": sys.version.split()[0],
              "load_average": {"start": load_before, "end": os.getloadavg()}}
    text = render(result)
    print(text)
    (RESULTS / "scale.md").write_text(text)
    save("scale", result)


if __name__ == "__main__":
    main()
