"""Epsilon when a server's roster changes between rounds, and for a vanishing noise multiplier.

pfl-server samples each round from the clients enrolled when it opens, so the population n
(and with a fraction, m) can differ from round to round. The run's epsilon is the composition
of every round at its own (m, n): accounting all of them at the last round's n understated it
(10 rounds of 10 of 20 clients spend 43.6 at z = 1; after 980 more enrolled, 11 rounds
"of 1000" gave 6.5).
"""

from __future__ import annotations

import dp_accounting
import pytest
from dp_accounting.rdp import RdpAccountant

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.privacy_accounting import calibrate_noise, dp_rounds, epsilon, privacy_spent
from pflkit.sdk.run_config import Sampling, Schedule


def _composed(z: float | list[float], rounds: list[tuple[int, int]], delta: float) -> float:
    """dp-accounting's epsilon of the rounds, each at its own (m, n) (and z), by hand."""
    accountant = RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    noise = z if isinstance(z, list) else [z] * len(rounds)
    for z_round, (m, n) in zip(noise, rounds, strict=True):
        accountant.compose(dp_accounting.SampledWithoutReplacementDpEvent(
            n, m, dp_accounting.GaussianDpEvent(z_round / 2)))
    return accountant.get_epsilon(delta)


def test_a_grown_roster_does_not_shrink_the_epsilon_spent():
    rules = AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=1.0)
    schedule = Schedule(20, Sampling(clients_per_round=10))
    before = privacy_spent(rules, schedule, 20, 10)["dp_epsilon"]
    after = privacy_spent(rules, schedule, 1000, 11, rosters=(20,) * 10)["dp_epsilon"]
    expected = _composed(1.0, [(10, 20)] * 10 + [(10, 1000)], 1e-5)
    assert after == pytest.approx(expected, rel=1e-9)
    assert after >= before > 40


def test_the_budget_counts_each_round_at_its_own_roster():
    rules = AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=1.0, dp_max_epsilon=40.0)
    dp = dp_rounds(rules, population=1000, sample_size=10, rounds=20,
                   earlier=((10, 20),) * 10)
    with pytest.raises(ValueError, match="round 10 would spend epsilon 43.5"):
        dp.check_budget(10)


def test_a_fraction_sample_follows_each_rounds_roster():
    rules = AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=2.0)
    schedule = Schedule(5, Sampling(fraction=0.5))
    spent = privacy_spent(rules, schedule, 40, 3, rosters=(10, 20))["dp_epsilon"]
    assert spent == pytest.approx(_composed(2.0, [(5, 10), (10, 20), (20, 40)], 1e-5),
                                  rel=1e-9)
    assert privacy_spent(rules, schedule, 40, 3)["dp_epsilon"] == \
        pytest.approx(epsilon(2.0, 20, 40, 3, 1e-5))


def test_a_calibrated_run_counts_each_round_at_the_z_it_was_noised_with():
    """With dp_target_epsilon a server calibrates z for each round's roster: 10 rounds at
    1000 clients (z 1.0), then 10 at 20 (z 5.5). Their composition is 8.33, past the target 8
    that the last round's z alone reported (and a single z for all would say 4.8)."""
    rules = AggregationConfig(dp_clip_norm=1.0, dp_target_epsilon=8.0)
    schedule = Schedule(20, Sampling(clients_per_round=10))
    spent = privacy_spent(rules, schedule, 20, 20, rosters=(1000,) * 10 + (20,) * 9)
    z_big = calibrate_noise(8.0, 1e-5, 20, 10, 1000)
    z_small = calibrate_noise(8.0, 1e-5, 20, 10, 20)
    rounds = [(10, 1000)] * 10 + [(10, 20)] * 10
    expected = _composed([z_big] * 10 + [z_small] * 10, rounds, 1e-5)
    assert spent["dp_epsilon"] == pytest.approx(expected, rel=1e-9)
    assert spent["dp_epsilon"] > 8.3


def test_under_secagg_every_round_is_unsampled_whatever_the_roster():
    rules = AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=1.0, secagg=True)
    schedule = Schedule(5, Sampling(clients_per_round=5))
    spent = privacy_spent(rules, schedule, 50, 3, rosters=(8, 9))["dp_epsilon"]
    assert spent == pytest.approx(epsilon(1.0, 5, 5, 3, 1e-5), rel=1e-9)


@pytest.mark.parametrize("z", [1e-155, 1e-300, 5e-7])
def test_a_vanishing_noise_multiplier_is_refused_not_accounted_as_zero(z):
    """At z = 1e-155 dp-accounting's arithmetic overflowed and said epsilon 0 (no noise at
    all), at 1e-300 it divided by zero: below 1e-6 the accountant refuses in one line."""
    with pytest.raises(ValueError, match=r"^noise_multiplier must be >= 1e-06 to be accounted "):
        epsilon(z, 10, 100, 5, 1e-5)
    assert epsilon(1e-6, 10, 100, 5, 1e-5) > 1e12
