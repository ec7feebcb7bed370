"""A user's model (docs/extending.md, "any SplitModel") trains batched as it trains one by one.

Models unlike the built-in ones: a body layer the forward never uses, a frozen parameter, a
parameter beside body and head, layers that draw random numbers or keep running statistics.
"""

import math
import re

import pytest
import torch
from test_batched_training import assert_same_results, client_data
from torch import nn

from pflkit.sdk.algorithms import FitJob, LocalTraining, ModelFactory, RoundContext, make_algorithm
from pflkit.sdk.algorithms.base import algorithm_names
from pflkit.sdk.models import MODELS, ModelInfo, SplitModel, build_model
from pflkit.sdk.registry import ExtensionError

SHAPE = (1, 8, 8)


class SpareBody(nn.Module):
    """A body with a layer its forward never uses (left over from an experiment, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(math.prod(SHAPE), 16)
        self.spare = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x.flatten(1)))


def spare_layer(shape, num_classes):
    return SplitModel(SpareBody(), nn.Linear(16, num_classes), 16)


def instance_norm(shape, num_classes):
    """InstanceNorm with running statistics: each row is normalized alone, the stats mix rows."""
    body = nn.Sequential(nn.Conv2d(shape[0], 4, 3, padding=1),
                         nn.InstanceNorm2d(4, track_running_stats=True), nn.Flatten(),
                         nn.Linear(4 * shape[1] * shape[2], 16), nn.ReLU())
    return SplitModel(body, nn.Linear(16, num_classes), 16)


def rrelu(shape, num_classes):
    body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 16), nn.RReLU())
    return SplitModel(body, nn.Linear(16, num_classes), 16)


def frozen_layer(shape, num_classes):
    body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 16), nn.ReLU())
    body[1].weight.requires_grad_(False)  # a "pretrained" extractor held fixed
    return SplitModel(body, nn.Linear(16, num_classes), 16)


class Scaled(SplitModel):
    """A learned temperature beside body and head."""

    def __init__(self, shape, num_classes) -> None:
        super().__init__(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 16)),
                         nn.Linear(16, num_classes), 16)
        self.temperature = nn.Parameter(torch.ones(()))

    def head_logits(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return self.head(features) / self.temperature


def one_round(monkeypatch, builder, name, params=None):
    """(batched, sequential) results of one round of three clients of 1, 9 and 17 rows."""
    monkeypatch.setitem(MODELS, "custom", ModelInfo(builder, "test"))
    algorithm = make_algorithm(name, ModelFactory("custom", SHAPE, 10),
                               LocalTraining(epochs=2, batch_size=8), params or {})
    glob = algorithm.aggregation.init_global(0)
    datas = [client_data(n, k) for k, n in enumerate((1, 9, 17))]
    jobs = [FitJob(algorithm.training.init_client(k, 0, d), d, RoundContext(0, 10, 0.05, 0, k))
            for k, d in enumerate(datas)]
    sequential = [algorithm.training.fit(glob, j.client_state, j.data, j.ctx) for j in jobs]
    return algorithm, algorithm.training.fit_batch(glob, jobs), sequential, glob


@pytest.mark.parametrize("name", ["fedavg", "fedrep", "lg_fedavg", "local", "pfedme"])
def test_a_body_layer_the_forward_never_uses_trains_batched_as_one_by_one(monkeypatch, name):
    """It crashed the batched step (autograd.grad of an unused tensor) and pFedMe's fit."""
    algorithm, batched, sequential, glob = one_round(monkeypatch, spare_layer, name)
    assert algorithm.training.batching_blocker() is None
    assert_same_results(batched, sequential)
    if name == "fedavg":  # no gradient: torch's SGD leaves it as it was, weight decay too
        assert all(torch.equal(r.update["body.spare.weight"], glob["body.spare.weight"])
                   for r in batched)


def test_layers_with_running_statistics_or_random_draws_train_one_by_one(monkeypatch):
    """InstanceNorm's running statistics crashed the vmapped step; RReLU drew inside vmap."""
    algorithm, batched, sequential, _ = one_round(monkeypatch, instance_norm, "fedavg")
    assert "'body.1' (InstanceNorm2d) depends on the whole batch" in \
        algorithm.training.batching_blocker()
    assert_same_results(batched, sequential)
    monkeypatch.setitem(MODELS, "custom", ModelInfo(rrelu, "test"))
    algorithm = make_algorithm("fedavg", ModelFactory("custom", SHAPE, 10), LocalTraining())
    assert "'body.2' (RReLU) depends on the whole batch or on random draws" in \
        algorithm.training.batching_blocker()


@pytest.mark.parametrize(("builder", "message"), [
    (frozen_layer, "parameter 'body.1.weight' has requires_grad=False (every parameter is "
                   "trained; register a fixed tensor as a buffer)"),
    (Scaled, "parameter 'temperature' is outside body and head (every parameter is named "
             "body.* or head.*)"),
])
def test_a_model_whose_parameters_methods_would_treat_apart_is_refused_when_built(
        monkeypatch, builder, message):
    """A frozen weight was trained batched (and by SuPerFed) but not sequentially; FedRoD
    failed on a parameter beside body and head with torch's load_state_dict error."""
    monkeypatch.setitem(MODELS, "custom", ModelInfo(builder, "test"))
    with pytest.raises(ExtensionError, match=re.escape(f"model 'custom': {message}")):
        build_model("custom", SHAPE, 3)


@pytest.mark.parametrize(("name", "params"), [
    *((n, {}) for n in algorithm_names()), ("scaffold", {"option": 1})])
def test_every_method_trains_a_model_with_a_body_layer_the_forward_never_uses(
        monkeypatch, name, params):
    """SCAFFOLD's option I gradient pass left the unused tensor out: KeyError in c_i+."""
    one_round(monkeypatch, spare_layer, name, params)
