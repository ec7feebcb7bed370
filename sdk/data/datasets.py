"""The dataset registry: real image sets read from local files, never downloaded.

Each dataset declares its :class:`Preprocessing` (scale to [0, 1], optional bilinear resize,
per-channel mean/std) so that export and the Android demo apply exactly the same steps to a
new image. Files come from, in order: the ``root`` argument, the dataset's environment
variable (``PFLKIT_FMNIST_DIR`` ...), ``$PFLKIT_DATA_DIR``, and for Fashion-MNIST the Debian
package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``). A missing file is a
:class:`DatasetNotFoundError` that says which files to put where.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.seeding import numpy_rng

FMNIST_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where pflkit looked; the message says where to put them."""


@dataclass(frozen=True)
class Preprocessing:
    """How a raw image becomes a model input: ``(resize(pixels / 255) - mean) / std``.

    ``size`` is (H, W) after the optional bilinear resize (align_corners=False);
    ``mean``/``std`` have one entry per channel. Layout is NCHW float32.
    """

    channels: int
    size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    pixel_scale: float = 255.0
    resize: str = "bilinear"

    def to_dict(self) -> dict[str, object]:
        """JSON form used by model cards."""
        return {
            "channels": self.channels,
            "size": list(self.size),
            "pixel_scale": self.pixel_scale,
            "resize": self.resize,
            "mean": list(self.mean),
            "std": list(self.std),
            "layout": "NCHW",
        }

    def apply(self, pixels: torch.Tensor) -> torch.Tensor:
        """Raw pixels (N, C, H, W) in [0, pixel_scale] -> normalized float32 inputs."""
        x = pixels.to(torch.float32) / self.pixel_scale
        if tuple(x.shape[-2:]) != self.size:
            x = F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        return (x - mean) / std


@dataclass(frozen=True)
class DatasetSpec:
    """What a model and an export need to know about a dataset."""

    name: str
    classes: tuple[str, ...]
    preprocessing: Preprocessing

    @property
    def num_classes(self) -> int:
        """Number of labels."""
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one preprocessed input."""
        return (self.preprocessing.channels, *self.preprocessing.size)


@dataclass(frozen=True)
class Dataset:
    """A train and a test split, preprocessed, plus the spec that produced them."""

    spec: DatasetSpec
    train: LabeledTensors
    test: LabeledTensors


@dataclass(frozen=True)
class _Entry:
    loader: Callable[[Path | None, tuple[int, int] | None, int], Dataset]
    doc: str
    env: str | None = None
    needs_files: bool = True
    aliases: tuple[str, ...] = field(default=())


FMNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
DIGIT_CLASSES = tuple(str(i) for i in range(10))
CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip


def _find_file(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped): the MNIST family's format."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as err:
        raise DatasetNotFoundError(f"{path} is unreadable or truncated ({err})") from err
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DatasetNotFoundError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims))
    if len(data) - offset != expected:
        raise DatasetNotFoundError(
            f"{path} holds {len(data) - offset} bytes of data, header says {expected}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def _search_dirs(root: Path | None, env: str | None, default: Path | None) -> list[Path]:
    dirs: list[Path] = []
    if root is not None:
        dirs.append(Path(root))
    if env and os.environ.get(env):
        dirs.append(Path(os.environ[env]))
    if os.environ.get("PFLKIT_DATA_DIR"):
        dirs.append(Path(os.environ["PFLKIT_DATA_DIR"]))
    if default is not None:
        dirs.append(default)
    return dirs


def _idx_quadruple(
    name: str, dirs: list[Path], subdir: str, stems: dict[str, str], hint: str
) -> dict[str, np.ndarray]:
    """Find the four IDX files in the first folder that has them all."""
    tried = []
    for base in dirs:
        for folder in (base / subdir, base) if subdir else (base,):
            found = {key: _find_file(folder, stem) for key, stem in stems.items()}
            tried.append(str(folder))
            if all(found.values()):
                return {key: read_idx(p) for key, p in found.items() if p is not None}
    files = ", ".join(f"{s}[.gz]" for s in stems.values())
    looked = "; ".join(tried) or "nowhere (no folder given)"
    raise DatasetNotFoundError(
        f"dataset '{name}': files not found. Put {files} in a folder and pass it with "
        f"--data-root (or set {hint}). Looked in: {looked}."
    )


_MNIST_STEMS = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def _from_uint8(
    spec: DatasetSpec, train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
    test_y: np.ndarray,
) -> Dataset:
    """Preprocess raw uint8 images (N, C, H, W) with the spec's own recipe."""
    pre = spec.preprocessing

    def prep(raw: np.ndarray) -> torch.Tensor:
        return pre.apply(torch.from_numpy(np.array(raw, copy=True)))

    return Dataset(
        spec,
        LabeledTensors(prep(train_x), torch.from_numpy(train_y.astype(np.int64))),
        LabeledTensors(prep(test_x), torch.from_numpy(test_y.astype(np.int64))),
    )


