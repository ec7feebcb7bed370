"""pfl-server's floor on DP-FedAvg, in-process: its settings make runs at least this private.

A run's [aggregation] meets the operator's dp_* settings (AggregationConfig.at_least): the
round really runs with the stricter noise and clip norm, its metrics and the run's status say
so, and a run the floor cannot compare with is refused when it is created (422).
"""

from __future__ import annotations

import pytest
from server_harness import run_toml
from service_harness import current, global_of, service_for
from typer.testing import CliRunner

from pflkit.sdk.privacy_accounting import epsilon
from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.errors import Invalid
from pflkit.server.simulator_cli import app

DP_RUN = "[aggregation]\ndp_clip_norm = {clip}\ndp_noise_multiplier = {z}\n"


def close_a_round(service) -> dict:
    """Every sampled client sends global + 1; the status after the round closed."""
    status, rnd = current(service)
    start = global_of(service, status["global_hash"])
    for cid in rnd["sampled"]:
        service.uploads.accept(cid, status["id"], 0, 10,
                              state_to_bytes({k: v + 1 for k, v in start.items()}))
    service.rounds.tick()
    return current(service)[0]


@pytest.mark.parametrize("run, server, applied", [
    ((0.5, 1.0), (0.3, 2.0), (0.3, 2.0)),  # the server's smaller clip and larger noise
    ((0.2, 3.0), (0.3, 2.0), (0.2, 3.0)),  # the run's, stricter than the server's
    (None, (0.3, 2.0), (0.3, 2.0)),  # a run without DP gets the server's
])
def test_the_stricter_dp_setting_applies_and_the_status_says_so(tmp_path, run, server, applied):
    extra = "" if run is None else DP_RUN.format(clip=run[0], z=run[1])
    service, _ = service_for(tmp_path, None, per_round=3, run_extra=extra,
                             dp_clip_norm=server[0], dp_noise_multiplier=server[1],
                             dp_max_epsilon=900.0)
    status = close_a_round(service)
    assert status["rounds_done"] == 1
    clip, z = applied
    spent = epsilon(z, 3, 3, 1, 1e-5)
    assert status["history"][0]["metrics"]["dp_noise_multiplier"] == z
    assert status["history"][0]["metrics"]["dp_epsilon"] == spent
    assert status["privacy"] == {
        "epsilon": spent, "delta": 1e-5, "rounds": 1, "noise_multiplier": z,
        "target_epsilon": None, "clip_norm": clip,
        "max_epsilon": 900.0, "epsilon_left": 900.0 - spent,
        "accountant": "RDP (dp-accounting), fixed-size sampling without replacement, replace-one"}


def test_a_run_without_dp_on_a_server_without_a_dp_floor_has_no_privacy(tmp_path):
    service, _ = service_for(tmp_path, None, per_round=3)
    status = close_a_round(service)
    assert status["privacy"] is None and "dp_epsilon" not in status["history"][0]["metrics"]


@pytest.mark.parametrize("run, message", [
    ("[aggregation]\ndp_clip_norm = 0.5\ndp_target_epsilon = 3.0\n",
     "run config: this server's floor sets dp_noise_multiplier"),
    ("[aggregation]\nrule = \"median\"\n", "run config: rule: the run asks for 'median'"),
])
def test_a_run_the_floor_cannot_meet_is_refused_when_created(tmp_path, run, message):
    service, _ = service_for(tmp_path, None, per_round=3, dp_clip_norm=0.3,
                             dp_noise_multiplier=2.0)
    service.runs.transition(current(service)[0]["id"], "stop")
    with pytest.raises(Invalid, match=message):
        service.runs.create((tmp_path / "run.toml").read_text() + run)


@pytest.mark.parametrize("run, floor", [
    ("[aggregation]\ndp_clip_norm = 0.5\ndp_noise_multiplier = 1.0\n", {}),  # the run's DP
    ("", {"dp_clip_norm": 0.3, "dp_noise_multiplier": 2.0}),  # the operator's floor forces it
], ids=["run", "floor"])
def test_dp_on_scaffold_is_refused_when_created(tmp_path, run, floor):
    """SCAFFOLD's control deltas have no global copy to clip against: 422, not a dead close."""
    service, _ = service_for(tmp_path, None, per_round=3, **floor)
    service.runs.transition(current(service)[0]["id"], "stop")
    with pytest.raises(Invalid, match=r"^run config: aggregation.dp_clip_norm: the method "
                       r"uploads \d+ tensor\(s\) with no global counterpart"):
        service.runs.create(run_toml("scaffold", rounds=2, per_round=3) + run)


def test_pfl_sim_refuses_dp_on_scaffold_before_the_run(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(run_toml("scaffold", rounds=2) + DP_RUN.format(clip=0.5, z=1.0))
    result = CliRunner().invoke(app, ["--config", str(config), "--out", str(tmp_path / "out"),
                                      "--quiet"])
    assert result.exit_code == 2
    assert result.output.startswith("error: aggregation.dp_clip_norm: the method uploads ")
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
