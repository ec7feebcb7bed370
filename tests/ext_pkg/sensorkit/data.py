"""A tabular dataset: 12 raw sensor features per row, 4 activities, from 12 users.

Each user has a sensor of their own (a gain and an offset per feature) and an activity mix of
their own, drawn from the seed, and each row names its user: ``partition.kind = "natural"``
keeps the users as the clients, the other kinds deal the pooled rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pflkit.sdk.data import Dataset, DatasetSource, DatasetSpec, Standardize

CLASSES = ("idle", "walking", "running", "cycling")
FEATURES = 12
USERS = 12
RAW_SCALE = (50.0, 10.0)  # raw readings are around 50 +- 10 units


def load_sensors(root: Path | None, seed: int) -> Dataset:
    """1200 train and 400 test rows; the class centers are fixed, users and rows from ``seed``."""
    centers = np.random.default_rng(12345).normal(0.0, 1.0, size=(len(CLASSES), FEATURES))
    rng = np.random.default_rng(seed)
    share = rng.dirichlet(np.full(USERS, 2.0))  # uneven user sizes: some below min_size
    gain = rng.uniform(0.7, 1.4, size=(USERS, FEATURES))  # the per-user feature shift
    offset = rng.normal(0.0, 0.75, size=(USERS, FEATURES))
    mix = rng.dirichlet(np.full(len(CLASSES), 0.7), size=USERS)  # the per-user label mix

    def rows(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        user = rng.choice(USERS, size=n, p=share)
        cumulative = mix[user].cumsum(axis=1)
        cumulative[:, -1] = 1.0  # a draw past a rounded-down total is the last class
        y = (rng.random((n, 1)) < cumulative).argmax(axis=1)  # (n,) labels
        z = centers[y] + rng.normal(0.0, 1.0, size=(n, FEATURES))
        x = RAW_SCALE[0] + RAW_SCALE[1] * (gain[user] * z + offset[user])
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y), torch.tensor(user)

    tx, ty, users = rows(1200)
    sx, sy, _ = rows(400)  # the global test set: the same users' sensors
    return Dataset.from_raw("sensors", CLASSES, (tx, ty), (sx, sy), Standardize.fit(tx),
                            users=users)


def sensor_spec(size: tuple[int, int] | None) -> DatasetSpec:
    """Classes, input shape and preprocessing without generating the rows (for the server)."""
    return load_sensors(None, 0).spec


SENSORS = DatasetSource(load_sensors, sensor_spec, "12 sensor features, 4 activities, 12 users")
