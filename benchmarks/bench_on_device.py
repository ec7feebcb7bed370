"""bench-on-device: personalization on the ExecuTorch training program vs eager PyTorch.

Real Fashion-MNIST clients. Per method, one federated run (settings in ``CONFIGS``), whose
post-federation stage then runs twice from the same final global model and client states:
eagerly (the run itself) and on the method's training program in the ExecuTorch runtime
(``pfl-sim --resume RUN --personalize-on executorch`` on a copy of the run directory):

* FedRoD (hyper), personal head: phi from H(a_m; nu-bar), 5 epochs of L_m, body frozen;
* SuPerFed-MM, local model: w_l for 2 epochs against the frozen w_f, lambda re-chosen;
* PFL-MFE, stage 2: personal classifier and gate, PER_EPOCHS epochs (default 50).

Accuracy: each method's headline personalized metric (FedRoD and PFL-MoE: the client-class
weighted accuracy on the global test set; SuPerFed: clients' own test split at their chosen
lambda), eager vs on the program; the bar is |difference| <= 0.3 points. Also the largest
relative difference of any client's personal weights after the whole stage and, for
SuPerFed, how many clients chose the same lambda.

Speed (``SPEED=1``; the Makefile runs it under the speed lock, not niced): steps per second of
one client's training program (``DeviceTrainer.step``: ``forward_backward`` and one SGD step in
the ExecuTorch runtime through its Python bindings) vs eager (``EagerSession.step``: autograd
and ``torch.optim.SGD``) at batch 1 and 16, one thread each, on that client's real rows:
median of REPEATS timed windows of >= WINDOW seconds.

    make bench-on-device        (env: METHODS, ROUNDS, PER_EPOCHS; SPEED=1 for the speed part;
                                 REUSE=1 keeps finished eager runs of the same config)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, RUNS, pct, run, save, set_threads, subset

from pflkit.export import load_run_source
from pflkit.export.device_trainer import DeviceTrainer
from pflkit.export.training_program import program_bytes, relative_difference, trainer_export
from pflkit.sdk.algorithms.personal import EagerSession
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.state_store import client_state_from_bytes
from pflkit.server.simulator import Simulation

ROUNDS = int(os.environ.get("ROUNDS", "20"))
PER_EPOCHS = int(os.environ.get("PER_EPOCHS", "50"))
CLIENTS = 20
BAR = 0.003  # 0.3 points
BATCHES = (1, 16)
WINDOW = float(os.environ.get("WINDOW", "2.0"))
REPEATS = 5
NAME = "on_device"

def superfed_config(ft_lr: float | None) -> SimConfig:
    """SuPerFed-MM on pathological shards; ``ft_lr`` None: the lr of the round after the last."""
    params: dict[str, Any] = {"start_fraction": 0.4, "ft_epochs": 2, "sweep": False}
    return SimConfig(
        seed=0, rounds=ROUNDS, eval_interval=ROUNDS, checkpoint_interval=ROUNDS,
        data=DataConfig(dataset="fmnist", kind="shards", num_clients=CLIENTS, test_fraction=0.2),
        model=ModelConfig("twonn"),
        algorithm=AlgorithmConfig("superfed_mm",
                                  params | ({} if ft_lr is None else {"ft_lr": ft_lr})),
        training=TrainingConfig(clients_per_round=5, epochs=1, batch_size=40, lr=0.05,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-4))


CONFIGS: dict[str, tuple[str, str, SimConfig]] = {  # method -> (label, headline key, config)
    "fedrod": ("FedRoD (hyper), personal head", "class_weighted_mean", SimConfig(
        seed=0, rounds=ROUNDS, eval_interval=ROUNDS, checkpoint_interval=ROUNDS,
        data=DataConfig(dataset="fmnist", kind="dirichlet", num_clients=CLIENTS, alpha=0.3),
        model=ModelConfig("fedrod_convnet"),
        algorithm=AlgorithmConfig("fedrod_hyper", {"hidden": 16, "ft_epochs": 5,
                                                   "ft_scope": "personal_head"}),
        training=TrainingConfig(fraction=0.25, epochs=1, batch_size=40, lr=0.01, lr_decay=0.99,
                                momentum=0.9, weight_decay=1e-5))),
    "superfed": ("SuPerFed-MM, local model, ft_lr 0.01", "own_top1_mean",
                 superfed_config(0.01)),
    "superfed_round_lr": ("SuPerFed-MM, local model, ft_lr = last round's", "own_top1_mean",
                          superfed_config(None)),
    "pflmoe": ("PFL-MFE, stage 2", "class_weighted_mean", SimConfig(
        seed=0, rounds=ROUNDS, eval_interval=ROUNDS, checkpoint_interval=ROUNDS,
        data=DataConfig(dataset="fmnist", resize=32, kind="dirichlet", num_clients=CLIENTS,
                        alpha=0.5),
        model=ModelConfig("lenet5"),
        algorithm=AlgorithmConfig("pflmoe", {"variant": "mfe", "epochs": PER_EPOCHS}),
        training=TrainingConfig(fraction=0.2, epochs=1, batch_size=10, lr=0.01, lr_decay=1.0,
                                momentum=0.5, weight_decay=0.0))),
}


SPEED_METHODS = ["fedrod", "superfed", "pflmoe"]  # one program each (the lr is not in it)


def personalized(run_dir: Path) -> dict[int, Any]:
    """The client states the post-federation stage wrote."""
    return {int(p.stem): client_state_from_bytes(p.read_bytes())
            for p in (run_dir / "personalized").glob("*.safetensors")}


def reused(config: SimConfig, run_dir: Path) -> dict[str, Any] | None:
    """A finished eager run of exactly this config (REUSE=1), in :func:`common.run`'s shape."""
    final, stored = run_dir / "final.json", run_dir / "config.toml"
    if not (os.environ.get("REUSE") and final.is_file() and stored.is_file()
            and stored.read_text() == config.to_toml()):
        return None
    return {"name": run_dir.name, "run_dir": str(run_dir), "final": json.loads(final.read_text()),
            "config": config.to_toml()}


