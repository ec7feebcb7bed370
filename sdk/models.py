"""Model architectures, each split into a body (feature extractor) and a head (classifier).

Every algorithm addresses parameters by name (``body.*`` / ``head.*``): FedPer keeps
``head.*`` local, LG-FedAvg keeps ``body.*`` local, FedRoD adds a second head, PFL-MoE
fine-tunes a copy of ``head.*``. One template module serves every client; weights live in
dicts and are loaded or passed through ``torch.func.functional_call``.

The model contract (docs/extending.md): a model is named by a built-in name, an import path
``package.module:attr`` or a ``pflkit.models`` entry point, and the named object is a callable
``(input_shape, num_classes) -> SplitModel``; a ``SplitModel`` subclass whose constructor takes
those two arguments is one. ``input_shape`` is one input without the batch dimension, of any
rank: (C, H, W) images, (F,) feature vectors, (T, F) sequences.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torchvision
from torch import nn
from torch.func import functional_call

from pflkit.sdk.registry import ExtensionError, check_call, known_names, resolve_as
from pflkit.sdk.seeding import seeded_torch

Shape = tuple[int, ...]  # one input without the batch dimension
_WIDTH_CHECKED: set[tuple[object, Shape, int]] = set()  # builds whose body width was checked


class SplitModel(nn.Module):
    """``head(body(x))`` with the two halves addressable: logits = head(features)."""

    def __init__(self, body: nn.Module, head: nn.Module, feature_dim: int) -> None:
        super().__init__()
        self.body = body
        self.head = head
        self.feature_dim = feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, num_classes) for inputs (B, *input_shape)."""
        return self.head_logits(x, self.body(x))

    def head_logits(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Logits from the body's features (evaluation reuses features of a shared body)."""
        return self.head(features)


@dataclass(frozen=True)
class ModelInfo:
    """A built-in model: builder and the input it expects."""

    build: Callable[[Shape, int], SplitModel]
    doc: str
    min_size: int | None = None  # images only (C, H, W): smallest H and W; None: any shape


def two_nn(shape: Shape, num_classes: int) -> SplitModel:
    """McMahan et al.'s 2NN: two hidden FC layers of 200 units with ReLU (any input shape)."""
    body = nn.Sequential(
        nn.Flatten(), nn.Linear(math.prod(shape), 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU()
    )
    return SplitModel(body, nn.Linear(200, num_classes), 200)


def two_cnn(shape: Shape, num_classes: int) -> SplitModel:
    """McMahan et al.'s CNN: two 5x5 conv (32, 64, 'same' padding) with 2x2 max pool, FC 512."""
    c, h, w = shape
    body = nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 512), nn.ReLU(),
    )  # fmt: skip
    return SplitModel(body, nn.Linear(512, num_classes), 512)


def lenet5(shape: Shape, num_classes: int) -> SplitModel:
    """LeNet-5 on 32x32 inputs as PFL-MoE splits it: extractor -> 400-d, classifier 120-84-C."""
    c, h, w = shape
    if (h, w) != (32, 32):
        raise ValueError(f"lenet5 expects 32x32 inputs (resize the dataset), got {h}x{w}")
    body = nn.Sequential(
        nn.Conv2d(c, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    )  # fmt: skip
    head = nn.Sequential(
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_classes)
    )
    return SplitModel(body, head, 400)


def fedrod_convnet(shape: Shape, num_classes: int) -> SplitModel:
    """FedRoD's FMNIST ConvNet (App. C): conv 32, conv 64 (5x5, max pool), FC 50 | FC C."""
    c, h, w = shape
    h_out, w_out = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2  # two valid 5x5 conv + pool
    body = nn.Sequential(
        nn.Conv2d(c, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * h_out * w_out, 50), nn.ReLU(),
    )  # fmt: skip
    return SplitModel(body, nn.Linear(50, num_classes), 50)


def mobilenet(shape: Shape, num_classes: int) -> SplitModel:
    """Torchvision MobileNetV3-Small at width 0.5 for edge CPUs; stem adapted to C channels.

    It has BatchNorm: federated averaging averages running statistics like weights.
    """
    c, _, _ = shape
    net = torchvision.models.mobilenet_v3_small(num_classes=num_classes, width_mult=0.5)
    stem = net.features[0][0]
    net.features[0][0] = nn.Conv2d(c, stem.out_channels, 3, stride=2, padding=1, bias=False)
    last = net.classifier[-1]
    body = nn.Sequential(net.features, net.avgpool, nn.Flatten(), *net.classifier[:-1])
    return SplitModel(body, nn.Linear(last.in_features, num_classes), last.in_features)


MODELS: dict[str, ModelInfo] = {
    "twonn": ModelInfo(two_nn, "2 hidden FC layers of 200 (McMahan et al.); any input shape"),
    "twocnn": ModelInfo(two_cnn, "2 conv + FC 512 (McMahan et al.)", min_size=4),
    "lenet5": ModelInfo(lenet5, "LeNet-5, 32x32 inputs (PFL-MoE)", min_size=32),
    "fedrod_convnet": ModelInfo(fedrod_convnet, "2 conv + FC 50 (FedRoD, 28x28)", min_size=16),
    "mobilenet": ModelInfo(mobilenet, "MobileNetV3-Small x0.5 (edge)", min_size=32),
}


