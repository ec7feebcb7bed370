"""Evaluation protocols over clients: their own test split and the class-weighted global one.

``own``: the client's personalized model on the client's own test rows (SuPerFed protocol).
``class_weighted``: the same model on the GLOBAL test set, each row weighted by the client's
train class proportion (FedRoD / PFL-MoE "local test"). ``global_plain``: unweighted accuracy
on the global test set (PFL-MoE "global test").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from pflkit.sdk.data.federation import ClientData
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import (
    class_weighted_accuracy,
    mean_std,
    predict,
    scores_from_logits,
    top_k_accuracy,
)

Predictor = Callable[[nn.Module, LabeledTensors], torch.Tensor]  # (model, data) -> logits


class DivergedModel(ValueError):
    """A client's model gives NaN or Inf outputs: its training diverged (no score applies)."""


@dataclass(frozen=True)
class ClientReport:
    """One client's numbers (NaN where a protocol does not apply)."""

    client_id: int
    own_top1: float
    own_ece: float
    own_mce: float
    own_nll: float
    class_weighted: float
    global_plain: float

    def to_dict(self) -> dict[str, float]:
        """Plain dict for JSON."""
        return dict(self.__dict__)


def evaluate_client(model: nn.Module, client: ClientData, global_test: LabeledTensors | None,
                    num_classes: int, predictor: Predictor = predict) -> ClientReport:
    """Score one client's inference model under every protocol.

    ``predictor`` computes logits; a :class:`pflkit.sdk.scoring.ScoringCache`'s ``predict``
    scores models shared by several clients once.
    """
    own = scores_from_logits(_finite(predictor(model, client.test), client.client_id),
                             client.test.y) if len(client.test) else None
    nan = float("nan")
    weighted = plain = nan
    if global_test is not None:
        logits = _finite(predictor(model, global_test), client.client_id)
        pred = logits.argmax(dim=1)
        weighted = class_weighted_accuracy(pred, global_test.y, client.class_counts(num_classes))
        plain = top_k_accuracy(logits, global_test.y, 1)
    return ClientReport(
        client.client_id,
        own.top1 if own else nan,
        own.ece if own else nan,
        own.mce if own else nan,
        own.nll if own else nan,
        weighted,
        plain,
    )


def _finite(logits: torch.Tensor, client_id: int) -> torch.Tensor:
    if not bool(torch.isfinite(logits).all()):
        raise DivergedModel(f"client {client_id}: its model's outputs are NaN or Inf (its "
                            "training diverged); no score is reported for a diverged model")
    return logits


def summarize(reports: Iterable[ClientReport]) -> dict[str, float]:
    """Mean and std across clients of every field: ``<field>_mean`` / ``<field>_std``.

    Each client counts once (not by its rows). A client without own test rows (a user too
    small for one) has no ``own_*`` scores: ``own_clients`` says how many clients those means
    are over, so 406 scored users of 1,000 do not read as 1,000.
    """
    reports = list(reports)
    scored = sum(not math.isnan(r.own_top1) for r in reports)
    out: dict[str, float] = {"clients": float(len(reports)), "own_clients": float(scored)}
    if not reports:
        return out
    for name in ClientReport.__dataclass_fields__:
        if name == "client_id":
            continue
        mean, std = mean_std([getattr(r, name) for r in reports])
        out[f"{name}_mean"], out[f"{name}_std"] = mean, std
    return out

