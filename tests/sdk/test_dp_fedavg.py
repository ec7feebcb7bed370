"""DP-FedAvg's aggregation: clipping bounds each device, the noise has std z * C / m."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.aggregation_rules import AggregatorFactory
from pflkit.sdk.algorithms.base import WeightedMean
from pflkit.sdk.dp_fedavg import DpFedAvgAggregator
from pflkit.sdk.privacy_accounting import DpRounds, PrivacyBudgetExceeded
from pflkit.sdk.run_config import Sampling, Schedule


def dp(z: float, clip: float, m: int) -> DpRounds:
    return DpRounds(z, clip, m, 100, 1e-5, None)


def global_state(size: int = 50) -> dict[str, torch.Tensor]:
    return {"w": torch.zeros(size), "steps": torch.tensor(7)}


def update(values: list[float], steps: int = 99) -> dict[str, torch.Tensor]:
    return {"w": torch.tensor(values, dtype=torch.float32), "steps": torch.tensor(steps)}


def test_without_noise_the_result_is_the_mean_of_clipped_changes_over_m():
    g = global_state(3)
    agg = DpFedAvgAggregator(g, dp(0.0, 1.0, 4), seed=0, round_index=0)
    agg.add(1000.0, update([30.0, 40.0, 0.0]))  # norm 50 -> (0.6, 0.8, 0); its weight is unused
    agg.add(1.0, update([0.1, 0.0, 0.0]))  # within the bound: unchanged
    out = agg.result()
    np.testing.assert_allclose(out["w"].numpy(), np.array([0.7, 0.8, 0.0]) / 4, rtol=1e-6)
    assert out["steps"].item() == 7  # integer tensors keep the global value


def test_one_device_moves_the_result_by_at_most_c_over_m_whatever_it_sends():
    g = global_state()
    others = [update(list(np.random.default_rng(i).normal(size=50))) for i in range(3)]
    results = []
    for outlier in (0.0, 1e6):
        agg = DpFedAvgAggregator(g, dp(1.0, 0.5, 4), seed=3, round_index=2)
        for u in [*others, update([outlier] * 50)]:
            agg.add(1.0, u)
        results.append(agg.result()["w"].double())
    assert float(torch.linalg.norm(results[1] - results[0])) <= 0.5 / 4 + 1e-6


def test_the_noise_has_std_z_c_over_m_and_is_seeded_by_run_and_round():
    g = global_state(20000)
    z, clip, m = 1.3, 0.7, 5

    def noisy(seed: int, round_index: int) -> torch.Tensor:
        agg = DpFedAvgAggregator(g, dp(z, clip, m), seed, round_index)
        agg.add(1.0, update([0.0] * 20000))
        return agg.result()["w"]

    first = noisy(0, 4)
    assert float(first.std()) == pytest.approx(z * clip / m, rel=0.02)
    assert float(first.mean()) == pytest.approx(0.0, abs=4 * z * clip / m / 20000 ** 0.5)
    assert torch.equal(first, noisy(0, 4))
    assert not torch.equal(first, noisy(0, 5)) and not torch.equal(first, noisy(1, 4))


def test_the_factory_builds_dp_and_refuses_a_round_past_the_budget(tmp_path):
    rules = AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=3.0, dp_max_epsilon=5.0)
    schedule = Schedule(100, Sampling(clients_per_round=10))
    build = AggregatorFactory(lambda s, _: WeightedMean(s), rules, tmp_path, schedule, seed=0)
    assert isinstance(build(global_state(), 100, 0), DpFedAvgAggregator)
    with pytest.raises(PrivacyBudgetExceeded, match="round 99 would spend epsilon"):
        build(global_state(), 100, 99)
