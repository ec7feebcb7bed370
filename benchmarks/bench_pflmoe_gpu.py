"""bench-pflmoe on a GPU (issue 22): PFL-MoE's FedAvg stage at the paper's 1000 rounds.

bench_pflmoe.py's settings, rows and stage 2, with the FedAvg stage on DEVICE (default cuda)
through EXECUTOR (default batched: the round's 10 clients as one vmapped program, each step
shape a CUDA graph). One process per alpha trains its FedAvg run (host-bound: one core each);
as each finishes, stage 2 fans out over WORKERS CPU processes in chunks of clients (per-client
eager steps on heads of 120 and 84 units: a GPU launches kernels no faster than a core runs
them, and the cores run 16 clients at once; workers start as tasks arrive). Scoring runs where
stage 2 runs.

BUDGET_S bounds the FedAvg stage (a wall clock shared by the alphas): each run stops after the
round that reaches it, and the results name the rounds each alpha ran. The lr is constant, so
a stopped run is the run of that many rounds; stage 2's round context is that count. The run
folders go back as <NAME>_runs.tar.gz; RESUME=<folder holding NAME.json and the tar> trains
them on to ROUNDS in a later session. Local-only rows are copied from the CPU run
(results/pflmoe.json; 100 separate extractors, not this run's subject).

    bash .gpu/run.sh env BUDGET_S=150 python3 benchmarks/bench_pflmoe_gpu.py     (OUT: results)
    RENDER_ONLY=<OUT>/pflmoe_gpu.json .venv/bin/python benchmarks/bench_pflmoe_gpu.py

env: DEVICE, EXECUTOR, ROUNDS (1000), PER_EPOCHS (200), ALPHAS ("0.5,0.9,2"), BUDGET_S (none),
WORKERS (cores), OUT (folder, default benchmarks/results), NAME (pflmoe_gpu), RESUME,
CLIENTS (stage 2 for the first N clients only: dry runs).
"""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from bench_pflmoe import Pairs, config, mean_pair, personalize, stage_one
from common import RESULTS, RUNS, machine
from gpu_runs import RunJob, device_name, main_of, opened, pack, pool, unpack
from pflmoe_report import paired, render

from pflkit.sdk.algorithms import Algorithm, RoundContext
from pflkit.sdk.builder import build_algorithm, load_data, partition_of
from pflkit.sdk.data.federation import Federation
from pflkit.sdk.data.spec import Dataset
from pflkit.sdk.run_config import ExecutionConfig, SimConfig
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.tensorio import load_state

CHUNK = 4  # clients per stage-2 task: 75 tasks for 16 workers end within ~1 task of each other


def fedavg(job: RunJob[float]) -> dict[str, Any]:
    """Train (or train on) one alpha's FedAvg run until ROUNDS or the deadline."""
    started = time.perf_counter()
    with opened(job) as sim:
        counts = {cid: c.class_counts(sim.federation.spec.num_classes)
                  for cid, c in sim.federation.clients.items()}
        first = sim.coordinator.round
        curve = stage_one(sim, counts, job.deadline)
        return {"alpha": job.label, "rounds": sim.coordinator.round, "from_round": first,
                "curve": curve, "seconds": time.perf_counter() - started,
                "device": device_name(job.config.execution.device)}


@dataclass(frozen=True)
class Stage2Job:
    """Stage 2 of some clients of one alpha, from its run's last global model, on the CPU."""

    config: SimConfig  # the FedAvg run's config, rounds = the rounds it ran
    run_dir: Path
    client_ids: tuple[int, ...]
    per_epochs: int


# a stage-2 worker's images (one load serves every alpha) and (federation, algorithm) per alpha
_DATA: dict[tuple[Any, ...], Dataset] = {}
_BUILT: dict[str, tuple[Federation, Algorithm]] = {}


def built(config: SimConfig) -> tuple[Federation, Algorithm]:
    """builder.build_run, the images loaded once per worker."""
    key, source = config.to_toml(), (config.data.dataset, config.data.resize, config.seed)
    if key not in _BUILT:
        if source not in _DATA:
            _DATA[source] = load_data(config)
        data = _DATA[source]
        _BUILT[key] = (partition_of(config, data).federation(data),
                       build_algorithm(config, data.spec))
    return _BUILT[key]


def stage2(job: Stage2Job) -> Pairs:
    """Personalize and score ``job.client_ids`` (bench_pflmoe.personalize)."""
    torch.set_num_threads(1)
    fed, algorithm = built(job.config)
    state = load_state(RunDir(job.run_dir).latest)
    cfg, n = job.config, job.config.rounds

    def context(cid: int) -> RoundContext:  # Simulation.context(cid, rounds) of an n-round run
        return RoundContext(n, n, cfg.schedule().lr_at(n), cfg.seed, cid)

    def client_state(cid: int) -> Any:  # stage 1 never changes it: the split seed only
        return algorithm.training.init_client(cid, cfg.seed, fed.all_clients[cid].train)

    return personalize(algorithm, fed, state, list(job.client_ids), job.per_epochs, context,
                       client_state)


