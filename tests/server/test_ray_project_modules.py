"""A project's own modules (``model:SensorNet`` next to its run.toml) reach the Ray workers.

The driver finds them through the config's folder on ``sys.path`` (``add_project_path``); the
workers did not, so the starter project (``pfl-sim init``) with ``--executor ray`` failed every
fit with ``No module named 'model'``, in a traceback, after its run folder was written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pflkit.sdk.rundir import RunDir
from pflkit.server.starter import write_starter

PFL_SIM = str(Path(sys.executable).parent / "pfl-sim")


def test_the_starter_project_trains_on_ray_workers_from_another_folder(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    project, out = tmp_path / "project", tmp_path / "run"
    write_starter(project)
    done = subprocess.run([PFL_SIM, "--config", str(project / "run.toml"), "--out", str(out),
                           "--set", "rounds=1", "--set", "eval_interval=1",
                           "--set", "checkpoint_interval=1", "--executor", "ray",
                           "--set", "execution.workers=1", "--quiet"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert RunDir(out).rounds_done() == 1
