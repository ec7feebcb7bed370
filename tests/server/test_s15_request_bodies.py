"""Request bodies: one that stops arriving gets 408 and its connection closed (body_timeout);
a JSON object that names a key twice gets 400.

Before: only the head was timed. A body that stalled after its head held the connection and the
bytes received so far for ever: an enrollment (no credentials needed) of 900 kB that stopped
was still open, unanswered, 45 s later on a server with a 30 s header_timeout. And
``{"client_id": 5, "client_id": 6}`` issued a token for client 6: the last key won, where a
proxy or another parser may read the first (the SDK refuses such answers for that reason).
"""

from __future__ import annotations

import socket

import httpx
import pytest
from api_harness import auth, open_round, upload, valid_update
from pydantic import ValidationError
from server_harness import ADMIN, Server, run_toml
from waiting import GUARD

from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.settings import ServerSettings, explain

PAUSE = 1  # the server's body_timeout, seconds


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("stalled")
    server = Server(root / "server", run_toml("fedavg", rounds=5),
                    ["--min-enrolled", "3", "--min-clients", "2", "--body-timeout", str(PAUSE)])
    server.root.mkdir()
    server.start()
    yield server
    server.stop()


def stalled(server: Server, head: bytes, body_start: bytes) -> bytes:
    """Send a head and part of its body, then nothing: what the server answers before closing."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as sock:
        sock.sendall(head + body_start)
        reply = b""
        while chunk := sock.recv(65536):  # the server closes it (the timeout: a hang guard)
            reply += chunk
    return reply


def test_an_enrollment_body_that_stops_gets_408_and_its_connection_closed(server):
    head = (b"POST /v1/clients/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n")
    reply = stalled(server, head, b'{"token": "' + b"a" * 900_000)
    status, _, rest = reply.partition(b"\r\n")
    assert status == b"HTTP/1.1 408 Request Timeout", reply[:300]
    assert b"connection: close" in rest.lower() and b"retry-after: 1" in rest.lower()
    assert rest.endswith(b'{"detail":"no byte of the body came for 1 s (setting body_timeout)"}')
    assert httpx.get(f"{server.url}/v1/health", timeout=GUARD).status_code == 200


def test_an_upload_that_stops_records_nothing_and_the_device_can_send_it_again(server):
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    rnd = open_round(server, secrets)
    body = state_to_bytes(valid_update(rnd))
    path = f"/v1/runs/{rnd['run']}/rounds/{rnd['round']}/update?num_samples=10"
    head = (f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: "
            f"{auth(rnd['sampled'][0])['Authorization']}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n")
    reply = stalled(server, head.encode(), body[: len(body) // 2])
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:300]
    assert server.status()["current_round"]["received"] == []
    again = upload(server, rnd, rnd["sampled"][0], body)
    assert again.status_code == 200 and again.json()["duplicate"] is False, again.text


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "3601"])
def test_body_timeout_has_a_finite_range(monkeypatch, value):
    monkeypatch.setenv("PFL_SERVER_BODY_TIMEOUT", value)
    with pytest.raises(ValidationError) as err:
        ServerSettings.load(admin_token="t" * 16)
    assert explain(err.value).startswith(
        "--body-timeout (or PFL_SERVER_BODY_TIMEOUT): must be in (0, 3600], got ")


@pytest.mark.parametrize("path,body", [
    ("/v1/enrollment-tokens", b'{"client_id": 5, "client_id": 6}'),
    ("/v1/runs/prune", b'{"dry_run": true, "dry_run": false}'),
    ("/v1/runs", b'{"config_toml": "rounds = 1", "config_toml": "rounds = 2"}'),
])
def test_a_json_object_naming_a_key_twice_is_refused_with_400(server, path, body):
    reply = httpx.post(f"{server.url}{path}", content=body, timeout=GUARD,
                       headers={"Authorization": f"Bearer {ADMIN}",
                                "Content-Type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert reply.json() == {"detail": "the body is not JSON: an object names a key twice"}
