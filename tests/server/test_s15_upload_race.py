"""Uploads racing their round's close: every acknowledged update is in the round, no other is.

Eight sampled devices upload at once into rounds that close at the first accepted update
(``--min-clients 1``): each upload either gets its receipt (200) and is counted in the closed
round's ``participants``, or is refused as late (410) and counted nowhere. A real server on
loopback, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import threading

import httpx
from api_harness import auth
from server_harness import run_toml
from waiting import GUARD, wait_until

from pflkit.sdk.tensorio import state_from_bytes, state_to_bytes

DEVICES = 8
ROUNDS = 3


def train_tasks(url: str, secrets: dict[int, str]) -> dict[int, dict] | None:
    """Each device's task, if all of them are asked to train the same round (else None)."""
    tasks = {cid: httpx.get(f"{url}/v1/task", headers=auth(s), timeout=GUARD).json()
             for cid, s in secrets.items()}
    if all(t["status"] == "train" for t in tasks.values()) and \
            len({t["round"] for t in tasks.values()}) == 1:
        return tasks
    return None


def race(url: str, global_state: dict, secrets: dict[int, str]) -> dict[int, httpx.Response]:
    """Every device PUTs its own valid update to ``url`` at the same moment."""
    start, replies = threading.Barrier(len(secrets)), {}

    def send(cid: int) -> None:
        body = state_to_bytes({k: v + 0.01 * (cid + 1) for k, v in global_state.items()})
        start.wait(GUARD)
        replies[cid] = httpx.put(url, params={"num_samples": 10}, content=body, timeout=GUARD,
                                 headers={**auth(secrets[cid]),
                                          "Content-Type": "application/octet-stream"})

    threads = [threading.Thread(target=send, args=(cid,)) for cid in secrets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD)
    return replies


def test_uploads_racing_the_close_are_each_counted_exactly_when_acknowledged(
        database_url, make_server):
    database = ["--database-url", database_url] if database_url else []
    server = make_server(run_toml("fedavg", rounds=ROUNDS, num_clients=DEVICES,
                                  per_round=DEVICES),
                         "--min-enrolled", str(DEVICES), "--min-clients", "1", *database)
    secrets = {cid: server.enroll(cid)[1] for cid in range(DEVICES)}
    for index in range(ROUNDS):
        tasks = wait_until(lambda: train_tasks(server.url, secrets), "every device trains")
        task = tasks[0]
        assert task["round"] == index
        blob = httpx.get(f"{server.url}/v1/globals/{task['global_hash']}",
                         headers=auth(secrets[0]), timeout=GUARD).content
        replies = race(f"{server.url}/v1/runs/{task['run_id']}/rounds/{index}/update",
                       state_from_bytes(blob), secrets)
        codes = {cid: r.status_code for cid, r in replies.items()}
        assert set(codes.values()) <= {200, 410} and 200 in codes.values(), \
            {cid: r.text for cid, r in replies.items()}
        status = server.wait_for(lambda s, i=index: s["rounds_done"] > i)
        closed = status["history"][index]
        acknowledged = sum(code == 200 for code in codes.values())
        assert closed["metrics"]["participants"] == acknowledged, (closed, codes)
    assert server.status()["rounds_done"] == ROUNDS
