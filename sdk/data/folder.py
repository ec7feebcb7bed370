"""The ``folder`` dataset: a user's arrays of any shape, as safetensors or numpy files.

    ROOT/train.safetensors, ROOT/test.safetensors   tensors ``x`` (N, ...) and ``y`` (N,)
    or ROOT/train_x.npy, train_y.npy, test_x.npy, test_y.npy
    ROOT/classes.txt (optional)                    one class name per line (UTF-8)
    train ``users`` (optional): the user id of each train row (N,) integers, as a tensor
    ``users`` in train.safetensors or ROOT/train_users.npy: per-user logs, for
    ``partition.kind = "natural"`` (not bools, within int64; no test_users.npy: the test
    split is the global test set)

A split is in one format: npy files beside its safetensors file are refused, not ignored.

``x`` is used as the model input as it is (converted to float32): preprocess before writing,
or write a loader function that declares its preprocessing (docs/extending.md). Without
``classes.txt`` the classes are named 0..C-1 with C = the largest label + 1, at most
:data:`MAX_CLASSES`. Neither format can run code when read (numpy files are opened with
``allow_pickle=False``). Every refusal is one :class:`DatasetError` line naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from pflkit.sdk.data.spec import MAX_CLASSES, Dataset, DatasetError, DatasetNotFoundError
from pflkit.sdk.data.tensors import REAL_KINDS, check_labels, check_user_ids, repeated_name
from pflkit.sdk.tensorio import load_state

SPLITS = ("train", "test")

Named = tuple[str, torch.Tensor]  # (where it was read, e.g. "ROOT/train_x.npy", the tensor)


def _npy_header_check(path: Path) -> None:
    """Refuse a file of non-numbers, or whose header promises more data than the file holds.

    Checked on the header, before ``np.load`` allocates what it says: a 200-byte file claiming
    (10**11, 3) would ask for 1.1 TiB (a MemoryError, or a swapping machine), not one line.
    """
    with path.open("rb") as handle:
        version = np.lib.format.read_magic(handle)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, dtype = read(handle)
        held = path.stat().st_size - handle.tell()
    if dtype.kind not in REAL_KINDS:
        raise DatasetError(f"{path}: holds {dtype} values, not real numbers (ints, floats or "
                           "bools)")
    if dtype.itemsize > 8:  # float128: no tensor holds it (np.load, then a TypeError)
        raise DatasetError(f"{path}: holds {dtype} values, wider than 64 bits: save them as "
                           "float64 or float32")
    claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if claimed != held:
        raise DatasetError(f"{path}: holds {held} bytes of data, its header says {shape} "
                           f"{dtype} ({claimed} bytes)")


def _read_npy(path: Path) -> torch.Tensor:
    try:
        _npy_header_check(path)
        array = np.asarray(np.load(path, allow_pickle=False))
        # torch holds native byte order only: a big-endian file ('>f4', as some tools write)
        return torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=False))
    except DatasetError:
        raise
    except (ValueError, OSError, EOFError) as err:
        raise DatasetError(f"{path}: cannot read ({' '.join(str(err).split())})") from err


def _read_split(root: Path, split: str) -> dict[str, Named]:
    """``x``, ``y`` and (train only, if given) ``users`` of one split, with where each was."""
    tensors = root / f"{split}.safetensors"
    arrays = {part: root / f"{split}_{part}.npy" for part in ("x", "y", "users")}
    users = arrays.pop("users")
    if split == "test" and _present(users):
        raise DatasetError(f"{users}: the test split is the global test set, not dealt by user: "
                           "give each user its own test rows with train_users.npy and "
                           "test_fraction, or hold users out with num_new_clients")
    if _present(tensors):
        stale = [p.name for p in (*arrays.values(), users) if _present(p)]
        if stale:
            users_too = " (the users as its tensor 'users')" if split == "train" else ""
            raise DatasetError(f"{tensors}: {', '.join(stale)} beside it would be ignored: keep "
                               f"one format per split{users_too}")
        return _read_tensors(tensors, split)
    if all(_present(p) for p in arrays.values()):
        if _present(users):
            arrays["users"] = users
        return {key: (str(path), _read_npy(path)) for key, path in arrays.items()}
    raise DatasetNotFoundError(f"dataset 'folder': no {split}.safetensors or {split}_x.npy + "
                               f"{split}_y.npy in {root}")


def _present(path: Path) -> bool:
    """Whether the folder holds ``path``; anything there but a file is refused, not skipped."""
    if path.is_file():
        return True
    if path.exists() or path.is_symlink():  # a folder, a FIFO (would block), a broken link
        raise DatasetError(f"{path}: not a file")
    return False


def _read_tensors(tensors: Path, split: str) -> dict[str, Named]:
    """The tensors of ``split.safetensors``: ``x``, ``y`` and (train only) ``users``."""
    state = load_state(tensors)
    allowed = [{"x", "y"}, {"x", "y", "users"}] if split == "train" else [{"x", "y"}]
    if set(state) not in allowed:
        also = " (and 'users', train only)" if "users" in state or split == "train" else ""
        raise DatasetError(f"{tensors}: expected tensors 'x' and 'y'{also}, got "
                           f"{sorted(state)}")
    for key, value in state.items():
        if value.is_complex():
            raise DatasetError(f"{tensors}: {key} holds {value.dtype} values, not real "
                               "numbers")
    return {key: (f"{tensors}: {key}", value) for key, value in state.items()}


def _check_split(got: dict[str, Named]) -> None:
    """One row per sample everywhere: x (N, ...), y (N,) integers, users (N,) integers."""
    x_at, x = got["x"]
    if x.dim() < 2:
        raise DatasetError(f"{x_at}: x must be (N, ...), one row per sample, with at least 2 "
                           f"dimensions, got {tuple(x.shape)} (a column of N values is (N, 1))")
    for key in ("y", "users"):
        if key not in got:
            continue
        where, ids = got[key]
        what, per = ("labels y", "row of x") if key == "y" else ("train users", "train row")
        if ids.is_floating_point() or ids.dim() != 1 or len(ids) != len(x):
            raise DatasetError(f"{where}: {what} must be integers, one per {per} "
                               f"({len(x)},), got {ids.dtype} {tuple(ids.shape)}")
    if "users" in got:
        check_user_ids(*got["users"])


def _labels(where: str, y: torch.Tensor, num_classes: int | None) -> torch.Tensor:
    """``y`` as int64, each in 0..C-1 (C = ``num_classes``, or at most MAX_CLASSES)."""
    y = check_labels(where, y)  # a uint64 beyond int64 is named as it is, not wrapped
    high = MAX_CLASSES if num_classes is None else num_classes
    bad = ((y < 0) | (y >= high)).nonzero().flatten()
    if len(bad):
        row = int(bad[0])
        allowed = (f"0..{high - 1} (the {high} classes of classes.txt)" if num_classes
                   else f"0..{high - 1} without classes.txt (at most {MAX_CLASSES} classes)")
        raise DatasetError(f"{where}: label {int(y[row])} at row {row} is outside {allowed}")
    return y


def _class_names(path: Path) -> tuple[str, ...] | None:
    r"""The names in ``classes.txt``, line i naming label i - 1; None without the file.

    A byte order mark (Windows Notepad writes one) is no part of the first name, and blank
    lines at the end are no classes. A blank line before a name is refused: skipped, it moved
    every later name onto the label before its own. Lines end at \n, \r\n or \r only: a name
    holding U+2028 or a form feed was cut in two (``str.splitlines``), moving the later ones.
    Names are compared as Unicode NFC (:func:`repeated_name`).
    """
    if not _present(path):  # a broken link or a folder there is refused, never skipped
        return None
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}: not UTF-8 text ({err})") from err
    lines = [line.strip() for line in re.split(r"\r\n|\r|\n", text)]
    names = tuple(lines[:max((at + 1 for at, name in enumerate(lines) if name), default=0)])
    if not names:
        raise DatasetError(f"{path}: names no class (one class name per line)")
    if "" in names:
        raise DatasetError(f"{path}: line {names.index('') + 1} is blank: line i names label "
                           "i - 1, so every class needs a name")
    if twice := repeated_name(names):
        raise DatasetError(f"{path}: class '{names[twice[1]]}' is named twice (line "
                           f"{twice[0] + 1} and line {twice[1] + 1})")
    return names


def load_folder(root: Path | None, seed: int) -> Dataset:
    """Read ROOT's train and test splits (``seed`` is unused: the files fix the data)."""
    if root is None:
        raise DatasetNotFoundError("dataset 'folder' needs a folder: set [data] root "
                                   "(or --data-root)")
    root = Path(root)
    train, test = (_read_split(root, s) for s in SPLITS)
    for split in (train, test):
        _check_split(split)
    classes = _class_names(root / "classes.txt")
    ty, sy = (_labels(*split["y"], classes and len(classes)) for split in (train, test))
    if classes is None:
        top = max([int(t.max()) for t in (ty, sy) if len(t)], default=0)
        classes = tuple(str(c) for c in range(top + 1))
    users = train["users"][1].to(torch.int64) if "users" in train else None
    return Dataset.from_raw("folder", classes, (train["x"][1], ty), (test["x"][1], sy),
                            users=users)
