"""One secure-aggregation round run in memory, with devices that stop at a chosen step."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pflkit.sdk.secagg.client import SecAggClient
from pflkit.sdk.secagg.messages import Aggregate, MaskedInput, RoundSetup
from pflkit.sdk.secagg.server import SecAggServer

STEPS = ("keys", "shares", "masked", "unmask")


def setup(n: int = 6, t: int = 4, k: int = 99, d: int = 300, round_id: int = 1,
          clip: float = 1.0) -> RoundSetup:
    return RoundSetup(round_id=round_id, roster=tuple(range(10, 10 + n)), threshold=t,
                      neighbours=k, dimension=d, clip_range=clip, graph_seed=b"public-seed")


def updates(s: RoundSetup, seed: int = 0, scale: float = 0.5) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c: np.clip(rng.normal(0, scale, s.dimension), -s.clip_range, s.clip_range)
            .astype(np.float32) for c in s.roster}


@dataclass
class Round:
    """A round's participants, driven step by step; ``drops[c]`` is the step ``c`` skips."""

    setup: RoundSetup
    drops: dict[int, str] = field(default_factory=dict)
    seen_keys: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.server = SecAggServer(self.setup, self.seen_keys)
        self.clients = {c: SecAggClient(c, self.setup) for c in self.setup.roster}
        self.masked: list[MaskedInput] = []

    def alive(self, step: str) -> list[int]:
        gone = STEPS.index
        return [c for c in self.clients
                if c not in self.drops or gone(self.drops[c]) > gone(step)]

    def to_shares(self):
        for c in self.alive("keys"):
            self.server.receive_keys(self.clients[c].advertise_keys())
        return self.server.close_keys()

    def to_masked(self):
        directories = self.to_shares()
        for c in self.alive("shares"):
            self.server.receive_shares(self.clients[c].share_keys(directories[c]))
        return self.server.close_shares()

    def to_unmask(self, values: dict[int, np.ndarray]):
        delivered = self.to_masked()
        for c in self.alive("masked"):
            msg = self.clients[c].masked_input(delivered[c], values[c])
            self.masked.append(msg)
            self.server.receive_masked(msg)
        return self.server.close_masked()

    def run(self, values: dict[int, np.ndarray]) -> Aggregate:
        request = self.to_unmask(values)
        for c in self.alive("unmask"):
            self.server.receive_unmask(self.clients[c].unmask(request))
        return self.server.finish()
