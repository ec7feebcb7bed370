"""pfl-server's SecAgg routes played for one real device, with hooks where a server may lie.

The device under test is a :class:`~pflkit.sdk.client.FederatedClient` over real HTTP on
loopback (hostile_harness.py's server, upload_harness.py's task and global state); the round's
other devices are honest :class:`SecAggClient` objects that this server drives as each step
closes, and :class:`SecAggServer` keeps the round. ``tamper_keys``, ``tamper_shares`` and
``tamper_request`` change what the device is told; ``secagg`` changes the task's setup;
``posted`` keeps what the device sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from hostile_harness import Answer, Served, json_answer
from upload_harness import FakeServer, Federation, algorithm, device, wire

from pflkit.sdk.client import FederatedClient
from pflkit.sdk.secagg import wire as secagg_wire
from pflkit.sdk.secagg.client import SecAggClient
from pflkit.sdk.secagg.messages import (
    KeyDirectory,
    MaskedInput,
    RoundSetup,
    SharesIn,
    UnmaskRequest,
)
from pflkit.sdk.secagg.server import SecAggServer

DEVICE = 1  # the device under test; its peers are 2..5
ROUTE = re.compile(r"/v1/runs/1/rounds/0/secagg/(keys|shares|masked|unmask)")


class LyingServer(FakeServer):
    """One fedavg round under SecAgg, 5 devices, t = 3 of the complete graph."""

    def __init__(self) -> None:
        config = wire("fedavg")
        super().__init__(Federation("fedavg"), config)
        global_state = algorithm("fedavg").aggregation.init_global(config["seed"])
        self.publish(global_state)
        dimension = sum(v.numel() for v in global_state.values() if v.is_floating_point())
        self.setup = RoundSetup(round_id=7, roster=(1, 2, 3, 4, 5), threshold=3, neighbours=4,
                                dimension=dimension, clip_range=1.0,
                                graph_seed=hashlib.sha256(self.digest.encode()).digest())
        self.secagg: dict[str, Any] = secagg_wire.setup_to_wire(self.setup)
        self.tamper_keys: Callable[[KeyDirectory], KeyDirectory] = lambda d: d
        self.tamper_shares: Callable[[SharesIn], SharesIn] = lambda s: s
        self.tamper_request: Callable[[UnmaskRequest], UnmaskRequest] = lambda r: r
        self.posted: list[tuple[str, str]] = []  # (method, step) the device sent
        self._reset()

    def _reset(self) -> None:
        """A fresh round: new peers, their keys advertised, nothing from the device yet."""
        self.round_server = SecAggServer(self.setup, seen_keys=set())
        self.peers = {c: SecAggClient(c, self.setup) for c in self.setup.roster if c != DEVICE}
        for peer in self.peers.values():
            self.round_server.receive_keys(peer.advertise_keys())
        self.answers: dict[str, dict[str, Any]] = {}

    def __call__(self, request: Served) -> Answer:
        path = urlsplit(request.path).path
        if path == "/v1/task":
            return json_answer(200, {"status": "train", "run_id": 1, "round": 0,
                                     "retry_after": 0.0, "global_hash": self.digest,
                                     "config": self.config, "secagg": self.secagg})
        step = ROUTE.fullmatch(path)
        if step is None:
            return super().__call__(request)
        if request.method == "GET":
            return json_answer(200, self.answers[step[1]])
        self.posted.append((request.method, step[1]))
        return self.receive(step[1], request.body)

    def receive(self, step: str, body: bytes) -> Answer:
        """The device's message for ``step``; the honest peers then finish the step too."""
        s, r = self.round_server, self.setup.round_id
        if step == "keys":
            s.receive_keys(secagg_wire.keys_from_wire(DEVICE, r, json.loads(body)))
            directories = s.close_keys()
            for c, peer in self.peers.items():
                s.receive_shares(peer.share_keys(directories[c]))
            self.answers["keys"] = secagg_wire.directory_to_wire(
                self.tamper_keys(directories[DEVICE]))
        elif step == "shares":
            s.receive_shares(secagg_wire.share_keys_from_wire(DEVICE, r, json.loads(body)))
            inboxes = s.close_shares()
            for c, peer in self.peers.items():
                s.receive_masked(peer.masked_input(inboxes[c], np.zeros(self.setup.dimension)))
            self.answers["shares"] = secagg_wire.shares_to_wire(
                self.tamper_shares(inboxes[DEVICE]))
        elif step == "masked":
            s.receive_masked(MaskedInput(DEVICE, r, body))
            self.answers["unmask"] = secagg_wire.request_to_wire(
                self.tamper_request(s.close_masked()))
        return json_answer(200, {"duplicate": False})


def secagg_device(root: Path, server) -> FederatedClient:
    """The device under test, enrolled with ``server`` (a HostileServer serving LyingServer)."""
    return device(root, DEVICE, server)
