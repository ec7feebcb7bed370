"""The finished run's personalized model is built from that run's state, never an earlier run's.

Before: a device never sampled in run 2 (FedPer: no post-federation stage) relabelled the state
it kept from run 1 as run 2's at the finish, and ``personalized_model()`` silently put run 1's
personal head on run 2's model; and a run finished again under the same id with another config
(recreated on the server) was taken as already done, its config never read. The server is a
real one on loopback (hostile_harness.py) that says the run is finished.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from hostile_harness import answer, device, json_answer, serving
from upload_harness import SHAPE, algorithm, wire

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.state_store import DeviceStateStore, config_digest
from pflkit.sdk.tensorio import state_to_bytes

HEAD = {"head.weight": torch.full((10, 200), 7.0), "head.bias": torch.zeros(10)}


def finished(run_id: int, config: dict) -> tuple[dict, bytes]:
    blob = state_to_bytes(algorithm("fedper").aggregation.init_global(config["seed"]))
    return {"status": "finished", "run_id": run_id, "round": 2, "retry_after": 0.0,
            "global_hash": hashlib.sha256(blob).hexdigest(), "config": config}, blob


def keep(tmp_path, cache: dict) -> bytes:
    """The device's state folder as an earlier run left it: FedPer's personal head, all 7."""
    DeviceStateStore(tmp_path).save(ClientState(HEAD))
    (tmp_path / "cache.json").write_text(json.dumps(cache))
    return (tmp_path / DeviceStateStore.FILE).read_bytes()


def rows() -> LabeledTensors:
    return LabeledTensors(torch.rand(8, *SHAPE), torch.arange(8))


def test_a_run_this_device_never_trained_in_is_personalized_from_a_fresh_state(tmp_path):
    keep(tmp_path, {"state_run": 1})  # trained in run 1, never sampled in run 2
    task, blob = finished(2, wire("fedper"))
    with serving() as server:
        client = device(tmp_path, server, data=rows())
        server.add(json_answer(200, task), answer(200, blob))
        assert client.step().status == "finished"
        model = client.personalized_model()
        client.close()
    start = algorithm("fedper").aggregation.init_global(task["config"]["seed"])
    assert torch.equal(model.head.weight.detach(), start["head.weight"])  # not run 1's head


def test_a_run_finished_again_under_its_id_with_another_config_is_refused_not_skipped(
        tmp_path):
    before, now = wire("fedper"), {**wire("fedper"), "seed": 4}
    kept = keep(tmp_path, {"state_run": 1, "state_config": config_digest(before),
                           "finished_run": 1, "config": before})
    task, blob = finished(1, now)
    with serving() as server:
        client = device(tmp_path, server, data=rows())
        server.add(json_answer(200, task), answer(200, blob))
        with pytest.raises(ValueError, match="this device's state of run 1 was trained under "
                                             "another config of that run"):
            client.step()
        client.close()
    assert (tmp_path / DeviceStateStore.FILE).read_bytes() == kept
