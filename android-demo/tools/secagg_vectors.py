"""Cross-language vectors for the Java SecAgg device (android-demo/core, SecAggVectorsTest).

Run by the Java test itself with the repository's virtualenv (needs ``cryptography``);
nothing here is committed as data. Two modes, both printing one JSON object:

    vectors   what Python computes from fixed inputs: HKDF, the mask PRG, Shamir shares,
              quantized levels, a SecAgg+ neighbour graph, and this side's public keys
    check     reads the Java side's keys, derived keys, envelope and shares as JSON on stdin,
              answers what Python derives, opens and recovers from them, and an envelope
              Python sealed for the Java key

Python's keys come from fixed private bytes, so both runs use the same ones.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from pflkit.sdk.secagg import crypto, quantize, shamir, wire
from pflkit.sdk.secagg.graph import neighbourhoods
from pflkit.sdk.secagg.messages import RoundSetup

ROUND = 7
PY_ID, JAVA_ID = 5, 3
SECRET = bytes(range(100, 132))
SETUP = RoundSetup(round_id=ROUND, roster=tuple(range(3, 63, 3)), threshold=3, neighbours=4,
                   dimension=9, clip_range=0.5, graph_seed=hashlib.sha256(b"graph").digest())
UPDATE = [0.0, -0.5, 0.5, 0.75, -2.0, 1e-9, 0.123456789, -0.3333333333, 0.25]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _raw(data: dict, key: str) -> bytes:
    return base64.b64decode(data[key])


def _key(purpose: bytes) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(hashlib.sha256(b"py-" + purpose).digest())


def vectors() -> dict:
    """Python's numbers from fixed inputs."""
    hkdf_secret, hkdf_info = bytes(range(32)), b"pflkit-secagg/mask" + ROUND.to_bytes(8, "big")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=48, salt=None, info=hkdf_info)
    return {
        "py_cipher_pub": _b64(crypto.public_bytes(_key(b"cipher"))),
        "hkdf_secret": _b64(hkdf_secret), "hkdf_info": _b64(hkdf_info),
        "hkdf_48": _b64(hkdf.derive(hkdf_secret)),
        "prg_seed": _b64(bytes(range(16))),
        "prg_10": crypto.prg(bytes(range(16)), 10).tolist(),
        "secret": _b64(SECRET),
        "shares_3_of_5": [_b64(s) for s in shamir.split(SECRET, 3, 5)],
        "update": UPDATE, "levels": quantize.quantize(np.array(UPDATE), 0.5, 7).tolist(),
        "setup": wire.task_setup({}, SETUP),
        "neighbours": {str(c): list(v) for c, v in neighbourhoods(SETUP).items()},
    }


def check(java: dict) -> dict:
    """What Python makes of the Java side's values."""
    cipher = _key(b"cipher")
    java_pub = _raw(java, "cipher_pub")
    ours = crypto.agree(cipher, java_pub, b"share", ROUND, 32)
    plain = crypto.open_sealed(ours, ROUND, JAVA_ID, PY_ID, _raw(java, "sealed"))
    private = X25519PrivateKey.from_private_bytes(_raw(java, "cipher_priv"))
    shares = [base64.b64decode(s) for s in java["shares_3_of_5"]]
    return {
        "public_of_private": _b64(crypto.public_bytes(private)),
        "agree_share": _b64(ours),
        "opened": _b64(plain),
        "combined_135": _b64(shamir.combine({1: shares[0], 3: shares[2], 5: shares[4]}, 32)),
        "combined_234": _b64(shamir.combine({2: shares[1], 3: shares[2], 4: shares[3]}, 32)),
        "sealed_for_java": _b64(crypto.seal(ours, ROUND, PY_ID, JAVA_ID, SECRET)),
    }


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) == 2 else ""
    if mode not in ("vectors", "check"):
        sys.stderr.write("usage: secagg_vectors.py vectors|check\n")
        sys.exit(2)
    sys.stdout.write(json.dumps(vectors() if mode == "vectors" else check(json.load(sys.stdin))))
