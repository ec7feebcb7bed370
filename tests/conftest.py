"""Shared fixtures: one torch thread per test worker and per process it spawns; small datasets.

Results are compared bit for bit across processes (pfl-server vs the in-process simulation,
pfl-client vs FederatedClient): a matmul's reduction order depends on the thread count (on an
AVX-512 machine a 2-thread server's hypernetwork head differed by 7e-9 from the 1-thread
test's), so every process a test starts inherits OMP_NUM_THREADS=1, which torch reads at
start-up, and the test process itself runs one thread.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/waiting.py: GUARD, wait_until

TORCH_THREADS = 1
os.environ["OMP_NUM_THREADS"] = str(TORCH_THREADS)  # inherited by every spawned process
torch.set_num_threads(TORCH_THREADS)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test starts at one torch thread, whatever the test before it ran in-process.

    ``pfl-client --threads 4096`` through typer's CliRunner (its --help range test) set the
    worker's torch to 4096 threads: every later test of that worker ran oversubscribed (CI took
    56 minutes) and its simulations stopped matching the 1-thread server bit for bit.
    """
    yield
    if torch.get_num_threads() != TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)


@pytest.fixture(scope="session")
def synthetic():
    """The seeded synthetic dataset (28x28, 10 classes)."""
    from pflkit.sdk.data import load_dataset

    return load_dataset("synthetic", seed=0)
