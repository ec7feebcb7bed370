"""Scoring models on a GPU: a model's weights reach the host once, and any model can be hashed.

A client's model is scored on its own test rows and on the global test set; each call hashed
the model again, copying every tensor to the host one by one (a wait on the device per tensor).
"""

import torch
from fake_cuda import FakeCuda, on_device
from torch import nn

from pflkit.sdk.data.federation import ClientData
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.evaluation import evaluate_client
from pflkit.sdk.metrics import predict
from pflkit.sdk.models import build_model
from pflkit.sdk.scoring import ScoringCache

CLASSES = 10


def rows(count: int, seed: int, shape: tuple[int, ...] = (1, 8, 8)) -> LabeledTensors:
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(count, *shape, generator=g),
                          torch.randint(0, CLASSES, (count,), generator=g))


def test_a_model_with_batchnorm_is_scored_as_predict_scores_it():
    """MobileNet's BatchNorm step counts are 0-dim int64: ``view(uint8)`` refused them, so a
    run of the built-in ``mobilenet`` failed at its first evaluation."""
    model = build_model("mobilenet", (3, 32, 32), CLASSES, seed=0).eval()
    data = rows(4, 0, (3, 32, 32))
    assert torch.equal(ScoringCache().predict(model, data), predict(model, data))


def test_a_model_scored_on_two_data_sets_on_the_gpu_is_hashed_once_in_one_copy():
    model = build_model("twonn", (1, 8, 8), CLASSES, seed=0)
    client = ClientData(0, rows(30, 1), rows(12, 2))
    global_test = rows(40, 3)
    want = evaluate_client(model, client, global_test, CLASSES)
    with FakeCuda() as fake:
        on_gpu = ClientData(0, *(LabeledTensors(d.x.to("cuda"), d.y.to("cuda"))
                                 for d in (client.train, client.test)))
        test_on_gpu = LabeledTensors(global_test.x.to("cuda"), global_test.y.to("cuda"))
        model.to("cuda")
        assert on_device(model.head.weight)
        cache = ScoringCache()
        got = evaluate_client(model, on_gpu, test_on_gpu, CLASSES, cache.predict)
    assert got == want
    assert cache.models_run == 2 and cache.models_hashed == 2  # the model and its body
    assert len([d for d in fake.downloads if "pflkit.sdk.scoring" in d]) == 2, fake.downloads


def test_a_model_changed_after_scoring_is_hashed_again():
    """Taken once per module object, the hash still follows every change to its weights."""
    model, data = build_model("twonn", (1, 8, 8), CLASSES, seed=0).eval(), rows(16, 4)
    cache = ScoringCache()
    cache.predict(model, data)
    with torch.no_grad():
        model.head.bias[0] += 1.0  # in place: a new version of the same tensor
    assert torch.equal(cache.predict(model, data), predict(model, data))
    model.head.bias = nn.Parameter(torch.zeros(CLASSES))  # replaced
    zeros = cache.predict(model, data)
    assert torch.equal(zeros, predict(model, data))
    model.head.bias = nn.Parameter(torch.zeros(CLASSES))  # replaced by the same values
    assert cache.predict(model, data) is zeros and cache.predict(model, data) is zeros
    # the model at each of its 4 states, its body (never changed) once
    assert (cache.models_run, cache.models_hashed) == (3, 5)
