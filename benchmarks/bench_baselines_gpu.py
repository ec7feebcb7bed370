"""bench-baselines on a GPU (issue 22): the SuPerFed comparison's methods at R = 500, in parallel.

bench_baselines.py's setting (SETTING, default twocnn-50: 5 clients x 96 steps x 10 epochs a
round) and rows, each method in its own process on DEVICE (default cuda) through EXECUTOR
(default batched). Every method of the table has a batched trainer (APFL and pFedMe the last
to get one); a method without one trains client by client (the executor logs why), ~20x slower.

BUDGET_S bounds the training (one wall clock for every method): each run stops after the round
that reaches it, then runs its final evaluation (the personalization stage included); the rows
name the rounds run. The lr is 0.01 x 0.99^round, so a stopped run is the first rounds of the
R-round run (its final stage reads R's round context). Each method's run folder goes back as
<NAME>_<method>_runs.tar.gz when it packs into the 16 MiB a call brings back per file (the
methods without per-client state or with small ones: FedAvg(+FT), FedProx, FedPer, FedRep);
RESUME=<folder holding such tars> trains those methods on, the others start afresh.

    bash .gpu/run.sh env OUT=$OUT BUDGET_S=420 python3 benchmarks/bench_baselines_gpu.py
    RENDER_ONLY=<OUT>/<NAME>.json .venv/bin/python benchmarks/bench_baselines_gpu.py

env: SETTING, ROUNDS (500), METHODS (the batched ones), DEVICE, EXECUTOR, BUDGET_S (none),
OUT (folder, default benchmarks/results), NAME (baselines_<setting>_gpu), RESUME, CONV_GEMM (0; 1:
``execution.conv_gemm``), PACK (1; 0: no tars), MERGE (an earlier run's JSON: the methods it ran and
this run did not keep their rows, so leases that each run some methods to R gather one table),
STREAMS (0; 1: every method a thread of this process on its own CUDA stream, instead of a process
each: processes take turns on the GPU, streams share it).
"""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_baselines import (
    LABELS,
    RUN_ORDER,
    SETTINGS,
    config,
    curve,
    curve_points,
    diverged_fits,
    fedavg_row,
    row_from_summary,
    setting_title,
    table,
)
from common import RESULTS, RUNS, machine
from gpu_runs import RunJob, device_name, main_of, opened, pack, pool, unpack

from pflkit.sdk.algorithms import LocalTraining, ModelFactory, make_algorithm
from pflkit.sdk.run_config import ExecutionConfig

PACK_LIMIT = 16 << 20  # bytes: the largest file a lent machine's call brings back


def batched_methods(setting: str) -> tuple[str, ...]:
    """The table's methods whose trainer batches the setting's model (the default METHODS)."""
    model = ModelFactory(SETTINGS[setting][0], (1, 28, 28), 10)
    return tuple(m for m in RUN_ORDER
                 if make_algorithm(m, model, LocalTraining()).training.batching_blocker() is None)


def train(job: RunJob[str]) -> dict[str, Any]:
    """Rounds until R or the deadline, then the final evaluation; the method's rows."""
    started = time.perf_counter()
    with opened(job) as sim:
        while not sim.coordinator.finished:
            sim.run_round()
            if time.monotonic() >= job.deadline:
                break
        final = sim.final_evaluation()
    seconds = time.perf_counter() - started
    rows = {job.label: row_from_summary(final["clients"]["summary"], final["rounds"], seconds,
                                        diverged_fits(job.run_dir, final))}
    if job.label == "fedavg_ft":
        rows["fedavg"] = fedavg_row(job.run_dir, final["rounds"])
    return {"rows": rows, "curve": curve_points(str(job.run_dir)), "seconds": seconds,
            "own_top1": [c["own_top1"] for c in final["clients"]["per_client"]],
            "device": device_name(job.config.execution.device)}


@dataclass(frozen=True)
class Settings:
    """What one run does (env names in the module docstring)."""

    setting: str = "twocnn-50"
    rounds: int = 500
    methods: tuple[str, ...] = ("fedavg_ft", "fedprox")
    device: str = "cuda"
    executor: str = "batched"
    budget_s: float = math.inf
    out: Path = RESULTS
    name: str = "baselines_twocnn_50_gpu"
    resume: Path | None = None
    pack: bool = True  # False: no tars
    merge: Path | None = None  # an earlier lease's JSON: its methods not run here are kept
    processes: bool = True  # False: threads of this process, one CUDA stream each (STREAMS=1)
    conv_gemm: bool = False  # execution.conv_gemm (convolutions as patch GEMMs)

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ.get
        setting = env("SETTING", "twocnn-50")
        methods = tuple(m for m in env("METHODS", ",".join(batched_methods(setting))).split(",")
                        if m)
        unknown = sorted(set(methods) - set(RUN_ORDER))
        if unknown:
            raise SystemExit(f"unknown METHODS {unknown}; choose from {', '.join(RUN_ORDER)}")
        return cls(setting, int(env("ROUNDS", "500")), methods, env("DEVICE", "cuda"),
                   env("EXECUTOR", "batched"), float(env("BUDGET_S", "inf")),
                   Path(env("OUT", str(RESULTS))),
                   env("NAME", f"baselines_{setting.replace('-', '_')}_gpu"),
                   Path(env("RESUME")) if env("RESUME") else None, env("PACK", "1") != "0",
                   Path(env("MERGE")) if env("MERGE") else None,
                   processes=env("STREAMS", "0") == "0", conv_gemm=env("CONV_GEMM", "0") != "0")


