"""DP and secure-aggregation inputs at their edges: refused in one line, never misread.

Before: ``epsilon`` of a NaN noise multiplier was a finite 0.697 (an understated privacy loss)
and of delta = 1 was 0; a sample larger than the population was an AssertionError; a target
epsilon of 0 calibrated a multiplier instead of being refused. A task whose SecAgg setup
carried ``dp_clip_norm`` without ``dp_noise_multiplier`` made the device send its change
unclipped and unnoised, and a setup of the wrong types was a TypeError or KeyError traceback.
DP under SecAgg was accounted with sampling amplification against the server that draws
the sample: 10.7 shown where 166 is spent (50 rounds of 10 of 1000 clients, z = 1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.privacy_accounting import calibrate_noise, dp_rounds, epsilon
from pflkit.sdk.secagg.messages import SecAggError
from pflkit.sdk.secagg.wire import setup_from_wire
from pflkit.sdk.secagg_device import private_change

GOOD = (1.0, 3, 10, 2, 1e-5)  # noise multiplier, sample size, population, rounds, delta


@pytest.mark.parametrize("index, value, message", [
    (0, math.nan, "noise_multiplier must be a finite number > 0"),
    (0, 0.0, "noise_multiplier must be a finite number > 0"),
    (0, -1.0, "noise_multiplier must be a finite number > 0"),
    (0, True, "noise_multiplier must be a finite number > 0"),
    (1, 11, r"sample_size must be in \[1, population\]"),
    (1, 0, r"sample_size must be in \[1, population\]"),
    (3, -1, "rounds must be an integer >= 0"),
    (4, 1.0, r"delta must be in \(0, 1\)"),
    (4, 0.0, r"delta must be in \(0, 1\)"),
    (4, math.nan, r"delta must be in \(0, 1\)"),
])
def test_epsilon_refuses_terms_it_would_misread(index, value, message):
    terms = list(GOOD)
    terms[index] = value
    with pytest.raises(ValueError, match=f"^{message}"):
        epsilon(*terms)


@pytest.mark.parametrize("target, rounds", [(0.0, 10), (math.inf, 10), (math.nan, 10),
                                            (1.0, 0)])
def test_calibration_refuses_a_target_it_cannot_meet(target, rounds):
    with pytest.raises(ValueError, match="^(target_epsilon|rounds) must be"):
        calibrate_noise(target_epsilon=target, delta=1e-5, rounds=rounds, sample_size=3,
                        population=10)


SETUP = {"round_id": 1, "roster": [1, 2, 3], "threshold": 2, "neighbours": 2, "dimension": 4,
         "clip_range": 1.0, "graph_seed": "cHVibGlj"}


@pytest.mark.parametrize("change", [
    "not an object", {"roster": None}, {"roster": ["1", "2", "3"]}, {"threshold": 2.5},
    {"threshold": True}, {"dimension": "4"}, {"clip_range": "1"}, {"clip_range": math.nan},
    {"round_id": None}, {"graph_seed": 7}, {"roster": list(range(10_001))}, {"threshold": 9},
])
def test_a_hostile_secagg_setup_is_a_secagg_error(change):
    data = change if isinstance(change, str) else {**SETUP, **change}
    assert setup_from_wire(SETUP).threshold == 2
    with pytest.raises(SecAggError, match="^(secagg|graph_seed)"):
        setup_from_wire(data)


@pytest.mark.parametrize("clip, noise", [(1.0, None), (None, 1.0), (0.0, 1.0), (1.0, math.nan),
                                         (1.0, -1.0), (True, 1.0), ("1", 1.0), (1.0, 1e9)])
def test_half_or_out_of_range_dp_in_a_secagg_task_is_refused_not_skipped(clip, noise):
    change = np.full(4, 10.0)
    task = {"dp_clip_norm": clip, "dp_noise_multiplier": noise}
    grid = setup_from_wire({**SETUP, "clip_range": 2.0})  # room for C + 16 noise share stds
    with pytest.raises(SecAggError, match="^secagg: the task's dp_clip_norm and "):
        private_change(task, grid, change)
    assert np.array_equal(private_change({}, grid, change), change)  # no DP: sent as it is
    clipped = private_change({"dp_clip_norm": 1.0, "dp_noise_multiplier": 1e-6}, grid, change)
    assert abs(float(np.linalg.norm(clipped)) - 1.0) < 1e-3


def test_a_secagg_step_answer_that_is_not_a_json_object_is_one_line(tmp_path):
    """A key directory nested 100,000 deep was a RecursionError traceback."""
    import httpx

    from pflkit.sdk.device_files import DeviceFiles
    from pflkit.sdk.secagg_device import take_part

    def request(method: str, path: str, **_: object) -> httpx.Response:
        return httpx.Response(200, content=b"[" * 100_000 + b"]" * 100_000 if method == "GET"
                              else b'{"duplicate": false}')

    task = {"run_id": 1, "round": 0, "secagg": SETUP}
    with pytest.raises(ValueError, match="^secagg keys: the server's answer is not JSON$"):
        take_part(request, 2, task, np.zeros(4), DeviceFiles(tmp_path))


def test_secagg_dp_is_accounted_without_sampling_amplification():
    """The server draws the sample and tells the devices: subsampling hides nobody from it."""
    central = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.0)
    secagg = AggregationConfig(secagg=True, dp_clip_norm=0.5, dp_noise_multiplier=1.0)
    assert dp_rounds(central, 1000, 10, 50).epsilon(50) == epsilon(1.0, 10, 1000, 50, 1e-5)
    # 50 rounds of 10 of 1000: 10.7 with amplification, 166 against the server
    assert dp_rounds(secagg, 1000, 10, 50).epsilon(50) == epsilon(1.0, 10, 10, 50, 1e-5)
    # and the status and the model card say so
    from pflkit.export.privacy_card import privacy_block
    from pflkit.server.privacy_status import privacy_status
    assert "no amplification" in privacy_status(secagg, [])["accountant"]
    assert "fixed-size sampling" in privacy_status(central, [])["accountant"]
    spent = {"dp_epsilon": 166.0, "dp_delta": 1e-5, "dp_noise_multiplier": 1.0}
    card = privacy_block(secagg, 50, spent, 1000, 10, ["w"])
    assert "not amplifying" in card["sampling"]["kind"] and "no amplification" in card["accountant"]
