"""What a first-time user's flags do: each one is taken, or refused naming the flag as typed.

``--resume`` named a config key (``not training.lr``) for the flag the user had typed
(``--lr``), and not what may change instead; ``--fraction`` was ignored without a word under a
config that sets ``clients_per_round`` (docs/configs/demo.toml does) or next to
``--clients-per-round``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pflkit.server.simulator_cli import app

runner = CliRunner()
MAY_CHANGE = ("only --executor, --device, --precision, --ray-address, --personalize-on and "
              "--set execution.KEY=VALUE can change; another --out starts a new run")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("resume") / "run"
    result = runner.invoke(app, ["--out", str(out), "--dataset", "digits", "--clients", "3",
                                 "--model", "twonn", "--rounds", "1", "--epochs", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(("args", "named"), [
    (["--rounds", "5"], "--rounds"), (["--lr", "0.5"], "--lr"),
    (["--clients", "4"], "--clients"), (["--partition", "iid"], "--partition"),
    (["--data-root", "/data"], "--data-root"), (["--param", "mu=5"], "--param"),
    (["--out", "elsewhere"], "--out"), (["--config", "run.toml"], "--config"),
    (["--set", "training.lr=0.5"], "--set training.lr=0.5"),
])
def test_resume_names_the_refused_flag_and_what_may_change(finished_run, args, named):
    config = finished_run / "config.toml"
    before = config.read_text()
    result = runner.invoke(app, ["--resume", str(finished_run), *args, "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: --resume continues the run as configured, so "
                                     f"{named} cannot be given ({MAY_CHANGE})")
    assert config.read_text() == before


def test_resume_takes_what_it_says_may_change(finished_run):
    result = runner.invoke(app, ["--resume", str(finished_run), "--executor", "batched",
                                 "--set", "execution.tf32=false", "--quiet"])
    assert result.exit_code == 0, result.output


def sampled_per_round(out: Path) -> set[int]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {len(row["clients"]) for row in rows}


def test_fraction_overrides_a_files_clients_per_round(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('rounds = 2\n[data]\ndataset = "digits"\nkind = "iid"\nnum_clients = 10\n'
                      '[model]\nname = "twonn"\n[training]\nclients_per_round = 2\nepochs = 0\n')
    out = tmp_path / "run"
    result = runner.invoke(app, ["--config", str(config), "--out", str(out), "--fraction", "0.5",
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    assert sampled_per_round(out) == {5}


def test_clients_per_round_and_fraction_together_are_refused(tmp_path):
    result = runner.invoke(app, ["--out", str(tmp_path / "run"), "--dataset", "digits",
                                 "--clients", "10", "--clients-per-round", "2", "--fraction",
                                 "0.5", "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "error: give --clients-per-round or --fraction, not both"
    assert not (tmp_path / "run").exists()
