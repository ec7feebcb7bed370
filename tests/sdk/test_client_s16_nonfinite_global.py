"""A global state with NaN or Inf from the server: refused in one line that names the server's.

Before: the device trained on it, its fit came out NaN, and it reported "local training
diverged" (status ``diverged``): the device's own training was blamed for the server's state.
Now nothing is trained on it, nothing is uploaded, the device's state stays. The server is a
real one on loopback (hostile_harness.py), the state the method's own initial global with one
value replaced.
"""

from __future__ import annotations

import hashlib
import math

import pytest
import torch
from hostile_harness import answer, device, json_answer, serving
from upload_harness import SHAPE, algorithm, wire

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.state_store import DeviceStateStore
from pflkit.sdk.tensorio import state_to_bytes

BAD = "body.1.weight"  # the twonn's first layer, the first in name order


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_global_state_is_refused_as_the_servers(tmp_path, value):
    config = wire("fedavg")
    start = algorithm("fedavg").aggregation.init_global(config["seed"])
    start[BAD] = start[BAD].clone()
    start[BAD][0, 0] = value
    blob = state_to_bytes(start)
    digest = hashlib.sha256(blob).hexdigest()
    task = {"status": "train", "run_id": 1, "round": 0, "retry_after": 0.0,
            "global_hash": digest, "config": config}
    mine = ClientState({"personal.w": torch.arange(3.0)}, {"seen": 1})
    DeviceStateStore(tmp_path).save(mine)
    kept = (tmp_path / DeviceStateStore.FILE).read_bytes()
    with serving() as server:
        client = device(tmp_path, server, data=LabeledTensors(torch.rand(8, *SHAPE),
                                                              torch.arange(8)))
        server.add(json_answer(200, task), answer(200, blob))
        with pytest.raises(ValueError) as refused:
            client.step()
        assert str(refused.value) == (
            f"global state {digest}: the server's global state holds NaN or Inf (tensor "
            f"{BAD}); nothing is trained on it or uploaded and the device keeps its state: "
            "the run's operator must act")
        assert [s.method for s in server.served] == ["GET", "GET"]  # nothing uploaded
        client.close()
    assert not (tmp_path / "pending.safetensors").exists()  # nothing trained
    assert (tmp_path / DeviceStateStore.FILE).read_bytes() == kept
    assert "diverged" not in (tmp_path / "cache.json").read_text()
