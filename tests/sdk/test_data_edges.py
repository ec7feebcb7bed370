"""A researcher's own data at its edges: every mistake is one line naming the file or setting.

Found by feeding the ``folder`` dataset, the IDX reader, label noise and the Dirichlet deal
what real folders hold (text columns, 1-D features, a stray label id, a non-UTF-8 class list,
a lying header); before the fixes these were tracebacks, a hang or a silently ignored key.
"""

from __future__ import annotations

import gzip
import io
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pydantic
import pytest
import torch

from pflkit.sdk.data import (
    DatasetError,
    DatasetNotFoundError,
    PartitionConfig,
    load_dataset,
    partition,
)
from pflkit.sdk.data.federation import deal
from pflkit.sdk.data.image_files import read_idx
from pflkit.sdk.tensorio import save_state

ROWS = 12


def write_folder(root: Path, **files: object) -> Path:
    """A valid npy folder (12 rows of 3 features, labels 0..2), with ``files`` replacing parts.

    A value of bytes or str is written as the file of that name; an array as ``<key>.npy``.
    """
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(ROWS, 3)).astype(np.float32), np.arange(ROWS) % 3
    arrays: dict[str, object] = {"train_x": x, "train_y": y, "test_x": x, "test_y": y}
    for key, value in {**arrays, **files}.items():
        if isinstance(value, bytes | str):
            path = root / key
            path.write_bytes(value.encode() if isinstance(value, str) else value)
        else:
            np.save(root / f"{key}.npy", value)
    return root


def refusal(root: Path) -> str:
    """The one-line message loading ``root`` is refused with."""
    with pytest.raises(DatasetError) as caught:
        load_dataset("folder", root)
    message = str(caught.value)
    assert "\n" not in message
    return message


X = np.zeros((ROWS, 3), np.float32)
Y = np.arange(ROWS) % 3

BAD_FOLDERS = {  # what a folder holds -> (the file to blame, what the line says)
    "text features": ({"train_x": np.array([["a"] * 3] * ROWS)}, "train_x.npy",
                      "<U1 values, not real numbers"),
    "complex features": ({"train_x": X.astype(np.complex64)}, "train_x.npy",
                         "complex64 values, not real numbers"),
    "pickled objects": ({"train_x": np.array([None] * ROWS, dtype=object)}, "train_x.npy",
                        "object values, not real numbers"),
    "1-D features": ({"train_x": X[:, 0], "test_x": X[:, 0]}, "train_x.npy",
                     r"at least 2 dimensions, got \(12,\)"),
    "fewer labels than rows": ({"train_y": Y[:5]}, "train_y.npy",
                               r"one per row of x \(12,\), got torch.int64 \(5,\)"),
    "text user ids": ({"train_users": np.array(["u"] * ROWS)}, "train_users.npy",
                      "not real numbers"),
    "label beyond classes.txt": ({"test_y": np.r_[Y[:-1], 7], "classes.txt": "a\nb\nc\n"},
                                 "test_y.npy", r"label 7 at row 11 is outside 0..2 \(the 3 "),
    "stray label id": ({"train_y": np.r_[Y[:-1], 1_000_001]}, "train_y.npy",
                       "label 1000001 at row 11 is outside 0..99999 without classes.txt"),
    "classes.txt not UTF-8": ({"classes.txt": b"\xff\xfecat\n"}, "classes.txt", "not UTF-8"),
    "classes.txt empty": ({"classes.txt": "\n  \n"}, "classes.txt", "names no class"),
    "a class named twice": ({"classes.txt": "cat\ndog\ncat\n"}, "classes.txt",
                            "class 'cat' is named twice"),
}


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_a_bad_folder_is_one_line_naming_its_file(tmp_path: Path, case: str) -> None:
    """Before: TypeError/IndexError tracebacks, a 1,000,001-class head, duplicate names."""
    files, blamed, says = BAD_FOLDERS[case]
    message = refusal(write_folder(tmp_path, **files))
    assert str(tmp_path / blamed) in message
    assert re.search(says, message), message


