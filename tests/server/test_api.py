"""The API refuses bad input with a 4xx and a message, and a refusal changes nothing.

One real server for the module (the ``api`` fixture of tests/server/conftest.py, on SQLite,
then on PostgreSQL): 50 rounds, two of three clients sampled per round, and a round closes at
its first accepted update (``--min-clients 1``) so every test gets a fresh round. Malformed
JSON and schemathesis's generated requests: test_api_fuzz.py; malformed and dishonest update
bodies: test_api_bad_uploads.py.
"""

from __future__ import annotations

import hashlib
import json
import socket

import httpx
import pytest
import torch
from api_harness import LIMIT, MAX_SAMPLES, auth, open_round, snapshot, upload, valid_update
from server_harness import ADMIN, run_toml
from waiting import GUARD

from pflkit.sdk.client import FederatedClient
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.tensorio import state_to_bytes


def test_oversized_body_is_refused_with_413(api):
    server, secrets = api
    rnd = open_round(server, secrets)
    before = snapshot(server)
    reply = upload(server, rnd, rnd["sampled"][0], b"\0" * (LIMIT + 1))
    assert reply.status_code == 413 and "limit" in reply.json()["detail"]
    assert snapshot(server) == before


@pytest.mark.parametrize(("where", "status"), [("future round", 409), ("unknown run", 404),
                                               ("unsampled", 403), ("negative count", 422),
                                               ("count over the limit", 422),
                                               ("empty with a huge count", 422)])
def test_misaddressed_upload_is_refused_and_changes_nothing(api, where, status):
    server, secrets = api
    rnd = open_round(server, secrets)
    body = state_to_bytes(valid_update(rnd))
    before = snapshot(server)
    if where == "future round":
        reply = upload(server, rnd, rnd["sampled"][0], body, round_index=rnd["round"] + 5)
    elif where == "unknown run":
        reply = upload(server, rnd, rnd["sampled"][0], body, run=999)
    elif where == "unsampled":
        reply = upload(server, rnd, rnd["unsampled"][0], body)
    elif where == "count over the limit":
        reply = upload(server, rnd, rnd["sampled"][0], body, num_samples=MAX_SAMPLES + 1)
    elif where == "empty with a huge count":
        reply = upload(server, rnd, rnd["sampled"][0], state_to_bytes({}), num_samples=2**40)
    else:
        reply = upload(server, rnd, rnd["sampled"][0], body, num_samples=-1)
    assert reply.status_code == status, reply.text
    assert snapshot(server) == before


