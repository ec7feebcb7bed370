"""Enrollment over HTTP as the docs describe it: the admin issues plain tokens (no reserved id),
devices trade them with the SDK. On a real uvicorn server, SQLite then PostgreSQL."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import torch
from server_harness import BIN, run_toml
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy, save_client_data
from pflkit.sdk.data.tensors import LabeledTensors

DEVICES = 20
DATA = LabeledTensors(torch.zeros(4, 1, 28, 28), torch.arange(4))


def device(server, root, name: str, token: str) -> int:
    client = FederatedClient(server.url, root / name, DATA, token=token,
                             retry=RetryPolicy(cap=0.5, max_elapsed=GUARD))
    client.close()
    return client.client_id


def test_twenty_devices_enroll_with_plain_tokens_one_by_one_then_all_at_once(
        database_url, make_server, tmp_path):
    database = ["--database-url", database_url] if database_url else []
    server = make_server(run_toml("fedavg", rounds=1, num_clients=3), "--min-enrolled", "100",
                         *database)
    one_by_one = [device(server, tmp_path, f"seq{i}", server.token()) for i in range(DEVICES)]
    assert one_by_one == list(range(DEVICES))
    tokens = [server.token() for _ in range(DEVICES)]
    with ThreadPoolExecutor(DEVICES) as pool:
        at_once = list(pool.map(lambda i: device(server, tmp_path, f"par{i}", tokens[i]),
                                range(DEVICES)))
    assert sorted(at_once) == list(range(DEVICES, 2 * DEVICES))
    with server.admin() as http:
        listed = [c["id"] for c in http.get("/v1/clients").raise_for_status().json()]
    assert listed == list(range(2 * DEVICES))


def test_ids_stay_in_range_when_the_highest_id_is_reserved(database_url, make_server, tmp_path):
    """Reserving 2^31-1 must not push the next plain enrollment to 2^31 (unrevocable)."""
    database = ["--database-url", database_url] if database_url else []
    server = make_server(run_toml("fedavg", rounds=1, num_clients=3), "--min-enrolled", "100",
                         *database)
    top = 2**31 - 1
    assert device(server, tmp_path, "top", server.token(top)) == top
    ids = [device(server, tmp_path, f"d{i}", server.token()) for i in range(2)]
    assert all(0 <= cid < top for cid in ids) and len(set(ids)) == 2
    with server.admin() as http:
        for cid in [*ids, top]:
            assert http.post(f"/v1/clients/{cid}/revoke").status_code == 204
        assert http.post("/v1/enrollment-tokens", json={"client_id": top + 1}).status_code == 422
    assert httpx.get(f"{server.url}/v1/health").status_code == 200


def test_a_device_that_cannot_train_the_run_refuses_before_spending_its_token(make_server,
                                                                            tmp_path):
    """pfl-client checks the run's task before enrolling: it used to enroll (spending the
    token, then being sampled) and fail only at training, leaving the round to its deadline."""
    server = make_server(run_toml("fedavg", rounds=1, num_clients=3), "--min-enrolled", "1")
    token = server.token()
    preview = httpx.get(f"{server.url}/v1/task/preview",
                        headers={"Authorization": f"Bearer {token}"}).json()
    assert (preview["config"]["model"], preview["config"]["input_shape"]) == ("twonn",
                                                                             [1, 28, 28])
    assert httpx.get(f"{server.url}/v1/task/preview",
                     headers={"Authorization": "Bearer pfe_unknown"}).status_code == 401

    folder = tmp_path / "device"
    save_client_data(folder / "data.safetensors",  # 8x8 inputs; the run's model takes 28x28
                     LabeledTensors(torch.rand(4, 1, 8, 8), torch.arange(4)))
    done = subprocess.run([str(BIN / "pfl-client"), "--server", server.url, "--data",
                           str(folder), "--token", token, "--threads", "1"],
                          capture_output=True, text=True, timeout=GUARD)
    # one line, no INFO line per HTTP request (httpx's logger is quiet unless --log-level debug)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "pfl-client: local data has inputs (1, 8, 8), the run's model expects (1, 28, 28)"]
    assert server.status()["enrolled_clients"] == 0  # neither enrolled nor sampled
    save_client_data(folder / "data.safetensors",  # labels 0..10: the run has 10 classes
                     LabeledTensors(torch.rand(11, 1, 28, 28), torch.arange(11)))
    done = subprocess.run([str(BIN / "pfl-client"), "--server", server.url, "--data",
                           str(folder), "--token", token, "--threads", "1"],
                          capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 1 and done.stderr.splitlines() == [  # was an IndexError in fit
        "pfl-client: local data has label 10, the run's model has classes 0..9"]
    assert server.status()["enrolled_clients"] == 0
    assert device(server, tmp_path, "good", token) == 0  # the token is still valid
    with server.admin() as http:  # a used token previews as enrollment would answer
        assert httpx.get(f"{server.url}/v1/task/preview",
                         headers={"Authorization": f"Bearer {token}"}).status_code == 409
        assert http.post("/v1/runs/1/stop").status_code == 200
    fresh = server.token()
    assert httpx.get(f"{server.url}/v1/task/preview", headers={
        "Authorization": f"Bearer {fresh}"}).json() == {"run_id": None, "config": None}
