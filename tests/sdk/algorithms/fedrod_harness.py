"""Helpers of the FedRoD tests: a tiny four-class client, its context, a variant on TwoNN."""

import torch

from pflkit.sdk.algorithms import LocalTraining, ModelFactory, RoundContext, make_algorithm
from pflkit.sdk.data.tensors import LabeledTensors

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)


def tiny_data(n=60, seed=0, classes=(0, 1, 2, 3)):
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor(classes)[torch.randint(0, len(classes), (n,), generator=g)]
    return LabeledTensors(torch.randn(n, 1, 8, 8, generator=g), labels)


def ctx(round_index=0, lr=0.05, client=0):
    return RoundContext(round_index, 10, lr, seed=0, client_id=client)


def algo(name, factory=FACTORY, **params):
    return make_algorithm(name, factory, LocalTraining(epochs=1, batch_size=20), params)
