"""Privacy accounting of DP-FedAvg rounds: epsilon(delta), calibration and the run's budget.

User-level DP (McMahan et al. 2018): one user's data is one device's update. The Coordinator
draws a fixed-size sample of ``m`` of the ``n`` clients without replacement each round
(:meth:`~pflkit.server.coordinator.Coordinator.sample`), so a round is Google's
``dp-accounting`` ``SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(.))`` and the
accountant is RDP under the replace-one relation (the only relation that event is defined for;
Wang, Balle and Kasiviswanathan 2019, Theorem 27). What the papers leave open, and what we
chose: under replace-one a user's clipped update (norm <= C) swapped for another's moves the sum
by up to 2C, so noise of std ``z * C`` is a Gaussian of multiplier ``z / 2`` relative to that
sensitivity; we account ``z / 2`` (the conservative reading; never an understated epsilon).
Poisson sampling is not offered: the sampler never draws that way. pfl-server draws each round
from the clients enrolled when it opens, so ``n`` (and with a fraction, ``m``; with
``dp_target_epsilon``, the z calibrated for them) can change from round to round: every round
is composed at its own ``(z, m, n)`` (:func:`epsilon_of_rounds`), never all at the last one's
(a roster grown from 20 to 1000 made 43.6 look like 6.5).

``dp_accounting`` is imported inside the functions: the server's HTTP workers import this
module's callers without paying for it.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pflkit.sdk.adaptive_clipping import COUNT_STDDEV_SHARE, AdaptiveClipping, sum_noise_multiplier
from pflkit.sdk.aggregation_config import MIN_ACCOUNTED_NOISE, AggregationConfig
from pflkit.sdk.round_rdp import (
    epsilon_of_rdp,
    replace_one_accountant,
    round_event,
    runs_rdp,
    unit_rdp,
)

if TYPE_CHECKING:
    from pflkit.sdk.run_config import Schedule

CALIBRATION_TOLERANCE = 1e-3  # on the noise multiplier found for a target epsilon
MIN_NOISE = 1e-2  # calibration's lower end (z = 0 is no privacy: its RDP divides by zero)


class PrivacyBudgetExceeded(ValueError):
    """The next round would spend more than the run's ``dp_max_epsilon``."""


@functools.lru_cache(maxsize=4096)
def epsilon(noise_multiplier: float, sample_size: int, population: int, rounds: int,
            delta: float) -> float:
    """Epsilon at ``delta`` after ``rounds`` rounds of ``sample_size`` of ``population`` clients.

    ValueError (one line) for terms outside :func:`check_terms`'s ranges.
    """
    return epsilon_of_rounds(((noise_multiplier, sample_size, population, rounds),), delta)


Round = tuple[float, int, int]  # (noise multiplier, sample_size, population) of one round


@functools.lru_cache(maxsize=4096)
def epsilon_of_rounds(runs: tuple[tuple[float, int, int, int], ...], delta: float) -> float:
    """Epsilon at ``delta`` of rounds given as ``(z, sample_size, population, count)`` runs.

    ValueError (one line) for a noise multiplier below ``MIN_ACCOUNTED_NOISE`` or terms
    outside :func:`check_terms`'s ranges.
    """
    for z, sample_size, population, count in runs:
        check_terms("noise_multiplier", z, sample_size, population, count, delta)
        if z < MIN_ACCOUNTED_NOISE:
            raise ValueError(f"noise_multiplier must be >= {MIN_ACCOUNTED_NOISE:g} to be "
                             f"accounted (below, epsilon is past 1e12 and overflows), got {z!r}")
    if not any(count for *_, count in runs):
        return 0.0
    return epsilon_of_rdp(runs_rdp(runs), delta)


def _runs(rounds: list[Round]) -> tuple[tuple[float, int, int, int], ...]:
    """Consecutive equal rounds folded into counted runs."""
    runs: list[tuple[float, int, int, int]] = []
    for one in rounds:
        if runs and runs[-1][:3] == one:
            runs[-1] = (*one, runs[-1][3] + 1)
        else:
            runs.append((*one, 1))
    return tuple(runs)


