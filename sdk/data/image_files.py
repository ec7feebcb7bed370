"""The file-backed image datasets: the MNIST family (IDX files) and CIFAR (binary version).

Nothing is downloaded. Files come from, in order: the ``root`` argument, the dataset's
environment variable (``PFLKIT_FMNIST_DIR`` ...), ``$PFLKIT_DATA_DIR``, and for Fashion-MNIST
the Debian package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``). A missing
file is a :class:`DatasetNotFoundError` that says which files to put where.
"""

from __future__ import annotations

import gzip
import os
import zlib
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from pflkit.sdk.data.spec import (
    Dataset,
    DatasetError,
    DatasetNotFoundError,
    DatasetSource,
    DatasetSpec,
    Preprocessing,
)
from pflkit.sdk.data.tensors import LabeledTensors

FMNIST_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


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


# Pixels (or labels) one IDX file may hold: 1.37 million 28x28 images, 4 GiB as float32; the
# largest MNIST-family file, EMNIST byclass's train images, holds 547 MB. A header claiming
# more (its four-byte sizes allow 2**32 - 1 per axis) is refused before anything is read.
MAX_IDX_BYTES = 2**30
_CHUNK = 1 << 24  # bytes read (and inflated) at a time


def _read_at_most(handle: BinaryIO, limit: int) -> list[bytes]:
    """Up to ``limit`` bytes in chunks: a gzip bomb stops at ``limit``, not at memory."""
    chunks, got = [], 0
    while got < limit and (chunk := handle.read(min(_CHUNK, limit - got))):
        chunks.append(chunk)
        got += len(chunk)
    return chunks


def _joined(chunks: list[bytes], size: int) -> np.ndarray:
    """The chunks as one array, each let go once copied: memory of ``size``, not twice it."""
    data = np.empty(size, dtype=np.uint8)
    at = 0
    chunks.reverse()
    while chunks:
        chunk = chunks.pop()
        data[at : at + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        at += len(chunk)
    return data


def _idx_dims(path: Path, head: bytes, shape: bytes) -> tuple[list[int], int]:
    """The header's dimensions and bytes of data, or one line: not IDX, or claiming too much."""
    ndim = head[3] if len(head) == 4 else 0
    if len(head) < 4 or head[:3] != b"\x00\x00\x08" or len(shape) < 4 * ndim:
        raise DatasetNotFoundError(f"{path} is not an unsigned-byte IDX file")
    dims = [int.from_bytes(shape[4 * i : 4 * i + 4], "big") for i in range(ndim)]
    claimed = int(np.prod(dims, dtype=object))
    if claimed > MAX_IDX_BYTES:
        raise DatasetNotFoundError(f"{path}: its header claims {tuple(dims)}, {claimed} bytes of "
                                   f"data; an IDX file holds at most {MAX_IDX_BYTES} (1 GiB)")
    return dims, claimed


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped): the MNIST family's format.

    Nothing is allocated on the header's word: its sizes are checked against
    :data:`MAX_IDX_BYTES` first, the data is read (inflated) a chunk at a time up to one byte
    more than they claim, so a small ``.gz`` that inflates to gigabytes stops there, and the
    array is made only once the bytes present match the claim.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            head = handle.read(4)
            shape = handle.read(4 * head[3]) if len(head) == 4 else b""
            dims, expected = _idx_dims(path, head, shape)
            chunks = _read_at_most(handle, expected + 1)
    except DatasetNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetNotFoundError(f"{path} is unreadable or truncated "
                                   f"({' '.join(str(err).split())})") from err
    held = sum(len(chunk) for chunk in chunks)
    if held != expected:
        held_text = f"more than {expected}" if held > expected else str(held)
        raise DatasetNotFoundError(f"{path} holds {held_text} bytes of data, header says "
                                   f"{expected}")
    return _joined(chunks, expected).reshape(dims)


def _check_labels(path: Path, labels: np.ndarray, classes: int) -> None:
    """Each label one of the dataset's classes, or one line naming the file and the row."""
    if len(beyond := np.flatnonzero(labels >= classes)):
        raise DatasetError(f"{path}: label {labels[beyond[0]]} at row {beyond[0]} is outside "
                           f"0..{classes - 1} (the dataset's {classes} classes)")


