"""Convolutions as patch GEMMs (sdk/conv_gemm.py): the same convolution, forward and backward."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from pflkit.sdk.conv_gemm import conv2d_gemm, gemm_convolutions, rewritten
from pflkit.sdk.models import two_cnn


@pytest.mark.parametrize("stride, padding", [(1, 0), (1, 2), (2, 1), ((1, 2), (0, 1)),
                                             (1, "valid")])
def test_a_gemm_convolution_equals_conv2d_with_its_gradients(stride, padding):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 11, 13, requires_grad=True)
    weight = torch.randn(6, 4, 3, 5, requires_grad=True)
    bias = torch.randn(6, requires_grad=True)
    expected = F.conv2d(x, weight, bias, stride, padding)
    got = conv2d_gemm(x, weight, bias, stride, padding)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for a, b in zip(torch.autograd.grad(expected.square().sum(), [x, weight, bias]),
                    torch.autograd.grad(got.square().sum(), [x, weight, bias]), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kwargs", [{"groups": 2}, {"dilation": 2}, {"padding": "same"}])
def test_what_a_gemm_does_not_cover_is_left_to_conv2d(kwargs):
    x, weight = torch.randn(1, 4, 9, 9), torch.randn(4, 4 // kwargs.get("groups", 1), 3, 3)
    assert conv2d_gemm(x, weight, **kwargs) is None
    with gemm_convolutions(True), rewritten():
        torch.testing.assert_close(F.conv2d(x, weight, **kwargs), F.conv2d(x, weight, **kwargs))


def test_vmapped_clients_get_the_same_losses_and_gradients():
    """The batched step's shape: K clients' own weights and rows through a vmapped loss."""
    torch.manual_seed(1)
    model = two_cnn((1, 28, 28), 10)
    params = {n: (p.detach() + 0.01 * torch.randn(3, *p.shape)).requires_grad_()
              for n, p in model.named_parameters()}
    x, y = torch.randn(3, 5, 1, 28, 28), torch.randint(0, 10, (3, 5))
    losses = vmap(lambda p, xb, yb: F.cross_entropy(functional_call(model, p, (xb,)), yb))
    runs = []
    for enabled in (False, True):
        with gemm_convolutions(enabled), rewritten():
            loss = losses(params, x, y)
        runs.append([loss, *torch.autograd.grad(loss.sum(), list(params.values()))])
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
