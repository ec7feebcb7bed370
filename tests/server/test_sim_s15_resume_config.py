"""``--resume`` continues a run under the settings its committed rounds ran under, or refuses.

``config.toml`` is a file anyone can edit between a stop and ``--resume``; the run used to
continue from the edited file, so its remaining rounds silently trained under another ``lr``
(or more rounds, or a clip norm) than its first ones: half one run, half another.
"""

from __future__ import annotations

from typer.testing import CliRunner

from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.tensorio import load_state
from pflkit.server.simulator import Simulation
from pflkit.server.simulator_cli import app

runner = CliRunner()


def config(root):
    """3 rounds of FedProx on 4 digits clients, its data in ``root``."""
    return SimConfig(seed=1, rounds=3,
                     data=DataConfig(dataset="digits", kind="iid", num_clients=4, root=str(root)),
                     model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedprox", {"mu": 0.1}),
                     training=TrainingConfig(clients_per_round=2, epochs=1, batch_size=32,
                                             lr=0.05))


def stopped_after_two_rounds(tmp_path, name="run"):
    """A run of 3 rounds stopped after its second commit (as Ctrl-C or a kill leaves it)."""
    (tmp_path / "data").mkdir(exist_ok=True)
    sim = Simulation(config(tmp_path / "data"), tmp_path / name, progress=False)
    sim.run_round()
    sim.run_round()
    sim.close()
    return RunDir(tmp_path / name)


def edit(files, old, new):
    text = files.config_file.read_text()
    assert old in text
    files.config_file.write_text(text.replace(old, new))


def test_a_setting_edited_in_config_toml_before_resume_is_refused_naming_it(tmp_path):
    files = stopped_after_two_rounds(tmp_path)
    metrics = files.metrics.read_text()
    edit(files, "lr = 0.05", "lr = 0.5")
    result = runner.invoke(app, ["--resume", str(files.path), "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: --resume {files.path}: config.toml changed since its 2 committed rounds ran "
        "(training.lr: 0.05 -> 0.5), and a run continues as configured (only [execution] and "
        "data.root may change): restore it, or start a new run")
    assert files.rounds_done() == 2 and files.metrics.read_text() == metrics  # nothing lost

    edit(files, "lr = 0.5", "lr = 0.05")  # restored: it continues, as if never stopped
    assert runner.invoke(app, ["--resume", str(files.path), "--quiet"]).exit_code == 0
    whole = Simulation(files.config(), tmp_path / "whole", progress=False).run()
    resumed = load_state(files.latest)
    assert resumed.keys() == whole.global_state.keys()
    assert all(resumed[k].equal(whole.global_state[k]) for k in resumed)


def test_more_rounds_or_a_key_added_to_config_toml_is_refused_too(tmp_path):
    files = stopped_after_two_rounds(tmp_path)
    edit(files, "rounds = 3", "rounds = 5")
    more = runner.invoke(app, ["--resume", str(files.path), "--quiet"])
    assert more.exit_code == 2 and "(rounds: 3 -> 5)" in more.output
    edit(files, "rounds = 5", "rounds = 3")
    edit(files, "[aggregation]\n", "[aggregation]\nclip_norm = 2.0\n")  # unset before
    added = runner.invoke(app, ["--resume", str(files.path), "--quiet"])
    assert added.exit_code == 2 and "(aggregation.clip_norm: unset -> 2.0)" in added.output
    assert files.rounds_done() == 2


def test_where_it_runs_and_where_its_data_lies_may_change(tmp_path):
    files = stopped_after_two_rounds(tmp_path)
    (tmp_path / "moved").mkdir()
    edit(files, str(tmp_path / "data"), str(tmp_path / "moved"))  # another machine's folder
    result = runner.invoke(app, ["--resume", str(files.path), "--executor", "batched",
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    assert files.rounds_done() == 3
    assert files.config().execution.executor == "batched"
