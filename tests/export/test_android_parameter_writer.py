"""The app writes personal weights into a training program through ExecuTorch's SGD.

The Android ``TrainingModule`` has no public setter for parameters, so the app's
``ParameterWriter`` (android-demo/core) steps an SGD with lr 1 on the gradient ``p - target``
until the parameters equal the target. That relies on the runtime computing ``p + (-1) g`` in
float32 like Java does; this test checks it on the real ExecuTorch training runtime.
"""

from __future__ import annotations

import torch
from torch import nn


class _Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.linear(x)
        return nn.functional.cross_entropy(logits, y), logits.detach()


def _training_module() -> object:
    from executorch.exir import to_edge
    from executorch.extension.training import _load_for_executorch_for_training_from_buffer
    from torch.export.experimental import _export_forward_backward

    example = (torch.randn(2, 4), torch.tensor([0, 2]))
    joint = _export_forward_backward(torch.export.export(_Head(), example))
    module = _load_for_executorch_for_training_from_buffer(to_edge(joint).to_executorch().buffer)
    module.forward_backward("forward", example)  # named_parameters exist after a first call
    return module


def test_sgd_with_lr_one_writes_exact_values_in_the_executorch_runtime() -> None:
    from executorch.extension.training import get_sgd_optimizer

    module = _training_module()
    params = module.named_parameters()
    gen = torch.Generator().manual_seed(0)
    targets = {n: torch.randn(p.shape, generator=gen) * 10.0 ** torch.randint(
        -20, 20, p.shape, generator=gen) for n, p in params.items()}
    sgd = get_sgd_optimizer(params, 1.0, 0.0, 0.0, 0.0, False)
    steps = 0
    while any(not torch.equal(params[n], t) for n, t in targets.items()):
        assert steps < 4, "not exact after 4 steps"
        # the same float32 arithmetic as ParameterWriter.gradientToward
        sgd.step({n: params[n] - t for n, t in targets.items()})
        steps += 1
    assert 1 <= steps <= 2
    for name, target in targets.items():
        assert torch.equal(module.named_parameters()[name], target)
