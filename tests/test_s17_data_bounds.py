"""Memory bounded by what is present: IDX headers and label noise over many classes.

An IDX header's sizes were trusted up to the bytes a ``.gz`` inflated to (a 9 MB file made
2 GiB, then twice that joining them); label noise built the (C, C) transition matrix (1.4 GiB
for 200 labels of 8,000 classes).
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from waiting import GUARD

from pflkit.sdk.data import Dataset, DatasetNotFoundError, PartitionConfig, build_federation
from pflkit.sdk.data.federation import deal
from pflkit.sdk.data.image_files import MAX_IDX_BYTES, read_idx


def peak_bytes(work: Callable[[], object]) -> int:
    """The most bytes Python and numpy held at once while ``work`` ran."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def labels_gz(path: Path, claimed: int, present: int) -> Path:
    """An IDX labels file whose header claims ``claimed`` labels and holds ``present`` zeros."""
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(bytes([0, 0, 8, 1]) + claimed.to_bytes(4, "big"))
        for start in range(0, present, 1 << 24):
            handle.write(bytes(min(1 << 24, present - start)))
    return path


def test_an_idx_header_claiming_more_than_the_bound_is_refused_before_reading(tmp_path: Path):
    """2**31 labels claimed over 64 MiB of zeros: the zeros were inflated and held first."""
    path = labels_gz(tmp_path / "train-labels-idx1-ubyte.gz", 2**31, 64 << 20)

    def read() -> None:
        with pytest.raises(DatasetNotFoundError) as refused:
            read_idx(path)
        assert str(refused.value) == (f"{path}: its header claims (2147483648,), 2147483648 "
                                      f"bytes of data; an IDX file holds at most {MAX_IDX_BYTES} "
                                      "(1 GiB)")

    assert peak_bytes(read) < 1 << 20
    huge = tmp_path / "train-images-idx3-ubyte"  # three axes of 2**32 - 1: 7.9e28 bytes
    huge.write_bytes(bytes([0, 0, 8, 3]) + (2**32 - 1).to_bytes(4, "big") * 3)
    with pytest.raises(DatasetNotFoundError, match=r"claims \(4294967295, 4294967295, "
                                                   r"4294967295\), 79228162458924105385300197375"):
        read_idx(huge)


MEASURE = """
import sys
from pathlib import Path
from pflkit.sdk.data.image_files import read_idx

def kib(field):
    status = Path("/proc/self/status").read_text().split(field + ":")[1]
    return int(status.split()[0])

Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
before = kib("VmRSS")
assert read_idx(Path(sys.argv[1])).shape == (256 << 20,)
print((kib("VmHWM") - before) // 1024)
"""


def test_an_idx_file_is_read_into_memory_once_not_twice(tmp_path: Path):
    """256 MiB of labels took 512 MiB: the chunks read, then their join."""
    path = labels_gz(tmp_path / "train-labels-idx1-ubyte.gz", 256 << 20, 256 << 20)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True,
                          text=True, timeout=GUARD, check=True)
    above_mib = int(done.stdout.split()[-1])
    assert above_mib < 360, f"{above_mib} MiB above the start for 256 MiB of data"


def test_an_idx_file_with_what_its_header_claims_reads_as_before(tmp_path: Path):
    images = np.random.default_rng(0).integers(0, 256, (3, 5, 4), dtype=np.uint8)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 3]) + b"".join(
        d.to_bytes(4, "big") for d in images.shape) + images.tobytes()))
    assert np.array_equal(read_idx(path), images)
    not_idx = tmp_path / "t10k-labels-idx1-ubyte"
    not_idx.write_bytes(b"\x89PNG\r\n\x1a\n")  # a PNG in the labels' place
    with pytest.raises(DatasetNotFoundError, match="is not an unsigned-byte IDX file"):
        read_idx(not_idx)


def many_classes(num_classes: int, rows: int = 200) -> Dataset:
    """``rows`` feature rows whose labels spread over ``num_classes`` classes."""
    y = torch.arange(rows) * (num_classes // rows)
    x = torch.randn(rows, 3, generator=torch.Generator().manual_seed(0))
    return Dataset.from_raw("many", [f"c{c}" for c in range(num_classes)], (x, y), (x, y))


@pytest.mark.parametrize("noise", ["pair", "symmetric"])
def test_label_noise_over_thousands_of_classes_needs_memory_of_the_labels(noise: str):
    """2,000 classes: the (C, C) matrix and its copies held 100+ MiB for 200 labels."""
    data = many_classes(2000)
    config = PartitionConfig("iid", 4, noise=noise, noise_rate=0.5)
    peak = peak_bytes(lambda: build_federation(data, config, seed=3))
    assert peak < 16 << 20, f"{peak >> 20} MiB for 200 labels"
    dealt = deal(data.train.y.numpy(), 2000, config, seed=3)
    clean = np.concatenate([data.train.y.numpy()[dealt.train[c]] for c in dealt.labels])
    flipped = np.concatenate(list(dealt.labels.values())) != clean
    assert 0.3 < flipped.mean() < 0.7
