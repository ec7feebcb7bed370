"""Round logic of the service in-process (real blob store, no HTTP).

Each test runs on a SQLite file and on a real PostgreSQL database (``database_url``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from server_harness import run_toml
from service_harness import current, global_of, service_for, shifted
from sqlalchemy import select, update
from waiting import GUARD

from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.errors import Conflict, Forbidden, Gone, Invalid, Unauthorized
from pflkit.server.orm import Round, Update
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings


def test_round_closes_at_the_deadline_with_the_updates_it_has(tmp_path, database_url):
    # a deadline no busy machine reaches by itself: the test moves it (below)
    service, _ = service_for(tmp_path, database_url, round_deadline=2 * GUARD)
    status, rnd = current(service)
    with service.store.sessions() as s:  # the round's deadline is the configured one
        opened = s.scalar(select(Round).where(Round.index == 0))
        assert opened.deadline_at - opened.opened_at == pytest.approx(2 * GUARD, abs=1)
    first, dropout = rnd["sampled"]
    service.uploads.accept(first, status["id"], 0, 10, shifted(service, status["global_hash"], 1))
    service.rounds.tick()
    assert current(service)[0]["rounds_done"] == 0  # no quorum yet, deadline not reached
    with service.store.sessions() as s, s.begin():  # the deadline passes (no sleep: no race)
        s.execute(update(Round).where(Round.index == 0).values(deadline_at=time.time() - 0.01))
    service.rounds.tick()
    status, rnd = current(service)
    assert status["rounds_done"] == 1 and rnd["index"] == 1
    assert status["history"][0]["metrics"]["participants"] == 1
    assert all(bool((v == 1).all()) for v in global_of(service, status["global_hash"]).values())
    with pytest.raises(Gone, match="late"):
        service.uploads.accept(dropout, status["id"], 0, 10,
                              shifted(service, status["history"][0]["global_hash"], 2))


def test_the_upload_that_completes_the_quorum_wakes_the_round_keeper(tmp_path, database_url):
    service, _ = service_for(tmp_path, database_url)
    wakes = []
    service.uploads.on_quorum = lambda: wakes.append(current(service)[1]["received"])
    status, rnd = current(service)
    first, second = rnd["sampled"]
    body = shifted(service, status["global_hash"], 1)
    service.uploads.accept(first, status["id"], 0, 10, body)
    service.uploads.accept(first, status["id"], 0, 10, body)  # a replay adds nothing
    assert wakes == []
    service.uploads.accept(second, status["id"], 0, 10, body)
    assert wakes == [sorted(rnd["sampled"])]  # woken once, after the commit


WORKER = """
import sys, json
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings
service = build_service(ServerSettings())
bodies = {int(k): bytes.fromhex(v) for k, v in json.loads(sys.stdin.read()).items()}
token = service.enrollment.issue_token(None, None)[1]
service.enrollment.enroll(token)
for cid, body in bodies.items():
    task = service.tasks.task(cid)
    assert task["status"] == "train", task
    service.tasks.global_blob(task["global_hash"])
    service.uploads.accept(cid, task["run_id"], task["round"], 10, body)
