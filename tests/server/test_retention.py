"""``pfl-admin prune`` against a real pfl-server (real uvicorn, real SQLite): what goes, what stays.

The server deletes nothing by itself; pruning deletes the updates of ended rounds, blobs no row
names and, when asked, older global states, and never what a round still open, a paused run's
resume, a device or an export needs (server/retention.py). Blobs written within the last hour
always stay, so each test ages the files it means to be old (``age``): that is what an hour
passing does to them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
from api_harness import auth, open_round, upload, valid_update
from server_harness import BIN, run_toml
from waiting import GUARD, wait_until

from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.blobs import sha256
from pflkit.server.retention import GRACE


def blobs(server) -> dict[str, int]:
    """Every stored blob's hash and size."""
    return {p.name: p.stat().st_size for p in (server.data_dir / "blobs").glob("??/*")
            if not p.name.startswith(".")}


def age(server, keep: set[str] = frozenset()) -> None:
    """Make every blob (but ``keep``) two hours old, as if written then."""
    old = time.time() - 2 * GRACE
    for digest in set(blobs(server)) - keep:
        os.utime(server.data_dir / "blobs" / digest[:2] / digest, (old, old))


def prune(server, **body) -> dict:
    with server.admin() as http:
        return http.post("/v1/runs/prune", json=body).raise_for_status().json()


def wait_closed(server, rounds_done: int, each_poll=lambda: None) -> dict:
    """The status once ``rounds_done`` rounds closed; fails at once when a close failed."""
    log = server.root / "server.log"

    def closed() -> dict | None:
        each_poll()
        assert "closing round" not in log.read_text(), log.read_text()[-2000:]
        status = server.status()
        return status if status["rounds_done"] >= rounds_done else None

    return wait_until(closed, f"round {rounds_done - 1} closed")


def play_round(server, secrets: dict[int, str]) -> tuple[dict, list[bytes]]:
    """Both sampled clients upload (distinct bytes); returns once the round closed."""
    rnd = open_round(server, secrets)
    done = server.status()["rounds_done"]
    bodies = [state_to_bytes(valid_update(rnd, 0.01 * (i + 1) + done)) for i in range(2)]
    for secret, body in zip(rnd["sampled"], bodies, strict=True):
        assert upload(server, rnd, secret, body).status_code == 200
    wait_closed(server, done + 1)
    return rnd, bodies


def test_prune_deletes_ended_rounds_updates_and_older_globals_and_the_run_goes_on(
        database_url, make_server):
    database = [] if database_url is None else ["--database-url", database_url]
    server = make_server(run_toml("fedavg", rounds=3), "--min-enrolled", "3", *database)
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    initial = server.status()["global_hash"]
    updates = [sha256(b) for b in play_round(server, secrets)[1]]
    updates += [sha256(b) for b in play_round(server, secrets)[1]]
    status = server.status()
    started = [status["global_hash"]]  # the round-2 start state: the newest
    before = blobs(server)
    age(server)

    # the default keeps every global state: only the two closed rounds' four updates go
    dry = prune(server, dry_run=True)
    assert blobs(server) == before  # a dry run deletes nothing
    assert prune(server) == {**dry, "dry_run": False}
    assert (dry["files"], dry["updates"], dry["global_states"], dry["unreferenced"]) == \
        (4, 4, 0, 0)
    assert dry["bytes"] == sum(before[d] for d in updates)
    assert set(blobs(server)) == set(before) - set(updates)

    # the third round: its updates (aged: a round open for hours) stay while it is open
    rnd = open_round(server, secrets)
    body = state_to_bytes(valid_update(rnd, 0.5))
    assert upload(server, rnd, rnd["sampled"][0], body).status_code == 200
    age(server)
    report = prune(server, keep_globals=1)  # the initial state and round 0's result go
    assert (report["files"], report["global_states"], report["updates"]) == (2, 2, 0)
    # the initial state, downloaded in round 0 and no longer in the worker's memory: not 503
    # ("retry later"; it never comes back), 404
    got = httpx.get(f"{server.url}/v1/globals/{initial}", headers=auth(secrets[0]))
    assert (got.status_code, got.json()) == (404, {"detail": f"no global state {initial}"})
    assert set(blobs(server)) == set(started) | {sha256(body)}
    assert upload(server, rnd, rnd["sampled"][1],
                  state_to_bytes(valid_update(rnd, 0.6))).status_code == 200
    final = wait_closed(server, 3)
    assert final["history"][2]["metrics"]["participants"] == 2
    assert final["history"][:2] == status["history"]  # the rows of pruned rounds stay

    # a device of the finished run still downloads its global state (personalization)
    got = httpx.get(f"{server.url}/v1/globals/{final['global_hash']}", headers=auth(secrets[0]))
    assert got.status_code == 200 and sha256(got.content) == final["global_hash"]
    age(server)
    assert prune(server, keep_globals=1)["files"] == 3  # round 2's updates, its start state
    assert set(blobs(server)) == {final["global_hash"]}


