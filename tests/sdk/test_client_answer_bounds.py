"""What a device reads of a server's answer: bounded in size, in time and in decoding.

Before: an endless body filled the device's memory; a body or headers sent slowly held it for
ever (httpx's timeout bounds each read, not the answer); a gzip answer was checked against its bound
only after each read was decompressed (~1000x: 64 KiB read, 64 MiB held). The server is a real
one on loopback (hostile_harness.py); what the device held is measured with tracemalloc, and
what it read by what the server managed to write before the device hung up.
"""

from __future__ import annotations

import gzip
import itertools
from types import SimpleNamespace

import pytest
from hostile_harness import (
    ENDLESS,
    answer,
    chunked,
    device,
    endless,
    gzip_bomb,
    head,
    json_answer,
    raw,
    stalled,
    traced,
    trickled,
)
from waiting import GUARD

from pflkit.sdk import answer_deadline, transport
from pflkit.sdk.client import RetryPolicy, ServerRefused, ServerUnavailable
from pflkit.sdk.transport import MAX_JSON_ANSWER, AnswerTooLarge

HELD = 2**22  # what a device holds beside the body: a read or two, parsing, the server thread
WAIT = {"status": "wait", "retry_after": 1, "run_id": 1, "round": 0}
TRAIN = {**WAIT, "status": "train", "config": {}, "global_hash": "ab" * 32}
TINY = 0.05  # seconds of deadline; the server never sends the rest, however fast the machine


def held(bound: int) -> int:
    """The most a device may hold reading up to ``bound`` (a bytearray grows by an eighth)."""
    return bound + bound // 8 + HELD


def test_an_endless_answer_is_read_up_to_its_bound_only(tmp_path, hostile):
    client = device(tmp_path, hostile)
    hostile.add(endless(200, ENDLESS))
    with traced() as peak:
        with pytest.raises(AnswerTooLarge, match=r"^GET /v1/task: the server's answer is over "):
            client.step()
    assert hostile.finished().written < ENDLESS  # the device hung up
    assert MAX_JSON_ANSWER < peak.bytes < held(MAX_JSON_ANSWER)

    announced = head(200, [("Content-Length", str(2**40))])
    hostile.add(stalled(announced))  # no byte of the body ever comes
    with pytest.raises(AnswerTooLarge, match="Content-Length"):
        client.step()  # refused at its head: it did not wait for the body
    hostile.release.set()  # the stalled answer ends only now: its count is final (no race)
    assert hostile.finished().written == len(announced)


def test_a_global_state_is_downloaded_up_to_max_download_bytes(tmp_path, hostile):
    client = device(tmp_path, hostile, max_download_bytes=2**21)
    hostile.add(endless(200, ENDLESS))
    with traced() as peak:
        with pytest.raises(AnswerTooLarge, match="over 2097152 bytes"):
            client.global_state(TRAIN["global_hash"])
    assert hostile.finished().written < ENDLESS and peak.bytes < held(2**21)
    assert hostile.served[-1].path == f"/v1/globals/{TRAIN['global_hash']}"
    assert not (tmp_path / "global.safetensors").exists()


def test_a_lying_content_length_is_a_broken_answer(tmp_path, hostile):
    client = device(tmp_path, hostile)
    hostile.add(raw(head(200, [("Content-Length", "100")]) + b'{"status": "wait"'),  # short
                raw(head(200, [("Content-Length", "7")]) + b'{"status": "wait"}'))  # long
    with pytest.raises(ServerUnavailable, match=r"\(RemoteProtocolError: peer closed connection "
                       "without sending complete message body"):
        client.step()  # a network failure: retried within the budget
    with pytest.raises(ValueError, match="^task: the server's answer is not JSON$"):
        client.step()  # only the announced bytes are read


