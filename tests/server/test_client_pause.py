"""A device never trains a round twice: a pause between its training and the server's
acknowledgement keeps the trained round (bytes and private state) until it is uploaded.
A real server, the SDK client, FedPer (its personal head is private state that training
advances, so training twice would show)."""

from __future__ import annotations

import hashlib

import httpx
import torch
from server_harness import run_toml
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.tensorio import state_from_bytes


def test_a_pause_before_the_upload_keeps_the_trained_round_for_after_the_resume(
        make_server, tmp_path):
    server = make_server(run_toml("fedper", rounds=2, num_clients=3, per_round=1),
                         "--min-enrolled", "1")
    generator = torch.Generator().manual_seed(0)
    data = LabeledTensors(torch.rand(20, 1, 28, 28, generator=generator), torch.arange(20) % 10)
    device = FederatedClient(server.url, tmp_path / "device", data, token=server.token(),
                             retry=RetryPolicy(cap=0.5, max_elapsed=GUARD))
    run_id = server.wait_for(lambda s: s["current_round"] is not None)["id"]
    admin = server.admin()

    def pause_before_the_upload(request: httpx.Request) -> None:
        if request.method == "PUT":
            admin.post(f"/v1/runs/{run_id}/pause").raise_for_status()

    device.connection.http.event_hooks["request"].append(pause_before_the_upload)
    first = device.step()  # trains round 0; the upload meets the pause (409)
    device.connection.http.event_hooks["request"].clear()
    assert (first.status, first.round) == ("wait", 0)
    pending_file = device.state_dir / "pending.safetensors"
    pending = state_from_bytes(pending_file.read_bytes())
    upload_sha = hashlib.sha256(pending["upload"].numpy().tobytes()).hexdigest()
    trained_once = {k.removeprefix("state/"): v for k, v in pending.items()
                    if k.startswith("state/")}
    assert trained_once

    assert device.step().status == "paused"
    assert pending_file.exists()  # the paused poll must not commit or drop the trained round
    admin.post(f"/v1/runs/{run_id}/resume").raise_for_status()
    resumed = device.step()
    assert (resumed.status, resumed.round) == ("trained", 0)
    status = server.wait_for(lambda s: s["rounds_done"] == 1)
    assert status["history"][0]["metrics"]["participants"] == 1
    assert (server.data_dir / "blobs" / upload_sha[:2] / upload_sha).is_file()  # the same bytes
    state = device.store.load()
    assert state is not None and sorted(state.tensors) == sorted(trained_once)
    assert all(torch.equal(state.tensors[k], trained_once[k]) for k in trained_once)
    admin.close()
    device.close()