def accuracy(method: str) -> dict[str, Any]:
    """One federated run, its stage eagerly (the run) and on the program (a resumed copy)."""
    label, key, config = CONFIGS[method]
    eager = reused(config, RUNS / f"{NAME}_{method}") or run(config, f"{NAME}_{method}")
    copy = RUNS / f"{NAME}_{method}_executorch"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(eager["run_dir"], copy)
    started = time.perf_counter()
    execution = dataclasses.replace(config.execution, personalize_on="executorch")
    device = Simulation.resume(copy, progress=True, execution=execution).run().final
    stage_seconds = time.perf_counter() - started
    want, got = personalized(Path(eager["run_dir"])), personalized(copy)
    summary = {name: final["clients"]["summary"] for name, final
               in (("eager", eager["final"]), ("executorch", device))}
    row = {"method": method, "label": label, "metric": key, "config": eager["config"],
           "eager": summary["eager"][key], "executorch": summary["executorch"][key],
           "clients": int(summary["eager"]["clients"]),
           "rel_weight_diff": {c: relative_difference(got[c].tensors, want[c].tensors)
                               for c in sorted(want)},
           "resume_seconds": stage_seconds}
    row["max_rel_weight_diff"] = max(row["rel_weight_diff"].values())
    row["clients_within_1e-4"] = sum(d <= 1e-4 for d in row["rel_weight_diff"].values())
    row["difference"] = row["executorch"] - row["eager"]
    if method == "pflmoe":
        row["global_plain"] = {k: s["global_plain_mean"] for k, s in summary.items()}
    if method.startswith("superfed"):
        row["same_lambda"] = sum(got[c].meta["lambda"] == want[c].meta["lambda"] for c in want)
    return row


def steps_per_second(session: Any, optimizer: str, inputs: tuple[torch.Tensor, ...]) -> float:
    """Median over REPEATS windows of >= WINDOW seconds (after a warm-up)."""
    for _ in range(10):
        session.step(optimizer, inputs)
    rates = []
    for _ in range(REPEATS):
        steps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < WINDOW:
            session.step(optimizer, inputs)
            steps += 1
        rates.append(steps / elapsed)
    return statistics.median(rates)


def speed(method: str) -> list[dict[str, Any]]:
    """Steps per second of client 0's program vs eager, at each batch size."""
    run_dir = RUNS / f"{NAME}_{method}"
    if not (run_dir / "global" / "latest.safetensors").is_file():
        raise SystemExit(f"{run_dir}: run the accuracy part first (make bench-on-device)")
    source = load_run_source(run_dir, 0)
    trainer = trainer_export(source)
    sample = source.train.subset(torch.arange(min(len(source.train), 32)))
    device = DeviceTrainer(program_bytes(trainer, sample.x, sample.y, "{}"), trainer.section,
                           trainer.image_shape)
    eager = EagerSession(trainer.part)
    recipe = trainer.part.recipe
    prepared = device.prepare(source.train.x[:max(BATCHES)])
    lam = () if recipe.lam is None else (recipe.lam.constant(0.5),)
    optimizer = recipe.optimizers[0].name
    rows = []
    for batch in BATCHES:
        inputs = (*(t[:batch] for t in prepared), source.train.y[:batch], *lam)
        program = steps_per_second(device, optimizer, inputs)
        reference = steps_per_second(eager, optimizer, inputs)
        rows.append({"method": method, "label": CONFIGS[method][0], "batch": batch,
                     "program_steps_per_s": program, "eager_steps_per_s": reference,
                     "ratio": program / reference, "optimizer": optimizer,
                     "inputs": [i["name"] for i in trainer.section["inputs"]]})
    return rows


