"""What a dataset is to pflkit: the public contract that built-in and user datasets share.

A dataset is a :class:`Dataset`: a train and a test split of preprocessed inputs ``x``
(N, *input_shape) float32 with labels ``y`` (N,) int64, plus a :class:`DatasetSpec` (name,
class names, and the preprocessing that turns a raw input into ``x``, which the model card
records so that a device applies the same steps). Inputs may have any shape: images
(C, H, W), feature vectors (F,), sequences (T, F).

A dataset may also say which user each train row belongs to (``users``, (N,) int64 ids):
``partition.kind = "natural"`` then keeps those users as the clients (sdk/data/natural.py).

A user's dataset is a :class:`DatasetSource`, or just its ``load`` function
``(root, seed) -> Dataset`` (see docs/extending.md).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pflkit.sdk.data.tensors import (
    DatasetError,
    LabeledTensors,
    as_numbers,
    by_rows,
    nonfinite_problem,
    raw_rows,
    repeated_name,
    user_column,
    users_rows,
)

Shape = tuple[int, ...]
# Classes of any dataset (pfl-sim, pfl-server's tasks, the folder dataset's inferred classes):
# a model head with more outputs is a mistake (a stray label id such as 10**12).
MAX_CLASSES = 100_000
# One input's axes, as a device checks a task's input_shape (sdk/task_config.py) and pfl-sim
MAX_AXES = 8  # axes of one input: (F,), (C, H, W), (C, D, H, W), ...
MAX_AXIS = 2**31 - 1  # an axis's size fits a signed 32-bit index


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where pflkit looked; the message says where to put them."""


