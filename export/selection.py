"""From the user's choice to an :class:`Exportable`, without knowing any algorithm.

The command line's text becomes a :class:`~pflkit.sdk.algorithms.inference.Choice`
(:func:`parse_choice`); the algorithm resolves it
(:meth:`~pflkit.sdk.algorithms.base.Algorithm.inference_model`: the module, its outputs, an
optional runtime input, the card's mixture) and checks it: its errors name the method. Only
the checks a command line needs before any tensor exists are made here.
"""

from __future__ import annotations

from typing import Any

import torch

from pflkit.export.contract import Exportable, ExportError, TensorSpec
from pflkit.export.source import Source
from pflkit.sdk.algorithms.inference import Choice
from pflkit.sdk.class_distribution import ClassDistributionError, parse_class_distribution

LAMBDA_WORDS = ("best", "runtime")


def parse_choice(lam: str | None, head: str = "personalized", counts: str | None = None,
                 proportions: str | None = None) -> Choice:
    """Build from command-line text (``--lambda 0.3``, ``--class-counts 5,0,12``)."""
    if counts and proportions:
        raise ExportError("give --class-counts or --proportions, not both")
    value: float | str | None = lam
    if lam is not None and lam not in LAMBDA_WORDS:
        try:
            value = float(lam)
        except ValueError as err:
            raise ExportError(f"--lambda must be a number, 'best' or 'runtime', got "
                              f"{lam!r}") from err
    dist = None
    if counts or proportions:
        try:
            dist = torch.tensor(parse_class_distribution(counts or proportions or "",
                                                         bool(proportions)))
        except ClassDistributionError as err:
            raise ExportError(str(err)) from err
    try:
        return Choice(value, dist, head)
    except ValueError as err:
        raise ExportError(str(err)) from err


def build_exportable(source: Source, choice: Choice
                     ) -> tuple[Exportable, dict[str, Any] | None]:
    """The module to export for ``choice`` and the card's ``mixture`` (None: plain model)."""
    try:
        built = source.algorithm.inference_model(source.global_state, source.client_state,
                                                 choice)
    except (ValueError, KeyError) as err:
        raise ExportError(f"cannot build the model: {err}") from err
    spec = source.spec
    layout = str(spec.preprocessing.to_dict()["layout"])  # NCHW images, NF rows, NTF sequences
    inputs = [TensorSpec("image" if layout == "NCHW" else "input", ("batch", *spec.input_shape),
                         {"layout": layout})]
    runtime = built.runtime_input
    if runtime is not None:  # the graph clamps it into its range and reads NaN as "nan"
        inputs.append(TensorSpec(runtime.name, (1,), runtime.to_card()))
    outputs = [TensorSpec(name, ("batch", spec.num_classes), {"meaning": "logits"})
               for name in built.outputs]
    exportable = Exportable(built.module.eval(), inputs, outputs, runtime, built.quantizable)
    return exportable, None if built.mixture is None else built.mixture.to_card()
