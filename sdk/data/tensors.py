"""In-memory labelled tensors, the mini-batch iterator, and the rules for users' raw arrays.

Datasets here are small enough (Fashion-MNIST is 190 MB as float32) to live in memory as
one tensor, so a client's data is an index into it and a batch is one gather: no
DataLoader workers, no per-sample Python, which keeps the simulator near a plain loop.

Raw arrays (``Dataset.from_raw``, ``Dataset.from_users``, the ``folder`` dataset) keep their
numbers: what would change them (a float label truncated, a uint64 id wrapped, a complex
input losing its imaginary part) or cannot be numbers (text, objects) is refused in one line.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

REAL_KINDS = "biuf"  # numpy kinds of real numbers: bool, signed, unsigned, float (no complex)
CHUNK_BYTES = 1 << 26  # float32 bytes of input a row-wise step converts at a time (by_rows)


class DatasetError(ValueError):
    """A dataset loader returned something that does not fit the contract (one line)."""


@dataclass(frozen=True)
class LabeledTensors:
    """Preprocessed inputs ``x`` (N, C, H, W) float32 and labels ``y`` (N,) int64."""

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"x has {self.x.shape[0]} rows but y has {self.y.shape[0]}")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, index: torch.Tensor) -> LabeledTensors:
        """Rows ``index`` (a copy; the parent tensors stay shared by nobody else)."""
        index = torch.as_tensor(index, dtype=torch.long)
        return LabeledTensors(self.x[index], self.y[index])

    def with_labels(self, y: torch.Tensor) -> LabeledTensors:
        """Same inputs, other labels (label noise keeps the images)."""
        return LabeledTensors(self.x, y)

    def class_counts(self, num_classes: int) -> torch.Tensor:
        """Samples per class, (num_classes,) int64."""
        return torch.bincount(self.y, minlength=num_classes)

    def batches(
        self, batch_size: int, generator: torch.Generator | None = None, shuffle: bool = True
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Mini-batches in a seeded random order (the last batch may be smaller)."""
        n = len(self)
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            yield self.x[idx], self.y[idx]


def nonfinite_problem(x: torch.Tensor) -> str | None:
    """How many rows of ``x`` hold NaN or Inf and the first (training on them only diverges).

    By rows: ``isfinite`` of all of ``x`` at once took 1.8x its bytes above it (680 MiB for
    a 381 MiB dataset), on every dataset pfl-sim loads and every device's data.
    """
    rows_bad = by_rows(lambda rows: ~torch.isfinite(rows.flatten(1)).all(1), x)
    bad = rows_bad.nonzero().flatten().tolist()
    return f"x has NaN or Inf in {len(bad)} row(s), the first at row {bad[0]}" if bad else None


