"""A device facing a broken or hostile server, bad numbers and a damaged state folder.

Before: the device acted on any task (``retry_after`` NaN, -1 or 1e300 crashed or froze the
app's loop; a list or a missing key was a TypeError or KeyError traceback), printed a refusal's
escape sequences to the terminal, stored whatever enrollment answered, trusted a damaged cached
global state whose name matched, and named no file when its pending round was damaged. The
server is a real one on loopback (hostile_harness.py); answers over their bounds, slow or
encoded are test_client_answer_bounds.py's.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hostile_harness import ENDLESS, SECRET, answer, device, endless, json_answer, traced
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy, ServerRefused
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.pending_round import PendingRound
from pflkit.sdk.protocol import MAX_DETAIL
from pflkit.sdk.tensorio import CorruptStateError, state_to_bytes
from pflkit.sdk.transport import MAX_ERROR_ANSWER

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


@pytest.mark.parametrize("body", list(MALFORMED_TASKS), ids=range(len(MALFORMED_TASKS)))
def test_a_malformed_task_is_one_line_and_changes_nothing(tmp_path, hostile, body):
    client = device(tmp_path, hostile)
    hostile.add(answer(200, body))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match="^task: ") as caught:
        client.step()
    assert MALFORMED_TASKS[body] in str(caught.value) and "\n" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_refusal_is_shown_printable_bounded_and_without_the_secret(tmp_path, hostile):
    quoted = f"\x1b[2J\x1b]0;owned\x07 revoked: Authorization: Bearer {SECRET} " + "x" * 10**4
    client = device(tmp_path, hostile)
    hostile.add(json_answer(403, {"detail": quoted}), endless(404, ENDLESS))
    with pytest.raises(ServerRefused) as caught:
        client.step()
    message = str(caught.value)
    assert message.isprintable() and len(message) < 2100 and SECRET not in message
    assert message.startswith("server refused (403): ?[2J?]0;owned? revoked: Authorization: "
                              "Bearer <secret> xxx")
    assert hostile.served[0].headers["authorization"] == f"Bearer {SECRET}"

    with traced() as peak:  # an endless refusal: only the start of its message is read
        with pytest.raises(ServerRefused, match=r"^server refused \(404\): x+\.\.\.$"):
            client.step()
    assert hostile.finished().written < ENDLESS and peak.bytes < MAX_ERROR_ANSWER + 2**21


def test_an_enrollment_refusal_that_quotes_the_token_does_not_show_it(tmp_path, hostile):
    token = "pfe_Tok3n0123456789abcdef"
    quoted = f"unknown token {token} "
    quoted += "x" * (MAX_DETAIL - len(quoted) - 8) + token  # the cut at 2000 would halve it
    client = device(tmp_path, hostile, enrolled=False)
    hostile.add(json_answer(200, {"run_id": None, "config": None}),
                json_answer(403, {"detail": quoted}))
    with pytest.raises(ServerRefused, match=r"^server refused \(403\): unknown token <secret> x"
                       ) as caught:
        client.enroll(token)
    assert token[:8] not in str(caught.value)
    assert json.loads(hostile.served[1].body) == {"token": token}  # what the device sent


def test_a_server_url_with_a_password_is_refused_and_never_printed(tmp_path, hostile):
    """It would replace the device's Bearer credentials (httpx's Basic auth), and gets logged."""
    url = hostile.url.replace("//", "//fl:pa55word@")
    data = LabeledTensors(torch.rand(2, 1, 8, 8), torch.arange(2))
    with pytest.raises(ValueError, match="user name or password") as caught:
        FederatedClient(url, tmp_path / "state", data, token="pfe_x")
    assert "pa55word" not in str(caught.value) and hostile.served == []
    assert not (tmp_path / "state").exists()

    (tmp_path / "credentials.json").write_text(json.dumps(  # an older version, a hand edit
        {"server": "https://fl:pa55word@fl.example.org/", "client_id": 3, "secret": SECRET}))
    with pytest.raises(ValueError, match=f"is enrolled with https://fl.example.org/, not "
                       f"{hostile.url}$"):
        device(tmp_path, hostile, enrolled=False)


def test_an_enrollment_answer_without_usable_credentials_stores_nothing(tmp_path, hostile):
    client = device(tmp_path, hostile, enrolled=False)
    hostile.add(json_answer(200, {"run_id": None, "config": None}),
                json_answer(200, {"client_id": "7", "secret": "a\nb"}))
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
                                     {"max_download_bytes": 5}, {"max_download_bytes": 2.0**30},
                                     {"answer_deadline": 0}, {"answer_deadline": float("inf")},
                                     {"answer_deadline": "600"}])
def test_client_limits_out_of_range_are_refused_before_the_state_folder_exists(tmp_path,
                                                                               options):
    with pytest.raises(ValueError, match=f"^{next(iter(options))}(_bytes)? must be "):
        FederatedClient("http://fl.test", tmp_path / "state", LabeledTensors(
            torch.rand(2, 1, 8, 8), torch.arange(2)), **options)
    assert not (tmp_path / "state").exists()


def test_a_damaged_cached_global_state_is_downloaded_again(tmp_path, hostile):
    good = state_to_bytes({"w": torch.arange(6.0)})
    digest = hashlib.sha256(good).hexdigest()
    client = device(tmp_path, hostile)
    hostile.add(answer(200, good))
    (tmp_path / "global.safetensors").write_bytes(good[: len(good) // 2])  # a crash, a bad disk
    (tmp_path / "cache.json").write_text(json.dumps({"global_hash": digest}))
    assert torch.equal(client.global_state(digest)["w"], torch.arange(6.0))
    assert [served.path for served in hostile.served] == [f"/v1/globals/{digest}"]
    assert (tmp_path / "global.safetensors").read_bytes() == good
    client.global_state(digest)  # intact now: served from the cache
    assert len(hostile.served) == 1


def test_a_damaged_pending_round_is_named_in_one_line_and_kept(tmp_path, hostile):
    from pflkit.sdk.algorithms.base import ClientState

    task = {"status": "wait", "retry_after": 1, "run_id": 1, "round": 0}
    client = device(tmp_path, hostile)
    hostile.add(*(json_answer(200, task) for _ in range(4)))
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
    ("--answer-deadline", "0", "must be in (0, 604800], got 0.0"),
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
