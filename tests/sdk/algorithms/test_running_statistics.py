"""Forward passes that are no training step of the sent model leave its running statistics alone.

APFL's w is trained as FedAvg (Algorithm 1: w's step sees grad f(w) only), so with batch norm
the w a client sends, statistics included, must be FedAvg's; SCAFFOLD's option-I gradient pass
at x must not move the statistics y_i is sent with (option I and II train the same y_i).
"""

import torch
from torch import nn

from pflkit.sdk.algorithms import (
    ClientState,
    LocalTraining,
    ModelFactory,
    RoundContext,
    make_algorithm,
)
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel

SGD = LocalTraining(epochs=2, batch_size=8, momentum=0.9, weight_decay=1e-4)
CTX = RoundContext(0, 4, 0.05, seed=0, client_id=0)


def batch_norm_net(shape: tuple[int, ...], num_classes: int) -> SplitModel:
    """Conv and FC layers with batch norm and no dropout (training draws no random numbers)."""
    c, h, w = shape
    body = nn.Sequential(nn.Conv2d(c, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * h * w, 16), nn.BatchNorm1d(16), nn.ReLU())
    return SplitModel(body, nn.Linear(16, num_classes), 16)


FACTORY = ModelFactory(f"{__name__}:batch_norm_net", (1, 6, 6), 5)


def client_data(n: int = 21) -> LabeledTensors:
    g = torch.Generator().manual_seed(3)
    return LabeledTensors(torch.randn(n, *FACTORY.input_shape, generator=g),
                          torch.randint(0, 5, (n,), generator=g))


def assert_same_state(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name


def test_apfl_sends_fedavgs_w_with_fedavgs_running_statistics():
    data = client_data()
    fedavg = make_algorithm("fedavg", FACTORY, SGD)
    apfl = make_algorithm("apfl", FACTORY, SGD, {"alpha": 0.4})
    global_state = fedavg.aggregation.init_global(0)
    assert any(k.endswith("running_mean") for k in global_state)
    want = fedavg.training.fit(global_state, ClientState(), data, CTX).update
    result = apfl.training.fit(global_state, apfl.training.init_client(0, 0, data), data, CTX)
    assert_same_state(result.update, want)
    assert result.client_state.meta["alpha"] != 0.4  # the mixed passes did train alpha


def test_scaffold_option_one_gradient_pass_leaves_the_sent_statistics_alone():
    data = client_data()
    options = [make_algorithm("scaffold", FACTORY, SGD, {"option": k}) for k in (1, 2)]
    global_state = options[0].aggregation.init_global(0)
    sent = [algo.training.fit(global_state, ClientState(), data, CTX).update
            for algo in options]
    model = {k: v for k, v in sent[1].items() if not k.startswith("control_delta.")}
    assert_same_state({k: sent[0][k] for k in model}, model)