def check_terms(name: str, value: float, sample_size: int, population: int, rounds: int,
                delta: float) -> None:
    """Refuse terms the accountant would misread: a NaN multiplier gave a finite epsilon.

    ``value`` (the noise multiplier or the target epsilon) finite and > 0, ``sample_size`` in
    [1, ``population``], ``rounds`` >= 0 (integers), ``delta`` in (0, 1).
    """
    def number(x: object) -> bool:
        return not isinstance(x, bool) and isinstance(x, numbers.Real) and math.isfinite(x)

    def integer(x: object) -> bool:
        return isinstance(x, numbers.Integral) and not isinstance(x, bool)

    if not number(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if not (integer(sample_size) and integer(population) and 1 <= sample_size <= population):
        raise ValueError(f"sample_size must be in [1, population], got {sample_size!r} of "
                         f"{population!r}")
    if not integer(rounds) or rounds < 0:
        raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
    if not number(delta) or not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


@functools.lru_cache(maxsize=4096)
def calibrate_noise(target_epsilon: float, delta: float, rounds: int, sample_size: int,
                    population: int, spent: tuple[tuple[float, int, int, int], ...] = ()
                    ) -> float:
    """The smallest noise multiplier (within ``CALIBRATION_TOLERANCE``) meeting the target.

    ``rounds`` rounds of ``sample_size`` of ``population`` after the rounds already run,
    ``spent`` as :func:`epsilon_of_rounds`'s runs: together they stay within the target.
    Epsilon falls as z grows: a bracket grown from ``MIN_NOISE`` and a first guess of 1, then
    bisected (dp-accounting's ``calibrate_dp_mechanism`` where no round has run; it needs an
    empty accountant). :class:`PrivacyBudgetExceeded` if the rounds already run spent it.
    """
    import dp_accounting
    from scipy import optimize

    check_terms("target_epsilon", target_epsilon, sample_size, population, rounds, delta)
    if rounds == 0:
        raise ValueError("rounds must be >= 1 to calibrate the noise for them")

    if not spent:
        def event(z: float) -> object:
            return dp_accounting.SelfComposedDpEvent(round_event(z, sample_size, population),
                                                     rounds)

        bracket = dp_accounting.LowerEndpointAndGuess(MIN_NOISE, 1.0)
        return float(dp_accounting.calibrate_dp_mechanism(
            replace_one_accountant, event, target_epsilon, delta, bracket,
            tol=CALIBRATION_TOLERANCE))
    before = runs_rdp(spent)  # the spent rounds' RDP, added to each candidate's
    if (already := epsilon_of_rdp(before, delta)) >= target_epsilon:
        raise PrivacyBudgetExceeded(
            f"the rounds already run spent epsilon {already:.3f} at delta {delta:g}, all of "
            f"aggregation.dp_target_epsilon = {target_epsilon:g}; no noise keeps to it")

    def gap(z: float) -> float:
        return epsilon_of_rdp(before + rounds * unit_rdp(z, sample_size, population), delta) - \
            target_epsilon

    low, high = MIN_NOISE, 1.0
    while gap(high) > 0:  # ends: epsilon falls to the rounds already run's as z grows
        low, high = high, 2 * high
    if gap(low) <= 0:
        return low
    z = float(optimize.brentq(gap, low, high, xtol=CALIBRATION_TOLERANCE))
    return z if gap(z) <= 0 else z + CALIBRATION_TOLERANCE  # never over the target


@dataclass(frozen=True)
class DpRounds:
    """DP-FedAvg resolved for one federation: the noise, the sample and the budget."""

    noise_multiplier: float  # z, what the run is accounted at
    clip_norm: float  # the first round's C (adaptive clipping moves it after each round)
    sample_size: int  # m, also the fixed denominator of the noisy mean
    population: int  # n
    delta: float
    max_epsilon: float | None
    adaptive: AdaptiveClipping | None = None  # None: C stays fixed
    # (z, m, n) of the rounds already run, oldest first (a server's roster can change)
    earlier: tuple[Round, ...] = ()

    def __post_init__(self) -> None:
        if self.adaptive is not None:  # refuse a count noise too small for z before any round
            sum_noise_multiplier(self.noise_multiplier, self.adaptive.count_stddev)

    @property
    def sum_noise_multiplier(self) -> float:
        """The multiplier of the noise on the sum: z, or z_delta with adaptive clipping."""
        if self.adaptive is None:
            return self.noise_multiplier
        return sum_noise_multiplier(self.noise_multiplier, self.adaptive.count_stddev)

    def epsilon(self, rounds: int) -> float:
        """Epsilon(delta) spent once ``rounds`` rounds have run, each at its own (m, n)."""
        now = (self.noise_multiplier, self.sample_size, self.population)
        rounds_at = [*self.earlier[:rounds], *[now] * max(0, rounds - len(self.earlier))]
        return epsilon_of_rounds(_runs(rounds_at) or ((*now, 0),), self.delta)

    def check_budget(self, round_index: int) -> None:
        """Raise :class:`PrivacyBudgetExceeded` if running round ``round_index`` goes past it."""
        if self.max_epsilon is None:
            return
        after = self.epsilon(round_index + 1)
        if after > self.max_epsilon:
            raise PrivacyBudgetExceeded(
                f"round {round_index} would spend epsilon {after:.3f} at delta {self.delta:g}, "
                f"past aggregation.dp_max_epsilon = {self.max_epsilon:g}; the round is not run")


def dp_rounds(rules: AggregationConfig, population: int, sample_size: int, rounds: int,
              earlier: Sequence[tuple[int, int]] = (), noised: Sequence[float | None] = ()
              ) -> DpRounds | None:
    """The DP setting of a run on ``population`` clients (None without DP).

    ``earlier``: ``(sample_size, population)`` of the rounds already run, oldest first, where a
    server's roster made them differ (left out: every round at this one's); with
    ``dp_target_epsilon`` each was run with the z calibrated for it (:func:`_round_noise`).
    ``noised``: the z each earlier round was noised with, where the server recorded it (None
    or left out: computed again): what was applied is accounted, even if an older version or
    another floor chose it, and a restarted server does not calibrate every roster again.

    ``dp_target_epsilon`` calibrates the noise multiplier for the planned ``rounds`` (with the
    rounds already run); otherwise ``dp_noise_multiplier`` is used as given. With adaptive
    clipping, ValueError if the clipped count's noise is too small for it
    (:func:`sum_noise_multiplier`).

    Under secure aggregation the devices noise the sum against the server, which draws each
    round's sample and sends it to the devices: sampling hides nobody from it, so the rounds
    are accounted as if every client took part in every round (no amplification, q = 1).
    """
    if rules.dp_clip_norm is None:
        return None
    if rules.secagg:
        population = sample_size
        earlier = [(m, m) for m, _ in earlier]

    past: list[Round] = []
    for (m, n), z_then in itertools.zip_longest(earlier, noised[:len(earlier)]):
        past.append(_round_noise(rules, rounds, tuple(past), m, n) if z_then is None
                    else (z_then, m, n))
    z = _round_noise(rules, rounds, tuple(past), sample_size, population)[0]
    adaptive = None
    if rules.dp_adaptive_quantile is not None:
        count_stddev = rules.dp_clipped_count_stddev or sample_size * COUNT_STDDEV_SHARE
        adaptive = AdaptiveClipping(rules.dp_adaptive_quantile, rules.dp_clip_learning_rate,
                                    count_stddev)
    return DpRounds(z, rules.dp_clip_norm, sample_size, population, rules.dp_delta,
                    rules.dp_max_epsilon, adaptive, tuple(past))


def _round_noise(rules: AggregationConfig, rounds: int, past: tuple[Round, ...], m: int,
                 n: int) -> Round:
    """The round after ``past`` on m of n clients, with the z it is noised with.

    ``dp_target_epsilon``: the z for which the rounds run so far, this one and the rest of the
    planned ``rounds`` at its (m, n) spend the target, so a roster that changes keeps to it
    (each round calibrated alone spent 8.33 of 8 at 1000 then 20 clients). While (m, n) stays,
    that z stays: the next round solves the same equation.
    """
    if rules.dp_noise_multiplier is not None:
        return rules.dp_noise_multiplier, m, n
    assert rules.dp_target_epsilon is not None  # AggregationConfig requires one of them
    if past and past[-1][1:] == (m, n):
        return past[-1]
    left = max(1, rounds - len(past))
    return calibrate_noise(rules.dp_target_epsilon, rules.dp_delta, left, m, n,
                           _runs(list(past))), m, n


def privacy_spent(rules: AggregationConfig, schedule: Schedule, population: int,
                  rounds_done: int, clip_norm: float | None = None,
                  rosters: Sequence[int] = (), noised: Sequence[float | None] = ()
                  ) -> dict[str, float]:
    """The history's DP columns after ``rounds_done`` rounds (empty without DP).

    ``clip_norm``: the C the last round clipped to (``dp_clip_norm`` column), if known.
    ``rosters``: the population of each earlier round, oldest first, on a server whose roster
    changes (left out: every round at ``population``); ``noised`` as :func:`dp_rounds`'s.
    """
    earlier = [(schedule.sample_size(n), n) for n in rosters]
    dp = dp_rounds(rules, population, schedule.sample_size(population), schedule.rounds,
                   earlier, noised)
    if dp is None:
        return {}
    spent = {"dp_epsilon": dp.epsilon(rounds_done), "dp_delta": dp.delta,
             "dp_noise_multiplier": dp.noise_multiplier}
    return spent if clip_norm is None else {**spent, "dp_clip_norm": clip_norm}
