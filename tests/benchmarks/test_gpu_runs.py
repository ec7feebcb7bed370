"""GPU benchmarks' runs as threads of one process (STREAMS=1) train what each trains alone."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pytest  # noqa: E402
import torch  # noqa: E402
from gpu_runs import RunJob, opened, pool  # noqa: E402  (a script folder, not a package)

from pflkit.sdk.run_config import (  # noqa: E402
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)

CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])


def job(seed: int, folder: Path, device: str) -> RunJob[int]:
    config = SimConfig(
        seed=seed, rounds=1, eval_interval=1, checkpoint_interval=1,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=4, alpha=0.5),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("local"),
        training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=16),
        execution=ExecutionConfig(executor="batched", device=device))
    return RunJob(seed, config, folder / f"seed{seed}", math.inf, False)


def one_round(job: RunJob[int]) -> dict[str, torch.Tensor]:
    """A round of Local-only: every client starts from its own seeded model (the global RNG)."""
    with opened(job) as sim:
        sim.run_round()
        return {f"{client}/{name}": tensor for client in range(4)
                for name, tensor in sim.store.load(client, 0).tensors.items()}


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_runs_in_threads_side_by_side_train_as_each_alone(tmp_path, device):
    """On CUDA each thread's run is on its own stream, its steps captured as CUDA graphs."""
    alone = {s: one_round(job(s, tmp_path / "alone", device)) for s in range(4)}
    with pool(False, 4) as threads:
        together = list(threads.map(one_round, [job(s, tmp_path / "threads", device)
                                                for s in range(4)]))
    for seed, states in enumerate(together):
        assert states.keys() == alone[seed].keys()
        for key, tensor in states.items():  # on CUDA: cuDNN may pick other kernels per run
            torch.testing.assert_close(tensor, alone[seed][key], rtol=0 if device == "cpu"
                                       else 1e-4, atol=0 if device == "cpu" else 1e-5)