def test_a_refused_upload_is_refused_before_its_body_is_read(api):
    """The server answers an unsampled client at once, not after buffering the body."""
    server, secrets = api
    rnd = open_round(server, secrets)
    head = (f"PUT /v1/runs/{rnd['run']}/rounds/{rnd['round']}/update?num_samples=10 HTTP/1.1\r\n"
            f"Host: x\r\nAuthorization: Bearer {rnd['unsampled'][0]}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {LIMIT}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as sock:
        sock.sendall(head.encode() + b"\0" * 1024)  # then nothing: the rest never comes
        reply = b""
        while b"}" not in reply:  # the whole JSON answer
            reply += sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 403 ") and b"not sampled" in reply


def test_replay_is_idempotent_second_update_conflicts_late_upload_is_gone(api):
    server, secrets = api
    rnd = open_round(server, secrets)
    first, other = rnd["sampled"]
    body = state_to_bytes(valid_update(rnd), {"metrics": json.dumps({"train_loss": 0.5})})
    accepted = upload(server, rnd, first, body)
    assert accepted.status_code == 200, accepted.text
    timing = dict(p.strip().split(";dur=") for p in accepted.headers["server-timing"].split(","))
    assert set(timing) == {"admit", "body", "accept", "app"}
    assert all(float(v) >= 0 for v in timing.values())
    assert accepted.json() == {"run_id": rnd["run"], "round": rnd["round"],
                               "sha256": hashlib.sha256(body).hexdigest(), "duplicate": False}
    replay = upload(server, rnd, first, body)
    assert replay.status_code == 200 and replay.json()["duplicate"] is True
    different = upload(server, rnd, first, state_to_bytes(valid_update(rnd, 0.02)))
    assert different.status_code == 409 and "different update" in different.json()["detail"]
    status = server.wait_for(lambda s: s["rounds_done"] > rnd["round"])
    closed = status["history"][rnd["round"]]
    assert closed["metrics"]["participants"] == 1 and closed["metrics"]["train_loss"] == 0.5
    late = upload(server, rnd, other, state_to_bytes(valid_update(rnd)))
    assert late.status_code == 410 and "late" in late.json()["detail"]


def test_missing_wrong_and_revoked_credentials_are_refused(api):
    server, _ = api
    task = f"{server.url}/v1/task"
    assert httpx.get(task).status_code == 401
    assert httpx.get(task, headers=auth("pfc_wrong")).status_code == 401
    client_id, secret = server.enroll()
    assert httpx.get(task, headers=auth(secret)).status_code == 200
    with server.admin() as http:
        assert http.post(f"/v1/clients/{client_id}/revoke").status_code == 204
        listed = {c["id"]: c for c in http.get("/v1/clients").json()}
    assert listed[client_id]["revoked"] is True
    refused = httpx.get(task, headers=auth(secret))
    assert refused.status_code == 403 and "revoked" in refused.json()["detail"]
    # a client secret is not an admin token, and vice versa
    assert httpx.get(f"{server.url}/v1/runs/current", headers=auth(secret)).status_code == 401
    assert httpx.get(task, headers=auth(ADMIN)).status_code == 401


def test_enrollment_tokens_are_single_use_revocable_and_reserve_ids(api):
    server, _ = api
    enroll = f"{server.url}/v1/clients/enroll"
    with server.admin() as http:
        issued = http.post("/v1/enrollment-tokens", json={"client_id": 40}).json()
        assert http.post("/v1/enrollment-tokens", json={"client_id": 40}).status_code == 409
        first = httpx.post(enroll, json={"token": issued["token"]})
        assert first.status_code == 201 and first.json()["client_id"] == 40
        assert httpx.post(enroll, json={"token": issued["token"]}).status_code == 409
        revoked = http.post("/v1/enrollment-tokens", json={}).json()
        assert http.delete(f"/v1/enrollment-tokens/{revoked['id']}").status_code == 204
        assert httpx.post(enroll, json={"token": revoked["token"]}).status_code == 403
        http.post("/v1/clients/40/revoke").raise_for_status()  # keep the roster small
    assert httpx.post(enroll, json={"token": "pfe_unknown"}).status_code == 401


def test_json_fields_are_strict_no_coercion_no_unknown_keys(api):
    """``{"client_id": "8"}`` reserved id 8 and ``true`` was read as 1."""
    server, _ = api
    with server.admin() as http:
        for body in ({"client_id": "8"}, {"client_id": True}, {"client_id": 8.0},
                     {"ttl_seconds": "3600"}, {"ttl_seconds": True}, {"client": 8}):
            reply = http.post("/v1/enrollment-tokens", json=body)
            assert reply.status_code == 422 and reply.json()["detail"], (body, reply.text)
        issued = http.post("/v1/enrollment-tokens", json={"client_id": 8, "ttl_seconds": 60})
        assert issued.status_code == 201, issued.text  # id 8 was not reserved by the above
        assert http.delete(f"/v1/enrollment-tokens/{issued.json()['id']}").status_code == 204
        assert http.post("/v1/runs", json={"config_toml": 5}).status_code == 422
    enroll = f"{server.url}/v1/clients/enroll"
    assert httpx.post(enroll, json={"token": 5}).status_code == 422


def test_global_state_download_is_cacheable_by_hash(api):
    server, secrets = api
    rnd = open_round(server, secrets)
    digest = rnd["hash"]
    url = f"{server.url}/v1/globals/{digest}"
    reply = httpx.get(url, headers=auth(secrets[0]))
    assert reply.status_code == 200 and reply.headers["etag"] == f'"{digest}"'
    assert "immutable" in reply.headers["cache-control"]
    cached = httpx.get(url, headers={**auth(secrets[0]), "If-None-Match": f'"{digest}"'})
    assert cached.status_code == 304
    assert httpx.get(f"{server.url}/v1/globals/{'0' * 64}",
                     headers=auth(secrets[0])).status_code == 404
    assert httpx.get(f"{server.url}/v1/globals/../etc",
                     headers=auth(secrets[0])).status_code in (404, 422)


def test_pause_refuses_uploads_resume_continues_and_runs_do_not_overlap(api):
    server, secrets = api
    rnd = open_round(server, secrets)
    with server.admin() as http:
        assert http.post(f"/v1/runs/{rnd['run']}/pause").json()["status"] == "paused"
        assert http.post(f"/v1/runs/{rnd['run']}/pause").status_code == 409
        task = httpx.get(f"{server.url}/v1/task", headers=auth(rnd["sampled"][0])).json()
        assert task["status"] == "paused"
        before = snapshot(server)
        reply = upload(server, rnd, rnd["sampled"][0], state_to_bytes(valid_update(rnd)))
        assert reply.status_code == 409 and "paused" in reply.json()["detail"]
        assert snapshot(server) == before
        assert http.post("/v1/runs", json={"config_toml": run_toml()}).status_code == 409
        assert http.post(f"/v1/runs/{rnd['run']}/resume").json()["status"] == "active"
        bad = http.post("/v1/runs", json={"config_toml": "rounds = 'many'"})
        assert bad.status_code in (409, 422)
    assert upload(server, rnd, rnd["sampled"][0],
                  state_to_bytes(valid_update(rnd))).status_code == 200


def test_device_killed_after_training_resends_the_same_bytes(api, tmp_path):
    """The pending file makes a restarted app upload what it trained, not train again."""
    server, secrets = api
    rnd = open_round(server, secrets)
    cid = next(c for c, s in secrets.items() if s == rnd["sampled"][0])
    state_dir = tmp_path / "device"
    state_dir.mkdir()
    (state_dir / "credentials.json").write_text(json.dumps(
        {"server": server.url, "client_id": cid, "secret": secrets[cid]}))
    data = LabeledTensors(torch.rand(30, 1, 28, 28), torch.arange(30) % 10)
    first = FederatedClient(server.url, state_dir, data)
    task = httpx.get(f"{server.url}/v1/task", headers=auth(secrets[cid])).json()
    upload_bytes = first._train(task).upload  # the app dies here, before uploading
    step = FederatedClient(server.url, state_dir, data).step()  # the app restarts
    assert (step.status, step.round) == ("trained", rnd["round"])
    assert not (state_dir / "pending.safetensors").exists()
    digest = hashlib.sha256(upload_bytes).hexdigest()
    assert (server.data_dir / "blobs" / digest[:2] / digest).is_file()
    status = server.wait_for(lambda s: s["rounds_done"] > rnd["round"])
    assert status["history"][rnd["round"]]["metrics"]["participants"] == 1
