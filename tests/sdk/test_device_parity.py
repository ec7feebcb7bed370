"""The Python device against a hostile server, held to the rules the Android client applies.

Each input below is one the Android client (android-demo/core/.../fl) refuses; before, the
Python client took it: a key named twice counted its last value, ``"secagg": {}`` sent the
update in the clear, a URL without http:// was retried as a network failure for the whole
budget, a global state of other shapes masked a broadcast change or raised a KeyError, a
``Retry-After: 1_0`` was read as 10 s, and a secret the server sent JSON-escaped was shown.
The server is a real one on loopback (hostile_harness.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import torch
from hostile_harness import (
    SECRET,
    Answer,
    HostileServer,
    Served,
    answer,
    device,
    json_answer,
    raw,
    serving,
)
from upload_harness import algorithm, wire

from pflkit.sdk.client import FederatedClient, RetryPolicy, ServerRefused
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.secagg.messages import RoundSetup
from pflkit.sdk.secagg.wire import setup_to_wire
from pflkit.sdk.tensorio import State, state_to_bytes
from pflkit.sdk.transport import retry_after

WAIT = {"status": "wait", "retry_after": 1, "run_id": 1, "round": 0}


def scripted_json(text: bytes) -> Answer:
    """A 200 JSON answer of exactly these bytes (json.dumps could not write them)."""
    return answer(200, text, [("Content-Type", "application/json")])


@pytest.mark.parametrize("text", [
    b'{"status": "wait", "retry_after": 1, "status": "finished"}',
    b'{"status": "wait", "retry_after": 1, "config": {"algorithm": "a", "algorithm": "b"}}',
])
def test_an_object_naming_a_key_twice_is_refused_in_one_line(tmp_path, hostile, text):
    client = device(tmp_path, hostile)
    hostile.add(scripted_json(text))
    with pytest.raises(ValueError, match=r"^task: the server's answer is not JSON \(an object "
                                         r"names a key twice\)$"):
        client.step()  # before: the last one counted (Android refuses it)


class SecAggServer:
    """A run's task, global states and upload routes; the task carries ``secagg`` as set.

    An upload in the clear is deferred (409, as when paused), so the device keeps its round.
    """

    def __init__(self, secagg: object) -> None:
        self.secagg, self.blobs, self.digest = secagg, {}, ""

    def publish(self, state: State) -> None:
        """Make ``state`` the round's global state."""
        data = state_to_bytes(state)
        self.digest = hashlib.sha256(data).hexdigest()
        self.blobs[self.digest] = data

    def __call__(self, request: Served) -> Answer:
        path = urlsplit(request.path).path
        if path == "/v1/task":
            return json_answer(200, {**WAIT, "status": "train", "global_hash": self.digest,
                                     "config": wire("fedavg"), "secagg": self.secagg})
        if path.startswith("/v1/globals/"):
            return answer(200, self.blobs[path.rsplit("/", 1)[1]])
        if path.endswith("/update"):
            return json_answer(409, {"detail": "paused"})
        return json_answer(404, {"detail": f"no route {request.method} {path}"})


def phone(root: Path, http: HostileServer) -> FederatedClient:
    """An enrolled device (client 3) with data for wire("fedavg")'s model."""
    gen = torch.Generator().manual_seed(0)
    data = LabeledTensors(torch.rand(8, 1, 4, 4, generator=gen),
                          torch.randint(0, 10, (8,), generator=gen))
    return device(root, http, data=data)


@pytest.mark.parametrize("secagg", [{}, 0, "", [], False, {"round_id": 0}])
def test_a_secagg_setup_that_is_none_never_sends_the_update_in_the_clear(tmp_path, secagg):
    server = SecAggServer(secagg)
    server.publish(algorithm("fedavg").aggregation.init_global(3))
    with serving(server) as http:
        with pytest.raises(ValueError, match=r"^task: the server's answer cannot be used: "
                                             r"secagg (must be an object|lacks clip_range, )"):
            phone(tmp_path, http).step()
    assert [s.path for s in http.served] == ["/v1/task"]  # nothing downloaded, nothing sent


def masked_setup(dimension: int) -> dict:
    """A valid SecAgg setup of client 3's round 0 among three devices."""
    return setup_to_wire(RoundSetup(0, (3, 4, 5), 2, 2, dimension, 1.0, b"s" * 32))


