"""bench-overhead: simulator wall time vs a hand-written PyTorch FedAvg loop, same run.

Both do the same work: R rounds of FedAvg on Fashion-MNIST (Dir(0.3), 100 clients, 10 per
round, E=1, B=40, TwoNN - a small model, so the framework's overhead is most visible), the same
clients, the same batches in the same order, the same SGD. The simulator additionally writes
client states, metrics and the global checkpoint every round (that is part of its cost).
Evaluation is excluded from both. Repeated alternately; the median ratio is reported.

    make bench-overhead
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import RESULTS, save, set_threads

from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation

ROUNDS = 10
REPEATS = 5


def config() -> SimConfig:
    return SimConfig(
        seed=0, rounds=ROUNDS + 1, eval_interval=10_000, checkpoint_interval=10_000,
        data=DataConfig(dataset="fmnist", kind="dirichlet", num_clients=100, alpha=0.3),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=10, epochs=1, batch_size=40, lr=0.01),
    )


def time_simulator(run_dir: Path) -> tuple[float, Simulation]:
    """Wall time of the first ROUNDS rounds (the last round would also evaluate)."""
    sim = Simulation(config(), run_dir, progress=False)
    started = time.perf_counter()
    for _ in range(ROUNDS):
        sim.run_round()
    return time.perf_counter() - started, sim


def plain_fit(sim: Simulation, model: torch.nn.Module, global_state: dict[str, torch.Tensor],
              cid: int, round_index: int, sums: dict[str, torch.Tensor]) -> int:
    """Client ``cid``'s round written directly: E epochs of SGD from ``global_state``.

    Adds its n-weighted float64 weights to ``sums``; returns n.
    """
    t, data = sim.config.training, sim.federation.clients[cid].train
    model.load_state_dict(global_state)
    opt = torch.optim.SGD(model.parameters(), lr=sim.config.schedule().lr_at(round_index),
                          momentum=t.momentum, weight_decay=t.weight_decay)
    gen = sim.context(cid, round_index).generator("batches")
    for _ in range(t.epochs):
        for xb, yb in data.batches(t.batch_size, gen):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    for k, v in model.state_dict().items():
        sums[k] += v.double() * len(data)
    return len(data)


def plain_rounds(sim: Simulation, rounds: int, first: int = 0
                 ) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The simulator's FedAvg written directly (no framework, no disk): seconds of each round.

    Same clients, batches, SGD settings (from ``sim.config``) and n-weighted float64 mean, on
    the device the simulation's data is on (a CUDA round is timed to its last kernel). Rounds
    ``first`` .. ``first + rounds - 1`` (their clients and learning rates), from the initial
    weights.
    """
    device = sim.federation.test.x.device
    model = sim.algorithm.model_factory.build().to(device)
    global_state = {k: v.to(device)
                    for k, v in sim.algorithm.aggregation.init_global(sim.config.seed).items()}
    seconds = []
    for r in range(first, first + rounds):
        started = time.perf_counter()
        sums = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in global_state.items()}
        total = sum(plain_fit(sim, model, global_state, cid, r, sums)
                    for cid in sim.coordinator.sample(r))
        global_state = {k: (v / total).float() for k, v in sums.items()}
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - started)
    return seconds, {k: v.cpu() for k, v in global_state.items()}


def time_plain_loop(sim: Simulation) -> tuple[float, dict[str, torch.Tensor]]:
    """Wall time of ROUNDS rounds of the plain loop, and its final weights."""
    seconds, state = plain_rounds(sim, ROUNDS)
    return sum(seconds), state


def main() -> None:
    threads = set_threads()
    ratios, sim_times, plain_times = [], [], []
    for repeat in range(REPEATS):
        run_dir = Path(tempfile.mkdtemp()) / f"overhead-{repeat}"
        sim_time, sim = time_simulator(run_dir)
        plain_time, plain_state = time_plain_loop(sim)
        same = all(torch.allclose(plain_state[k], sim.coordinator.global_state[k], atol=1e-6)
                   for k in plain_state)
        if not same:
            raise SystemExit("the plain loop and the simulator disagree: not the same work")
        shutil.rmtree(run_dir.parent)
        ratios.append(sim_time / plain_time)
        sim_times.append(sim_time)
        plain_times.append(plain_time)
        print(f"repeat {repeat}: simulator {sim_time:.2f} s, plain loop {plain_time:.2f} s, "
              f"ratio {ratios[-1]:.3f}")
    ratio = statistics.median(ratios)
    table = (
        "| workload | simulator (s, median) | plain loop (s, median) | ratio (median) | target |\n"
        "|---|---|---|---|---|\n"
        f"| FedAvg, FMNIST, TwoNN, {ROUNDS} rounds x 10 clients, E=1, B=40 | "
        f"{statistics.median(sim_times):.2f} | {statistics.median(plain_times):.2f} | "
        f"{ratio:.3f} | <= 1.10 |\n"
    )
    print(table)
    (RESULTS / "overhead.md").write_text(
        "# bench-overhead\n\nCommand: `make bench-overhead` (1 torch thread; repeats "
        f"alternate simulator and plain loop; ratios {', '.join(f'{r:.3f}' for r in ratios)}; "
        "measured while other jobs shared the 2 cores).\n\n" + table
    )
    save("overhead", {"ratios": ratios, "sim_seconds": sim_times, "plain_seconds": plain_times,
                      "ratio_median": ratio, "threads": threads, "table": table})


if __name__ == "__main__":
    main()