def model_builder(ref: str) -> ModelInfo:
    """The builder a model name, import path or entry point resolves to (checked, not called)."""
    expected = "a callable (input_shape, num_classes) -> SplitModel"
    info = resolve_as("model", ref, MODELS, ModelInfo, lambda build: ModelInfo(build, ref),
                      expected)
    if isinstance(info.build, type) and not issubclass(info.build, SplitModel):
        raise ExtensionError(f"model '{ref}' is the class {info.build.__name__}, not a "
                             "SplitModel subclass")
    check_call("model", ref, info.build, expected, (1,), 1)
    return info


def check_input_shape(ref: str, info: ModelInfo, input_shape: Shape) -> None:
    """Refuse inputs a built-in image model cannot take, before building it."""
    if info.min_size is None:
        return
    if len(input_shape) != 3:
        raise ValueError(f"model '{ref}' takes images (C, H, W); the dataset's inputs are "
                         f"{tuple(input_shape)}")
    if min(input_shape[1:]) < info.min_size:
        raise ValueError(f"model '{ref}' needs inputs of at least {info.min_size}px")


def build_model(ref: str, input_shape: Shape, num_classes: int, seed: int = 0) -> SplitModel:
    """Build a model (built-in name, import path or entry point) with seeded initial weights."""
    info = model_builder(ref)
    check_input_shape(ref, info, input_shape)
    with seeded_torch(seed, "model-init", ref):
        model = info.build(tuple(input_shape), num_classes)
    if not isinstance(model, SplitModel):
        raise ExtensionError(f"model '{ref}' built a {type(model).__name__}, not a SplitModel "
                             "(body + head, see docs/extending.md)")
    check_parameters(ref, model)
    checked = (info.build, tuple(input_shape), num_classes)
    if checked not in _WIDTH_CHECKED:  # once per builder and input: a mobilenet check is 130 ms
        check_feature_width(ref, model, input_shape)
        _WIDTH_CHECKED.add(checked)
    return model


def check_parameters(ref: str, model: SplitModel) -> None:
    """Refuse parameters the methods cannot treat alike: frozen ones, or outside body and head.

    Every method trains every parameter it holds and splits them by ``body.`` / ``head.``: a
    frozen parameter (``requires_grad=False``) was left alone by some methods and trained by
    others (SuPerFed, Local-only, the batched executor), a parameter beside the two halves broke
    FedRoD's two-head network after the first round. A fixed tensor is a buffer.
    """
    for name, param in model.named_parameters():
        if not name.startswith(("body.", "head.")):
            raise ExtensionError(f"model '{ref}': parameter '{name}' is outside body and head "
                                 "(every parameter is named body.* or head.*)")
        if not param.requires_grad:
            raise ExtensionError(f"model '{ref}': parameter '{name}' has requires_grad=False "
                                 "(every parameter is trained; register a fixed tensor as a "
                                 "buffer)")


def check_feature_width(ref: str, model: SplitModel, input_shape: Shape) -> None:
    """Refuse a body whose output is not ``(feature_dim,)`` per input, before any training.

    Heads, gates and feature-based methods are sized by ``feature_dim``: a wrong one would
    fail only after training (PFL-MFE's gate). One forward of two zero inputs on the meta
    device computes shapes only; a body the meta device cannot run gets a CPU forward on
    copies of its tensors, so the model's weights, buffers and RNG are left as they were.
    """
    tensors = dict([*model.body.named_parameters(), *model.body.named_buffers()])
    try:
        meta = {k: torch.empty_like(t, device="meta") for k, t in tensors.items()}
        features = functional_call(model.body, meta,
                                   (torch.zeros(2, *input_shape, device="meta"),))
    except (NotImplementedError, RuntimeError):
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                copies = {k: t.detach().clone() for k, t in tensors.items()}
                features = functional_call(model.body, copies, (torch.zeros(2, *input_shape),))
        except Exception as err:  # a user's body: whatever it raises, one line naming it
            raise ExtensionError(f"model '{ref}': its body fails on a zero input of shape "
                                 f"{tuple(input_shape)} ({type(err).__name__}: "
                                 f"{' '.join(str(err).split())})") from err
    if tuple(features.shape[1:]) != (model.feature_dim,):
        raise ExtensionError(f"model '{ref}': its body gives {_width(features)} per input but "
                             f"it declares feature_dim = {model.feature_dim}")


def _width(features: torch.Tensor) -> str:
    shape = tuple(features.shape[1:])
    return f"{shape[0]} features" if len(shape) == 1 else f"features of shape {shape}"


def model_names() -> list[str]:
    """Built-in model names and installed ``pflkit.models`` entry points."""
    return known_names("model", MODELS)


def float_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The module's state_dict (parameters and buffers) as detached tensors."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}
