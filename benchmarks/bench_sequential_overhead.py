"""bench-sequential-overhead: the sequential executor's cost per client and per step, on the CPU.

Workload (a) of bench-scale (FedAvg, FMNIST Dir(0.3), 100 clients, 20 a round, B=40) with the
images resized to 8x8 and bench-client-overhead's 64-4-10 linear model, so that a round is the
framework's work rather than training. Two systems, rounds alternating: the simulator with the
sequential executor (``Simulation.run_round``: fits, the fold, the commit) and bench-overhead's
plain PyTorch loop over the same clients and batches. At E=1 and E=5 the difference per round
is split into a part per step (its growth with E) and a part per client (the rest). Times are
the process's CPU time (1 torch thread), so that other jobs on a shared machine count less.

    make bench-sequential-overhead      (ROUNDS, default 5, timed rounds per system and E)
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench_overhead import plain_rounds
from common import set_threads
from scale_workloads import fedavg_config

from pflkit.sdk.run_config import ExecutionConfig, ModelConfig
from pflkit.server.simulator import Simulation

ROUNDS = int(os.environ.get("ROUNDS", "5"))
EPOCHS = (1, 5)


def simulation(workdir: Path, epochs: int) -> Simulation:
    config = fedavg_config(ExecutionConfig(executor="sequential", device="cpu"))
    config = replace(config, data=replace(config.data, resize=8),
                     model=ModelConfig("bench_client_overhead:linear"),
                     training=replace(config.training, epochs=epochs))
    sim = Simulation(config, workdir / f"e{epochs}", progress=False)
    sim.run_round()  # warm-up
    return sim


def steps_per_epoch(sim: Simulation, rounds: int) -> float:
    """Mean SGD steps per epoch in rounds 1..``rounds`` (all clients of a round)."""
    b = sim.config.training.batch_size
    return statistics.mean(sum(-(-len(sim.federation.clients[c].train) // b)
                               for c in sim.coordinator.sample(r)) for r in range(1, rounds + 1))


def main() -> None:
    set_threads()
    workdir = Path(tempfile.mkdtemp(prefix="sequential-overhead-"))
    medians: dict[int, dict[str, float]] = {}
    for epochs in EPOCHS:
        sim = simulation(workdir, epochs)
        seconds: dict[str, list[float]] = {"sequential": [], "plain": []}
        for r in range(1, ROUNDS + 1):  # each round, then the plain loop's same round
            started = time.process_time()
            sim.run_round()
            seconds["sequential"].append(time.process_time() - started)
            started = time.process_time()
            plain_rounds(sim, 1, first=r)
            seconds["plain"].append(time.process_time() - started)
        medians[epochs] = {n: statistics.median(s) for n, s in seconds.items()}
        clients, steps = sim.config.training.clients_per_round, steps_per_epoch(sim, ROUNDS)
        sim.close()
    extra = {e: m["sequential"] - m["plain"] for e, m in medians.items()}
    low, high = EPOCHS
    per_step = (extra[high] - extra[low]) / ((high - low) * steps)
    per_client = (extra[low] - per_step * low * steps) / clients
    lines = ["| E | sequential (CPU s / round) | plain loop (CPU s / round) "
             "| difference (ms / round) |", "|---|---|---|---|"]
    lines += [f"| {e} | {m['sequential']:.3f} | {m['plain']:.3f} | {1000 * extra[e]:.1f} |"
              for e, m in medians.items()]
    print("\n".join(lines))
    print(f"{steps:.0f} steps per epoch and round, {clients} clients: "
          f"{1e6 * per_step:.1f} us per step, {1000 * per_client:.2f} ms per client")


if __name__ == "__main__":
    main()
