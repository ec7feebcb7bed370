"""The image files' mistakes are one line naming the file: torn CIFAR files, stray labels.

A CIFAR size was checked on all files together: a file with one stray byte and another 3072
bytes short of a record added up to whole records, and every record after the stray byte
loaded shifted by one (its label read from a pixel), with no error. A label beyond the
classes, in an IDX or a CIFAR file, was "train labels must be in 0..9", naming no file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pflkit.sdk.data import DatasetError, DatasetNotFoundError, load_dataset

RECORD = 1 + 3072  # CIFAR-10: one label byte, then 3x32x32 pixels


def records(count: int, seed: int) -> bytes:
    """``count`` dark CIFAR-10 records: labels and pixels all in 0..9."""
    return np.random.default_rng(seed).integers(0, 10, (count, RECORD), dtype=np.uint8).tobytes()


def cifar10(root: Path, extra: dict[int, bytes]) -> Path:
    """ROOT/cifar-10-batches-bin with 4 records a batch; ``extra`` bytes after batch k's."""
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    for k in range(1, 6):
        (folder / f"data_batch_{k}.bin").write_bytes(records(4, k) + extra.get(k, b""))
    (folder / "test_batch.bin").write_bytes(records(3, 0))
    return folder


def test_a_torn_batch_file_is_named_even_when_another_makes_the_total_whole(tmp_path: Path):
    folder = cifar10(tmp_path, {1: b"\x00", 2: bytes(RECORD - 1)})
    with pytest.raises(DatasetNotFoundError) as refused:
        load_dataset("cifar10", tmp_path)
    assert str(refused.value) == (f"{folder / 'data_batch_1.bin'}: 12293 bytes are no whole "
                                  "number of CIFAR records (3073 bytes each)")


def test_whole_batch_files_load_every_record_with_its_own_label(tmp_path: Path):
    cifar10(tmp_path, {})
    data = load_dataset("cifar10", tmp_path)
    labels = np.concatenate([np.frombuffer(records(4, k), np.uint8).reshape(4, RECORD)[:, 0]
                             for k in range(1, 6)])
    assert data.train.x.shape == (20, 3, 32, 32) and len(data.test) == 3
    assert np.array_equal(data.train.y.numpy(), labels)


def test_a_label_beyond_the_classes_names_its_cifar_file_and_row(tmp_path: Path):
    folder = cifar10(tmp_path, {})
    batch = bytearray((folder / "data_batch_3.bin").read_bytes())
    batch[2 * RECORD] = 200  # the label byte of the third record
    (folder / "data_batch_3.bin").write_bytes(bytes(batch))
    with pytest.raises(DatasetError) as refused:
        load_dataset("cifar10", tmp_path)
    assert str(refused.value) == (f"{folder / 'data_batch_3.bin'}: label 200 at row 2 is "
                                  "outside 0..9 (the dataset's 10 classes)")


def idx(path: Path, array: np.ndarray) -> None:
    path.write_bytes(bytes([0, 0, 8, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape) + array.astype(np.uint8).tobytes())


def test_a_label_beyond_the_classes_names_its_idx_file_and_row(tmp_path: Path):
    images = np.zeros((6, 28, 28), dtype=np.uint8)
    idx(tmp_path / "train-images-idx3-ubyte", images)
    idx(tmp_path / "t10k-images-idx3-ubyte", images)
    idx(tmp_path / "train-labels-idx1-ubyte", np.arange(6))
    idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([0, 1, 2, 3, 10, 4]))
    with pytest.raises(DatasetError) as refused:
        load_dataset("mnist", tmp_path)
    assert str(refused.value) == (f"{tmp_path / 't10k-labels-idx1-ubyte'}: label 10 at row 4 "
                                  "is outside 0..9 (the dataset's 10 classes)")
    idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([0, 1, 2, 3, 9, 4]))
    assert load_dataset("mnist", tmp_path).test.y.tolist() == [0, 1, 2, 3, 9, 4]
