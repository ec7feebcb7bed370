"""The device-clip check (``dp_clip_on_device``) refuses a float64 change too large to square.

Its norm and its rounding tolerance both overflowed to inf, and ``inf > inf`` is False: a
change of 1e200 per value was accepted as within C = 1 (docs/privacy.md says refused, 422).
"""

from __future__ import annotations

import pytest
import torch

from pflkit.sdk.aggregation_rules import clip_update
from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.clip_check import clip_problem
from pflkit.server.update_check import read_layout


def _problem(update: dict, global_state: dict, clip_norm: float) -> str | None:
    body = state_to_bytes(update)
    return clip_problem(body, read_layout(body), state_to_bytes(global_state), clip_norm)


@pytest.mark.parametrize("value", [1e160, 1e200, 1e300])
def test_a_float64_change_past_the_square_range_is_refused(value):
    start = {"w": torch.zeros(4, dtype=torch.float64)}
    problem = _problem({"w": torch.full((4,), value, dtype=torch.float64)}, start, 1.0)
    assert problem is not None and "over the round's clip norm 1" in problem


def test_a_clipped_float64_change_is_still_accepted():
    start = {"w": torch.full((4,), 3.0, dtype=torch.float64)}
    big = {"w": torch.full((4,), 1e200, dtype=torch.float64)}
    assert _problem(clip_update(start, big, 1.0), start, 1.0) is None
