"""Adaptive clipping (Andrew et al. 2021): the geometric update, its accounting, its refusals."""

from __future__ import annotations

import math

import dp_accounting
import pytest
import torch
from dp_accounting.rdp import RdpAccountant

from pflkit.sdk.adaptive_clipping import AdaptiveClipping, sum_noise_multiplier
from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.dp_fedavg import ClipNorm, DpFedAvgAggregator
from pflkit.sdk.privacy_accounting import DpRounds, dp_rounds
from pflkit.sdk.seeding import torch_generator

ADAPTIVE = dict(dp_clip_norm=1.0, dp_noise_multiplier=1.0, dp_adaptive_quantile=0.5)


def test_the_clip_norm_moves_geometrically_towards_the_target_quantile():
    rule = AdaptiveClipping(quantile=0.5, learning_rate=0.2, count_stddev=2.0)
    assert rule.next_clip_norm(1.0, 3, 4, 0.0) == pytest.approx(math.exp(-0.2 * 0.25))
    assert rule.next_clip_norm(1.0, 1, 4, 0.0) > 1.0  # too few within C: C grows
    # the count's noise enters as sigma_b * draw clients: +1 draw = +2 clients of 4
    assert rule.next_clip_norm(1.0, 1, 4, 1.0) == pytest.approx(math.exp(-0.2 * 0.25))


@pytest.mark.parametrize("z, sigma_b", [(1.0, 5.0), (0.7, 0.5), (3.0, 40.0)])
def test_sum_and_count_noise_together_spend_what_z_alone_spends(z, sigma_b):
    """Theorem 1 checked with dp-accounting: z_delta on the sum (replace-one sensitivity 2C,
    multiplier z_delta / 2) composed with sigma_b on the count of centred bits (sensitivity 1)
    gives the epsilon of z / 2 alone."""
    z_delta = sum_noise_multiplier(z, sigma_b)
    assert z_delta > z

    def eps(event) -> float:
        acc = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        return acc.compose(event, 10).get_epsilon(1e-5)

    pair = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z_delta / 2),
                                          dp_accounting.GaussianDpEvent(sigma_b)])
    assert eps(pair) == pytest.approx(eps(dp_accounting.GaussianDpEvent(z / 2)), rel=1e-9)


def test_a_count_noise_too_small_for_z_is_refused_in_one_line():
    rules = AggregationConfig(**ADAPTIVE, dp_clipped_count_stddev=0.5)
    with pytest.raises(ValueError, match=r"^dp_clipped_count_stddev 0.5 is too small for noise "
                                         r"multiplier 1: .* above z / 2 = 0.5$"):
        dp_rounds(rules, population=100, sample_size=10, rounds=5)
    # the default m / 20 is 0.15 for m = 3: too small for z = 1 as well
    with pytest.raises(ValueError, match="too small"):
        dp_rounds(AggregationConfig(**ADAPTIVE), population=10, sample_size=3, rounds=5)


def test_the_count_noise_defaults_to_m_over_20():
    dp = dp_rounds(AggregationConfig(**ADAPTIVE), population=1000, sample_size=100, rounds=5)
    assert dp is not None and dp.adaptive == AdaptiveClipping(0.5, 0.2, 5.0)
    assert dp.sum_noise_multiplier == pytest.approx((1 - 0.1 ** 2) ** -0.5)


@pytest.mark.parametrize("extra, message", [
    (dict(dp_clip_on_device=True), "not with dp_clip_on_device"),
    (dict(dp_adaptive_quantile=None, dp_clipped_count_stddev=3.0),
     "dp_clipped_count_stddev needs dp_adaptive_quantile"),
    (dict(dp_adaptive_quantile=1.0), r"must be in \(0, 1\)"),
])
def test_adaptive_settings_are_refused_in_one_line(extra, message):
    with pytest.raises(ValueError, match=message):
        AggregationConfig(**{**ADAPTIVE, **extra})


def test_the_aggregator_counts_norms_within_c_and_moves_the_clip_norm_seeded():
    rounds = DpRounds(1.0, 1.0, 4, 100, 1e-5, None, AdaptiveClipping(0.5, 0.2, 1.0))
    g = {"w": torch.zeros(20000)}
    clip = ClipNorm(0.5)
    agg = DpFedAvgAggregator(g, rounds, seed=3, round_index=7, clip=clip)
    for norm in (0.1, 0.5, 2.0, 9.0):  # two within C = 0.5 (its bound included)
        agg.add(1.0, {"w": torch.cat([torch.tensor([norm]), torch.zeros(19999)])})
    out = agg.result()["w"]
    draw = float(torch.randn((), generator=torch_generator(3, "dp-clip-count", 7),
                             dtype=torch.float64))
    assert clip.value == 0.5 * math.exp(-0.2 * ((2 + draw) / 4 - 0.5))
    z_delta = sum_noise_multiplier(1.0, 1.0)
    assert float(out[1:].std()) == pytest.approx(z_delta * 0.5 / 4, rel=0.02)
