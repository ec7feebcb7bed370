"""The API refuses bad input with a 4xx and a message, and a refusal changes nothing.

One real server for the module (on SQLite, then on PostgreSQL): 50 rounds, two of three
clients sampled per round, and a round closes at its first accepted update
(``--min-clients 1``) so every test gets a fresh round. The last test runs schemathesis
against the OpenAPI schema and asserts no 5xx.
"""

from __future__ import annotations

import hashlib
import json
import socket

import httpx
import pytest
import schemathesis
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_harness import ADMIN, Server, run_toml
from waiting import GUARD

from pflkit.sdk.client import FederatedClient
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.tensorio import state_from_bytes, state_to_bytes

LIMIT = 1_500_000  # bytes; a twonn update on 28x28 inputs is about 0.8 MB
MAX_SAMPLES = 1000  # the server's bound on an update's self-reported sample count


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(request, tmp_path_factory):
    """The server of the module's tests: on a SQLite file, then on a PostgreSQL database."""
    root = tmp_path_factory.mktemp("api")
    database, cluster = [], None
    if request.param == "postgresql":
        cluster = request.getfixturevalue("postgres_cluster")
        name = cluster.create_database()
        database = ["--database-url", cluster.url(name)]
    server = Server(root / "server", run_toml("fedavg", rounds=50),
                    ["--min-enrolled", "3", "--min-clients", "1", "--max-upload-bytes",
                     str(LIMIT), "--max-num-samples", str(MAX_SAMPLES),
                     "--auth-failure-limit", "100000", *database])
    server.root.mkdir()
    server.start()
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    yield server, secrets
    server.stop()
    if cluster is not None:
        cluster.drop_database(name)


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def open_round(server: Server, secrets: dict[int, str]) -> dict:
    """The open round: run id, index, global state, sampled and unsampled clients' secrets."""
    while True:
        tasks = {cid: httpx.get(f"{server.url}/v1/task", headers=auth(s)).json()
                 for cid, s in secrets.items()}
        train = [cid for cid, t in tasks.items() if t["status"] == "train"]
        if len(train) == 2:
            task = tasks[train[0]]
            blob = httpx.get(f"{server.url}/v1/globals/{task['global_hash']}",
                             headers=auth(secrets[train[0]])).content
            return {"run": task["run_id"], "round": task["round"], "hash": task["global_hash"],
                    "global": state_from_bytes(blob), "sampled": [secrets[c] for c in train],
                    "unsampled": [secrets[c] for c in secrets if c not in train]}


def upload(server: Server, rnd: dict, secret: str, body: bytes, num_samples: int = 10,
           round_index: int | None = None, run: int | None = None) -> httpx.Response:
    index = rnd["round"] if round_index is None else round_index
    return httpx.put(f"{server.url}/v1/runs/{run or rnd['run']}/rounds/{index}/update",
                     params={"num_samples": num_samples}, content=body,
                     headers={**auth(secret), "Content-Type": "application/octet-stream"})


def snapshot(server: Server) -> tuple:
    status = server.status()
    blobs = sorted(p.name for p in (server.data_dir / "blobs").rglob("*") if p.is_file())
    return status["rounds_done"], status["current_round"], blobs


def valid_update(rnd: dict, shift: float = 0.01) -> dict[str, torch.Tensor]:
    return {k: v + shift for k, v in rnd["global"].items()}


def last(state: dict) -> str:
    return list(state)[-1]  # e.g. head.bias


