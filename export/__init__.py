"""Export a client's personalized model to ONNX and ExecuTorch, verified, with a model card.

``pfl-export`` (:mod:`pflkit.export.cli`) is the command; :func:`export_model` the API. Every
model comes from ``Algorithm.personalized_model`` (one definition of each method); the
:class:`Exportable` contract feeds both writers so the two formats cannot drift apart.
"""

from pflkit.export.contract import Exportable, ExportError, TensorSpec
from pflkit.export.pipeline import ExportResult, export_model
from pflkit.export.selection import Selection, build_exportable
from pflkit.export.source import Source, load_device_source, load_run_source

__all__ = [
    "ExportError",
    "ExportResult",
    "Exportable",
    "Selection",
    "Source",
    "TensorSpec",
    "build_exportable",
    "export_model",
    "load_device_source",
    "load_run_source",
]