def _load_fmnist(root: Path | None, size: tuple[int, int] | None, seed: int) -> Dataset:
    dirs = _search_dirs(root, "PFLKIT_FMNIST_DIR", FMNIST_DEBIAN_DIR)
    raw = _idx_quadruple("fmnist", dirs, "FashionMNIST/raw", _MNIST_STEMS,
                         "PFLKIT_FMNIST_DIR, or apt-get install dataset-fashion-mnist")
    spec = dataset_spec("fmnist", size)
    return _from_uint8(spec, raw["train_x"][:, None], raw["train_y"], raw["test_x"][:, None],
                       raw["test_y"])


def _load_mnist(root: Path | None, size: tuple[int, int] | None, seed: int) -> Dataset:
    dirs = _search_dirs(root, "PFLKIT_MNIST_DIR", None)
    raw = _idx_quadruple("mnist", dirs, "MNIST/raw", _MNIST_STEMS, "PFLKIT_MNIST_DIR")
    spec = dataset_spec("mnist", size)
    return _from_uint8(spec, raw["train_x"][:, None], raw["train_y"], raw["test_x"][:, None],
                       raw["test_y"])


def _load_emnist(root: Path | None, size: tuple[int, int] | None, seed: int) -> Dataset:
    """EMNIST 'digits' split; the raw images are stored transposed, as torchvision notes."""
    dirs = _search_dirs(root, "PFLKIT_EMNIST_DIR", None)
    stems = {k: f"emnist-digits-{v.replace('t10k', 'test')}" for k, v in _MNIST_STEMS.items()}
    raw = _idx_quadruple("emnist", dirs, "EMNIST/raw", stems, "PFLKIT_EMNIST_DIR")
    spec = dataset_spec("emnist", size)

    def fix(images: np.ndarray) -> np.ndarray:
        return images.transpose(0, 2, 1)[:, None]

    return _from_uint8(spec, fix(raw["train_x"]), raw["train_y"], fix(raw["test_x"]),
                       raw["test_y"])


def _read_cifar_binary(paths: list[Path], label_bytes: int, label_index: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    record = label_bytes + 3072
    chunks = [np.frombuffer(p.read_bytes(), dtype=np.uint8) for p in paths]
    data = np.concatenate(chunks)
    if data.size % record:
        raise DatasetNotFoundError(f"{paths[0].parent}: CIFAR binary files have a torn record")
    rows = data.reshape(-1, record)
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32), rows[:, label_index].astype(np.int64)


def _cifar(name: str, root: Path | None, size: tuple[int, int] | None, env: str, subdir: str,
           train_files: list[str], test_files: list[str], label_bytes: int) -> Dataset:
    """CIFAR from the *binary* version (plain bytes); the python version is pickles: refused."""
    for base in _search_dirs(root, env, None):
        folder = base / subdir
        if all((folder / f).is_file() for f in train_files + test_files):
            tx, ty = _read_cifar_binary([folder / f for f in train_files], label_bytes,
                                        label_bytes - 1)
            sx, sy = _read_cifar_binary([folder / f for f in test_files], label_bytes,
                                        label_bytes - 1)
            return _from_uint8(dataset_spec(name, size), tx, ty, sx, sy)
    raise DatasetNotFoundError(
        f"dataset '{name}': put the CIFAR *binary version* files "
        f"({', '.join(train_files + test_files)}) in ROOT/{subdir}/ and pass --data-root ROOT "
        f"(or set {env}). The python/pickle version is not read: pflkit never unpickles files."
    )


def _load_cifar10(root: Path | None, size: tuple[int, int] | None, seed: int) -> Dataset:
    return _cifar("cifar10", root, size, "PFLKIT_CIFAR10_DIR", "cifar-10-batches-bin",
                  [f"data_batch_{i}.bin" for i in range(1, 6)], ["test_batch.bin"], 1)


def _load_cifar100(root: Path | None, size: tuple[int, int] | None, seed: int) -> Dataset:
    return _cifar("cifar100", root, size, "PFLKIT_CIFAR100_DIR", "cifar-100-binary",
                  ["train.bin"], ["test.bin"], 2)


