import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pflkit.sdk.metrics import (
    calibration_errors,
    class_weighted_accuracy,
    mean_std,
    nll,
    scores_from_logits,
    top_k_accuracy,
)


def logits_from_probs(p):
    return torch.log(torch.tensor(p, dtype=torch.float64))


def test_top1_and_top5_by_hand():
    logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    y = torch.tensor([1, 1, 2, 2])
    assert top_k_accuracy(logits, y, 1) == pytest.approx(0.5)
    assert top_k_accuracy(logits, y, 2) == pytest.approx(0.75)
    assert top_k_accuracy(logits, y, 5) == pytest.approx(1.0)  # k capped at the class count


def test_nll_by_hand():
    logits = logits_from_probs([[0.5, 0.5], [0.25, 0.75]])
    assert nll(logits, torch.tensor([0, 1])) == pytest.approx(-(math.log(0.5) + math.log(0.75)) / 2)


def test_ece_and_mce_by_hand_with_15_bins():
    # Confidences 0.9 (bin 13), 0.9, 0.6 (bin 8), 0.55 (bin 8); correctness 1, 0, 1, 1.
    probs = [[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.45, 0.55]]
    y = torch.tensor([0, 1, 0, 1])
    ece, mce = calibration_errors(logits_from_probs(probs), y)
    gap_hi = abs(0.5 - 0.9)  # bin with 0.9, 0.9: accuracy 1/2
    gap_mid = abs(1.0 - (0.6 + 0.55) / 2)  # bin with 0.6 and 0.55: accuracy 1
    assert ece == pytest.approx((2 * gap_hi + 2 * gap_mid) / 4)
    assert mce == pytest.approx(max(gap_hi, gap_mid))


def test_ece_is_zero_for_perfect_calibration():
    # 10 rows at confidence 0.7 (bin 10), 7 of them right.
    probs = [[0.7, 0.3]] * 10
    y = torch.tensor([0] * 7 + [1] * 3)
    ece, mce = calibration_errors(logits_from_probs(probs), y)
    assert ece == pytest.approx(0.0, abs=1e-12) and mce == pytest.approx(0.0, abs=1e-12)


def test_no_rows_are_undefined_errors_whatever_the_logits_shape():
    """No rows: NaN, as documented, even for logits of no columns (max over them crashed)."""
    for logits in (torch.zeros(0, 10), torch.zeros(0, 0)):
        ece, mce = calibration_errors(logits, torch.zeros(0, dtype=torch.long))
        assert math.isnan(ece) and math.isnan(mce)


def test_a_diverged_models_logits_are_scored_not_a_crash():
    """NaN logits (a stage that diverged) made bincount fail on the NaN confidence's bin."""
    logits = torch.tensor([[float("nan"), 0.0], [0.3, 0.1]])
    scores = scores_from_logits(logits, torch.tensor([0, 0]))
    assert math.isnan(scores.ece) and math.isnan(scores.mce) and math.isnan(scores.nll)


def test_class_weighted_accuracy_matches_the_fedrod_formula():
    y = torch.tensor([0, 0, 1, 1, 2])
    pred = torch.tensor([0, 1, 1, 1, 0])
    counts = torch.tensor([30, 10, 0])
    p = np.array([0.75, 0.25, 0.0])
    expected = sum(p[t] * (t == q) for t, q in zip(y.tolist(), pred.tolist(), strict=True)) / sum(
        p[t] for t in y.tolist()
    )
    assert class_weighted_accuracy(pred, y, counts) == pytest.approx(expected)


def test_mean_std_across_clients_ignores_nan():
    assert mean_std([0.5, float("nan"), 1.0]) == pytest.approx((0.75, 0.25))


def test_scores_bundle():
    s = scores_from_logits(torch.tensor([[2.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0]))
    assert s.top1 == 0.5 and s.n == 2 and 0 <= s.ece <= 1


def test_ece_bins_are_closed_on_the_right_as_docs_simulator_md_says():
    """Guo et al.'s (lo, hi] bins: an edge goes to the bin below it, a confidence of 1.0 to
    the last bin ([lo, hi) bins would put both rows below into the upper bin: ECE 0.25)."""
    logits = torch.tensor([[0.0, 0.0], [0.0, -math.inf]])  # confidences exactly 0.5 and 1.0
    y = torch.tensor([0, 1])  # the first right, the second wrong
    ece, mce = calibration_errors(logits, y, num_bins=2)  # edges 0, 0.5, 1
    assert ece == (0.5 + 1.0) / 2 and mce == 1.0
    doc = (Path(__file__).parents[2] / "docs" / "simulator.md").read_text()
    assert "bin b holds confidences in (b/15, (b+1)/15], closed on the right" in doc