def test_a_header_promising_more_than_the_file_holds_is_refused_before_allocating(
        tmp_path: Path) -> None:
    """np.load allocates what a header says first: 1.1 TiB for 64 bytes of data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<f4", "fortran_order": False, "shape": (10**11, 3)})
    message = refusal(write_folder(tmp_path, **{"train_x.npy": buffer.getvalue() + bytes(64)}))
    assert message.startswith(f"{tmp_path / 'train_x.npy'}: holds 64 bytes of data, its "
                              "header says (100000000000, 3) float32")


def test_unsigned_ids_are_read_as_int64(tmp_path: Path) -> None:
    """uint64 labels were a NotImplementedError ("max_all" not implemented for 'UInt64').

    (A bool users column is refused: test_folder_users.py.)
    """
    data = load_dataset("folder", write_folder(
        tmp_path, train_y=Y.astype(np.uint64), test_y=Y.astype(np.uint8),
        train_users=(np.arange(ROWS) % 2).astype(np.uint16)))
    assert data.train.y.dtype == data.test.y.dtype == data.users.dtype == torch.int64
    assert data.spec.classes == ("0", "1", "2") and data.users.tolist()[:3] == [0, 1, 0]


def test_safetensors_folders_are_checked_like_npy_ones(tmp_path: Path) -> None:
    """The tensor file and the tensor are named (was an IndexError for 1-D x)."""
    x, y = torch.zeros(ROWS), torch.arange(ROWS) % 3
    for split in ("train", "test"):
        save_state(tmp_path / f"{split}.safetensors", {"x": x, "y": y})
    assert refusal(tmp_path).startswith(f"{tmp_path / 'train.safetensors'}: x: x must be (N, ...)")
    save_state(tmp_path / "train.safetensors", {"x": x[:, None], "y": y.float()})
    assert "train.safetensors: y: labels y must be integers" in refusal(tmp_path)


def test_a_gzip_bomb_idx_file_is_read_only_as_far_as_its_header_claims(tmp_path: Path) -> None:
    """A header of 10 bytes before 64 MiB of zeros (64 KiB gzipped) read all 64 MiB first."""
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + bytes(64 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(DatasetNotFoundError, match="holds more than 10 bytes of data, "
                                                       "header says 10"):
            read_idx(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"read {peak} bytes"
    cut = tmp_path / "cut-short"  # a header cut short is not an IDX file
    cut.write_bytes(bytes([0, 0, 8, 1, 0, 0]))
    with pytest.raises(DatasetNotFoundError, match="is not an unsigned-byte IDX file"):
        read_idx(cut)


def test_label_noise_settings_that_would_do_nothing_or_divide_by_zero_are_refused() -> None:
    """A rate without a kind was silently ignored; symmetric noise on 1 class was 1 / 0."""
    with pytest.raises(pydantic.ValidationError, match='noise_rate = 0.4 needs noise = "pair"'):
        PartitionConfig("iid", 4, noise_rate=0.4)
    one_class = PartitionConfig("iid", 4, noise="symmetric", noise_rate=0.5)
    with pytest.raises(ValueError, match='data.noise = "symmetric" needs at least 2 classes'):
        deal(np.zeros(40, dtype=np.int64), 1, one_class, seed=0)


def reference_dirichlet(labels: np.ndarray, clients: int, alpha: float,
                        rng: np.random.Generator, min_size: int) -> list[np.ndarray]:
    """The per-client loop the array version replaced (Hsu et al.'s deal, as first written)."""
    while True:
        parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
        for c in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(clients, alpha)))[:-1] *
                    len(members)).astype(int)
            for m, chunk in enumerate(np.split(members, cuts)):
                parts[m].append(chunk)
        result = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in result) >= min_size:
            return result


@pytest.mark.parametrize(("rows", "classes", "clients", "alpha", "min_size"),
                         [(1000, 10, 10, 0.3, 10), (3000, 100, 40, 0.05, 0),
                          (300, 10, 30, 0.5, 1), (500, 3, 7, 5.0, 20)])
def test_the_array_dirichlet_deal_is_the_loop_it_replaced(rows: int, classes: int, clients: int,
                                                          alpha: float, min_size: int) -> None:
    """Same seed, same rows per client: runs dealt before the rewrite deal the same again."""
    labels = np.random.default_rng(rows).integers(0, classes, rows)
    for seed in range(3):
        got = partition.dirichlet(labels, clients, alpha, np.random.default_rng(seed), min_size)
        want = reference_dirichlet(labels, clients, alpha, np.random.default_rng(seed), min_size)
        assert [p.tolist() for p in got] == [p.tolist() for p in want]


@pytest.mark.parametrize("kind", ["iid", "shards", "dirichlet", "natural"])
def test_the_seed_fixes_the_partition_and_another_seed_changes_it(kind: str) -> None:
    """Every kind: same seed, same clients' rows and test rows; seed + 1, other ones."""
    rng = np.random.default_rng(3)
    labels, users = rng.integers(0, 5, 600), rng.integers(0, 30, 600)
    config = PartitionConfig(kind, 20, alpha=0.5, min_size=5, test_fraction=0.2)

    def rows(seed: int) -> list[list[int]]:
        got = deal(labels, 5, config, seed, users)
        return [got.train[c].tolist() + got.test[c].tolist() for c in sorted(got.train)]

    assert rows(7) == rows(7)
    assert rows(7) != rows(8)


def test_init_under_a_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """``pfl-sim init notes.txt/project`` was a NotADirectoryError traceback."""
    from typer.testing import CliRunner

    from pflkit.server.simulator_cli import app

    (tmp_path / "notes.txt").write_text("mine")
    made = CliRunner().invoke(app, ["init", str(tmp_path / "notes.txt" / "project")])
    assert made.exit_code == 2, made.output
    assert "notes.txt/project: Not a directory" in made.output
    assert (tmp_path / "notes.txt").read_text() == "mine"
