"""Shared parts of the SuPerFed benchmarks: settings, one run with its lambda sweep and oracle."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from common import run

from pflkit.sdk.algorithms.superfed import LAMBDA_GRID, lambda_sweep
from pflkit.sdk.data.federation import PartitionConfig
from pflkit.sdk.metrics import mean_std
from pflkit.sdk.run_config import DataConfig, SimConfig, TrainingConfig, build_run
from pflkit.sdk.state_store import client_state_from_bytes
from pflkit.sdk.tensorio import load_state

LABELS = {"superfed_mm": "SuPerFed-MM", "superfed_lm": "SuPerFed-LM", "fedavg": "FedAvg",
          "apfl": "APFL", "fedavg_ft": "FedAvg+FT"}


def config(method: str, model: str, partition: PartitionConfig, rounds: int,
           params: dict[str, Any] | None = None, seed: int = 0) -> SimConfig:
    """The SuPerFed paper's client settings (A.1): 5 clients/round, E=10, B=10, SGD m=0.9."""
    return SimConfig(
        seed=seed, rounds=rounds, eval_interval=max(1, rounds // 10), checkpoint_interval=rounds,
        data=DataConfig("fmnist", partition=partition), model=model, algorithm=method,
        params=params or {},
        training=TrainingConfig(clients_per_round=5, epochs=10, batch_size=10, lr=0.01,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-4),
    )


def oracle(run_dir: Path) -> tuple[dict[str, float], dict[str, int]]:
    """Top-1 when each client's lambda is picked on its own TEST split (the public code's
    optimistic protocol, a labelled extra), and how often each lambda was chosen on held-out
    train rows (the protocol reported as "best")."""
    cfg = SimConfig.load(run_dir / "config.toml")
    federation, algorithm = build_run(cfg)
    glob = load_state(run_dir / "global" / "latest.safetensors")
    best, chosen = [], {f"{lam:.1f}": 0 for lam in LAMBDA_GRID}
    for cid, client in federation.clients.items():
        path = run_dir / "personalized" / f"{cid}.safetensors"
        state = client_state_from_bytes(path.read_bytes(), str(path))
        sweep = lambda_sweep(algorithm, glob, state, client.test)  # type: ignore[arg-type]
        best.append(max(s.top1 for s in sweep.values()))
        chosen[f"{state.meta['lambda']:.1f}"] += 1
    mean, std = mean_std(best)
    return {"top1_mean": mean, "top1_std": std}, chosen


def row(result: dict[str, Any]) -> dict[str, Any]:
    """One method's numbers after the last round (+ the lambda sweep for SuPerFed)."""
    final = result["final"]
    summary = final["clients"]["summary"]
    out: dict[str, Any] = {
        "top1_mean": summary["own_top1_mean"], "top1_std": summary["own_top1_std"],
        "ece_mean": summary["own_ece_mean"], "ece_std": summary["own_ece_std"],
        "mce_mean": summary["own_mce_mean"], "mce_std": summary["own_mce_std"],
        "rounds": final["rounds"], "seconds": round(result["seconds"], 1),
        "global_top1": final["global_model"]["top1"], "run_dir": result["run_dir"],
    }
    by_choice = final["clients"].get("by_choice")
    if by_choice:
        out["by_lambda"] = {
            f"{lam:.1f}": {k: by_choice[f"{lam:.1f}"][f"own_{k}"] for k in
                           ("top1_mean", "top1_std", "ece_mean", "mce_mean")}
            for lam in LAMBDA_GRID}
        best = max(out["by_lambda"], key=lambda k: out["by_lambda"][k]["top1_mean"])
        out["best_grid_lambda"] = float(best)
        out["oracle"], out["chosen_lambdas"] = oracle(Path(result["run_dir"]))
    return out


def run_row(cfg: SimConfig, name: str) -> dict[str, Any]:
    """Run one configuration and return its row."""
    return row(run(cfg, name))


def curve_points(run_dir: str, key: str = "personal_top1") -> list[tuple[int, float]]:
    """(round, value) pairs of one metric from a run's metrics.jsonl."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["round"] + 1, r[key]) for r in rows
            if r.get(key) is not None and not math.isnan(r[key])]
