"""``device = "cuda"`` on a machine without a GPU: the device plumbing under tests/fake_cuda.py.

The fake device computes on the CPU, so a run on it must equal the CPU run bit for bit; what it
checks is that no tensor on the device reaches numpy or mixes with a host tensor, as real CUDA
refuses (tests/server/test_gpu.py runs the same paths on a real GPU, ``make test-gpu``).
"""

import numpy as np
import pytest
import torch
from device_runs import device_config
from fake_cuda import FakeCuda, on_device

from pflkit.sdk.builder import build_run
from pflkit.sdk.data.federation import partition_table
from pflkit.sdk.device import federation_to
from pflkit.sdk.tensorio import load_state
from pflkit.server.simulator import Simulation


def test_the_fake_device_refuses_what_cuda_refuses():
    with FakeCuda():
        assert torch.cuda.is_available()
        x = torch.ones(3, 2).to("cuda")
        model = torch.nn.Linear(2, 2).to("cuda")
        y = model(x)
        assert on_device(y) and y.device == torch.device("cuda", 0)
        with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
            y.detach().numpy()
        with pytest.raises(TypeError, match="to numpy"):
            np.asarray(y.detach())
        with pytest.raises(RuntimeError, match="same device"):
            y + torch.ones(3, 2)
        host = y.detach().cpu()
        assert not on_device(host) and host.numpy().shape == (3, 2)
        assert x.to("cuda") is x  # already there: the tensor itself
        assert not on_device(model.cpu().weight)


def test_the_class_histogram_of_a_federation_on_the_device_is_read_on_the_host():
    """The crash of issue 22 on an H100: ``.numpy()`` of each client's counts on CUDA."""
    federation, _ = build_run(device_config("fedavg", "", "cpu", "sequential", eval_interval=1))
    with FakeCuda():
        on_gpu = federation_to(federation, "cuda")
        assert on_device(on_gpu.clients[0].train.x)
        histogram = on_gpu.class_histogram()
        table = partition_table(on_gpu)
    np.testing.assert_array_equal(histogram, federation.class_histogram())
    assert table == partition_table(federation)


@pytest.mark.parametrize(("algorithm", "executor", "params"), [
    ("pflmoe", "sequential", "epochs = 1"),  # post-federation stage, class-weighted scores
    ("superfed_mm", "batched", "start_fraction = 0.5"),  # stacked weights, vmap, mixing
])
def test_a_cuda_run_stopped_and_resumed_equals_the_cpu_run(tmp_path, algorithm, executor,
                                                           params):
    """Every stage: partition table and plot, rounds, evaluation, checkpoints, resume, report."""
    def config(device):
        return device_config(algorithm, params, device, executor, eval_interval=1)

    want = Simulation(config("cpu"), tmp_path / "cpu", progress=False).run()
    with FakeCuda():
        stopped = Simulation(config("cuda"), tmp_path / "cuda", progress=False)
        assert on_device(stopped.federation.test.x)
        stopped.run_round()
        stopped.close()
        got = Simulation.resume(tmp_path / "cuda", progress=False).run()
    for key, value in want.global_state.items():
        assert not on_device(got.global_state[key])
        assert torch.equal(got.global_state[key], value), key
    assert got.final == want.final
    saved = load_state(tmp_path / "cuda" / "global" / "latest.safetensors")
    assert all(torch.equal(saved[k], v) for k, v in want.global_state.items())
    assert (tmp_path / "cuda" / "plots" / "partition.png").exists()
