"""Check a loaded state's tensors against the model before anything is built from it.

A checkpoint can pass its sha256 check and still hold tensors of the wrong shape (re-saved by
hand, or from another model); loading it would end in a PyTorch traceback. The reference is
the algorithm's own fresh global state; a client tensor ``<part>.<name>`` (SuPerFed's
``local.``, APFL's ``personal.`` ...) is held to the global tensor ``<name>``. A NaN or
infinite value (a diverged client, a hand edit) would make a model whose logits are NaN, so
it is refused too, naming the file and tensor.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pflkit.export.contract import ExportError
from pflkit.sdk.algorithms.base import Algorithm, State


def _mismatch(path: Path | str, name: str, have: tuple[int, ...], want: tuple[int, ...]
              ) -> ExportError:
    return ExportError(f"{path}: tensor '{name}' has shape {have}, the model's is {want}")


def _check_finite(path: Path | str, state: State) -> None:
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ExportError(f"{path}: tensor '{name}' holds NaN or infinite values: no "
                              f"usable model can be built from it")


def check_tensors(algorithm: Algorithm, seed: int, global_state: State, global_file: Path | str,
                  client_tensors: State, client_file: Path | str | None) -> None:
    """Raise an :class:`ExportError` naming a tensor of a wrong shape or non-finite values."""
    reference = {k: tuple(v.shape) for k, v in algorithm.aggregation.init_global(seed).items()}
    for name, tensor in global_state.items():
        want = reference.get(name)
        if want is not None and tuple(tensor.shape) != want:
            raise _mismatch(global_file, name, tuple(tensor.shape), want)
    for name, tensor in client_tensors.items():
        want = reference.get(name.partition(".")[2])
        if want is not None and tuple(tensor.shape) != want:
            raise _mismatch(client_file or "the client state", name, tuple(tensor.shape), want)
    _check_finite(global_file, global_state)
    _check_finite(client_file or "the client state", client_tensors)
