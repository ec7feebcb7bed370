"""Enrollment over HTTP as the docs describe it: the admin issues plain tokens (no reserved id),
devices trade them with the SDK. On a real uvicorn server, SQLite then PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import torch
from server_harness import run_toml

from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors

DEVICES = 20
DATA = LabeledTensors(torch.zeros(4, 1, 28, 28), torch.arange(4))


def device(server, root, name: str, token: str) -> int:
    client = FederatedClient(server.url, root / name, DATA, token=token,
                             retry=RetryPolicy(cap=0.5, max_elapsed=60))
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
