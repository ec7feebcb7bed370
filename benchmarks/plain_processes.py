"""The plain loop split over 1-thread processes: what a 2 x 1-thread executor could reach.

bench-scale's reference for the Ray executor and Flower (issue 22): no framework, no
scheduling while a round runs. Each process builds the run's federation once and trains its
share of a round's clients with bench-overhead's plain loop (same clients, batches and SGD);
the driver splits the clients before the round, largest first onto the process with fewer
rows (halves within one client's rows of each other), and adds the processes' n-weighted
float64 sums (another order than the simulator's: equal up to rounding).
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import torch
from bench_overhead import plain_fit

from pflkit.sdk.run_config import SimConfig
from pflkit.server.simulator import Simulation

State = dict[str, torch.Tensor]


def split_by_rows(sizes: dict[int, int], parts: int) -> list[list[int]]:
    """Client ids in ``parts`` lists of near-equal total rows (largest first, to the lightest)."""
    shares: list[list[int]] = [[] for _ in range(parts)]
    rows = [0] * parts
    for cid in sorted(sizes, key=lambda c: (-sizes[c], c)):
        lightest = rows.index(min(rows))
        shares[lightest].append(cid)
        rows[lightest] += sizes[cid]
    return shares


def _serve(conn: Connection, make_config: Callable[[], SimConfig], workdir: str) -> None:
    """A worker process: fit the clients it is sent, answer with their weighted sums."""
    torch.set_num_threads(1)
    sim = Simulation(make_config(), Path(workdir), progress=False)
    model = sim.algorithm.model_factory.build()
    conn.send("ready")
    while (job := conn.recv()) is not None:
        round_index, global_state, cids = job
        sums = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in global_state.items()}
        total = sum(plain_fit(sim, model, global_state, cid, round_index, sums) for cid in cids)
        conn.send((sums, total))
    sim.close()


def plain_process_rounds(sim: Simulation, make_config: Callable[[], SimConfig], rounds: int,
                         processes: int = 2) -> tuple[list[float], State]:
    """Seconds of each of ``rounds`` rounds from the initial weights, and the final weights.

    ``make_config`` rebuilds ``sim``'s config in each (spawned) process.
    """
    context = multiprocessing.get_context("spawn")
    conns, workers = [], []
    for i in range(processes):
        ours, theirs = context.Pipe()
        worker = context.Process(target=_serve, daemon=True, args=(
            theirs, make_config, tempfile.mkdtemp(prefix=f"plain-proc{i}-")))
        worker.start()
        conns.append(ours)
        workers.append(worker)
    for conn in conns:
        conn.recv()  # each has built its federation: not timed
    global_state = sim.algorithm.aggregation.init_global(sim.config.seed)
    seconds = []
    for r in range(rounds):
        started = time.perf_counter()
        sizes = {cid: len(sim.federation.clients[cid].train) for cid in sim.coordinator.sample(r)}
        for conn, share in zip(conns, split_by_rows(sizes, processes), strict=True):
            conn.send((r, global_state, share))
        answers = [conn.recv() for conn in conns]
        total = sum(n for _, n in answers)
        global_state = {k: (sum(s[k] for s, _ in answers) / total).float()
                        for k in global_state}
        seconds.append(time.perf_counter() - started)
    for conn in conns:
        conn.send(None)
    for worker in workers:
        worker.join()
    return seconds, global_state