def _check_images_and_labels(paths: dict[str, Path], raw: dict[str, np.ndarray], split: str,
                             classes: int) -> None:
    """Images (N, H, W) of at least 1x1 and a class label each, or one line naming the file.

    A labels file in the images' place is valid IDX too: it failed later, in a resize.
    """
    images, labels = raw[f"{split}_x"], raw[f"{split}_y"]
    if images.ndim != 3 or min(images.shape[1:]) < 1:
        raise DatasetError(f"{paths[f'{split}_x']}: holds an array {images.shape}, not images "
                           "(N, H, W) of at least 1x1 pixels")
    if labels.shape != images.shape[:1]:
        raise DatasetError(f"{paths[f'{split}_y']}: holds labels {labels.shape}, not one per "
                           f"image of {paths[f'{split}_x'].name} ({len(images)},)")
    _check_labels(paths[f"{split}_y"], labels, classes)


def _search_dirs(root: Path | None, env: str | None, default: Path | None) -> list[Path]:
    """Where to look: a root given is the only place (an empty one must not read another)."""
    if root is not None:
        return [Path(root)]
    named = [os.environ.get(env) if env else None, os.environ.get("PFLKIT_DATA_DIR")]
    return [Path(folder) for folder in named if folder] + ([default] if default else [])


def _idx_quadruple(
    name: str, dirs: list[Path], subdir: str, stems: dict[str, str], hint: str
) -> dict[str, np.ndarray]:
    """Find the four IDX files in the first folder that has them all."""
    tried = []
    for base in dirs:
        for folder in (base / subdir, base) if subdir else (base,):
            found = {key: _find_file(folder, stem) for key, stem in stems.items()}
            tried.append(str(folder))
            paths = {key: p for key, p in found.items() if p is not None}
            if len(paths) == len(stems):
                raw = {key: read_idx(p) for key, p in paths.items()}
                for split in ("train", "test"):
                    _check_images_and_labels(paths, raw, split, len(_FILE_SPECS[name][0]))
                return raw
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


def from_uint8(spec: DatasetSpec, train_x: np.ndarray, train_y: np.ndarray,
               test_x: np.ndarray, test_y: np.ndarray) -> Dataset:
    """Preprocess raw uint8 images (N, C, H, W) with the spec's own recipe."""
    pre = spec.preprocessing

    def prep(raw: np.ndarray) -> torch.Tensor:
        return pre.apply(torch.from_numpy(np.array(raw, copy=True)))

    return Dataset(
        spec,
        LabeledTensors(prep(train_x), torch.from_numpy(train_y.astype(np.int64))),
        LabeledTensors(prep(test_x), torch.from_numpy(test_y.astype(np.int64))),
    )


def _load_fmnist(root: Path | None, seed: int, size: tuple[int, int] | None = None) -> Dataset:
    dirs = _search_dirs(root, "PFLKIT_FMNIST_DIR", FMNIST_DEBIAN_DIR)
    raw = _idx_quadruple("fmnist", dirs, "FashionMNIST/raw", _MNIST_STEMS,
                         "PFLKIT_FMNIST_DIR, or apt-get install dataset-fashion-mnist")
    spec = _file_spec("fmnist", size)
    return from_uint8(spec, raw["train_x"][:, None], raw["train_y"], raw["test_x"][:, None],
                       raw["test_y"])


def _load_mnist(root: Path | None, seed: int, size: tuple[int, int] | None = None) -> Dataset:
    dirs = _search_dirs(root, "PFLKIT_MNIST_DIR", None)
    raw = _idx_quadruple("mnist", dirs, "MNIST/raw", _MNIST_STEMS, "PFLKIT_MNIST_DIR")
    spec = _file_spec("mnist", size)
    return from_uint8(spec, raw["train_x"][:, None], raw["train_y"], raw["test_x"][:, None],
                       raw["test_y"])


