"""A device owner's data folder: each mistake about ``--data`` and its file is named as it is.

``pfl-client --data DIR`` reads DIR/data.safetensors; ``save_client_data`` writes that file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from waiting import GUARD

from pflkit.sdk.client import load_client_data, save_client_data
from pflkit.sdk.data.tensors import DatasetError, LabeledTensors


def _rows() -> LabeledTensors:
    return LabeledTensors(torch.zeros(3, 4), torch.tensor([0, 1, 2]))


def _pfl_client(data: Path) -> subprocess.CompletedProcess[str]:
    """``pfl-client`` as a device runs it; the data is read before any server is asked."""
    return subprocess.run([sys.executable, "-c", "from pflkit.sdk.client_cli import script; "
                           "script()", "--server", "http://127.0.0.1:9", "--data", str(data),
                           "--give-up-after", "0"],  # retried never: port 9 refuses at once
                          capture_output=True, text=True, timeout=GUARD, check=False)


def test_pfl_client_given_the_data_file_says_data_names_its_folder(tmp_path: Path):
    save_client_data(tmp_path / "data.safetensors", _rows())
    done = _pfl_client(tmp_path / "data.safetensors")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"pfl-client: {tmp_path / 'data.safetensors'} is a file: --data names the folder "
        "that holds data.safetensors"]


@pytest.mark.parametrize("make", ["folder", "broken link"])
def test_a_data_file_that_is_no_file_is_named_not_reported_missing(tmp_path: Path, make: str):
    place = tmp_path / "data.safetensors"
    if make == "folder":
        place.mkdir()
    else:
        place.symlink_to(tmp_path / "gone.safetensors")
    with pytest.raises(FileNotFoundError) as err:
        load_client_data(tmp_path)
    assert str(err.value) == f"{place}: not a file"


def test_a_data_folder_that_does_not_exist_is_named_as_such(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"device2: no such folder \(--data names"):
        load_client_data(tmp_path / "device2")


def test_save_client_data_to_the_devices_folder_names_the_file_and_writes_nothing(
        tmp_path: Path):
    """``save_client_data(DIR)`` raised IsADirectoryError naming a temporary file."""
    with pytest.raises(DatasetError) as err:
        save_client_data(tmp_path, _rows())
    assert str(err.value) == (f"{tmp_path} is a folder: save to {tmp_path / 'data.safetensors'}"
                              f", the file pfl-client --data {tmp_path} reads")
    assert os.listdir(tmp_path) == []
    save_client_data(tmp_path / "data.safetensors", _rows())  # the file it names is read
    assert torch.equal(load_client_data(tmp_path).y, torch.tensor([0, 1, 2]))
