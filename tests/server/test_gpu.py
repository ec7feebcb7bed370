"""Device-sensitive paths on CUDA vs the CPU (``make test-gpu``; skipped without a GPU).

Tolerance: after one round, every global weight on the GPU is within rtol 1e-4 / atol 1e-5 of
the CPU run (TF32 off, pflkit's default: with TF32 matmuls and convolutions, differences reach
~1e-3), and the final evaluation's mean accuracies agree within 0.02 (one prediction in 50 may
flip). The same paths run on the CPU under tests/fake_cuda.py (tests/server/test_fake_cuda.py).
"""

import pytest
import torch
from device_runs import device_config

from pflkit.sdk.algorithms.aggregators import WeightedMean
from pflkit.sdk.device import DeviceError
from pflkit.sdk.run_config import ExecutionConfig
from pflkit.server.host_results import cpu_stacks
from pflkit.server.simulator import Simulation

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

ALGORITHMS = [("fedavg", ""), ("fedprox", ""), ("fedrod_hyper", "ft_epochs = 1"),
              ("fedper", ""), ("lg_fedavg", ""), ("fedrep", ""), ("local", ""), ("apfl", ""),
              ("ditto", ""), ("scaffold", ""), ("superfed_mm", ""), ("superfed_lm", ""),
              ("pflmoe", "epochs = 2"), ("pfedme", "")]
BATCHED = ["fedavg", "fedprox", "fedrod_hyper", "superfed_mm", "superfed_lm", "fedper",
           "lg_fedavg", "fedrep", "local", "ditto", "scaffold", "apfl", "pfedme"]
CASES = [(a, p, "sequential") for a, p in ALGORITHMS] + \
        [(a, p, "batched") for a, p in ALGORITHMS if a in BATCHED]

@pytest.fixture(autouse=True)
def tf32_flags():
    """The process-wide TF32 and autotuner flags, restored after each test (executors set them)."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
           torch.backends.cudnn.benchmark)
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
     torch.backends.cudnn.benchmark) = old


def assert_close_runs(cpu, gpu):
    a, b = cpu.run().final, gpu.run().final
    assert abs(a["global_model"]["top1"] - b["global_model"]["top1"]) <= 0.02
    for name in ("own_top1_mean", "class_weighted_mean"):
        assert abs(a["clients"]["summary"][name] - b["clients"]["summary"][name]) <= 0.02


@pytest.mark.parametrize("algorithm, params, executor", CASES)
def test_a_run_on_cuda_matches_the_cpu_run(tmp_path, algorithm, params, executor):
    cpu = Simulation(device_config(algorithm, params, "cpu", executor), tmp_path / "cpu",
                     progress=False)
    torch.backends.cudnn.allow_tf32 = True  # cuDNN's default: the executor must turn it off
    torch.backends.cudnn.benchmark = True  # the executor turns the autotuner off by default
    gpu = Simulation(device_config(algorithm, params, "cuda", executor), tmp_path / "gpu",
                     progress=False)
    assert gpu.federation.test.x.is_cuda
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert not torch.backends.cudnn.benchmark
    cpu.run_round()
    gpu.run_round()
    for key, value in cpu.coordinator.global_state.items():
        on_gpu = gpu.coordinator.global_state[key]
        assert on_gpu.device.type == "cpu"  # states come back at the aggregation boundary
        torch.testing.assert_close(on_gpu, value, rtol=1e-4, atol=1e-5, msg=key)
    assert_close_runs(cpu, gpu)


@pytest.mark.parametrize("algorithm, params", [("pflmoe", "epochs = 2"), ("superfed_mm", "")])
def test_a_cpu_run_resumed_on_cuda_matches_the_cpu_run(tmp_path, algorithm, params):
    cpu = Simulation(device_config(algorithm, params, "cpu", "batched"), tmp_path / "cpu",
                     progress=False)
    moved = Simulation(device_config(algorithm, params, "cpu", "batched"), tmp_path / "moved",
                       progress=False)
    moved.run_round()
    moved.close()
    gpu = Simulation.resume(tmp_path / "moved", progress=False,
                            execution=ExecutionConfig(executor="batched", device="cuda"))
    assert 'device = "cuda"' in (tmp_path / "moved" / "config.toml").read_text()
    assert_close_runs(cpu, gpu)


def test_tf32_and_bf16_on_cuda(tmp_path):
    tf32 = device_config("fedavg", "", "cuda").replace(
        execution=ExecutionConfig(device="cuda", tf32=True, cudnn_benchmark=True))
    Simulation(tf32, tmp_path / "tf32", progress=False).close()
    assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cudnn.benchmark
    bf16 = tf32.replace(execution=ExecutionConfig(device="auto", precision="bf16"))
    with pytest.raises(DeviceError, match="measured slower than fp32"):
        Simulation(bf16, tmp_path / "bf16", progress=False)


@pytest.mark.parametrize("algorithm, params", [("fedavg", ""), ("fedprox", ""),
                                               ("fedrod_hyper", "ft_epochs = 1"),
                                               ("superfed_mm", ""), ("fedrep", ""),
                                               ("ditto", ""), ("scaffold", ""),
                                               ("apfl", ""), ("pfedme", "")])
def test_cuda_graph_replays_do_what_eager_steps_do(tmp_path, monkeypatch, algorithm, params):
    """The batched executor's captured steps (the default on CUDA) equal its eager steps."""
    captures = []
    capture = torch.cuda.graph

    def counted(*args, **kwargs):
        captures.append(args)
        return capture(*args, **kwargs)

    runs = {}
    for graphs in (False, True):
        config = device_config(algorithm, params, "cuda", "batched")
        config = config.replace(execution=ExecutionConfig(executor="batched", device="cuda",
                                                          cuda_graphs=graphs))
        with monkeypatch.context() as patch:
            patch.setattr(torch.cuda, "graph", counted)
            sim = Simulation(config, tmp_path / str(graphs), progress=False)
            sim.run_round()
        runs[graphs] = sim.coordinator.global_state
        assert bool(captures) is graphs  # eager: nothing captured; default: every long segment
    for key, value in runs[False].items():
        torch.testing.assert_close(runs[True][key], value, rtol=1e-6, atol=1e-7, msg=key)


