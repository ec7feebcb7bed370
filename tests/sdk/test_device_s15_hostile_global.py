"""A server whose global state is not the run's model: a one-line refusal, nothing trained.

Before: a global state with a tensor of another shape, a tensor missing or one the model does
not have reached ``load_state_dict`` inside training, and the device stopped with torch's
multi-line RuntimeError (pfl-client: a traceback). The server is a real one on loopback
(hostile_harness.py), the state the method's own initial global, edited.
"""

from __future__ import annotations

import hashlib
import re

import pytest
import torch
from hostile_harness import answer, device, json_answer, serving
from upload_harness import SHAPE, algorithm, wire

from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.tensorio import State, state_to_bytes

FIRST = "body.1.weight"  # the twonn's first layer: (200, 16) on 1x4x4 inputs
EDITS = {
    "reshaped": (lambda s: {**s, FIRST: torch.zeros(3, 3)}, f"tensor {FIRST} is (3, 3), the "
                 "model's (200, 16)"),
    "missing": (lambda s: {k: v for k, v in s.items() if k != FIRST}, f"tensor {FIRST} is "
                "missing, the model's (200, 16)"),
    "unknown": (lambda s: {**s, "a.bogus": torch.zeros(2)}, "tensor a.bogus is (2,), the "
                "model's none"),
}


def train_task(digest: str, config: dict) -> dict:
    return {"status": "train", "run_id": 1, "round": 0, "retry_after": 0.0,
            "global_hash": digest, "config": config}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_global_state_of_another_model_is_refused_in_one_line(tmp_path, edit):
    change, problem = EDITS[edit]
    config = wire("fedavg")
    start: State = algorithm("fedavg").aggregation.init_global(config["seed"])
    blob = state_to_bytes(change(start))
    digest = hashlib.sha256(blob).hexdigest()
    data = LabeledTensors(torch.rand(8, *SHAPE), torch.arange(8))
    with serving() as server:
        client = device(tmp_path, server, data=data)
        server.add(json_answer(200, train_task(digest, config)), answer(200, blob))
        with pytest.raises(ValueError, match=f"^global state {digest}: not the run's model "
                           f"\\({re.escape(problem)}\\)$"):
            client.step()
        assert [s.method for s in server.served] == ["GET", "GET"]  # nothing uploaded
        assert not (tmp_path / "pending.safetensors").exists()  # nothing trained
        client.close()


def test_the_runs_own_global_state_trains_and_is_uploaded(tmp_path):
    config = wire("fedavg")
    blob = state_to_bytes(algorithm("fedavg").aggregation.init_global(config["seed"]))
    digest = hashlib.sha256(blob).hexdigest()
    with serving() as server:
        client = device(tmp_path, server, data=LabeledTensors(torch.rand(8, *SHAPE),
                                                              torch.arange(8)))
        server.add(json_answer(200, train_task(digest, config)), answer(200, blob),
                   json_answer(200, {"accepted": True}))
        assert client.step().status == "trained"
        assert server.finished().method == "PUT"
        client.close()
