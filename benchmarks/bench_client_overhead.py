"""bench-client-overhead: the batched executor's framework cost per client at 1000 clients.

Workload (c') of bench-scale (1000 iid FMNIST clients, all of them every round, E=1, B=20,
FedAvg) with a tiny linear model in place of the ConvNet, so that a round's time is the
framework's per-client work (grids, results, checks, the fold) rather than training. Two
systems in one run, rounds alternating between them: the updates checked and folded once per
(K, ...) stack (``Coordinator.submit_stacked``, the default since issue 22), and one client at a
time (``Coordinator.submit`` per client: what every batched round did before). Both runs reach
the same global state bit for bit (checked).

    make bench-client-overhead        (ROUNDS, default 5, timed rounds per system)
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from common import RESULTS, save, set_threads
from scale_workloads import many_clients_config
from torch import nn

from pflkit.sdk.models import Shape, SplitModel
from pflkit.sdk.run_config import ExecutionConfig, ModelConfig
from pflkit.server.executors import FitBatch
from pflkit.server.simulator import Simulation

ROUNDS = int(os.environ.get("ROUNDS", "5"))
CLIENTS = 1000


def linear(shape: Shape, num_classes: int) -> SplitModel:
    """784 -> 4 -> classes: training costs next to nothing, the framework is what is timed."""
    c, h, w = shape
    return SplitModel(nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, 4)),
                      nn.Linear(4, num_classes), 4)


def simulation(workdir: Path, name: str) -> Simulation:
    config = many_clients_config(ExecutionConfig(executor="batched"))
    config = replace(config, data=replace(config.data, resize=8),  # 64 inputs, not 784
                     model=ModelConfig("bench_client_overhead:linear"))
    sim = Simulation(config, workdir / name, progress=False)
    if name == "one-by-one":  # the batched fit, its updates not stacked: submitted one by one
        fit = sim.executor.fit_stacked
        sim.executor.fit_stacked = lambda g, tasks: FitBatch(fit(g, tasks).results)  # type: ignore[method-assign]
    sim.run_round()  # warm-up
    return sim


def main() -> None:
    threads = set_threads()
    workdir = Path(tempfile.mkdtemp(prefix="client-overhead-"))
    sims = {name: simulation(workdir, name) for name in ("one-by-one", "stacked")}
    seconds: dict[str, list[float]] = {name: [] for name in sims}
    for _ in range(ROUNDS):
        for name, sim in sims.items():
            started = time.perf_counter()
            sim.run_round()
            seconds[name].append(time.perf_counter() - started)
    states = [sim.coordinator.global_state for sim in sims.values()]
    if not all(torch.equal(states[0][k], states[1][k]) for k in states[0]):
        raise SystemExit("the two folds disagree: not the same result")
    per_client = {n: 1000 * statistics.median(s) / CLIENTS for n, s in seconds.items()}
    lines = ["| fold of a batched round | s / round (median) | ms per client |", "|---|---|---|"]
    lines += [f"| {name} | {statistics.median(seconds[name]):.3f} | {per_client[name]:.3f} |"
              for name in sims]
    table = "\n".join(lines) + "\n"
    print(table)
    (RESULTS / "client_overhead.md").write_text(
        f"# bench-client-overhead\n\n{CLIENTS} clients a round, {ROUNDS} rounds per system after "
        f"1 warm-up, {threads} torch thread(s), rounds alternating; same global state.\n\n"
        + table)
    save("client_overhead", {"seconds": seconds, "ms_per_client": per_client,
                             "rounds": ROUNDS, "clients": CLIENTS, "threads": threads})
    for sim in sims.values():
        sim.close()


if __name__ == "__main__":
    main()
