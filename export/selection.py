"""From the user's choice (lambda, head, class distribution) to an :class:`Exportable`.

Every module comes from the algorithm itself: ``personalized_model(global, client, Choice)``,
or ``generic_and_personalized_model`` when the method offers it (FedRoD: two outputs,
``logits`` and ``generic_logits``), or ``global_model`` for ``head="generic"``. Validation of
lambda and class distributions is left to the algorithm where it knows best (its errors name
it); the checks here are the ones a command line needs before any tensor exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pflkit.export.contract import Exportable, ExportError, TensorSpec
from pflkit.export.source import Source
from pflkit.sdk.algorithms.base import Choice
from pflkit.sdk.class_distribution import ClassDistributionError, parse_class_distribution

HEADS = ("personalized", "generic")
LAMBDA_WORDS = ("best", "runtime")
RUNTIME_DEFAULT_LAMBDA = 0.5  # lam fed to a runtime-lambda model when the client chose none


@dataclass(frozen=True)
class Selection:
    """Which model of the source to export."""

    lam: float | str | None = None  # a number in [0, 1], "best", "runtime" or None
    head: str = "personalized"  # personalized | generic
    class_distribution: tuple[float, ...] | None = None  # counts or proportions (new client)

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ExportError(f"head must be one of {', '.join(HEADS)}, got {self.head!r}")
        if isinstance(self.lam, str) and self.lam not in LAMBDA_WORDS:
            raise ExportError(f"lambda must be a number in [0, 1], 'best' or 'runtime', "
                              f"got {self.lam!r}")
        if isinstance(self.lam, float | int) and not 0.0 <= float(self.lam) <= 1.0:
            raise ExportError(f"lambda must be in [0, 1], got {self.lam}")
        if self.head == "generic" and (self.lam is not None or self.class_distribution):
            raise ExportError("the generic model takes no lambda or class distribution")

    @classmethod
    def parse(cls, lam: str | None, head: str = "personalized",
              counts: str | None = None, proportions: str | None = None) -> Selection:
        """Build from command-line text (``--lambda 0.3``, ``--class-counts 5,0,12``)."""
        if counts and proportions:
            raise ExportError("give --class-counts or --proportions, not both")
        value: float | str | None = lam
        if lam is not None and lam not in LAMBDA_WORDS:
            try:
                value = float(lam)
            except ValueError as err:
                raise ExportError(f"lambda must be a number in [0, 1], 'best' or 'runtime', "
                                  f"got {lam!r}") from err
        dist = None
        if counts or proportions:
            try:
                dist = parse_class_distribution(counts or proportions or "", bool(proportions))
            except ClassDistributionError as err:
                raise ExportError(str(err)) from err
        return cls(value, head, dist)


def _lambda_of(source: Source, selection: Selection) -> float | str | None:
    """Resolve "best" (and a SuPerFed default) to the client's chosen number for the card."""
    lam = selection.lam
    chosen = source.client_state.meta.get("lambda")
    if lam is None and selection.head == "personalized" and \
            getattr(source.algorithm, "mixing", None) is not None:
        lam = "best"  # a SuPerFed export always names its lambda in the card
    if lam == "best":
        if chosen is None:
            raise ExportError(f"{source.algorithm.name}: this client has no chosen lambda "
                              f"(no personalization stage ran); give --lambda VALUE")
        return float(chosen)
    return lam


def _mixture(source: Source, selection: Selection, lam: float | str | None,
             choice: Choice) -> dict[str, Any] | None:
    """Describe the mixture for the card (None for plain models)."""
    algorithm = source.algorithm
    mixing = getattr(algorithm, "mixing", None)
    if mixing is not None and selection.head == "personalized":
        return {"kind": "superfed", "lambda": lam, "mode": "mm" if mixing == "model" else "lm"}
    if hasattr(algorithm, "generic_and_personalized_model"):
        out: dict[str, Any] = {"kind": "fedrod", "head": selection.head}
        if choice.class_distribution is not None:
            out["class_distribution"] = choice.class_distribution.tolist()
        return out
    variant = getattr(algorithm.params, "variant", None)
    if variant is not None and selection.head == "personalized":
        return {"kind": "pflmoe", "variant": variant}
    return None


def build_exportable(source: Source, selection: Selection
                     ) -> tuple[Exportable, dict[str, Any] | None]:
    """Build the module to export for ``selection`` and the card's mixture description."""
    algorithm, spec = source.algorithm, source.spec
    lam = _lambda_of(source, selection)
    dist = selection.class_distribution
    choice = Choice(lam=lam, class_distribution=None if dist is None else torch.tensor(dist))
    two_heads = hasattr(algorithm, "generic_and_personalized_model")
    try:
        if selection.head == "generic":
            module = algorithm.global_model(source.global_state)
        elif two_heads:
            module = algorithm.generic_and_personalized_model(
                source.global_state, source.client_state, choice)
        else:
            given = lam is not None or dist is not None
            module = algorithm.personalized_model(source.global_state, source.client_state,
                                                  choice if given else None)
    except (ValueError, KeyError) as err:
        raise ExportError(f"cannot build the model: {err}") from err
    batch_logits = ("batch", spec.num_classes)
    layout = str(spec.preprocessing.to_dict()["layout"])  # NCHW images, NF rows, NTF sequences
    inputs = [TensorSpec("image" if layout == "NCHW" else "input", ("batch", *spec.input_shape),
                         {"layout": layout})]
    runtime = lam == "runtime"
    chosen = source.client_state.meta.get("lambda")
    feed_lam = (float(chosen) if chosen is not None else RUNTIME_DEFAULT_LAMBDA) if runtime \
        else None
    if runtime:  # the graph clamps lam into its range and reads NaN as "nan"
        inputs.append(TensorSpec("lam", (1,), {"range": [0.0, 1.0], "default": feed_lam,
                                               "nan": float(module.nan_lambda)}))
    names = ["logits", "generic_logits"] if two_heads and selection.head == "personalized" \
        else ["logits"]
    outputs = [TensorSpec(n, batch_logits, {"meaning": "logits"}) for n in names]
    exportable = Exportable(module.eval(), inputs, outputs, feed_lam)
    return exportable, _mixture(source, selection, lam, choice)
