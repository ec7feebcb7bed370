"""bench-privacy: accuracy vs epsilon under DP-FedAvg, global and personalized (issue 24).

Does personalization recover what DP costs? Fashion-MNIST, CLIENTS clients (default 1000),
Dirichlet(0.3), PER_ROUND per round (default CLIENTS / 10), TwoNN, E=5, B=20,
lr 0.01 x 0.99^round, SGD m=0.9, wd 1e-5, the batched executor. Each epsilon in EPSILONS runs
every method of METHODS for ROUNDS rounds with user-level DP-FedAvg on exactly what the method
uploads (sdk/dp_fedavg.py): each device's change clipped to L2 norm CLIP (default 1.0, about
the median round-0 update norm of this setting: 1.16), Gaussian noise on the sum, delta = 1e-5.
The noise multiplier is calibrated before the run for (epsilon, delta, ROUNDS, PER_ROUND of
CLIENTS) by sdk/privacy_accounting.calibrate_noise (the ``[aggregation]`` dp_target_epsilon);
epsilon = inf is the same run without clipping or noise. What each method keeps on the device
(SuPerFed's local model, PFL-MFE's classifier and gate, FedAvg+FT's fine-tuned copy) never
passes through the noise; FedRoD-hyper's personal head is H(class counts; nu) with nu uploaded,
so its personal head is as noisy as the shared model.

Scores, after the LAST round (the simulator's final evaluation, server/sim_evaluation.py):
``global`` = the shared model on the global test set; ``personalized`` = each client's
personalized model on the global test set weighted by that client's class distribution
(FedRoD's / PFL-MoE's "local test"), mean over EVAL_CLIENTS clients (default: all; a seeded
sample otherwise). FedAvg's personalized model is the global model itself.

    make bench-privacy                                  (the full setting: ROUNDS=200)
    ROUNDS=10 EVAL_CLIENTS=200 EPSILONS=inf,1,3,8 make bench-privacy   (a reduced run)

Other settings: METHODS (fedavg,fedavg_ft,superfed_mm,fedrod_hyper,pflmoe), CLIP, DATASET,
OUT (results name, default "privacy").
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS, RUNS, command_block, machine, pct, set_threads, subset

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.rundir import RunDir
from pflkit.server.simulator import Simulation

DELTA = 1e-5  # below 1 / n^1.1 = 5e-4 for n = 1000 clients
LABELS = {"fedavg": "FedAvg", "fedavg_ft": "FedAvg+FT", "superfed_mm": "SuPerFed-MM",
          "fedrod_hyper": "FedRoD-hyper", "pflmoe": "PFL-MFE"}
# FedAvg+FT: one pass of E=5 like bench-fedavg; SuPerFed: lambda chosen on held-out train rows,
# no 11-lambda sweep; FedRoD: hidden 16 (App. C), no final pass; PFL-MFE: 20 stage-2 epochs
# (the paper's 200 cost 1000 clients ~10 CPU minutes per run; only the two heads train)
PARAMS: dict[str, dict[str, Any]] = {
    "fedavg": {}, "fedavg_ft": {"ft_epochs": 5}, "superfed_mm": {"sweep": False},
    "fedrod_hyper": {"hidden": 16}, "pflmoe": {"variant": "mfe", "epochs": 20}}


@dataclass(frozen=True)
class Setting:
    """One benchmark invocation's sizes (the environment's, or a test's)."""

    rounds: int = 200
    clients: int = 1000
    per_round: int = 100
    eval_clients: int = 1000
    epsilons: tuple[float, ...] = (1.0, 3.0, 8.0, math.inf)
    methods: tuple[str, ...] = tuple(LABELS)
    clip: float = 1.0
    dataset: str = "fmnist"
    out: str = "privacy"

    @classmethod
    def from_env(cls) -> Setting:
        """ROUNDS, CLIENTS, PER_ROUND, EVAL_CLIENTS, EPSILONS, METHODS, CLIP, DATASET, OUT."""
        env = os.environ
        clients = int(env.get("CLIENTS", "1000"))
        eps = [e.strip() for e in env.get("EPSILONS", "1,3,8,inf").split(",") if e.strip()]
        return cls(rounds=int(env.get("ROUNDS", "200")), clients=clients,
                   per_round=int(env.get("PER_ROUND", str(max(1, clients // 10)))),
                   eval_clients=int(env.get("EVAL_CLIENTS", str(clients))),
                   epsilons=tuple(float(e) for e in eps),
                   methods=tuple(subset("METHODS", list(LABELS))),
                   clip=float(env.get("CLIP", "1.0")), dataset=env.get("DATASET", "fmnist"),
                   out=env.get("OUT", "privacy"))


def config(s: Setting, method: str, epsilon: float) -> SimConfig:
    """One run: ``method`` at ``epsilon`` (inf: no clipping, no noise)."""
    dp = AggregationConfig() if math.isinf(epsilon) else AggregationConfig(
        dp_clip_norm=s.clip, dp_target_epsilon=epsilon, dp_delta=DELTA)
    return SimConfig(
        seed=0, rounds=s.rounds, eval_interval=max(1, s.rounds // 5), checkpoint_interval=s.rounds,
        data=DataConfig(dataset=s.dataset, kind="dirichlet", num_clients=s.clients, alpha=0.3,
                        min_size=2),  # min 10 is never met by 1000 clients at Dir(0.3)
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(method, PARAMS[method]),
        training=TrainingConfig(clients_per_round=s.per_round, epochs=5, batch_size=20,
                                lr=0.01, lr_decay=0.99, momentum=0.9, weight_decay=1e-5),
        aggregation=dp, execution=ExecutionConfig(executor="batched"))


def one_run(s: Setting, method: str, epsilon: float) -> dict[str, Any]:
    """Train, then score the last round on EVAL_CLIENTS clients; the row of the table."""
    cfg = config(s, method, epsilon)
    name = f"privacy-{method}-eps{epsilon:g}-r{s.rounds}-n{s.clients}"
    run_dir = RUNS / name
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    sim = Simulation(cfg, run_dir, progress=False)
    try:
        while not sim.coordinator.finished:
            row = sim.run_round()
            print(f"{name} round {row['round'] + 1}/{s.rounds} loss {row['train_loss']:.4f} "
                  f"eps {row.get('dp_epsilon', math.inf):.3f} {row['seconds']:.1f}s", flush=True)
        trained = time.perf_counter() - started
        # the final evaluation of a seeded sample of clients (every client by default): each
        # personalized model is scored on the 10k-image test set, the benchmark's largest cost
        ids = sorted(sim.federation.clients)
        if s.eval_clients < len(ids):
            picked = np.random.default_rng(0).choice(ids, s.eval_clients, replace=False)
            sim.federation = replace(sim.federation, clients={
                int(c): sim.federation.clients[int(c)] for c in sorted(picked)})
        final = sim.final_evaluation()
    finally:
        sim.close()
    last = json.loads(RunDir(run_dir).metrics.read_text().splitlines()[-1])
    summary = final["clients"]["summary"]
    return {"method": method, "epsilon": epsilon, "rounds": final["rounds"],
            "noise_multiplier": last.get("dp_noise_multiplier"),
            "epsilon_spent": last.get("dp_epsilon"), "delta": last.get("dp_delta"),
            "global": final["global_model"]["top1"],
            "personalized": summary["class_weighted_mean"],
            "personalized_std": summary["class_weighted_std"],
            "evaluated_clients": int(summary["clients"]),
            "train_seconds": trained, "seconds": time.perf_counter() - started,
            "run_dir": str(run_dir), "config": cfg.to_toml()}


def eps_label(epsilon: float) -> str:
    """1, 3, 8 or inf."""
    return "inf" if math.isinf(epsilon) else f"{epsilon:g}"


def tables(rows: list[dict[str, Any]], s: Setting) -> str:
    """Pivot (global / personalized per epsilon) and the per-run detail."""
    by = {(r["method"], r["epsilon"]): r for r in rows}
    eps = sorted({r["epsilon"] for r in rows})
    lines = ["| method | " + " | ".join(f"ε = {eps_label(e)}: global / personalized"
                                        for e in eps) + " |", "|---" * (len(eps) + 1) + "|"]
    for m in (m for m in LABELS if any(k[0] == m for k in by)):
        cells = [f"{pct(by[m, e]['global'])} / {pct(by[m, e]['personalized'])}"
                 if (m, e) in by else "not run" for e in eps]
        lines.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
    finite = [e for e in eps if not math.isinf(e)]
    if finite and math.inf in eps:  # what DP costs: points lost against the same method at inf
        lines += ["", "DP's cost in points (accuracy at ε = inf minus at ε), global / "
                  "personalized, and the personalized accuracy's lead over FedAvg's global "
                  "model at the same ε:", "",
                  "| method | " + " | ".join(f"ε = {eps_label(e)}" for e in finite) + " |",
                  "|---" * (len(finite) + 1) + "|"]
        for m in (m for m in LABELS if (m, math.inf) in by):
            cells = [_cost(by, m, e) if (m, e) in by else "not run" for e in finite]
            lines.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
    lines += ["", "| method | ε target | noise multiplier z | ε spent (δ) | global | "
              "personalized (mean +- std) | personalized - global | last round | "
              "run minutes |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (list(LABELS).index(r["method"]), r["epsilon"])):
        z = "-" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.3f}"
        spent = "-" if r["epsilon_spent"] is None else \
            f"{r['epsilon_spent']:.3f} ({r['delta']:g})"
        lines.append(
            f"| {LABELS[r['method']]} | {eps_label(r['epsilon'])} | {z} | {spent} | "
            f"{pct(r['global'])} | {pct(r['personalized'])} +- {pct(r['personalized_std'])} | "
            f"{100 * (r['personalized'] - r['global']):+.1f} | {r['rounds']} | "
            f"{r['seconds'] / 60:.1f} |")
    return "\n".join(lines) + "\n"


def _cost(by: dict[tuple[str, float], dict[str, Any]], method: str, epsilon: float) -> str:
    """Points lost at ``epsilon`` against the same method at inf (global / personalized), and
    the personalized accuracy's lead over FedAvg's global model at ``epsilon``."""
    now, plain = by[method, epsilon], by[method, math.inf]
    cell = " / ".join(f"{100 * (plain[k] - now[k]):.1f}" for k in ("global", "personalized"))
    fedavg = by.get(("fedavg", epsilon))
    return cell + (f" (lead {100 * (now['personalized'] - fedavg['global']):+.1f})"
                   if fedavg else "")


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Accuracy vs epsilon: one colour per method, solid = personalized, dashed = global."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = sorted({r["epsilon"] for r in rows})
    x = {e: i for i, e in enumerate(eps)}  # categorical axis: inf has no place on a log scale
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, method in enumerate(m for m in LABELS if any(r["method"] == m for r in rows)):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["epsilon"])
        xs = [x[r["epsilon"]] for r in mine]
        for key, style in (("personalized", "-"), ("global", "--")):
            ax.plot(xs, [100 * r[key] for r in mine], style, marker="o", color=f"C{i}",
                    label=f"{LABELS[method]} {key}")
    ax.set_xticks(range(len(eps)), [eps_label(e) for e in eps])
    ax.set_xlabel("ε (δ = 1e-5)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("DP-FedAvg: global (dashed) vs personalized (solid), last round")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(rows: list[dict[str, Any]], s: Setting, results: Path, threads: int) -> None:
    """results/<out>.{json,md,png}: rewritten after every run, so a stopped run keeps its rows."""
    text = tables(rows, s)
    plot(rows, results / f"{s.out}.png")
    full = s == replace(Setting(), out=s.out)
    env = (f"ROUNDS={s.rounds} CLIENTS={s.clients} PER_ROUND={s.per_round} "
           f"EVAL_CLIENTS={s.eval_clients} EPSILONS={','.join(eps_label(e) for e in s.epsilons)}"
           f" METHODS={','.join(s.methods)} CLIP={s.clip:g}")
    notes = [
        "# Privacy: accuracy vs ε under DP-FedAvg (bench-privacy)", "",
        f"Command (PFLKIT_THREADS={threads}):", "",
        *command_block([f"cd benchmarks && {env} nice -n 10 ../.venv/bin/python "
                         "bench_privacy.py"]), "",
        ("The full setting." if full else
         f"**A reduced setting, not the full one** (ROUNDS=200 with every client evaluated; "
         f"this machine's 2 shared cores cannot run it): {s.rounds} rounds, personalized "
         f"accuracy over a seeded sample of {s.eval_clients} of the {s.clients} clients. "
         "Fewer rounds also mean less noise for the same ε (the noise multiplier is "
         "calibrated for the rounds run)."), "",
        f"{s.dataset}, {s.clients} clients, Dirichlet(0.3) (min 2 rows per client), "
        f"{s.per_round} per round (fixed-size sampling without replacement), TwoNN, E=5, "
        "B=20, lr 0.01 x 0.99^round, SGD m=0.9, wd 1e-5, batched executor, seed 0. "
        f"DP-FedAvg on what each method uploads: clip norm {s.clip:g}, Gaussian noise "
        f"z x {s.clip:g} on the sum, δ = {DELTA:g}, z calibrated for the planned rounds "
        "(sdk/privacy_accounting.calibrate_noise); ε = inf: no clipping and no noise. "
        "Numbers after the LAST round. `global` = the shared model on the global test set; "
        "`personalized` = each client's personalized model on the global test set weighted "
        "by its class distribution, mean over the evaluated clients (FedAvg: the global "
        "model). What stays on the device (SuPerFed's local model, PFL-MFE's classifier and "
        "gate, FedAvg+FT's fine-tuned copy) is never noised; FedRoD-hyper's personal head is "
        "made from the client's class counts by the hypernetwork, which is uploaded and "
        f"noised. A client trains in about {s.rounds * s.per_round / s.clients:g} rounds "
        "(rounds x per round / clients): SuPerFed's local model learns only then.", "",
        text, f"![accuracy vs epsilon]({s.out}.png)", ""]
    (results / f"{s.out}.md").write_text("\n".join(notes))
    setting = {**s.__dict__, "epsilons": [eps_label(e) for e in s.epsilons]}
    payload = {"machine": machine(), "setting": setting, "table": text,
               "rows": [{**r, "epsilon": eps_label(r["epsilon"])} for r in rows]}
    (results / f"{s.out}.json").write_text(json.dumps(payload, indent=2) + "\n")


def bench(s: Setting, results: Path = RESULTS) -> list[dict[str, Any]]:
    """Every (epsilon, method) run of the setting, epsilon by epsilon."""
    threads = set_threads()
    results.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for epsilon in s.epsilons:
        for method in s.methods:
            rows.append(one_run(s, method, epsilon))
            write(rows, s, results, threads)
    return rows


if __name__ == "__main__":
    bench(Setting.from_env())
