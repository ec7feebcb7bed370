"""A run with ``training.epochs = 0`` trains nothing and names no client as diverged.

Zero epochs leave a run its evaluation and its post-federation stage (FedAvg+FT's fine-tune
of the initial model). Before, every fit's NaN mean loss over zero steps counted as a
divergence: every client of every round was dropped with a warning, on every executor.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation

ROUNDS = 2


def config(algorithm: str, executor: str, params: dict) -> SimConfig:
    """Two rounds of four digits clients, zero local epochs."""
    return SimConfig(
        seed=1, rounds=ROUNDS, eval_interval=ROUNDS, checkpoint_interval=ROUNDS,
        data=DataConfig(dataset="digits", kind="iid", num_clients=4, test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm, params),
        training=TrainingConfig(clients_per_round=4, epochs=0, batch_size=16, lr=0.05),
        execution=ExecutionConfig(executor=executor))


@pytest.mark.parametrize("executor", ["sequential", "batched"])
@pytest.mark.parametrize(("algorithm", "params"), [
    ("fedavg", {}),
    ("apfl", {}),  # loops of its own (sequential) and a batched program
    ("fedavg_ft", {"ft_epochs": 1}),  # the post-federation stage only
])
def test_zero_epochs_keep_the_global_model_and_leave_the_loss_undefined(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, executor: str, algorithm: str,
        params: dict) -> None:
    sim = Simulation(config(algorithm, executor, params), tmp_path / "run", progress=False)
    start = {k: v.clone() for k, v in sim.coordinator.global_state.items()}
    with caplog.at_level(logging.WARNING):
        result = sim.run()
    assert "diverged" not in caplog.text
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["train_loss"] for r in rows] == [None] * ROUNDS
    assert all('"train_loss": null' in line and "diverged" not in r
               for line, r in zip(lines, rows, strict=True))
    assert all(torch.equal(result.global_state[k], start[k]) for k in start)
    assert "diverged" not in result.final
    assert (tmp_path / "run" / "report.md").is_file()
