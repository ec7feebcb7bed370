"""User data of any shape: the ``folder`` dataset and the checks on a loader's result."""

import numpy as np
import pytest
import torch

from pflkit.sdk.data import Dataset, DatasetError, DatasetNotFoundError, load_dataset
from pflkit.sdk.data.spec import DatasetSource, Standardize
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.tensorio import save_state
from pflkit.server.simulator import Simulation


def sequences(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, 5, 3) float sequences shifted by their label (0, 1 or 2)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    x = rng.normal(size=(n, 5, 3)) + y[:, None, None]
    return x.astype(np.float32), y.astype(np.int64)


def test_folder_of_numpy_sequences_with_class_names(tmp_path):
    for split, n in (("train", 120), ("test", 30)):
        x, y = sequences(n, seed=n)
        np.save(tmp_path / f"{split}_x.npy", x)
        np.save(tmp_path / f"{split}_y.npy", y)
    (tmp_path / "classes.txt").write_text("low\nmid\nhigh\n")
    data = load_dataset("folder", tmp_path)
    assert data.spec.input_shape == (5, 3) and data.spec.classes == ("low", "mid", "high")
    assert data.spec.preprocessing.to_dict()["layout"] == "NTF"
    assert data.train.x.dtype == torch.float32 and len(data.test) == 30


def test_folder_of_safetensors_runs_a_simulation(tmp_path):
    for split, n in (("train", 160), ("test", 40)):
        x, y = sequences(n, seed=n)
        save_state(tmp_path / "data" / f"{split}.safetensors",
                   {"x": torch.from_numpy(x), "y": torch.from_numpy(y)})
    config = SimConfig(
        rounds=1, eval_interval=1, checkpoint_interval=1,
        data=DataConfig(dataset="folder", root=str(tmp_path / "data"), kind="iid", num_clients=4,
                        test_fraction=0.25),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedper"),
        training=TrainingConfig(clients_per_round=2, epochs=1, batch_size=16, lr=0.1))
    result = Simulation(config, tmp_path / "run", progress=False).run()
    assert result.final["global_model"]["top1"] >= 0.0
    assert (tmp_path / "run" / "partition.safetensors").is_file()


def test_folder_errors_say_what_is_missing(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"set \[data\] root"):
        load_dataset("folder")
    with pytest.raises(DatasetNotFoundError, match="no train.safetensors or train_x.npy"):
        load_dataset("folder", tmp_path)
    x, _ = sequences(10, 0)
    for split in ("train", "test"):
        np.save(tmp_path / f"{split}_x.npy", x)
        np.save(tmp_path / f"{split}_y.npy", np.zeros(10, dtype=np.float32))
    with pytest.raises(DatasetError, match="labels y must be integers"):
        load_dataset("folder", tmp_path)


def bad_loader(root, seed):
    x = torch.zeros(10, 4, dtype=torch.float64)
    return Dataset.from_raw("bad", ["a", "b"], (x, torch.zeros(10)), (x, torch.zeros(10)),
                            Standardize((4,)))


def test_a_loader_breaking_the_contract_is_one_line_naming_it():
    source = DatasetSource(lambda root, seed: "not a dataset")
    with pytest.raises(DatasetError, match="dataset 'mine' returned a str, not a pflkit Dataset"):
        source.load_checked("mine", None, None, 0)
    labels = DatasetSource(lambda root, seed: Dataset.from_raw(
        "l", ["a"], (torch.zeros(3, 2), torch.tensor([0, 1, 0])), (torch.zeros(1, 2),
                                                                  torch.tensor([0]))))
    with pytest.raises(DatasetError, match=r"train labels must be in 0..0 \(1 classes\)"):
        labels.load_checked("l", None, None, 0)
    with pytest.raises(DatasetError, match="cannot be resized"):
        DatasetSource(bad_loader).load_checked("bad", None, (8, 8), 0)
    rows = torch.zeros(4, 2)
    rows[2, 1] = float("inf")
    unfinite = DatasetSource(lambda root, seed: Dataset.from_raw(
        "n", ["a"], (rows, torch.zeros(4, dtype=torch.long)), (torch.zeros(1, 2),
                                                               torch.tensor([0]))))
    with pytest.raises(DatasetError, match=r"dataset 'n': train.x has NaN or Inf in 1 row\(s\), "
                                           "the first at row 2"):
        unfinite.load_checked("n", None, None, 0)
