"""In-memory labelled tensors and the mini-batch iterator every trainer uses.

Datasets here are small enough (Fashion-MNIST is 190 MB as float32) to live in memory as
one tensor, so a client's data is an index into it and a batch is one gather: no
DataLoader workers, no per-sample Python, which keeps the simulator near a plain loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch


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
    """How many rows of ``x`` hold NaN or Inf and the first (training on them only diverges)."""
    bad = (~torch.isfinite(x.flatten(1)).all(1)).nonzero().flatten().tolist()
    return f"x has NaN or Inf in {len(bad)} row(s), the first at row {bad[0]}" if bad else None
