"""Shared fixtures: one torch thread per test worker, small real datasets."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def synthetic():
    """The seeded synthetic dataset (28x28, 10 classes)."""
    from pflkit.sdk.data import load_dataset

    return load_dataset("synthetic", seed=0)
