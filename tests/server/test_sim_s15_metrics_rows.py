"""``--resume`` names a damaged ``metrics.jsonl`` line in one line, whatever the damage.

A line that is JSON but not a round's row (edited by hand, another tool's) ended the resume
in a traceback (``TypeError: list indices must be integers``) or ``error: 'round'``, and a byte
that is not UTF-8 in an error without the file's name.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pflkit.sdk.run_config import DataConfig, ModelConfig, SimConfig, TrainingConfig
from pflkit.sdk.rundir import RunDir
from pflkit.server.simulator import Simulation
from pflkit.server.simulator_cli import app

runner = CliRunner()
CONFIG = SimConfig(rounds=3, data=DataConfig(dataset="digits", kind="iid", num_clients=3),
                   model=ModelConfig("twonn"), training=TrainingConfig(clients_per_round=2,
                                                                       epochs=1))


@pytest.mark.parametrize(("line", "why"), [
    (b"[1]", "is not a round's row (a JSON object with an integer 'round')"),
    (b'{"lr": 0.1}', "is not a round's row (a JSON object with an integer 'round')"),
    (b'{"round": "0"}', "is not a round's row (a JSON object with an integer 'round')"),
    (b'{"round": true}', "is not a round's row (a JSON object with an integer 'round')"),
    (b'{"round": 0, "x": "\xff"}', "is not JSON (not UTF-8)"),
])
def test_a_damaged_metrics_line_is_one_line_naming_file_and_line(tmp_path, line, why):
    sim = Simulation(CONFIG, tmp_path / "run", progress=False)
    sim.run_round()
    sim.run_round()
    sim.close()
    files = RunDir(tmp_path / "run")
    rows = files.metrics.read_bytes().splitlines()
    files.metrics.write_bytes(b"\n".join([line, *rows[1:]]) + b"\n")
    result = runner.invoke(app, ["--resume", str(files.path), "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {files.metrics}: line 1 {why}"
    assert files.rounds_done() == 2
