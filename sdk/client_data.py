"""A device's training data on disk: the ``pfl-client --data DIR`` format.

One safetensors file, so an app writes it from any language and nothing is unpickled.
A device's rows follow the rule of every dataset pflkit trains on (docs/data.md): x float32,
y int64; anything else is refused, never converted, so the device and pfl-sim agree.
:func:`save_client_data`, a writer of raw rows, converts them as ``Dataset.from_raw`` does.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pflkit.sdk.data.tensors import DatasetError, LabeledTensors, nonfinite_problem, raw_rows
from pflkit.sdk.tensorio import (
    CorruptStateError,
    atomic_write_bytes,
    load_state,
    state_to_bytes,
)

DATA_FILE = "data.safetensors"  # pfl-client --data DIR reads DIR/data.safetensors (x, y)


def save_client_data(path: Path, data: LabeledTensors) -> None:
    """Write a device's training data in the ``pfl-client --data`` format (x float32, y int64).

    Labels of any integer width are kept; float labels are refused, never truncated (0.7 is
    no class), as ``Dataset.from_raw`` refuses them, and so are complex inputs and inputs
    beyond float32 (never cast). Rows :func:`load_client_data` would refuse (no rows, a
    label below 0, NaN) are refused here, and nothing is written: they used to be written,
    and the device stopped on them later.
    """
    path = Path(path)
    if path.is_dir():  # the folder pfl-client --data names, not the file in it
        raise DatasetError(f"{path} is a folder: save to {path / DATA_FILE}, the file "
                           f"pfl-client --data {path} reads")
    x, y = raw_rows("the device's data", (data.x, data.y))
    x = x.to(torch.float32)
    if (problem := data_problem(x, y)) is not None:
        raise DatasetError(f"the device's data: {problem}")
    atomic_write_bytes(path, state_to_bytes({"x": x, "y": y}))


def data_problem(x: torch.Tensor, y: torch.Tensor) -> str | None:
    """Why these rows cannot be a device's training data (None: they can).

    The rows pfl-sim would refuse as a client's: no rows (pfl-sim never deals an empty
    client; a device would upload a 0-sample update every round), a label below 0 (no class).
    """
    if not (x.dtype == torch.float32 and x.dim() >= 2 and y.dtype == torch.int64
            and y.dim() == 1 and len(x) == len(y)):
        return (f"need x float32 (N, *input_shape) and y int64 (N,), got x {x.dtype} "
                f"{tuple(x.shape)}, y {y.dtype} {tuple(y.shape)}")
    if not len(y):
        return "holds no rows (N = 0): a device needs at least one row to train on"
    if (negative := (y < 0).nonzero().flatten()).numel():
        row = int(negative[0])
        return f"label {int(y[row])} at row {row} is below 0 (labels are 0..C-1)"
    return nonfinite_problem(x)


def task_problem(data: LabeledTensors, input_shape: tuple[int, ...], classes: int
                 ) -> str | None:
    """Why a device's rows cannot train a run's model (None: they can).

    Checked when a task's model is built, before enrolling or training: a label at or above
    the run's class count failed inside the first fit, after the device had enrolled.
    """
    if tuple(data.x.shape[1:]) != tuple(input_shape):
        return (f"local data has inputs {tuple(data.x.shape[1:])}, the run's model expects "
                f"{tuple(input_shape)}")
    if (top := int(data.y.max())) >= classes:
        return f"local data has label {top}, the run's model has classes 0..{classes - 1}"
    return None


def _no_data_file(folder: Path) -> str:
    """Why ``folder`` gives no data file to read: each mistake named as what it is."""
    path = folder / DATA_FILE
    if folder.is_file():  # --data device2/data.safetensors
        return f"{folder} is a file: --data names the folder that holds {DATA_FILE}"
    if not folder.is_dir():
        return f"{folder}: no such folder (--data names the folder that holds {DATA_FILE})"
    if path.exists() or path.is_symlink():  # a folder, a broken link, a FIFO (would block)
        return f"{path}: not a file"
    return f"no {DATA_FILE} in {folder} (write it with save_client_data: see docs/server.md)"


def load_client_data(folder: Path) -> LabeledTensors:
    """Read ``folder/data.safetensors``: x (N, ...) preprocessed float32, y (N,) int64.

    Read once, when the device starts: ``pfl-client`` trains every round on these rows, and
    rows written meanwhile count from its next start (docs/data.md).
    """
    path = Path(folder) / DATA_FILE
    if not path.is_file():
        raise FileNotFoundError(_no_data_file(Path(folder)))
    tensors = load_state(path)
    if set(tensors) != {"x", "y"}:
        raise CorruptStateError(f"{path}: expected tensors 'x' and 'y', got {sorted(tensors)}")
    problem = data_problem(tensors["x"], tensors["y"])
    if problem is not None:
        raise CorruptStateError(f"{path}: {problem}")
    return LabeledTensors(tensors["x"], tensors["y"])