def _load_emnist(root: Path | None, seed: int, size: tuple[int, int] | None = None) -> Dataset:
    """EMNIST 'digits' split; the raw images are stored transposed, as torchvision notes."""
    dirs = _search_dirs(root, "PFLKIT_EMNIST_DIR", None)
    stems = {k: f"emnist-digits-{v.replace('t10k', 'test')}" for k, v in _MNIST_STEMS.items()}
    raw = _idx_quadruple("emnist", dirs, "EMNIST/raw", stems, "PFLKIT_EMNIST_DIR")
    spec = _file_spec("emnist", size)

    def fix(images: np.ndarray) -> np.ndarray:
        return images.transpose(0, 2, 1)[:, None]

    return from_uint8(spec, fix(raw["train_x"]), raw["train_y"], fix(raw["test_x"]),
                       raw["test_y"])


def _read_cifar_binary(folder: Path, files: list[str], label_bytes: int, classes: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Records of label bytes (the last one the label read), then 3x32x32 pixels."""
    record, parts = label_bytes + 3072, []
    for path in (folder / name for name in files):  # one at a time: two tears could add up
        if (size := path.stat().st_size) % record:
            raise DatasetNotFoundError(f"{path}: {size} bytes are no whole number of CIFAR "
                                       f"records ({record} bytes each)")
        parts.append(np.fromfile(path, dtype=np.uint8).reshape(-1, record))
        _check_labels(path, parts[-1][:, label_bytes - 1], classes)
    rows = np.concatenate(parts)
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32), rows[:, label_bytes - 1].astype(np.int64)


def _cifar(name: str, root: Path | None, size: tuple[int, int] | None, env: str, subdir: str,
           train_files: list[str], test_files: list[str], label_bytes: int) -> Dataset:
    """CIFAR from the *binary* version (plain bytes); the python version is pickles: refused."""
    for base in _search_dirs(root, env, None):
        folder = base / subdir
        if all((folder / f).is_file() for f in train_files + test_files):
            spec = _file_spec(name, size)
            tx, ty = _read_cifar_binary(folder, train_files, label_bytes, spec.num_classes)
            sx, sy = _read_cifar_binary(folder, test_files, label_bytes, spec.num_classes)
            return from_uint8(spec, tx, ty, sx, sy)
    raise DatasetNotFoundError(
        f"dataset '{name}': put the CIFAR *binary version* files "
        f"({', '.join(train_files + test_files)}) in ROOT/{subdir}/ and pass --data-root ROOT "
        f"(or set {env}). The python/pickle version is not read: pflkit never unpickles files."
    )


def _load_cifar10(root: Path | None, seed: int, size: tuple[int, int] | None = None) -> Dataset:
    return _cifar("cifar10", root, size, "PFLKIT_CIFAR10_DIR", "cifar-10-batches-bin",
                  [f"data_batch_{i}.bin" for i in range(1, 6)], ["test_batch.bin"], 1)


def _load_cifar100(root: Path | None, seed: int, size: tuple[int, int] | None = None) -> Dataset:
    return _cifar("cifar100", root, size, "PFLKIT_CIFAR100_DIR", "cifar-100-binary",
                  ["train.bin"], ["test.bin"], 2)


def _file_spec(name: str, size: tuple[int, int] | None = None) -> DatasetSpec:
    classes, channels, native, mean, std = _FILE_SPECS[name]
    return DatasetSpec(name, classes, Preprocessing(channels, size or (native, native), mean, std))


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


def _files(loader: object, name: str, doc: str) -> DatasetSource:
    return DatasetSource(loader, partial(_file_spec, name), doc)  # type: ignore[arg-type]


FILE_DATASETS: dict[str, DatasetSource] = {
    "fmnist": _files(_load_fmnist, "fmnist",
                     "Fashion-MNIST (Debian dataset-fashion-mnist, or PFLKIT_FMNIST_DIR)"),
    "mnist": _files(_load_mnist, "mnist", "MNIST from ROOT/MNIST/raw (PFLKIT_MNIST_DIR)"),
    "emnist": _files(_load_emnist, "emnist",
                     "EMNIST digits from ROOT/EMNIST/raw (PFLKIT_EMNIST_DIR)"),
    "cifar10": _files(_load_cifar10, "cifar10", "CIFAR-10 binary version (PFLKIT_CIFAR10_DIR)"),
    "cifar100": _files(_load_cifar100, "cifar100",
                       "CIFAR-100 binary version (PFLKIT_CIFAR100_DIR)"),
}
