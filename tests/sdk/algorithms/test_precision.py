"""``precision = "bf16"`` reaches every method's training, including loops of its own.

APFL and pFedMe once trained in fp32 under bf16 (their loops skipped run_epochs' autocast), so
their bf16 runs were bit-identical to fp32 ones, and so did the post-federation stages that
train a program (PFL-MoE, SuPerFed with ft_epochs); the registry is the list, so a new method
with a loop of its own is checked too.
"""

from __future__ import annotations

import pytest
import torch
from baselines_harness import algo, ctx, tiny_data

from pflkit.sdk.algorithms import ALGORITHMS, Algorithm, ClientState, FitResult
from pflkit.sdk.training import autocast_training


def bf16_autocast_on_cpu() -> bool:
    """Whether a matrix product under CPU autocast really runs in bf16 (this torch, this CPU)."""
    if not torch.amp.is_autocast_available("cpu"):
        return False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.bfloat16


BF16 = pytest.mark.skipif(not bf16_autocast_on_cpu(), reason="this CPU or torch has no bf16 "
                                                              "autocast")


def fit(name: str, dtype: torch.dtype | None) -> FitResult:
    """One fit of ``name`` on the tiny client, under autocast to ``dtype`` (None: fp32)."""
    method, data = algo(name), tiny_data()
    start = method.training.init_client(0, 0, data)
    with autocast_training(dtype):
        return method.training.fit(method.aggregation.init_global(seed=0), start, data, ctx())


def staged(name: str) -> Algorithm:
    """``name`` with a post-federation stage that trains (one epoch where it is a setting)."""
    method = algo(name)
    return algo(name, ft_epochs=1) if hasattr(method.params, "ft_epochs") else method


def personalize(name: str, dtype: torch.dtype | None) -> ClientState:
    """The post-federation stage of ``name`` after one fp32 fit, under ``dtype``'s autocast."""
    method, data = staged(name), tiny_data()
    start = method.aggregation.init_global(seed=0)
    kept = method.training.fit(start, method.training.init_client(0, 0, data), data,
                               ctx()).client_state
    with autocast_training(dtype):
        return method.personalization.personalize(start, kept, data, ctx())


def tensors(result: FitResult) -> dict[str, torch.Tensor]:
    """What a fit produced: the update and what stays on the device (local sends nothing)."""
    return {**result.update, **{"kept." + k: v for k, v in result.client_state.tensors.items()}}


@BF16
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_bf16_fit_differs_from_the_fp32_fit_for_every_method(name: str) -> None:
    fp32, bf16 = tensors(fit(name, None)), tensors(fit(name, torch.bfloat16))
    assert fp32.keys() == bf16.keys()
    assert any(not torch.equal(fp32[k], bf16[k]) for k in fp32), f"{name} ignored bf16"
    assert all(torch.isfinite(v).all() for v in bf16.values() if v.is_floating_point())


STAGED = [n for n in sorted(ALGORITHMS) if staged(n).personalization.has_stage]


@BF16
@pytest.mark.parametrize("name", STAGED)
def test_a_bf16_post_federation_stage_differs_from_the_fp32_one(name: str) -> None:
    fp32, bf16 = personalize(name, None).tensors, personalize(name, torch.bfloat16).tensors
    assert fp32.keys() == bf16.keys()
    assert any(not torch.equal(fp32[k], bf16[k]) for k in fp32), f"{name}'s stage ignored bf16"