@pytest.mark.parametrize("other", ["missing", "broadcast"])
def test_a_global_state_of_other_shapes_is_refused_before_masking(tmp_path, other):
    first = algorithm("fedavg").aggregation.init_global(3)
    server = SecAggServer(None)
    server.publish(first)
    with serving(server) as http:
        client = phone(tmp_path, http)
        assert client.step().status == "wait"  # trained; its upload deferred: kept pending
        changed = dict(first)  # the same round now masked, against another global state
        if other == "missing":
            del changed["head.bias"]
        else:  # a (1,) tensor broadcasts: a change of the right length, but not the update's
            changed["head.bias"] = torch.zeros(1)
        server.publish(changed)
        server.secagg = masked_setup(sum(t.numel() for t in first.values()))
        with pytest.raises(ValueError, match=r"^global state [0-9a-f]{64}: not the run's "
                                             r"model \(tensor head\.bias is "):
            client.step()  # the pending round (another global) dropped; this one refused
    assert not [s.path for s in http.served if "/secagg/" in s.path]  # nothing was sent


@pytest.mark.parametrize("url", [
    "fl.example.org", "localhost:8000", "ftp://fl.example.org", "http://", "http://:8000",
    "user:hunter2@fl.example.org:8000", "https://user:hunter2@fl.example.org",
    "http://fl.example.org:99999", "http://[::1:8000",
])
def test_a_server_url_that_cannot_work_is_refused_at_once(tmp_path, url):
    gen = torch.Generator().manual_seed(0)
    data = LabeledTensors(torch.rand(4, 1, 4, 4, generator=gen), torch.arange(4))
    with pytest.raises(ValueError, match=r"^the server URL ") as refused:
        FederatedClient(url, tmp_path, data, token=SECRET,
                        retry=RetryPolicy(base=0.01, cap=0.02, max_elapsed=0.0))  # retried: never
    assert "hunter2" not in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "credentials.json").exists()


def test_a_retry_after_python_reads_but_the_wire_has_not_is_backed_off(tmp_path, hostile):
    budget = RetryPolicy(base=0.01, cap=0.02, max_elapsed=5.0)  # retried: a 10 s wait is over it
    client = device(tmp_path, hostile, retry=budget)
    hostile.add(answer(503, b"", [("Retry-After", "1_0")]), json_answer(200, WAIT))
    assert client.step().status == "wait"  # before: read as 10 s, over the budget: gave up
    hostile.add(answer(503, b"", [("Retry-After", "0.01")]), json_answer(200, WAIT))
    assert client.step().status == "wait"  # a fraction, as pfl-server sends it: honoured


def test_a_refusal_never_shows_the_secret_however_the_json_escapes_it(tmp_path, hostile):
    client = device(tmp_path, hostile)
    escaped = SECRET[:-1].encode() + b"\\u%04x" % ord(SECRET[-1])  # JSON for the same text
    hostile.add(raw(b"HTTP/1.1 401 X\r\nConnection: close\r\n\r\n"
                    b'{"detail": "unknown credentials: Bearer ' + escaped + b'"}'))
    with pytest.raises(ServerRefused, match="Bearer <secret>") as refused:
        client.step()
    assert SECRET not in str(refused.value)


def test_a_retry_after_over_64_characters_is_not_read():
    """As on Android: a wait of at most 3600 s never needs more, and no pattern sees 16 KiB."""
    assert retry_after(httpx.Response(503, headers={"Retry-After": "0" * 63 + "5"})) == 5.0
    for value in ("0" * 64 + "5", "1" * 16_000 + "x"):
        assert retry_after(httpx.Response(503, headers={"Retry-After": value})) is None


def test_a_redirect_is_refused_with_its_location_not_a_web_page(tmp_path, hostile):
    client = device(tmp_path, hostile)
    page = b"<html><head><title>301 Moved Permanently</title></head><body>nginx</body></html>"
    hostile.add(answer(301, page, [("Location", "https://fl.example.org/v1/task")]))
    with pytest.raises(ServerRefused, match=r"^server refused \(301\): redirect to https://fl\."
                                            r"example\.org/v1/task not followed: give the client "
                                            r"the server's final URL$"):
        client.step()
    assert len(hostile.served) == 1  # not followed: the secret goes nowhere else
