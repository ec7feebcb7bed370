"""Evaluation protocols over clients: their own test split and the class-weighted global one.

``own``: the client's personalized model on the client's own test rows (SuPerFed protocol).
``class_weighted``: the same model on the GLOBAL test set, each row weighted by the client's
train class proportion (FedRoD / PFL-MoE "local test"). ``global_plain``: unweighted accuracy
on the global test set (PFL-MoE "global test"). :func:`versus_baseline` pairs two models'
reports client by client (FedRoD's zero-shot head against the generic model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pflkit.sdk.data.federation import ClientData
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import (
    Scores,
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


def evaluate_or_undefined(model: nn.Module, client: ClientData,
                          global_test: LabeledTensors | None, num_classes: int,
                          predictor: Predictor, diverged: list[int]) -> ClientReport:
    """:func:`evaluate_client`, or for a model with non-finite outputs no score at all.

    A run reports such a model rather than stopping on it: every protocol is NaN (so means
    leave it out, as a client without test rows) and its client id is appended to
    ``diverged``, which the run lists beside the means.
    """
    try:
        return evaluate_client(model, client, global_test, num_classes, predictor)
    except DivergedModel:
        diverged.append(client.client_id)
        nan = float("nan")
        return ClientReport(client.client_id, nan, nan, nan, nan, nan, nan)


def global_scores(logits: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """A model's scores on a labelled set; with non-finite outputs ``diverged`` and no score.

    Argmax of Inf logits still picks a class, but no number of a diverged model means
    anything: all are NaN (null in JSON) with ``n`` kept.
    """
    if bool(torch.isfinite(logits).all()):
        return scores_from_logits(logits, y).to_dict()
    nan = float("nan")
    return Scores(nan, nan, nan, nan, nan, len(y)).to_dict() | {"diverged": True}


def summarize(reports: Iterable[ClientReport]) -> dict[str, float]:
    """Mean and std across clients of every field: ``<field>_mean`` / ``<field>_std``.

    Each client counts once (not by its rows). A client without own test rows (a user too
    small for one) has no ``own_*`` scores: ``own_clients`` says how many clients those means
    are over, so 406 scored users of 1,000 do not read as 1,000.
    """
    reports = list(reports)
    scored = sum(not math.isnan(r.own_top1) for r in reports)
    out: dict[str, float] = {"clients": len(reports), "own_clients": scored}  # counts: ints
    if not reports:
        return out
    for name in ClientReport.__dataclass_fields__:
        if name == "client_id":
            continue
        mean, std = mean_std([getattr(r, name) for r in reports])
        out[f"{name}_mean"], out[f"{name}_std"] = mean, std
    return out


PAIRED_PROTOCOLS = ("class_weighted", "own_top1")


def versus_baseline(reports: Iterable[ClientReport], baseline: Iterable[ClientReport]
                    ) -> dict[str, dict[str, int]]:
    """Per protocol, on how many clients ``reports`` beat, tie or lose to ``baseline``.

    Paired client by client (same rows, same weights), because two means can hide that most
    clients lose. A client without a number for a protocol (no own test rows) is left out of
    that protocol's count; a protocol no client has a number for is absent.
    """
    out: dict[str, dict[str, int]] = {}
    pairs = list(zip(reports, baseline, strict=True))
    if any(r.client_id != b.client_id for r, b in pairs):
        raise ValueError("versus_baseline pairs the reports of the same clients in one order")
    for protocol in PAIRED_PROTOCOLS:
        scored = [(getattr(r, protocol), getattr(b, protocol)) for r, b in pairs]
        scored = [(m, g) for m, g in scored if not (math.isnan(m) or math.isnan(g))]
        if scored:
            out[protocol] = {"clients": len(scored),
                             "beats": sum(m > g for m, g in scored),
                             "ties": sum(m == g for m, g in scored),
                             "loses": sum(m < g for m, g in scored)}
    return out
