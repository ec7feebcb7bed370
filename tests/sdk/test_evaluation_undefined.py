"""A run scores a diverged model as undefined (NaN, named) instead of stopping on it."""

import math

import torch
from torch import nn

from pflkit.sdk.data.federation import ClientData
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.evaluation import evaluate_or_undefined, global_scores, summarize
from pflkit.sdk.metrics import predict


def rows(n: int, seed: int) -> LabeledTensors:
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


def test_a_diverged_model_is_undefined_named_and_left_out_of_the_means():
    good, bad = nn.Linear(6, 3), nn.Linear(6, 3)
    with torch.no_grad():
        bad.weight[1, 2] = float("nan")
    clients = [ClientData(cid, rows(20, cid), rows(10, 10 + cid)) for cid in (4, 5)]
    diverged: list[int] = []
    reports = [evaluate_or_undefined(model, client, rows(30, 2), 3, predict, diverged)
               for model, client in zip((good, bad), clients, strict=True)]
    assert diverged == [5]
    assert all(math.isnan(v) for k, v in reports[1].to_dict().items() if k != "client_id")
    summary = summarize(reports)
    assert summary["own_clients"] == 1 and summary["own_top1_mean"] == reports[0].own_top1
    test = rows(30, 2)
    assert global_scores(predict(good, test), test.y)["top1"] == reports[0].global_plain
    undefined = global_scores(predict(bad, test), test.y)
    assert undefined["diverged"] is True and undefined["n"] == 30 and math.isnan(undefined["nll"])
