"""Malformed JSON never makes the server fail: hand-picked values, then schemathesis.

Metrics metadata, JSON fields and whole bodies Python cannot parse (huge integers, NaN,
nesting past the recursion limit) get 400 or 422 with a message and change nothing; the
last test draws examples of every operation of the OpenAPI schema and asserts no 5xx. The
server is the ``api`` fixture (tests/server/conftest.py).
"""

from __future__ import annotations

import json

import httpx
import pytest
import schemathesis
from api_harness import auth, open_round, snapshot, valid_update
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_harness import ADMIN
from waiting import GUARD

from pflkit.sdk.tensorio import state_to_bytes


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