service.runs.transition(task["run_id"], "stop")
service.runs.create(service.settings.run_config.read_text())  # in a child process
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "torch")[:3]))
"""


def test_a_worker_serves_a_round_without_importing_pytorch(tmp_path, database_url):
    """Enrollment, tasks, downloads, uploads (schema and NaN checks included) and creating a
    run leave an HTTP worker without PyTorch (~0.5 GB lighter per process)."""
    service, _ = service_for(tmp_path, database_url, per_round=3)
    status, rnd = current(service)
    bodies = {cid: shifted(service, status["global_hash"], 1).hex() for cid in rnd["sampled"]}
    env = {**os.environ, "PFL_SERVER_ADMIN_TOKEN": "x" * 20,
           "PFL_SERVER_DATA_DIR": str(tmp_path / "data"),
           "PFL_SERVER_RUN_CONFIG": str(tmp_path / "run.toml")}
    if database_url:
        env["PFL_SERVER_DATABASE_URL"] = database_url
    done = subprocess.run([sys.executable, "-c", WORKER], input=json.dumps(bodies), env=env,
                          capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    with service.store.sessions() as s:  # the stopped run's round took the three uploads
        received = s.scalars(select(Update.client_id).join(Round).where(
            Round.run_id == status["id"]).order_by(Update.client_id)).all()
    assert list(received) == rnd["sampled"]
    created = service.runs.status(None)
    assert created["id"] == status["id"] + 1 and created["status"] == "active"


def test_credentials_and_sampling_are_enforced(tmp_path, database_url):
    service, clients = service_for(tmp_path, database_url)
    status, rnd = current(service)
    outsider = next(c for c in clients if c not in rnd["sampled"])
    body = shifted(service, status["global_hash"], 1)
    with pytest.raises(Forbidden, match="not sampled"):
        service.uploads.accept(outsider, status["id"], 0, 10, body)
    full = global_of(service, status["global_hash"])
    with pytest.raises(Invalid, match="expected"):
        service.uploads.accept(rnd["sampled"][0], status["id"], 0, 10,
                              state_to_bytes({**full, "head.bias": torch.zeros(2, 2)}))
    with pytest.raises(Invalid, match="lacks tensor"):
        service.uploads.accept(rnd["sampled"][0], status["id"], 0, 10,
                              state_to_bytes({"head.bias": full["head.bias"]}))
    with pytest.raises(Unauthorized):
        service.enrollment.authenticate("pfc_nobody")
    assert service.enrollment.authenticate(clients[outsider]) == outsider
    service.enrollment.revoke_client(outsider)
    with pytest.raises(Forbidden, match="revoked"):
        service.enrollment.authenticate(clients[outsider])


def test_concurrent_enrollments_get_distinct_ids(tmp_path, database_url):
    """A free id is the highest plus one; under PostgreSQL racing enrollments retry."""
    service, _ = service_for(tmp_path, database_url)
    tokens = [service.enrollment.issue_token(None, None)[1] for _ in range(12)]
    with ThreadPoolExecutor(6) as pool:
        enrolled = list(pool.map(service.enrollment.enroll, tokens))
    assert sorted(cid for cid, _ in enrolled) == list(range(3, 15))
    assert all(service.enrollment.authenticate(secret) == cid for cid, secret in enrolled)
    with pytest.raises(Conflict, match="already used"):
        service.enrollment.enroll(tokens[0])


def test_a_client_racing_itself_is_counted_once(tmp_path, database_url):
    service, _ = service_for(tmp_path, database_url)
    status, rnd = current(service)
    body, cid = shifted(service, status["global_hash"], 1), rnd["sampled"][0]
    with ThreadPoolExecutor(6) as pool:
        receipts = list(pool.map(
            lambda _: service.uploads.accept(cid, status["id"], 0, 10, body), range(6)))
    assert sorted(r.duplicate for r in receipts) == [False] + [True] * 5
    assert current(service)[1]["received"] == [cid]
    with service.store.sessions() as s:  # the losers' increments rolled back with their inserts
        assert s.scalar(select(Round.received).where(Round.index == 0)) == 1


def test_a_run_whose_updates_no_device_could_upload_is_refused(tmp_path):
    """twonn's update is ~0.8 MB: under a 100 kB upload limit every device would get 413."""
    values = {"admin_token": "x" * 20, "data_dir": tmp_path / "data",
              "max_upload_bytes": 100_000}
    service = build_service(ServerSettings(**values))
    with pytest.raises(Invalid, match=r"^run config: an update of this model holds \d+ bytes "
                                      r"of tensors, more than max_upload_bytes \(100000\)"):
        service.runs.create(run_toml("fedavg"))
    blobs = service.store.settings.blobs
    assert not blobs.exists() or not [p for p in blobs.rglob("*") if p.is_file()]
    with service.store.transaction() as session:
        assert service.store.current_run(session) is None
