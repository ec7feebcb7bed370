"""Shared vectors: how the Python SDK reads each number a server sends (android-demo/core).

The Java client must take and refuse exactly what the Python client does (WireNumbersTest): one
rule for every number a device reads from a server. An integer field (ids, rounds, an input's
axis) takes a JSON integer only, in its range: ``1.0`` and ``1e0`` are refused, as are
booleans, strings, NaN and numbers past the range (2^53 + 1, 2^63); a number field (seconds, a
norm) takes any JSON number in its range. Each vector is one answer of the server with one
number in one field, and Python's verdict: ``accepted`` and the value read (null: an optional
field left out), or refused.

Run by the Java test itself with the repository's virtualenv; prints one JSON list. Nothing
here is committed as data.
"""

from __future__ import annotations

import base64
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from pflkit.sdk import protocol
from pflkit.sdk.device_files import DeviceFiles
from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.secagg import wire
from pflkit.sdk.task_config import TaskConfig
from pflkit.sdk.transport import json_answer

NUMBERS = ("1", "0", "-0", "7", "1.0", "1e0", "1E2", "0.5", "1.5", "-1", "-0.0", "3600",
           "3600.5", "1e-300", "2147483647", "2147483648", "9007199254740993",
           "9223372036854775807", "9223372036854775808", "1e400", "NaN", "Infinity",
           "-Infinity", "true", "false", "\"1\"", "null", "[1]", "{}")
CONFIG = {"algorithm": "fedavg", "params": {}, "model": "twonn", "input_shape": [1, 4, 4],
          "num_classes": 10, "seed": 3, "total_rounds": 2,
          "lr_schedule": {"lr": 0.1, "decay": 1.0},
          "local": {"epochs": 1, "batch_size": 8, "momentum": 0.0, "weight_decay": 0.0}}
SETUP = {"round_id": 4, "roster": [1, 2, 3], "threshold": 2, "neighbours": 2, "dimension": 4,
         "clip_range": 1.0, "graph_seed": base64.b64encode(bytes(32)).decode()}
HOLE = "\"<number>\""  # where a vector's number goes in its answer


def task(field: str) -> str:
    """A waiting task with the number in ``field`` (a train task's fields, checked alike)."""
    body = {"status": "wait", "retry_after": 1, "run_id": 1, "round": 0, field: "<number>"}
    return json.dumps(body)


def train(**config: Any) -> str:
    """A round-1 train task whose config has ``config`` (the number in one of them)."""
    body = {"status": "train", "retry_after": 1, "run_id": 1, "round": 1, "global_hash": "a" * 64,
            "config": {**CONFIG, **config}}
    return json.dumps(body)


def read_task(text: str, field: str) -> Any:
    """What the Python client reads from the task in ``field`` (ValueError: it refuses it)."""
    body = json_answer(httpx.Response(200, content=text), "task", protocol.task_problem)
    protocol.task_clip_norm(body)
    return body[field]


def read_config(text: str) -> TaskConfig:
    """A train task's config as the Python client reads it."""
    body = json_answer(httpx.Response(200, content=text), "task", protocol.task_problem)
    return TaskConfig.from_wire(body["config"], ImportPolicy())


def read_client_id(text: str) -> Any:
    """The client id enrollment stores from the server's answer."""
    with tempfile.TemporaryDirectory() as folder:
        answer = json_answer(httpx.Response(200, content=text), "enrollment")
        return DeviceFiles(Path(folder)).write_credentials("http://h", answer)["client_id"]


def read_round_id(text: str) -> Any:
    """A SecAgg setup's round_id as the Python device reads the task's setup."""
    body = json_answer(httpx.Response(200, content=text), "task", protocol.task_problem)
    return wire.setup_from_wire(body["secagg"]).round_id


FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "task.run_id": (task("run_id"), lambda t: read_task(t, "run_id")),
    "task.round": (task("round"), lambda t: read_task(t, "round")),
    "task.retry_after": (task("retry_after"), lambda t: read_task(t, "retry_after")),
    "task.clip_norm": (task("clip_norm"), lambda t: read_task(t, "clip_norm")),
    "task.config.input_shape": (train(input_shape=["<number>", 4, 4]),
                                lambda t: read_config(t).input_shape[0]),
    "task.config.lr_schedule.lr": (train(lr_schedule={"lr": "<number>", "decay": 1.0}),
                                   lambda t: read_config(t).lr_schedule.at(0)),
    "task.config.lr_schedule.decay": (train(lr_schedule={"lr": 1.0, "decay": "<number>"}),
                                      lambda t: read_config(t).lr_schedule.at(1)),
    "enrollment.client_id": (json.dumps({"client_id": "<number>", "secret": "pfc_s"}),
                             read_client_id),
    "task.secagg.round_id": (json.dumps({"status": "wait", "retry_after": 1, "secagg": {
        **SETUP, "round_id": "<number>"}}), read_round_id),
}


def vectors() -> list[dict[str, Any]]:
    """Every field with every number, and what Python made of it."""
    out = []
    for field, (template, read) in FIELDS.items():
        for number in NUMBERS:
            text = template.replace(HOLE, number)
            try:
                value = read(text)
            except ValueError:  # the SDK's refusals: ConfigError, SecAggError, ... included
                out.append({"field": field, "answer": text, "accepted": False})
                continue
            assert value is None or (type(value) in (int, float) and math.isfinite(value))
            out.append({"field": field, "answer": text, "accepted": True, "value": value})
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(vectors()))
