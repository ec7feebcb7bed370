import pytest
import torch

from pflkit.sdk.models import MODELS, build_model
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
