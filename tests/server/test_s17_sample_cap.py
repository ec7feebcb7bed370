"""A device with more rows than the server's ``max_num_samples`` takes part, weighing the limit.

Before: the limit was not in the task, so such a device could not know it: its upload got 422,
kept as the pending round and re-sent (422 again) at every step until the round closed; a
round trained before the operator lowered the limit was likewise refused at every re-send,
even once the device's data had shrunk. Now a train task carries ``max_num_samples`` and the
SDK reports ``min(rows, max_num_samples)``, as DP-FedAvg caps a client's weight. Real
pfl-server processes on loopback, one device sampled every round.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import torch
from server_harness import run_toml
from waiting import GUARD

from pflkit.sdk import protocol
from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.pending_round import PendingRound
from pflkit.server.api.schemas import TaskPublic

ROWS = 20


def rows() -> LabeledTensors:
    generator = torch.Generator().manual_seed(0)
    return LabeledTensors(torch.rand(ROWS, 1, 28, 28, generator=generator),
                          torch.arange(ROWS) % 10)


def samples_of(status: dict, round_index: int) -> int:
    return status["history"][round_index]["metrics"]["samples"]


def test_a_device_over_the_limit_reports_the_limit_even_for_a_round_trained_before_it_fell(
        make_server, tmp_path):
    server = make_server(run_toml("fedavg", rounds=2, num_clients=3, per_round=1),
                         "--min-enrolled", "1", "--max-num-samples", "15")
    device = FederatedClient(server.url, tmp_path / "device", rows(), token=server.token(),
                             retry=RetryPolicy(cap=0.5, max_elapsed=GUARD))
    run_id = server.wait_for(lambda s: s["current_round"] is not None)["id"]
    assert device.step().status == "trained"  # 20 rows, reported as 15 (before: 422)
    status = server.wait_for(lambda s: s["rounds_done"] == 1)
    assert samples_of(status, 0) == 15

    # round 1 trained, then its upload meets a pause; the operator lowers the limit meanwhile
    server.wait_for(lambda s: s["current_round"] is not None and s["current_round"]["index"] == 1)
    task = device.connection.request("GET", "/v1/task",
                                     secret=device.files.read_credentials()["secret"]).json()
    assert (task["status"], task[protocol.MAX_NUM_SAMPLES_KEY]) == ("train", 15)
    admin = server.admin()

    def pause_before_the_upload(request: httpx.Request) -> None:
        if request.method == "PUT":
            admin.post(f"/v1/runs/{run_id}/pause").raise_for_status()

    device.connection.http.event_hooks["request"].append(pause_before_the_upload)
    assert device.step().status == "wait"
    device.connection.http.event_hooks["request"].clear()
    pending = PendingRound.load(device.state_dir / "pending.safetensors")
    assert pending is not None and (pending.round, pending.num_samples) == (1, ROWS)
    server.stop()
    server.flags[-1] = "12"  # --max-num-samples 12
    server.start()
    admin.post(f"/v1/runs/{run_id}/resume").raise_for_status()  # same port: it reconnects
    admin.close()

    step = device.step()  # the kept bytes, weighing the new limit (before: 422 at every step)
    assert (step.status, step.round) == ("trained", 1)
    status = server.wait_for(lambda s: s["rounds_done"] == 2)
    assert samples_of(status, 1) == 12
    assert not (device.state_dir / "pending.safetensors").exists()
    device.close()


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "10", 10**9 + 1, [10]])
def test_a_task_with_a_limit_out_of_range_is_refused_in_one_line(limit):
    task = {"status": "train", "retry_after": 1, protocol.MAX_NUM_SAMPLES_KEY: limit}
    assert protocol.task_problem(task) == "max_num_samples must be an integer in [1, 1000000000]"


def test_the_weight_is_the_rows_up_to_the_limit_and_the_rows_without_one():
    assert protocol.upload_weight(20, {protocol.MAX_NUM_SAMPLES_KEY: 15}) == 15
    assert protocol.upload_weight(10, {protocol.MAX_NUM_SAMPLES_KEY: 15}) == 10
    assert protocol.upload_weight(0, {protocol.MAX_NUM_SAMPLES_KEY: 1}) == 0
    assert protocol.upload_weight(20, {}) == 20  # an older server's task: no limit stated


def test_the_server_the_schema_and_the_java_client_name_the_same_limit():
    wire = (Path(__file__).resolve().parents[2]
            / "android-demo/core/src/main/java/org/pflkit/core/fl/Wire.java").read_text()
    assert f'MAX_NUM_SAMPLES_KEY = "{protocol.MAX_NUM_SAMPLES_KEY}";' in wire
    java_max = re.search(r"long MAX_NUM_SAMPLES = ([\d_]+)L;", wire)
    assert java_max is not None and int(java_max[1]) == protocol.MAX_NUM_SAMPLES
    assert protocol.MAX_NUM_SAMPLES_KEY in TaskPublic.model_fields
