"""A device in a SecAgg round over HTTP whose server lies: it refuses in one line, sends nothing.

The device is a real FederatedClient that trains and then takes part (``step()``, as
``pfl-client`` runs it); lying_server.py plays pfl-server's routes over real sockets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from hostile_harness import serving
from lying_server import DEVICE, LyingServer, secagg_device

from pflkit.sdk.secagg import crypto
from pflkit.sdk.secagg.messages import KeyDirectory, SharesIn, UnmaskRequest


def take_part(tmp_path, server: LyingServer) -> str:
    """One ``step()`` of the device against ``server``: its status, or its one-line refusal."""
    with serving(server) as http:
        phone = secagg_device(tmp_path, http)
        try:
            return phone.step().status
        except ValueError as err:  # SecAggError, or the roster without the device
            assert "\n" not in str(err)
            return str(err)
        finally:
            phone.close()


def test_an_honest_round_is_taken_part_in(tmp_path):
    server = LyingServer()
    assert take_part(tmp_path, server) == "trained"
    assert server.posted == [("POST", "keys"), ("POST", "shares"), ("PUT", "masked"),
                             ("POST", "unmask")]


def test_an_unmask_request_padded_with_the_device_itself_is_refused(tmp_path):
    server = LyingServer()
    others = tuple(c for c in server.setup.roster if c != DEVICE)
    server.tamper_request = lambda r: UnmaskRequest(r.round_id, (DEVICE,) * 3, others)
    assert "names [1] twice or from outside the roster" in take_part(tmp_path, server)
    assert ("POST", "unmask") not in server.posted


def peer_key(server: LyingServer, peer: int, which: int,
             key: bytes | Callable[[KeyDirectory], bytes]) -> None:
    """Hand the device ``key`` as ``peer``'s cipher (0) or mask (1) key."""
    def tamper(directory: KeyDirectory) -> KeyDirectory:
        pair = list(directory.keys[peer])
        pair[which] = key(directory) if callable(key) else key
        return dataclasses.replace(directory, keys={**directory.keys, peer: tuple(pair)})
    server.tamper_keys = tamper


def top_bit(raw: bytes) -> bytes:
    """The same X25519 point, spelt with the (ignored) top bit set."""
    return raw[:31] + bytes([raw[31] | 0x80])


@pytest.mark.parametrize("which, key", [
    (0, bytes(32)), (1, bytes(32)), (0, b"\x01" + bytes(31)), (1, b"\xff" * 31 + b"\x7f"),
    (1, lambda d: top_bit(d.keys[3][1])),  # another peer's mask key, spelt differently
], ids=["zero cipher key", "zero mask key", "order-4 point", "p + 18", "another peer's key"])
def test_an_unusable_or_respelt_public_key_in_the_directory_is_refused(tmp_path, which, key):
    server = LyingServer()
    peer_key(server, 2, which, key)
    assert take_part(tmp_path, server) == \
        "client 1: client 2's advertised key is not a usable X25519 public key"
    assert server.posted == [("POST", "keys")]  # no share left the device


ID_RANGE = "secagg: client ids and round_id must be in [0, 2147483647]"
HALF = "secagg: threshold = {}: must be in (2.5, 5] for 5 holders of each secret"


@pytest.mark.parametrize("field, value, refusal", [
    ("round_id", 2**64, ID_RANGE), ("roster", [1, 2, 3, 4, 2**64], ID_RANGE),
    ("threshold", 1, HALF.format(1)), ("threshold", 2, HALF.format(2)),  # one party, two halves
    ("roster", [1, 1, 2, 3, 4, 5], "secagg: roster must be 2..10000 distinct sorted client ids"),
    ("roster", [2, 3, 4, 5, 6], "client 1 is not in round 7's roster"),
    ("clip_range", 10**400, "secagg: clip_range must be a number in (0, inf)"),  # no float
], ids=["round 2^64", "client 2^64", "t = 1", "t = K/2", "a client twice", "not the device's",
        "clip 10^400"])
def test_a_setup_outside_the_protocols_ranges_is_refused_before_anything_is_sent(
        tmp_path, field, value, refusal):
    server = LyingServer()
    server.secagg = {**server.secagg, field: value}
    assert take_part(tmp_path, server) == refusal
    assert server.posted == []


def fresh_pair() -> tuple[bytes, bytes]:
    """Two usable public keys nobody advertised."""
    return crypto.public_bytes(crypto.new_key()), crypto.public_bytes(crypto.new_key())


@pytest.mark.parametrize("tamper, refusal", [
    (lambda keys: {**keys, 9: fresh_pair()}, "keys of [9], not neighbours"),
    (lambda keys: {**keys, DEVICE: fresh_pair()}, "keys of [1], not neighbours"),
    (lambda keys: {2: keys[2]}, "1 neighbours advertised keys, fewer than threshold 3 - 1"),
], ids=["a stranger", "the device itself", "below the threshold"])
def test_a_directory_naming_strangers_or_too_few_peers_is_refused(tmp_path, tamper, refusal):
    server = LyingServer()
    server.tamper_keys = lambda d: dataclasses.replace(d, keys=tamper(d.keys))
    assert take_part(tmp_path, server) == f"client 1: {refusal}"
    assert server.posted == [("POST", "keys")]


@pytest.mark.parametrize("tamper, refusal", [
    (lambda inbox: {2: inbox[2]}, "shares from 1 peers, fewer than threshold 3 - 1: not masking"),
    (lambda inbox: {**inbox, 9: inbox[2]}, "client 1: shares from [9], who advertised no keys"),
    (lambda inbox: {**inbox, DEVICE: inbox[2]}, "client 1: shares from [1], who advertised no"),
    (lambda inbox: {**inbox, 3: inbox[2]}, "the share from client 3 fails authentication"),
], ids=["below the threshold", "a stranger", "the device itself", "re-addressed"])
def test_shares_from_strangers_re_addressed_or_too_few_are_refused_before_masking(
        tmp_path, tamper, refusal):
    server = LyingServer()
    server.tamper_shares = lambda inbox: SharesIn(inbox.round_id, tamper(inbox.shares))
    assert refusal in take_part(tmp_path, server)
    assert server.posted == [("POST", "keys"), ("POST", "shares")]  # nothing masked went up