def test_results_leave_the_gpu_through_pinned_memory():
    """cpu_stacks copies without waiting per tensor, then syncs once: every value must land."""
    states = [{"w": torch.full((256, 256), float(k), device="cuda"),
               "b": torch.arange(7, device="cuda") + k} for k in range(50)]
    stacks = cpu_stacks(states)
    assert stacks["w"].is_pinned() and not stacks["w"].is_cuda
    assert torch.equal(stacks["w"][:, 0, 0], torch.arange(50, dtype=torch.float32))
    assert torch.equal(stacks["b"], torch.stack([s["b"].cpu() for s in states]))


def test_a_stack_folded_on_the_gpu_gives_the_cpu_fold_bit_for_bit():
    """WeightedMean folds GPU stacks there (issue 22): same float64 products and adds, in order."""
    gen = torch.Generator().manual_seed(3)
    stacks = {"w": torch.randn(300, 64, 33, generator=gen), "b": torch.randn(300, 7, generator=gen)}
    weights = torch.randint(1, 500, (300,), generator=gen).double().tolist()
    first = {n: torch.randn(t.shape[1:], generator=gen) for n, t in stacks.items()}
    means = []
    for device in ("cpu", "cuda"):
        mean = WeightedMean({n: torch.zeros(t.shape[1:]) for n, t in stacks.items()})
        mean.add(17.0, first)  # a running sum on the CPU before the stack
        mean.add_stacked(weights, {n: t.to(device) for n, t in stacks.items()})
        means.append(mean.result())
    assert all(not t.is_cuda for t in means[1].values())
    assert all(torch.equal(means[0][n], means[1][n]) for n in stacks)


def assert_same_round_and_run(cpu, gpu):
    """One round's global weights within the module's tolerance, then the whole runs."""
    cpu.run_round()
    gpu.run_round()
    for key, value in cpu.coordinator.global_state.items():
        torch.testing.assert_close(gpu.coordinator.global_state[key], value, rtol=1e-4,
                                   atol=1e-5, msg=key)
    assert_close_runs(cpu, gpu)


@pytest.mark.parametrize("conv_gemm", [False, True])
@pytest.mark.parametrize("algorithm, params", [("fedavg", ""), ("superfed_mm", "")])
def test_a_convolutional_run_on_cuda_matches_the_cpu_run(tmp_path, algorithm, params,
                                                         conv_gemm):
    """TwoCNN batched on CUDA, cuDNN's grouped convolutions or patch GEMMs, vs the CPU run."""
    cpu = Simulation(device_config(algorithm, params, "cpu", "batched", model="twocnn"),
                     tmp_path / "cpu", progress=False)
    config = device_config(algorithm, params, "cuda", "batched", model="twocnn")
    gpu = Simulation(config.replace(execution=ExecutionConfig(
        executor="batched", device="cuda", conv_gemm=conv_gemm)), tmp_path / "gpu",
        progress=False)
    assert_same_round_and_run(cpu, gpu)


@pytest.mark.parametrize("algorithm", ["fedavg", "superfed_mm"])
def test_a_compiled_loss_on_cuda_matches_the_cpu_run(tmp_path, algorithm):
    """``execution.compile_loss`` on CUDA (Triton kernels, captured as CUDA graphs) vs the CPU."""
    cpu = Simulation(device_config(algorithm, "", "cpu", "batched"), tmp_path / "cpu",
                     progress=False)
    config = device_config(algorithm, "", "cuda", "batched")
    gpu = Simulation(config.replace(execution=ExecutionConfig(
        executor="batched", device="cuda", compile_loss=True)), tmp_path / "gpu", progress=False)
    assert_same_round_and_run(cpu, gpu)
