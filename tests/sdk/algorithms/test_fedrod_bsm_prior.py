"""FedRoD's balanced softmax (eq. 6) reads class counts at any scale, and refuses bad ones."""

import pytest
import torch

from pflkit.sdk.algorithms.fedrod import (
    ClassDistributionError,
    balanced_softmax_loss,
    class_proportions,
)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(32, 10, generator=g), torch.randint(0, 10, (32,), generator=g)


def test_proportions_give_the_loss_of_their_counts():
    """Eq. 6 shifts a row's logits by log N_c: scaling every N_c alike changes nothing."""
    logits, y = _batch()
    counts = torch.tensor([5, 2, 12, 3, 1, 1, 7, 1, 4, 2])  # every class seen: labels of all
    by_counts = balanced_softmax_loss(logits, y, counts)
    for scaled in (class_proportions(counts, 10), counts * 0.01, counts * 1e6):
        assert float(balanced_softmax_loss(logits, y, scaled)) == pytest.approx(
            float(by_counts), rel=1e-5)


def test_shares_below_one_keep_their_log():
    """Shares (all below 1) shift the logits by their own log, not by log 1 = 0."""
    logits, y = _batch()
    shares = torch.tensor([0.55] + [0.05] * 9)
    expected = torch.nn.functional.cross_entropy(logits + shares.log(), y)
    assert float(balanced_softmax_loss(logits, y, shares)) == pytest.approx(float(expected),
                                                                             rel=1e-5)


@pytest.mark.parametrize("counts", [[-1.0] + [1.0] * 9, [float("nan")] + [1.0] * 9,
                                    [float("inf")] + [1.0] * 9])
def test_negative_or_non_finite_counts_are_refused(counts):
    logits, y = _batch()
    with pytest.raises(ClassDistributionError, match="finite and >= 0"):
        balanced_softmax_loss(logits, y, torch.tensor(counts))
