"""A tabular dataset: 12 raw sensor features per row, 4 activities, standardized per feature."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pflkit.sdk.data import Dataset, DatasetSource, DatasetSpec, Standardize

CLASSES = ("idle", "walking", "running", "cycling")
FEATURES = 12
RAW_SCALE = (50.0, 10.0)  # raw readings are around 50 +- 10 units


def _rows(rng: np.random.Generator, centers: np.ndarray, n: int
          ) -> tuple[torch.Tensor, torch.Tensor]:
    y = rng.integers(0, len(CLASSES), size=n)
    x = RAW_SCALE[0] + RAW_SCALE[1] * (centers[y] + rng.normal(0.0, 1.0, size=(n, FEATURES)))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def load_sensors(root: Path | None, seed: int) -> Dataset:
    """1200 train and 400 test rows; the class centers are fixed, the rows drawn from ``seed``."""
    centers = np.random.default_rng(12345).normal(0.0, 1.0, size=(len(CLASSES), FEATURES))
    rng = np.random.default_rng(seed)
    train, test = _rows(rng, centers, 1200), _rows(rng, centers, 400)
    return Dataset.from_raw("sensors", CLASSES, train, test, Standardize.fit(train[0]))


def sensor_spec(size: tuple[int, int] | None) -> DatasetSpec:
    """Classes, input shape and preprocessing without generating the rows (for the server)."""
    return load_sensors(None, 0).spec


SENSORS = DatasetSource(load_sensors, sensor_spec, "12 sensor features, 4 activities")
