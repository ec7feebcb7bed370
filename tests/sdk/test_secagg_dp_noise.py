"""Distributed DP under SecAgg: does the unmasked sum carry the noise the accountant assumed?

The accountant takes noise ``z C`` on the sum (sdk/secagg/dp.py). Each device adds a share of
std ``z C / sqrt(t)``; only the devices that masked are in the sum, so the guarantee needs the
server to release nothing from fewer than t of them. Measured here through the real protocol:
devices drop before masking, after masking, and below the threshold.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("cryptography")

from pflkit.sdk.secagg import dp  # noqa: E402
from pflkit.sdk.secagg.client import SecAggClient  # noqa: E402
from pflkit.sdk.secagg.messages import RoundFailed, RoundSetup  # noqa: E402
from pflkit.sdk.secagg.server import SecAggServer  # noqa: E402
from pflkit.sdk.secagg.wire import round_setup, threshold  # noqa: E402

Z, C, DIMENSION = 1.3, 0.5, 6000  # 6000 coordinates: the std is measured within ~1%


def _setup(roster: int, neighbours: int | None = None, dimension: int = DIMENSION
           ) -> RoundSetup:
    """The server's setup of a DP round (pfl-server's path: its clip range and t)."""
    config = {"secagg_threshold": 0.6, "secagg_neighbours": neighbours,
              "secagg_clip_range": 1.0, "dp_clip_norm": C, "dp_noise_multiplier": Z}
    schema = {"w": ([dimension], "F64")}
    return round_setup(config, 1, list(range(1, roster + 1)), "hash", schema)


def _round(setup: RoundSetup, masking: set[int], answering: set[int]) -> np.ndarray:
    """Zero changes privatized as a device does (seeded here); returns the unmasked sum."""
    server = SecAggServer(setup, seen_keys=set())
    devices = {c: SecAggClient(c, setup) for c in setup.roster}
    for device in devices.values():
        server.receive_keys(device.advertise_keys())
    directories = server.close_keys()
    for c, device in devices.items():
        server.receive_shares(device.share_keys(directories[c]))
    inboxes = server.close_shares()
    for c in sorted(masking):
        noised = dp.DpGrid.of(setup, C, Z).privatize(np.zeros(DIMENSION),
                                                     np.random.default_rng(c))
        server.receive_masked(devices[c].masked_input(inboxes[c], noised))
    request = server.close_masked()
    for c in sorted(answering):
        server.receive_unmask(devices[c].unmask(request))
    result = server.finish()
    assert result.survivors == tuple(sorted(masking))
    return result.total


def test_t_survivors_carry_the_accounted_noise_z_c():
    setup = _setup(5)  # complete graph: K = 5, t = 3
    assert setup.threshold == threshold(0.6, 5) == 3
    total = _round(setup, masking={1, 2, 3}, answering={1, 2, 3})  # 4 and 5 never mask
    assert float(total.std()) == pytest.approx(Z * C, rel=0.05)


def test_a_device_that_drops_after_masking_still_brings_its_noise_share():
    setup = _setup(6)  # t = 4; 6 never masks, 5 masks and never answers the unmask request
    total = _round(setup, masking={1, 2, 3, 4, 5}, answering={1, 2, 3, 4})
    assert float(total.std()) == pytest.approx(Z * C * np.sqrt(5 / 4), rel=0.05)
    assert dp.sum_noise_std(Z, C, setup.threshold, 5) >= Z * C


@pytest.mark.parametrize("roster, neighbours", [(5, None), (12, 4)])
def test_fewer_maskers_than_t_release_nothing(roster, neighbours):
    """Below t the sum would carry less than z C: the round fails before any unmasking."""
    setup = _setup(roster, neighbours)
    masking = set(range(1, setup.threshold))  # t - 1 devices mask
    with pytest.raises(RoundFailed, match="nothing unmasked"):
        _round(setup, masking=masking, answering=masking)


@pytest.mark.parametrize("survivors", range(3, 13))
def test_secagg_plus_shares_are_sized_for_its_small_threshold(survivors):
    """SecAgg+ (12 devices, k = 4): t = 3 of K = 5, so each share is z C / sqrt(3) and any
    quorum the server accepts (>= t maskers) carries at least z C."""
    setup = _setup(12, 4)
    assert setup.threshold == 3
    assert dp.noise_share_std(Z, C, setup.threshold) == pytest.approx(Z * C / np.sqrt(3))
    assert dp.sum_noise_std(Z, C, setup.threshold, survivors) >= Z * C


def test_the_quantizer_clips_a_noised_coordinate_with_negligible_probability():
    """A device clips its noised change to [-c, c] before masking; where that acts, the sum is
    no Gaussian mechanism and (epsilon, delta) holds only with delta + (1 + e^eps) p, p the
    chance any coordinate is clipped in the run. With c = C + 8 share stds, 100 rounds of 100
    devices and a 1M-parameter model at epsilon 8 gave p (1 + e^eps) = 0.037, far above
    delta = 1e-5; the server's c keeps it under 1e-3 delta."""
    roster, rounds, eps, delta = 100, 100, 8.0, 1e-5
    setup = _setup(roster, dimension=10 ** 6)
    share = dp.noise_share_std(Z, C, setup.threshold)
    # a coordinate of a clipped change is within C, so clipping needs noise over c - C
    per_coordinate = math.erfc((setup.clip_range - C) / (share * math.sqrt(2)))
    p = rounds * roster * setup.dimension * per_coordinate
    assert p * (1 + math.exp(eps)) <= 1e-3 * delta
