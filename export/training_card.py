"""Reading an export folder's training program as an app does: card, checked files, checked data.

An export folder is input from outside the process (copied, pushed, edited): before
:class:`~pflkit.export.device_trainer.DeviceTrainer` loads anything, the card must be a JSON
object with a ``training`` section the phone would read too (:mod:`.training_section`), its
files plain names beside the card whose size and sha256 are the card's ``artifacts`` entries
(a file of another size is not read), and rows handed to a trainer must be what the program
was built for. Each violation is one line (:class:`TrainingProgramError`), raised before any
weight changes, the rules of the Android core's ``TrainingSection`` and ``LabeledSamples``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from pflkit.export.card_file import CARD_FILE, read_card_json
from pflkit.export.contract import ExportError
from pflkit.export.training_section import TrainingProgramError, check_section

FILE_KEYS = ("program", "initial_weights")
__all__ = ["TrainingProgramError", "check_batch", "check_rows", "check_weights", "read_card"]


def read_card(folder: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The folder's checked ``training`` section and its files' bytes, verified against the card.

    The bytes are what was hashed: a trainer loads them, never the files a second time.
    """
    path = folder / CARD_FILE
    try:
        card = read_card_json(path)
    except ExportError as err:
        raise TrainingProgramError(f"not a readable model card: {err}") from err
    section = card.get("training") if isinstance(card, dict) else None
    if not section:
        raise TrainingProgramError(f"{folder}: the model card has no training section "
                                   f"(export with --trainer)")
    check_section(section)
    artifacts = {a.get("file"): a for a in card.get("artifacts") or [] if isinstance(a, dict)}
    return section, {key: _checked_file(folder, section[key], artifacts.get(section[key]))
                     for key in FILE_KEYS}


def check_rows(section: dict[str, Any], image_shape: tuple[int, ...], images: torch.Tensor,
               labels: torch.Tensor) -> None:
    """Rows a trainer can learn from: the program's image shape, finite, labels its classes."""
    if tuple(images.shape[1:]) != tuple(image_shape) or images.dim() != len(image_shape) + 1:
        raise TrainingProgramError(f"images have shape {tuple(images.shape)}, the program reads "
                                   f"(N, {', '.join(map(str, image_shape))})")
    if labels.dim() != 1 or len(labels) != len(images):
        raise TrainingProgramError(f"expected one label per image ({len(images)}), found labels "
                                   f"of shape {tuple(labels.shape)}")
    if not images.is_floating_point() or not bool(torch.isfinite(images).all()):
        raise TrainingProgramError("images must be finite floating-point values "
                                   "(preprocessed as the card says)")
    _check_labels(section, labels)


def check_batch(section: dict[str, Any], inputs: tuple[torch.Tensor, ...]) -> None:
    """One batch of the train method's inputs: finite floats, labels its classes, lam in [0, 1].

    The runtime would take a NaN row or a lambda outside [0, 1] without a word and make the
    personal weights NaN at the next SGD step; a low-level ``step`` is checked as ``personalize``.
    """
    specs = section["inputs"]
    if len(inputs) != len(specs):
        raise TrainingProgramError(f"{len(inputs)} inputs, the program takes {len(specs)} ("
                                   f"{', '.join(s['name'] for s in specs)}: training.inputs)")
    for spec, value in zip(specs, inputs, strict=True):
        if spec["from"] == "label":
            _check_labels(section, value)
        elif not value.is_floating_point() or not bool(torch.isfinite(value).all()):
            raise TrainingProgramError(f"input {spec['name']!r} must be finite floating-point "
                                       "values")
        elif spec["from"] == "lambda" and not bool(((value >= 0) & (value <= 1)).all()):
            low, high = float(value.min()), float(value.max())
            raise TrainingProgramError(f"input {spec['name']!r}: every entry must be a lambda in "
                                       f"[0, 1], got {low:g}..{high:g}")


def _check_labels(section: dict[str, Any], labels: torch.Tensor) -> None:
    classes = int(section["outputs"][1]["shape"][-1])
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TrainingProgramError(f"labels must be integer class indices, found {labels.dtype}")
    bad = labels[(labels < 0) | (labels >= classes)]
    if len(bad):
        raise TrainingProgramError(f"label {int(bad[0])} is not a class of this program "
                                   f"(0..{classes - 1})")


def check_weights(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """Weights that can replace ``expected``: every name, the same shapes, finite floats."""
    missing = sorted(set(expected) - set(state))
    if missing:
        raise TrainingProgramError(f"weights lack {', '.join(missing)}")
    for name, param in expected.items():
        value = state[name]
        if tuple(value.shape) != tuple(param.shape):
            raise TrainingProgramError(f"weight {name} has shape {tuple(value.shape)}, the "
                                       f"program expects {tuple(param.shape)}")
        if not value.is_floating_point() or not bool(torch.isfinite(value).all()):
            raise TrainingProgramError(f"weight {name} is not all finite floating-point values")


def _checked_file(folder: Path, name: str, artifact: dict[str, Any] | None) -> bytes:
    """The bytes of ``name``, the file the card lists (size and sha256)."""
    path = folder / name
    if artifact is None:
        raise TrainingProgramError(f"{path}: not listed in the card's artifacts")
    try:
        data = path.read_bytes() if path.stat().st_size == artifact.get("bytes") else b""
    except OSError as err:
        raise TrainingProgramError(f"{path}: cannot be read ({err.strerror or err})") from err
    if len(data) != artifact.get("bytes") or hashlib.sha256(data).hexdigest() != artifact.get(
            "sha256"):
        raise TrainingProgramError(f"{path}: does not match its model card (size or sha256): "
                                   f"a file of another export, or damaged")
    return data
