"""pfl-admin, the console script, against a real pfl-server on loopback (#16 item 7).

Every command runs as a subprocess of the installed ``pfl-admin`` script, as an operator
would; devices enroll with the tokens it prints through ``pfl-client`` (the SDK's documented
flow). The environment is scrubbed of PFLKIT_* variables and HOME / XDG_CONFIG_HOME point into
the test's folder, so no operator config on this machine leaks in.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from ctrl_c import restore_ctrl_c
from server_harness import ADMIN, BIN, client_data_dirs, free_port, run_toml, spawn_client
from waiting import GUARD

PFL_ADMIN = str(BIN / "pfl-admin")


def admin(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
          ) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PFLKIT_")}
    clean.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"),
                 COLUMNS="200", **(env or {}))
    return subprocess.run([PFL_ADMIN, *args], capture_output=True, text=True, env=clean,
                          timeout=GUARD, cwd=tmp_path)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def one_line_error(done: subprocess.CompletedProcess, code: int = 1) -> str:
    """The failure is exit ``code`` and exactly one line on stderr, never a traceback."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pfl-admin: "), done.stderr
    return lines[0]


def test_an_operator_enrolls_devices_runs_and_revokes_with_pfl_admin(make_server, tmp_path):
    config = run_toml("fedavg", rounds=2, num_clients=3, per_round=3)
    server = make_server(config, "--min-enrolled", "3")
    conn = ["--url", server.url, "--token-file", str(server.root / "admin")]

    # a live status view started before any device: it follows the run until it finishes
    live = subprocess.Popen([PFL_ADMIN, *conn, "status", "--interval", "0.3"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tokens = ok(admin(tmp_path, *conn, "tokens", "create", "--count", "3")).split()
    assert len(tokens) == 3 and all(t.startswith("pfe_") for t in tokens)
    dirs = client_data_dirs(tmp_path / "devices", config)
    procs = [spawn_client(server, folder, token) for folder, token in zip(dirs.values(), tokens,
                                                                          strict=True)]
    assert [p.wait(GUARD) for p in procs] == [0, 0, 0]
    out, err = live.communicate(timeout=GUARD)
    assert live.returncode == 0, err
    assert "finished" in out and "rounds 2/2 done" in out and "participants" in out

    clients = json.loads(ok(admin(tmp_path, *conn, "clients", "list", "--json")))
    assert [(c["id"], c["revoked"]) for c in clients] == [(0, False), (1, False), (2, False)]
    assert all(c["last_seen"] is not None for c in clients)
    table = ok(admin(tmp_path, *conn, "clients", "list"))
    assert "last upload" in table and all(f" {i} " in table for i in range(3))

    # revoke one device: its secret stops working (ids were given in enrollment order)
    credentials = [json.loads((folder / ".pflkit" / "credentials.json").read_text())
                   for folder in dirs.values()]
    (secret,) = [c["secret"] for c in credentials if c["client_id"] == 1]
    task = httpx.get(f"{server.url}/v1/task", headers={"Authorization": f"Bearer {secret}"})
    assert task.status_code == 200
    assert ok(admin(tmp_path, *conn, "clients", "revoke", "1")).strip() == "client 1 revoked"
    task = httpx.get(f"{server.url}/v1/task", headers={"Authorization": f"Bearer {secret}"})
    assert task.status_code == 403 and "revoked" in task.json()["detail"]
    clients = json.loads(ok(admin(tmp_path, *conn, "clients", "list", "--json")))
    assert [c["revoked"] for c in clients] == [False, True, False]

    # a second run from a TOML file with an override; a device enrolled under a reserved id
    # completes the three clients it needs, so its round 0 opens (and waits: nobody trains)
    (tmp_path / "run2.toml").write_text(config)
    created = ok(admin(tmp_path, *conn, "runs", "create", "run2.toml", "--set", "rounds=4"))
    assert created.startswith("run 2 created: fedavg / twonn, 4 rounds")
    (reserved,) = json.loads(ok(admin(tmp_path, *conn, "tokens", "create", "--client-id", "7",
                                      "--ttl", "600", "--json")))
    assert reserved["client_id"] == 7
    enrolled = httpx.post(f"{server.url}/v1/clients/enroll", json={"token": reserved["token"]})
    assert enrolled.json()["client_id"] == 7
    server.wait_for(lambda s: s["current_round"] is not None)
    snapshot = ok(admin(tmp_path, *conn, "status", "--once"))
    assert "run 2  active" in snapshot and "rounds 0/4 done" in snapshot
    assert "round 0 open: received 0 of 3 sampled (sampled 0, 2, 7; waiting for 0, 2, 7)" in (
        snapshot)

    assert ok(admin(tmp_path, *conn, "runs", "pause")).startswith("run 2 paused")
    assert json.loads(ok(admin(tmp_path, *conn, "status", "2", "--json")))["status"] == "paused"
    assert ok(admin(tmp_path, *conn, "runs", "resume", "2")).startswith("run 2 resumed")
    assert server.status()["status"] == "active"
    assert ok(admin(tmp_path, *conn, "runs", "stop")).startswith("run 2 stopped")
    assert "run 2  stopped" in ok(admin(tmp_path, *conn, "status"))  # ended: no live view
    history = json.loads(ok(admin(tmp_path, *conn, "status", "1", "--json")))["history"]
    assert [r["metrics"]["participants"] for r in history] == [3, 3]


def test_failures_are_one_line_and_change_nothing(make_server, tmp_path):
    server = make_server(run_toml("fedavg", rounds=2))
    conn = ["--url", server.url, "--token", ADMIN]

    wrong = ["--url", server.url, "--token", "wrong", "clients", "list"]
    assert "refused the admin token (401" in one_line_error(admin(tmp_path, *wrong))
    dead = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(admin(tmp_path, "--url", dead, "--token", ADMIN, "clients", "list"))
    assert line.startswith(f"pfl-admin: cannot reach the server at {dead}")
    assert "404: no client 42" in one_line_error(admin(tmp_path, *conn, "clients", "revoke", "42"))
    assert "404" in one_line_error(admin(tmp_path, *conn, "runs", "pause", "9"))
    assert "404" in one_line_error(admin(tmp_path, *conn, "status", "9", "--once"))
    assert "409: cannot resume run 1: it is active" in one_line_error(
        admin(tmp_path, *conn, "runs", "resume"))
    line = one_line_error(admin(tmp_path, *conn, "tokens", "create", "--client-id",
                                str(2**31)), code=2)  # a bad flag value: exit 2, as for -1
    assert "'--client-id': Input should be less than or equal to 2147483647" in line

    # while run 1 is active a create is a 409 before the config is built; a bad one: below
    (tmp_path / "good.toml").write_text(run_toml("fedavg"))
    assert "409: run 1 is active" in one_line_error(admin(tmp_path, *conn, "runs", "create",
                                                          "good.toml"))
    assert "missing.toml" in one_line_error(admin(tmp_path, *conn, "runs", "create",
                                                  "missing.toml"), code=2)
    assert "KEY=VALUE" in one_line_error(admin(tmp_path, *conn, "runs", "create", "good.toml",
                                               "--set", "rounds"), code=2)

    # tokens created before a refusal are still printed (each is shown only once)
    reserved = json.loads(ok(admin(tmp_path, *conn, "tokens", "create", "--client-id", "5",
                                   "--json")))
    done = admin(tmp_path, *conn, "tokens", "create", "--count", "3", "--client-id", "4")
    assert "409: client id 5 is reserved by token" in one_line_error(done)
    (printed,) = done.stdout.split()
    enrolled = httpx.post(f"{server.url}/v1/clients/enroll", json={"token": printed})
    assert enrolled.json()["client_id"] == 4
    assert reserved[0]["client_id"] == 5

    with server.admin() as http:
        runs = http.get("/v1/runs/current").json()
    assert (runs["id"], runs["status"]) == (1, "active")

    # a bad run config: the server's 422 reason on one line, no run created
    assert ok(admin(tmp_path, *conn, "runs", "stop")).startswith("run 1 stopped")
    (tmp_path / "bad.toml").write_text(run_toml("no_such_method"))
    line = one_line_error(admin(tmp_path, *conn, "runs", "create", "bad.toml"))
    assert "422: run config:" in line and "no_such_method" in line


def test_the_live_view_draws_in_a_terminal_through_a_restart_until_ctrl_c(make_server, tmp_path):
    server = make_server(run_toml("fedavg", rounds=2))
    primary, secondary = pty.openpty()
    live = subprocess.Popen([PFL_ADMIN, "--url", server.url, "--token", ADMIN, "status",
                             "--interval", "0.2"], stdout=secondary, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True,
                            preexec_fn=restore_ctrl_c)
    os.close(secondary)
    screen, deadline = b"", time.monotonic() + GUARD

    def screen_shows(text: bytes) -> None:
        nonlocal screen
        screen = b""
        while text not in screen:
            assert time.monotonic() < deadline and live.poll() is None, screen
            if select.select([primary], [], [], 1)[0]:
                screen += os.read(primary, 65536)

    screen_shows(b"waiting for enough enrolled clients")  # drawn: the refresh loop runs
    assert b"run 1" in screen and b"rounds 0/2 done" in screen
    # a server restart (as under a supervisor) interrupts the view but does not end it
    server.kill()
    screen_shows(b"cannot reach the server")
    server.start()
    server.enroll()
    screen_shows(b"1 client enrolled")
    live.send_signal(signal.SIGINT)
    # keep reading the terminal until the view closes it: its last frame and the cursor reset
    # are written on the way out, and a full terminal buffer would block that write forever
    while select.select([primary], [], [], GUARD)[0]:
        assert time.monotonic() < deadline, "the view still draws after Ctrl-C"
        try:
            if not os.read(primary, 65536):
                break
        except OSError:  # EIO: the view exited, its end of the terminal is gone
            break
    os.close(primary)
    assert live.wait(GUARD) == 0 and live.stderr.read() == ""


def test_url_and_token_come_from_flags_then_environment_then_config_file(make_server,
                                                                         tmp_path):
    server = make_server(run_toml("fedavg", rounds=2))
    dead = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(admin(tmp_path, "clients", "list"), code=2)
    assert "no admin token" in line and "PFLKIT_ADMIN_TOKEN" in line

    config = tmp_path / "home" / ".config" / "pflkit" / "admin.toml"
    config.parent.mkdir(parents=True)
    (config.parent / "admin.token").write_text(ADMIN + "\n")
    (config.parent / "admin.token").chmod(0o600)  # else a warning precedes each error line
    config.write_text(f'url = "{server.url}"\ntoken_file = "admin.token"\n')
    assert ok(admin(tmp_path, "clients", "list")).strip() == "no clients enrolled"
    wrong_token = {"PFLKIT_ADMIN_TOKEN": "wrong"}
    assert "401" in one_line_error(admin(tmp_path, "clients", "list", env=wrong_token))
    ok(admin(tmp_path, "--token", ADMIN, "clients", "list", env=wrong_token))
    (tmp_path / "token.txt").write_text(ADMIN)
    (tmp_path / "token.txt").chmod(0o644)  # as `openssl rand -hex 32 > admin.token` leaves it
    done = admin(tmp_path, "--token-file", "token.txt", "clients", "list", env=wrong_token)
    ok(done)  # used, with a one-line warning
    assert done.stderr.splitlines() == ["pfl-admin: warning: token.txt holds the admin token "
                                        "and other users may read it (mode 0644): chmod 600 "
                                        "token.txt"]
    (tmp_path / "token.txt").chmod(0o600)
    done = admin(tmp_path, "--token-file", "token.txt", "clients", "list", env=wrong_token)
    assert ok(done) and done.stderr == ""
    dead_url = {"PFLKIT_URL": dead}
    assert "cannot reach" in one_line_error(admin(tmp_path, "clients", "list", env=dead_url))
    ok(admin(tmp_path, "--url", server.url, "clients", "list", env=dead_url))

    other = tmp_path / "other.toml"
    other.write_text(f'url = "{server.url}"\ntoken = "{ADMIN}"\n')
    ok(admin(tmp_path, "--config", str(other), "clients", "list", env={"PFLKIT_URL": ""}))
    ok(admin(tmp_path, "clients", "list", env={"PFLKIT_ADMIN_CONFIG": str(other)}))
    other.write_text('server = "http://x"\n')
    line = one_line_error(admin(tmp_path, "--config", str(other), "clients", "list"), code=2)
    assert "unknown key 'server'" in line
    assert "does not exist" in one_line_error(
        admin(tmp_path, "--config", "nowhere.toml", "clients", "list"), code=2)


SECRET = "s3cr3t-admin-token"
BAD_INPUTS = {  # each refused before any request, in one line, exit 2, the token never shown
    "URL with a bad port": (["--url", "http://[::1", "--token", SECRET, "status", "--once"],
                            "server URL 'http://[::1' is not valid"),
    "URL without a host": (["--url", "http://", "--token", SECRET, "clients", "list"],
                           "has no host"),
    "non-ASCII token": (["--token", SECRET + "é", "clients", "list"], "printable ASCII"),
    "token with a newline": (["--token", SECRET + "\nx", "clients", "list"], "printable ASCII"),
    "token file with a newline": (["--token-file", "newline.token", "clients", "list"],
                                  "token from --token-file newline.token must be printable"),
    "ttl nan": (["--token", SECRET, "tokens", "create", "--ttl", "nan"],
                "Invalid value for '--ttl': nan is not a finite number of seconds"),
    "ttl inf": (["--token", SECRET, "tokens", "create", "--ttl", "inf"], "'--ttl': inf is not"),
    "ttl past ten years": (["--token", SECRET, "tokens", "create", "--ttl", "1e12"],
                           "'--ttl': must be in (0, 315360000] seconds (ten years), got 1e+12"),
    "ttl 0": (["--token", SECRET, "tokens", "create", "--ttl", "0"], "must be in (0, "),
    "interval inf": (["--token", SECRET, "status", "--interval", "inf"], "'--interval'"),
    "interval nan": (["--token", SECRET, "status", "--interval", "nan"], "'--interval'"),
    "count 0": (["--token", SECRET, "tokens", "create", "--count", "0"],
                "'--count': Input should be greater than or equal to 1 (see 'pfl-admin tokens "
                "create --help')"),
    "unknown command": (["--token", SECRET, "nosuch"], "No such command 'nosuch'"),
    "missing argument": (["--token", SECRET, "runs", "create"], "Missing argument 'config'"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_never_a_traceback_nor_the_token(tmp_path, case):
    args, reason = BAD_INPUTS[case]
    (tmp_path / "newline.token").write_text(SECRET + "\nmore\n")
    (tmp_path / "newline.token").chmod(0o600)
    done = admin(tmp_path, *args)
    assert reason in one_line_error(done, code=2)
    assert SECRET not in done.stderr + done.stdout


def test_counts_read_in_the_singular_and_the_plural():
    from pflkit.server.admin_view import render_status
    from pflkit.server.api.schemas import RunPublic

    def headline(enrolled: int) -> str:
        run = RunPublic(id=1, status="active", algorithm="fedavg", model="twonn",
                        rounds_total=2, rounds_done=0, global_hash="0" * 64,
                        enrolled_clients=enrolled, current_round=None, history=[])
        return render_status(run).renderables[0].plain

    assert headline(1).endswith("  1 client enrolled")
    assert headline(2).endswith("  2 clients enrolled")
    assert headline(0).endswith("  0 clients enrolled")


def test_pfl_admin_imports_neither_the_server_stack_nor_pytorch():
    probe = ("import sys; import pflkit.server.admin_cli; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'torch', 'fastapi', 'starlette', 'sqlalchemy', 'uvicorn', 'numpy'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
