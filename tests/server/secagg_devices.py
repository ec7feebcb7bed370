"""Secure-aggregation devices driven step by step against pfl-server's service (in process)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from server_harness import run_toml
from sqlalchemy import select

from pflkit.sdk.secagg import quantize, wire
from pflkit.sdk.secagg.client import SecAggClient
from pflkit.server.orm import Round, SecAggMessage, SecAggStep
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings

SECAGG = "[aggregation]\nsecagg = true\nsecagg_threshold = 0.6\n"  # 5 devices: t = 3


def secagg_service(tmp_path, n: int = 5, rounds: int = 2, extra: str = ""):
    """A service whose run aggregates securely, ``n`` devices enrolled, round 0 open."""
    config = tmp_path / "run.toml"
    config.write_text(run_toml("fedavg", rounds=rounds, num_clients=n, per_round=n, resize=8)
                      + SECAGG + extra)
    service = build_service(ServerSettings(admin_token="x" * 20, data_dir=tmp_path / "data",
                                           run_config=config, min_enrolled=n))
    service.runs.ensure()
    enrollment = service.enrollment
    for cid in range(n):
        enrollment.enroll(enrollment.issue_token(cid, None)[1])
    service.rounds.tick()
    return service


@dataclass
class Devices:
    """The sampled devices of the service's open round, each a SecAggClient."""

    service: object
    changes: dict[int, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.task = self.service.tasks.task(0)
        self.setup = wire.setup_from_wire(self.task["secagg"])
        self.clients = {c: SecAggClient(c, self.setup) for c in self.setup.roster}
        rng = np.random.default_rng(self.task["round"])
        self.changes = {c: rng.normal(0, 0.01, self.setup.dimension) for c in self.clients}

    def send(self, client: int, step: str, body) -> bool:
        return self.service.secagg.receive(client, self.task["run_id"], self.task["round"],
                                           step, body)

    def answer(self, client: int, step: str) -> dict:
        return self.service.secagg.answer(client, self.task["run_id"], self.task["round"], step)

    def keys(self, who) -> None:
        for c in who:
            self.send(c, "keys", wire.keys_to_wire(self.clients[c].advertise_keys()))

    def shares(self, who) -> None:
        for c in who:
            directory = wire.directory_from_wire(self.setup.round_id, self.answer(c, "keys"))
            self.send(c, "shares", wire.shares_to_wire(self.clients[c].share_keys(directory)))

    def masked(self, who) -> None:
        for c in who:
            shares = wire.shares_in_from_wire(self.setup.round_id, self.answer(c, "shares"))
            self.send(c, "masked", self.clients[c].masked_input(shares, self.changes[c]).vector)

    def unmask(self, who) -> None:
        for c in who:
            request = wire.request_from_wire(self.setup.round_id, self.answer(c, "unmask"))
            self.send(c, "unmask", wire.unmask_to_wire(self.clients[c].unmask(request)))

    def bound(self, count: int) -> float:
        """The mean's quantization error bound per coordinate."""
        return quantize.sum_error_bound(self.setup.clip_range, len(self.setup.roster),
                                        count) / count


def past_step_deadline(service) -> None:
    """Close the open round's current step as its deadline would (then tick the keeper)."""
    with service.store.transaction() as s:
        rnd = s.scalar(select(Round).where(Round.status == "open"))
        service.secagg.due(s, rnd, time.time() + 2 * service.settings.round_deadline)
    service.rounds.tick()


def protocol_state(service) -> tuple:
    """Every stored SecAgg message and step row: what a refused message must not change."""
    with service.store.transaction() as s:
        messages = [(m.round_id, m.client_id, m.step, m.payload)
                    for m in s.scalars(select(SecAggMessage).order_by(SecAggMessage.id))]
        steps = [(r.round_id, r.stage, r.error) for r in s.scalars(select(SecAggStep))]
    return messages, steps