def bad_updates(rnd: dict) -> dict[str, bytes]:
    good = valid_update(rnd)
    first = next(iter(good))
    nan, inf = dict(good), dict(good)
    nan[first] = nan[first].clone()
    nan[first].view(-1)[3] = float("nan")
    inf[first] = inf[first].clone()
    inf[first].view(-1)[0] = float("inf")
    body = state_to_bytes(good)
    return {
        "wrong shape": state_to_bytes({**good, first: torch.zeros(3, 3)}),
        "missing tensor": state_to_bytes({k: v for k, v in good.items() if k != last(good)}),
        "no tensors": state_to_bytes({}),
        "wrong dtype": state_to_bytes({**good, first: good[first].double()}),
        "unknown tensor": state_to_bytes({**good, "extra.weight": torch.zeros(2)}),
        "nan": state_to_bytes(nan),
        "inf": state_to_bytes(inf),
        "truncated": body[: len(body) // 2],
        "corrupt header": b"\xff" * 8 + body[8:],
        "not safetensors": b"hello world, this is not a tensor file",
        "empty": b"",
        "bad metrics": state_to_bytes(good, {"metrics": "{not json"}),
        "nan metric": state_to_bytes(good, {"metrics": json.dumps({"loss": float("nan")})}),
        **{name: state_to_bytes(good, {"metrics": raw}) for name, raw in BAD_METRICS.items()},
    }


BAD_METRICS = {  # each crashed the handler (500) or was stored as is
    "400-digit metric": '{"loss": 1' + "0" * 400 + "}",
    "5000-digit metric": '{"loss": ' + "9" * 5000 + "}",
    "metrics nested 200k deep": "[" * 200_000 + "]" * 200_000,
    "metric nested 2000 deep": '{"loss": ' + "[" * 2000 + "]" * 2000 + "}",
    "metrics not an object": "[1, 2]",
    "boolean metric": '{"ok": true}',
    "infinite metric": '{"loss": 1e400}',
    "too many metrics": json.dumps({f"m{i}": 1.0 for i in range(1000)}),
    "long metric name": json.dumps({"x" * 1000: 1.0}),
}
EXPECTED = {**dict.fromkeys(BAD_METRICS, 400), "wrong shape": 422, "missing tensor": 422,
            "no tensors": 422, "wrong dtype": 422, "unknown tensor": 422, "nan": 422,
            "inf": 422, "truncated": 400, "corrupt header": 400, "not safetensors": 400,
            "empty": 400, "bad metrics": 400, "nan metric": 400}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_bad_update_is_refused_and_changes_nothing(api, case):
    server, secrets = api
    rnd = open_round(server, secrets)
    before = snapshot(server)
    reply = upload(server, rnd, rnd["sampled"][0], bad_updates(rnd)[case])
    assert reply.status_code == EXPECTED[case], reply.text
    assert reply.json()["detail"]
    assert snapshot(server) == before


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


def unparseable_json_values() -> st.SearchStrategy[str]:
    """JSON values Python cannot hold as a finite float or parse without deep recursion."""
    digits = st.integers(310, 6000)  # integers beyond float range (and Python's str limit)
    beyond_float = st.tuples(st.sampled_from("123456789"), digits).map(lambda t: t[0] * t[1])
    # nesting far beyond the recursion limit, yet small enough that an upload carrying it
    # (escaped in the safetensors header, next to the tensors) stays under LIMIT, not 413
    deep = st.integers(1_000, 60_000)
    return st.one_of(
        beyond_float, beyond_float.map(lambda v: "-" + v),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]),
        deep.map(lambda n: "[" * n + "]" * n),
        deep.map(lambda n: '{"a": ' * n + "1" + "}" * n))


def malformed_metrics() -> st.SearchStrategy[str]:
    """JSON texts for the ``metrics`` metadata that are never a valid metrics object."""
    bad_value = st.one_of(unparseable_json_values(), st.sampled_from(
        ["true", "null", '"1.5"', "[]", "{}", "[1.0]"]))
    name = st.text(max_size=12)
    fine = st.floats(allow_nan=False, allow_infinity=False).map(json.dumps)
    with_a_bad_value = st.tuples(st.lists(st.tuples(name, fine), max_size=3), name, bad_value).map(
        lambda t: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in [*t[0], t[1:]]) + "}")
    not_an_object = st.one_of(bad_value, st.text(max_size=40)).filter(
        lambda text: not text.strip().startswith("{"))
    too_big = st.integers(65, 500).map(lambda n: json.dumps({f"m{i}": 1.0 for i in range(n)}))
    return st.one_of(with_a_bad_value, not_an_object, too_big)


def test_generated_malformed_metrics_are_refused_with_400(api):
    """Schemathesis on the upload operation, its body drawn from malformed metrics."""
    server, secrets = api
    rnd = open_round(server, secrets)
    good = valid_update(rnd)
    schemathesis.openapi.media_type(
        "application/octet-stream",
        malformed_metrics().map(lambda text: state_to_bytes(good, {"metrics": text})))
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operation = schema["/v1/runs/{run_id}/rounds/{round_index}/update"]["PUT"]
    before = snapshot(server)
    statuses: list[int] = []

    @given(case=operation.as_strategy(path_parameters={"run_id": rnd["run"],
                                                       "round_index": rnd["round"]},
                                      query={"num_samples": 10}))
    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        response = case.call(headers=auth(rnd["sampled"][0]), timeout=GUARD)
        statuses.append(response.status_code)
        assert response.status_code == 400, (case.body[:300], response.text[:300])

    check()
    assert len(statuses) >= 40
    assert snapshot(server) == before


ADMIN_PATHS = ("/v1/runs", "/v1/enrollment-tokens", "/v1/clients/{client_id}/revoke")


def admin_operation(operation) -> bool:
    """Whether the operation takes the admin token (else a client's secret)."""
    client_paths = ("/rounds/", "/queries/")
    return (operation.path.startswith(ADMIN_PATHS)
            and not any(part in operation.path for part in client_paths)
            or (operation.path, operation.method.upper()) == ("/v1/clients", "GET"))


UNPARSEABLE = {"400-digit integer": "1" + "0" * 400, "5000-digit integer": "9" * 5000,
               "1e400": "1e400", "NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity",
               "array nested 200k deep": "[" * 200_000 + "]" * 200_000}
