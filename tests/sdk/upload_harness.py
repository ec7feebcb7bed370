"""A federation of two devices per method over the real upload path, against a fake server.

Each :class:`~pflkit.sdk.client.FederatedClient` trains and uploads as on a phone, over real
HTTP on loopback: hostile_harness.py's server, with :class:`FakeServer` as its handler, plays
pfl-server (task, global state, upload) and keeps every upload's bytes as they arrived. Between
rounds the method's own aggregator makes the next global state. After the last round the
devices run the post-federation stage, so every part a device ever keeps is seen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import torch
from hostile_harness import Answer, HostileServer, Served, answer, json_answer, serving
from hostile_harness import device as hostile_device

from pflkit.sdk.algorithms import ALGORITHMS, Algorithm
from pflkit.sdk.client import FederatedClient
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.state_store import DeviceStateStore
from pflkit.sdk.task_config import TaskConfig
from pflkit.sdk.tensorio import State, state_from_bytes, state_to_bytes

ROUNDS = 2
DEVICES = (1, 2)
SHAPE = (1, 4, 4)
# keep the post-federation stages short; every other setting is the method's default
PARAMS: dict[str, dict] = {"pflmoe": {"epochs": 2}}


def wire(method: str) -> dict:
    """The task config a server sends for ``method`` (twonn on 4x4 inputs, 10 classes)."""
    return {"algorithm": method, "params": PARAMS.get(method, {}), "model": "twonn",
            "input_shape": list(SHAPE), "num_classes": 10, "seed": 3, "total_rounds": ROUNDS,
            "lr_schedule": {"lr": 0.1, "decay": 1.0},
            "local": {"epochs": 1, "batch_size": 8, "momentum": 0.0, "weight_decay": 0.0}}


@dataclass
class Federation:
    """What one method's run left: uploads, the global states, what the devices kept."""

    method: str
    globals: list[State] = field(default_factory=list)  # globals[r]: round r's global state
    uploads: list[dict[int, bytes]] = field(default_factory=list)  # uploads[r][client]: bytes
    kept: list[State] = field(default_factory=list)  # each device's state after each round
    final: list[State] = field(default_factory=list)  # ... after the post-federation stage
    meta: set[str] = field(default_factory=set)  # the JSON keys the devices kept


class FakeServer:
    """pfl-server's three routes a training device uses, over one run."""

    def __init__(self, fed: Federation, config: dict) -> None:
        self.fed, self.config = fed, config
        self.status, self.round = "train", 0
        self.blobs: dict[str, bytes] = {}

    def publish(self, state: State) -> None:
        data = state_to_bytes(state)
        self.digest = hashlib.sha256(data).hexdigest()
        self.blobs[self.digest] = data
        self.fed.globals.append(state)

    def __call__(self, request: Served) -> Answer:
        """The answer to one request, as the real server's routes would give it."""
        path = urlsplit(request.path).path
        if path == "/v1/task":
            return json_answer(200, {
                "status": self.status, "run_id": 1, "round": self.round, "retry_after": 0.0,
                "global_hash": self.digest, "config": self.config})
        if path.startswith("/v1/globals/"):
            return answer(200, self.blobs[path.rsplit("/", 1)[1]])
        if request.method == "PUT" and path == f"/v1/runs/1/rounds/{self.round}/update":
            client = int(request.headers["authorization"].rsplit("-", 1)[1])
            self.fed.uploads[self.round][client] = request.body
            return json_answer(200, {"accepted": True})
        return json_answer(404, {"detail": f"no route {request.method} {path}"})


def device(root: Path, client: int, server: HostileServer) -> FederatedClient:
    """An enrolled device with its own 24 seeded rows (secret ``pfc-<id>``), of ``server``."""
    gen = torch.Generator().manual_seed(client)
    data = LabeledTensors(torch.rand(24, *SHAPE, generator=gen),
                          torch.randint(0, 10, (24,), generator=gen))
    return hostile_device(root / f"device-{client}", server, client_id=client,
                          secret=f"pfc-{client}", data=data)


def federate(method: str, root: Path) -> Federation:
    """Run ``ROUNDS`` rounds of ``method`` on two devices, then their final stage."""
    fed = Federation(method)
    config = wire(method)
    server = FakeServer(fed, config)
    algorithm = TaskConfig.from_wire(config, ImportPolicy()).build()
    server.publish(algorithm.aggregation.init_global(config["seed"]))
    with serving(server) as http:
        phones = [device(root, c, http) for c in DEVICES]
        for r in range(ROUNDS):
            server.round = r
            fed.uploads.append({})
            for phone in phones:
                assert phone.step().status == "trained"
                keep(fed, phone, fed.kept)
            aggregator = algorithm.aggregation.new_aggregator(fed.globals[-1], len(DEVICES))
            for body in fed.uploads[r].values():
                aggregator.add(1.0, state_from_bytes(body, "upload"))
            server.publish(aggregator.result())
        server.status = "finished"
        for phone in phones:
            assert phone.step().status == "finished"
            keep(fed, phone, fed.final)
            phone.close()
    return fed


def keep(fed: Federation, phone: FederatedClient, into: list[State]) -> None:
    """Record what the device keeps after a step (its committed client state)."""
    stored = DeviceStateStore(phone.state_dir).load()
    if stored is not None:
        into.append(stored.tensors)
        fed.meta.update(stored.meta)


def methods() -> list[str]:
    """Every registered method (the registry is the list, so a new method is covered)."""
    return sorted(ALGORITHMS)


def algorithm(method: str) -> Algorithm:
    """The method as a device builds it from the task."""
    return TaskConfig.from_wire(wire(method), ImportPolicy()).build()


def group(names: Iterable[str]) -> str:
    """Tensor names as parts: ``body.0.weight`` -> ``body.*``, ``phi.head.w`` -> ``phi.head.*``."""
    parts = set()
    for name in names:
        words = name.split(".")
        parts.add(".".join(words[:2] if words[1:2] in (["body"], ["head"]) else words[:1]))
    return ", ".join(f"`{p}.*`" for p in sorted(parts)) or "nothing"


def table_row(fed: Federation) -> str:
    """The docs/privacy.md row of one method, from its update schema and what devices kept."""
    global_state = fed.globals[0]
    schema = algorithm(fed.method).aggregation.update_schema(global_state)
    during = {k for state in fed.kept for k in state}
    after = {k for state in fed.final for k in state} - during
    stays = group(during) + (f"; after federation: {group(after)}" if after else "")
    if fed.meta:
        stays += "; JSON: " + ", ".join(f"`{k}`" for k in sorted(fed.meta))
    # DP-FedAvg clips and noises the change of an uploaded floating tensor to its global copy
    covered = [k for k, (_, dtype) in schema.items()
               if dtype.is_floating_point and k in global_state]
    rest = sorted(set(schema) - set(covered))
    eps = f"none: DP is refused before the run ({group(rest)} have no global copy)" if rest \
        else group(covered)
    return f"| `{fed.method}` | {group(schema)} | {stays} | {eps} |"


HEADER = ("| method | uploads (its update schema) | stays on the device | epsilon covers |\n"
          "|---|---|---|---|")
