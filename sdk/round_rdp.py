"""One DP-FedAvg round's Renyi DP, computed once, and the epsilon of rounds composed.

A round is ``SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(z / 2))`` under the
replace-one relation (sdk/privacy_accounting.py says why). dp-accounting's RdpAccountant sums
its events' RDP at fixed orders; a round's takes 0.28 s to compute (sampling without
replacement), so each (z, m, n) is computed once and runs of rounds are sums of cached
vectors: a server whose roster changed every round recomputed them all at every close.
``dp_accounting`` is imported inside the functions (the HTTP workers import this module's
callers without paying for it).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dp_accounting.rdp import RdpAccountant


def round_event(noise_multiplier: float, sample_size: int, population: int) -> object:
    """One round's DP event: m of n sampled without replacement, the sum noised by z * C."""
    import dp_accounting

    # replace-one sensitivity of the clipped sum is 2C; the noise's std is z * C
    noise = dp_accounting.GaussianDpEvent(noise_multiplier / 2)
    return dp_accounting.SampledWithoutReplacementDpEvent(population, sample_size, noise)


def replace_one_accountant() -> RdpAccountant:
    """An empty accountant under the replace-one relation."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    return RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)


def runs_rdp(runs: tuple[tuple[float, int, int, int], ...]) -> np.ndarray:
    """The RDP of ``(z, m, n, count)`` runs: each round's times its count, summed."""
    total = np.zeros(len(_orders()))
    for z, sample_size, population, count in runs:
        total += count * _round_rdp(z, sample_size, population)
    return total


@functools.lru_cache(maxsize=4096)
def _round_rdp(noise_multiplier: float, sample_size: int, population: int) -> np.ndarray:
    rdp = unit_rdp(noise_multiplier, sample_size, population)
    rdp.flags.writeable = False  # shared by every caller of the cache
    return rdp


def unit_rdp(noise_multiplier: float, sample_size: int, population: int) -> np.ndarray:
    """The RDP of one round (dp-accounting's, replace-one)."""
    event = round_event(noise_multiplier, sample_size, population)
    return replace_one_accountant().compose(event).rdp


@functools.cache
def _orders() -> np.ndarray:
    from dp_accounting.rdp import RdpAccountant

    return RdpAccountant().orders


def epsilon_of_rdp(rdp: np.ndarray, delta: float) -> float:
    """Epsilon at ``delta`` of RDP at the accountant's orders (its own conversion)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    return float(compute_epsilon(_orders(), rdp, delta)[0])
