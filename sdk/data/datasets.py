"""The built-in datasets and the dataset resolver.

The file-backed image sets (Fashion-MNIST, MNIST, EMNIST, CIFAR) are read from local files by
sdk/data/image_files.py; ``digits`` and ``synthetic`` need no files; ``folder`` reads a user's
arrays of any shape (sdk/data/folder.py). Each image dataset declares its
:class:`Preprocessing`, so that export and the Android demo apply exactly the same steps to a
new image. A dataset name may also be an import path or a ``pflkit.datasets`` entry point
(sdk/registry.py); the contract is in sdk/data/spec.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pflkit.sdk.config_types import shown
from pflkit.sdk.data.folder import load_folder
from pflkit.sdk.data.image_files import DIGIT_CLASSES, FILE_DATASETS, from_uint8
from pflkit.sdk.data.spec import (
    Dataset,
    DatasetNotFoundError,
    DatasetSource,
    DatasetSpec,
    Preprocessing,
    check_spec,
)
from pflkit.sdk.registry import ExtensionError, check_call, known_names, resolve_as
from pflkit.sdk.seeding import numpy_rng


def _load_digits(root: Path | None, seed: int, size: tuple[int, int] | None = None) -> Dataset:
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
    return from_uint8(spec, images[tr], labels[tr], images[te], labels[te])


def _load_synthetic(root: Path | None, seed: int, size: tuple[int, int] | None = None) -> Dataset:
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
    return from_uint8(_synthetic_spec((h, w)), tx, ty, sx, sy)


def _synthetic_spec(size: tuple[int, int] | None = None) -> DatasetSpec:
    """Without the data: the server need not draw 2500 images (3 GB at resize = 512)."""
    return DatasetSpec("synthetic", DIGIT_CLASSES,
                       Preprocessing(1, size or (28, 28), (0.5,), (0.25,)))


DATASETS: dict[str, DatasetSource] = {
    **FILE_DATASETS,
    "digits": DatasetSource(_load_digits, doc="scikit-learn's bundled 8x8 digits"),
    "synthetic": DatasetSource(_load_synthetic, _synthetic_spec,
                               "seeded class-conditional images for tests"),
    "folder": DatasetSource(load_folder, doc="ROOT/train and ROOT/test as safetensors or .npy "
                                             "files (any input shape)"),
}


def dataset_source(ref: str) -> DatasetSource:
    """The source a dataset name, import path or entry point resolves to (checked, not called)."""
    expected = "a DatasetSource or a function (root, seed) -> Dataset"
    source = resolve_as("dataset", ref, DATASETS, DatasetSource, DatasetSource, expected)
    if isinstance(source.load, type) and not issubclass(source.load, Dataset):
        raise ExtensionError(f"dataset '{ref}' is the class {source.load.__name__}, not "
                             f"{expected}")
    check_call("dataset", ref, source.load, expected, root=None, seed=0)
    return source


def load_dataset(
    name: str, root: Path | str | None = None, size: tuple[int, int] | None = None,
    seed: int = 0,
) -> Dataset:
    """Load a dataset, preprocessed; ``size`` resizes images (e.g. (32, 32) for LeNet-5).

    A ``root`` that is not a folder is refused, whatever the dataset: a user who names one
    (``--data-root``) must not get a dataset that needs no files as if it had been read; a
    root given is also the only place the file loaders look (Fashion-MNIST's Debian package
    and ``$PFLKIT_DATA_DIR`` are for runs that name none). The loader tries first, so that
    where it finds nothing its own message says which files to put where.
    """
    folder = Path(root) if root else None
    dataset = dataset_source(name).load_checked(name, folder, size, seed)
    if folder is not None and not folder.is_dir():
        what = "is not a folder" if folder.exists() else "no such folder"
        raise DatasetNotFoundError(f"dataset '{name}': data root {shown(str(folder))}: {what} "
                                   "(--data-root, [data] root)")
    return dataset


def dataset_spec(name: str, size: tuple[int, int] | None = None,
                 root: Path | str | None = None) -> DatasetSpec:
    """A dataset's spec (classes, input shape, preprocessing), without its files if it can.

    Checked as a loaded dataset's spec is: pfl-server builds its model from this one alone.
    """
    source = dataset_source(name)
    if source.spec is not None:
        return check_spec(name, source.spec(size))
    return load_dataset(name, root, size).spec


def dataset_names() -> list[str]:
    """Built-in dataset names and installed ``pflkit.datasets`` entry points."""
    return known_names("dataset", DATASETS)
