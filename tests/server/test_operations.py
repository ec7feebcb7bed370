"""The operator's view: a server whose disk, blob folder or database fails, at start or running.

Each failure is one line (at start: exit status 2; running: 503 with Retry-After to the client,
one log line to the operator), nothing is acknowledged that was not stored, and the run goes on
once the storage is back.
"""

from __future__ import annotations

import subprocess

import httpx
import pytest
from api_harness import auth, open_round, upload, valid_update
from server_harness import ADMIN, BIN, Server, run_toml
from waiting import GUARD, wait_until

from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.blobs import sha256


def serve_once(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    """``pfl-server serve`` with these flags, expected to stop before it serves."""
    (tmp_path / "run.toml").write_text(run_toml())
    (tmp_path / "admin").write_text(ADMIN)
    (tmp_path / "admin").chmod(0o600)
    return subprocess.run([str(BIN / "pfl-server"), "serve", "--run-config",
                           str(tmp_path / "run.toml"), "--admin-token-file",
                           str(tmp_path / "admin"), "--port", "0", *flags],
                          capture_output=True, text=True, timeout=GUARD, cwd=tmp_path)


def not_a_database(tmp_path) -> list[str]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "server.db").write_bytes(b"this is no SQLite file " * 400)
    return ["--data-dir", "data"]


def a_file_as_data_dir(tmp_path) -> list[str]:
    (tmp_path / "data").write_text("")
    return ["--data-dir", "data"]


UNREACHABLE = "postgresql+psycopg://pfl:hunter2-not-shown@127.0.0.1:1/pfl"  # nothing listens


@pytest.mark.parametrize(("arrange", "expected"), [
    (not_a_database, "pfl-server: database sqlite:///"),
    (a_file_as_data_dir, "pfl-server: data: not a folder"),
    (lambda _: ["--database-url", UNREACHABLE],
     "pfl-server: database postgresql+psycopg://pfl:***@127.0.0.1:1/pfl: connection failed"),
    (lambda _: ["--database-url", "nosuchdb://x"],
     "pfl-server: database nosuchdb://x: Can't load plugin"),
    (lambda _: ["--log-level", "loud"], "pfl-server: Invalid value for '--log-level'"),
])
def test_a_database_or_folder_that_cannot_be_used_stops_the_start_in_one_line(
        tmp_path, arrange, expected):
    done = serve_once(tmp_path, *arrange(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(expected), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # no traceback
    assert "hunter2" not in done.stderr


def test_an_upload_the_blob_store_cannot_write_is_503_and_the_round_closes_once_it_can(
        make_server):
    server = make_server(run_toml("fedavg", rounds=2), "--min-enrolled", "3")
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    rnd = open_round(server, secrets)
    first, second = (state_to_bytes(valid_update(rnd, shift)) for shift in (0.01, 0.02))
    folder = server.data_dir / "blobs" / sha256(first)[:2]
    assert not folder.exists()  # (the round's global state has another prefix)
    folder.write_text("")  # a file where the blob's folder must go: writing it fails

    refused = upload(server, rnd, rnd["sampled"][0], first)
    assert refused.status_code == 503
    assert refused.headers["Retry-After"].isdigit()
    assert refused.json()["detail"] == ("the server cannot read or write its files "
                                        "(File exists); retry later")  # no path shown
    assert server.status()["current_round"]["received"] == []  # nothing was recorded
    log = (server.root / "server.log").read_text()
    assert "Traceback" not in log and log.count("File exists") == 1

    folder.unlink()  # space is back: the device's retry of the same bytes is stored
    assert upload(server, rnd, rnd["sampled"][0], first).json()["duplicate"] is False
    assert upload(server, rnd, rnd["sampled"][1], second).status_code == 200
    status = server.wait_for(lambda s: s["rounds_done"] == 1)
    assert status["history"][0]["metrics"]["participants"] == 2


def test_a_close_failing_every_tick_is_logged_once_then_works_again(tmp_path, make_server):
    """A blob the close needs is gone: the close fails each tick (here every 10 ms) until it
    is back. The log gets one traceback, not one a tick, and a line when it works again."""
    (tmp_path / "fast.toml").write_text("tick_seconds = 0.01\n")
    server = make_server(run_toml("fedavg", rounds=2), "--min-enrolled", "3",
                         "--config", str(tmp_path / "fast.toml"), "--log-level", "warning")
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    rnd = open_round(server, secrets)
    first, second = (state_to_bytes(valid_update(rnd, shift)) for shift in (0.01, 0.02))
    assert upload(server, rnd, rnd["sampled"][0], first).status_code == 200
    blob = server.data_dir / "blobs" / sha256(first)[:2] / sha256(first)
    blob.unlink()
    assert upload(server, rnd, rnd["sampled"][1], second).status_code == 200  # quorum: close
    log = server.root / "server.log"
    wait_until(lambda: "closing round 0 failed" in log.read_text(), "the close failed")
    wait_until(lambda: server.status()["current_round"]["status"] == "open", "reopened")
    blob.write_bytes(first)
    server.wait_for(lambda s: s["rounds_done"] == 1)
    text = log.read_text()
    assert text.count("Traceback") == 1, text[-3000:]
    assert "round ticker works again after: FileNotFoundError" in text


def test_health_and_requests_answer_503_while_the_database_refuses_connections(
        postgres_cluster, tmp_path):
    name = postgres_cluster.create_database()
    server = Server(tmp_path / "server", run_toml(), ["--database-url",
                                                      postgres_cluster.url(name)])
    server.root.mkdir()
    try:
        server.start()
        health = f"{server.url}/v1/health"
        assert httpx.get(health).json() == {"status": "ok", "database": "ok"}
        postgres_cluster._admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        postgres_cluster._admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                f"WHERE datname = '{name}'")
        down = httpx.get(health)
        assert (down.status_code, down.json()) == (503, {"status": "error",
                                                         "database": "unavailable"})
        refused = httpx.get(f"{server.url}/v1/runs/current", headers=auth(ADMIN))
        assert refused.status_code == 503 and "Retry-After" in refused.headers
        assert refused.json()["detail"].startswith("the server's database is unavailable")
        postgres_cluster._admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert httpx.get(health).json() == {"status": "ok", "database": "ok"}
    finally:
        server.stop()
        postgres_cluster.drop_database(name)


def test_health_answers_503_once_the_sqlite_file_was_deleted_under_the_server(make_server):
    """The open connections go on writing to the deleted file: lost at the next start."""
    server = make_server(run_toml())
    health = f"{server.url}/v1/health"
    assert httpx.get(health).status_code == 200
    for name in ("server.db", "server.db-wal", "server.db-shm"):
        (server.data_dir / name).unlink(missing_ok=True)
    down = httpx.get(health)
    assert (down.status_code, down.json()) == (503, {"status": "error",
                                                     "database": "unavailable"})
    assert "server.db was deleted while the server runs" in (server.root / "server.log").read_text()
