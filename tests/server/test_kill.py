"""SIGKILL the server mid-upload, mid-aggregation and between rounds: the run ends as if never
interrupted (same final global state as pfl-sim), no acknowledged update lost or doubled.
Once on a SQLite file, once on PostgreSQL (the database server itself keeps running)."""

from __future__ import annotations

import signal

import torch
from server_harness import (
    client_data_dirs,
    run_toml,
    server_global,
    simulated_global,
    spawn_client,
)
from waiting import GUARD

# the other two points (upload_after_blob, close_after_blob) sit between these and the commits;
# a run through all four passes too but costs two more server starts
CRASH_POINTS = ["upload_after_commit", "close_mid_fold"]


def test_sigkill_at_each_point_then_restart_finishes_like_an_uninterrupted_run(
        tmp_path, database_url, make_server):  # the server stops before its database goes
    config = run_toml("fedavg", rounds=4)
    database = ["--database-url", database_url] if database_url else []
    server = make_server(config, "--min-enrolled", "3", *database, start=False)
    server.start(crash_at=CRASH_POINTS[0])
    dirs = client_data_dirs(tmp_path / "clients", config)
    procs = [spawn_client(server, folder, server.token(cid)) for cid, folder in dirs.items()]
    for point in [*CRASH_POINTS[1:], None]:
        assert server.proc.wait(timeout=GUARD) == -signal.SIGKILL  # it died at the crash point
        server.start(crash_at=point)
    # between rounds: kill from outside right after a round commit, then restart
    done = server.status()["rounds_done"]
    assert done < 4
    server.wait_for(lambda s: s["rounds_done"] > done)
    server.kill()
    server.start()
    status = server.wait_for(lambda s: s["status"] == "finished")
    assert [p.wait(GUARD) for p in procs] == [0, 0, 0]
    assert [r["metrics"]["participants"] for r in status["history"]] == [2, 2, 2, 2]
    expected = simulated_global(config, tmp_path / "sim")
    got = server_global(server, status["global_hash"])
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
