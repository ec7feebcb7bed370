"""Distributed DP's grid: what the server sums is what the accountant assumed (sdk/secagg_device).

The accountant takes the Gaussian mechanism on L2 sensitivity C. Rounding a clipped change to
the quantizer's grid can add up to sqrt(d) * step / 2 to its norm, and rounding a noised one
moves the sum by amounts that depend on the change; so a device rounds its change clipped to
``C - room`` and adds noise in whole grid steps. Checked here on vectors built to round outward
in every coordinate, and through the real protocol; hostile setups are refused in one line.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from secagg_harness import Round

from pflkit.sdk.secagg import dp, quantize, wire
from pflkit.sdk.secagg.dp import MIN_NOISE_STEPS, DpGrid, discrete_gaussian
from pflkit.sdk.secagg.messages import RoundSetup, SecAggError
from pflkit.sdk.secagg_device import private_change

GRIDS = [(3, 1.0, 1.0, 40_000), (100, 0.5, 1.0, 200_000), (10_000, 1.0, 0.5, 10_000),
         (2, 1e-3, 1e3, 50_000)]  # (devices, C, z, d): small and large rosters, z's extremes


def dp_setup(devices: int, clip: float, z: float, d: int) -> RoundSetup:
    """pfl-server's setup of a DP round: its t and clip range (complete graph)."""
    config = {"secagg_threshold": 0.6, "secagg_neighbours": None, "secagg_clip_range": 1.0,
              "dp_clip_norm": clip, "dp_noise_multiplier": z}
    return wire.round_setup(config, 1, list(range(devices)), "hash", {"w": ([d], "F64")})


def outward(setup: RoundSetup, clip: float, rng: np.random.Generator) -> np.ndarray:
    """Norm <= C, every coordinate just past a midpoint between levels, away from zero."""
    c, step, d = setup.clip_range, quantize.step(setup.clip_range, len(setup.roster)), \
        setup.dimension
    level = np.floor((clip / math.sqrt(d) + c) / step - 0.501)  # rounds up to level + 1
    size = (level + 0.501) * step - c
    x = np.full(d, size)
    x[:int((clip ** 2 - d * size ** 2) / ((size + step) ** 2 - size ** 2))] += step
    assert np.linalg.norm(x) <= clip and np.all(np.rint((x + c) / step) * step - c > x)
    return x * rng.choice([-1.0, 1.0], d)  # the grid and its midpoints are symmetric about 0


@pytest.mark.parametrize("devices, clip, z, d", GRIDS)
def test_a_rounded_change_never_exceeds_c_even_built_to_round_outward(devices, clip, z, d):
    setup = dp_setup(devices, clip, z, d)
    grid, rng = DpGrid.of(setup, clip, z), np.random.default_rng(devices)
    worst = 0.0
    for x in [outward(setup, clip, rng), *(rng.normal(0, s, d) for s in (1e-4, 1e-2, 1, 1e3))]:
        rounded = grid.rounded(x) * grid.step - grid.offset
        worst = max(worst, float(np.linalg.norm(rounded)))
        naive = quantize.quantize(x * min(1, clip / np.linalg.norm(x)), setup.clip_range,
                                  devices) * grid.step - grid.offset  # rounded without room
        assert np.linalg.norm(naive) <= clip + grid.rounding_room
    assert worst <= clip
    built = outward(setup, clip, rng)  # the room is needed: rounding alone goes past C
    naive = np.rint((built + grid.offset) / grid.step) * grid.step - grid.offset
    assert np.linalg.norm(naive) > clip + 0.9 * grid.rounding_room - 2 * grid.step


def test_what_a_device_sends_is_on_the_grid_so_quantizing_changes_nothing():
    setup = dp_setup(5, 0.5, 1.3, 3000)
    task = {"dp_clip_norm": 0.5, "dp_noise_multiplier": 1.3}
    sent = private_change(task, setup, np.random.default_rng(0).normal(0, 1, 3000))
    step = quantize.step(setup.clip_range, 5)
    levels = (sent + setup.clip_range) / step
    assert np.abs(levels - np.rint(levels)).max() < 1e-6  # noise in whole steps, no rounding
    assert np.array_equal(quantize.quantize(sent, setup.clip_range, 5), np.rint(levels))


