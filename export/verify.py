"""Verification, part of every export: each artifact runs in its own runtime beside eager PyTorch.

fp32: max |artifact - eager| <= :data:`FP32_TOLERANCE` on every output at several batch sizes,
and the same top-1 accuracy on the test rows. int8 reports its accuracy drop in points of
test top-1 (the caller refuses it above a threshold in the same unit). A model with a runtime
input (a method's runtime choice, e.g. SuPerFed's ``lam``) is checked at both ends of the
input's range, at :data:`INTERIOR` of the way between them and at its default, with the test
top-1 of each value in the card (an int8 file that ignored the input shows up at the other
values); and out-of-range values must give exactly the output of the clamped value in the
artifact itself (NaN: the input's ``nan`` value). The card's entries are keyed by the input's
name (``runtime_input``), never by a method's.

A new client's model (built from its class distribution alone) is also scored class-weighted,
each test row weighted by that distribution (FedRoD eq. 20): on the balanced test set its
plain top-1 undersells a model made for a skewed client. :func:`versus_generic` puts the
generic model's two numbers beside the exported model's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pflkit.export.contract import Exportable, ExportError
from pflkit.export.formats import Runner
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import class_weighted_accuracy
from pflkit.sdk.metrics import predict as predict_logits

BATCH_SIZES = (1, 7, 32)
FP32_TOLERANCE = 1e-4
PREDICT_CHUNK = 500
INTERIOR = 0.37  # where inside its range a runtime input is also checked: off any 0.1 grid
OUT_OF_RANGE_MARGIN = 0.5  # checked just outside each end, besides +-inf and NaN


def _rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """``n`` real rows (repeated when the split is smaller)."""
    return x.repeat(-(-n // len(x)), *(1,) * (x.dim() - 1))[:n]


def predict(call: Callable[[tuple[torch.Tensor, ...]], list[torch.Tensor]], ex: Exportable,
            x: torch.Tensor, value: float | None = None) -> torch.Tensor:
    """Headline logits of all rows (runtime input ``value``), computed in chunks."""
    return torch.cat([call(ex.feeds(x[i:i + PREDICT_CHUNK], value))[0]
                      for i in range(0, len(x), PREDICT_CHUNK)])


def checked_values(ex: Exportable) -> list[float | None]:
    """Runtime input values verified: range ends, :data:`INTERIOR`, the default (or [None])."""
    if ex.runtime is None:
        return [None]
    spec = ex.runtime
    return sorted({spec.low, spec.low + INTERIOR * (spec.high - spec.low), spec.default,
                   spec.high})


def clamp_cases(ex: Exportable) -> list[tuple[float, float]]:
    """(out-of-range input, the in-range value the graph must treat it as)."""
    assert ex.runtime is not None
    low, high = ex.runtime.low, ex.runtime.high
    return [(low - OUT_OF_RANGE_MARGIN, low), (high + OUT_OF_RANGE_MARGIN, high),
            (-math.inf, low), (math.inf, high), (math.nan, ex.runtime.nan)]


def _scores(logits: torch.Tensor, eager: torch.Tensor, y: torch.Tensor,
            weights: torch.Tensor | None) -> dict[str, float | None]:
    pred, ref = logits.argmax(1), eager.argmax(1)
    scores: dict[str, float | None] = {
        "top1_agreement": float((pred == ref).float().mean()),
        "test_top1_eager": float((ref == y).float().mean()),
        "test_top1_artifact": float((pred == y).float().mean())}
    if weights is not None:
        scores["class_weighted_top1_eager"] = _class_weighted(ref, y, weights)
        scores["class_weighted_top1_artifact"] = _class_weighted(pred, y, weights)
    return scores


def _class_weighted(pred: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> float | None:
    """Class-weighted top-1; None (JSON null) when no test row is of a class ``weights`` has."""
    accuracy = class_weighted_accuracy(pred, y, weights)
    return None if math.isnan(accuracy) else accuracy


def versus_generic(ex: Exportable, generic: nn.Module, test: LabeledTensors,
                   weights: torch.Tensor) -> dict[str, Any]:
    """The exported (eager) and the generic model's test top-1, plain and class-weighted."""
    value = ex.runtime.default if ex.runtime else None
    models = {"exported": predict(lambda feeds: ex.eager(*feeds), ex, test.x, value),
              "generic": predict_logits(generic, test)}
    return {"test_rows": len(test), **{
        name: {"test_top1": float((logits.argmax(1) == test.y).float().mean()),
               "class_weighted_top1": _class_weighted(logits.argmax(1), test.y, weights)}
        for name, logits in models.items()}}


