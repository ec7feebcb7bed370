"""Export a client's personalized model to ONNX and ExecuTorch, verified, with a model card.

``pfl-export`` (:mod:`pflkit.export.cli`) is the command; :func:`export_model` the API. Every
model comes from the algorithm's ``inference_model(global, client, Choice)`` hook (one
definition of each method, no method known here); the :class:`Exportable` contract feeds both
writers so the two formats cannot drift apart.
"""

from pflkit.export.contract import Exportable, ExportError, TensorSpec
from pflkit.export.pipeline import ExportResult, export_model
from pflkit.export.selection import build_exportable, parse_choice
from pflkit.export.source import Source, load_device_source, load_run_source
from pflkit.sdk.algorithms.inference import Choice

__all__ = [
    "Choice",
    "ExportError",
    "ExportResult",
    "Exportable",
    "Source",
    "TensorSpec",
    "build_exportable",
    "export_model",
    "load_device_source",
    "load_run_source",
    "parse_choice",
]
