"""Reading an export folder's training program as an app does: card, checked files, checked data.

An export folder is input from outside the process (copied, pushed, edited): before
:class:`~pflkit.export.device_trainer.DeviceTrainer` loads anything, the card must be a JSON
object with a ``training`` section whose numbers are in their documented ranges
(docs/model-card.md), its files plain names beside the card whose size and sha256 are the
card's ``artifacts`` entries, and rows handed to a trainer must be what the program was built
for. Each violation is one line (:class:`TrainingProgramError`), raised before any weight
changes, the rules of the Android core's ``TrainingSection`` and ``LabeledSamples``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch

from pflkit.export.output_folder import CARD_FILE

FILE_KEYS = ("program", "initial_weights")
OPTIMIZER_NUMBERS = ("lr", "momentum", "weight_decay", "dampening")


class TrainingProgramError(ValueError):
    """A training program and its description do not fit together (names, shapes, optimizers)."""


def read_card(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The folder's card and its checked ``training`` section; files verified against it."""
    path = folder / CARD_FILE
    try:
        card = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise TrainingProgramError(f"{path}: not a readable model card "
                                   f"({type(err).__name__}: {str(err).splitlines()[0]})") from err
    section = card.get("training") if isinstance(card, dict) else None
    if not section:
        raise TrainingProgramError(f"{folder}: the model card has no training section "
                                   f"(export with --trainer)")
    check_section(section)
    artifacts = {a.get("file"): a for a in card.get("artifacts") or [] if isinstance(a, dict)}
    for key in FILE_KEYS:
        _check_file(folder, section[key], artifacts.get(section[key]))
    return card, section


def check_section(section: dict[str, Any]) -> None:
    """The documented ranges of a ``training`` section's numbers and file names."""
    for key in FILE_KEYS:
        name = section.get(key)
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise TrainingProgramError(f"training.{key}: must be a plain file name beside the "
                                       f"card, found {name!r}")
    schedule = section.get("schedule") or {}
    max_batch = _positive_int(section.get("max_batch"), "training.max_batch")
    _positive_int(schedule.get("epochs"), "training.schedule.epochs")
    batch = _positive_int(schedule.get("batch_size"), "training.schedule.batch_size")
    if batch > max_batch:
        raise TrainingProgramError(f"training.schedule.batch_size: must be at most max_batch "
                                   f"({max_batch}), found {batch}")
    for i, opt in enumerate(section.get("optimizers") or []):
        for key in OPTIMIZER_NUMBERS:
            value = opt.get(key, 0.0)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value < 0):
                raise TrainingProgramError(f"training.optimizers[{i}].{key}: must be a finite "
                                           f"number >= 0, found {value!r}")


def check_rows(section: dict[str, Any], image_shape: tuple[int, ...], images: torch.Tensor,
               labels: torch.Tensor) -> None:
    """Rows a trainer can learn from: the program's image shape, finite, labels its classes."""
    classes = int(section["outputs"][1]["shape"][-1])
    if tuple(images.shape[1:]) != tuple(image_shape) or images.dim() != len(image_shape) + 1:
        raise TrainingProgramError(f"images have shape {tuple(images.shape)}, the program reads "
                                   f"(N, {', '.join(map(str, image_shape))})")
    if labels.dim() != 1 or len(labels) != len(images):
        raise TrainingProgramError(f"expected one label per image ({len(images)}), found labels "
                                   f"of shape {tuple(labels.shape)}")
    if not images.is_floating_point() or not bool(torch.isfinite(images).all()):
        raise TrainingProgramError("images must be finite floating-point values "
                                   "(preprocessed as the card says)")
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


def _positive_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TrainingProgramError(f"{field}: must be a positive integer, found {value!r}")
    return value


def _check_file(folder: Path, name: str, artifact: dict[str, Any] | None) -> None:
    """``name`` exists and is the file the card lists (size and sha256)."""
    path = folder / name
    if artifact is None:
        raise TrainingProgramError(f"{path}: not listed in the card's artifacts")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TrainingProgramError(f"{path}: cannot be read ({err.strerror or err})") from err
    if len(data) != artifact.get("bytes") or hashlib.sha256(data).hexdigest() != artifact.get(
            "sha256"):
        raise TrainingProgramError(f"{path}: does not match its model card (size or sha256): "
                                   f"a file of another export, or damaged")
