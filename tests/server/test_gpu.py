"""Device-sensitive paths on CUDA vs the CPU (``make test-gpu``; skipped without a GPU).

Tolerance: after one round, every global weight on the GPU is within rtol 1e-4 / atol 1e-5 of
the CPU run (TF32 off: with TF32 matmuls and convolutions, differences reach ~1e-3), and the
final evaluation's mean accuracies agree within 0.02 (one prediction in 50 may flip).
"""

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

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

ALGORITHMS = [("fedavg", {}), ("fedprox", {}), ("fedrod_hyper", {"ft_epochs": 1}),
              ("fedper", {}), ("apfl", {}), ("ditto", {}), ("scaffold", {}),
              ("superfed_mm", {}), ("superfed_lm", {}), ("pflmoe", {"epochs": 2})]


def config(algorithm, params, device):
    return SimConfig(
        seed=4, rounds=2, eval_interval=2, checkpoint_interval=2,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=4, alpha=0.5, min_size=20,
                        test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm, params),
        training=TrainingConfig(clients_per_round=2, epochs=1, batch_size=16, lr=0.05),
        execution=ExecutionConfig(device=device),
    )


@pytest.fixture(autouse=True)
def no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("algorithm, params", ALGORITHMS)
def test_a_run_on_cuda_matches_the_cpu_run(tmp_path, algorithm, params):
    cpu = Simulation(config(algorithm, params, "cpu"), tmp_path / "cpu", progress=False)
    gpu = Simulation(config(algorithm, params, "cuda"), tmp_path / "gpu", progress=False)
    assert gpu.federation.test.x.is_cuda
    cpu.run_round()
    gpu.run_round()
    for key, value in cpu.coordinator.global_state.items():
        on_gpu = gpu.coordinator.global_state[key]
        assert on_gpu.device.type == "cpu"  # states come back at the aggregation boundary
        torch.testing.assert_close(on_gpu, value, rtol=1e-4, atol=1e-5, msg=key)
    a, b = cpu.run().final, gpu.run().final
    assert abs(a["global_model"]["top1"] - b["global_model"]["top1"]) <= 0.02
    for name in ("own_top1_mean", "class_weighted_mean"):
        assert abs(a["clients"]["summary"][name] - b["clients"]["summary"][name]) <= 0.02
