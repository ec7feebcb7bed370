"""The executor seam: config names an executor and a device; bad names fail clearly."""

import pytest
import torch
from typer.testing import CliRunner

from pflkit.sdk.device import DeviceError, resolve_device
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    ConfigError,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator_cli import app


def config(**execution):
    return SimConfig(
        seed=1, rounds=2, eval_interval=2, checkpoint_interval=2,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=6, alpha=0.5, min_size=20,
                        test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=3, epochs=1, batch_size=32, lr=0.05),
        execution=ExecutionConfig(**execution),
    )


def test_execution_settings_round_trip_through_config_toml(tmp_path):
    cfg = config(executor="ray", device="auto", precision="bf16", num_cpus=2.0)
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    assert "[execution]" in path.read_text()
    assert SimConfig.load(path) == cfg


@pytest.mark.parametrize("key, value, message", [
    ("device", "gpu", "device must be auto | cpu | cuda | cuda:N"),
    ("precision", "fp16", "precision must be one of fp32, bf16"),
    ("num_cpus", 0, r"must be in \(0, 1024\], got 0"),
])
def test_bad_execution_settings_name_the_problem(tmp_path, key, value, message):
    path = tmp_path / "bad.toml"
    path.write_text(f"[execution]\n{key} = {value!r}\n".replace("'", '"'))
    with pytest.raises(ConfigError, match=rf"^execution\.{key}: " + message):
        SimConfig.load(path)


def test_unknown_executor_is_refused_with_the_config_naming_the_known_ones(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[execution]\nexecutor = "threads"\n')
    with pytest.raises(ConfigError, match=r"^execution\.executor: unknown executor 'threads' "
                                          r"\(known: sequential, batched, ray\)$"):
        SimConfig.load(path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_a_gpu_is_one_clear_line(tmp_path):
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")
    result = CliRunner().invoke(app, ["--out", str(tmp_path / "r"), "--dataset", "digits",
                                      "--device", "cuda:0", "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(
        "error: execution.device: device 'cuda:0': this machine has no CUDA GPU")
    assert not (tmp_path / "r").exists()


def test_resume_can_move_a_run_to_another_executor_setting(tmp_path):
    runner = CliRunner()
    out = tmp_path / "run"
    first = runner.invoke(app, ["--out", str(out), "--dataset", "digits", "--clients", "4",
                                "--model", "twonn", "--rounds", "1", "--clients-per-round", "2",
                                "--epochs", "1", "--quiet", "--device", "cpu"])
    assert first.exit_code == 0, first.output
    resumed = runner.invoke(app, ["--resume", str(out), "--precision", "bf16", "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert 'precision = "bf16"' in (out / "config.toml").read_text()