def _load_digits(root: Path | None, size: tuple[int, int] | None, seed: int) -> Dataset:
    """scikit-learn's bundled 8x8 digits (values 0..16), split 80/20 with the seed."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.images.astype(np.float32)[:, None]  # (N, 1, 8, 8)
    labels = bunch.target.astype(np.int64)
    order = numpy_rng(seed, "digits-split").permutation(len(labels))
    cut = int(0.8 * len(labels))
    spec = DatasetSpec("digits", DIGIT_CLASSES,
                       Preprocessing(1, size or (8, 8), (0.3,), (0.37,), pixel_scale=16.0))
    tr, te = order[:cut], order[cut:]
    return _from_uint8(spec, images[tr], labels[tr], images[te], labels[te])


def _load_synthetic(root: Path | None, size: tuple[int, int] | None, seed: int) -> Dataset:
    """Seeded class-conditional images for tests: learnable, tiny, no files needed."""
    rng = numpy_rng(seed, "synthetic")
    h, w = size or (28, 28)
    prototypes = rng.uniform(0, 255, size=(10, 1, h, w))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, size=n)
        x = prototypes[y] * 0.6 + rng.uniform(0, 255 * 0.4, size=(n, 1, h, w))
        return np.clip(x, 0, 255).astype(np.float32), y

    tx, ty = draw(2000)
    sx, sy = draw(500)
    spec = DatasetSpec("synthetic", DIGIT_CLASSES, Preprocessing(1, (h, w), (0.5,), (0.25,)))
    return _from_uint8(spec, tx, ty, sx, sy)


DATASETS: dict[str, _Entry] = {
    "fmnist": _Entry(_load_fmnist, "Fashion-MNIST (Debian dataset-fashion-mnist or a folder)",
                     "PFLKIT_FMNIST_DIR"),
    "mnist": _Entry(_load_mnist, "MNIST from ROOT/MNIST/raw", "PFLKIT_MNIST_DIR"),
    "emnist": _Entry(_load_emnist, "EMNIST digits from ROOT/EMNIST/raw", "PFLKIT_EMNIST_DIR"),
    "cifar10": _Entry(_load_cifar10, "CIFAR-10 binary version", "PFLKIT_CIFAR10_DIR"),
    "cifar100": _Entry(_load_cifar100, "CIFAR-100 binary version", "PFLKIT_CIFAR100_DIR"),
    "digits": _Entry(_load_digits, "scikit-learn's bundled 8x8 digits", needs_files=False),
    "synthetic": _Entry(_load_synthetic, "seeded class-conditional images for tests",
                        needs_files=False),
}


def load_dataset(
    name: str, root: Path | str | None = None, size: tuple[int, int] | None = None,
    seed: int = 0,
) -> Dataset:
    """Load a registered dataset, preprocessed; ``size`` resizes (e.g. (32, 32) for LeNet-5)."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset '{name}'; known: {', '.join(sorted(DATASETS))}")
    return DATASETS[name].loader(Path(root) if root else None, size, seed)


# Specs of the file-backed datasets, for callers that need shapes but not data (the aggregation
# server builds models and validates updates from these); tests check them against the loaders.
_FILE_SPECS: dict[str, tuple[tuple[str, ...], int, int, tuple[float, ...], tuple[float, ...]]] = {
    # name: (classes, channels, native side, mean, std); the file loaders take their spec here
    "fmnist": (FMNIST_CLASSES, 1, 28, (0.2860,), (0.3530,)),
    "mnist": (DIGIT_CLASSES, 1, 28, (0.1307,), (0.3081,)),
    "emnist": (DIGIT_CLASSES, 1, 28, (0.1733,), (0.3317,)),
    "cifar10": (CIFAR10_CLASSES, 3, 32, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": (tuple(f"class_{i}" for i in range(100)), 3, 32,
                 (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


def dataset_spec(name: str, size: tuple[int, int] | None = None) -> DatasetSpec:
    """Return a dataset's spec (classes, input shape, preprocessing) without its files."""
    if name in _FILE_SPECS:
        classes, channels, native, mean, std = _FILE_SPECS[name]
        return DatasetSpec(name, classes, Preprocessing(channels, size or (native, native),
                                                        mean, std))
    if name in DATASETS and not DATASETS[name].needs_files:
        return load_dataset(name, None, size).spec
    raise KeyError(f"unknown dataset '{name}'; known: {', '.join(sorted(DATASETS))}")