def test_an_answer_the_device_did_not_ask_to_be_compressed_is_not_decoded(tmp_path, hostile):
    client = device(tmp_path, hostile)
    bomb = gzip_bomb(2**27)  # 128 MiB of zeros in ~128 KiB: one network read, ~64 MiB
    hostile.add(answer(200, bomb, [("Content-Encoding", "gzip")]),
                answer(403, gzip.compress(b'{"detail": "revoked"}'),
                       [("Content-Encoding", "gzip")]))
    with traced() as peak:
        with pytest.raises(ValueError, match="^GET /v1/task: the server's answer has a "
                           "Content-Encoding the device did not ask for"):
            client.step()
    assert hostile.served[0].headers["accept-encoding"] == "identity"
    assert peak.bytes < HELD
    with pytest.raises(ServerRefused, match=r"^server refused \(403\): \(an encoded message: "
                       r"not read\)$"):
        client.step()


def test_an_answer_that_stalls_is_cut_off_at_its_deadline_and_retried(tmp_path, hostile):
    client = device(tmp_path, hostile, timeout=GUARD, answer_deadline=TINY)  # not httpx's
    hostile.add(stalled(head(200, [("Content-Length", "100")]) + b'{"status": '))
    with pytest.raises(ServerUnavailable, match=r"^GET /v1/task: gave up after 1 attempts "
                       r"\(ReadTimeout: the answer did not arrive whole within 0.05 s \(its "
                       r"deadline\)\)$"):
        client.step()

    client.connection.retry = RetryPolicy(base=0.01, cap=0.01, max_elapsed=GUARD)  # retried
    hostile.add(stalled(head(200, [("Content-Length", "100")])), json_answer(200, WAIT))
    assert client.step().status == "wait" and len(hostile.served) == 3


def fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """One second passes per look at the clock (the deadline's and the retry loop's)."""
    ticks = itertools.count()
    clock = SimpleNamespace(monotonic=lambda: float(next(ticks)), sleep=lambda seconds: None)
    monkeypatch.setattr(transport, "time", clock)
    monkeypatch.setattr(answer_deadline, "time", clock)


def test_an_answer_that_trickles_is_cut_off_at_its_deadline(tmp_path, hostile, monkeypatch):
    """Each piece arrives well within httpx's timeout; the clock says the deadline passed."""
    fake_clock(monkeypatch)
    client = device(tmp_path, hostile, answer_deadline=30)
    hostile.add(chunked(200, b" " * 2**10, ENDLESS))  # JSON's whitespace, 1 KiB at a time
    with traced() as peak:
        with pytest.raises(ServerUnavailable, match=r"\(ReadTimeout: the answer did not arrive "
                           r"whole within 30 s \(its deadline\)\)$"):
            client.step()
    assert peak.bytes < HELD


def test_headers_that_trickle_are_cut_off_at_the_deadline(tmp_path, hostile, monkeypatch):
    """Before, only the body was timed: a header byte per read held the device up to 100 KiB reads.

    The server paces its bytes (``trickled``); the clock says when the deadline passed.
    """
    fake_clock(monkeypatch)
    client = device(tmp_path, hostile, answer_deadline=30)
    hostile.add(trickled(b"HTTP/1.1 200 X\r\nX-Slow: " + b"a" * 2**12))
    with pytest.raises(ServerUnavailable, match=r"\(ReadTimeout: the answer did not arrive "
                       r"whole within 30 s \(its deadline\)\)$"):
        client.step()
    assert hostile.finished().written < 2**10  # cut off long before the trickle ends


def test_an_answer_deadline_grows_with_what_the_answer_may_hold(tmp_path, hostile):
    connection = device(tmp_path, hostile).connection  # timeout 120 s
    assert connection.deadline(0, MAX_JSON_ANSWER) == 120 + 256
    assert connection.deadline(2**26, 2**30) == 120 + 1024 + 16384
    assert device(tmp_path, hostile, answer_deadline=600).connection.deadline(0, 2**30) == 600
