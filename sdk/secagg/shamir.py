"""Shamir t-of-K secret sharing over the prime field GF(2^521 - 1).

What we chose, and why: pycryptodome's ``Crypto.Protocol.SecretSharing.Shamir`` works in
GF(2^128) in pure Python and took 15 ms to combine one 16-byte chunk at t = 21 and 110 ms at
t = 51 (one core): a 100-device round reconstructs 100-130 chunks, 2-14 s on the server. Python
integers make this field's Lagrange interpolation about 1 ms at t = 51, and its 521 bits hold a
whole 32-byte X25519 key, so each secret is one share (66 bytes) with no chunking.
Shares sit at x = 1..K; coefficients come from :mod:`secrets`.
"""

from __future__ import annotations

import secrets

PRIME = (1 << 521) - 1  # a Mersenne prime
SHARE_BYTES = 66  # ceil(521 / 8)


def split(secret: bytes, threshold: int, count: int) -> list[bytes]:
    """``count`` shares of ``secret`` (at x = 1..count); any ``threshold`` of them recover it."""
    if not 1 <= threshold <= count or len(secret) >= SHARE_BYTES:
        raise ValueError(f"need 1 <= threshold <= count and a secret under {SHARE_BYTES} bytes")
    coeffs = [int.from_bytes(secret, "big")]
    coeffs += [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    shares = []
    for x in range(1, count + 1):
        y = 0
        for c in reversed(coeffs):  # Horner
            y = (y * x + c) % PRIME
        shares.append(y.to_bytes(SHARE_BYTES, "big"))
    return shares


def parse_share(share: bytes) -> int:
    """The field element of a share; ValueError for a malformed one."""
    if not isinstance(share, bytes) or len(share) != SHARE_BYTES:
        raise ValueError(f"a share is {SHARE_BYTES} bytes")
    y = int.from_bytes(share, "big")
    if y >= PRIME:
        raise ValueError("a share is not a field element")
    return y


def combine(points: dict[int, bytes], length: int) -> bytes:
    """The ``length``-byte secret whose polynomial passes through ``{x: share}`` (at x = 0).

    Give exactly ``threshold`` points: more are fine if all are honest, fewer give a wrong
    value (a ValueError when it does not fit ``length`` bytes).
    """
    xs = list(points)
    ys = [parse_share(points[x]) for x in xs]
    if len(set(xs)) != len(xs) or min(xs) < 1:
        raise ValueError("share x-coordinates must be distinct and >= 1")
    secret = 0
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                num = num * xj % PRIME
                den = den * (xj - xi) % PRIME
        secret = (secret + yi * num * pow(den, -1, PRIME)) % PRIME
    try:
        return secret.to_bytes(length, "big")
    except OverflowError:
        raise ValueError(f"the shares do not recover a {length}-byte secret") from None
