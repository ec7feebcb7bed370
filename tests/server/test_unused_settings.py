"""One declaration per setting: a key the chosen mode does not use is refused, not ignored.

``data.alpha`` under ``kind = "iid"``, ``execution.conv_gemm`` with the sequential executor,
``execution.tf32`` on ``device = "cpu"``, ``aggregation.trim_fraction`` under ``rule = "mean"``,
``aggregation.dp_delta`` without DP and the Ray keys with another executor were each documented
next to their key and silently ignored. Only a value other than the default is refused, so a
run's ``config.toml`` (which lists every key) still loads, and a config with ``device = "auto"``
keeps its CUDA settings for the GPU box it may run on (docs/simulator.md).
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pflkit.sdk.config_toml import apply_overrides, parse_toml
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.server.settings import ServerSettings
from pflkit.server.simulator_cli import app

RUN = """
rounds = 2
[data]
dataset = "digits"
num_clients = 4
[model]
name = "twonn"
[training]
clients_per_round = 2
"""


def load(*overrides: str) -> SimConfig:
    return SimConfig.from_mapping(apply_overrides(parse_toml(RUN), overrides))


@pytest.mark.parametrize(("overrides", "message"), [
    (["data.kind=iid", "data.alpha=0.5"], 'data: alpha = 0.5 has no effect: kind = "iid" (it '
     "applies to kind = dirichlet); remove it (or give its default, 0.3)"),
    (["data.shards_per_client=3"], 'data: shards_per_client = 3 has no effect: kind = '
     '"dirichlet" (it applies to kind = shards); remove it (or give its default, 2)'),
    (["data.kind=shards", "data.min_size=20"], 'data: min_size = 20 has no effect: kind = '
     '"shards" (it applies to kind = dirichlet | natural); remove it (or give its default, 10)'),
    (["training.fraction=0.5"], "training: fraction = 0.5 has no effect: clients_per_round sets "
     "the sample's size; remove it (or give its default, 0.2)"),
    (["aggregation.trim_fraction=0.2"], 'aggregation: trim_fraction = 0.2 has no effect: rule = '
     '"mean" (only "trimmed_mean" trims); remove it (or give its default, 0.1)'),
    (["aggregation.rule=median", "aggregation.trim_fraction=0.2"], "aggregation: trim_fraction"
     ' = 0.2 has no effect: rule = "median" (only "trimmed_mean" trims); remove it (or give '
     "its default, 0.1)"),
    (["aggregation.dp_delta=1e-6"], "aggregation: dp_delta = 1e-06 has no effect: DP-FedAvg is "
     "off (dp_clip_norm unset); remove it (or give its default, 1e-05)"),
    (["aggregation.dp_clip_norm=1.0", "aggregation.dp_noise_multiplier=1.0",
      "aggregation.dp_clip_learning_rate=0.5"], "aggregation: dp_clip_learning_rate = 0.5 has "
     "no effect: adaptive clipping is off (dp_adaptive_quantile unset); remove it (or give its "
     "default, 0.2)"),
    (["aggregation.secagg_neighbours=4"], "aggregation: secagg_neighbours = 4 has no effect: "
     "secagg = false; remove it"),
    (["execution.ray_address=auto"], "execution: ray_address = 'auto' has no effect: executor = "
     '"sequential" (only the Ray executor uses it); remove it'),
    (["execution.executor=batched", "execution.num_cpus=2"], "execution: num_cpus = 2.0 has no "
     'effect: executor = "batched" (only the Ray executor uses it); remove it (or give its '
     "default, 1.0)"),
    (["execution.conv_gemm=true"], "execution: conv_gemm = true has no effect: executor = "
     '"sequential" (only the batched executor uses it); remove it (or give its default, false)'),
    (["execution.executor=ray", "execution.batch_clients=8"], "execution: batch_clients = 8 has "
     'no effect: executor = "ray" (only the batched executor uses it); remove it'),
    (["execution.compile_loss=true"], "execution: compile_loss = true has no effect: executor = "
     '"sequential" (only the batched executor uses it); remove it (or give its default, false)'),
    (["execution.executor=batched", "execution.tf32=true"], "execution: tf32 = true has no "
     'effect: device = "cpu" (only a CUDA device uses it); remove it (or give its default, '
     "false)"),
    (["execution.executor=batched", "execution.cuda_graphs=false"], "execution: cuda_graphs = "
     'false has no effect: device = "cpu" (only a CUDA device uses it); remove it (or give its '
     "default, true)"),
])
def test_a_setting_its_mode_does_not_use_is_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(*overrides)
    assert str(refused.value) == message


@pytest.mark.parametrize("overrides", [
    ["data.kind=iid", "data.alpha=0.3", "data.min_size=10", "data.shards_per_client=2"],
    ["data.kind=shards", "data.shards_per_client=3"],
    ["data.kind=dirichlet", "data.alpha=0.5", "data.min_size=20"],
    ["aggregation.rule=trimmed_mean", "aggregation.trim_fraction=0.2"],
    ["aggregation.dp_clip_norm=1.0", "aggregation.dp_noise_multiplier=1.0",
     "aggregation.dp_delta=1e-6", "aggregation.dp_adaptive_quantile=0.5",
     "aggregation.dp_clip_learning_rate=0.5"],
    ["aggregation.secagg=true", "aggregation.secagg_threshold=0.7",
     "aggregation.secagg_neighbours=4", "aggregation.secagg_clip_range=2.0"],
    ["execution.executor=ray", "execution.ray_address=auto", "execution.num_cpus=2",
     "execution.workers=2", "execution.ray_connect_timeout=5"],
    ["execution.executor=batched", "execution.conv_gemm=true", "execution.batch_clients=8",
     "execution.compile_loss=true"],
    ["execution.device=auto", "execution.tf32=true", "execution.cudnn_benchmark=true",
     "execution.executor=batched", "execution.cuda_graphs=false"],
])
def test_a_setting_its_mode_uses_or_a_default_loads(overrides: list[str]) -> None:
    config = load(*overrides)
    assert SimConfig.from_toml(config.to_toml()) == config  # what a run's config.toml holds


def test_resume_on_another_executor_names_the_key_to_drop(tmp_path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    batched = load("execution.executor=batched", "execution.conv_gemm=true")
    (run / "config.toml").write_text(batched.to_toml())
    runner = CliRunner()
    moved = runner.invoke(app, ["--resume", str(run), "--executor", "sequential", "--quiet"])
    assert moved.exit_code == 2, moved.output
    assert moved.output.strip() == (
        'error: execution: conv_gemm = true has no effect: executor = "sequential" (only the '
        "batched executor uses it); remove it (or give its default, false)")
    assert (run / "config.toml").read_text() == batched.to_toml()


def test_a_server_floor_setting_its_rule_does_not_use_is_refused(tmp_path) -> None:
    """pfl-server's floor is the same [aggregation]: a dp_delta without DP would be ignored."""
    with pytest.raises(ValueError, match=r"dp_delta = 1e-06 has no effect: DP-FedAvg is off"):
        ServerSettings(data_dir=tmp_path, admin_token="t" * 40, dp_delta=1e-6)
