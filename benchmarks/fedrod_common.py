"""Shared FedRoD benchmark helpers: the App. C setting, fast per-client scoring, curves.

Scoring shortcut: every personalized model of a run shares one body, so the body runs ONCE
over the global test set and each client only adds its heads. This is exactly the module
``personalized_model`` builds (checked in tests/sdk/algorithms/test_fedrod.py), but costs one
forward pass per checkpoint instead of one per client.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, RUNS

from pflkit.sdk.algorithms.base import Algorithm, State
from pflkit.sdk.algorithms.fedrod import zero_shot_head
from pflkit.sdk.data.federation import ClientData
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import class_weighted_accuracy
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.tensorio import load_state, save_json
from pflkit.server.simulator import Simulation

HYPER_KEY = "hyper.fc1.weight"
FINAL_PASS_EPOCHS = 5  # one local pass of E=5 epochs after the last round (FedAvg's protocol)


def config(algorithm: str, alpha: float, rounds: int, *, new_clients: int = 0,
           clients_per_round: int | None = None, seed: int = 0) -> SimConfig:
    """FedRoD Table 1 / Table 4 FMNIST setting (App. C) for ``algorithm``."""
    params: dict[str, Any] = {"ft_epochs": FINAL_PASS_EPOCHS}
    if algorithm == "fedrod_hyper":
        params["hidden"] = 16  # App. C: 16 for FMNIST
    return SimConfig(
        seed=seed, rounds=rounds, eval_interval=5, checkpoint_interval=5,
        data=DataConfig(dataset="fmnist", kind="dirichlet", num_clients=100, alpha=alpha,
                        test_fraction=0.0, num_new_clients=new_clients),
        model=ModelConfig("fedrod_convnet"), algorithm=AlgorithmConfig(algorithm, params),
        training=TrainingConfig(clients_per_round=clients_per_round,
                                fraction=0.2, epochs=5, batch_size=40, lr=0.01, lr_decay=0.99,
                                momentum=0.9, weight_decay=1e-5),
    )


@torch.no_grad()
def features(algorithm: Algorithm, global_state: State, test: LabeledTensors
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Test-set features z = f(x; theta-bar) and generic logits h_G(z), computed once."""
    model = algorithm.inference.global_model(global_state)
    z = torch.cat([model.body(test.x[i:i + 2000]) for i in range(0, len(test), 2000)])
    return z, model.head(z)


def generic_accuracy(generic: torch.Tensor, test: LabeledTensors) -> float:
    """Plain top-1 accuracy of the generic logits on the global test set."""
    return float((generic.argmax(1) == test.y).float().mean())


@torch.no_grad()
def mean_class_weighted(z: torch.Tensor, generic: torch.Tensor, test: LabeledTensors,
                        clients: dict[int, ClientData], num_classes: int,
                        phi_of: Callable[[int], State | None]) -> float:
    """Mean over clients of the class-weighted accuracy of h_G(z) + h_P(z; phi_of(client))."""
    scores = []
    for cid, client in clients.items():
        phi = phi_of(cid)
        logits = generic if phi is None else \
            generic + torch.nn.functional.linear(z, phi["weight"], phi["bias"])
        scores.append(class_weighted_accuracy(logits.argmax(1), test.y,
                                              client.class_counts(num_classes)))
    return sum(scores) / len(scores)


def hyper_phi(global_state: State, clients: dict[int, ClientData], num_classes: int
              ) -> Callable[[int], State]:
    """Return phi_m = H(a_m; nu-bar) per client (FedRoD-hyper without a final local pass)."""
    return lambda cid: zero_shot_head(global_state, clients[cid].class_counts(num_classes))


def curve(run_dir: Path, algorithm: Algorithm, clients: dict[int, ClientData],
          test: LabeledTensors, num_classes: int) -> list[dict[str, float]]:
    """Per checkpoint: generic accuracy and (hyper) personalized accuracy without a final pass.

    For FedAvg the second number is the global model's class-weighted accuracy.
    """
    points = []
    files = sorted((run_dir / "global").glob("round_*.safetensors"),
                   key=lambda p: int(p.stem.split("_")[1]))
    for path in files:
        state = load_state(path)
        z, generic = features(algorithm, state, test)
        point = {"round": int(path.stem.split("_")[1]), "generic": generic_accuracy(generic, test)}
        phi_of = hyper_phi(state, clients, num_classes) if HYPER_KEY in state else (lambda _: None)
        if HYPER_KEY in state or algorithm.name.startswith("fedavg"):
            point["personalized_no_pass"] = mean_class_weighted(z, generic, test, clients,
                                                                num_classes, phi_of)
        points.append(point)
    return points


def plot_curves(series: dict[str, list[dict[str, float]]], path: Path, title: str) -> Path:
    """Accuracy vs round, one line per (run, metric)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run, points in series.items():
        for metric in ("generic", "personalized_no_pass"):
            xs = [p["round"] for p in points if metric in p]
            if xs:
                ax.plot(xs, [100 * p[metric] for p in points if metric in p], marker=".",
                        label=f"{run} {metric}")
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def save_part(group: str, name: str, payload: dict[str, Any]) -> Path:
    """One run's result: benchmarks/results/<group>/<name>.json (merged into the table)."""
    folder = RESULTS / group
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def load_parts(group: str) -> list[dict[str, Any]]:
    """Every finished run of a benchmark group, sorted by name."""
    folder = RESULTS / group
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] \
        if folder.is_dir() else []


def stop_time() -> float | None:
    """FEDROD_STOP_AT=HH:MM (UTC, today): stop training then, evaluate what was reached.

    The lr schedule does not depend on the planned rounds, so a run stopped at round k is
    the k-round run; the final pass then uses the lr of the planned last round.
    """
    text = os.environ.get("FEDROD_STOP_AT")
    if not text:
        return None
    hour, minute = (int(v) for v in text.split(":"))
    now = datetime.now(UTC)
    return now.replace(hour=hour, minute=minute, second=0, microsecond=0).timestamp()


def run_until(cfg: SimConfig, name: str, stop_at: float | None) -> dict[str, Any]:
    """common.run, but training stops at wall-clock ``stop_at`` before the final evaluation.

    FEDROD_RESUME=1 continues a run directory left by an interrupted benchmark from its last
    checkpoint (every 5 rounds) instead of starting over."""
    run_dir = RUNS / name
    resume = os.environ.get("FEDROD_RESUME") == "1" and RunDir(run_dir).config_file.is_file()
    if run_dir.exists() and not resume:
        shutil.rmtree(run_dir)
    started = time.perf_counter()
    sim = Simulation(cfg, run_dir, resume=resume, progress=False)  # resumed: bit-identical
    while not sim.coordinator.finished and (stop_at is None or time.time() < stop_at
                                            or sim.coordinator.round == 0):
        row = sim.run_round()
        print(f"{name} round {row['round'] + 1}/{cfg.rounds} loss {row['train_loss']:.4f} "
              f"global {row.get('global_top1', float('nan')):.4f} {row['seconds']:.1f}s",
              flush=True)
    final = sim.final_evaluation()
    save_json(RunDir(run_dir).final, final)
    return {"name": name, "run_dir": str(run_dir), "seconds": time.perf_counter() - started,
            "final": final, "config": cfg.to_toml()}
