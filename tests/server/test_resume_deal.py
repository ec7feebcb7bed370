"""A resumed run deals each client id the rows it began with, or is refused in one line.

``--resume`` deals the data again. Before, a users file changed while a run was stopped (a
new user 1 sorts first) moved every client id to another user's rows: client 0's stored
personal head went on training on user 1's data, with no warning, while pfl-export kept
reading the stored deal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.server.simulator import Simulation


def _users_folder(root: Path, users: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    root.mkdir(exist_ok=True)
    np.save(root / "train_x.npy", rng.normal(size=(len(users), 5)).astype(np.float32))
    np.save(root / "train_y.npy", rng.integers(0, 3, size=len(users)))
    np.save(root / "train_users.npy", users)
    np.save(root / "test_x.npy", rng.normal(size=(40, 5)).astype(np.float32))
    np.save(root / "test_y.npy", rng.integers(0, 3, size=40))


def _config(root: Path) -> SimConfig:
    return SimConfig.from_toml(f"""seed = 0
rounds = 3
eval_interval = 3
checkpoint_interval = 1
[data]
dataset = "folder"
root = "{root}"
kind = "natural"
min_size = 1
test_fraction = 0.25
[model]
name = "twonn"
[algorithm]
name = "fedper"
[training]
clients_per_round = 2
epochs = 1
batch_size = 16
lr = 0.05
""")


def test_a_run_whose_users_changed_is_not_resumed_on_other_users_data(tmp_path):
    users = np.random.default_rng(1).choice([5, 7, 11, 42, 99], size=200)
    _users_folder(tmp_path / "data", users)
    sim = Simulation(_config(tmp_path / "data"), tmp_path / "run", progress=False)
    sim.run_round()
    sim.close()
    metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()

    resumed = Simulation.resume(tmp_path / "run", progress=False)  # the same data: it goes on
    resumed.close()
    changed = users.copy()
    changed[:30] = 1  # the logs grew a user between stop and resume
    _users_folder(tmp_path / "data", changed)
    with pytest.raises(ConfigError, match=r"^--resume .*run: the data deals the clients other "
                       r"rows than when the run began") as err:
        Simulation.resume(tmp_path / "run", progress=False)
    assert "\n" not in str(err.value)
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics  # nothing changed
