"""The pure parts of secure aggregation: quantization bound, Shamir sharing, the DP noise share."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from secagg_harness import Round, setup

from pflkit.sdk.secagg import dp, quantize, shamir


@pytest.mark.parametrize("n", [2, 7, 100, 10_000])
def test_the_decoded_sum_is_within_the_stated_bound_and_never_wraps(n):
    rng = np.random.default_rng(n)
    c = 0.75
    x = rng.uniform(-c, c, size=(n, 300))
    x[:, :4] = [c, -c, c, -c]  # the extreme levels: n of the top level still fit in 2^32
    q = quantize.quantize(x, c, n)
    total = q.astype(np.uint64).sum(axis=0)
    assert total.max() < quantize.MODULUS
    decoded = quantize.dequantize_sum(total.astype(np.uint32), c, n, n)
    bound = quantize.sum_error_bound(c, n, n)
    err = np.abs(decoded - x.sum(axis=0)).max()
    assert err <= bound * (1 + 1e-9)
    assert err > bound / 100  # the bound is tight enough to mean something


def test_values_outside_the_range_are_clipped():
    q = quantize.quantize(np.array([-5.0, 5.0, 0.0]), 1.0, 4)
    np.testing.assert_allclose(quantize.dequantize_sum(q, 1.0, 4, 1)[:2], [-1.0, 1.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_update_is_refused(bad):
    with pytest.raises(ValueError, match="non-finite"):
        quantize.quantize(np.array([0.1, bad]), 1.0, 4)


@pytest.mark.parametrize("secret_len", [16, 32])
def test_any_t_of_k_shares_rebuild_the_secret_and_t_minus_1_do_not(secret_len):
    secret = os.urandom(secret_len)
    shares = shamir.split(secret, 3, 5)
    for xs in itertools.combinations(range(1, 6), 3):
        assert shamir.combine({x: shares[x - 1] for x in xs}, secret_len) == secret
    two = {1: shares[0], 4: shares[3]}
    try:
        assert shamir.combine(two, secret_len) != secret
    except ValueError:
        pass  # the interpolated value does not even fit the secret's length


def test_shares_are_fresh_and_malformed_ones_are_refused():
    secret = os.urandom(16)
    assert shamir.split(secret, 2, 3) != shamir.split(secret, 2, 3)
    with pytest.raises(ValueError, match="66 bytes"):
        shamir.combine({1: b"short", 2: bytes(66)}, 16)
    with pytest.raises(ValueError, match="not a field element"):
        shamir.parse_share(b"\xff" * 66)


def test_t_device_noise_shares_add_up_to_the_target_noise_on_the_sum():
    z, clip, t, d = 1.2, 0.5, 4, 20_000
    rng = np.random.default_rng(0)
    s = setup(n=t, t=t, d=d, clip=dp.quantization_range(clip, dp.noise_share_std(z, clip, t)))
    grid = dp.DpGrid.of(s, clip, z)
    total = sum(grid.privatize(np.zeros(d), rng) for _ in range(t))
    assert abs(total.std() / (z * clip) - 1) < 0.02  # the accountant's z exactly at t
    assert dp.sum_noise_std(z, clip, t, t) == pytest.approx(z * clip)
    assert dp.sum_noise_std(z, clip, t, t + 3) > z * clip


def test_a_device_clips_its_change_before_noising_and_rounds_it_inside_c():
    s = setup(n=3, t=3, clip=dp.quantization_range(1.0, dp.noise_share_std(1.0, 1.0, 3)), d=2)
    grid = dp.DpGrid.of(s, 1.0, 1.0)
    out = grid.rounded(np.array([30.0, 40.0])) * grid.step - grid.offset
    assert np.linalg.norm(out) <= 1.0
    np.testing.assert_allclose(out, [0.6, 0.8], atol=1e-5)


def test_a_dp_round_under_secagg_sums_the_noised_updates():
    z, clip, t = 1.0, 0.3, 3
    std = dp.noise_share_std(z, clip, t)
    s = setup(n=5, t=t, d=4000, clip=dp.quantization_range(clip, std))
    rng = np.random.default_rng(5)
    grid = dp.DpGrid.of(s, clip, z)
    values = {c: grid.privatize(rng.normal(0, 1, s.dimension), rng) for c in s.roster}
    result = Round(s, {11: "masked"}).run(values)
    expected = sum(values[c] for c in result.survivors)
    bound = quantize.sum_error_bound(s.clip_range, 5, 4)
    assert np.abs(result.total - expected).max() <= bound * (1 + 1e-9)
