"""A new run writes every config it accepted, and a failure while it sets up leaves ``--out`` free.

A method of one's own whose hyperparameter is an array of tables (``steps = [{lr = 0.1}]``)
passed validation, then failed to write ``config.toml`` ("cannot write {'lr': 0.1} to TOML")
and left ``plots/`` behind, so the same ``--out`` was refused for files of a run that never was.
"""

from __future__ import annotations

from typer.testing import CliRunner

from pflkit.sdk.rundir import RunDir
from pflkit.server.simulator_cli import app

runner = CliRunner()
METHOD = '''from dataclasses import dataclass, field

from pflkit.sdk.algorithms.fedavg import FedAvg


@dataclass(frozen=True)
class Params:
    steps: list[dict[str, float]] = field(default_factory=list)


class Scheduled(FedAvg):
    name = "scheduled"
    Params = Params
'''
RUN = """rounds = 1
[data]
dataset = "digits"
kind = "iid"
num_clients = 3
[model]
name = "twonn"
[algorithm]
name = "s15_scheduled:Scheduled"
[algorithm.params]
steps = [{lr = 0.1}, {lr = 0.2}]
[training]
clients_per_round = 2
epochs = 1
"""


def test_an_array_of_tables_in_params_is_written_and_resumes(tmp_path):
    (tmp_path / "s15_scheduled.py").write_text(METHOD)
    (tmp_path / "run.toml").write_text(RUN)
    out = tmp_path / "out"
    result = runner.invoke(app, ["--config", str(tmp_path / "run.toml"), "--out", str(out),
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    assert "steps = [{lr = 0.1}, {lr = 0.2}]" in (out / "config.toml").read_text()
    assert RunDir(out).config().algorithm.params == {"steps": [{"lr": 0.1}, {"lr": 0.2}]}
    assert runner.invoke(app, ["--resume", str(out), "--quiet"]).exit_code == 0


def test_a_write_that_fails_before_round_0_removes_what_the_run_wrote(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "partition.txt").symlink_to(tmp_path / "gone" / "table.txt")  # cannot be written
    args = ["--out", str(out), "--dataset", "digits", "--clients", "3", "--model", "twonn",
            "--rounds", "1", "--epochs", "1", "--quiet"]
    failed = runner.invoke(app, args)
    assert failed.exit_code == 2, failed.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # config.toml, plots/: gone
    assert runner.invoke(app, args).exit_code == 0  # the same --out works again