JSON_BODIES = {  # (path, admin, fields); the algorithm query: test_end_to_end (a FedRoD run)
    "create run": ("/v1/runs", True, ["config_toml"]),
    "issue token": ("/v1/enrollment-tokens", True, ["client_id", "ttl_seconds"]),
    "enroll": ("/v1/clients/enroll", False, ["token"]),
}


@pytest.mark.parametrize("value", list(UNPARSEABLE))
@pytest.mark.parametrize("operation", list(JSON_BODIES))
def test_unparseable_json_values_are_refused_with_4xx(api, operation, value):
    """As a field and as the whole body: 400 or 422 with a message, never a 500."""
    server, secrets = api
    open_round(server, secrets)  # the snapshot compares open rounds
    path, admin, fields = JSON_BODIES[operation]
    headers = {"Content-Type": "application/json", **(auth(ADMIN) if admin else {})}
    bodies = [with_unparseable_value({}, f, UNPARSEABLE[value]) for f in [None, *fields]]
    before = snapshot(server)
    for body in bodies:
        reply = httpx.post(f"{server.url}{path}", content=body, headers=headers, timeout=GUARD)
        assert reply.status_code in (400, 422), (body[:60], reply.status_code, reply.text[:200])
        assert reply.json()["detail"]
    assert snapshot(server) == before


@pytest.mark.parametrize("operation", list(JSON_BODIES))
def test_a_body_that_is_not_json_gets_400_and_json_of_another_shape_422(api, operation):
    """One rule for every JSON endpoint (docs/server.md): tokens, enroll and runs said 422."""
    server, _ = api
    path, admin, _ = JSON_BODIES[operation]
    headers = {"Content-Type": "application/json", **(auth(ADMIN) if admin else {})}
    for raw, status in [("not json", 400), ("", 400), ('{"token": ', 400), ("NaN", 400),
                        ('{"a": 1} {"b": 2}', 400), ("[]", 422), ("null", 422),
                        ('{"no such field": 1}', 422)]:
        reply = httpx.post(f"{server.url}{path}", content=raw, headers=headers)
        assert reply.status_code == status and reply.json()["detail"], (raw, reply.text)


def json_operations(schema) -> list:
    """The schema's operations whose request body is JSON."""
    return [op for op in (r.ok() for r in schema.get_all_operations())
            if "application/json" in op.definition.raw.get("requestBody", {}).get("content", {})]


def with_unparseable_value(body: object, field: str | None, value: str) -> str:
    """``body`` as JSON text with ``field`` (or the whole body) replaced by ``value``."""
    if field is None or not isinstance(body, dict):
        return value
    return json.dumps({**body, field: "\0bad"}).replace('"\\u0000bad"', value)


def fuzz_with_unparseable_values(operation, headers: dict[str, str], statuses: list) -> None:
    """Schemathesis draws the operation's cases; one value (or the body) becomes unparseable."""
    fields = list(operation.definition.raw["requestBody"]["content"]["application/json"]
                  .get("schema", {}).get("properties", {}))
    allowed = (400, 422, 404) if "/queries/" in operation.path else (400, 422)  # 404: no query

    @given(case=operation.as_strategy(), field=st.sampled_from([None, *fields]),
           value=unparseable_json_values())
    @settings(max_examples=8, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case, field, value):
        raw = with_unparseable_value(case.body, field, value)
        response = case.call(headers=headers, json=None, data=raw.encode(), timeout=GUARD)
        statuses.append(response.status_code)
        assert response.status_code in allowed, (operation.path, raw[:200], response.text[:200])

    check()


def test_generated_json_bodies_with_unparseable_values_are_refused(api):
    """Schemathesis on every JSON operation, bodies with unparseable values: 400/422, never 5xx."""
    server, secrets = api
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = json_operations(schema)
    assert {op.path for op in operations} >= {path for path, _, _ in JSON_BODIES.values()}
    open_round(server, secrets)
    before = snapshot(server)
    statuses: list[int] = []
    for operation in operations:
        headers = {**auth(ADMIN if admin_operation(operation) else secrets[2]),
                   "Content-Type": "application/json"}
        fuzz_with_unparseable_values(operation, headers, statuses)
    assert len(statuses) >= 8 * len(operations)
    assert snapshot(server) == before


def fuzz(operation, headers: dict[str, str], failures: list, seen: list) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=12, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        response = case.call(headers=headers, timeout=GUARD)
        seen.append(response.status_code)
        if response.status_code >= 500:
            failures.append((case.method, case.path, case.path_parameters, response.text[:200]))

    check()


def test_no_generated_request_makes_the_server_fail(api):
    """Schemathesis: examples of every operation of the OpenAPI schema; never a 5xx."""
    server, secrets = api
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    failures: list = []
    seen: list = []
    for result in schema.get_all_operations():
        operation = result.ok()
        fuzz(operation, auth(ADMIN if admin_operation(operation) else secrets[2]), failures,
             seen)
    assert not failures
    assert len(seen) >= 30 and any(code < 300 for code in seen), sorted(set(seen))