def _check_clamping(ex: Exportable, run: Runner, x: torch.Tensor, file: str) -> list[str]:
    """Out-of-range runtime values give the clamped value's output, bit for bit."""
    checked = []
    for value, target in clamp_cases(ex):
        expected = run(ex.feeds(x, target))
        for ref, got in zip(expected, run(ex.feeds(x, value)), strict=True):
            if not torch.equal(ref, got):
                raise ExportError(f"{file}: {ex.inputs[1].name} = {value} does not give the "
                                  f"output of {target} (max |diff| "
                                  f"{float((ref - got).abs().nan_to_num(math.inf).max()):.3e})")
        checked.append(str(value))
    return checked


def verify(ex: Exportable, run: Runner, test: LabeledTensors, file: str, precision: str,
           weights: torch.Tensor | None = None) -> dict[str, Any]:
    """Compare an artifact with eager PyTorch; the card's parity entry (raises on fp32 drift).

    ``weights``: a new client's class distribution; the entry then also holds the
    class-weighted top-1 under it (``class_weighted_top1_eager`` / ``_artifact``).
    """
    values = checked_values(ex)
    diff = 0.0
    for value in values:
        for size in BATCH_SIZES:
            feeds = ex.feeds(_rows(test.x, size), value)
            for ref, got in zip(ex.eager(*feeds), run(feeds), strict=True):
                gap = (ref - got.reshape(ref.shape)).abs().nan_to_num(math.inf).max()
                diff = max(diff, float(gap))  # a NaN output is never "no difference"
    per_value = []
    for value in values:
        eager = predict(lambda feeds: ex.eager(*feeds), ex, test.x, value)
        if not bool(torch.isfinite(eager).all()):
            at = "" if value is None else f" at {ex.inputs[1].name} = {value}"
            raise ExportError(f"{file}: the model's own logits (eager PyTorch) are NaN or "
                              f"infinite on the test rows{at}: its weights make no usable model")
        per_value.append({"value": value, **_scores(predict(run, ex, test.x, value), eager,
                                                  test.y, weights)})
    headline = next(p for p in per_value
                    if p["value"] == (ex.runtime.default if ex.runtime else None))
    entry: dict[str, Any] = {
        "file": file, "precision": precision, "batch_sizes": list(BATCH_SIZES),
        "max_abs_diff": diff, **{k: v for k, v in headline.items() if k != "value"},
        "test_rows": len(test),
    }
    if ex.runtime is not None:
        entry["runtime_input"] = ex.runtime.name
        entry["runtime_value"] = ex.runtime.default
        entry["values_checked"] = values
        entry["per_value"] = per_value
        entry["clamp_checked"] = _check_clamping(ex, run, _rows(test.x, BATCH_SIZES[-1]), file)
    if precision == "fp32":
        if diff > FP32_TOLERANCE:
            raise ExportError(f"{file}: max |artifact - eager| = {diff:.3e} > {FP32_TOLERANCE:g} "
                              f"(batch sizes {list(BATCH_SIZES)})")
        for p in per_value:
            if p["test_top1_artifact"] != p["test_top1_eager"]:
                at = "" if p["value"] is None else f" at {ex.inputs[1].name} = {p['value']}"
                raise ExportError(f"{file}: test top-1 {p['test_top1_artifact']:.4f} differs "
                                  f"from eager {p['test_top1_eager']:.4f}{at} on {len(test)} "
                                  f"rows")
    else:
        worst = max(per_value, key=lambda p: p["test_top1_eager"] - p["test_top1_artifact"])
        entry["accuracy_drop_points"] = 100 * (worst["test_top1_eager"]
                                               - worst["test_top1_artifact"])
        if worst["value"] is not None:
            entry["accuracy_drop_value"] = worst["value"]
    return entry
