"""The ``folder`` dataset: a user's arrays of any shape, as safetensors or numpy files.

    ROOT/train.safetensors, ROOT/test.safetensors   tensors ``x`` (N, ...) and ``y`` (N,)
    or ROOT/train_x.npy, train_y.npy, test_x.npy, test_y.npy
    ROOT/classes.txt (optional)                    one class name per line
    train ``users`` (optional): the user id of each train row (N,) integers, as a tensor
    ``users`` in train.safetensors or ROOT/train_users.npy: per-user logs, for
    ``partition.kind = "natural"``

``x`` is used as the model input as it is (converted to float32): preprocess before writing,
or write a loader function that declares its preprocessing (docs/extending.md). Without
``classes.txt`` the classes are named 0..C-1 with C = the largest label + 1. Neither format
can run code when read (numpy files are opened with ``allow_pickle=False``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pflkit.sdk.data.spec import Dataset, DatasetError, DatasetNotFoundError
from pflkit.sdk.tensorio import state_from_bytes

SPLITS = ("train", "test")


def _read_npy(path: Path) -> torch.Tensor:
    try:
        return torch.from_numpy(np.asarray(np.load(path, allow_pickle=False)))
    except ValueError as err:
        raise DatasetError(f"{path}: cannot read ({err})") from err


def _read_split(root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(x, y, users)`` of one split; ``users`` is None unless the train split has them."""
    tensors = root / f"{split}.safetensors"
    allowed = [{"x", "y"}, {"x", "y", "users"}] if split == "train" else [{"x", "y"}]
    if tensors.is_file():
        state = state_from_bytes(tensors.read_bytes(), str(tensors))
        if set(state) not in allowed:
            also = " (and 'users', train only)" if "users" in state or split == "train" else ""
            raise DatasetError(f"{tensors}: expected tensors 'x' and 'y'{also}, got "
                               f"{sorted(state)}")
        return state["x"], state["y"], state.get("users")
    arrays = [root / f"{split}_{part}.npy" for part in ("x", "y")]
    if all(p.is_file() for p in arrays):
        column = root / "train_users.npy"
        x, y = (_read_npy(p) for p in arrays)
        return x, y, _read_npy(column) if split == "train" and column.is_file() else None
    raise DatasetNotFoundError(f"dataset 'folder': no {split}.safetensors or {split}_x.npy + "
                               f"{split}_y.npy in {root}")


def load_folder(root: Path | None, seed: int) -> Dataset:
    """Read ROOT's train and test splits (``seed`` is unused: the files fix the data)."""
    if root is None:
        raise DatasetNotFoundError("dataset 'folder' needs a folder: set [data] root "
                                   "(or --data-root)")
    root = Path(root)
    (tx, ty, users), (sx, sy, _) = (_read_split(root, s) for s in SPLITS)
    if ty.is_floating_point() or sy.is_floating_point():
        raise DatasetError(f"dataset 'folder' in {root}: labels y must be integers")
    if users is not None and (users.is_floating_point() or tuple(users.shape) != (len(ty),)):
        raise DatasetError(f"dataset 'folder' in {root}: train users must be integers, one per "
                           f"train row ({len(ty)},), got {users.dtype} {tuple(users.shape)}")
    names = root / "classes.txt"
    if names.is_file():
        classes = tuple(line.strip() for line in names.read_text().splitlines() if line.strip())
    else:
        top = max([int(t.max()) for t in (ty, sy) if len(t)], default=0)
        classes = tuple(str(c) for c in range(top + 1))
    return Dataset.from_raw("folder", classes, (tx, ty), (sx, sy), users=users)
