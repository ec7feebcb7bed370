"""fedrod_hyper on a model whose head has a buffer (a fixed tensor, as docs/extending.md asks).

The hypernetwork generates the head's parameters (eq. 11); the personalized head's buffers are
the generic head's. Training, the zero-shot model and the server's ``head`` query all work.
"""

import torch
from fedrod_harness import ctx, tiny_data
from torch import nn

from pflkit.sdk.algorithms import Choice, LocalTraining, ModelFactory, make_algorithm
from pflkit.sdk.models import SplitModel

COUNTS = [5, 0, 12, 3, 0, 0, 7, 1, 0, 2]


class ScaledHead(nn.Module):
    """A linear head times a fixed temperature (a buffer, not trained)."""

    def __init__(self, width: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, num_classes)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.fc(z) * self.scale


def build(shape, num_classes):
    body = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(shape).prod()), 16), nn.ReLU())
    return SplitModel(body, ScaledHead(16, num_classes), 16)


def _hyper():
    factory = ModelFactory("test_fedrod_head_buffers:build", (1, 8, 8), 10)
    return make_algorithm("fedrod_hyper", factory, LocalTraining(epochs=1, batch_size=20),
                          {"hidden": 4})


def test_a_round_trains_and_keeps_the_head_buffer():
    alg = _hyper()
    data = tiny_data()
    result = alg.training.fit(alg.aggregation.init_global(0), alg.training.init_client(0, 0, data),
                              data, ctx())
    assert float(result.update["head.scale"]) == 2.0
    assert bool(torch.isfinite(torch.as_tensor(result.metrics["train_loss"])))


def test_a_new_client_gets_its_zero_shot_model_and_head():
    alg = _hyper()
    glob = alg.aggregation.init_global(0)
    phi = alg.aggregation.queries()["head"](glob, {"class_distribution": COUNTS})
    assert sorted(phi) == ["fc.bias", "fc.weight"]
    net = alg.inference.generic_and_personalized_model(
        glob, alg.training.init_client(0, 0, tiny_data()), Choice({"class_distribution": COUNTS}))
    assert float(net.phead.scale) == 2.0
    assert torch.equal(net.phead.fc.weight, phi["fc.weight"])
    personalized, generic = net(torch.randn(3, 1, 8, 8))
    assert personalized.shape == generic.shape == (3, 10)