def bench(s: Settings) -> dict[str, Any]:
    """Every method at once; rows, curves, per-client top-1 and the run folders (tar in OUT)."""
    started = time.monotonic()
    runs = RUNS / s.name
    tars = [s.resume / f"{s.name}_{m}_runs.tar.gz" for m in s.methods] if s.resume else []
    unpack([t for t in tars if t.is_file()], runs)
    execution = ExecutionConfig(executor=s.executor, device=s.device, conv_gemm=s.conv_gemm)
    jobs = [RunJob(m, config(m, s.rounds, s.setting).replace(execution=execution),
                   runs / m, started + s.budget_s, (runs / m).is_dir()) for m in s.methods]
    done: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    with pool(s.processes, len(jobs)) as workers:
        futures = {workers.submit(train, job): job.label for job in jobs}
        wait(futures)
    for future, method in futures.items():
        try:
            done[method] = future.result()
        except Exception as error:  # e.g. NaN outputs at the final evaluation (DivergedModel)
            failed[method] = f"{type(error).__name__}: {error}".splitlines()[0]
    too_large = packed(runs, s) if s.pack else []
    rows = {m: r for d in done.values() for m, r in d["rows"].items()}
    command = (f"bash .gpu/run.sh env SETTING={s.setting} ROUNDS={s.rounds} "
               f"METHODS={','.join(s.methods)} BUDGET_S={s.budget_s:g} DEVICE={s.device} "
               f"EXECUTOR={s.executor} {'RESUME=<previous OUT> ' if s.resume else ''}"
               f"{'' if s.pack else 'PACK=0 '}{'MERGE=<earlier JSON> ' if s.merge else ''}"
               f"{'CONV_GEMM=1 ' if s.conv_gemm else ''}{'' if s.processes else 'STREAMS=1 '}"
               "python3 benchmarks/bench_baselines_gpu.py")
    payload = {"machine": machine(), "command": command, "setting": s.setting,
               "planned_rounds": s.rounds,
               "budget_s": None if math.isinf(s.budget_s) else s.budget_s,
               "device": next(iter(done.values()))["device"] if done else s.device,
               "rows": rows, "failed": failed, "too_large": too_large,
               "curves": {m: d["curve"] for m, d in done.items()},
               "own_top1": {m: d["own_top1"] for m, d in done.items()},
               "seconds": {**{m: d["seconds"] for m, d in done.items()},
                           "total": time.monotonic() - started},
               "earlier": {}}
    if s.merge:
        payload = merged(payload, json.loads(s.merge.read_text()))
    rows = payload["rows"]
    payload["rows"] = {m: rows[m] for m in ("fedavg", *RUN_ORDER) if m in rows}
    return payload


def packed(runs: Path, s: Settings) -> list[str]:
    """Each method's run folder as a tar in OUT, for RESUME; the methods whose tar is too large
    to come back from a lent machine (a whole TwoCNN per client: ~330 MB for 50) get none."""
    too_large = []
    for method in s.methods:
        if (runs / method).is_dir():
            tar = s.out / f"{s.name}_{method}_runs.tar.gz"
            pack(runs / method, tar, runs.name)
            if tar.stat().st_size > PACK_LIMIT:
                tar.unlink()
                too_large.append(method)
    return too_large


def merged(payload: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """``payload`` plus the methods of ``earlier`` (another lease's run) it did not run.

    R = 500 of every method does not fit one lease, and a method's run folders are too large to
    resume in another: each lease runs some methods to the end, and the page gathers them.
    """
    ran = set(payload["curves"]) | set(payload["failed"])
    kept = [m for m in (*earlier["curves"], *earlier["failed"]) if m not in ran]
    rows = {m: r for m, r in earlier["rows"].items()
            if m in kept or (m == "fedavg" and "fedavg_ft" in kept)}
    where = {m: earlier.get("earlier", {}).get(m, f"{earlier['command']} on {earlier['device']}")
             for m in kept}
    return {**payload, "rows": {**payload["rows"], **rows},
            "failed": {**payload["failed"],
                       **{m: why for m, why in earlier["failed"].items() if m in kept}},
            **{key: {**payload[key], **{m: earlier[key][m] for m in kept if m in earlier[key]}}
               for key in ("curves", "own_top1")},
            "earlier": {**payload["earlier"], **where}}


def render(payload: dict[str, Any], out: Path, name: str) -> str:
    """The results page: bench_baselines' table, the rounds each method ran, the curve."""
    budget = payload["budget_s"]
    curve(payload["curves"], out / f"{name}_curve.png",
          setting_title(payload["setting"], payload["planned_rounds"]))
    seconds = ", ".join(f"{m} {v:.0f} s" for m, v in payload["seconds"].items())
    return (f"# Baselines on a GPU: {setting_title(payload['setting'], payload['planned_rounds'])}"
            f"\n\nCommand: `{payload['command']}` on {payload['device']}.\n"
            + (f"Training bounded by BUDGET_S = {budget:g} s; 'last round' says where each "
               "method stopped.\n" if budget is not None else "")
            + f"Settings and columns as bench-baselines'. Curve: {name}_curve.png.\n\n"
            + table(payload["rows"])
            + "".join(f"\n{LABELS[m]}: failed ({why})\n" for m, why in payload["failed"].items())
            + "".join(f"\n{LABELS[m]}: run folder over {PACK_LIMIT >> 20} MiB packed, not kept "
                      "for RESUME\n" for m in payload.get("too_large", []))
            + f"\nWall: {seconds}.\n"
            + "".join(f"\n{LABELS[m]}: from an earlier run, `{how}`.\n"
                      for m, how in payload.get("earlier", {}).items()))


def main() -> None:
    main_of(Settings.from_env, bench, render, RESULTS)


if __name__ == "__main__":
    main()
