"""What one request may cost the server: its head is bounded (431), failed authentications are
throttled per address (429 + Retry-After, which the SDK waits out). A real server on loopback."""

from __future__ import annotations

import http.client
import socket
import time

import httpx
import pytest
import torch
from server_harness import Server, run_toml

from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors

FAILURES = 5  # the server's failed-authentication limit per address
WINDOW = 4  # seconds


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    server = Server(root / "server", run_toml("fedavg", rounds=1),
                    ["--min-enrolled", "100", "--auth-failure-limit", str(FAILURES),
                     "--auth-failure-window", str(WINDOW), "--max-header-bytes", "8192"])
    server.root.mkdir()
    server.start()
    yield server
    server.stop()


def raw_request(server: Server, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def test_an_oversized_request_head_is_refused_with_431(server):
    huge = b"GET /v1/task HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"a" * 2**20 + \
        b"\r\n\r\n"
    assert raw_request(server, huge).startswith(b"HTTP/1.1 431 ")
    many = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: 0123456789\r\n" * 2000 + b"\r\n"
    assert raw_request(server, many).startswith(b"HTTP/1.1 431 ")
    assert httpx.get(f"{server.url}/v1/health").status_code == 200


def test_an_idle_connection_stays_open_past_uvicorns_default_keep_alive(server):
    """uvicorn closes idle connections after 5 s by default: a client reusing one as the
    server closed it got a dropped connection (httpx.ReadError in bench-server)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("GET", "/v1/health")
    assert connection.getresponse().read() and connection.sock is not None
    sock = connection.sock
    time.sleep(6)
    connection.request("GET", "/v1/health")  # on the same socket: no reconnection
    assert connection.getresponse().status == 200 and connection.sock is sock
    connection.close()


def via(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def test_failed_authentication_is_throttled_per_address_and_the_sdk_waits(server, tmp_path):
    client_id, secret = server.enroll()
    good = {"Authorization": f"Bearer {secret}"}
    task = f"{server.url}/v1/task"
    with via("127.0.0.3") as attacker:
        codes = [attacker.get(task, headers={"Authorization": f"Bearer pfc_guess{i}"}
                              ).status_code for i in range(FAILURES)]
        assert codes == [401] * FAILURES
        throttled = attacker.get(task, headers=good)  # even a right secret: no lookup at all
        assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) >= 1
        enroll = attacker.post(f"{server.url}/v1/clients/enroll", json={"token": "pfe_x"})
        assert enroll.status_code == 429
    with via("127.0.0.2") as neighbour:
        assert neighbour.get(task, headers=good).status_code == 200
    with via("127.0.0.1") as device:  # the SDK's address: fail it up to the limit
        for i in range(FAILURES):
            assert device.get(task, headers={"Authorization": f"Bearer x{i}"}).status_code == 401
        assert device.get(task, headers=good).status_code == 429
    state = tmp_path / "device"
    state.mkdir()
    (state / "credentials.json").write_text(
        f'{{"server": "{server.url}", "client_id": {client_id}, "secret": "{secret}"}}')
    sdk = FederatedClient(server.url, state, LabeledTensors(torch.zeros(1, 1, 28, 28),
                                                            torch.zeros(1, dtype=torch.long)),
                          retry=RetryPolicy(base=0.01, cap=0.02, max_elapsed=60))
    started = time.monotonic()
    step = sdk.step()  # 429 + Retry-After: waits, then polls successfully
    assert step.status == "wait" and time.monotonic() - started >= 1
    sdk.close()
