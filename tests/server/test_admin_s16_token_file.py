"""A token file is read up to 4096 bytes: a wrong path is refused, not read whole and sent.

Before, ``--token-file`` (and a config file's ``token_file``, and ``pfl-server
--admin-token-file``) read the whole file: a path given by mistake that holds one printable
line (minified JSON) went out as a megabyte ``Authorization`` header, and /dev/zero was read
until memory ran out. The server is a real one on loopback whose answers are scripted
(tests/sdk/hostile_harness.py); it must see no request.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from server_harness import BIN
from waiting import GUARD

sys.path.insert(0, str(Path(__file__).parents[1] / "sdk"))  # the device's hostile server
from hostile_harness import json_answer, serving  # noqa: E402

MAX_TOKEN_FILE = 4096  # bytes: the bound docs/admin.md states


def admin(url: str, token_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "pfl-admin"), "--url", url, "--token-file", str(token_file),
                           "clients", "list", "--json"],
                          capture_output=True, text=True, timeout=GUARD)


def test_a_token_file_over_the_bound_is_refused_before_any_request(tmp_path):
    log = tmp_path / "rows.json"  # minified JSON: one printable line, sent whole before
    log.write_text("[" + ",".join(["1234567"] * 2**17) + "]")
    with serving() as server:
        server.add(json_answer(200, []))
        done = admin(server.url, log)
        assert server.served == []
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout)
    assert done.stderr == (f"pfl-admin: the admin token file {log} is over {MAX_TOKEN_FILE} "
                           "bytes: not a token file (not shown here)\n")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_an_endless_token_file_is_refused_at_once():
    with serving() as server:
        done = admin(server.url, Path("/dev/zero"))
        assert server.served == []
    assert done.returncode == 2 and f"is over {MAX_TOKEN_FILE} bytes" in done.stderr, done.stderr


def test_a_token_file_at_the_bound_is_used(tmp_path):
    token = tmp_path / "admin.token"
    token.write_text("a" * (MAX_TOKEN_FILE - 1) + "\n")  # the newline counts: 4096 bytes
    token.chmod(0o600)
    with serving() as server:
        server.add(json_answer(200, []))
        done = admin(server.url, token)
        assert server.served[0].headers["authorization"] == "Bearer " + "a" * (MAX_TOKEN_FILE - 1)
    assert done.returncode == 0 and done.stdout == "[]\n" and done.stderr == "", done.stderr
