"""A robust rule, DP-FedAvg or SecAgg would replace a method's own server step: refused first.

SCAFFOLD with ``rule = "median"`` trained a whole round, then died at the close (KeyError on a
control delta); pFedMe's beta blend was silently dropped by the median rule and by DP-FedAvg.
pfl-sim (exit 2, nothing written) and pfl-server (422 at run creation) now refuse such a run.
"""

from __future__ import annotations

import pytest
from server_harness import run_toml
from service_harness import current, service_for
from typer.testing import CliRunner

from pflkit.server.errors import Invalid
from pflkit.server.simulator_cli import app

MEDIAN = '[aggregation]\nrule = "median"\n'
DP = "[aggregation]\ndp_clip_norm = 0.5\ndp_noise_multiplier = 1.0\n"
SECAGG = "[aggregation]\nsecagg = true\n"
BLEND = "beta = 0.5\n"


def sim(tmp_path, config_text: str):
    config = tmp_path / "run.toml"
    config.write_text(config_text)
    return CliRunner().invoke(app, ["--config", str(config), "--out", str(tmp_path / "out"),
                                    "--quiet"])


@pytest.mark.parametrize("method, params, section, setting, step", [
    ("scaffold", "", MEDIAN, "rule", "ScaffoldAggregator"),
    ("pfedme", BLEND, MEDIAN, "rule", "BlendedMean"),
    ("pfedme", BLEND, DP, "dp_clip_norm", "BlendedMean"),
])
def test_pfl_sim_refuses_a_rule_that_replaces_the_methods_server_step(
        tmp_path, method, params, section, setting, step):
    result = sim(tmp_path, run_toml(method, rounds=2, params=params) + section)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: aggregation.{setting}: it would replace the "
                                    f"method's own server step ({step})")
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("method, params", [("fedavg", ""), ("pfedme", "beta = 1.0\n")])
def test_a_method_whose_server_step_is_the_mean_takes_the_median(tmp_path, method, params):
    result = sim(tmp_path, run_toml(method, rounds=1, params=params) + MEDIAN)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "final.json").exists()


@pytest.mark.parametrize("method, params, section, setting", [
    ("scaffold", "", MEDIAN, "rule"),
    ("pfedme", BLEND, SECAGG, "secagg"),
])
def test_pfl_server_refuses_it_when_the_run_is_created(tmp_path, method, params, section,
                                                       setting):
    service, _ = service_for(tmp_path, None, per_round=3)
    service.runs.transition(current(service)[0]["id"], "stop")
    with pytest.raises(Invalid, match=rf"^run config: aggregation.{setting}: it would replace "
                       r"the method's own server step"):
        service.runs.create(run_toml(method, rounds=2, per_round=3, params=params) + section)
