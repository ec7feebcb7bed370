"""The one export contract: an eager module, example inputs, and named input/output specs.

Both writers (:mod:`pflkit.export.onnx_format`, :mod:`pflkit.export.pte_format`) and the
verification consume an :class:`Exportable`, never a model directly, so the ONNX and the .pte
file are traced from the same module with the same inputs and the same dynamic batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pflkit.sdk.algorithms.inference import RuntimeInput

EXAMPLE_BATCH = 32  # ExecuTorch sizes XNNPACK inputs from small example batches: keep it >= 16


class ExportError(RuntimeError):
    """An export cannot be done or failed verification; the message has the numbers."""


@dataclass(frozen=True)
class TensorSpec:
    """One named model input or output as the model card describes it."""

    name: str
    shape: tuple[int | str, ...]  # "batch" marks the dynamic dimension
    extra: dict[str, Any] = field(default_factory=dict)  # layout, range, meaning

    @property
    def batched(self) -> bool:
        """Whether dimension 0 is the dynamic batch."""
        return bool(self.shape) and self.shape[0] == "batch"

    def to_card(self) -> dict[str, Any]:
        """Describe the tensor as the card's JSON."""
        return {"name": self.name, "shape": list(self.shape), "dtype": "float32", **self.extra}


@dataclass
class Exportable:
    """What every format exports: ``module(*inputs) -> logits`` (or a tuple of logits).

    ``runtime`` describes the optional scalar input after the images (``inputs[1]``); its
    ``default`` is fed during verification and calibration unless a value is given.
    ``quantizable`` is False when int8 cannot represent the module (weights computed from the
    runtime input in the graph).
    """

    module: nn.Module
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    runtime: RuntimeInput | None = None
    quantizable: bool = True

    @property
    def input_names(self) -> list[str]:
        """Graph input names, in call order."""
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Graph output names, in return order."""
        return [s.name for s in self.outputs]

    def feeds(self, images: torch.Tensor, value: float | None = None
              ) -> tuple[torch.Tensor, ...]:
        """Build the argument tuple for a batch of images (adds the runtime input if any)."""
        if self.runtime is None:
            return (images.contiguous(),)
        value = self.runtime.default if value is None else value
        return images.contiguous(), torch.tensor([value], dtype=torch.float32)

    def example_inputs(self, sample: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Tracing inputs: ``EXAMPLE_BATCH`` rows built from real images ``sample``."""
        reps = -(-EXAMPLE_BATCH // len(sample))
        return self.feeds(sample.repeat(reps, *[1] * (sample.dim() - 1))[:EXAMPLE_BATCH])

    def dynamic_shapes(self, max_batch: int | None) -> tuple[dict[int, Any] | None, ...]:
        """torch.export dynamic shapes: dimension 0 of every batched input is ``batch``."""
        batch = torch.export.Dim("batch", min=1, max=max_batch) if max_batch else \
            torch.export.Dim("batch")
        return tuple({0: batch} if s.batched else None for s in self.inputs)

    @torch.no_grad()
    def eager(self, *args: torch.Tensor) -> list[torch.Tensor]:
        """Run the eager module; the reference outputs, always as a list."""
        out = self.module(*args)
        return list(out) if isinstance(out, tuple | list) else [out]