def by_rows(step: Callable[[torch.Tensor], torch.Tensor], raw: torch.Tensor) -> torch.Tensor:
    """``step(raw)`` for a ``step`` that treats each row alone, a chunk of rows at a time.

    The same numbers, written into one output: the float32 copies ``step`` makes at the
    input's size stay one chunk's (resizing 200 uint8 images of 3x1024x1024 to 64x64 at once
    took 4.8 GiB above the 600 MiB input, for a 9 MiB result).
    """
    rows = max(1, CHUNK_BYTES // max(1, 4 * raw[0].numel())) if len(raw) else 1
    if len(raw) <= rows:
        return step(raw)
    first = step(raw[:rows])
    out = first.new_empty((len(raw), *first.shape[1:]))
    out[:rows] = first
    for start in range(rows, len(raw), rows):
        out[start:start + rows] = step(raw[start:start + rows])
    return out


def as_numbers(what: str, value: object) -> torch.Tensor:
    """``value`` (a tensor, an array, a list, a memoryview) as a tensor of the same numbers.

    Text, objects (never unpickled), dates, complex numbers and ragged lists are refused;
    big-endian and negatively strided arrays are read as the same numbers (a copy); others,
    memory-mapped ones too, are shared, not copied.
    """
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise DatasetError(f"{what} holds {value.dtype} values, not real numbers")
        return value.detach()
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as err:  # a ragged list
        raise DatasetError(f"{what} is not an array of numbers "
                           f"({' '.join(str(err).split())})") from None
    if array.dtype.kind not in REAL_KINDS or array.dtype.itemsize > 8:  # float128: no tensor
        raise DatasetError(f"{what} holds {array.dtype} values, not real numbers (ints, "
                           "floats or bools)")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if any(step < 0 for step in array.strides):  # x[::-1]: torch takes no negative strides
        array = array.copy()
    return torch.from_numpy(array)


def repeated_name(names: Sequence[str]) -> tuple[int, int] | None:
    """``(first, again)``: where the first name given twice is (None: each name once).

    Compared as Unicode NFC: 'café' typed and 'café' pasted (e, then a combining accent) print
    alike, two classes nobody could tell apart. One pass with a dict: scanning the names
    before each took 11 s for 30,000 classes, 2 minutes at 100,000.
    """
    seen: dict[str, int] = {}
    for at, name in enumerate(names):
        if (first := seen.setdefault(unicodedata.normalize("NFC", name), at)) != at:
            return first, at
    return None


def _check_int64(whose: str, what: str, values: torch.Tensor, allowed: str) -> torch.Tensor:
    """Integer ``values`` as int64; a uint64 value beyond int64 would wrap to a negative one."""
    if values.dtype == torch.uint64:
        beyond = np.flatnonzero(values.cpu().numpy() >= 2**63)
        if len(beyond):
            row = int(beyond[0])
            raise DatasetError(f"{whose} {what} {int(values[row].item())} at row {row} is "
                               f"beyond int64 ({allowed})")
    return values.to(torch.int64)


def check_user_ids(where: str, users: torch.Tensor) -> torch.Tensor:
    """User ids as int64, as ``Dataset.from_users`` takes them.

    A bool column (a mask saved by mistake) would make at most two users, and a uint64 id
    beyond int64 would be dealt and reported under a negative id.
    """
    if users.dtype == torch.bool:
        raise DatasetError(f"{where}: train users must be integer user ids, got bool (True "
                           "and False would be two users)")
    return _check_int64(f"{where}:", "user id", users, "user ids are -2**63..2**63-1")


def check_labels(whose: str, y: torch.Tensor) -> torch.Tensor:
    """Integer labels as int64: float labels are refused, never truncated (0.7 is not class 0).

    Bools are labels 0 and 1, as in the ``folder`` dataset.
    """
    if y.dtype == torch.int64:
        return y
    if y.is_floating_point() and y.numel():  # no labels ([] reads as float64): no number lost
        flat = y.flatten()
        odd = (~torch.isfinite(flat) | (flat != flat.trunc())).nonzero().flatten()
        which = (f"the first not whole, {flat[odd[0]].item():.8g} at row {int(odd[0])}, is no "
                 "class" if len(odd) else "all whole: convert with y.astype(int) or y.long()")
        raise DatasetError(f"{whose}'s labels y are {y.dtype}, not integers ({which})")
    return _check_int64(f"{whose}'s", "label", y, "labels are 0..C-1")


def _raw_pair(whose: str, pair: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A raw ``(x, y)`` pair as tensors of the same numbers (rows not checked yet)."""
    if not isinstance(pair, tuple | list) or len(pair) != 2:
        raise DatasetError(f"{whose} is a {type(pair).__name__}, not a pair (x, y)")
    return as_numbers(f"{whose}'s x", pair[0]), as_numbers(f"{whose}'s y", pair[1])


def _labeled_rows(whose: str, x: torch.Tensor, y: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw rows as a dataset holds them: x (N, ...) as given, y (N,) int64 labels."""
    if len(x.shape) < 2 or len(y.shape) != 1 or x.shape[0] != y.shape[0]:
        raise DatasetError(f"{whose} has x {tuple(x.shape)} and y {tuple(y.shape)}: one label "
                           "per row of x, and x (N, ...) has at least 2 axes (a column of N "
                           "values is (N, 1))")
    if x.dtype == torch.float64:  # beyond float32's range, a finite input would become inf
        beyond = (torch.isfinite(x) & (x.abs() > torch.finfo(torch.float32).max)).flatten(1)
        if len(rows := beyond.any(1).nonzero().flatten()):
            row = int(rows[0])
            value = x[row].flatten()[beyond[row]][0].item()
            raise DatasetError(f"{whose}'s x holds {value:g} at row {row}, beyond float32 "
                               "(inputs are float32: |x| <= 3.4e38)")
    return x, check_labels(whose, y)


def raw_rows(whose: str, pair: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A raw ``(x, y)`` pair as a dataset holds its rows (see :func:`_labeled_rows`)."""
    return _labeled_rows(whose, *_raw_pair(whose, pair))


def user_column(name: str, users: object, rows: int) -> torch.Tensor:
    """A user column as int64: ids that are not integers are refused, never rounded or cast.

    Rounding would deal two users' rows to one client (1.2 and 1.7 are both 1; a missing id,
    NaN, would make every row without a user one user).
    """
    try:
        column = as_numbers(f"dataset '{name}': users", users)
    except DatasetError as err:
        raise DatasetError(f"{err}: number named users first, e.g. np.unique(names, "
                           "return_inverse=True)[1]") from None
    if column.is_floating_point() or tuple(column.shape) != (rows,):
        rounded = ": ids are never rounded (1.2 and 1.7 would be one user)" \
            if column.is_floating_point() else ""
        raise DatasetError(f"dataset '{name}': users must be int64 ({rows},), one per train "
                           f"row, got {column.dtype} {tuple(column.shape)}{rounded}")
    return check_user_ids(f"dataset '{name}'", column)


def _user_rows(name: str, user: object, pair: object, first: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One user's raw (x, y) for ``from_users`` (None: no rows), shaped as ``first``'s."""
    if isinstance(user, bool) or not isinstance(user, int | np.integer) or \
            not -2**63 <= int(user) < 2**63:
        raise DatasetError(f"dataset '{name}': from_users takes int64 user ids, got {user!r}: "
                           "number the users, e.g. dict(enumerate(per_name.values())), so no "
                           "two ids ('007' and '7') become one user")
    x, y = _raw_pair(f"dataset '{name}': user {user}", pair)
    if x.numel() == 0 and y.numel() == 0:
        return None
    x, y = _labeled_rows(f"dataset '{name}': user {user}", x, y)
    if first is not None and x.shape[1:] != first.shape[1:]:
        raise DatasetError(f"dataset '{name}': user {user}'s inputs are {tuple(x.shape[1:])}, "
                           f"the first user's {tuple(first.shape[1:])}")
    return x, y


def users_rows(name: str, per_user: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``from_users``' {user id: (x, y)} as one (x, y, users) column; users without rows go."""
    if not isinstance(per_user, Mapping) or not per_user:
        raise DatasetError(f"dataset '{name}': from_users needs at least one user, as a "
                           f"dict {{user id: (x, y)}}, got {type(per_user).__name__}")
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    ids: list[int] = []
    for user, pair in per_user.items():
        rows = _user_rows(name, user, pair, pairs[0][0] if pairs else None)
        if rows is not None:
            pairs.append(rows)
            ids.append(int(user))
    if not pairs:
        raise DatasetError(f"dataset '{name}': from_users: no user has rows (the train "
                           "split would be empty)")
    users = torch.repeat_interleave(torch.tensor(ids, dtype=torch.int64),
                                    torch.tensor([len(y) for _, y in pairs]))
    return torch.cat([x for x, _ in pairs]), torch.cat([y for _, y in pairs]), users
