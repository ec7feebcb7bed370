"""A device rebuilds its algorithm when anything it is built from changes, not only its names (s13).

Before: ``FederatedClient`` kept built algorithms under (run id, method, params, model), so a
task of the same run id with other ``num_classes``, ``input_shape`` or ``local`` settings (a
server whose database was reset while the app kept running, or a lying one) reused the algorithm
built for the first: the check of the device's data against the task was skipped, and it
trained the old head (or the old epochs) without a word.
"""

from __future__ import annotations

import pytest
import torch
from hostile_harness import device, json_answer

from pflkit.sdk.data.tensors import LabeledTensors

TOKEN = "pfe_" + "a" * 40


def task_wire(**changes: object) -> dict:
    return {"algorithm": "fedavg", "params": {}, "model": "twonn", "input_shape": [1, 8, 8],
            "num_classes": 10, "seed": 0, "total_rounds": 2,
            "lr_schedule": {"lr": 0.1, "decay": 1.0},
            "local": {"epochs": 1, "batch_size": 4, "momentum": 0.0, "weight_decay": 0.0},
            **changes}


@pytest.mark.parametrize("changes,problem", [
    ({"num_classes": 3}, "local data has label 9, the run's model has classes 0..2"),
    ({"input_shape": [64]}, "local data has inputs (1, 8, 8), the run's model expects (64,)"),
])
def test_a_task_of_the_previewed_run_is_checked_again_when_it_differs(tmp_path, hostile,
                                                                      changes, problem):
    """The device's rows fit the preview's task; the task's differs: refused before a download."""
    hostile.add(json_answer(200, {"run_id": 1, "config": task_wire()}),
                json_answer(200, {"client_id": 3, "secret": "pfc_" + "s" * 30}),
                json_answer(200, {"status": "train", "run_id": 1, "round": 0,
                                  "retry_after": 1.0, "global_hash": "0" * 64,
                                  "config": task_wire(**changes)}))
    data = LabeledTensors(torch.rand(10, 1, 8, 8), torch.arange(10))
    phone = device(tmp_path / "state", hostile, enrolled=False, token=TOKEN, data=data)
    try:
        with pytest.raises(ValueError) as refused:
            phone.step()
    finally:
        phone.close()
    assert str(refused.value) == problem
    assert [f"{asked.method} {asked.path}" for asked in hostile.served] == [
        "GET /v1/task/preview", "POST /v1/clients/enroll", "GET /v1/task"]
    assert not (tmp_path / "state" / "pending.safetensors").exists()
