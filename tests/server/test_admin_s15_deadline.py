"""``pfl-admin --answer-deadline``: how long an answer may take, stated, checked and kept.

Before, pfl-admin waited a fixed 600 s for each answer, with no flag to change it: an operator's
cron prune against a hung server held its slot for ten minutes, and one who wanted a shorter
(or longer) wait could not ask. The deadline is tried against a real server on loopback that
reads the request and never answers (tests/sdk/hostile_harness.py); the ranges that
``--help`` states for every number option of pfl-admin are tried through its command line
(tests/help_ranges.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from help_ranges import bound_cases, number_options, without_range
from server_harness import BIN
from typer.testing import CliRunner
from waiting import GUARD

sys.path.insert(0, str(Path(__file__).parents[1] / "sdk"))  # the device's hostile server
from hostile_harness import head, json_answer, serving, stalled  # noqa: E402

from pflkit.server.admin_cli import _connection, app, create_tokens, prune, status  # noqa: E402

TOKEN = "adm1n-s3cret-t0ken"
NOWHERE = ["--url", "http://127.0.0.1:9", "--token", TOKEN]  # nothing listens: refused at once
RUN = {"id": 1, "status": "active", "algorithm": "fedavg", "model": "twonn", "rounds_total": 2,
       "rounds_done": 1, "global_hash": "0" * 64, "enrolled_clients": 3, "current_round": None,
       "history": []}
NEVER = stalled(b"")  # the request is read; no byte of an answer ever comes


def admin(url: str, *args: str, terminal: bool = False) -> subprocess.CompletedProcess:
    """The installed pfl-admin, as an operator runs it (``terminal``: each refresh drawn)."""
    return subprocess.run([str(BIN / "pfl-admin"), "--url", url, "--token", TOKEN, *args],
                          capture_output=True, text=True, timeout=GUARD,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "300", "HOME": "/nonexistent",
                               **({"FORCE_COLOR": "1"} if terminal else {})})


def test_a_server_that_never_answers_is_given_up_on_at_the_deadline_asked_for():
    with serving() as server:
        server.add(NEVER)
        done = admin(server.url, "--answer-deadline", "0.5", "clients", "list")
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert done.stderr == (f"pfl-admin: cannot reach the server at {server.url}: no whole "
                               "answer within 0.5 s\n")
        assert [s.path for s in server.served] == ["/v1/clients"]  # it was asked, once


def test_the_live_view_rides_out_a_refresh_that_never_comes_and_ends_with_the_run():
    """A refresh past the deadline is one red line and another try, as a restart is."""
    with serving() as server:
        server.add(json_answer(200, RUN), NEVER, json_answer(200, {**RUN, "status": "finished",
                                                                   "rounds_done": 2}))
        done = admin(server.url, "--answer-deadline", "0.5", "status", "--interval", "0.1",
                     terminal=True)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert "no whole answer within 0.5 s; retrying" in done.stdout
        assert "run 1\x1b[0m  finished" in done.stdout
        assert [s.path for s in server.served] == ["/v1/runs/current", "/v1/runs/1", "/v1/runs/1"]


def test_a_whole_answer_within_the_deadline_is_read_as_before():
    with serving() as server:
        body = json.dumps({**RUN, "status": "stopped"}).encode()
        server.add(lambda wire: wire.write(head(200, [("Content-Length", str(len(body)))])
                                           + body))
        done = admin(server.url, "--answer-deadline", "604800", "status")
        assert done.returncode == 0 and "run 1  stopped" in done.stdout, done.stderr


COMMANDS = {  # each command with number options, how to reach its request
    _connection: ["clients", "list"],
    create_tokens: ["tokens", "create"],
    prune: ["prune"],
    status: ["status", "--once"],
}


@pytest.mark.parametrize("command", list(COMMANDS), ids=lambda c: c.__name__)
def test_every_number_option_states_its_range_in_help(command):
    assert number_options(command), "the introspection sees the options"
    assert not without_range(command), f"no range in --help of {without_range(command)}"


CASES = [(command, *case) for command in COMMANDS for case in bound_cases(command)]


@pytest.mark.parametrize(("command", "flag", "value", "accepted"), CASES,
                         ids=[f"{c.__name__}{f}={v}" for c, f, v, _ in CASES])
def test_the_range_help_states_is_the_range_checked(command, flag, value, accepted):
    """A value in range reaches the request (no server: exit 1), one past it is refused (2)."""
    where = COMMANDS[command]
    args = [*NOWHERE, flag, value, *where] if command is _connection else \
        [*NOWHERE, *where, flag, value]
    result = CliRunner().invoke(app, args)
    if accepted:
        assert "Connection refused" in str(result.exception), (flag, value, result.output)
    else:
        assert result.exit_code == 2 and f"'{flag}'" in result.output, (flag, value,
                                                                        result.output)
