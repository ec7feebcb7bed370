"""The server's side of one secure-aggregation round: route keys and shares, then unmask a sum.

It advances by explicit closes (the caller decides when a step's deadline has passed):
``close_keys`` -> ``close_shares`` -> ``close_masked`` -> ``finish``. Every ``receive_*`` checks
the whole message first and refuses a bad one with a one-line :class:`SecAggError`, leaving the
state as it was; a close below the threshold raises :class:`RoundFailed` and the round is over,
with nothing unmasked. Masked inputs are added into one running sum as they arrive: the server
keeps no individual vector, and asks each survivor for seed shares of survivors and mask-key
shares of dropped devices only (disjoint by construction). A late masked input from a device
already declared dropped is refused: with its mask key reconstructed, that would expose it.
"""

from __future__ import annotations

from collections.abc import Collection, Container

import numpy as np

from pflkit.sdk.secagg import crypto, quantize, shamir
from pflkit.sdk.secagg.client import ENVELOPE_BYTES
from pflkit.sdk.secagg.graph import holders, neighbourhoods
from pflkit.sdk.secagg.messages import (
    AdvertiseKeys,
    Aggregate,
    KeyDirectory,
    MaskedInput,
    RoundFailed,
    RoundSetup,
    SecAggError,
    ShareKeys,
    SharesIn,
    UnmaskRequest,
    UnmaskResponse,
)

Points = dict[int, dict[int, bytes]]  # owner -> {x: share}


