"""pfl-admin waits for an answer as long as ``--answer-deadline`` says, not a fixed minute.

Before, each read also had a fixed 60 s limit: ``pfl-admin --answer-deadline 3600 prune``
against a server still deleting a large data folder (it answers once done) failed after 60 s
with ``cannot reach the server ...: timed out``, whatever the deadline asked for. The server is
a real one on loopback whose answer is held until the test releases it
(tests/sdk/hostile_harness.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from server_harness import BIN
from waiting import GUARD, wait_until

sys.path.insert(0, str(Path(__file__).parents[1] / "sdk"))  # the device's hostile server
from hostile_harness import Answer, Wire, json_answer, serving  # noqa: E402

TOKEN = "adm1n-s3cret-t0ken"
OLD_STALL_LIMIT = 60  # seconds: the fixed read limit pfl-admin had; the test waits past it
PRUNED = {"dry_run": False, "files": 3, "bytes": 3_000_000, "updates": 2, "global_states": 1,
          "unreferenced": 0, "recent": 0}


def held_until(release: threading.Event, then: Answer) -> Answer:
    """Nothing (not a status line) until ``release`` is set, then ``then``."""
    def send(wire: Wire) -> None:
        release.wait(GUARD)
        then(wire)
    return send


def test_a_slow_answer_within_the_deadline_is_waited_for_past_a_minute():
    release = threading.Event()
    with serving() as server:
        server.add(held_until(release, json_answer(200, PRUNED)))
        admin = subprocess.Popen(
            [str(BIN / "pfl-admin"), "--url", server.url, "--token", TOKEN,
             "--answer-deadline", "3600", "prune"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: server.served, "pfl-admin's request")
            try:  # the time under test, not a guard
                admin.wait(timeout=OLD_STALL_LIMIT + 1)
            except subprocess.TimeoutExpired:
                pass  # still waiting past the old limit, as the deadline asks
            else:
                pytest.fail(f"pfl-admin gave up at the old limit: {admin.communicate()}")
            release.set()
            out, err = admin.communicate(timeout=GUARD)
        finally:
            release.set()
            if admin.poll() is None:
                admin.kill()
                admin.wait()
    assert admin.returncode == 0 and err == "", err
    assert out.startswith("deleted 3 blobs, 3.0 MB (2 of ended rounds' updates"), out
    assert [s.path for s in server.served] == ["/v1/runs/prune"]  # asked once, not again