def test_a_paused_runs_open_round_and_fresh_blobs_stay_unnamed_old_ones_go(make_server):
    server = make_server(run_toml("fedavg", rounds=2), "--min-enrolled", "3")
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    rnd = open_round(server, secrets)
    first = state_to_bytes(valid_update(rnd, 0.01))
    assert upload(server, rnd, rnd["sampled"][0], first).status_code == 200
    with server.admin() as http:
        http.post(f"/v1/runs/{rnd['run']}/pause").raise_for_status()
    stray = server.data_dir / "blobs" / "ab" / ("ab" + "0" * 62)  # a crash's leftover
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"x" * 1000)
    age(server)
    fresh = server.data_dir / "blobs" / "cd" / ("cd" + "1" * 62)  # written just now
    fresh.parent.mkdir(exist_ok=True)
    fresh.write_bytes(b"y" * 10)

    report = prune(server, keep_globals=1)
    assert (report["files"], report["bytes"], report["unreferenced"], report["recent"]) == \
        (1, 1000, 1, 1)
    assert not stray.exists() and fresh.exists()
    with server.admin() as http:
        http.post(f"/v1/runs/{rnd['run']}/resume").raise_for_status()
    assert upload(server, rnd, rnd["sampled"][1],
                  state_to_bytes(valid_update(rnd, 0.02))).status_code == 200
    closed = wait_closed(server, 1)  # with the kept update
    assert closed["history"][0]["metrics"]["participants"] == 2


def test_a_prune_racing_round_closes_never_costs_an_update(make_server):
    """Every round's first update is aged (a round open for hours) and pruned at before and
    while the upload that closes the round arrives: each close still folds both."""
    server = make_server(run_toml("fedavg", rounds=4), "--min-enrolled", "3")
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    with server.admin() as http:
        for index in range(4):
            rnd = open_round(server, secrets)
            assert upload(server, rnd, rnd["sampled"][0],
                          state_to_bytes(valid_update(rnd, 0.01 + index))).status_code == 200
            age(server)
            http.post("/v1/runs/prune", json={"keep_globals": 1}).raise_for_status()
            closing = httpx.put(
                f"{server.url}/v1/runs/{rnd['run']}/rounds/{index}/update",
                params={"num_samples": 10}, content=state_to_bytes(valid_update(rnd, 0.5)),
                headers={**auth(rnd["sampled"][1]), "Content-Type": "application/octet-stream"})
            assert closing.status_code == 200
            wait_closed(server, index + 1, each_poll=lambda: http.post(  # while it closes
                "/v1/runs/prune", json={"keep_globals": 1}).raise_for_status())
    final = server.status()
    assert final["status"] == "finished"
    assert [r["metrics"]["participants"] for r in final["history"]] == [2, 2, 2, 2]
    assert "closing round" not in (server.root / "server.log").read_text()


def pfl_admin(server, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFLKIT_")}
    return subprocess.run([str(BIN / "pfl-admin"), "--url", server.url, "--token-file",
                           str(server.root / "admin"), *args], capture_output=True, text=True,
                          timeout=GUARD, env=env)


def test_pfl_admin_prune_says_what_it_freed_in_one_line_and_refuses_bad_input(make_server):
    server = make_server(run_toml("fedavg", rounds=2), "--min-enrolled", "3")
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    play_round(server, secrets)
    newest = server.status()["global_hash"]
    size = sum(s for d, s in blobs(server).items() if d != newest)  # 2 updates, initial state
    age(server)
    done = pfl_admin(server, "prune", "--dry-run", "--keep-globals", "1")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == (f"would delete 3 blobs, {size / 1e6:.1f} MB (2 of ended rounds' "
                           "updates, 1 older global state, 0 named by no row); kept 0 written "
                           "in the last hour\n")
    line = pfl_admin(server, "prune", "--keep-globals", "1").stdout
    assert line.startswith("deleted 3 blobs, ") and line.count("\n") == 1
    assert "(2 of ended rounds' updates, 1 older global state, 0 named by no row); kept 0" in line
    as_json = json.loads(pfl_admin(server, "prune", "--json").stdout)
    assert as_json["files"] == 0 and as_json["dry_run"] is False

    for bad in (["--keep-globals", "0"], ["--keep-globals", "2147483648"],
                ["--keep-globals", "x"]):
        refused = pfl_admin(server, "prune", *bad)
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.count("\n") == 1 and "'--keep-globals'" in refused.stderr
    with server.admin() as http:
        for body in ({"keep_globals": 0}, {"keep_globals": "1"}, {"keep_globals": 2**31},
                     {"dry_run": "yes"}, {"keep": 1}):
            assert http.post("/v1/runs/prune", json=body).status_code == 422, body
    not_admin = httpx.post(f"{server.url}/v1/runs/prune", json={}, headers=auth(secrets[0]))
    assert not_admin.status_code == 401
    assert set(blobs(server)) == {newest}  # the refusals deleted nothing


def test_bytes_stored_again_are_kept_by_a_prune_that_read_the_rows_before(tmp_path):
    """An upload whose bytes an ended round also had: ``put`` finds the file there, and its
    row commits only later. The prune read the rows before that commit, so only the file's
    time tells it the blob is wanted again: storing it touches the file."""
    from pflkit.server.blobs import BlobStore

    store = BlobStore(tmp_path / "blobs")
    digest = store.put(b"an update both rounds got" * 100)
    old = time.time() - 2 * GRACE
    os.utime(store.path(digest), (old, old))
    cutoff = time.time() - GRACE  # the prune's, taken before it read the rows
    store.put(b"an update both rounds got" * 100)  # the new upload's blob; its row comes next
    assert store.remove_unless_touched(digest, cutoff) is None and store.exists(digest)
    os.utime(store.path(digest), (old, old))  # nothing stored it since: it goes
    assert store.remove_unless_touched(digest, cutoff) == 2500 and not store.exists(digest)
    assert store.remove_unless_touched(digest, cutoff) is None  # gone already: nothing to do
