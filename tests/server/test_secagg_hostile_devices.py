"""Secure aggregation against a hostile device: what it adds to a message is never stored.

pfl-server keeps each accepted SecAgg message and replays every round's keys on each later
request, so a field riding along (megabytes of it, or text the database refuses) must be
refused, and one message must have one stored form (``"01"`` and ``"1"`` are not two ids).
"""

from __future__ import annotations

import pytest
from secagg_devices import Devices, protocol_state, secagg_service
from test_secagg_service import refuse

from pflkit.sdk.secagg import wire
from pflkit.sdk.secagg.client import SecAggClient


@pytest.fixture
def devices(tmp_path) -> Devices:
    return Devices(secagg_service(tmp_path))


def _to_shares(devices: Devices) -> dict[str, str]:
    """Everyone advertises keys; device 0's envelopes, as it would send them."""
    devices.keys(list(devices.clients))
    directory = wire.directory_from_wire(devices.setup.round_id, devices.answer(0, "keys"))
    return wire.shares_to_wire(devices.clients[0].share_keys(directory))["shares"]


def test_a_field_riding_along_any_step_is_refused_and_nothing_is_stored(devices):
    keys = wire.keys_to_wire(SecAggClient(0, devices.setup).advertise_keys())  # a spare
    for junk in ({"junk": "x" * 100_000}, {"note": "\u0000"}, {"cipher_key2": keys["mask_key"]}):
        refuse(devices, 422, "unknown field", 0, "keys", {**keys, **junk})
    shares = _to_shares(devices)
    refuse(devices, 422, "unknown field", 0, "shares", {"shares": shares, "pad": [1] * 1000})
    devices.send(0, "shares", {"shares": shares})
    devices.shares(list(devices.clients)[1:])
    devices.masked(list(devices.clients))
    request = wire.request_from_wire(devices.setup.round_id, devices.answer(0, "unmask"))
    answer = wire.unmask_to_wire(devices.clients[0].unmask(request))
    refuse(devices, 422, "unknown field", 0, "unmask", {**answer, "x": None})
    devices.send(0, "unmask", answer)  # the round is unharmed: it closes
    devices.unmask(list(devices.clients)[1:3])
    devices.service.rounds.tick()
    assert devices.service.runs.status(None)["history"][0]["metrics"]["participants"] == 5


def test_a_client_id_spelled_another_way_is_refused(devices):
    shares = _to_shares(devices)
    peer = next(iter(shares))
    for spelling in ("0" + peer, "\u0661" if peer == "1" else "\uff10" + peer, " " + peer):
        respelt = {(spelling if k == peer else k): v for k, v in shares.items()}
        refuse(devices, 422, "is not a client id", 0, "shares", {"shares": respelt})
    both = {**shares, "0" + peer: shares[peer]}  # one peer named twice
    refuse(devices, 422, "is not a client id", 0, "shares", {"shares": both})


def test_what_is_stored_is_the_message_re_encoded_and_a_repeat_is_a_repeat(devices):
    keys = wire.keys_to_wire(devices.clients[0].advertise_keys())
    devices.send(0, "keys", keys)
    (stored,), _ = protocol_state(devices.service)
    assert stored[3] == keys
    assert devices.send(0, "keys", dict(reversed(keys.items()))) is True
