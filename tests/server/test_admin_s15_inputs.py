"""``tokens create --client-id ID --count N`` refuses ids past 2^31-1 before creating any token.

Before, the tokens up to 2^31-1 were created (their reservations used up), then the server
refused the next id with a 422: exit 1 half done, for a usage error that the flags alone show.
The server is a real one on loopback whose answers are scripted (tests/sdk/hostile_harness.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from server_harness import BIN
from waiting import GUARD

sys.path.insert(0, str(Path(__file__).parents[1] / "sdk"))  # the device's hostile server
from hostile_harness import json_answer, serving  # noqa: E402

from pflkit.sdk.protocol import MAX_ID  # noqa: E402

TOKEN = "adm1n-s3cret-t0ken"


def test_reserved_ids_past_the_largest_are_refused_before_any_request():
    with serving() as server:
        server.add(json_answer(201, {"id": 1, "token": "pfe_one", "client_id": MAX_ID}),
                   json_answer(422, {"detail": "client_id: too large"}))
        done = subprocess.run([str(BIN / "pfl-admin"), "--url", server.url, "--token", TOKEN,
                               "tokens", "create", "--client-id", str(MAX_ID), "--count", "2"],
                              capture_output=True, text=True, timeout=GUARD)
        assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
        assert done.stderr == (f"pfl-admin: --client-id {MAX_ID} with --count 2 reserves ids "
                               f"past {MAX_ID}\n")
        assert server.served == []  # no token was created
