"""Helpers of the baseline tests: a tiny skewed client, its context, a method on TwoNN."""

import torch

from pflkit.sdk.algorithms import LocalTraining, ModelFactory, RoundContext, make_algorithm
from pflkit.sdk.data.tensors import LabeledTensors

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)
LOCAL = LocalTraining(epochs=2, batch_size=16, momentum=0.9, weight_decay=1e-4)


def tiny_data(n=64, seed=0):
    """Two classes only: a skewed client, so personal parts have something to learn."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) + y[:, None, None, None].float()
    return LabeledTensors(x, y)


def ctx(round_index=0, lr=0.05, client=0):
    return RoundContext(round_index, 10, lr, seed=0, client_id=client)


def algo(name, local=LOCAL, **params):
    return make_algorithm(name, FACTORY, local, params)


def distance(a, b, keys):
    return float(sum(((a[k] - b[k]) ** 2).sum() for k in keys)) ** 0.5


def model_out(module, x):
    with torch.no_grad():
        return module.eval()(x)
