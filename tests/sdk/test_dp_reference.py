"""pflkit's DP-FedAvg, adaptive clipping and accounting against the papers' equations in numpy.

McMahan et al. 2018 (fixed-size sampling of m clients, unit weights): the new global state is
``w + (sum_i clip_C(delta_i) + N(0, (z C)^2 I)) / m``. Andrew et al. 2021, Algorithm 1 and
Theorem 1: ``b = (#{i : |delta_i| <= C} + N(0, sigma_b^2)) / m``,
``C' = C exp(-eta_C (b - gamma))``, and the sum's multiplier
``z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)``. The noise itself is the seeded stream the module
documents (the same standard normals); everything done with it here is written out by hand.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.rdp import RdpAccountant

from pflkit.sdk.adaptive_clipping import ADAPTIVE_CLIP_RANGE
from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.dp_fedavg import ClipNorm, DpFedAvgAggregator
from pflkit.sdk.privacy_accounting import calibrate_noise, dp_rounds, epsilon
from pflkit.sdk.seeding import torch_generator

SEED, ROUND, M, N = 11, 4, 5, 40
SHAPES = {"b.bias": (3,), "a.weight": (4, 6)}  # added out of name order on purpose


def _updates(global_state: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    scales = (0.01, 0.3, 1.0, 5.0, 40.0)  # some changes within C, some far over it
    return [{k: v + s * rng.standard_normal(v.shape) for k, v in global_state.items()}
            for s in scales]


def _normals(stream: str, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    gen = torch_generator(SEED, stream, ROUND)
    return [torch.randn(s, generator=gen, dtype=torch.float64).numpy() for s in shapes]


def _reference(global_state, updates, clip, sum_multiplier):
    """The paper's estimator, by hand: clip each whole change, sum, noise, divide by m."""
    keys = sorted(global_state)
    total = {k: np.zeros_like(global_state[k]) for k in keys}
    within = 0
    for update in updates:
        change = {k: update[k] - global_state[k] for k in keys}
        norm = math.sqrt(sum(float(np.sum(c * c)) for c in change.values()))
        within += norm <= clip
        scale = min(1.0, clip / norm)
        for k in keys:
            total[k] += scale * change[k]
    noise = _normals("dp-noise", [global_state[k].shape for k in keys])
    new = {k: global_state[k] + (total[k] + sum_multiplier * clip * e) / M
           for k, e in zip(keys, noise, strict=True)}
    return new, within


def _run(rules: AggregationConfig, clip: ClipNorm | None = None):
    dp = dp_rounds(rules, population=N, sample_size=M, rounds=10)
    rng = np.random.default_rng(1)
    global_state = {k: rng.standard_normal(s) for k, s in SHAPES.items()}
    updates = _updates(global_state)
    rule = DpFedAvgAggregator({k: torch.from_numpy(v) for k, v in global_state.items()}, dp,
                              SEED, ROUND, clip)
    weights = (1.0, 7.0, 300.0, 2.0, 1.0)  # sample counts: DP-FedAvg ignores them
    for weight, update in zip(weights, updates, strict=True):
        rule.add(weight, {k: torch.from_numpy(v) for k, v in update.items()})
    out = {k: v.numpy() for k, v in rule.result().items()}
    return dp, global_state, updates, out


def test_dp_fedavg_is_the_papers_clipped_noised_sum_over_m():
    rules = AggregationConfig(dp_clip_norm=1.5, dp_noise_multiplier=0.8)
    dp, global_state, updates, out = _run(rules)
    expected, _ = _reference(global_state, updates, 1.5, 0.8)
    for k in SHAPES:
        np.testing.assert_allclose(out[k], expected[k], rtol=0, atol=1e-9)


def test_an_adaptive_round_is_andrew_et_al_algorithm_1():
    z, sigma_b, gamma, eta = 1.2, 0.9, 0.6, 0.4
    rules = AggregationConfig(dp_clip_norm=2.0, dp_noise_multiplier=z,
                              dp_adaptive_quantile=gamma, dp_clip_learning_rate=eta,
                              dp_clipped_count_stddev=sigma_b)
    clip = ClipNorm(2.0)
    dp, global_state, updates, out = _run(rules, clip)
    z_delta = (z ** -2 - (2 * sigma_b) ** -2) ** -0.5
    assert dp.sum_noise_multiplier == pytest.approx(z_delta, rel=1e-12)
    expected, within = _reference(global_state, updates, 2.0, z_delta)
    for k in SHAPES:  # the sum's noise is z_delta C with this round's C, before C moves
        np.testing.assert_allclose(out[k], expected[k], rtol=0, atol=1e-9)
    assert within == 2
    (draw,) = _normals("dp-clip-count", [()])
    b = (within + sigma_b * float(draw)) / M
    assert clip.value == pytest.approx(2.0 * math.exp(-eta * (b - gamma)), rel=1e-12)


@pytest.mark.parametrize("z, sigma_b, n, m", [(1.0, 2.5, 1000, 100), (0.7, 3.0, 50, 10)])
def test_the_accounted_z_spends_what_the_sum_and_count_pair_spends_when_sampled(z, sigma_b,
                                                                                 n, m):
    """dp-accounting's epsilon of the released pair (sum at z_delta / 2 against replace-one's
    2C, the count at sigma_b against 1), sampled m of n, equals the one pflkit reports."""
    dp = dp_rounds(AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=z,
                                     dp_adaptive_quantile=0.5, dp_clipped_count_stddev=sigma_b),
                   population=n, sample_size=m, rounds=20)
    pair = dp_accounting.ComposedDpEvent([
        dp_accounting.GaussianDpEvent(dp.sum_noise_multiplier / 2),
        dp_accounting.GaussianDpEvent(sigma_b)])
    accountant = RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, m, pair), 20)
    assert dp.epsilon(20) == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)


@pytest.mark.parametrize("target, rounds, m, n", [(8.0, 100, 100, 1000), (1.0, 50, 10, 1000),
                                                  (3.0, 10, 3, 10), (1000.0, 1, 1, 1000)])
def test_calibration_never_reports_less_than_the_run_spends(target, rounds, m, n):
    """The calibrated z spends at most the target, and 1e-3 less noise would spend more."""
    z = calibrate_noise(target, 1e-5, rounds, m, n)
    assert epsilon(z, m, n, rounds, 1e-5) <= target < epsilon(z - 1e-3, m, n, rounds, 1e-5)


def test_a_wild_count_noise_keeps_the_clip_norm_in_its_range():
    """sigma_b = 1e6 of 5 clients gives b of order 1e5: exp(-eta (b - gamma)) overflows or
    makes C exactly 0, where the geometric update can never leave it. C stays in
    [ADAPTIVE_CLIP_RANGE] and the rounds run on (C from the noisy count is post-processing)."""
    rules = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.0,
                              dp_adaptive_quantile=0.5, dp_clipped_count_stddev=1e6)
    dp = dp_rounds(rules, population=N, sample_size=M, rounds=10)
    clip, seen = ClipNorm(0.5), []
    for index in range(12):
        rule = DpFedAvgAggregator({"w": torch.zeros(3, dtype=torch.float64)}, dp, SEED, index,
                                  clip)
        rule.add(1.0, {"w": torch.ones(3, dtype=torch.float64)})
        assert torch.isfinite(rule.result()["w"]).all()
        seen.append(clip.value)
    low, high = ADAPTIVE_CLIP_RANGE
    assert all(low <= c <= high for c in seen)
    assert set(seen) == {low, high}  # each draw throws C to an end, and it leaves it again
