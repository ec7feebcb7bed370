"""pfl-export on broken files and bad options: one clear line, exit 2, nothing written.

Every case is a real file a user could hand in (a copied run directory, then damaged).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from waiting import GUARD

from pflkit.export.cli import app
from pflkit.sdk.tensorio import load_state, save_state

COUNTS = "5,0,12,0,0,3,0,0,9,1"


def run_copy(make_run, algorithm: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(make_run(algorithm), tmp_path / "run"))


def export(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def one_line_error(code: int, output: str, message: str) -> None:
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], output


def flip_bit(path: Path, offset: int = -7) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x04
    path.write_bytes(bytes(data))


def test_a_checkpoint_whose_header_is_a_json_list(make_run, tmp_path):
    run = run_copy(make_run, "fedavg", tmp_path)
    header = b"[1, 2]"
    (run / "global" / "latest.safetensors").write_bytes(len(header).to_bytes(8, "little")
                                                        + header)
    one_line_error(*export("--run", str(run), "--out", str(tmp_path / "o")),
                   "header is a JSON list")


def test_a_checkpoint_without_metadata(make_run, tmp_path):
    run = run_copy(make_run, "fedavg", tmp_path)
    latest = run / "global" / "latest.safetensors"
    save_state(latest, load_state(latest))
    one_line_error(*export("--run", str(run), "--out", str(tmp_path / "o")),
                   "not a pfl-sim global checkpoint: its metadata has no 'rounds_done'")


@pytest.mark.parametrize("file", ["global/latest.safetensors", "personalized/1.safetensors"])
def test_a_flipped_bit_in_a_checkpoint_is_caught_before_any_export(make_run, tmp_path, file):
    run = run_copy(make_run, "fedavg_ft", tmp_path)
    flip_bit(run / file)
    one_line_error(*export("--run", str(run), "--client", "1", "--out", str(tmp_path / "o")),
                   f"{run / file}: its tensor data does not match the sha256")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("option", "text", "message"), [
    ("--class-counts", "1.5,0,12,0,0,3,0,0,9,1", "whole numbers"),
    ("--class-counts", "inf,0,12,0,0,3,0,0,9,1", "NaN or infinite"),
    ("--class-counts", "1e400,0,12,0,0,3,0,0,9,1", "NaN or infinite"),
    ("--proportions", "0.5,0.5,1,0,0,0,0,0,0,0", "must sum to 1 (got 2)"),
])
def test_class_distributions_are_checked_like_pfl_fedrod_head(make_run, tmp_path, option, text,
                                                              message):
    one_line_error(*export("--run", str(make_run("fedrod_hyper")), option, text,
                           "--out", str(tmp_path / "o")), message)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("drop", ["-1", "101", "nan"])
def test_max_int8_drop_outside_0_100_is_refused(make_run, tmp_path, drop):
    one_line_error(*export("--run", str(make_run("fedavg")), "--int8", "--max-int8-drop", drop,
                           "--out", str(tmp_path / "o")), "--max-int8-drop must be in [0, 100]")


def test_trainer_param_without_trainer_is_refused(make_run, tmp_path):
    one_line_error(*export("--run", str(make_run("fedavg")), "--client", "1", "--trainer-param",
                           "ft_epochs=2", "--out", str(tmp_path / "o")),
                   "--trainer-param sets the training program's hyperparameters: give --trainer")
    assert not (tmp_path / "o").exists()


def test_a_bad_toml_names_its_path_once(make_run, tmp_path):
    run = run_copy(make_run, "fedavg", tmp_path)
    (run / "config.toml").write_text("rounds = [unclosed\n")
    code, output = export("--run", str(run))
    one_line_error(code, output, "not valid TOML")
    assert output.count(str(run / "config.toml")) == 1


def test_an_output_that_cannot_be_written(make_run, tmp_path):
    (tmp_path / "file.txt").write_text("keep")
    one_line_error(*export("--run", str(make_run("fedavg")), "--format", "onnx",
                           "--out", str(tmp_path / "file.txt" / "export")),
                   f"cannot write the output {tmp_path / 'file.txt' / 'export'}")
    assert (tmp_path / "file.txt").read_text() == "keep"


def test_int8_export_prints_no_onnxruntime_warnings(make_run, tmp_path):
    """The command as users run it (its own process): stderr has no WARNING:root lines."""
    exe = Path(sys.executable).parent / "pfl-export"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(exe), "--run", str(make_run("fedavg")), "--client", "1",
                           "--format", "onnx", "--int8", "--force-int8",
                           "--out", str(tmp_path / "o")], capture_output=True, text=True,
                          env=env, timeout=GUARD, check=False)
    assert done.returncode == 0, done.stderr
    assert "WARNING:root" not in done.stderr, done.stderr
    card = json.loads((tmp_path / "o" / "model_card.json").read_text())
    assert [a["precision"] for a in card["artifacts"]] == ["fp32", "int8"]


def test_executorch_export_prints_no_torch_or_runtime_noise(make_run, tmp_path):
    """No register_constant, cpuinfo_utils or threadpool lines: stderr stays empty."""
    exe = Path(sys.executable).parent / "pfl-export"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(exe), "--run", str(make_run("fedavg")), "--client", "1",
                           "--format", "executorch", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, timeout=GUARD, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(("args", "message"), [
    (["--lambda", "0.3"], "--lambda: fedavg declares no choice it sets (fedavg's choices: none)"),
    (["--choice", "lam=0.3"], "--choice lam: fedavg declares no such choice"),
    (["--class-counts", COUNTS], "--class-counts: fedavg declares no choice it sets"),
    (["--choice", "lam"], "--choice expects NAME=VALUE, got 'lam'"),
])
def test_a_choice_the_method_does_not_declare_is_refused(make_run, tmp_path, args, message):
    one_line_error(*export("--run", str(make_run("fedavg")), "--client", "1", *args,
                           "--out", str(tmp_path / "o")), message)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--lambda", "1.5"], "--lambda: lam must be a number in [0, 1], 'best', 'runtime'"),
    (["--choice", "lam=x"], "--choice lam: lam must be a number in [0, 1]"),
    (["--lambda", "0.3", "--choice", "lam=0.4"], "--lambda and --choice lam both set lam"),
])
def test_a_declared_choice_with_a_bad_value_is_refused(make_run, tmp_path, args, message):
    one_line_error(*export("--run", str(make_run("superfed_mm")), "--client", "1", *args,
                           "--out", str(tmp_path / "o")), message)
