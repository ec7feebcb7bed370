"""Precision and TF32 where the device is set (issue 22 item 3), checked on the fake CUDA device."""

import pytest
import torch
from fake_cuda import FakeCuda

from pflkit.sdk.builder import build_run
from pflkit.sdk.device import DeviceError, use_device
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.server.executors import make_executor

SMALL = """rounds = 1
[data]
dataset = "digits"
num_clients = 4
[model]
name = "twonn"
[algorithm]
name = "fedavg"
[execution]
"""


@pytest.fixture
def tf32_flags():
    """The process-wide TF32 and autotuner flags, restored after the test."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
           torch.backends.cudnn.benchmark)
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
     torch.backends.cudnn.benchmark) = old


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_bf16_on_a_cuda_device_is_refused_in_one_line_naming_the_measurement(device):
    with pytest.raises(ConfigError) as err:
        SimConfig.from_toml(f'[execution]\ndevice = "{device}"\nprecision = "bf16"\n')
    message = str(err.value)
    assert "\n" not in message
    assert 'precision "bf16" is refused on a CUDA device' in message
    assert "0.745 s" in message and "H100" in message
    assert SimConfig.from_toml('[execution]\nprecision = "bf16"\n').execution.precision == "bf16"


def test_bf16_with_auto_is_refused_once_auto_resolves_to_a_gpu():
    config = SimConfig.from_toml(SMALL + 'device = "auto"\nprecision = "bf16"\n')
    federation, algorithm = build_run(config)
    assert make_executor(config.execution, federation, algorithm).autocast == torch.bfloat16
    with FakeCuda(), pytest.raises(DeviceError, match="refused on a CUDA device"):
        make_executor(config.execution, federation, algorithm)
    assert use_device(torch.device("cpu"), "bf16") == torch.bfloat16


@pytest.mark.parametrize("tf32, autotune", [(False, False), (True, False), (True, True),
                                            (False, True)])
def test_tf32_and_the_autotuner_are_what_the_config_says_on_a_cuda_device(tf32_flags, tf32,
                                                                         autotune):
    config = SimConfig.from_toml(SMALL + f'device = "cuda"\ntf32 = {str(tf32).lower()}\n'
                                 f'cudnn_benchmark = {str(autotune).lower()}\n')
    assert config.execution.tf32 is tf32 and config.execution.cudnn_benchmark is autotune
    federation, algorithm = build_run(config)
    # cuDNN's own default is TF32 on: off must be set, not assumed
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = not tf32
    torch.backends.cudnn.benchmark = not autotune
    with FakeCuda():
        make_executor(config.execution, federation, algorithm)
    assert torch.backends.cuda.matmul.allow_tf32 is tf32
    assert torch.backends.cudnn.allow_tf32 is tf32
    assert torch.backends.cudnn.benchmark is autotune


@pytest.mark.parametrize("name", ["cuda:99999999999999999999", "cuda:01", "cuda:10000",
                                  "cuda:-1", "cuda:"])
def test_a_cuda_index_out_of_its_range_is_one_line_not_a_traceback(name):
    """torch.device raised RuntimeError ("Could not parse device index") past the pattern."""
    with pytest.raises(ConfigError, match=r"execution\.device: .*cuda:N \(N a GPU's index"):
        SimConfig.from_mapping({"rounds": 1, "execution": {"device": name}})
