"""``pfl-sim init DIR``: a starter project that runs as written and shows each extension point.

The project is a tabular one on purpose (12 sensor features, 4 activities): it shows that a
model and a dataset need not be images, and it runs in seconds. Its files are the quick start
of docs/extending.md; tests/server/test_starter.py runs them through pfl-sim and pfl-export.
"""

from __future__ import annotations

from pathlib import Path

RUN_TOML = '''\
# A pflkit project: personalized federated learning on tabular sensor data.
#   pfl-sim --config run.toml --out runs/first
#   pfl-export --run runs/first --client 0 --lambda 0.5 --allow-imports model,data
# docs/extending.md explains every part; docs/simulator.md lists every key.
seed = 0
rounds = 10
eval_interval = 5
checkpoint_interval = 5

[data]
dataset = "data:load_sensors"  # the function load_sensors in data.py (this folder)
kind = "dirichlet"             # each client sees the activities in its own proportions
num_clients = 10
alpha = 0.5
test_fraction = 0.2            # each client keeps 20% of its rows to test its own model

[model]
name = "model:SensorNet"       # the class SensorNet in model.py

[algorithm]
name = "superfed_mm"           # or fedavg, fedper, fedrod_hyper, ... (docs/algorithms.md)

[training]
clients_per_round = 5
epochs = 2
batch_size = 32
lr = 0.05
'''

MODEL_PY = '''\
"""The model: a body (input -> features) and a head (features -> one score per class).

pflkit calls ``SensorNet(input_shape, num_classes)``; ``input_shape`` is one input without the
batch dimension, here (12,). Personalization methods address the two halves by name: FedPer
keeps ``head.*`` on the device, FedRoD adds a second head on the features, SuPerFed mixes
every parameter of a global and a local copy.
"""

from torch import nn

from pflkit.sdk.models import SplitModel


class SensorNet(SplitModel):
    """A two-layer MLP body and a linear head."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        (features,) = input_shape
        hidden = 32
        body = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, hidden), nn.ReLU())
        super().__init__(body, nn.Linear(hidden, num_classes), feature_dim=hidden)
'''

DATA_PY = '''\
"""The data: ``load_sensors(root, seed)`` returns a pflkit ``Dataset``.

Replace the synthetic rows with your own (a CSV file in ``root``, a database, ...) and keep
the contract: inputs of one shape, labels 0..C-1, class names, and the preprocessing that
turns a raw row into the model's input. The model card records that preprocessing, so a
device prepares its rows the same way.
"""

from pathlib import Path

import numpy as np
import torch

from pflkit.sdk.data import Dataset, Standardize

CLASSES = ("idle", "walking", "running", "cycling")
FEATURES = 12


def load_sensors(root: Path | None, seed: int) -> Dataset:
    """2000 train and 500 test rows of 12 raw sensor readings (seeded)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, size=(len(CLASSES), FEATURES))

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = rng.integers(0, len(CLASSES), size=n)
        x = 50.0 + 10.0 * (centers[y] + rng.normal(0.0, 1.0, size=(n, FEATURES)))
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y)

    train, test = draw(2000), draw(500)
    # standardize each feature with the train split's mean and std
    return Dataset.from_raw("sensors", CLASSES, train, test, Standardize.fit(train[0]))
'''

README_MD = '''\
# A pflkit project

    pfl-sim --config run.toml --out runs/first          # simulate 10 clients, 10 rounds
    pfl-export --run runs/first --client 0 --lambda 0.5 --allow-imports model,data
                                    # client 0's model: ONNX, .pte, card

- `run.toml`: the run (data split, model, method, training); override any key with
  `--set training.lr=0.1`.
- `model.py`: the network, split into a body and a head.
- `data.py`: the dataset; replace the synthetic rows with yours.

pflkit finds `model.py` and `data.py` because commands add the current folder (and the
config's folder) to Python's path; install your package instead to use it from anywhere.
See docs/extending.md in pflkit for the contracts and for writing your own method.
'''

FILES = {"run.toml": RUN_TOML, "model.py": MODEL_PY, "data.py": DATA_PY,
         "README.md": README_MD}


def write_starter(folder: Path) -> list[Path]:
    """Write the starter files into ``folder`` (created; refused if it holds anything)."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f"{folder} exists and is not an empty folder")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in FILES.items():
        path = folder / name
        path.write_text(text)
        written.append(path)
    return written
