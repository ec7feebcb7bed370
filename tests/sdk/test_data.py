import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from pflkit.sdk.data import (
    DatasetNotFoundError,
    PartitionConfig,
    build_federation,
    load_dataset,
    partition_table,
    plot_partition,
)
from pflkit.sdk.data.datasets import Preprocessing
from pflkit.sdk.data.image_files import FMNIST_DEBIAN_DIR, read_idx
from pflkit.sdk.registry import ExtensionError


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def fake_mnist_folder(root: Path, n=20) -> Path:
    rng = np.random.default_rng(0)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    write_idx(raw / "train-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
    write_idx(raw / "train-labels-idx1-ubyte", rng.integers(0, 10, n))
    write_idx(raw / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (5, 28, 28)))
    write_idx(raw / "t10k-labels-idx1-ubyte.gz", rng.integers(0, 10, 5))
    return root


def test_missing_dataset_is_a_clear_error_that_says_where_to_put_files(tmp_path, monkeypatch):
    monkeypatch.delenv("PFLKIT_DATA_DIR", raising=False)
    monkeypatch.delenv("PFLKIT_MNIST_DIR", raising=False)
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("mnist", root=tmp_path / "nowhere")
    message = str(err.value)
    assert "train-images-idx3-ubyte" in message and "--data-root" in message
    assert str(tmp_path / "nowhere") in message
    with pytest.raises(DatasetNotFoundError, match="binary version"):
        load_dataset("cifar10", root=tmp_path)
    with pytest.raises(ExtensionError, match="unknown dataset 'imagenet'; known: cifar10"):
        load_dataset("imagenet")


def test_mnist_from_a_user_folder_in_torchvision_layout(tmp_path):
    ds = load_dataset("mnist", root=fake_mnist_folder(tmp_path))
    assert ds.train.x.shape == (20, 1, 28, 28) and ds.test.x.shape == (5, 1, 28, 28)
    assert ds.train.y.dtype == torch.int64
    resized = load_dataset("mnist", root=tmp_path, size=(32, 32))
    assert resized.train.x.shape == (20, 1, 32, 32)
    assert resized.spec.preprocessing.size == (32, 32)


def test_truncated_idx_file_is_rejected(tmp_path):
    path = tmp_path / "bad-idx"
    path.write_bytes(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"abc")
    with pytest.raises(DatasetNotFoundError, match="header says 10"):
        read_idx(path)


def test_preprocessing_is_scale_resize_normalize():
    pre = Preprocessing(1, (4, 4), (0.5,), (0.25,))
    pixels = torch.full((1, 1, 2, 2), 255.0)
    out = pre.apply(pixels)
    assert out.shape == (1, 1, 4, 4)
    assert torch.allclose(out, torch.full_like(out, 2.0))
    assert pre.to_dict()["layout"] == "NCHW"


def test_digits_is_bundled_and_seeded():
    a = load_dataset("digits", seed=1)
    b = load_dataset("digits", seed=1)
    assert a.spec.input_shape == (1, 8, 8) and a.spec.num_classes == 10
    assert len(a.train) + len(a.test) == 1797
    assert torch.equal(a.train.y, b.train.y)


@pytest.mark.skipif(not FMNIST_DEBIAN_DIR.is_dir(), reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_from_the_debian_package():
    ds = load_dataset("fmnist")
    assert ds.train.x.shape == (60000, 1, 28, 28) and len(ds.test) == 10000
    assert ds.spec.classes[9] == "Ankle boot"
    assert torch.equal(torch.bincount(ds.test.y), torch.full((10,), 1000))
    assert abs(float(ds.train.x.mean())) < 0.05 and abs(float(ds.train.x.std()) - 1) < 0.05


def test_federation_summary_noise_and_new_clients(synthetic, tmp_path):
    config = PartitionConfig("dirichlet", 10, 0.5, min_size=5, test_fraction=0.25,
                             num_new_clients=3, noise="pair", noise_rate=0.5)
    fed = build_federation(synthetic, config, seed=4)
    assert len(fed.clients) == 7 and len(fed.new_clients) == 3
    hist = fed.class_histogram()
    total_train = sum(len(c.train) for c in fed.all_clients.values())
    total_test = sum(len(c.test) for c in fed.all_clients.values())
    assert hist.sum() == total_train and total_train + total_test == len(synthetic.train)
    # Noise touches train labels only: the clean federation has the same rows and test labels.
    clean = build_federation(synthetic, PartitionConfig("dirichlet", 10, 0.5, min_size=5,
                                                        test_fraction=0.25, num_new_clients=3),
                             seed=4)
    flipped = total = 0
    for cid, client in fed.all_clients.items():
        twin = clean.all_clients[cid]
        assert torch.equal(client.train.x, twin.train.x)
        assert torch.equal(client.test.y, twin.test.y)
        flipped += int((client.train.y != twin.train.y).sum())
        total += len(client.train)
    assert 0.4 < flipped / total < 0.6
    text = partition_table(fed)
    assert "client" in text and "new client" in text
    assert plot_partition(fed, tmp_path / "p.png").stat().st_size > 1000