def render(payload: dict[str, Any]) -> str:
    """The results markdown (docs/benchmarks.md section)."""
    out = ["# bench-on-device", "",
           f"Command: `make bench-on-device` (accuracy: `cd benchmarks && ROUNDS={ROUNDS} "
           f"PER_EPOCHS={PER_EPOCHS} ../.venv/bin/python bench_on_device.py`; speed: "
           "`cd benchmarks && SPEED=1 flock $SPEED_LOCK ../.venv/bin/python "
           "bench_on_device.py`, not niced, holding the Makefile's SPEED_LOCK).", "",
           f"Fashion-MNIST, {CLIENTS} clients, {ROUNDS} federated rounds per method (a short run: "
           "this benchmark compares two engines of the same post-federation stage, not the "
           "methods' accuracy). The stage ran eagerly, then again from the same final global "
           "model and client states on each client's ExecuTorch training program "
           "(`pfl-sim --resume RUN --personalize-on executorch`). Bar: |difference| <= 0.3 "
           "points.", "",
           "| method | metric | eager | on the program | difference (points) | clients whose "
           "weights agree within 1e-4 | max rel. weight diff | bar |",
           "|---|---|---|---|---|---|---|---|"]
    for row in payload.get("accuracy", []):
        ok = "met" if abs(row["difference"]) <= BAR else "NOT met"
        extra = f" (same lambda: {row['same_lambda']}/{row['clients']})" \
            if "same_lambda" in row else ""
        out.append(f"| {row['label']} | {row['metric']} | {100 * row['eager']:.2f} | "
                   f"{100 * row['executorch']:.2f} | {100 * row['difference']:+.2f} | "
                   f"{row['clients_within_1e-4']}/{row['clients']}{extra} | "
                   f"{row['max_rel_weight_diff']:.1e} | {ok} |")
    out += ["", "The two engines round differently, so personal weights drift apart with the "
            "steps: slowly where training is stable, fast where a client's training is unstable "
            "(SuPerFed at the default ft_lr, the lr of the round after the last: "
            f"{superfed_config(None).schedule().lr_at(ROUNDS):.3f}); docs/on-device.md says "
            "more."]
    if "pflmoe" in {r["method"] for r in payload.get("accuracy", [])}:
        moe = next(r for r in payload["accuracy"] if r["method"] == "pflmoe")
        out += ["", f"PFL-MFE global test (plain accuracy on the global test set): eager "
                f"{pct(moe['global_plain']['eager'])}, on the program "
                f"{pct(moe['global_plain']['executorch'])}. Stage 2 ran {PER_EPOCHS} epochs "
                "(paper 200)."]
    if payload.get("speed"):
        out += ["", "Speed: one client's training program, one SGD step per call "
                "(`forward_backward` + `step` in the ExecuTorch runtime through its Python "
                "bindings) vs eager PyTorch (autograd + `torch.optim.SGD`), one thread each, "
                f"median of {REPEATS} windows of >= {WINDOW:g} s on the client's real rows; "
                "ratio > 1: the program is faster.", "",
                "| method | program inputs | batch | program steps/s | eager steps/s | "
                "program / eager |", "|---|---|---|---|---|---|"]
        for row in payload["speed"]:
            out.append(f"| {row['label']} | {', '.join(row['inputs'])} | {row['batch']} | "
                       f"{row['program_steps_per_s']:.0f} | {row['eager_steps_per_s']:.0f} | "
                       f"{row['ratio']:.2f} |")
    return "\n".join(out) + "\n"


def main() -> None:
    threads = set_threads()
    part = "speed" if os.environ.get("SPEED") else "accuracy"
    methods = subset("METHODS", list(CONFIGS) if part == "accuracy" else SPEED_METHODS)
    path = RESULTS / f"{NAME}.json"
    payload: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    rows = [r for m in methods for r in (speed(m) if part == "speed" else [accuracy(m)])]
    kept = [r for r in payload.get(part, []) if r["method"] not in methods]
    payload[part] = sorted(kept + rows, key=lambda r: list(CONFIGS).index(r["method"]))
    payload[f"{part}_threads"] = threads
    save(NAME, {k: v for k, v in payload.items() if k != "machine"})
    (RESULTS / f"{NAME}.md").write_text(render(payload))
    print(render(payload))


if __name__ == "__main__":
    main()
