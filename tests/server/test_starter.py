"""``pfl-sim init``: the starter project of docs/extending.md runs as written (#16 item 5)."""

from __future__ import annotations

import json
import subprocess
import sys

from server_harness import BIN
from typer.testing import CliRunner
from waiting import GUARD

from pflkit.server.simulator_cli import app


def test_init_writes_a_project_that_simulates_and_exports(tmp_path):
    project = tmp_path / "my-project"
    made = CliRunner().invoke(app, ["init", str(project)])
    assert made.exit_code == 0, made.output
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "data.py", "model.py",
                                                         "run.toml"]
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select",
                           "E,F,W,B,UP,I", "--line-length", "100", str(project)],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    # the quick start from the project folder (model.py and data.py resolve from there), on 3
    # of its 10 rounds: docs/extending.md's own example runs the full one in the docs test
    sim = subprocess.run([str(BIN / "pfl-sim"), "--config", "run.toml", "--out", "runs/first",
                          "--set", "rounds=3", "--quiet"], cwd=project, capture_output=True,
                         text=True, timeout=GUARD)
    assert sim.returncode == 0, sim.stderr
    final = json.loads((project / "runs" / "first" / "final.json").read_text())
    assert final["global_model"]["top1"] > 0.5  # 4 classes: the model learned something
    export = subprocess.run([str(BIN / "pfl-export"), "--run", "runs/first", "--client", "0",
                             "--lambda", "0.5", "--allow-imports", "model,data"], cwd=project,
                            capture_output=True, text=True, timeout=GUARD)
    assert export.returncode == 0, export.stderr
    card = json.loads((project / "runs/first/exports/client0/model_card.json").read_text())
    assert card["classes"] == ["idle", "walking", "running", "cycling"]
    assert card["mixture"]["choice"] == {"lam": 0.5}

    again = CliRunner().invoke(app, ["init", str(project)])
    assert again.exit_code == 2 and "not an empty folder" in again.output
