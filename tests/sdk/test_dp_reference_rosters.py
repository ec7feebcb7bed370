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


def _calibrated_after(spent: list[tuple[float, int, int, int]], rounds: int, m: int, n: int,
                      target: float, delta: float) -> float:
    """The smallest z (to 1e-4) for ``rounds`` more rounds of m of n after ``spent`` (runs of
    (z, m, n, count)), by hand: dp-accounting's accountant, a doubling bracket, bisection."""
    def within(z: float) -> bool:
        accountant = RdpAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        for z_run, m_run, n_run, count in [*spent, (z, m, n, rounds)]:
            accountant.compose(dp_accounting.SampledWithoutReplacementDpEvent(
                n_run, m_run, dp_accounting.GaussianDpEvent(z_run / 2)), count)
        return accountant.get_epsilon(delta) <= target

    low, high = 0.01, 1.0
    while not within(high):
        low, high = high, 2 * high
    while high - low > 1e-4:
        middle = (low + high) / 2
        low, high = (low, middle) if within(middle) else (middle, high)
    return high


def test_a_calibrated_run_keeps_to_its_target_when_the_roster_changes():
    """With dp_target_epsilon a server calibrates each round's z for the rounds already run,
    at the z they were noised with, and the rest of the run at this round's roster: 10 rounds
    at 1000 clients (z 1.0), then 10 at 20. Each round calibrated alone for its roster spent
    8.33 of the target 8 (z 5.5 at 20 clients); the 20-client rounds now take z 6.09."""
    rules = AggregationConfig(dp_clip_norm=1.0, dp_target_epsilon=8.0)
    schedule = Schedule(20, Sampling(clients_per_round=10))
    spent = privacy_spent(rules, schedule, 20, 20, rosters=(1000,) * 10 + (20,) * 9)
    z_big = calibrate_noise(8.0, 1e-5, 20, 10, 1000)
    z_small = _calibrated_after([(z_big, 10, 1000, 10)], 10, 10, 20, 8.0, 1e-5)
    assert spent["dp_noise_multiplier"] == pytest.approx(z_small, abs=2e-3)  # the tolerance
    rounds = [(10, 1000)] * 10 + [(10, 20)] * 10
    expected = _composed([z_big] * 10 + [spent["dp_noise_multiplier"]] * 10, rounds, 1e-5)
    assert spent["dp_epsilon"] == pytest.approx(expected, rel=1e-9)
    assert 7.99 < spent["dp_epsilon"] <= 8.0
    halfway = privacy_spent(rules, schedule, 1000, 10)  # before the roster shrank: as before
    assert halfway["dp_noise_multiplier"] == z_big


def test_a_roster_that_shrinks_after_the_first_round_keeps_to_the_target():
    """5 of 1000 clients, then 5 of 10 twice: each round calibrated alone spent 3.73 of 3."""
    rules = AggregationConfig(dp_clip_norm=1.0, dp_target_epsilon=3.0, dp_delta=1e-6)
    schedule = Schedule(3, Sampling(clients_per_round=5))
    spent = privacy_spent(rules, schedule, 10, 3, rosters=(1000, 10))
    assert 2.99 < spent["dp_epsilon"] <= 3.0


def test_a_target_the_rounds_already_run_spent_is_refused_not_overspent():
    from pflkit.sdk.privacy_accounting import PrivacyBudgetExceeded

    with pytest.raises(PrivacyBudgetExceeded, match=r"^the rounds already run spent epsilon "):
        calibrate_noise(1.0, 1e-5, 5, 10, 20, spent=((0.5, 10, 20, 3),))


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
