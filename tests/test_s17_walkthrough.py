"""A new user's path as README.md and the docs tell it: starter project, export, classify, heads.

Each test drives the documented command on what the walkthrough met: ``pfl-export classify``
on the starter project's tabular export (a traceback: it looked for pixels in sensor rows)
and on docs/superfed.md's synthetic run (refused, "no integer 0..255 raw pixels to write
golden vectors from"), and ``pfl-fedrod-head --force`` pointed at the run's own files (it
overwrote the run's ``config.toml`` and ``final.json`` with a head).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from waiting import GUARD

from pflkit.sdk.algorithms import LocalTraining, ModelFactory, make_algorithm
from pflkit.sdk.fedrod_head_cli import app as head_app
from pflkit.sdk.tensorio import save_state
from pflkit.server.simulator_cli import app as sim_app

BIN = Path(sys.executable).parent
COUNTS = "5,0,12,3,0,0,7,1,0,2"


def run_in(project: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """A console script run from the project folder, as the starter's README says."""
    return subprocess.run([str(BIN / command[0]), *command[1:]], cwd=project,
                          capture_output=True, text=True, timeout=GUARD)


def test_classify_runs_the_starter_projects_tabular_export(tmp_path):
    project = tmp_path / "my-project"
    assert CliRunner().invoke(sim_app, ["init", str(project)]).exit_code == 0
    sim = run_in(project, "pfl-sim", "--config", "run.toml", "--out", "runs/first",
                 "--set", "rounds=1", "--quiet")
    assert sim.returncode == 0, sim.stderr
    export = run_in(project, "pfl-export", "--run", "runs/first", "--client", "0", "--lambda",
                    "0.5", "--format", "onnx", "--allow-imports", "model,data")
    assert export.returncode == 0, export.stderr

    table = run_in(project, "pfl-export", "classify", "runs/first/exports/client0", "--count",
                   "4", "--allow-imports", "model,data")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.strip().splitlines()
    assert "PyTorch (eager)" in lines[0] and "model.onnx" in lines[0]
    assert len(lines) == 1 + 4 + 1  # header, one row per test row, the agreement line
    assert all(line.split("|")[1].strip() in ("idle", "walking", "running", "cycling")
               for line in lines[1:5])  # the true label, named by the dataset's classes
    assert lines[-1] == "all runtimes agree on top-1: yes"

    too_many = run_in(project, "pfl-export", "classify", "runs/first/exports/client0",
                      "--count", "10000", "--allow-imports", "model,data")
    assert too_many.returncode == 2
    assert too_many.stderr.strip().startswith("error: asked for 10000 test rows, but the "
                                              "client test split has only ")
    assert "Traceback" not in too_many.stderr

    golden = run_in(project, "pfl-export", "--run", "runs/first", "--client", "0", "--lambda",
                    "0.5", "--format", "onnx", "--golden", "--out", "runs/first/golden-try",
                    "--allow-imports", "model,data")  # golden vectors are pixels: images only
    assert golden.returncode == 2, golden.stderr
    assert golden.stderr.strip() == ("error: --golden needs image data (raw pixels to "
                                     "preprocess on the device); dataset 'data:load_sensors' has "
                                     "Standardize rows")
    assert not (project / "runs/first/golden-try").exists()


def test_classify_runs_an_export_of_images_without_integer_pixels(tmp_path):
    """docs/superfed.md's run on the synthetic set: classify needs no raw bytes, golden does."""
    sim = run_in(tmp_path, "pfl-sim", "--dataset", "synthetic", "--clients", "4", "--model",
                 "twonn", "--algorithm", "superfed_mm", "--rounds", "1", "--out", "runs/s",
                 "--quiet")
    assert sim.returncode == 0, sim.stderr
    export = run_in(tmp_path, "pfl-export", "--run", "runs/s", "--client", "0", "--lambda",
                    "runtime", "--format", "onnx")
    assert export.returncode == 0, export.stderr

    table = run_in(tmp_path, "pfl-export", "classify", "runs/s/exports/client0", "--count", "3")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.strip().splitlines()
    assert len(lines) == 1 + 3 + 1 and lines[-1] == "all runtimes agree on top-1: yes"


@pytest.fixture()
def fedrod_run(tmp_path: Path) -> Path:
    """A fedrod_hyper run folder: its global state beside the files a finished run writes."""
    algorithm = make_algorithm("fedrod_hyper", ModelFactory("twonn", (1, 8, 8), 10),
                               LocalTraining(), {})
    run = tmp_path / "run"
    save_state(run / "global" / "latest.safetensors", algorithm.aggregation.init_global(0))
    for name in ("config.toml", "final.json", "report.md", "metrics.jsonl"):
        (run / name).write_text(f"the run's {name}\n")
    return run


@pytest.mark.parametrize("name", ["config.toml", "final.json", "report.md", "metrics.jsonl"])
@pytest.mark.parametrize("source", ["run", "run/global/latest.safetensors"])
def test_fedrod_head_force_never_replaces_the_runs_own_files(fedrod_run, name, source):
    target = fedrod_run / name
    result = CliRunner().invoke(head_app, [str(fedrod_run.parent / source), "--class-counts",
                                           COUNTS, "--out", str(target), "--force"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: --out {target} is the run's {name}: choose a file outside the run's own files")
    assert target.read_text() == f"the run's {name}\n"


def test_fedrod_head_force_still_replaces_a_head_beside_the_run(fedrod_run):
    out = fedrod_run.parent / "head.safetensors"
    out.write_text("an older head")
    result = CliRunner().invoke(head_app, [str(fedrod_run), "--class-counts", COUNTS,
                                           "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() != b"an older head"
