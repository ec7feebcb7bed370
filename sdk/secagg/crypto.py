"""Key agreement (X25519 + HKDF-SHA256), share envelopes (AES-GCM) and the mask PRG (AES-CTR).

An envelope's associated data binds (round, sender, receiver): a share re-addressed to another
peer, replayed from another round or altered fails authentication. Keys are fresh each round
and every HKDF also mixes in the round id.
"""

from __future__ import annotations

import os
import struct

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from pflkit.sdk.secagg.messages import SecAggError

KEY_BYTES = 32  # X25519 public and private keys
SEED_BYTES = 16  # an AES-128 key: the PRG's seed
NONCE_BYTES = 12
TAG_BYTES = 16
FIELD_PRIME = 2**255 - 19  # Curve25519's field: canonical u-coordinates are below it


def new_key() -> X25519PrivateKey:
    """A fresh X25519 private key."""
    return X25519PrivateKey.generate()


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The raw 32-byte public key."""
    return key.public_key().public_bytes_raw()


def check_encoding(raw: object) -> None:
    """ValueError unless ``raw`` is 32 bytes in a point's one encoding.

    A non-canonical encoding (the top bit set, or a value >= 2^255 - 19) is another spelling
    of a point, which would slip past a check that compares bytes (a key reused, or one
    device's key handed out for two peers).
    """
    if not isinstance(raw, bytes) or len(raw) != KEY_BYTES:
        raise ValueError(f"a public key is {KEY_BYTES} bytes")
    if int.from_bytes(raw, "little") >= FIELD_PRIME:
        raise ValueError("a public key must be a canonical encoding (below 2^255 - 19)")


def check_public_key(raw: object) -> None:
    """ValueError unless ``raw`` is a usable X25519 public key in its one encoding.

    A low-order point is not: every exchange with it gives the all-zero secret.
    """
    check_encoding(raw)
    X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(raw))


def agree(key: X25519PrivateKey, peer: bytes, purpose: bytes, round_id: int,
          length: int) -> bytes:
    """A ``length``-byte key both ends derive alike: HKDF-SHA256 of the X25519 secret."""
    shared = key.exchange(X25519PublicKey.from_public_bytes(peer))
    info = b"pflkit-secagg/" + purpose + struct.pack(">Q", round_id)
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(shared)


def _associated(round_id: int, sender: int, receiver: int) -> bytes:
    return b"pflkit-secagg/share" + struct.pack(">QQQ", round_id, sender, receiver)


def seal(key: bytes, round_id: int, sender: int, receiver: int, plaintext: bytes) -> bytes:
    """``nonce || AES-GCM(plaintext)`` bound to (round, sender, receiver)."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, _associated(round_id, sender, receiver))


def open_sealed(key: bytes, round_id: int, sender: int, receiver: int, blob: bytes) -> bytes:
    """The plaintext of :func:`seal`; SecAggError if it was not sealed for exactly this."""
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:],
                                   _associated(round_id, sender, receiver))
    except (InvalidTag, ValueError):
        raise SecAggError(f"round {round_id}: the share from client {sender} fails "
                          f"authentication (wrong peer, another round, or altered)") from None


def prg(seed: bytes, count: int) -> np.ndarray:
    """``count`` pseudorandom uint32s: AES-128-CTR keyed by ``seed`` over zeros."""
    encryptor = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor()
    return np.frombuffer(encryptor.update(bytes(4 * count)), dtype="<u4")


def add_mask(total: np.ndarray, seed: bytes, sign: int) -> None:
    """``total += sign * prg(seed)`` modulo 2^32, in place (``sign`` is +1 or -1)."""
    mask = prg(seed, total.size)
    if sign > 0:
        np.add(total, mask, out=total)
    else:
        np.subtract(total, mask, out=total)
