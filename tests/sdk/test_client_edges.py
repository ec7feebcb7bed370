"""A device facing a broken or hostile server, bad numbers and a damaged state folder.

Before: the device read any answer whole (an endless body filled its memory), acted on any
task (``retry_after`` NaN, -1 or 1e300 crashed or froze the app's loop; a list or a missing key
was a TypeError or KeyError traceback), printed a refusal's escape sequences to the terminal,
stored whatever enrollment answered, trusted a damaged cached global state whose name matched,
and named no file when its pending round was damaged.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import torch
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy, ServerRefused
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.pending_round import PendingRound
from pflkit.sdk.tensorio import CorruptStateError, state_to_bytes
from pflkit.sdk.transport import MAX_JSON_ANSWER, AnswerTooLarge

SECRET = "pfc_Zq3secret0123456789"
CHUNK = 2**20
NO_RETRY = RetryPolicy(base=0.01, cap=0.02, max_elapsed=0.0)  # retried never: no network here


class Endless(httpx.SyncByteStream):
    """A body that never ends; ``sent`` counts what the device pulled from it."""

    def __init__(self) -> None:
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        while True:
            self.sent += CHUNK
            yield b"x" * CHUNK


def device(tmp_path: Path, handler: Callable[[httpx.Request], httpx.Response],
           enrolled: bool = True, **options: object) -> FederatedClient:
    """An enrolled FederatedClient whose server is ``handler``."""
    if enrolled:
        (tmp_path / "credentials.json").write_text(json.dumps(
            {"server": "http://fl.test", "client_id": 3, "secret": SECRET}))
    client = FederatedClient("http://fl.test", tmp_path, LabeledTensors(
        torch.rand(4, 1, 8, 8), torch.arange(4)), retry=NO_RETRY, **options)
    client.connection.http = httpx.Client(base_url="http://fl.test",
                                          transport=httpx.MockTransport(handler))
    return client


def test_an_endless_answer_is_read_up_to_its_bound_only(tmp_path):
    body = Endless()
    client = device(tmp_path, lambda r: httpx.Response(200, stream=body))
    with pytest.raises(AnswerTooLarge, match=r"^GET /v1/task: the server's answer is over "):
        client.step()
    assert MAX_JSON_ANSWER < body.sent <= MAX_JSON_ANSWER + CHUNK

    announced = device(tmp_path, lambda r: httpx.Response(
        200, headers={"Content-Length": str(2**40)}, stream=body))
    sent = body.sent
    with pytest.raises(AnswerTooLarge, match="Content-Length"):
        announced.step()
    assert body.sent == sent  # refused before reading any of it


def test_a_global_state_is_downloaded_up_to_max_download_bytes(tmp_path):
    body = Endless()
    task = {"status": "train", "retry_after": 1, "run_id": 1, "round": 0, "config": {},
            "global_hash": "ab" * 32}

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=body) if "globals" in request.url.path else \
            httpx.Response(200, json=task)

    client = device(tmp_path, serve, max_download_bytes=2**21)
    with pytest.raises(AnswerTooLarge, match="over 2097152 bytes"):
        client.global_state(task["global_hash"])
    assert body.sent <= 2**21 + CHUNK and not (tmp_path / "global.safetensors").exists()


MALFORMED_TASKS = {
    b"[1, 2]": "the server's answer is a JSON list, not an object",
    b"<html>": "the server's answer is not JSON",
    b"[" * 100_000 + b"]" * 100_000: "the server's answer is not JSON",
    b'{"retry_after": 1}': "status must be one of",
    b'{"status": "wait", "retry_after": NaN}': "retry_after must be a number of seconds in",
    b'{"status": "wait", "retry_after": -1}': "retry_after must be a number of seconds in",
    b'{"status": "wait", "retry_after": 1e300}': "retry_after must be a number of seconds in",
    b'{"status": "wait", "retry_after": "soon"}': "retry_after must be a number of seconds in",
    b'{"status": "wait", "retry_after": 1, "round": "../x"}': "round must be an integer",
    b'{"status": "train", "retry_after": 1, "run_id": 1, "round": 0}': "config must be",
    b'{"status": "train", "retry_after": 1, "run_id": 1, "round": 0, "config": {}, '
    b'"global_hash": "../../v1/clients/me"}': "global_hash must be 64 lowercase hex digits",
}


@pytest.mark.parametrize("answer", list(MALFORMED_TASKS), ids=range(len(MALFORMED_TASKS)))
def test_a_malformed_task_is_one_line_and_changes_nothing(tmp_path, answer):
    client = device(tmp_path, lambda r: httpx.Response(200, content=answer))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match="^task: ") as caught:
        client.step()
    assert MALFORMED_TASKS[answer] in str(caught.value) and "\n" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_refusal_is_shown_printable_bounded_and_without_the_secret(tmp_path):
    quoted = f"\x1b[2J\x1b]0;owned\x07 revoked: Authorization: Bearer {SECRET} " + "x" * 10**4
    client = device(tmp_path, lambda r: httpx.Response(403, json={"detail": quoted}))
    with pytest.raises(ServerRefused) as caught:
        client.step()
    message = str(caught.value)
    assert message.isprintable() and len(message) < 2100 and SECRET not in message
    assert message.startswith("server refused (403): ?[2J?]0;owned? revoked: Authorization: "
                              "Bearer <secret> xxx")

    body = Endless()  # an endless refusal: only the start of its message is read
    client = device(tmp_path, lambda r: httpx.Response(404, stream=body))
    with pytest.raises(ServerRefused, match=r"^server refused \(404\): x+\.\.\.$"):
        client.step()
    assert body.sent <= CHUNK


def test_an_enrollment_answer_without_usable_credentials_stores_nothing(tmp_path):
    answers = iter([{"run_id": None, "config": None}, {"client_id": "7", "secret": "a\nb"}])
    client = device(tmp_path, lambda r: httpx.Response(200, json=next(answers)),
                    enrolled=False)
    with pytest.raises(ValueError, match="^enrollment: the server's answer holds no client id"
                       ) as caught:
        client.enroll("pfe_token")
    assert "a\nb" not in str(caught.value) and not (tmp_path / "credentials.json").exists()


@pytest.mark.parametrize("policy", [{"base": float("nan")}, {"cap": -1.0}, {"cap": 0.0},
                                    {"max_elapsed": float("nan")}, {"max_elapsed": -0.5},
                                    {"max_elapsed": float("inf")}, {"base": True}])
def test_a_retry_policy_out_of_range_is_refused(policy):
    key = next(iter(policy))
    with pytest.raises(ValueError, match=f"^RetryPolicy.{key} must be in "):
        RetryPolicy(**policy)


@pytest.mark.parametrize("options", [{"timeout": float("nan")}, {"timeout": 0},
                                     {"max_download_bytes": 5}, {"max_download_bytes": 2.0**30}])
def test_client_limits_out_of_range_are_refused_before_the_state_folder_exists(tmp_path,
                                                                               options):
    with pytest.raises(ValueError, match=f"^{next(iter(options))}(_bytes)? must be "):
        FederatedClient("http://fl.test", tmp_path / "state", LabeledTensors(
            torch.rand(2, 1, 8, 8), torch.arange(2)), **options)
    assert not (tmp_path / "state").exists()


def test_a_damaged_cached_global_state_is_downloaded_again(tmp_path):
    good = state_to_bytes({"w": torch.arange(6.0)})
    digest = hashlib.sha256(good).hexdigest()
    downloads = []
    client = device(tmp_path, lambda r: downloads.append(r.url.path) or httpx.Response(
        200, content=good))
    (tmp_path / "global.safetensors").write_bytes(good[: len(good) // 2])  # a crash, a bad disk
    (tmp_path / "cache.json").write_text(json.dumps({"global_hash": digest}))
    assert torch.equal(client.global_state(digest)["w"], torch.arange(6.0))
    assert downloads == [f"/v1/globals/{digest}"]
    assert (tmp_path / "global.safetensors").read_bytes() == good
    client.global_state(digest)  # intact now: served from the cache
    assert len(downloads) == 1


def test_a_damaged_pending_round_is_named_in_one_line_and_kept(tmp_path):
    from pflkit.sdk.algorithms.base import ClientState

    task = {"status": "wait", "retry_after": 1, "run_id": 1, "round": 0}
    client = device(tmp_path, lambda r: httpx.Response(200, json=task))
    path = tmp_path / "pending.safetensors"
    good = PendingRound(1, 0, 4, {}, b"upload", ClientState({"v": torch.ones(3)})).to_bytes()
    no_meta = state_to_bytes({"upload": torch.zeros(2, dtype=torch.uint8)})
    flipped = bytearray(good)
    flipped[-1] ^= 1  # one bit of the client state: the checksum tells
    for damaged in (good[:40], no_meta, bytes(flipped)):
        path.write_bytes(damaged)
        with pytest.raises(CorruptStateError, match=f"^{path}: ") as caught:
            client.step()
        assert "\n" not in str(caught.value) and path.read_bytes() == damaged
    path.write_bytes(good)
    assert client.step().status == "wait" and path.read_bytes() == good


@pytest.mark.parametrize("flag, value, answer", [
    ("--threads", "0", "must be in [1, 4096], got 0"),  # was a RuntimeError traceback
    ("--max-backoff", "nan", "must be in (0, 3600], got nan"),  # was "Invalid value NaN"
    ("--rounds", "-1", "must be in [0, 2147483647], got -1"),  # trained 0 rounds, exit 0
])
def test_pfl_client_refuses_numbers_out_of_range_in_one_line(tmp_path, flag, value, answer):
    exe = Path(sys.executable).parent / "pfl-client"
    done = subprocess.run([str(exe), "--server", "http://127.0.0.1:9", "--data", str(tmp_path),
                           "--token", "pfe_x", flag, value,
                           "--give-up-after", "0"],  # retried never: refused before
                          capture_output=True, text=True, timeout=GUARD, check=False)
    assert (done.returncode, done.stderr.strip()) == (
        2, f"pfl-client: Invalid value for '{flag}': {answer} (see 'pfl-client --help')")
    assert not (tmp_path / ".pflkit").exists()
