"""What a request says outside its JSON body: integers, repeated names, credentials, the docs.

Before: path and query integers were read as Python's ``int()`` reads them (``5_0`` was 50;
``+5``, `` 5``, ``05`` were 5), a query naming ``num_samples`` twice counted its last value,
two ``Authorization`` headers counted the first, and ``/docs``, ``/redoc``, ``/openapi.json``
described the whole API to anyone. A path with a trailing slash was redirected to the name the
request's ``Host`` header gave (``Location: http://evil.example/v1/health``).
"""

from __future__ import annotations

import socket

import httpx
import pytest
from api_harness import auth
from server_harness import ADMIN, Server, run_toml
from waiting import GUARD

from pflkit.sdk.protocol import MAX_ID

ID_RANGE = f"must be an integer in [0, {MAX_ID}], in ASCII digits without a leading zero"
# each spelling as it stands in the URL: percent-escapes are decoded before the check
NOT_PLAIN = ["5_0", "%2B5", "%205", "5%20", "05", "00", "-0", "-1", "5.0", "1e3", "0x5",
             "%D9%A5", "%EF%BC%95", str(MAX_ID + 1), "9" * 5000, "%00"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    server = Server(root / "server", run_toml(kind="dirichlet"), ["--min-enrolled", "2"])
    server.root.mkdir()
    server.start()
    yield server
    server.stop()


def refused_as(reply: httpx.Response, where: str, name: str, message: str = ID_RANGE) -> None:
    assert reply.status_code == 422, reply.text
    assert reply.json() == {"detail": [{"type": "integer", "loc": [where, name],
                                        "msg": message}]}


@pytest.mark.parametrize("spelling", NOT_PLAIN)
def test_a_path_id_is_plain_ascii_digits_in_range(server, spelling):
    with server.admin() as http:
        refused_as(http.get(f"/v1/runs/{spelling}"), "path", "run_id")
        refused_as(http.post(f"/v1/clients/{spelling}/revoke"), "path", "client_id")
        refused_as(http.delete(f"/v1/enrollment-tokens/{spelling}"), "path", "token_id")


def test_plain_ids_are_read_as_before(server):
    with server.admin() as http:
        assert http.get("/v1/runs/1").json()["id"] == 1
        assert http.get("/v1/runs/0").json() == {"detail": "no such run"}
        assert http.get(f"/v1/runs/{MAX_ID}").json() == {"detail": "no such run"}


@pytest.mark.parametrize("spelling", ["5_0", "%2B5", "+5", "05", "-1", "5.0", "%D9%A5",
                                      str(10**9 + 1), ""])
def test_an_uploads_sample_count_is_plain_ascii_digits_in_range(server, spelling):
    _, secret = server.enroll()
    reply = httpx.put(f"{server.url}/v1/runs/1/rounds/0/update?num_samples={spelling}",
                      content=b"", headers=auth(secret), timeout=GUARD)
    refused_as(reply, "query", "num_samples",
               f"must be an integer in [0, {10**9}], in ASCII digits without a leading zero")


def test_an_uploads_run_and_round_are_plain_ascii_digits(server):
    _, secret = server.enroll()
    for path, name in [("/v1/runs/1_0/rounds/0/update", "run_id"),
                       ("/v1/runs/1/rounds/%2B0/update", "round_index")]:
        reply = httpx.put(f"{server.url}{path}", params={"num_samples": 5}, content=b"",
                          headers=auth(secret), timeout=GUARD)
        refused_as(reply, "path", name)


def test_a_query_naming_a_parameter_twice_is_refused(server):
    _, secret = server.enroll()
    reply = httpx.put(f"{server.url}/v1/runs/1/rounds/0/update?num_samples=1&num_samples=2",
                      content=b"", headers=auth(secret), timeout=GUARD)
    assert reply.status_code == 400, reply.text
    assert reply.json() == {"detail": "the query names 'num_samples' 2 times; give it once"}


def exchange(server: Server, request: bytes) -> bytes:
    """Send these bytes as they are (httpx merges repeated headers); all the server answers."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):  # until the server closes (the timeout: a hang guard)
            reply += chunk
    return reply


def raw_get(server: Server, path: str, headers: list[str]) -> bytes:
    """A GET with exactly these header lines."""
    head = "".join(f"{h}\r\n" for h in ["Host: x", *headers, "Connection: close"])
    return exchange(server, f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())


@pytest.mark.parametrize("first,second", [(ADMIN, "wrong-token"), ("wrong-token", ADMIN)])
def test_two_authorization_headers_are_refused_whichever_comes_first(server, first, second):
    reply = raw_get(server, "/v1/clients", [f"Authorization: Bearer {first}",
                                            f"Authorization: Bearer {second}"])
    assert reply.startswith(b"HTTP/1.1 400 "), reply[:200]
    assert reply.endswith(b'{"detail":"the request has 2 Authorization headers; send one"}')


def test_a_token_without_the_bearer_scheme_is_told_the_form(server):
    reply = httpx.get(f"{server.url}/v1/clients", headers={"Authorization": ADMIN},
                      timeout=GUARD)
    assert reply.status_code == 401 and ADMIN not in reply.text
    assert reply.json() == {"detail": "the Authorization header must read 'Bearer <token>'"}


@pytest.mark.parametrize("head", [
    b"POST /v1/enrollment-tokens HTTP/1.1\r\nContent-Length: +2\r\n",
    b"POST /v1/enrollment-tokens HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n",
    b"POST /v1/enrollment-tokens HTTP/1.1\r\nContent-Length: 2\r\n"
    b"Transfer-Encoding: chunked\r\n",
    b"FETCH /v1/health HTTP/1.1\r\n",
])
def test_a_request_that_is_not_http_gets_a_json_400(server, head):
    reply = exchange(server, head + b"Host: x\r\n\r\n{}")
    assert reply.startswith(b"HTTP/1.1 400 Bad Request\r\n"), reply
    assert b"content-type: application/json\r\n" in reply.lower(), reply
    assert reply.endswith(b'{"detail": "Invalid HTTP request received: a malformed request '
                          b'line, header or chunked body"}'), reply


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
def test_the_api_description_is_not_served_by_default(server, path):
    assert httpx.get(f"{server.url}{path}", timeout=GUARD).status_code == 404


def test_api_docs_serves_the_description_with_the_id_range(make_server):
    server = make_server(run_toml(kind="dirichlet"), "--api-docs")
    schema = httpx.get(f"{server.url}/openapi.json", timeout=GUARD).json()
    run_id = schema["paths"]["/v1/runs/{run_id}"]["get"]["parameters"][0]
    assert run_id["name"] == "run_id" and run_id["schema"]["maximum"] == MAX_ID, run_id
    assert httpx.get(f"{server.url}/docs", timeout=GUARD).status_code == 200


def test_a_trailing_slash_is_not_found_and_not_redirected_to_the_host_header(server):
    reply = exchange(server, b"GET /v1/health/ HTTP/1.1\r\nHost: evil.example\r\n"
                             b"Connection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 404 "), reply
    assert b"evil.example" not in reply and reply.endswith(b'{"detail":"Not Found"}'), reply
