"""Adaptive clipping (Andrew et al. 2021): DP-FedAvg's clip norm follows a quantile of the norms.

Each round the server counts the updates whose change has L2 norm <= C (before clipping),
adds Gaussian noise of std ``sigma_b`` to the count and divides by the round's ``m``:
``b = (count + N(0, sigma_b^2)) / m`` is a private estimate of the share of updates within C.
C then moves geometrically towards the target quantile ``gamma``:
``C <- C * exp(-eta_C * (b - gamma))`` (the paper's Algorithm 1, geometric update): fewer
updates within C than the target make C grow, more make it shrink.

The count is released, so it is accounted. By the paper's Theorem 1, noise of multiplier
``z_delta`` on the sum together with ``sigma_b`` on the count is as private as noise ``z`` on the
sum alone when ``z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)`` (:func:`sum_noise_multiplier`):
the run is accounted at ``z`` and the sum carries ``z_delta > z``. What the paper leaves open,
and what we chose: ``sigma_b`` defaults to ``m / 20`` (the paper's suggestion); a ``sigma_b``
so small that no ``z_delta`` exists (``2 sigma_b <= z``) is refused, not silently raised; the
count's noise is drawn from its own stream (run seed, "dp-clip-count", round), so C is
reproducible and a fixed-clipping run draws the sum's noise as before; C is kept in
``ADAPTIVE_CLIP_RANGE``: a large ``sigma_b / m`` makes ``b`` huge, and the bare exponential
then overflows or makes C exactly 0, which the geometric update can never leave (any function
of the noisy count is post-processing, so the bound costs no privacy). Pure maths, no PyTorch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

COUNT_STDDEV_SHARE = 1 / 20  # sigma_b = m / 20 unless dp_clipped_count_stddev says otherwise
ADAPTIVE_CLIP_RANGE = (1e-12, 1e6)  # C's bounds: dp_clip_norm's top, a floor above 0


@dataclass(frozen=True)
class AdaptiveClipping:
    """The geometric update's settings for one federation."""

    quantile: float  # gamma, the target share of updates within C
    learning_rate: float  # eta_C
    count_stddev: float  # sigma_b, the noise on the count (in clients)

    def next_clip_norm(self, clip_norm: float, within: int, sample_size: int,
                       standard_normal: float) -> float:
        """C after a round where ``within`` of ``sample_size`` updates had norm <= C.

        ``standard_normal`` is the round's draw of N(0, 1), scaled here to ``sigma_b``. The
        step is the paper's inside ``ADAPTIVE_CLIP_RANGE`` and stops at its ends.
        """
        share = (within + self.count_stddev * standard_normal) / sample_size
        low, high = ADAPTIVE_CLIP_RANGE
        step = -self.learning_rate * (share - self.quantile)
        if step <= math.log(low / clip_norm):
            return low
        if step >= math.log(high / clip_norm):
            return high
        return clip_norm * math.exp(step)


def sum_noise_multiplier(noise_multiplier: float, count_stddev: float) -> float:
    """``z_delta``: the sum's noise multiplier that, with ``sigma_b`` on the count, spends ``z``.

    ValueError (one line) when ``2 sigma_b <= z``: the count alone would spend the budget.
    """
    rest = noise_multiplier ** -2 - (2 * count_stddev) ** -2
    if rest <= 0:
        raise ValueError(
            f"dp_clipped_count_stddev {count_stddev:g} is too small for noise multiplier "
            f"{noise_multiplier:g}: adaptive clipping needs it above z / 2 = "
            f"{noise_multiplier / 2:g}")
    return rest ** -0.5
