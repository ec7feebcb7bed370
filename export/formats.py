"""The two artifact formats behind one interface: write (fp32 or int8) and run in its runtime.

ONNX: ``torch.onnx.export(dynamo=True)`` (the torch.export-based exporter, default opset of
the installed torch) with an unbounded ``batch`` dimension; the card goes into
``metadata_props``; int8 is onnxruntime's static QDQ quantization (per-channel int8 weights,
uint8 activations) calibrated on the client's train rows (:mod:`pflkit.export.quantize`).

ExecuTorch: ``torch.export`` -> ``to_edge_transform_and_lower`` with the XNNPACK partitioner;
the card is the constant method ``model_card`` (uint8 tensor of UTF-8 JSON); int8 is torchao's
pt2e flow with the XNNPACK quantizer (symmetric, per-channel). Runtime inputs such as ``lam``
stay float in both. The batch dimension is bounded
by :data:`PTE_MAX_BATCH` because ExecuTorch plans memory for the largest shape.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from pflkit.export.contract import Exportable, ExportError
from pflkit.export.quantize import quantize_onnx, quantize_pt2e
from pflkit.export.quiet import set_runtime_threads
from pflkit.sdk.tensorio import atomic_write_bytes

PTE_MAX_BATCH = 64
CARD_KEY = "pflkit.model_card"  # ONNX metadata_props key
CARD_METHOD = "model_card"  # ExecuTorch constant method

Runner = Callable[[tuple[torch.Tensor, ...]], list[torch.Tensor]]


class Format(ABC):
    """One artifact format: how to write it and how to run it in its own runtime."""

    name: str  # the card's "format"
    suffix: str
    max_batch: int | None = None  # largest batch the artifact accepts (None: unbounded)

    @abstractmethod
    def write(self, ex: Exportable, path: Path, card_json: str, sample: torch.Tensor,
              calibration: torch.Tensor | None = None) -> None:
        """Write the artifact (int8 when ``calibration`` images are given) with the card."""

    @abstractmethod
    def load(self, path: Path, threads: int = 1) -> Runner:
        """Load the artifact as a callable on a tuple of inputs (any batch size)."""

    @abstractmethod
    def embedded_card(self, path: Path) -> str:
        """Read the model card JSON stored inside the artifact."""

    def chunked(self, run: Runner) -> Runner:
        """Split batches larger than ``max_batch`` (runtime lambda input is shared)."""
        limit = self.max_batch
        if limit is None:
            return run

        def call(inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
            images, rest = inputs[0], inputs[1:]
            parts = [run((images[i:i + limit], *rest)) for i in range(0, len(images), limit)]
            return [torch.cat([p[k] for p in parts]) for k in range(len(parts[0]))]

        return call


class OnnxFormat(Format):
    """ONNX for onnxruntime (and anything else that reads ONNX)."""

    name, suffix = "onnx", "onnx"

    def write(self, ex: Exportable, path: Path, card_json: str, sample: torch.Tensor,
              calibration: torch.Tensor | None = None) -> None:
        """Export with the dynamo exporter; optionally quantize (static QDQ); embed the card."""
        import onnx

        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        program = torch.onnx.export(
            ex.module, ex.example_inputs(sample), dynamo=True, verbose=False,
            input_names=ex.input_names, output_names=ex.output_names,
            dynamic_shapes=ex.dynamic_shapes(None),
        )
        if program is None:  # only when exporting to a file name, which this does not do
            raise ExportError("torch.onnx.export returned no program")
        model = program.model_proto
        if calibration is not None:
            model = quantize_onnx(model, ex, calibration)
        onnx.helper.set_model_props(model, {CARD_KEY: card_json})
        atomic_write_bytes(path, model.SerializeToString())

    def load(self, path: Path, threads: int = 1) -> Runner:
        """Open an onnxruntime CPU session."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def run(inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
            feeds = {n: t.numpy() for n, t in zip(names, inputs, strict=True)}
            return [torch.from_numpy(np.asarray(o)) for o in session.run(None, feeds)]

        return run

    def embedded_card(self, path: Path) -> str:
        """``metadata_props[pflkit.model_card]``."""
        import onnx

        props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
        return props[CARD_KEY]


class PteFormat(Format):
    """ExecuTorch program with the XNNPACK delegate."""

    name, suffix = "executorch", "pte"
    max_batch = PTE_MAX_BATCH

    def write(self, ex: Exportable, path: Path, card_json: str, sample: torch.Tensor,
              calibration: torch.Tensor | None = None) -> None:
        """torch.export (optionally pt2e int8), lower to XNNPACK, add the card method."""
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        example = ex.example_inputs(sample)
        dynamic = ex.dynamic_shapes(PTE_MAX_BATCH)
        program = torch.export.export(ex.module, example, dynamic_shapes=dynamic)
        if calibration is not None:
            program = torch.export.export(quantize_pt2e(program, ex, calibration), example,
                                          dynamic_shapes=dynamic)
        card = torch.tensor(list(card_json.encode()), dtype=torch.uint8)
        lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()],
                                              constant_methods={CARD_METHOD: card})
        atomic_write_bytes(path, lowered.to_executorch().buffer)

    def load(self, path: Path, threads: int = 1) -> Runner:
        """Load ``forward`` in the ExecuTorch Python runtime (XNNPACK on ``threads`` threads)."""
        from executorch.runtime import Runtime

        set_runtime_threads(threads)
        method = Runtime.get().load_program(Path(path)).load_method("forward")

        def run(inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
            return [t.clone() for t in method.execute(list(inputs))]

        return self.chunked(run)

    def embedded_card(self, path: Path) -> str:
        """Decode the ``model_card`` constant method's bytes."""
        from executorch.runtime import Runtime

        program = Runtime.get().load_program(Path(path))
        return bytes(program.load_method(CARD_METHOD).execute([])[0].tolist()).decode()


FORMATS: dict[str, Format] = {f.name: f for f in (OnnxFormat(), PteFormat())}
