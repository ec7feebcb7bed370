"""``--data-root`` names the folder a run reads, or the run is refused in one line naming it.

A first-time user's typo in ``--data-root`` trained on Fashion-MNIST from another place the
loader also looks in (the Debian package, ``$PFLKIT_FMNIST_DIR``) without a word.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_data import fake_mnist_folder
from typer.testing import CliRunner

from pflkit.server.simulator_cli import app

runner = CliRunner()


def pfl_sim(out, dataset: str, root) -> tuple[int, str]:
    result = runner.invoke(app, ["--out", str(out), "--dataset", dataset, "--data-root",
                                 str(root), "--partition", "iid", "--clients", "2",
                                 "--model", "twonn", "--algorithm", "fedavg", "--rounds", "1",
                                 "--epochs", "0", "--quiet"])
    return result.exit_code, result.output


@pytest.mark.parametrize("dataset", ["fmnist", "digits"])
def test_a_data_root_that_does_not_exist_is_refused_naming_it(tmp_path, monkeypatch, dataset):
    elsewhere = fake_mnist_folder(tmp_path / "elsewhere") / "MNIST" / "raw"
    monkeypatch.setenv("PFLKIT_FMNIST_DIR", str(elsewhere))  # files the loader would find
    monkeypatch.chdir(tmp_path)  # a short name: a long one is shown cut
    typo = Path("fahsion")
    code, output = pfl_sim(tmp_path / "run", dataset, typo)
    assert code == 2, output
    if dataset == "digits":  # it needs no files: the root is refused as a folder
        assert output.strip() == f"error: dataset 'digits': data root '{typo}': no such " \
                                 "folder (--data-root, [data] root)"
    else:  # the loader looked in the root alone, and says which files to put there
        assert output.strip().startswith("error: dataset 'fmnist': files not found. Put ")
        assert str(typo) in output and "elsewhere" not in output
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_a_data_root_that_is_a_file_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PFLKIT_FMNIST_DIR", str(fake_mnist_folder(tmp_path / "elsewhere")))
    monkeypatch.chdir(tmp_path)  # a short name: a long one is shown cut
    archive = Path("fashion.tar")
    archive.write_bytes(b"not a folder")
    code, output = pfl_sim(tmp_path / "run", "digits", archive)
    assert code == 2, output
    assert f"data root '{archive}': is not a folder" in output
    code, output = pfl_sim(tmp_path / "run", "fmnist", archive)
    assert code == 2, output
    assert str(archive) in output and "elsewhere" not in output


def test_the_folder_named_is_the_folder_read(tmp_path):
    code, output = pfl_sim(tmp_path / "run", "mnist", fake_mnist_folder(tmp_path / "data"))
    assert code == 0, output


def test_the_refusal_is_one_line_whatever_the_folder_is_called(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short name: a long one is shown cut
    code, output = pfl_sim(tmp_path / "run", "digits", Path("x\ny\t"))
    assert code == 2, output
    assert output.strip().count("\n") == 0 and "x\\ny\\t': no such folder" in output


def test_an_empty_data_root_is_not_read_past(tmp_path, monkeypatch):
    """An empty folder named as the root fell back to $PFLKIT_FMNIST_DIR's files."""
    monkeypatch.setenv("PFLKIT_FMNIST_DIR", str(fake_mnist_folder(tmp_path / "elsewhere")))
    empty = tmp_path / "fashion"
    empty.mkdir()
    code, output = pfl_sim(tmp_path / "run", "fmnist", empty)
    assert code == 2, output
    assert str(empty) in output and "elsewhere" not in output
    assert not (tmp_path / "run").exists()
