"""Malformed and dishonest update bodies are refused with a 4xx and change nothing.

One real server for the module (the ``api`` fixture: SQLite, then PostgreSQL), as test_api.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from api_harness import open_round, snapshot, upload, valid_update

from pflkit.sdk.tensorio import state_to_bytes


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
        **{name: bad(body) for name, bad in BAD_HEADERS.items()},
    }


def _header(body: bytes, edit) -> bytes:
    """``body`` with its safetensors header changed by ``edit`` (text -> text)."""
    size = int.from_bytes(body[:8], "little")
    text = edit(body[8:8 + size].decode()).encode()
    return len(text).to_bytes(8, "little") + text + body[8 + size:]


BAD_HEADERS = {  # each was accepted (200), then failed every close of its round
    "checksum that does not match": lambda body: _header(
        body, lambda h: h.replace("{", '{"__metadata__":{"pflkit.sha256":"' + "0" * 64 + '"},',
                                  1)),
    "metadata a list": lambda body: _header(body, lambda h: h.replace("{", '{"__metadata__":[],',
                                                                     1)),
    "metadata 0": lambda body: _header(body, lambda h: h.replace("{", '{"__metadata__":0,', 1)),
    "lone surrogate in metadata": lambda body: _header(
        body, lambda h: h.replace("{", '{"__metadata__":{"note":"\\ud800"},', 1)),
    # a 500 (ValueError: Exceeds the limit (4300 digits) for integer string conversion)
    "5000-digit offset": lambda body: _header(
        body, lambda h: h.replace('"data_offsets":[0,', '"data_offsets":[0,' + "9" * 5000, 1)),
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
    "metric name with an escape sequence": json.dumps({"\x1b[2Jloss": 1.0}),
    "empty metric name": json.dumps({"": 1.0}),
}
EXPECTED = {**dict.fromkeys(BAD_METRICS, 400), "wrong shape": 422, "missing tensor": 422,
            "no tensors": 422, "wrong dtype": 422, "unknown tensor": 422, "nan": 422,
            "inf": 422, "truncated": 400, "corrupt header": 400, "not safetensors": 400,
            "empty": 400, "bad metrics": 400, "nan metric": 400, **dict.fromkeys(BAD_HEADERS, 400)}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_bad_update_is_refused_and_changes_nothing(api, case):
    server, secrets = api
    rnd = open_round(server, secrets)
    before = snapshot(server)
    reply = upload(server, rnd, rnd["sampled"][0], bad_updates(rnd)[case])
    assert reply.status_code == EXPECTED[case], reply.text
    assert reply.json()["detail"]
    assert snapshot(server) == before


def test_a_long_tensor_name_is_cut_in_the_refusal(api):
    """A 422 for an extra tensor named 'x' * 200000 answered with a 200 KB body."""
    server, secrets = api
    rnd = open_round(server, secrets)
    body = state_to_bytes({**valid_update(rnd), "x" * 200_000: torch.zeros(1)})
    reply = upload(server, rnd, rnd["sampled"][0], body)
    assert reply.status_code == 422 and len(reply.content) < 300, reply.content[:300]


def test_a_round_closes_with_the_honest_update_after_a_bad_checksum_is_refused(api):
    """The bad one was accepted, then every close raised and reopened the round, for good.

    The honest update's metrics also name ``participants`` and ``samples``: the server's own
    counts must stay in the run history.
    """
    server, secrets = api
    rnd = open_round(server, secrets)
    cheat, honest = rnd["sampled"]
    refused = upload(server, rnd, cheat, bad_updates(rnd)["checksum that does not match"])
    assert refused.status_code == 400 and "sha256" in refused.json()["detail"], refused.text
    metrics = {"participants": 999.0, "samples": 12345.0, "train_loss": 0.5}
    body = state_to_bytes(valid_update(rnd), {"metrics": json.dumps(metrics)})
    assert upload(server, rnd, honest, body, num_samples=7).status_code == 200
    closed = server.wait_for(lambda s: s["rounds_done"] > rnd["round"])["history"][rnd["round"]]
    assert closed["metrics"]["participants"] == 1 and closed["metrics"]["samples"] == 7
    assert closed["metrics"]["train_loss"] == 0.5
