"""The server's files are private to its user: data folder and blob store 0700, the SQLite
database (and its WAL) and every blob 0600. A real server process, a real round."""

from __future__ import annotations

import stat

from server_harness import run_toml


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_database_and_blobs_are_private_to_the_server_user(make_server):
    server = make_server(run_toml("fedavg", rounds=1, num_clients=3, per_round=1),
                         "--min-enrolled", "1")
    server.enroll()
    server.wait_for(lambda s: s["current_round"] is not None)
    data = server.data_dir
    assert mode(data) == 0o700 and mode(data / "blobs") == 0o700
    database = [data / "server.db", data / "server.db-wal"]
    assert all(mode(path) == 0o600 for path in database if path.exists())
    assert database[0].exists()
    blobs = [p for p in (data / "blobs").rglob("*") if p.is_file()]
    assert blobs and all(mode(path) == 0o600 for path in blobs)
