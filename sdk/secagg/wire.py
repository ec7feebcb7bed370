"""The JSON form of secure-aggregation messages and of a round's setup, for pfl-server's API.

One definition both sides import (pfl-server stores what it received in this form too).
Bytes travel as base64 and peer ids as JSON object keys; the sender and the round come from
the request (the authenticated client, the URL), never from the body. Anything that does not
decode is a :class:`SecAggError` naming the field, so the server answers 422 and stores nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import sys
from typing import Any

from pflkit.sdk.secagg import dp
from pflkit.sdk.secagg.messages import (
    MAX_CLIENTS,
    AdvertiseKeys,
    KeyDirectory,
    RoundSetup,
    SecAggError,
    ShareKeys,
    SharesIn,
    UnmaskRequest,
    UnmaskResponse,
)

TASK_KEY = "secagg"  # a task of a SecAgg round carries its public setup under this key
FLOATING = ("F16", "BF16", "F32", "F64")  # safetensors dtypes that are masked (others: kept)


def threshold(fraction: float, holders: int) -> int:
    """The threshold for ``holders`` share holders: ``ceil(fraction * K)``, over half."""
    return max(holders // 2 + 1, math.ceil(fraction * holders - 1e-9))


def round_setup(config: dict[str, Any], round_id: int, sampled: list[int], global_hash: str,
                schema: dict[str, tuple[list[int], str]]) -> RoundSetup:
    """A round's public setup from the run's ``[aggregation]`` secagg settings.

    The vector is every floating tensor of the update schema, flattened in name order; the
    neighbour graph is drawn from the round's global-state hash (public, fixed at opening).
    With DP the clip range is :func:`~pflkit.sdk.secagg.dp.quantization_range`'s.
    """
    n = len(sampled)
    k = config["secagg_neighbours"]
    k = n - 1 if k is None or k >= n - 1 else k
    t = threshold(config["secagg_threshold"], min(k, n - 1) + 1)
    dimension = sum(math.prod(shape) for name, (shape, dtype) in sorted(schema.items())
                    if dtype in FLOATING)
    c, z = config.get("dp_clip_norm"), config.get("dp_noise_multiplier")
    clip_range = config["secagg_clip_range"] if c is None or z is None else \
        dp.quantization_range(c, dp.noise_share_std(z, c, t))
    return RoundSetup(round_id=round_id, roster=tuple(sorted(sampled)), threshold=t,
                      neighbours=k, dimension=dimension, clip_range=clip_range,
                      graph_seed=hashlib.sha256(b"secagg-graph" + global_hash.encode()).digest())


def task_setup(config: dict[str, Any], setup: RoundSetup) -> dict[str, Any]:
    """What a task carries: the setup, and DP's C and z when devices add noise shares."""
    return {**setup_to_wire(setup), "dp_clip_norm": config.get("dp_clip_norm"),
            "dp_noise_multiplier": config.get("dp_noise_multiplier")}


def setup_to_wire(setup: RoundSetup) -> dict[str, Any]:
    """The setup as a task carries it."""
    return {"round_id": setup.round_id, "roster": list(setup.roster),
            "threshold": setup.threshold, "neighbours": setup.neighbours,
            "dimension": setup.dimension, "clip_range": setup.clip_range,
            "graph_seed": _b64(setup.graph_seed)}


def setup_from_wire(data: object) -> RoundSetup:
    """The setup a task carries, checked as a device must check what a server sends.

    Integers must be JSON integers and the clip range a number (RoundSetup checks the rest);
    anything else is a :class:`SecAggError` naming the field, never a TypeError or KeyError.
    """
    if not isinstance(data, dict):
        raise SecAggError("secagg: the round's setup must be an object")
    for key in ("round_id", "threshold", "neighbours", "dimension"):
        if type(data.get(key)) is not int:
            raise SecAggError(f"secagg: {key} must be an integer")
    roster, clip = data.get("roster"), data.get("clip_range")
    if not isinstance(roster, list) or len(roster) > MAX_CLIENTS or \
            not all(type(v) is int for v in roster):
        raise SecAggError(f"secagg: roster must be a list of at most {MAX_CLIENTS} client ids")
    if isinstance(clip, bool) or not isinstance(clip, int | float) or \
            not 0 < clip <= sys.float_info.max:  # exact for ints: 10**400 is no float
        raise SecAggError("secagg: clip_range must be a number in (0, inf)")
    try:
        return RoundSetup(data["round_id"], tuple(roster), data["threshold"],
                          data["neighbours"], data["dimension"], float(clip),
                          _bytes(data.get("graph_seed"), "graph_seed"))
    except SecAggError:
        raise
    except ValueError as err:
        raise SecAggError(f"secagg: {err}") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _bytes(text: object, what: str) -> bytes:
    if not isinstance(text, str) or len(text) > 4096:
        raise SecAggError(f"{what} must be base64 text of at most 4096 characters")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SecAggError(f"{what} is not base64") from None


