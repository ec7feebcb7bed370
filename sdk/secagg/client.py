"""A device's side of one secure-aggregation round (Bonawitz et al. 2017, Figure 4).

1. :meth:`advertise_keys`: two fresh X25519 key pairs, one to encrypt shares, one for masks.
2. :meth:`share_keys`: a fresh 16-byte self-mask seed ``b`` and the mask private key are each
   split t-of-K among the device's neighbourhood and sealed for each neighbour.
3. :meth:`masked_input`: ``quantize(x) + PRG(b) + sum_v ±PRG(s_uv)`` modulo 2^32, with ``+``
   towards peers of larger id and ``-`` towards smaller ones, over the peers whose shares
   arrived (exactly the peers that will mask with this device).
4. :meth:`unmask`: shares of survivors' seeds and of dropped peers' mask keys, never both for
   one peer: a request naming a device as both is refused.
Each step runs once and in order; anything else is a :class:`SecAggError` (a replay).
"""

from __future__ import annotations

import os

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
        self._directory: dict[int, tuple[bytes, bytes]] = {}
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

    def _envelope_key(self, peer: int) -> bytes:
        """The AES-256-GCM key this device and ``peer`` share (both derive it alike)."""
        return crypto.agree(self._cipher_key, self._directory[peer][0], b"share",
                            self.setup.round_id, 32)

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
        mine = {crypto.public_bytes(self._cipher_key), crypto.public_bytes(self._mask_key)}
        flat = [k for pair in directory.keys.values() for k in pair]
        if len(set(flat)) != len(flat) or mine & set(flat):
            raise SecAggError(f"client {self.id}: the key directory reuses a public key")
        if len(directory.keys) + 1 < self.setup.threshold:
            raise SecAggError(f"client {self.id}: {len(directory.keys)} neighbours advertised "
                              f"keys, fewer than threshold {self.setup.threshold} - 1")
        self._step += 1
        self._directory = dict(directory.keys)
        self._seed = os.urandom(crypto.SEED_BYTES)
        group = holders(neighbourhoods(self.setup), self.id)
        t, k = self.setup.threshold, len(group)
        seed_shares = shamir.split(self._seed, t, k)
        key_shares = shamir.split(self._mask_key.private_bytes_raw(), t, k)
        sealed = {}
        for x, peer in enumerate(group):
            if peer == self.id:
                self._own = (seed_shares[x], key_shares[x])
            elif peer in self._directory:
                sealed[peer] = crypto.seal(self._envelope_key(peer), self.setup.round_id,
                                           self.id, peer, seed_shares[x] + key_shares[x])
        return ShareKeys(self.id, self.setup.round_id, sealed)

    def masked_input(self, shares: SharesIn, update: np.ndarray) -> MaskedInput:
        """Step 3: open the shares addressed here, then mask the quantized update."""
        setup = self.setup
        if np.shape(update) != (setup.dimension,):
            raise ValueError(f"update must have shape ({setup.dimension},)")
        self._check("masked_input", shares.round_id)
        strangers = set(shares.shares) - set(self._directory)
        if strangers:
            raise SecAggError(f"client {self.id}: shares from {sorted(strangers)}, "
                              f"who advertised no keys to it")
        if len(shares.shares) + 1 < setup.threshold:
            raise SecAggError(f"client {self.id}: shares from {len(shares.shares)} peers, "
                              f"fewer than threshold {setup.threshold} - 1: not masking")
        held = {}
        for peer, blob in shares.shares.items():
            plain = crypto.open_sealed(self._envelope_key(peer), shares.round_id, peer, self.id,
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
            seed = crypto.agree(self._mask_key, self._directory[peer][1], b"mask",
                                setup.round_id, crypto.SEED_BYTES)
            crypto.add_mask(total, seed, +1 if self.id < peer else -1)
        return MaskedInput(self.id, setup.round_id, total.astype("<u4").tobytes())

    def unmask(self, request: UnmaskRequest) -> UnmaskResponse:
        """Step 4: seed shares for survivors, mask-key shares for the dropped; never both."""
        self._check("unmask", request.round_id)
        both = set(request.survivors) & set(request.dropped)
        if both:
            raise SecAggError(f"client {self.id}: the request names {sorted(both)} as both "
                              f"survivor and dropped, which would unmask an individual update")
        if self.id not in request.survivors or len(request.survivors) < self.setup.threshold:
            raise SecAggError(f"client {self.id}: an unmask request that does not list it "
                              f"among at least {self.setup.threshold} survivors is refused")
        self._step += 1
        held = {**self._held, self.id: self._own}
        return UnmaskResponse(
            self.id, request.round_id,
            seed_shares={u: held[u][0] for u in request.survivors if u in held},
            key_shares={u: held[u][1] for u in request.dropped if u in held})
