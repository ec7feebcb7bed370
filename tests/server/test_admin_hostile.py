"""pfl-admin against a broken or hostile server: one line, exit 1, no traceback, no token.

The server is a real one on loopback whose answers are scripted byte by byte
(tests/sdk/hostile_harness.py); pfl-admin runs as the installed console script, as an operator
runs it. Before: a 401 quoting the request's Authorization header printed the admin token; a
``user:password@`` URL sent Basic credentials instead of the token; a deeply nested or a
duplicate-key JSON answer, an empty 200, a timestamp of 1e300 and a redirect gave tracebacks
or misleading lines; an answer was read without bound, in size and in time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from server_harness import BIN
from waiting import GUARD

sys.path.insert(0, str(Path(__file__).parents[1] / "sdk"))  # the device's hostile server
from hostile_harness import (  # noqa: E402
    ENDLESS,
    answer,
    endless,
    gzip_bomb,
    head,
    json_answer,
    serving,
    stalled,
    trickled,
)

from pflkit.server import admin_client  # noqa: E402
from pflkit.server.admin_client import AdminClient, AdminError  # noqa: E402

TOKEN = "adm1n-s3cret-t0ken"
RUN = {"id": 1, "status": "active", "algorithm": "fedavg", "model": "twonn", "rounds_total": 2,
       "rounds_done": 1, "global_hash": "0" * 64, "enrolled_clients": 3, "current_round": None,
       "history": []}


@pytest.fixture
def hostile():
    with serving() as server:
        yield server


def admin(url: str, *args: str) -> subprocess.CompletedProcess:
    """The installed pfl-admin with the admin token on the command line."""
    return admin_with(url, TOKEN, *args)


def admin_with(url: str, token: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "pfl-admin"), "--url", url, "--token", token, *args],
                          capture_output=True, text=True, timeout=GUARD,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "300", "HOME": "/nonexistent"})


def failed(done: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one line pfl-admin failed with: exit ``code``, no traceback, no token."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pfl-admin: "), done.stderr
    assert TOKEN not in done.stdout + done.stderr
    return lines[0]


def test_the_admin_token_never_shows_whatever_the_server_quotes(hostile):
    escaped = "".join(f"\\u{ord(c):04x}" for c in TOKEN)  # JSON's escapes, decoded to the token
    hostile.add(json_answer(401, {"detail": f"bad Authorization: Bearer {TOKEN}"}),
                answer(400, f"<pre>Authorization: Bearer {TOKEN}</pre>".encode()),
                answer(403, b'{"detail": "got ' + escaped.encode() + b'"}'),
                answer(302, b"", [("Location", f"https://proxy/login?was={TOKEN}")]))
    assert "(401: bad Authorization: Bearer <secret>)" in failed(admin(hostile.url, "clients",
                                                                       "list"))
    assert "400: <pre>Authorization: Bearer <secret></pre>" in failed(
        admin(hostile.url, "clients", "list"))
    assert "403: got <secret>" in failed(admin(hostile.url, "status", "--once"))
    assert "302: redirect to https://proxy/login?was=<secret> not followed" in failed(
        admin(hostile.url, "prune"))
    assert [s.headers["authorization"] for s in hostile.served] == [f"Bearer {TOKEN}"] * 4


def test_a_token_with_a_backslash_and_quotes_never_shows_in_a_structured_detail(hostile):
    r"""A detail that is an object was printed as Python's repr, which escapes ``\`` and
    ``'``: such a token showed as ``tok\\en``, unmasked. A body too deep to parse is shown
    as text, where the token is JSON-escaped."""
    token = "ad\\m'in\"t0ken"
    deep = '{"detail": "' + json.dumps(token)[1:-1] + '", "x": ' + "[" * 10**5 + "]" * 10**5 + "}"
    hostile.add(json_answer(403, {"detail": {"got": token, token: [f"Bearer {token}"]}}),
                answer(400, deep.encode()))
    for done in (admin_with(hostile.url, token, "status", "--once"),
                 admin_with(hostile.url, token, "clients", "list")):
        line = failed(done)
        assert "<secret>" in line and "t0ken" not in line and "in'" not in line, line
    assert [s.headers["authorization"] for s in hostile.served] == [f"Bearer {token}"] * 2


def test_a_url_holding_a_user_or_password_is_refused_before_any_request(hostile, tmp_path):
    host = hostile.url.removeprefix("http://")
    for url, reason in ((f"http://admin:hunter2@{host}", "holds a user name or password"),
                        ("http://admin:hunter2@[::1", "not a URL (a malformed host or port)"),
                        ("http://hunter2@", "must be http:// or https:// and name a host")):
        done = admin(url, "clients", "list")
        assert reason in failed(done, code=2) and "hunter2" not in done.stderr
    (tmp_path / "admin.toml").write_text(f'url = "https://x:hunter2@{host}"\ntoken = "{TOKEN}"\n')
    done = subprocess.run([str(BIN / "pfl-admin"), "--config", str(tmp_path / "admin.toml"),
                           "status"], capture_output=True, text=True, timeout=GUARD)
    assert "user name or password" in failed(done, code=2) and "hunter2" not in done.stderr
    assert hostile.served == []  # nothing was sent: neither Basic credentials nor the token
    with pytest.raises(ValueError, match="user name or password"):
        AdminClient(f"http://admin:hunter2@{host}", TOKEN)


BROKEN = {  # an answer, the command it answers, what the line says
    "not JSON": (answer(200, b"<html>it works</html>"), ["clients", "list"],
                 "GET /clients: the server's answer is not JSON"),
    "a key twice": (answer(200, b'{"id": 1, "id": 2}'), ["status", "--once"],
                    "not JSON (an object names a key twice"),
    "deep nesting": (answer(200, b"[" * 100_000), ["clients", "list"], "not JSON"),
    "deep refusal": (answer(500, b"[" * 100_000), ["clients", "list"], "answered 500: [[["),
    "empty 200": (answer(200), ["clients", "list"], "unexpected answer from the server"),
    "an object": (json_answer(200, {"clients": []}), ["clients", "list"], "unexpected answer"),
    "a redirect": (answer(307, b"moved", [("Location", "/elsewhere")]), ["status"],
                   "307: redirect to /elsewhere not followed: give pfl-admin the server's final"),
    "gzip": (answer(200, gzip_bomb(2**24), [("Content-Encoding", "gzip")]), ["clients", "list"],
             "has a Content-Encoding pfl-admin did not ask for"),
    "announced 1 TiB": (stalled(head(200, [("Content-Length", str(2**40))])), ["status"],
                        f"GET /runs/current: the server's answer is over {2**28} bytes (its "
                        "Content-Length)"),
    "endless refusal": (endless(503, ENDLESS), ["prune"], "answered 503: xxx"),
    "busy": (json_answer(503, {"detail": "database away"}), ["runs", "pause", "1"],
             "the server answered 503: database away"),
    "escape in a status line": (lambda wire: wire.write(b"HTTP/1.1 200 \x1b[2J\r\nX\r\n\r\n"),
                                ["clients", "list"], "cannot reach the server"),
    "an escape in a token": (json_answer(201, {"id": 1, "token": "pfe_\x1b]0;x\x07",
                                               "client_id": None}), ["tokens", "create"],
                             "the enrollment token is not printable ASCII"),
    "5000 digits": (answer(200, b'{"id": ' + b"9" * 5000 + b"}"), ["status"], "not JSON"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_answer_is_one_line_exit_1(hostile, case):
    scripted, command, reason = BROKEN[case]
    hostile.add(scripted)
    line = failed(admin(hostile.url, *command))
    assert reason in line and "\x1b" not in line and len(line) < 2100
    if case == "endless refusal":  # pfl-admin read its start, then hung up
        assert hostile.finished().written < ENDLESS


def test_what_the_server_names_is_shown_literally_and_lying_numbers_do_not_crash(hostile):
    run = {**RUN, "algorithm": "[red]fedavg[/red]", "model": "[link=https://evil]m[/link]",
           "current_round": {"index": 1, "status": "open\x1b[2J", "sampled": [1, 2],
                             "received": [2], "deadline": 1e308},
           "history": [{"index": 0, "closed_at": 1e300, "global_hash": None,
                        "metrics": {"loss": "[bold]x\x1b]0;t\x07", "big": 10**4000,
                                    "huge": 1e308}}]}
    clients = [{"id": 1, "enrolled_at": -1e300, "revoked": False, "last_seen": 1e300}]
    pruned = {"dry_run": True, "files": 10**400, "bytes": 10**400, "updates": 0,
              "global_states": 0, "unreferenced": 0, "recent": 0}
    hostile.add(json_answer(200, run), json_answer(200, clients), json_answer(200, pruned))
    done = admin(hostile.url, "status", "--once")
    assert done.returncode == 0, done.stderr
    shown = done.stdout
    assert "[red]fedavg[/red] / [link=https://evil]m[/link]" in shown
    assert "round 1 open?[2J: received 1 of 2" in shown and "\x1b" not in shown
    assert "[bold]x?]0;t?" in shown and "1" + "0" * 100 in shown and "1e+308" in shown
    assert "│ 0     │ ?   " in shown  # the closing time no date can be

    done = admin(hostile.url, "clients", "list")
    assert done.returncode == 0 and "│ 1      │ ?  " in done.stdout, done.stderr
    done = admin(hostile.url, "prune", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"would delete {10**400} blobs, {10**394}.0 MB")


def test_an_answer_must_arrive_whole_within_its_deadline(hostile):
    """A server that stalls, or trickles its answer a byte at a time, is cut off at the deadline.

    Each byte comes well within the read timeout: only the deadline ends the answer.
    """
    body = json.dumps(RUN).encode()
    hostile.add(stalled(head(200, [("Content-Length", str(len(body)))]) + body[:5]),
                trickled(head(200, [("Content-Length", str(len(body)))]) + body))
    with AdminClient(hostile.url, TOKEN, timeout=GUARD, deadline=0.2) as client:
        for _ in range(2):
            with pytest.raises(AdminError, match=r"^cannot reach the server at .*: no whole "
                                                 r"answer within 0\.2 s$") as caught:
                client.run()
            assert caught.value.passing  # the live view asks again
    assert hostile.finished().written < len(body)


def test_an_endless_answer_is_read_up_to_its_bound_only(hostile, monkeypatch):
    monkeypatch.setattr(admin_client, "MAX_ANSWER", 2**20)  # the bound, not the way it is kept
    hostile.add(endless(200, ENDLESS))
    with AdminClient(hostile.url, TOKEN) as client, pytest.raises(
            AdminError, match=f"^GET /clients: the server's answer is over {2**20} bytes; the "
                              "rest was not read$"):
        client.clients()
    assert hostile.finished().written < ENDLESS