@dataclass(frozen=True)
class Settings:
    """What one run does (env names in the module docstring)."""

    device: str = "cuda"
    executor: str = "batched"
    rounds: int = 1000
    per_epochs: int = 200
    alphas: tuple[float, ...] = (0.5, 0.9, 2.0)
    budget_s: float = math.inf
    workers: int = 16
    out: Path = RESULTS
    name: str = "pflmoe_gpu"
    resume: Path | None = None
    clients: int | None = None  # stage 2 for the first N clients only (dry runs)
    processes: bool = True  # False: threads of this process (tests)

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ.get
        alphas = tuple(float(a) for a in env("ALPHAS", "0.5,0.9,2").split(","))
        return cls(env("DEVICE", "cuda"), env("EXECUTOR", "batched"), int(env("ROUNDS", "1000")),
                   int(env("PER_EPOCHS", "200")), alphas, float(env("BUDGET_S", "inf")),
                   int(env("WORKERS", str(os.cpu_count() or 1))),
                   Path(env("OUT", str(RESULTS))), env("NAME", "pflmoe_gpu"),
                   Path(env("RESUME")) if env("RESUME") else None,
                   int(env("CLIENTS", "0")) or None)


def bench(s: Settings) -> dict[str, Any]:
    """Every alpha's FedAvg stage in parallel, then stage 2 in chunks; the results payload.

    Once every FedAvg run has stopped, the run folders (tar) and the curves (JSON) are written
    to OUT: if stage 2 is cut short, RESUME with ROUNDS = the rounds run does stage 2 only.
    """
    started = time.monotonic()
    runs = RUNS / s.name
    previous = json.loads((s.resume / f"{s.name}.json").read_text()) if s.resume else None
    unpack([s.resume / f"{s.name}_runs.tar.gz"] if s.resume else [], runs)
    execution = ExecutionConfig(executor=s.executor, device=s.device)
    dirs = {a: runs / f"pflmoe-dir{a:g}" for a in s.alphas}
    jobs = [RunJob(a, config(a, s.rounds).replace(execution=execution), dirs[a],
                   started + s.budget_s, dirs[a].is_dir()) for a in s.alphas]
    fed_runs: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    chunks: dict[str, list[Future[Pairs]]] = {}
    with pool(s.processes, len(jobs)) as fed_pool, pool(s.processes, s.workers) as cpu_pool:
        pending = {fed_pool.submit(fedavg, job): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when="FIRST_COMPLETED")
            for future in done:
                job = pending.pop(future)
                key = f"{job.label:g}"
                try:
                    run = future.result()
                except Exception as error:  # the other alphas go on; the folder keeps its rounds
                    failed[key] = f"{type(error).__name__}: {error}".splitlines()[0]
                    print(f"alpha {key}: FedAvg failed: {failed[key]}", flush=True)
                    continue
                if previous:
                    run["curve"] = previous["curves"].get(key, []) + run["curve"]
                fed_runs[key] = run
                print(f"alpha {key}: {run['rounds']} FedAvg rounds in {run['seconds']:.0f} s "
                      f"on {run['device']}; stage 2 on {s.workers} CPU workers", flush=True)
                cpu = config(job.label, run["rounds"])  # stage 2 on the CPU, n-round context
                ids = list(range(cpu.data.num_clients))[:s.clients]
                chunks[key] = [cpu_pool.submit(stage2, Stage2Job(cpu, job.run_dir,
                                                                 tuple(ids[i:i + CHUNK]),
                                                                 s.per_epochs))
                               for i in range(0, len(ids), CHUNK)]
        payload = summary(s, fed_runs, failed, previous)
        pack(runs, s.out / f"{s.name}_runs.tar.gz")
        (s.out / f"{s.name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        per_client = {key: merge([f.result() for f in futures]) for key, futures in chunks.items()}
    local = json.loads((RESULTS / "pflmoe.json").read_text())["results"] \
        if (RESULTS / "pflmoe.json").is_file() else {}
    payload["results"] = {k: {**{m: mean_pair(p) for m, p in pairs.items()},
                              **({"local": local[k]["local"]} if k in local else {})}
                          for k, pairs in per_client.items()}
    payload.update(per_client=per_client, paired=paired(per_client))
    payload["seconds"]["total"] = time.monotonic() - started
    return payload


def summary(s: Settings, fed_runs: dict[str, dict[str, Any]], failed: dict[str, str],
            previous: dict[str, Any] | None) -> dict[str, Any]:
    """The payload's FedAvg part (what RESUME reads)."""
    command = (f"bash .gpu/run.sh env ROUNDS={s.rounds} PER_EPOCHS={s.per_epochs} "
               f"BUDGET_S={s.budget_s:g} DEVICE={s.device} EXECUTOR={s.executor} "
               f"{'RESUME=<previous OUT> ' if s.resume else ''}"
               "python3 benchmarks/bench_pflmoe_gpu.py")
    device = next(iter(fed_runs.values()))["device"] if fed_runs else s.device
    return {"machine": machine(), "device": device, "command": command,
            "planned_rounds": s.rounds, "per_epochs": s.per_epochs,
            "budget_s": None if math.isinf(s.budget_s) else s.budget_s,
            "resumed_from": previous["rounds"] if previous else None,
            "rounds": {k: r["rounds"] for k, r in fed_runs.items()}, "failed": failed,
            "seconds": {f"{k}/fedavg": r["seconds"] for k, r in fed_runs.items()},
            "curves": {k: r["curve"] for k, r in fed_runs.items()}}


def merge(parts: list[Pairs]) -> Pairs:
    """Chunks' per-client pairs, in client order."""
    return {m: [p for part in parts for p in part[m]] for m in parts[0]}


def main() -> None:
    main_of(Settings.from_env, bench, render, RESULTS)


if __name__ == "__main__":
    main()