@dataclass(frozen=True)
class Preprocessing:
    """Images: ``(resize(pixels / pixel_scale) - mean) / std``, per channel, NCHW float32.

    ``size`` is (H, W) after the optional bilinear resize (align_corners=False);
    ``mean``/``std`` have one entry per channel.
    """

    channels: int
    size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    pixel_scale: float = 255.0
    resize: str = "bilinear"

    def __post_init__(self) -> None:
        numbers = (*self.mean, *self.std, self.pixel_scale)
        if not (len(self.mean) == len(self.std) == self.channels >= 1 and min(self.size) >= 1
                and all(map(math.isfinite, numbers)) and min(*self.std, self.pixel_scale) > 0):
            raise DatasetError("Preprocessing: channels and size >= 1, one finite mean and std "
                               f"> 0 per channel, a finite pixel_scale > 0; got {self}")

    @property
    def input_shape(self) -> Shape:
        """(C, H, W) of one preprocessed image."""
        return (self.channels, *self.size)

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
        return by_rows(self._pixels_to_inputs, pixels)  # huge images: a chunk at a time

    def _pixels_to_inputs(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.to(torch.float32) / self.pixel_scale
        if tuple(x.shape[-2:]) != self.size:
            x = F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        return (x - mean) / std


_LAYOUTS = {1: "NF", 2: "NTF", 3: "NCHW"}


@dataclass(frozen=True)
class Standardize:
    """Any numeric input: ``(raw - mean) / std`` over the last axis; none when mean is None.

    For tabular rows (F,), sequences (T, F) and inputs that arrive already preprocessed.
    """

    shape: Shape  # one input without the batch dimension
    mean: tuple[float, ...] | None = None  # one per entry of the last axis
    std: tuple[float, ...] | None = None
    layout: str | None = None  # for the card; default by rank: NF, NTF, NCHW

    def __post_init__(self) -> None:
        if (self.mean is None) != (self.std is None):
            raise DatasetError("Standardize: give both mean and std, or neither")
        if self.mean is not None and self.std is not None:
            if not len(self.mean) == len(self.std) == self.shape[-1]:
                raise DatasetError(f"Standardize: mean and std need {self.shape[-1]} entries "
                                   f"(the last axis of {self.shape})")
            if not all(map(math.isfinite, self.mean + self.std)) or min(self.std) <= 0:
                raise DatasetError("Standardize: every mean and std must be finite, every std "
                                   f"> 0, got mean {self.mean}, std {self.std}")

    @classmethod
    def fit(cls, raw: torch.Tensor | np.ndarray, layout: str | None = None) -> Standardize:
        """Mean and std of each last-axis entry over every other axis of ``raw`` (N, ...)."""
        raw = as_numbers("Standardize.fit's raw inputs", raw)
        flat = raw.to(torch.float64).reshape(-1, raw.shape[-1])
        std = flat.std(dim=0, unbiased=False).clamp_min(1e-8)
        return cls(tuple(raw.shape[1:]), tuple(flat.mean(dim=0).tolist()),
                   tuple(std.tolist()), layout)

    @property
    def input_shape(self) -> Shape:
        """The shape of one input."""
        return tuple(self.shape)

    def to_dict(self) -> dict[str, object]:
        """JSON form used by model cards."""
        return {"kind": "standardize" if self.mean is not None else "none",
                "shape": list(self.shape),
                "mean": None if self.mean is None else list(self.mean),
                "std": None if self.std is None else list(self.std),
                "layout": self.layout or _LAYOUTS.get(len(self.shape), "N" + "D" * len(self.shape))}

    def apply(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw inputs (N, *shape) -> float32 model inputs (a chunk of rows at a time)."""
        if self.mean is None or self.std is None:
            return raw.to(torch.float32)
        mean, std = (torch.tensor(v, dtype=torch.float32) for v in (self.mean, self.std))
        return by_rows(lambda rows: (rows.to(torch.float32) - mean) / std, raw)


@dataclass(frozen=True)
class DatasetSpec:
    """What a model and an export need to know about a dataset (no data)."""

    name: str
    classes: tuple[str, ...]
    preprocessing: Preprocessing | Standardize

    @property
    def num_classes(self) -> int:
        """Number of labels."""
        return len(self.classes)

    @property
    def input_shape(self) -> Shape:
        """The shape of one preprocessed input, e.g. (C, H, W) or (F,)."""
        return self.preprocessing.input_shape


@dataclass(frozen=True)
class Dataset:
    """A train and a test split, preprocessed, plus the spec that produced them."""

    spec: DatasetSpec
    train: LabeledTensors
    test: LabeledTensors
    # (len(train),) int64: the user each train row belongs to (any ids); None: no users
    users: torch.Tensor | None = None

    @classmethod
    def from_raw(cls, name: str, classes: list[str] | tuple[str, ...],
                 train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
                 preprocessing: Preprocessing | Standardize | None = None,
                 users: torch.Tensor | None = None) -> Dataset:
        """Build from raw (x, y) pairs; ``preprocessing`` (default: none) is applied to x.

        x and y: tensors, arrays or lists of real numbers, y integers; ``users``: a user column.
        """
        rows = {split: raw_rows(f"dataset '{name}': the {split} split", pair)
                for split, pair in (("train", train), ("test", test))}
        pre = preprocessing or Standardize(tuple(rows["train"][0].shape[1:]))
        for split, (x, _) in rows.items():
            _check_fits(f"dataset '{name}': the {split} split's x", x, pre)
        ids = None if users is None else user_column(name, users, len(rows["train"][1]))
        train_rows, test_rows = (LabeledTensors(pre.apply(x), y) for x, y in rows.values())
        return cls(DatasetSpec(name, tuple(classes), pre), train_rows, test_rows, ids)

    @classmethod
    def from_users(cls, name: str, classes: list[str] | tuple[str, ...],
                   per_user: Mapping[int, tuple[torch.Tensor, torch.Tensor]],
                   test: tuple[torch.Tensor, torch.Tensor],
                   preprocessing: Preprocessing | Standardize | None = None) -> Dataset:
        """One raw (x, y) pair per user id, concatenated; a user without rows is no user."""
        x, y, users = users_rows(name, per_user)
        return cls.from_raw(name, classes, (x, y), test, preprocessing, users)


def _check_fits(what: str, x: torch.Tensor, pre: Preprocessing | Standardize) -> None:
    """Refuse raw inputs of another shape than the preprocessing takes, before applying it."""
    takes = f"(N, {pre.channels}, H, W)" if isinstance(pre, Preprocessing) else \
        f"(N, *{pre.input_shape})"
    fits = x.dim() == 4 and x.shape[1] == pre.channels if isinstance(pre, Preprocessing) else \
        tuple(x.shape[1:]) == pre.input_shape
    if not fits:
        raise DatasetError(f"{what} is {tuple(x.shape)}, the preprocessing takes {takes}")


def check_spec(ref: str, spec: object) -> DatasetSpec:
    """Refuse a spec no model can be built for, in one line (pfl-server builds from it alone)."""
    if not isinstance(spec, DatasetSpec):
        raise DatasetError(f"dataset '{ref}' gave a {type(spec).__name__}, not a DatasetSpec")
    shape, c, names = tuple(spec.input_shape), spec.num_classes, spec.classes
    if not 1 <= c <= MAX_CLASSES:
        raise DatasetError(f"dataset '{ref}' has {c} classes: a dataset has 1 to {MAX_CLASSES}")
    if not 1 <= len(shape) <= MAX_AXES or not all(1 <= n <= MAX_AXIS for n in shape):
        raise DatasetError(f"dataset '{ref}': inputs are {shape}: 1 to {MAX_AXES} axes, each 1 "
                           f"to {MAX_AXIS} long, as devices take them")
    odd = [n for n in names if not isinstance(n, str)]
    if odd or (twice := repeated_name(names)):
        raise DatasetError(f"dataset '{ref}': class {(odd or [names[twice[1]]])[0]!r} is named "
                           "twice or is no text (one distinct name per class)")
    return spec


def check_dataset(ref: str, dataset: object) -> Dataset:
    """Refuse a loader's result that breaks the contract, in one line naming the dataset."""
    if not isinstance(dataset, Dataset):
        raise DatasetError(f"dataset '{ref}' returned a {type(dataset).__name__}, not a "
                           "pflkit Dataset (see docs/extending.md)")
    shape, c = tuple(check_spec(ref, dataset.spec).input_shape), dataset.spec.num_classes
    for split, part in (("train", dataset.train), ("test", dataset.test)):
        x, y = part.x, part.y
        if x.dtype != torch.float32 or tuple(x.shape[1:]) != shape:
            raise DatasetError(f"dataset '{ref}': {split}.x must be float32 (N, *{shape}), got "
                               f"{x.dtype} {tuple(x.shape)}")
        if (problem := nonfinite_problem(x)) is not None:
            raise DatasetError(f"dataset '{ref}': {split}.{problem}")
        if y.dtype != torch.int64 or y.dim() != 1:
            raise DatasetError(f"dataset '{ref}': {split}.y must be int64 (N,), got {y.dtype} "
                               f"{tuple(y.shape)}")
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= c):
            raise DatasetError(f"dataset '{ref}': {split} labels must be in 0..{c - 1} "
                               f"({c} classes)")
        if len(part) == 0:  # test: the global model is scored on it at every evaluation
            raise DatasetError(f"dataset '{ref}': the {split} split is empty")
    users = dataset.users
    if users is not None and (not isinstance(users, torch.Tensor) or users.dtype != torch.int64
                              or tuple(users.shape) != (len(dataset.train),)):
        got = f"{users.dtype} {tuple(users.shape)}" if isinstance(users, torch.Tensor) else \
            type(users).__name__
        raise DatasetError(f"dataset '{ref}': users must be int64 ({len(dataset.train)},), one "
                           f"per train row, got {got}")
    return dataset


@dataclass(frozen=True)
class DatasetSource:
    """A loadable dataset: the object a dataset name resolves to.

    ``load(root=..., seed=...)`` returns the :class:`Dataset` (``size=(H, W)`` is passed too
    when the config asks for a resize, so only loaders that take it can be resized). ``spec``
    (optional) gives the spec without the data: the server builds models from it and never
    needs the clients' data; without it, the server calls ``load`` once per process.
    """

    load: Callable[..., Dataset]
    spec: Callable[[tuple[int, int] | None], DatasetSpec] | None = None
    doc: str = ""

    def load_checked(self, ref: str, root: Path | None, size: tuple[int, int] | None,
                     seed: int) -> Dataset:
        """Call ``load`` and check the result against the contract."""
        kwargs: dict[str, object] = {"root": root, "seed": seed}
        if size is not None:
            if "size" not in inspect.signature(self.load).parameters:
                raise DatasetError(f"dataset '{ref}' cannot be resized (its loader takes no "
                                   "size): remove [data] resize")
            kwargs["size"] = size
        return check_dataset(ref, self.load(**kwargs))