def test_the_server_sum_carries_z_c_in_whole_steps_and_drops_keep_it():
    clip, z, d = 0.5, 1.3, 6000
    setup = dp_setup(5, clip, z, d)  # t = 3
    grid = DpGrid.of(setup, clip, z)
    task = {"dp_clip_norm": clip, "dp_noise_multiplier": z}
    changes = {c: np.random.default_rng(c).normal(0, 1, d) for c in setup.roster}
    sent = {c: private_change(task, setup, v) for c, v in changes.items()}
    # two mask and stop there: their shares stay in the sum; exactly t = 3 answer the unmask
    result = Round(setup, drops={3: "unmask", 4: "unmask"}).run(sent)
    assert result.survivors == (0, 1, 2, 3, 4)
    data = sum(grid.rounded(v) for v in changes.values()) * grid.step - 5 * grid.offset
    noise = (result.total - data) / grid.step
    assert np.abs(noise - np.rint(noise)).max() < 1e-3  # the masks cancel, nothing wraps
    assert np.std(noise * grid.step) == pytest.approx(dp.sum_noise_std(z, clip, 3, 5),
                                                      rel=0.03)


def test_discrete_gaussian_has_the_named_distribution():
    rng = np.random.default_rng(7)
    for sigma in (MIN_NOISE_STEPS, 1e7):
        y = discrete_gaussian(sigma, (400_000,), rng)
        assert np.array_equal(y, np.rint(y)) and abs(y.mean()) < 0.01 * sigma
        assert y.std() == pytest.approx(sigma, rel=0.005)
    y = discrete_gaussian(1.0, (400_000,), rng)
    values = np.arange(-6, 7)
    pmf = np.exp(-values ** 2 / 2) / np.exp(-np.arange(-40, 41) ** 2 / 2).sum()
    assert np.abs(np.array([(y == v).mean() for v in values]) - pmf).max() < 3e-3


TASK = {"dp_clip_norm": 1.0, "dp_noise_multiplier": 1.0}


def test_a_grid_too_coarse_for_the_noise_share_is_refused_by_the_device():
    """10,000 devices at z = 1e-4: a share was 0.1 step, erased by the rounding (old code)."""
    setup = dp_setup(10_000, 1.0, 1e-4, 8)
    with pytest.raises(SecAggError, match=r"^secagg: the round's grid cannot carry DP: a noise "
                                          r"share is .* grid steps, under 4"):
        private_change({**TASK, "dp_noise_multiplier": 1e-4}, setup, np.ones(8))


def test_a_clip_range_without_room_for_the_noise_is_refused_by_the_device():
    """A server's c = C would clip most noise shares away: no Gaussian left on the sum."""
    honest = dp_setup(5, 1.0, 1.0, 8)
    for c in (1.0, honest.clip_range * 0.999):
        lying = RoundSetup(**{**honest.__dict__, "clip_range": c})
        with pytest.raises(SecAggError, match="is below C \\+ 16 noise share stds"):
            private_change(TASK, lying, np.ones(8))
    assert private_change(TASK, honest, np.ones(8)).shape == (8,)


def test_rounding_that_would_take_over_half_of_c_is_refused_at_creation():
    from pflkit.server.errors import Invalid
    from pflkit.server.secagg_rounds import refuse_unfit_secagg
    from pflkit.server.store import RunTerms

    config = {"secagg_threshold": 0.6, "secagg_neighbours": None, "secagg_clip_range": 1.0,
              "dp_clip_norm": 1.0, "dp_noise_multiplier": 1e3}
    big = {"w": ([2_000_000], "F32"), "steps": ([1], "I64")}

    def terms(**secagg):
        return RunTerms("fedavg", "twonn", {}, big, None, {**config, **secagg})

    with pytest.raises(Invalid, match="^run config: secagg with DP at 10000 devices per "
                                      "round: rounding 2000000 coordinates can add"):
        refuse_unfit_secagg(terms(), None)
    refuse_unfit_secagg(terms(), 100)  # 100 devices: a finer grid carries it
    refuse_unfit_secagg(terms(dp_noise_multiplier=None), None)  # no DP
    with pytest.raises(Invalid, match="a noise share is"):
        refuse_unfit_secagg(terms(dp_noise_multiplier=1e-4), None)
