"""The train method avoids the slow portable kernels (export/portable_kernels.py).

Portable ``convolution`` / ``convolution_backward`` and ``addmm`` are scalar loops (the SuPerFed
TwoCNN program ran 0.2-0.7 steps/s on FMNIST-sized inputs); ``mm`` is the optimized kernel. The
speed itself is measured by hand (docs/on-device.md); here: the graph holds only ``mm``, and the
rewritten convolution computes what ``nn.Conv2d`` computes, gradients included.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pflkit.export.portable_kernels import Conv2dAsMatmul, convolutions_as_matmul


@pytest.mark.parametrize(("channels", "kernel", "stride", "padding", "dilation", "bias"), [
    ((1, 32), 5, 1, 2, 1, True),  # TwoCNN's first layer ('same' padding by numbers)
    ((3, 8), 3, 2, 1, 1, False),
    ((4, 6), (3, 2), (1, 2), (0, 1), (2, 1), True),
])
def test_a_convolution_as_matmul_equals_nn_conv2d_with_gradients(channels, kernel, stride,
                                                                  padding, dilation, bias):
    torch.manual_seed(0)
    conv = nn.Conv2d(*channels, kernel, stride, padding, dilation, bias=bias)
    as_mm = convolutions_as_matmul(nn.Sequential(nn.Conv2d(*channels, kernel, stride, padding,
                                                           dilation, bias=bias)))[0]
    as_mm.load_state_dict(conv.state_dict())
    assert type(as_mm) is Conv2dAsMatmul
    x = torch.randn(3, channels[0], 13, 11)
    grads = []
    for module in (conv, as_mm):
        module.zero_grad()
        out = module(x)
        (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
        grads.append((out, *(p.grad for p in module.parameters())))
    for ref, got in zip(*grads, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_only_plain_convolutions_are_rewritten_and_names_stay():
    net = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, groups=2),
                        nn.Conv2d(4, 4, 3, padding="same"), nn.Linear(4, 2))
    names = list(net.state_dict())
    convolutions_as_matmul(net)
    assert [type(m).__name__ for m in net] == ["Conv2dAsMatmul", "Conv2d", "Conv2d", "Linear"]
    assert list(net.state_dict()) == names


def test_the_superfed_twocnn_train_graph_has_no_slow_kernels_and_a_dynamic_batch():
    from pflkit.export.training_program import (
        TrainerExport,
        device_stage,
        train_graph,
        training_section,
    )
    from pflkit.sdk.algorithms import LocalTraining, ModelFactory, RoundContext, make_algorithm
    from pflkit.sdk.data.datasets import load_dataset

    data = load_dataset("digits", seed=0).train.subset(torch.arange(64))
    algo = make_algorithm("superfed_mm", ModelFactory("twocnn", (1, 8, 8), 10),
                          LocalTraining(1, 16, 0.9, 1e-4), {"ft_epochs": 1})
    part = device_stage(algo, algo.aggregation.init_global(0),
                        algo.training.init_client(3, 0, data), data, RoundContext(2, 2, 0.05, 0, 3))
    trainer = TrainerExport(part, training_section(part, (1, 8, 8), data.x[:1]), (1, 8, 8))
    graph = train_graph(trainer, data.x[:32], data.y[:32])
    ops = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    slow = {op for op in ops if "convolution" in op or "addmm" in op}
    assert not slow and "aten.mm.default" in ops
    image = next(n for n in graph.graph.nodes if n.name == "image")
    assert not isinstance(image.meta["val"].shape[0], int)  # the batch stays dynamic