def _id(key: object, what: str) -> int:
    """A client id as JSON writes it: ASCII digits, no leading zero (one id, one spelling)."""
    if not isinstance(key, str) or not (key.isascii() and key.isdigit()) or len(key) > 10 \
            or (key[0] == "0" and key != "0"):
        raise SecAggError(f"{what}: {str(key)[:20]!r} is not a client id")
    return int(key)


def _by_id(data: object, what: str) -> dict[int, bytes]:
    if not isinstance(data, dict) or len(data) > MAX_CLIENTS:
        raise SecAggError(f"{what} must be an object of at most {MAX_CLIENTS} client ids")
    return {_id(k, what): _bytes(v, f"{what}[{str(k)[:10]}]") for k, v in data.items()}


def _ids(data: object, what: str) -> tuple[int, ...]:
    if not isinstance(data, list) or len(data) > MAX_CLIENTS or \
            not all(type(v) is int for v in data):  # true is not client 1
        raise SecAggError(f"{what} must be a list of at most {MAX_CLIENTS} client ids")
    return tuple(data)


_FIELDS = {"keys": ("cipher_key", "mask_key"), "shares": ("shares",),
           "unmask": ("seed_shares", "key_shares")}


def canonical(step: str, data: dict[str, Any]) -> dict[str, Any]:
    """A device's ``step`` message checked and written afresh: the one form the server keeps.

    Only the step's fields (pfl-server stores what it accepts: nothing else may ride along);
    ids and base64 re-encoded, so the same message always compares equal to its repeat.
    """
    fields = _FIELDS[step]
    extra = sorted(str(k)[:20] for k in data if k not in fields)
    if extra:
        raise SecAggError(f"the {step} message has an unknown field {extra[0]!r} "
                          f"(it takes {', '.join(fields)})")
    if step == "keys":
        return keys_to_wire(keys_from_wire(0, 0, data))
    if step == "shares":
        return shares_to_wire(share_keys_from_wire(0, 0, data))
    return unmask_to_wire(unmask_from_wire(0, 0, data))


def keys_to_wire(msg: AdvertiseKeys) -> dict[str, Any]:
    """Step 1, device -> server."""
    return {"cipher_key": _b64(msg.cipher_key), "mask_key": _b64(msg.mask_key)}


def keys_from_wire(sender: int, round_id: int, data: dict[str, Any]) -> AdvertiseKeys:
    """Step 1 as the server reads it."""
    return AdvertiseKeys(sender, round_id, _bytes(data.get("cipher_key"), "cipher_key"),
                         _bytes(data.get("mask_key"), "mask_key"))


def directory_to_wire(msg: KeyDirectory) -> dict[str, Any]:
    """Step 1's answer, server -> device."""
    return {"keys": {str(v): [_b64(a), _b64(b)] for v, (a, b) in msg.keys.items()}}


def directory_from_wire(round_id: int, data: dict[str, Any]) -> KeyDirectory:
    """Step 1's answer as the device reads it."""
    keys = data.get("keys")
    if not isinstance(keys, dict) or not all(isinstance(p, list) and len(p) == 2
                                             for p in keys.values()):
        raise SecAggError("keys must map client ids to two public keys")
    return KeyDirectory(round_id, {_id(v, "keys"): (_bytes(a, "key"), _bytes(b, "key"))
                                   for v, (a, b) in keys.items()})


def shares_to_wire(msg: ShareKeys | SharesIn) -> dict[str, Any]:
    """Step 2 (device -> server) and its answer (server -> device): envelopes by peer."""
    return {"shares": {str(v): _b64(blob) for v, blob in msg.shares.items()}}


def share_keys_from_wire(sender: int, round_id: int, data: dict[str, Any]) -> ShareKeys:
    """Step 2 as the server reads it."""
    return ShareKeys(sender, round_id, _by_id(data.get("shares"), "shares"))


def shares_in_from_wire(round_id: int, data: dict[str, Any]) -> SharesIn:
    """Step 2's answer as the device reads it."""
    return SharesIn(round_id, _by_id(data.get("shares"), "shares"))


def request_to_wire(msg: UnmaskRequest) -> dict[str, Any]:
    """Step 4's request, server -> device."""
    return {"survivors": list(msg.survivors), "dropped": list(msg.dropped)}


def request_from_wire(round_id: int, data: dict[str, Any]) -> UnmaskRequest:
    """Step 4's request as the device reads it."""
    return UnmaskRequest(round_id, _ids(data.get("survivors"), "survivors"),
                         _ids(data.get("dropped"), "dropped"))


def unmask_to_wire(msg: UnmaskResponse) -> dict[str, Any]:
    """Step 4, device -> server."""
    return {"seed_shares": {str(u): _b64(s) for u, s in msg.seed_shares.items()},
            "key_shares": {str(u): _b64(s) for u, s in msg.key_shares.items()}}


def unmask_from_wire(sender: int, round_id: int, data: dict[str, Any]) -> UnmaskResponse:
    """Step 4 as the server reads it."""
    return UnmaskResponse(sender, round_id, _by_id(data.get("seed_shares"), "seed_shares"),
                          _by_id(data.get("key_shares"), "key_shares"))
