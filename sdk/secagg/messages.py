"""The messages of one secure-aggregation round, its public setup and its errors.

Each step's message is a frozen dataclass of ints and bytes, so any transport can carry it;
``sender`` is whoever the transport authenticated, never a value a device may choose.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from pflkit.sdk.protocol import MAX_ID

MAX_CLIENTS = 10_000  # Shamir's x-coordinates and the quantization's headroom stay small


class SecAggError(ValueError):
    """A message refused (bad peer, reused key, malformed, replay): the state is unchanged."""


class RoundFailed(SecAggError):
    """Too few devices left for the threshold: the round ends and nothing is unmasked."""


@dataclass(frozen=True)
class RoundSetup:
    """What every participant knows before a round starts (all public).

    ``neighbours`` is SecAgg+'s ``k``: each device masks with ``k`` others (even, see
    :func:`~pflkit.sdk.secagg.graph.neighbourhoods`); ``k >= len(roster) - 1`` is full SecAgg.
    A device's secrets are shared among its neighbourhood (itself and its neighbours, ``K``
    holders); ``threshold`` ``t`` of them reconstruct one. ``t > K / 2`` so that two disjoint
    sets of holders can never both reach ``t``: a server cannot get one device's self-mask seed
    from some holders and its mask key from others.
    """

    round_id: int
    roster: tuple[int, ...]  # the round's client ids, sorted
    threshold: int  # t
    neighbours: int  # k
    dimension: int  # the update's length
    clip_range: float  # c: each coordinate is clipped to [-c, c] before quantization
    graph_seed: bytes  # public randomness that draws the neighbour graph

    def __post_init__(self) -> None:
        n = len(self.roster)
        if tuple(sorted(set(self.roster))) != self.roster or not 2 <= n <= MAX_CLIENTS:
            raise ValueError(f"roster must be 2..{MAX_CLIENTS} distinct sorted client ids")
        if not 0 <= min(self.roster) <= max(self.roster) <= MAX_ID or \
                not 0 <= self.round_id <= MAX_ID:
            raise ValueError(f"client ids and round_id must be in [0, {MAX_ID}]")
        if self.neighbours < n - 1 and (self.neighbours < 2 or self.neighbours % 2):
            raise ValueError(f"neighbours = {self.neighbours}: even and >= 2, or >= {n - 1}")
        holders = self.holders_per_client
        if not holders / 2 < self.threshold <= holders:
            raise ValueError(f"threshold = {self.threshold}: must be in ({holders / 2:g}, "
                             f"{holders}] for {holders} holders of each secret")
        if self.dimension < 1 or not 0 < self.clip_range < float("inf"):
            raise ValueError("dimension must be >= 1 and clip_range in (0, inf)")

    @property
    def holders_per_client(self) -> int:
        """K: a device and its neighbours."""
        return min(self.neighbours, len(self.roster) - 1) + 1


@dataclass(frozen=True)
class AdvertiseKeys:
    """Device -> server: two fresh X25519 public keys (32 bytes each)."""

    sender: int
    round_id: int
    cipher_key: bytes  # agrees the key that encrypts shares between two devices
    mask_key: bytes  # agrees the pairwise mask seed


@dataclass(frozen=True)
class KeyDirectory:
    """Server -> device: its neighbours' advertised keys, ``{id: (cipher_key, mask_key)}``."""

    round_id: int
    keys: dict[int, tuple[bytes, bytes]]


@dataclass(frozen=True)
class ShareKeys:
    """Device -> server: ``{recipient: AES-GCM envelope of its shares}``."""

    sender: int
    round_id: int
    shares: dict[int, bytes]


@dataclass(frozen=True)
class SharesIn:
    """Server -> device: ``{sender: envelope}`` addressed to it."""

    round_id: int
    shares: dict[int, bytes]


@dataclass(frozen=True)
class MaskedInput:
    """Device -> server: the masked quantized update, little-endian uint32."""

    sender: int
    round_id: int
    vector: bytes


@dataclass(frozen=True)
class UnmaskRequest:
    """Server -> every survivor (one request for all): who sent masked input, who dropped."""

    round_id: int
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]


@dataclass(frozen=True)
class UnmaskResponse:
    """Device -> server: shares of survivors' seeds and of dropped devices' mask keys."""

    sender: int
    round_id: int
    seed_shares: dict[int, bytes]
    key_shares: dict[int, bytes]


@dataclass(frozen=True)
class Aggregate:
    """The round's result: the sum of the survivors' updates (float64) and who they are."""

    total: np.ndarray
    survivors: tuple[int, ...]


def wire_bytes(message: Any) -> int:
    """Payload size of a message: its bytes, 8 per id or int (framing not counted)."""

    def size(value: object) -> int:
        if isinstance(value, bytes):
            return len(value)
        if isinstance(value, dict):
            return sum(8 + size(v) for v in value.values())
        if isinstance(value, tuple):
            return sum(size(v) for v in value)
        return 8

    return sum(size(getattr(message, f.name)) for f in dataclasses.fields(message))
