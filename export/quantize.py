"""int8 post-training quantization for both formats, with runtime inputs kept in float.

A model's runtime inputs besides the images (SuPerFed's ``lam``) are settings, not
activations: quantizing one with the range seen during calibration (a single lambda) snaps
every other value to that range, so a runtime-lambda model would ignore lambda. Every
operation that reads a runtime input, or a tensor computed from runtime inputs and constants
alone, is therefore left out of quantization (ONNX: ``nodes_to_exclude``; pt2e: the
quantizer's node filter). The image path stays int8. Calibration batches sweep each runtime
input over its declared range, so the activation ranges downstream of the mixing cover every
value an app may feed.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from pflkit.export.contract import Exportable

if TYPE_CHECKING:
    import onnx

CALIBRATION_BATCH = 32


def calibration_batches(ex: Exportable, images: torch.Tensor
                        ) -> Iterator[tuple[torch.Tensor, ...]]:
    """Batches of real images; runtime inputs step evenly across their range batch by batch."""
    starts = range(0, len(images), CALIBRATION_BATCH)
    low, high = (ex.runtime.low, ex.runtime.high) if ex.runtime else (0.0, 0.0)
    for i, start in enumerate(starts):
        share = i / max(len(starts) - 1, 1)
        yield ex.feeds(images[start:start + CALIBRATION_BATCH], low + share * (high - low))


def runtime_only(sources: Iterable[str], steps: Iterable[tuple[list[str], list[str]]],
                 constants: Iterable[str]) -> set[str]:
    """Names computed from ``sources`` and constants alone.

    ``steps``: every operation as (input names, output names), in topological order; an
    operation whose inputs are all constants yields constants.
    """
    derived, fixed = set(sources), set(constants)
    for inputs, outputs in steps:
        used = [i for i in inputs if i]  # ONNX marks an omitted optional input with ""
        if all(i in fixed for i in used):
            fixed.update(outputs)
        elif all(i in derived or i in fixed for i in used):
            derived.update(outputs)
    return derived


@contextmanager
def _quiet_onnxruntime() -> Iterator[None]:
    """Drop onnxruntime.quantization's advice, logged on the ROOT logger as WARNING:root."""
    def keep(record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def quantize_onnx(model: onnx.ModelProto, ex: Exportable, calibration: torch.Tensor
                  ) -> onnx.ModelProto:
    """Static QDQ: per-channel int8 weights, uint8 activations; runtime inputs stay float."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = (dict(zip(ex.input_names, (t.numpy() for t in feeds), strict=True))
                            for feeds in calibration_batches(ex, calibration))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    graph = model.graph
    constants = {i.name for i in graph.initializer} | {
        o for n in graph.node if n.op_type == "Constant" for o in n.output}
    derived = runtime_only(ex.input_names[1:], ((list(n.input), list(n.output))
                                                for n in graph.node), constants)
    excluded = [n.name for n in graph.node if any(i in derived for i in n.input)]
    with tempfile.TemporaryDirectory() as tmp, _quiet_onnxruntime():
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=excluded)
        return onnx.load(dst)


def _float_runtime_filter(names: list[str]) -> Callable[[torch.fx.Node], bool]:
    """pt2e node filter: False for nodes that read a runtime input (or a tensor made of it)."""
    cache: dict[int, set[str]] = {}

    def allowed(node: torch.fx.Node) -> bool:
        graph = node.graph
        if id(graph) not in cache:
            nodes = list(graph.nodes)
            constants = {n.name for n in nodes if n.op == "get_attr"}
            cache[id(graph)] = runtime_only(
                (n.name for n in nodes if n.op == "placeholder" and n.name in names),
                (([a.name for a in n.all_input_nodes], [n.name]) for n in nodes), constants)
        return not any(a.name in cache[id(graph)] for a in node.all_input_nodes)

    return allowed


def quantize_pt2e(program: torch.export.ExportedProgram, ex: Exportable,
                  calibration: torch.Tensor) -> torch.nn.Module:
    """Quantize with torchao pt2e and the XNNPACK quantizer (symmetric, per-channel)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    module = program.module()
    placeholders = [n.name for n in module.graph.nodes if n.op == "placeholder"]
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True)).set_filter_function(
        _float_runtime_filter(placeholders[1:len(ex.inputs)]))
    prepared = prepare_pt2e(module, quantizer)
    with torch.no_grad():
        for feeds in calibration_batches(ex, calibration):
            prepared(*feeds)
    return convert_pt2e(prepared)
