"""A user's own files at their edges, found in a hostile pass over the data loaders.

Before the fixes: a float128 ``.npy`` was a TypeError traceback, a uint64 label beyond int64
was reported as label -1, a ``classes.txt`` that was a broken link or a folder was skipped
(the classes silently became 0..C-1), a BOM became part of the first class name, an empty
test split loaded and then crashed pfl-sim's first evaluation with an IndexError, and IDX
files of the wrong rank or count failed in a resize or a row count naming no file.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_data_edges import X, Y, refusal, write_folder
from test_per_user_data import NATURAL
from waiting import GUARD

from pflkit.sdk.data import DatasetError, load_dataset

BIN = Path(sys.executable).parent


def test_a_float128_npy_is_one_line_naming_the_file(tmp_path):
    write_folder(tmp_path, train_x=X.astype(np.longdouble))
    assert refusal(tmp_path) == (f"{tmp_path / 'train_x.npy'}: holds float128 values, wider "
                                 "than 64 bits: save them as float64 or float32")


def test_a_uint64_label_beyond_int64_is_named_as_written_not_wrapped_to_minus_one(tmp_path):
    labels = Y.astype(np.uint64)
    labels[4] = 2**64 - 1
    write_folder(tmp_path, train_y=labels)
    assert refusal(tmp_path) == (f"{tmp_path / 'train_y.npy'}'s label 18446744073709551615 at "
                                 "row 4 is beyond int64 (labels are 0..C-1)")


@pytest.mark.parametrize("what", ["a broken link", "a folder"])
def test_a_classes_txt_that_is_not_a_file_is_refused_not_skipped(tmp_path, what):
    write_folder(tmp_path)
    if what == "a folder":
        (tmp_path / "classes.txt").mkdir()
    else:
        os.symlink(tmp_path / "moved" / "classes.txt", tmp_path / "classes.txt")
    assert refusal(tmp_path) == f"{tmp_path / 'classes.txt'}: not a file"


def test_a_train_safetensors_that_is_a_folder_is_refused_not_skipped_for_the_npy_files(tmp_path):
    write_folder(tmp_path)
    (tmp_path / "train.safetensors").mkdir()
    assert refusal(tmp_path) == f"{tmp_path / 'train.safetensors'}: not a file"


def test_a_byte_order_mark_is_no_part_of_the_first_class_name(tmp_path):
    """Windows Notepad saves UTF-8 with a BOM: the first class was named '\\ufeffcat'."""
    write_folder(tmp_path, **{"classes.txt": "\ufeffcat\r\ndog\r\nbird\r\n"})
    assert load_dataset("folder", tmp_path).spec.classes == ("cat", "dog", "bird")


def test_a_folder_with_an_empty_test_split_is_refused_at_load(tmp_path):
    write_folder(tmp_path, test_x=X[:0], test_y=Y[:0])
    assert refusal(tmp_path) == "dataset 'folder': the test split is empty"


def test_pfl_sim_on_a_folder_without_test_rows_is_one_line_and_writes_nothing(tmp_path):
    """It trained a round, then its first evaluation was an IndexError traceback."""
    data = tmp_path / "data"
    data.mkdir()
    write_folder(data, test_x=X[:0], test_y=Y[:0], train_users=np.arange(len(Y)) % 3)
    (tmp_path / "run.toml").write_text(NATURAL.format(root=data))
    done = subprocess.run([str(BIN / "pfl-sim"), "--config", str(tmp_path / "run.toml"),
                           "--out", str(tmp_path / "out"), "--quiet"],
                          capture_output=True, text=True, timeout=GUARD, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == ["error: dataset 'folder': the test split is "
                                                "empty"]
    assert not (tmp_path / "out").exists()


def idx(array: np.ndarray) -> bytes:
    """``array`` as an unsigned-byte IDX file."""
    dims = b"".join(struct.pack(">I", n) for n in array.shape)
    return b"\x00\x00\x08" + bytes([array.ndim]) + dims + array.astype(np.uint8).tobytes()


IMAGES, LABELS = np.zeros((4, 28, 28)), np.arange(4)
WRONG_IDX = {  # (file, its content) -> the line, after the file's path
    "labels in the images' place": ("train-images-idx3-ubyte", idx(LABELS),
                                    ": holds an array (4,), not images (N, H, W) of at least "
                                    "1x1 pixels"),
    "images of 0x0 pixels": ("train-images-idx3-ubyte", idx(np.zeros((4, 0, 0))),
                             ": holds an array (4, 0, 0), not images (N, H, W) of at least "
                             "1x1 pixels"),
    "a 0-d array": ("t10k-images-idx3-ubyte", b"\x00\x00\x08\x00\x07",
                    ": holds an array (), not images (N, H, W) of at least 1x1 pixels"),
    "a label short": ("train-labels-idx1-ubyte", idx(LABELS[:3]),
                      ": holds labels (3,), not one per image of train-images-idx3-ubyte (4,)"),
    "labels 2-d": ("t10k-labels-idx1-ubyte", idx(np.zeros((4, 2))),
                   ": holds labels (4, 2), not one per image of t10k-images-idx3-ubyte (4,)"),
}


@pytest.mark.parametrize("case", list(WRONG_IDX))
def test_idx_files_of_the_wrong_rank_or_count_are_one_line_naming_the_file(tmp_path, case):
    for stem, array in (("train-images", IMAGES), ("train-labels", LABELS),
                        ("t10k-images", IMAGES), ("t10k-labels", LABELS)):
        kind = "idx3" if "images" in stem else "idx1"
        (tmp_path / f"{stem}-{kind}-ubyte").write_bytes(idx(array))
    assert load_dataset("mnist", tmp_path).train.x.shape == (4, 1, 28, 28)
    name, content, line = WRONG_IDX[case]
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DatasetError) as caught:
        load_dataset("mnist", tmp_path)
    assert str(caught.value) == f"{tmp_path / name}{line}"
