"""A device's side of one secure-aggregation round (Bonawitz et al. 2017, Figure 4).

1. :meth:`advertise_keys`: two fresh X25519 key pairs, one to encrypt shares, one for masks.
2. :meth:`share_keys`: a fresh 16-byte self-mask seed ``b`` and the mask private key are each
   split t-of-K among the device's neighbourhood and sealed for each neighbour (whose public
   keys must be usable, canonical and distinct).
3. :meth:`masked_input`: ``quantize(x) + PRG(b) + sum_v ±PRG(s_uv)`` modulo 2^32, with ``+``
   towards peers of larger id and ``-`` towards smaller ones, over the peers whose shares
   arrived (exactly the peers that will mask with this device).
4. :meth:`unmask`: shares of survivors' seeds and of dropped peers' mask keys, never both for
   one peer; a request naming a device as both, an id twice or from outside the roster, or
   fewer than t survivors among this device's share holders is refused.
Each step runs once and in order; anything else is a :class:`SecAggError` (a replay).
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np

from pflkit.sdk.secagg import crypto, quantize, shamir
from pflkit.sdk.secagg.graph import holders, neighbourhoods
from pflkit.sdk.secagg.messages import (
    AdvertiseKeys,
    KeyDirectory,
    MaskedInput,
    RoundSetup,
    SecAggError,
    ShareKeys,
    SharesIn,
    UnmaskRequest,
    UnmaskResponse,
)

STEPS = ("advertise_keys", "share_keys", "masked_input", "unmask", "done")
SHARE_PAIR = 2 * shamir.SHARE_BYTES  # seed share || mask-key share
ENVELOPE_BYTES = crypto.NONCE_BYTES + SHARE_PAIR + crypto.TAG_BYTES


class SecAggClient:
    """One device in one round; holds its keys, its seed and the shares it received."""

    def __init__(self, client_id: int, setup: RoundSetup) -> None:
        if client_id not in setup.roster:
            raise ValueError(f"client {client_id} is not in round {setup.round_id}'s roster")
        self.id = client_id
        self.setup = setup
        self._neighbours = neighbourhoods(setup)[client_id]
        self._cipher_key = crypto.new_key()
        self._mask_key = crypto.new_key()
        self._step = 0
        self._agreed: dict[int, tuple[bytes, bytes]] = {}  # peer -> (envelope key, mask seed)
        self._own: tuple[bytes, bytes] = (b"", b"")  # this device's shares of its own secrets
        self._seed = b""
        self._held: dict[int, tuple[bytes, bytes]] = {}  # peer -> (seed share, key share)

    def _check(self, step: str, round_id: int) -> None:
        """SecAggError unless ``step`` is next and the message is for this round."""
        if round_id != self.setup.round_id:
            raise SecAggError(f"client {self.id}: a message for round {round_id} in round "
                              f"{self.setup.round_id} is refused (replay)")
        if STEPS[self._step] != step:
            raise SecAggError(f"client {self.id}: {step} now is out of order (next is "
                              f"{STEPS[self._step]}): refused as a replay")

    def _agree(self, peer: int, cipher_key: bytes, mask_key: bytes) -> tuple[bytes, bytes]:
        """The AES-256-GCM key and the pairwise mask seed this device and ``peer`` share.

        Both ends derive them alike. SecAggError for a key that is malformed, non-canonical or
        low-order (cryptography refuses the all-zero secret such a point gives).
        """
        r = self.setup.round_id
        try:
            crypto.check_encoding(cipher_key)
            crypto.check_encoding(mask_key)
            return (crypto.agree(self._cipher_key, cipher_key, b"share", r, 32),
                    crypto.agree(self._mask_key, mask_key, b"mask", r, crypto.SEED_BYTES))
        except ValueError:
            raise SecAggError(f"client {self.id}: client {peer}'s advertised key is not a "
                              f"usable X25519 public key") from None

    def advertise_keys(self) -> AdvertiseKeys:
        """Step 1: the two public keys."""
        self._check("advertise_keys", self.setup.round_id)
        self._step += 1
        return AdvertiseKeys(self.id, self.setup.round_id, crypto.public_bytes(self._cipher_key),
                             crypto.public_bytes(self._mask_key))

    def share_keys(self, directory: KeyDirectory) -> ShareKeys:
        """Step 2: shares of the seed and the mask key, sealed for each advertised neighbour."""
        self._check("share_keys", directory.round_id)
        unknown = set(directory.keys) - set(self._neighbours)
        if unknown:
            raise SecAggError(f"client {self.id}: keys of {sorted(unknown)}, not neighbours")
        agreed = {peer: self._agree(peer, *pair) for peer, pair in sorted(directory.keys.items())}
        mine = {crypto.public_bytes(self._cipher_key), crypto.public_bytes(self._mask_key)}
        flat = [k for pair in directory.keys.values() for k in pair]
        if len(set(flat)) != len(flat) or mine & set(flat):
            raise SecAggError(f"client {self.id}: the key directory reuses a public key")
        if len(directory.keys) + 1 < self.setup.threshold:
            raise SecAggError(f"client {self.id}: {len(directory.keys)} neighbours advertised "
                              f"keys, fewer than threshold {self.setup.threshold} - 1")
        self._step += 1
        self._agreed = agreed
        self._seed = os.urandom(crypto.SEED_BYTES)
        group = holders(neighbourhoods(self.setup), self.id)
        t, k = self.setup.threshold, len(group)
        seed_shares = shamir.split(self._seed, t, k)
        key_shares = shamir.split(self._mask_key.private_bytes_raw(), t, k)
        sealed = {}
        for x, peer in enumerate(group):
            if peer == self.id:
                self._own = (seed_shares[x], key_shares[x])
            elif peer in agreed:
                sealed[peer] = crypto.seal(agreed[peer][0], self.setup.round_id,
                                           self.id, peer, seed_shares[x] + key_shares[x])
        return ShareKeys(self.id, self.setup.round_id, sealed)

    def masked_input(self, shares: SharesIn, update: np.ndarray) -> MaskedInput:
        """Step 3: open the shares addressed here, then mask the quantized update."""
        setup = self.setup
        if np.shape(update) != (setup.dimension,):
            raise ValueError(f"update must have shape ({setup.dimension},)")
        self._check("masked_input", shares.round_id)
        strangers = set(shares.shares) - set(self._agreed)
        if strangers:
            raise SecAggError(f"client {self.id}: shares from {sorted(strangers)}, "
                              f"who advertised no keys to it")
        if len(shares.shares) + 1 < setup.threshold:
            raise SecAggError(f"client {self.id}: shares from {len(shares.shares)} peers, "
                              f"fewer than threshold {setup.threshold} - 1: not masking")
        held = {}
        for peer, blob in shares.shares.items():
            plain = crypto.open_sealed(self._agreed[peer][0], shares.round_id, peer, self.id,
                                       blob)
            if len(plain) != SHARE_PAIR:
                raise SecAggError(f"client {self.id}: a malformed share from client {peer}")
            held[peer] = (plain[:shamir.SHARE_BYTES], plain[shamir.SHARE_BYTES:])
        self._step += 1
        self._held = held
        n = len(setup.roster)
        total = quantize.quantize(update, setup.clip_range, n)
        crypto.add_mask(total, self._seed, +1)
        for peer in sorted(held):
            crypto.add_mask(total, self._agreed[peer][1], +1 if self.id < peer else -1)
        return MaskedInput(self.id, setup.round_id, total.astype("<u4").tobytes())

    def unmask(self, request: UnmaskRequest) -> UnmaskResponse:
        """Step 4: seed shares for survivors, mask-key shares for the dropped; never both."""
        self._check("unmask", request.round_id)
        self._check_request(request)
        self._step += 1
        held = {**self._held, self.id: self._own}
        return UnmaskResponse(
            self.id, request.round_id,
            seed_shares={u: held[u][0] for u in request.survivors if u in held},
            key_shares={u: held[u][1] for u in request.dropped if u in held})

    def _check_request(self, request: UnmaskRequest) -> None:
        """SecAggError unless an honest server could have sent ``request``.

        No peer both survivor and dropped; every id named once and from the roster; this
        device and at least t of its share holders among the survivors (an honest server fails
        the round otherwise). Counting repeats or strangers as survivors would let a server
        that tells each device a different story collect one device's seed and its neighbours'
        mask keys, and so unmask that device's update alone.
        """
        both = set(request.survivors) & set(request.dropped)
        if both:
            raise SecAggError(f"client {self.id}: the request names {sorted(both)} as both "
                              f"survivor and dropped, which would unmask an individual update")
        named = Counter((*request.survivors, *request.dropped))
        odd = sorted(set(named) - set(self.setup.roster)) or sorted(
            u for u, times in named.items() if times > 1)
        if odd:
            raise SecAggError(f"client {self.id}: the unmask request names {odd[:5]} twice or "
                              f"from outside the roster: refused")
        alive = set(request.survivors) & {self.id, *self._held}
        if self.id not in alive or len(alive) < self.setup.threshold:
            raise SecAggError(f"client {self.id}: an unmask request that does not list it and "
                              f"at least {self.setup.threshold} of its share holders among the "
                              f"survivors is refused")