class SecAggServer:
    """One round. ``seen_keys`` outlives it: a public key seen in any round is never accepted."""

    def __init__(self, setup: RoundSetup, seen_keys: set[bytes]) -> None:
        self.setup = setup
        self.stage = "keys"  # keys, shares, masked, unmask, done or failed
        self._seen = seen_keys
        self._graph = neighbourhoods(setup)
        self._keys: dict[int, tuple[bytes, bytes]] = {}  # U1
        self._shares: dict[int, dict[int, bytes]] = {}  # U2: sender -> {recipient: envelope}
        self._masked: set[int] = set()  # U3
        self._total = np.zeros(setup.dimension, dtype=np.uint32)
        self._request: UnmaskRequest | None = None
        self._seed_points: Points = {}
        self._key_points: Points = {}
        self._responded: set[int] = set()

    def _refuse(self, message: str) -> SecAggError:
        return SecAggError(f"round {self.setup.round_id}: {message}")

    def _check(self, stage: str, round_id: int, sender: int, allowed: Collection[int],
               done: Container[int], what: str) -> None:
        if round_id != self.setup.round_id:
            raise self._refuse(f"{what} from client {sender} is for round {round_id} (replay)")
        if self.stage != stage:
            raise self._refuse(f"{what} from client {sender} arrived in stage {self.stage}")
        if sender not in allowed:
            raise self._refuse(f"{what} from client {sender}, not a participant of this step")
        if sender in done:
            raise self._refuse(f"client {sender} already sent its {what} (replay)")

    def _fail(self, message: str) -> RoundFailed:
        self.stage = "failed"
        return RoundFailed(f"round {self.setup.round_id} failed: {message}; nothing unmasked")

    def _quorum(self, step: str, count: int) -> None:
        if count < self.setup.threshold:
            raise self._fail(f"{count} devices {step}, threshold {self.setup.threshold}")

    def receive_keys(self, msg: AdvertiseKeys) -> None:
        """Step 1: accept a device's two fresh public keys."""
        self._check("keys", msg.round_id, msg.sender, self.setup.roster, self._keys, "keys")
        pair = (msg.cipher_key, msg.mask_key)
        for key in pair:
            try:
                crypto.check_public_key(key)
            except ValueError:
                raise self._refuse(f"client {msg.sender} sent a malformed public key") from None
        taken = {k for p in self._keys.values() for k in p}
        if msg.cipher_key == msg.mask_key or set(pair) & (taken | self._seen):
            raise self._refuse(f"client {msg.sender} reuses a public key (seen in this or an "
                               f"earlier round)")
        self._keys[msg.sender] = pair
        self._seen.update(pair)

    def close_keys(self) -> dict[int, KeyDirectory]:
        """U1 is fixed: each advertiser gets its neighbours' keys."""
        self._step("keys", "shares")
        self._quorum("advertised keys", len(self._keys))
        return {u: KeyDirectory(self.setup.round_id, {v: self._keys[v] for v in self._graph[u]
                                                      if v in self._keys}) for u in self._keys}

    def receive_shares(self, msg: ShareKeys) -> None:
        """Step 2: accept a device's envelopes, exactly one per neighbour that advertised."""
        self._check("shares", msg.round_id, msg.sender, set(self._keys), self._shares, "shares")
        expected = {v for v in self._graph[msg.sender] if v in self._keys}
        if set(msg.shares) != expected:
            wrong = sorted(set(msg.shares) ^ expected)
            raise self._refuse(f"client {msg.sender}'s shares are addressed to the wrong peers "
                               f"(differ on {wrong[:5]})")
        if any(not isinstance(b, bytes) or len(b) != ENVELOPE_BYTES
               for b in msg.shares.values()):
            raise self._refuse(f"client {msg.sender} sent a malformed share "
                               f"(an envelope is {ENVELOPE_BYTES} bytes)")
        self._shares[msg.sender] = dict(msg.shares)

    def close_shares(self) -> dict[int, SharesIn]:
        """U2 is fixed: each of its devices gets the envelopes other U2 devices sealed for it."""
        self._step("shares", "masked")
        self._quorum("shared keys", len(self._shares))
        return {v: SharesIn(self.setup.round_id, {u: self._shares[u][v] for u in self._shares
                                                  if v in self._shares[u]})
                for v in self._shares}

    def receive_masked(self, msg: MaskedInput) -> None:
        """Step 3: add a masked vector into the running sum (modulo 2^32)."""
        self._check("masked", msg.round_id, msg.sender, set(self._shares), self._masked,
                    "masked input")
        if not isinstance(msg.vector, bytes) or len(msg.vector) != 4 * self.setup.dimension:
            raise self._refuse(f"client {msg.sender}'s masked input is malformed (not "
                               f"{self.setup.dimension} uint32)")
        np.add(self._total, np.frombuffer(msg.vector, dtype="<u4"), out=self._total)
        self._masked.add(msg.sender)

    def close_masked(self) -> UnmaskRequest:
        """U3 is fixed: one request for every survivor, if each secret can still be rebuilt."""
        self._step("masked", "unmask")
        self._quorum("sent masked input", len(self._masked))
        for u in self._shares:
            alive = sum(v in self._masked for v in holders(self._graph, u))
            if alive < self.setup.threshold:
                raise self._fail(f"{alive} of client {u}'s holders survive, threshold "
                                 f"{self.setup.threshold}")
        self._request = UnmaskRequest(self.setup.round_id, tuple(sorted(self._masked)),
                                      tuple(sorted(set(self._shares) - self._masked)))
        return self._request

    def receive_unmask(self, msg: UnmaskResponse) -> None:
        """Step 4: accept a survivor's shares: exactly those the request asks of it."""
        self._check("unmask", msg.round_id, msg.sender, self._masked, self._responded,
                    "unmask response")
        assert self._request is not None
        v = msg.sender
        want_seeds = {u for u in self._request.survivors if v in holders(self._graph, u)}
        want_keys = {u for u in self._request.dropped if v in self._graph[u]}
        if set(msg.seed_shares) != want_seeds or set(msg.key_shares) != want_keys:
            raise self._refuse(f"client {v}'s unmask response names other devices than asked")
        try:
            for share in (*msg.seed_shares.values(), *msg.key_shares.values()):
                shamir.parse_share(share)
        except ValueError as err:
            raise self._refuse(f"client {v} sent a malformed share ({err})") from None
        for points, shares in ((self._seed_points, msg.seed_shares),
                               (self._key_points, msg.key_shares)):
            for u, share in shares.items():
                points.setdefault(u, {})[holders(self._graph, u).index(v) + 1] = share
        self._responded.add(v)

    def unmask_complete(self) -> bool:
        """Whether the unmask step has all it needs, or all it can get.

        Every secret the request names has t shares from its own holders (under SecAgg+, t
        answers alone may all come from outside one neighbourhood), or every survivor answered.
        """
        if self._request is None:
            return False
        t = self.setup.threshold
        return self._responded >= set(self._request.survivors) or (
            all(len(self._seed_points.get(u, {})) >= t for u in self._request.survivors)
            and all(len(self._key_points.get(u, {})) >= t for u in self._request.dropped))

    def finish(self) -> Aggregate:
        """Remove the survivors' self masks and the dropped devices' pairwise masks; decode."""
        self._step("unmask", "done")
        assert self._request is not None
        t = self.setup.threshold
        for kind, points, owners in (("seed", self._seed_points, self._request.survivors),
                                     ("mask key", self._key_points, self._request.dropped)):
            for u in owners:
                if len(points.get(u, {})) < t:
                    raise self._fail(f"{len(points.get(u, {}))} shares of client {u}'s {kind}, "
                                     f"threshold {t}")
        seeds = {u: self._rebuild(self._seed_points[u], crypto.SEED_BYTES, u)
                 for u in self._request.survivors}
        keys = {u: self._rebuild_key(u) for u in self._request.dropped}
        total = self._total
        for seed in seeds.values():
            crypto.add_mask(total, seed, -1)
        for u, key in keys.items():
            for v in self._graph[u]:
                if v in self._masked:  # v added +PRG(s_uv) if v < u, else -PRG(s_uv)
                    seed = crypto.agree(key, self._keys[v][1], b"mask", self.setup.round_id,
                                        crypto.SEED_BYTES)
                    crypto.add_mask(total, seed, -1 if v < u else +1)
        n, count = len(self.setup.roster), len(self._request.survivors)
        return Aggregate(quantize.dequantize_sum(total, self.setup.clip_range, n, count),
                         self._request.survivors)

    def _rebuild(self, points: dict[int, bytes], length: int, owner: int) -> bytes:
        chosen = dict(sorted(points.items())[:self.setup.threshold])
        try:
            return shamir.combine(chosen, length)
        except ValueError:
            raise self._fail(f"client {owner}'s shares do not rebuild its secret") from None

    def _rebuild_key(self, owner: int) -> crypto.X25519PrivateKey:
        """The dropped device's mask key, checked against the public key it advertised."""
        raw = self._rebuild(self._key_points[owner], crypto.KEY_BYTES, owner)
        key = crypto.X25519PrivateKey.from_private_bytes(raw)
        if crypto.public_bytes(key) != self._keys[owner][1]:
            raise self._fail(f"client {owner}'s key shares do not rebuild its advertised key")
        return key

    def _step(self, current: str, following: str) -> None:
        if self.stage != current:
            raise self._refuse(f"cannot close stage {current} in stage {self.stage}")
        self.stage = following
