"""Folding a batched round's updates as (K, ...) stacks gives what folding them one by one gives.

The stacked fold exists for speed (issue 22: 1000 clients a round); it must not change a result,
not even a float64 rounding: a WeightedMean fed stacks equals one fed rows, bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.aggregation_rules import AggregatorFactory
from pflkit.sdk.algorithms import aggregators
from pflkit.sdk.algorithms.base import WeightedMean
from pflkit.sdk.run_config import Schedule

K = 257  # enough rows that a stack-wide sum() rounds differently from the running sum


def round_updates(seed: int = 0) -> tuple[dict[str, torch.Tensor], list[float], dict]:
    """A global state, K weights (some zero) and K updates as stacks of mixed magnitudes."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-6, 6, K).view(-1, 1, 1)
    # float64 weights: the mean keeps every bit of the float64 sums (float32 would round them)
    stacks = {"w": torch.randn(K, 30, 7, generator=gen, dtype=torch.float64) * scale,
              "b": torch.randn(K, 7, generator=gen),
              "count": torch.randint(0, 100, (K,), generator=gen)}  # an integer buffer
    weights = [float(w) for w in torch.randint(0, 60, (K,), generator=gen)]
    global_state = {n: torch.zeros_like(s[0]) for n, s in stacks.items()}
    return global_state, weights, stacks


def fold_rows(aggregator, weights, stacks):
    for k, weight in enumerate(weights):
        aggregator.add(weight, {n: s[k] for n, s in stacks.items()})
    return aggregator.result()


@pytest.mark.parametrize("fold_elements", [aggregators.FOLD_ELEMENTS, 1000])
def test_a_stacked_weighted_mean_equals_the_row_by_row_fold_bit_for_bit(monkeypatch,
                                                                        fold_elements):
    global_state, weights, stacks = round_updates()
    expected = fold_rows(WeightedMean(global_state), weights, stacks)
    monkeypatch.setattr(aggregators, "FOLD_ELEMENTS", fold_elements)  # 1000: many sums a name
    stacked = WeightedMean(global_state)
    stacked.add(weights[0], {n: s[0] for n, s in stacks.items()})  # rows and stacks mix
    stacked.add_stacked(weights[1:], {n: s[1:] for n, s in stacks.items()})
    out = stacked.result()
    for name in global_state:
        assert torch.equal(out[name], expected[name]), name
        assert out[name].dtype == global_state[name].dtype
    wide = (stacks["w"].double() * torch.tensor(weights, dtype=torch.float64).view(-1, 1, 1))
    assert not torch.equal(wide.sum(0), wide.cumsum(0)[-1]), \
        "this data no longer tells a stack-wide sum from the running sum"


@pytest.mark.parametrize("rules", [AggregationConfig(clip_norm=0.5),
                                   AggregationConfig("median"),
                                   AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=1.0)])
def test_other_rules_fold_a_stack_row_by_row(tmp_path, rules):
    global_state, weights, stacks = round_updates(seed=1)
    stacks.pop("count")
    global_state.pop("count")

    def build():
        factory = AggregatorFactory(lambda s, _: WeightedMean(s), rules, tmp_path,
                                    Schedule(1), seed=3)
        return factory(global_state, 2 * K, 0)

    expected = fold_rows(build(), weights, stacks)
    stacked = build()
    stacked.add_stacked(weights, stacks)
    out = stacked.result()
    assert all(torch.equal(out[n], expected[n]) for n in global_state)


def test_a_negative_weight_in_a_stack_is_refused():
    global_state, weights, stacks = round_updates()
    weights[5] = -1.0
    with pytest.raises(ValueError, match="must be >= 0, got -1.0"):
        WeightedMean(global_state).add_stacked(weights, stacks)


def test_a_stacked_fold_writes_each_term_once_and_adds_each_row_once():
    """The fold's work: a float64 term per element and one running-sum add per row (~2 writes
    per stacked element); a cumulative sum over the stack wrote ~4 (a float64 copy, its
    product, the concatenation with the running sum, every partial sum) and cost 1000 ConvNet
    clients ~4 s a round on the CPU (issue 22)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Written(TorchDispatchMode):
        elements = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view:
                self.elements += sum(t.numel() for t in torch.utils._pytree.tree_leaves(out)
                                     if isinstance(t, torch.Tensor))
            return out

    global_state, weights, stacks = round_updates()
    aggregator = WeightedMean(global_state)
    aggregator.add(weights[0], {n: s[0] for n, s in stacks.items()})  # a running sum exists
    with Written() as written:
        aggregator.add_stacked(weights, stacks)
    stacked = sum(s.numel() for s in stacks.values())
    assert written.elements <= 2.1 * stacked, written.elements / stacked
