"""The learning-rate schedule: one object for the run config, the task a device gets, the server."""

from __future__ import annotations

import pytest

from pflkit.sdk.lr_schedule import MIN_LR, LearningRateSchedule
from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.run_config import ConfigError
from pflkit.sdk.task_config import TaskConfig

WIRE = {"algorithm": "fedavg", "params": {}, "model": "twonn", "input_shape": [1, 8, 8],
        "num_classes": 10, "seed": 0, "total_rounds": 4,
        "lr_schedule": {"lr": 0.05, "decay": 0.9},
        "local": {"epochs": 1, "batch_size": 4, "momentum": 0.0, "weight_decay": 0.0}}


def test_a_rounds_rate_decays_exponentially():
    schedule = LearningRateSchedule(0.05, 0.9)
    assert [schedule.at(r) for r in range(3)] == [0.05, 0.05 * 0.9, 0.05 * 0.9**2]


def test_a_device_computes_each_rounds_rate_from_the_task():
    task = TaskConfig.from_wire(WIRE, ImportPolicy())
    for r in range(5):  # 4: the post-federation stage
        ctx = task.context(r, client_id=3)
        assert (ctx.round, ctx.total_rounds, ctx.client_id) == (r, 4, 3)
        assert ctx.lr == 0.05 * 0.9**r


@pytest.mark.parametrize("schedule,message", [
    ({"lr": 0.0, "decay": 0.9}, "lr_schedule.lr: must be in (0, 10], got 0.0"),
    ({"lr": 0.1, "decay": 1.5}, "lr_schedule.decay: must be in (0, 1], got 1.5"),
    ({"lr": 0.1, "decay": 0.9, "rounds": 3}, "lr_schedule.rounds: unknown key (known: lr, decay)"),
])
def test_a_malformed_schedule_in_a_task_is_one_line_naming_the_key(schedule, message):
    with pytest.raises(ConfigError) as err:
        TaskConfig.from_wire({**WIRE, "lr_schedule": schedule}, ImportPolicy())
    assert str(err.value) == f"task config: {message}"


def test_a_schedule_whose_rate_would_reach_zero_within_the_run_is_refused():
    LearningRateSchedule(1.0, 0.5).check_until(126)  # 2 ** -126 is MIN_LR itself
    with pytest.raises(ValueError, match=f"= 1 x 0.5 \\*\\* 127 = .* is below {MIN_LR:.3g}"):
        LearningRateSchedule(1.0, 0.5).check_until(127)
