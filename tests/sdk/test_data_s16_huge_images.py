"""Preprocessing huge images: the same numbers, in memory about one chunk of rows above its input.

Resizing uint8 images to a small side made float32 copies of them all at full size first
(8x the input's bytes above it, for a result of a few MiB).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from waiting import GUARD

from pflkit.sdk.data.spec import Dataset, Preprocessing, Standardize

MEASURE = """
import resource, torch
from pflkit.sdk.data.spec import Dataset, Preprocessing
raw = torch.randint(0, 255, (60, 3, 1024, 1024), dtype=torch.uint8)  # 180 MiB
labels = torch.zeros(60, dtype=torch.int64)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
Dataset.from_raw("big", ["a"], (raw, labels), (raw[:1], labels[:1]),
                 Preprocessing(3, (64, 64), (0.5,) * 3, (0.25,) * 3))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_resizing_huge_images_needs_about_a_chunk_of_memory_above_its_input():
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                          timeout=GUARD, check=True)
    above_mib = int(done.stdout.split()[-1])
    assert above_mib < 512, f"{above_mib} MiB above a 180 MiB input (1440 at once)"


def test_a_chunked_preprocessing_gives_the_numbers_of_the_documented_formula():
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 255, (100, 3, 256, 256), dtype=torch.uint8, generator=g)  # 3 chunks
    pre = Preprocessing(3, (17, 23), (0.5, 0.4, 0.3), (0.25, 0.2, 0.3))
    resized = F.interpolate(raw.float() / 255.0, size=(17, 23), mode="bilinear",
                            align_corners=False)
    expected = (resized - torch.tensor(pre.mean).view(1, -1, 1, 1)) / \
        torch.tensor(pre.std).view(1, -1, 1, 1)
    assert torch.equal(pre.apply(raw), expected)
    features = torch.randn(40_000, 500, generator=g, dtype=torch.float64)  # 2 chunks
    scale = Standardize((500,), (0.5,) * 500, (2.0,) * 500)
    assert torch.equal(scale.apply(features), (features.float() - 0.5) / 2.0)
    data = Dataset.from_raw("tab", ["a"], (features, torch.zeros(40_000, dtype=torch.int64)),
                            (features[:3], torch.zeros(3, dtype=torch.int64)), scale)
    assert data.train.x.shape == (40_000, 500) and data.train.x.dtype == torch.float32


CHECK_ROWS = """
import resource, sys, numpy as np
from pathlib import Path
from pflkit.sdk.data import load_dataset
root = Path(sys.argv[1])
np.save(root / "train_x.npy", np.ones((50_000, 2000), dtype=np.float32))  # 381 MiB
np.save(root / "train_y.npy", np.zeros(50_000, dtype=np.int64))
np.save(root / "test_x.npy", np.ones((2, 2000), dtype=np.float32))
np.save(root / "test_y.npy", np.zeros(2, dtype=np.int64))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
load_dataset("folder", root)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_checking_a_datasets_rows_for_nan_needs_about_a_chunk_above_them(tmp_path: Path):
    """The NaN/Inf check of every dataset (and device) took 1.8x the inputs' bytes above them."""
    done = subprocess.run([sys.executable, "-c", CHECK_ROWS, str(tmp_path)], capture_output=True,
                          text=True, timeout=GUARD, check=True)
    above_mib = int(done.stdout.split()[-1])
    assert above_mib < 300, f"{above_mib} MiB above the 381 MiB of inputs loaded (673 at once)"
