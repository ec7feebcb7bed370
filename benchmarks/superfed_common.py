"""Shared parts of the SuPerFed benchmarks: settings, one run with its lambda sweep and choices."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import run

from pflkit.sdk.algorithms.superfed import LAMBDA_GRID, SuPerFed, choose_lambda, lambda_sweep
from pflkit.sdk.builder import build_run
from pflkit.sdk.data.federation import PartitionConfig
from pflkit.sdk.metrics import Scores, mean_std
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.state_store import client_state_from_bytes
from pflkit.sdk.tensorio import load_state

LABELS = {"superfed_mm": "SuPerFed-MM", "superfed_lm": "SuPerFed-LM", "fedavg": "FedAvg",
          "apfl": "APFL", "fedavg_ft": "FedAvg+FT"}


def config(method: str, model: str, partition: PartitionConfig, rounds: int,
           params: dict[str, Any] | None = None, seed: int = 0) -> SimConfig:
    """The SuPerFed paper's client settings (A.1): 5 clients/round, E=10, B=10, SGD m=0.9."""
    return SimConfig(
        seed=seed, rounds=rounds, eval_interval=max(1, rounds // 10), checkpoint_interval=rounds,
        data=DataConfig(dataset="fmnist", **partition.to_dict()),
        model=ModelConfig(model), algorithm=AlgorithmConfig(method, params or {}),
        training=TrainingConfig(clients_per_round=5, epochs=10, batch_size=10, lr=0.01,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-4),
    )


def plateau_middle_rule(held: dict[float, Scores]) -> float:
    """Best held-out top-1, ties to the middle of the tied lambdas (furthest from the edges)."""
    top = max(s.top1 for s in held.values())
    tied = [lam for lam in LAMBDA_GRID if held[lam].top1 == top]
    return tied[(len(tied) - 1) // 2]


def lambda_choices(run_dir: Path) -> dict[str, Any]:
    """Each client's test scores under several ways of choosing its lambda.

    The shipped rule (held-out top-1, ties to lower NLL) is the headline. Beside it, choices
    that also use no test rows: the lowest held-out NLL; the middle of the tied best lambdas;
    one lambda for every client, the grid value with the best mean held-out top-1 (clients
    would report 11 numbers). Last, the public code's protocol, an optimistic oracle: each
    client's best lambda on its own TEST split. ``chosen_lambdas`` counts the shipped rule's
    picks (read from the stored client states, which must agree with the recomputed rule).
    """
    files = RunDir(run_dir)
    cfg = files.config()
    federation, algorithm = build_run(cfg)
    assert isinstance(algorithm, SuPerFed)
    glob = load_state(files.latest)
    held, test = {}, {}
    chosen = {f"{lam:.1f}": 0 for lam in LAMBDA_GRID}
    for cid, client in federation.clients.items():
        path = files.personalized(cid)
        state = client_state_from_bytes(path.read_bytes(), str(path))
        _, rows = algorithm.split(client.train, cfg.seed, cid)
        held[cid] = lambda_sweep(algorithm, glob, state, rows)
        test[cid] = lambda_sweep(algorithm, glob, state, client.test)
        if choose_lambda(held[cid]) != state.meta["lambda"]:
            raise RuntimeError(f"client {cid}: recomputed lambda differs from the stored one")
        chosen[f"{state.meta['lambda']:.1f}"] += 1
    pooled = max(LAMBDA_GRID, key=lambda lam: sum(h[lam].top1 for h in held.values()))
    rules: dict[str, Callable[[int], float]] = {
        "held-out top-1, ties to lower NLL (shipped)": lambda c: choose_lambda(held[c]),
        "held-out NLL": lambda c: min(LAMBDA_GRID, key=lambda lam: held[c][lam].nll),
        "held-out top-1, ties to the middle": lambda c: plateau_middle_rule(held[c]),
        "one lambda for all (best mean held-out top-1)": lambda c: pooled,
        "oracle: best on the client's own test split": lambda c: max(
            LAMBDA_GRID, key=lambda lam: test[c][lam].top1),
    }
    out = {}
    for name, rule in rules.items():
        picked = [test[c][rule(c)] for c in test]
        top1, top1_std = mean_std([s.top1 for s in picked])
        ece, _ = mean_std([s.ece for s in picked])
        mce, _ = mean_std([s.mce for s in picked])
        out[name] = {"top1_mean": top1, "top1_std": top1_std, "ece_mean": ece, "mce_mean": mce}
    out["one lambda for all (best mean held-out top-1)"]["lambda"] = pooled
    return {"rules": out, "chosen_lambdas": chosen,
            "oracle": out["oracle: best on the client's own test split"]}


def with_choices(row: dict[str, Any]) -> dict[str, Any]:
    """A SuPerFed row with its lambda-choice scores, from the models its run directory holds
    (new rows, and stored rows re-rendered with RENDER_ONLY); other rows unchanged."""
    run_dir = Path(row["run_dir"])
    if "rules" in row or not (run_dir / "personalized").is_dir():
        return row
    if not RunDir(run_dir).config().algorithm.name.startswith("superfed"):
        return row
    return row | lambda_choices(run_dir)


def choice_table(rows: dict[str, Any]) -> str:
    """Top-1 (ECE / MCE) on the clients' test splits under each way of choosing their lambda."""
    runs = {k: r for k, r in rows.items() if "rules" in r}
    if not runs:
        return ""
    names = list(next(iter(runs.values()))["rules"])
    lines = ["| run | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for key, r in runs.items():
        cells = [f"{100 * v['top1_mean']:.2f} ({v['ece_mean']:.4f} / {v['mce_mean']:.3f})"
                 + (f", lambda {v['lambda']:.1f}" if "lambda" in v else "")
                 for v in r["rules"].values()]
        lines.append(f"| {key} (R={r['rounds']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def row(result: dict[str, Any]) -> dict[str, Any]:
    """One method's numbers after the last round (+ SuPerFed's lambda sweep and choices)."""
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
    return with_choices(out)


def run_row(cfg: SimConfig, name: str) -> dict[str, Any]:
    """Run one configuration and return its row."""
    return row(run(cfg, name))


def curve_points(run_dir: str, key: str = "personal_top1") -> list[tuple[int, float]]:
    """(round, value) pairs of one metric from a run's metrics.jsonl."""
    path = RunDir(run_dir).metrics
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["round"] + 1, r[key]) for r in rows
            if r.get(key) is not None and not math.isnan(r[key])]
