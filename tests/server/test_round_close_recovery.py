"""A round close that crashes, raises or is overtaken by a starting replica, in-process.

Each test runs on a SQLite file and on a real PostgreSQL database (``database_url``).
"""

from __future__ import annotations

import logging
import time

import pytest
from service_harness import current, global_of, service_for, shifted
from sqlalchemy import update

from pflkit.sdk.tensorio import CHECKSUM_KEY, state_to_bytes
from pflkit.server.orm import Round
from pflkit.server.service import build_service


def test_a_close_interrupted_by_a_crash_is_redone_once(tmp_path, database_url):
    service, _ = service_for(tmp_path, database_url)
    status, rnd = current(service)
    for cid in rnd["sampled"]:
        service.uploads.accept(cid, status["id"], 0, 10,
                              shifted(service, status["global_hash"], 3))
    with service.store.sessions() as s, s.begin():  # what a SIGKILL mid-close leaves behind
        s.query(Round).filter(Round.index == 0).update({"status": "closing",
                                                        "claimed_at": time.time()})
    service.rounds.tick()
    assert current(service)[0]["rounds_done"] == 0  # a fresh claim is not stolen
    assert service.rounds.recover() == 1
    service.rounds.tick()
    status, _ = current(service)
    assert status["rounds_done"] == 1 and status["history"][0]["metrics"]["participants"] == 2


def test_a_close_overtaken_by_a_starting_replica_commits_nothing(tmp_path, database_url,
                                                                 monkeypatch):
    """A replica starting up reopens every closing round (recover), also one a live worker is
    folding; an update is accepted, another worker claims the round: the first close must not
    commit its older result over that claim, or the acknowledged update is lost."""
    service, _ = service_for(tmp_path, database_url)
    replica = build_service(service.settings)
    status, rnd = current(service)
    first, second = rnd["sampled"]
    service.uploads.accept(first, status["id"], 0, 10, shifted(service, status["global_hash"], 1))
    with service.store.sessions() as s, s.begin():  # the deadline passes with one update
        s.execute(update(Round).where(Round.index == 0).values(deadline_at=time.time() - 0.01))
    claims = []

    def replica_starts(point: str) -> None:
        if point == "close_mid_fold" and not claims:
            assert replica.rounds.recover() == 1
            replica.uploads.accept(second, status["id"], 0, 10,
                                  shifted(service, status["global_hash"], 3))
            claims.append(replica.rounds._claim_due_round())

    monkeypatch.setattr("pflkit.server.rounds.crash_point", replica_starts)
    service.rounds.tick()  # claims round 0 at its deadline; the replica starts mid-fold
    assert claims[0] is not None
    replica.rounds.close_round(claims[0])
    status, _ = current(service)
    assert status["rounds_done"] == 1 and status["history"][0]["metrics"]["participants"] == 2
    assert all(bool((v == 2).all()) for v in global_of(service, status["global_hash"]).values())


def test_a_close_that_raises_reopens_the_round_and_the_next_tick_closes_it(tmp_path,
                                                                          database_url):
    """An unreadable blob makes the close raise: the round must not stay ``closing`` until
    the 300 s lease expires, but be retried by the next tick once the blob is back."""
    service, _ = service_for(tmp_path, database_url)
    status, rnd = current(service)
    bodies = {cid: shifted(service, status["global_hash"], cid + 1) for cid in rnd["sampled"]}
    receipts = [service.uploads.accept(cid, status["id"], 0, 10, body)
                for cid, body in bodies.items()]
    blob = service.store.blobs.path(receipts[0].sha256)
    hidden = blob.with_name("hidden")
    blob.rename(hidden)
    with pytest.raises(FileNotFoundError):
        service.rounds.tick()
    status, rnd = current(service)
    assert status["rounds_done"] == 0 and rnd["status"] == "open"
    hidden.rename(blob)
    service.rounds.tick()
    status, _ = current(service)
    assert status["rounds_done"] == 1 and status["history"][0]["metrics"]["participants"] == 2


def test_a_stored_update_the_close_cannot_read_is_dropped_and_the_round_closes(
        tmp_path, database_url, caplog):
    """An update accepted at upload and unreadable at close (its checksum did not match) made
    every close raise and reopen the round, for good: it is dropped, naming its client."""
    service, _ = service_for(tmp_path, database_url)
    status, rnd = current(service)
    bad, good = rnd["sampled"]
    receipts = {cid: service.uploads.accept(cid, status["id"], 0, 10,
                                            shifted(service, status["global_hash"], cid + 1))
                for cid in (bad, good)}
    blob = service.store.blobs.path(receipts[bad].sha256)
    blob.chmod(0o600)
    blob.write_bytes(state_to_bytes(global_of(service, status["global_hash"]),
                                    {CHECKSUM_KEY: "0" * 64}))
    with caplog.at_level(logging.WARNING, logger="pflkit.server.rounds"):
        service.rounds.tick()
    status, _ = current(service)
    assert status["rounds_done"] == 1 and status["history"][0]["metrics"]["participants"] == 1
    assert all(bool((v == good + 1).all())
               for v in global_of(service, status["global_hash"]).values())
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1 and f"client {bad}'s update" in dropped[0], dropped
