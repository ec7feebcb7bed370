"""pfl-fedrod-head, the deprecated alias over the head query: its head, its one-line errors."""

import pytest
import torch
from fedrod_harness import algo
from typer.testing import CliRunner

from pflkit.sdk.algorithms.fedrod import zero_shot_head
from pflkit.sdk.fedrod_head_cli import DEPRECATED, app
from pflkit.sdk.state_store import client_state_from_bytes
from pflkit.sdk.tensorio import save_state


@pytest.fixture()
def hyper_run(tmp_path):
    alg = algo("fedrod_hyper")
    glob = alg.aggregation.init_global(0)
    save_state(tmp_path / "run" / "global" / "latest.safetensors", glob)
    save_state(tmp_path / "linear.safetensors", algo("fedrod_linear").aggregation.init_global(0))
    return tmp_path, glob


def test_cli_writes_the_zero_shot_head_as_a_client_state(hyper_run):
    tmp, glob = hyper_run
    out = tmp / "head.safetensors"
    result = CliRunner().invoke(app, [str(tmp / "run"), "--class-counts",
                                      "5,0,12,3,0,0,7,1,0,2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    state = client_state_from_bytes(out.read_bytes())
    phi = zero_shot_head(glob, [5, 0, 12, 3, 0, 0, 7, 1, 0, 2])
    assert torch.allclose(state.tensors["phi.weight"], phi["weight"])
    assert state.meta["class_counts"] == [5, 0, 12, 3, 0, 0, 7, 1, 0, 2]
    assert result.output.splitlines()[0] == DEPRECATED  # one line on stderr, kept one release


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--class-counts", "1,2,3"], "10 entries"),
    (["run", "--class-counts", "1,2,3,0,0,0,0,0,0,-1"], "negative"),
    (["run", "--class-counts", "0,0,0,0,0,0,0,0,0,0"], "all zero"),
    (["run", "--class-counts", "1,x,3"], "numbers"),
    (["run", "--class-counts", "1.5,1,1,1,1,1,1,1,1,1"], "whole numbers"),
    (["run", "--proportions", "0.5,0.6,0,0,0,0,0,0,0,0"], "sum to 1"),
    (["run", "--proportions", "nan,1,0,0,0,0,0,0,0,0"], "NaN"),
    (["run", "--class-counts", "inf,1,1,1,1,1,1,1,1,1"], "infinite"),
    (["run", "--class-counts", "1e400,1,1,1,1,1,1,1,1,1"], "infinite"),
    (["run", "--proportions", "1e400,0,0,0,0,0,0,0,0,0"], "infinite"),
    (["run"], "exactly one"),
    (["run", "--class-counts", "1,1,1,1,1,1,1,1,1,1", "--proportions", "1"], "exactly one"),
    (["missing", "--class-counts", "1,1,1,1,1,1,1,1,1,1"], "does not exist"),
    (["run", "--round", "3", "--class-counts", "1,1,1,1,1,1,1,1,1,1"], "round_3"),
    (["linear.safetensors", "--class-counts", "1,1,1,1,1,1,1,1,1,1"], "no hypernetwork"),
])
def test_cli_errors_are_clear(hyper_run, args, message):
    tmp, _ = hyper_run
    out = tmp / "head.safetensors"
    result = CliRunner().invoke(app, [str(tmp / args[0]), *args[1:], "--out", str(out)])
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()


def test_cli_refuses_an_output_that_cannot_be_a_file(hyper_run):
    tmp, _ = hyper_run
    (tmp / "folder").mkdir()
    (tmp / "plain.txt").write_text("x")
    counts = ["--class-counts", "1,1,1,1,1,1,1,1,1,1"]
    for out, message in ((tmp / "folder", "is a folder"),
                         (tmp / "plain.txt" / "head.safetensors", "is not a folder")):
        result = CliRunner().invoke(app, [str(tmp / "run"), *counts, "--out", str(out)])
        assert result.exit_code == 2 and message in result.output, result.output
        lines = result.output.strip().splitlines()
        assert lines[0] == DEPRECATED and len(lines) == 2  # the deprecation note, the error
    assert list((tmp / "folder").iterdir()) == [] and (tmp / "plain.txt").read_text() == "x"


def test_cli_refuses_a_corrupted_global_state(hyper_run):
    tmp, _ = hyper_run
    path = tmp / "run" / "global" / "latest.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10  # one flipped bit in the tensor data
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(app, [str(tmp / "run"), "--class-counts", "1,1,1,1,1,1,1,1,1,1",
                                      "--out", str(tmp / "head.safetensors")])
    assert result.exit_code == 2 and "corrupted" in result.output, result.output
    assert not (tmp / "head.safetensors").exists()
