"""Evaluating a client's model: a diverged one gets a clear error, not a crash in a metric."""

import pytest
import torch
from torch import nn

from pflkit.sdk.data.federation import ClientData
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.evaluation import DivergedModel, evaluate_client


def rows(n: int, seed: int) -> LabeledTensors:
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("own_test", [True, False])
def test_a_model_with_non_finite_outputs_is_named_as_diverged(bad, own_test):
    model = nn.Linear(6, 3)
    client = ClientData(7, rows(20, 0), rows(10 if own_test else 0, 1))
    report = evaluate_client(model, client, rows(30, 2), 3)
    assert 0.0 <= report.global_plain <= 1.0  # a finite model scores
    with torch.no_grad():
        model.weight[1, 2] = bad  # one weight gone bad (a training step that diverged)
    with pytest.raises(DivergedModel, match=r"^client 7: its model's outputs are NaN or Inf"):
        evaluate_client(model, client, rows(30, 2), 3)
