import math

import pytest
import torch

from pflkit.sdk.models import MODELS, ModelInfo, SplitModel, build_model, check_feature_width
from pflkit.sdk.registry import ExtensionError

SHAPES = {"lenet5": (1, 32, 32), "mobilenet": (3, 32, 32)}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_splits_into_body_and_head(name):
    shape = SHAPES.get(name, (1, 28, 28))
    model = build_model(name, shape, 10, seed=0).eval()
    x = torch.randn(3, *shape)
    features = model.body(x)
    assert features.shape == (3, model.feature_dim)
    assert torch.allclose(model(x), model.head(features))
    names = [n for n, _ in model.named_parameters()]
    assert names and all(n.startswith(("body.", "head.")) for n in names)


def test_seeded_init_is_reproducible_and_seed_dependent():
    a = build_model("twonn", (1, 28, 28), 10, seed=1).state_dict()
    b = build_model("twonn", (1, 28, 28), 10, seed=1).state_dict()
    c = build_model("twonn", (1, 28, 28), 10, seed=2).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_published_sizes():
    lenet = build_model("lenet5", (1, 32, 32), 10)
    assert lenet.feature_dim == 400
    convnet = build_model("fedrod_convnet", (1, 28, 28), 10)
    assert convnet.feature_dim == 50 and convnet.head.weight.shape == (10, 50)


def test_bad_model_requests():
    with pytest.raises(ExtensionError, match="unknown model 'resnet9000'; known: fedrod_convnet"):
        build_model("resnet9000", (1, 28, 28), 10)
    with pytest.raises(ValueError, match="at least 32px"):
        build_model("lenet5", (1, 28, 28), 10)
    with pytest.raises(ValueError, match=r"takes images \(C, H, W\); .* \(12,\)"):
        build_model("twocnn", (12,), 10)
    # operator.mul((12,), 10) is a tuple: a callable that builds something else is refused
    with pytest.raises(ExtensionError, match="'operator:mul' built a tuple, not a SplitModel"):
        build_model("operator:mul", (12,), 10)


def test_twonn_takes_any_input_shape():
    for shape in [(12,), (5, 7), (1, 8, 8)]:
        model = build_model("twonn", shape, 3)
        assert model(torch.randn(2, *shape)).shape == (2, 3)


def _wide(shape, num_classes):
    """A body of 16 features that declares 8 (PFL-MFE's gate would fail after training)."""
    body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(math.prod(shape), 16))
    return SplitModel(body, torch.nn.Linear(16, num_classes), 8)


def _unflattened(shape, num_classes):
    return SplitModel(torch.nn.Conv2d(shape[0], 4, 3), torch.nn.Linear(4, num_classes), 4)


def _data_dependent(shape, num_classes):
    """A body the meta device cannot run (``.item()``): checked by a CPU forward instead."""

    class Body(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(math.prod(shape), 16)

        def forward(self, x):
            return self.fc(x.flatten(1)) * (1.0 + x.abs().max().item())

    return SplitModel(Body(), torch.nn.Linear(16, num_classes), 12)


def _broken(shape, num_classes):
    body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(5, 16))
    return SplitModel(body, torch.nn.Linear(16, num_classes), 16)


@pytest.mark.parametrize(("builder", "message"), [
    (_wide, "its body gives 16 features per input but it declares feature_dim = 8"),
    (_unflattened, r"its body gives features of shape \(4, 6, 6\) per input but it declares "
                   "feature_dim = 4"),
    (_data_dependent, "its body gives 16 features per input but it declares feature_dim = 12"),
    (_broken, r"its body fails on a zero input of shape \(1, 8, 8\) \(RuntimeError: mat1 and "
              r"mat2 shapes cannot be multiplied \(2x64 and 5x16\)\)"),
])
def test_a_body_whose_width_is_not_feature_dim_is_refused_when_built(monkeypatch, builder,
                                                                      message):
    monkeypatch.setitem(MODELS, "custom", ModelInfo(builder, "test"))
    with pytest.raises(ExtensionError, match=f"^model 'custom': {message}$"):
        build_model("custom", (1, 8, 8), 3)


def test_the_width_check_leaves_weights_buffers_and_rng_unchanged():
    model = build_model("mobilenet", (3, 32, 32), 10, seed=0)  # BatchNorm: running statistics
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(5)
    rng = torch.get_rng_state()
    check_feature_width("mobilenet", model, (3, 32, 32))
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
