"""What one request may cost the server: its head is bounded (431) and timed (a head that never
completes is closed), a JSON body is bounded (413) and read only after its credentials passed
(401 without reading it), failed authentications are throttled per address (429 + Retry-After,
which the SDK waits out). A real server on loopback."""

from __future__ import annotations

import http.client
import socket
import time
from types import SimpleNamespace

import httpx
import pytest
import torch
from server_harness import ADMIN, Server, run_toml
from waiting import GUARD

from pflkit.sdk import transport
from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors

FAILURES = 5  # the server's failed-authentication limit per address
WINDOW = 2 * GUARD  # seconds: no busy machine lets a failure leave the window mid-test
JSON_LIMIT = 4096  # the server's max_json_bytes
HEAD_SECONDS = 5  # the server's header_timeout
HUGE = 256 * 2**20  # a declared body the tests never send


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    server = Server(root / "server", run_toml("fedavg", rounds=1),
                    ["--min-enrolled", "100", "--auth-failure-limit", str(FAILURES),
                     "--auth-failure-window", str(WINDOW), "--max-header-bytes", "8192",
                     "--max-json-bytes", str(JSON_LIMIT), "--header-timeout", str(HEAD_SECONDS)])
    server.root.mkdir()
    server.start()
    yield server
    server.stop()


def raw_request(server: Server, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as sock:
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
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=GUARD)
    connection.request("GET", "/v1/health")
    assert connection.getresponse().read() and connection.sock is not None
    sock = connection.sock
    time.sleep(6)  # at least uvicorn's 5 s: a slower machine only waits longer
    connection.request("GET", "/v1/health")  # on the same socket: no reconnection
    assert connection.getresponse().status == 200 and connection.sock is sock
    connection.close()


def via(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=GUARD)


def test_failed_authentication_is_throttled_per_address_and_the_sdk_waits(server, tmp_path,
                                                                          monkeypatch):
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
    with via("127.0.0.4") as device:  # the SDK's address below: fail it up to the limit
        for i in range(FAILURES):
            assert device.get(task, headers={"Authorization": f"Bearer x{i}"}).status_code == 401
        assert device.get(task, headers=good).status_code == 429
    state = tmp_path / "device"
    state.mkdir()
    (state / "credentials.json").write_text(
        f'{{"server": "{server.url}", "client_id": {client_id}, "secret": "{secret}"}}')
    sdk = FederatedClient(server.url, state, LabeledTensors(torch.zeros(1, 1, 28, 28),
                                                            torch.zeros(1, dtype=torch.long)),
                          retry=RetryPolicy(base=0.01, cap=0.02, max_elapsed=2 * WINDOW))
    sdk.connection.http = httpx.Client(base_url=server.url, timeout=GUARD, transport=(
        httpx.HTTPTransport(local_address="127.0.0.4")))
    planned: list[float] = []

    class Waiting(BaseException):
        """The SDK went to sleep: what it sleeps is the assertion (the window is long)."""

    def sleep(seconds: float) -> None:
        planned.append(seconds)
        raise Waiting

    monkeypatch.setattr(transport, "time", SimpleNamespace(monotonic=time.monotonic,
                                                            sleep=sleep))
    with pytest.raises(Waiting):
        sdk.step()  # 429 + Retry-After: it waits what the server says, not its 0.02 s backoff
    assert WINDOW - GUARD <= planned[0] <= WINDOW, planned
    sdk.close()


def answer_before_the_body(server: Server, path: str, declared: int, headers: str = "",
                           source: str = "127.0.0.1") -> bytes:
    """POST a head declaring a ``declared``-byte JSON body, 1 KiB of it, then only listen.

    The rest of the body never comes: an answer proves the server did not wait to read it.
    """
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared}\r\n{headers}\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD,
                                  source_address=(source, 0)) as sock:
        sock.sendall(head.encode() + b" " * 1024)
        reply = b""
        while b"}" not in reply and (chunk := sock.recv(65536)):  # the whole JSON answer
            reply += chunk
    return reply


JSON_PATHS = {"/v1/runs": "admin", "/v1/enrollment-tokens": "admin",
              "/v1/runs/1/queries/head": "client"}


def test_a_json_body_is_read_only_after_its_credentials_passed(server):
    """256 MiB without credentials used to be read (and parsed) before the 401: +767 MiB RSS."""
    for i, path in enumerate(JSON_PATHS):
        for j, credentials in enumerate(["", "Authorization: Bearer pfc_wrong\r\n"]):
            # a fresh address each: these failures must not throttle the other tests
            reply = answer_before_the_body(server, path, HUGE, credentials,
                                           source=f"127.0.1.{10 * i + j + 1}")
            assert reply.startswith(b"HTTP/1.1 401 "), (path, reply[:200])


def test_an_oversized_json_body_is_refused_with_413_and_not_read(server):
    _, secret = server.enroll()
    bearer = {"admin": f"Bearer {ADMIN}", "client": f"Bearer {secret}"}
    for path, who in JSON_PATHS.items():
        reply = answer_before_the_body(server, path, HUGE, f"Authorization: {bearer[who]}\r\n")
        assert reply.startswith(b"HTTP/1.1 413 ") and b"max_json_bytes" in reply, reply[:300]
        # no Content-Length (chunked): refused once more than the limit has arrived
        chunked = httpx.post(f"{server.url}{path}", content=iter([b" " * (JSON_LIMIT + 1)]),
                             headers={"Authorization": bearer[who]})
        assert chunked.status_code == 413, (path, chunked.text)
    # enrollment's credentials are in its body: a large one is refused unread
    assert answer_before_the_body(server, "/v1/clients/enroll", HUGE).startswith(
        b"HTTP/1.1 413 ")


def test_a_throttled_address_gets_429_before_its_enrollment_body_is_read(server):
    address = "127.0.2.1"
    with via(address) as attacker:
        for i in range(FAILURES):
            attacker.get(f"{server.url}/v1/task", headers={"Authorization": f"Bearer x{i}"})
    reply = answer_before_the_body(server, "/v1/clients/enroll", JSON_LIMIT, source=address)
    assert reply.startswith(b"HTTP/1.1 429 "), reply[:200]


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    return reply


def test_request_heads_that_never_complete_are_closed_and_block_no_one(server):
    """A head that never completes was never timed out (3 half-open sockets alive after 217 s)."""
    sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=GUARD)
               for _ in range(50)]
    for sock in sockets[::2]:  # half start a request whose blank line never comes
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
    assert httpx.get(f"{server.url}/v1/health", timeout=GUARD).status_code == 200
    for i, sock in enumerate(sockets):  # each is closed by the server (the timeout: safety)
        with sock:
            reply = read_until_closed(sock)
        assert reply.startswith(b"HTTP/1.1 408 ") if i % 2 == 0 else reply == b"", reply
    assert httpx.get(f"{server.url}/v1/health", timeout=GUARD).status_code == 200
