"""Evaluation metrics as pure functions of logits and labels.

ECE/MCE use 15 equal-width confidence bins over the WHOLE test set (not averaged per
mini-batch): ECE = sum_b |acc_b - conf_b| n_b / n, MCE = max_b |acc_b - conf_b| over
non-empty bins. The class-weighted accuracy is the FedRoD / PFL-MoE protocol for evaluating a
client's personalized model on the global test set:
sum_i P_m(y_i) 1[y_i = yhat_i] / sum_i P_m(y_i).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.data.tensors import LabeledTensors

NUM_BINS = 15
PREDICT_BATCH = 1000  # rows per forward pass when scoring a data set


def top_k_accuracy(logits: torch.Tensor, y: torch.Tensor, k: int = 1) -> float:
    """Share of rows whose label is among the k largest logits."""
    k = min(k, logits.shape[1])
    hits = (logits.topk(k, dim=1).indices == y[:, None]).any(dim=1)
    return float(hits.float().mean()) if len(y) else float("nan")


def nll(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Mean negative log-likelihood (cross-entropy) in nats."""
    return float(F.cross_entropy(logits.double(), y)) if len(y) else float("nan")


def calibration_errors(
    logits: torch.Tensor, y: torch.Tensor, num_bins: int = NUM_BINS
) -> tuple[float, float]:
    """(ECE, MCE) of max-softmax confidence with ``num_bins`` equal-width bins on (0, 1].

    Undefined (NaN) without rows or when a row's confidence is (a diverged model's NaN logits).
    """
    if not len(y):  # before the max: a model of no rows may give logits of no columns
        return float("nan"), float("nan")
    conf, pred = logits.double().softmax(dim=1).max(dim=1)
    if not bool(torch.isfinite(conf).all()):
        return float("nan"), float("nan")
    correct = (pred == y).double()
    # Bin b holds confidences in (b/B, (b+1)/B]; ceil maps exactly b/B to bin b-1.
    bins = (torch.ceil(conf * num_bins) - 1).clamp(0, num_bins - 1).long()
    count = torch.bincount(bins, minlength=num_bins).double()
    acc_sum = torch.bincount(bins, weights=correct, minlength=num_bins)
    conf_sum = torch.bincount(bins, weights=conf, minlength=num_bins)
    filled = count > 0
    gap = (acc_sum[filled] - conf_sum[filled]).abs() / count[filled]
    ece = float((gap * count[filled]).sum() / len(y))
    return ece, float(gap.max())


def class_weighted_accuracy(
    pred: torch.Tensor, y: torch.Tensor, class_distribution: torch.Tensor
) -> float:
    """Accuracy on a global test set re-weighted by one client's class distribution."""
    p = class_distribution.double() / class_distribution.double().sum()
    w = p[y]
    if float(w.sum()) == 0.0:
        return float("nan")
    return float((w * (pred == y).double()).sum() / w.sum())


@dataclass(frozen=True)
class Scores:
    """A model's scores on one labelled set."""

    top1: float
    top5: float
    nll: float
    ece: float
    mce: float
    n: int

    def to_dict(self) -> dict[str, float]:
        """Plain dict for JSON lines."""
        return asdict(self)


def scores_from_logits(logits: torch.Tensor, y: torch.Tensor) -> Scores:
    """All standard metrics from one (N, C) logits tensor."""
    ece, mce = calibration_errors(logits, y)
    return Scores(top_k_accuracy(logits, y, 1), top_k_accuracy(logits, y, 5), nll(logits, y),
                  ece, mce, len(y))


@torch.no_grad()
def predict(model: nn.Module, data: LabeledTensors, batch_size: int = PREDICT_BATCH
            ) -> torch.Tensor:
    """Logits (N, C) of ``model`` in eval mode over ``data``."""
    was_training = model.training
    model.eval()
    try:
        chunks = [model(data.x[i : i + batch_size]) for i in range(0, len(data), batch_size)]
    finally:
        model.train(was_training)
    if not chunks:
        return torch.empty(0, 0)
    return torch.cat(chunks)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population std across clients, ignoring NaN (clients with no test rows)."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return float("nan"), float("nan")
    t = torch.tensor(finite, dtype=torch.float64)
    return float(t.mean()), float(t.std(unbiased=False))
