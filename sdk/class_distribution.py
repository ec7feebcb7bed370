"""A client's class distribution, as people type it and as algorithms use it.

One parser serves every command that takes one (``pfl-export --class-counts/--proportions``,
``pfl-fedrod-head``), so they accept and refuse the same inputs: counts are whole numbers,
proportions sum to 1, every entry is finite and >= 0, so is their sum, and some class has a
sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

PROPORTION_TOLERANCE = 1e-3  # proportions must sum to 1 within this


class ClassDistributionError(ValueError):
    """A class distribution has the wrong length, a negative or non-finite entry, or sums to 0."""


def class_proportions(distribution: torch.Tensor | Sequence[float], num_classes: int
                      ) -> torch.Tensor:
    """Validate class counts or proportions; return proportions (float32, sum 1)."""
    try:
        a = torch.as_tensor(distribution, dtype=torch.float64)
    except (TypeError, ValueError, OverflowError) as err:
        raise ClassDistributionError(f"class distribution is not numeric: {err}") from err
    if a.dim() != 1 or a.numel() != num_classes:
        raise ClassDistributionError(
            f"class distribution must have {num_classes} entries (one per class), "
            f"got shape {tuple(a.shape)}"
        )
    if not bool(torch.isfinite(a).all()):
        raise ClassDistributionError(
            f"class distribution has NaN or infinite entries: {a.tolist()}")
    if bool((a < 0).any()):
        raise ClassDistributionError(f"class distribution has negative entries: {a.tolist()}")
    total = float(a.sum())
    if total <= 0:
        raise ClassDistributionError("class distribution is all zero (no class has any sample)")
    if not math.isfinite(total):  # 1e308 per class: a / inf would be all zeros, not shares
        raise ClassDistributionError("class distribution sums beyond the float range")
    return (a / total).float()


def parse_class_distribution(text: str, proportions: bool) -> tuple[float, ...]:
    """'5,0,12' (counts) or '0.5,0.5,0' (proportions) -> the numbers, checked.

    The number of classes is checked later by whoever knows it (:func:`class_proportions`).
    """
    option = "--proportions" if proportions else "--class-counts"
    try:
        values = tuple(float(t) for t in text.split(","))
    except ValueError as err:
        raise ClassDistributionError(f"{option} must be comma-separated numbers, got "
                                     f"{text!r}") from err
    if not all(math.isfinite(v) for v in values):  # "inf", "nan", "1e400"
        raise ClassDistributionError(f"{option} has NaN or infinite entries: {text!r}")
    if any(v < 0 for v in values):
        raise ClassDistributionError(f"{option} has negative entries: {text!r}")
    if not proportions and not all(v.is_integer() for v in values):
        raise ClassDistributionError(f"{option} must be whole numbers, got {text!r} (use "
                                     f"--proportions for shares)")
    if sum(values) <= 0:
        raise ClassDistributionError(f"{option} is all zero (no class has any sample)")
    if proportions and abs(sum(values) - 1.0) > PROPORTION_TOLERANCE:
        raise ClassDistributionError(f"{option} must sum to 1 (got {sum(values):.6g}); use "
                                     f"--class-counts for counts")
    return values
