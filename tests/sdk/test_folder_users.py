"""A folder dataset's user column and the files beside it, as real exports leave them.

Before: ``test_users.npy`` and a ``train_users.npy`` beside ``train.safetensors`` were silently
ignored (then ``kind = "natural"`` said the folder had no users), a bool column was two users,
a uint64 id beyond int64 became a negative user, a big-endian file could not be read, and a
folder named ``train_users.npy`` was skipped.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_data_edges import ROWS, X, Y, refusal, write_folder

from pflkit.sdk.data import PartitionConfig, build_federation, load_dataset
from pflkit.sdk.tensorio import save_state

USERS = np.arange(ROWS) % 4 + 100


def uint64_ids(last: int) -> np.ndarray:
    """USERS as uint64, the last row's id ``last``."""
    ids = USERS.astype(np.uint64)
    ids[-1] = last
    return ids


REFUSED = {  # files -> (the file to blame, what the line says)
    "test users": ({"train_users": USERS, "test_users": USERS}, "test_users.npy",
                   "the test split is the global test set, not dealt by user"),
    "bool users": ({"train_users": USERS % 2 == 0}, "train_users.npy",
                   r"must be integer user ids, got bool \(True and False would be two users\)"),
    "uint64 beyond int64": ({"train_users": uint64_ids(last=2**64 - 1)},
                            "train_users.npy", "user id 18446744073709551615 at row 11 is "
                            r"beyond int64 \(user ids are -2\*\*63..2\*\*63-1\)"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_user_column_that_would_deal_wrong_users_is_one_line(tmp_path: Path, case: str):
    files, blamed, says = REFUSED[case]
    message = refusal(write_folder(tmp_path, **files))
    assert message.startswith(f"{tmp_path / blamed}: ") and re.search(says, message), message


def test_uint64_ids_within_int64_keep_their_values(tmp_path: Path):
    top = uint64_ids(last=2**63 - 1)
    data = load_dataset("folder", write_folder(tmp_path, train_users=top))
    assert data.users.tolist() == top.astype(np.int64).tolist()


def test_a_safetensors_users_tensor_is_checked_like_the_npy_column(tmp_path: Path):
    write_folder(tmp_path)
    for name in ("train_x.npy", "train_y.npy"):
        (tmp_path / name).unlink()
    users = torch.from_numpy(USERS % 2 == 0)
    save_state(tmp_path / "train.safetensors",
               {"x": torch.from_numpy(X), "y": torch.from_numpy(Y), "users": users})
    assert refusal(tmp_path).startswith(f"{tmp_path / 'train.safetensors'}: users: train users "
                                        "must be integer user ids, got bool")


def test_npy_files_beside_train_safetensors_are_refused_not_ignored(tmp_path: Path):
    """A users column left as train_users.npy next to train.safetensors was dropped: natural
    then said the folder names no users; stale train_x.npy lost to the tensors silently."""
    write_folder(tmp_path, train_users=USERS)
    for name in ("train_x.npy", "train_y.npy"):
        (tmp_path / name).unlink()
    save_state(tmp_path / "train.safetensors", {"x": torch.from_numpy(X), "y": torch.from_numpy(Y)})
    assert refusal(tmp_path) == (f"{tmp_path / 'train.safetensors'}: train_users.npy beside it "
                                 "would be ignored: keep one format per split (the users as "
                                 "its tensor 'users')")
    np.save(tmp_path / "train_x.npy", X)
    assert "train_x.npy, train_users.npy beside it would be ignored" in refusal(tmp_path)


@pytest.mark.parametrize("make", [os.mkdir, os.mkfifo], ids=["folder", "fifo"])
def test_a_users_path_that_is_not_a_file_is_refused_not_skipped(tmp_path: Path, make):
    """A FIFO would block the read forever; a folder was skipped as if there were no users."""
    write_folder(tmp_path)
    make(tmp_path / "train_users.npy")
    assert refusal(tmp_path) == f"{tmp_path / 'train_users.npy'}: not a file"


def test_big_endian_files_are_read_as_the_same_numbers(tmp_path: Path):
    """'>f4' / '>i8' (as some exporters write) were 'cannot read' (torch: native order only)."""
    write_folder(tmp_path, train_x=X.astype(">f4") + 1.5, train_y=Y.astype(">i8"),
                 train_users=USERS.astype(">i4"))
    data = load_dataset("folder", tmp_path)
    assert data.train.x.tolist() == (X + 1.5).tolist() and data.train.y.tolist() == Y.tolist()
    federation = build_federation(data, PartitionConfig("natural", min_size=1), seed=0)
    assert federation.users.ids.tolist() == [100, 101, 102, 103]
