"""pfl-sim with personalize_on = "executorch": every client's stage runs on its training program."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch
from typer.testing import CliRunner

from pflkit.export.training_program import relative_difference
from pflkit.sdk.run_config import SimConfig
from pflkit.sdk.state_store import client_state_from_bytes
from pflkit.server.simulator import Simulation
from pflkit.server.simulator_cli import app as sim_app


def on_device(config: SimConfig) -> SimConfig:
    return dataclasses.replace(config, execution=dataclasses.replace(
        config.execution, personalize_on="executorch"))


def personalized_states(run) -> dict[int, object]:
    return {int(p.stem): client_state_from_bytes(p.read_bytes())
            for p in (run / "personalized").glob("*.safetensors")}


def test_every_client_is_personalized_on_the_program_like_eager(config_for, tmp_path):
    config = config_for("superfed_mm", ft_epochs=1, start_fraction=0.5)
    eager = Simulation(config, tmp_path / "eager", progress=False).run()
    # The finished run's stage again, on the programs: --resume with the other engine.
    shutil.copytree(tmp_path / "eager", tmp_path / "device")
    execution = on_device(config).execution
    device = Simulation.resume(tmp_path / "device", progress=False, execution=execution).run()
    assert "personalize_on = \"executorch\"" in (tmp_path / "device" / "config.toml").read_text()
    want, got = personalized_states(tmp_path / "eager"), personalized_states(tmp_path / "device")
    assert sorted(got) == sorted(want) == [0, 1, 2, 3]
    for cid, state in want.items():
        assert relative_difference(got[cid].tensors, state.tensors) <= 1e-4, cid
        assert got[cid].meta["fine_tuned_round"] == state.meta["fine_tuned_round"] == 2
        assert got[cid].meta["lambda"] == state.meta["lambda"], cid
    summary = [r.final["clients"]["summary"]["own_top1_mean"] for r in (eager, device)]
    assert summary[0] == pytest.approx(summary[1], abs=1e-9)


def test_a_method_without_an_on_device_stage_is_refused_before_training(config_for, tmp_path):
    config = on_device(config_for("fedavg_ft"))
    with pytest.raises(ValueError, match="no post-federation stage a device can run"):
        Simulation(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "global").exists()


def test_cli_flag_and_its_errors(tmp_path):
    args = ["--dataset", "digits", "--clients", "2", "--model", "twonn", "--rounds", "1",
            "--quiet", "--out", str(tmp_path / "run")]
    refused = CliRunner().invoke(sim_app, [*args, "--algorithm", "pflmoe", "--param",
                                           "gate_optimizer=adam", "--personalize-on",
                                           "executorch"])
    assert refused.exit_code == 2 and "SGD only" in refused.output
    unknown = CliRunner().invoke(sim_app, [*args, "--personalize-on", "gpu"])
    assert unknown.exit_code == 2
    assert "execution.personalize_on: unknown engine 'gpu' (known: eager, executorch)" \
        in unknown.output


def test_clients_without_rows_keep_the_stages_own_rule():
    from pflkit.export.on_device import OnDevicePersonalizer
    from pflkit.sdk.algorithms import LocalTraining, ModelFactory, RoundContext, make_algorithm
    from pflkit.sdk.data.tensors import LabeledTensors

    algo = make_algorithm("pflmoe", ModelFactory("twonn", (1, 8, 8), 10), LocalTraining(1, 8),
                          {"epochs": 1})
    empty = LabeledTensors(torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long))
    glob, ctx = algo.aggregation.init_global(0), RoundContext(1, 1, 0.1, 0, 0)
    start = algo.training.init_client(0, 0, empty)
    state = OnDevicePersonalizer(algo, (1, 8, 8))(glob, start, empty, ctx)
    assert state.meta["n_per"] == 0 and torch.equal(state.tensors["personal.head.weight"],
                                                    glob["head.weight"])


def test_a_client_without_rows_keeps_its_lambda_on_both_engines():
    from pflkit.export.on_device import OnDevicePersonalizer
    from pflkit.sdk.algorithms import LocalTraining, ModelFactory, RoundContext, make_algorithm
    from pflkit.sdk.data.tensors import LabeledTensors

    algo = make_algorithm("superfed_mm", ModelFactory("twonn", (1, 8, 8), 10),
                          LocalTraining(1, 8), {"ft_epochs": 1})
    empty = LabeledTensors(torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long))
    glob, ctx = algo.aggregation.init_global(0), RoundContext(1, 1, 0.1, 0, 0)
    start = algo.training.init_client(0, 0, empty)
    start.meta["lambda"] = 0.3
    for engine in (algo.personalization.personalize, OnDevicePersonalizer(algo, (1, 8, 8))):
        state = engine(glob, start, empty, ctx)
        assert state.meta["lambda"] == 0.3
        assert all(torch.equal(v, start.tensors[k]) for k, v in state.tensors.items())
