"""Bad input (issue 24 item 6): each refused in one line, the server's state unchanged."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from secagg_harness import Round, setup, updates

from pflkit.sdk.secagg import crypto
from pflkit.sdk.secagg.messages import SecAggError


def refused(server, message, match: str) -> None:
    """``message`` is refused with a one-line error and ``server`` is exactly as before."""
    before = pickle.dumps(server)  # our own object, never untrusted bytes
    receive = {"AdvertiseKeys": server.receive_keys, "ShareKeys": server.receive_shares,
               "MaskedInput": server.receive_masked,
               "UnmaskResponse": server.receive_unmask}[type(message).__name__]
    with pytest.raises(SecAggError, match=match) as err:
        receive(message)
    assert "\n" not in str(err.value)
    assert pickle.dumps(server) == before


def test_a_public_key_reused_by_two_devices_or_across_rounds_is_refused():
    rnd = Round(setup())
    first = rnd.clients[10].advertise_keys()
    rnd.server.receive_keys(first)
    copycat = dataclasses.replace(rnd.clients[11].advertise_keys(), mask_key=first.mask_key)
    refused(rnd.server, copycat, "client 11 reuses a public key")
    own_twice = dataclasses.replace(copycat, mask_key=copycat.cipher_key)
    refused(rnd.server, own_twice, "client 11 reuses a public key")
    later = Round(setup(round_id=2), seen_keys=rnd.seen_keys)  # the ledger outlives a round
    replayed_keys = dataclasses.replace(first, round_id=2)
    refused(later.server, replayed_keys, "client 10 reuses a public key")


@pytest.mark.parametrize("key", [bytes(32), b"short", b"\x01" + bytes(31)],
                         ids=["zero point", "short", "order-4 point u=1"])
def test_a_malformed_or_low_order_public_key_is_refused(key):
    rnd = Round(setup())
    bad = dataclasses.replace(rnd.clients[10].advertise_keys(), cipher_key=key)
    refused(rnd.server, bad, "client 10 sent a malformed public key")


def test_shares_for_the_wrong_peer_or_malformed_are_refused():
    rnd = Round(setup())
    directories = rnd.to_shares()
    msg = rnd.clients[10].share_keys(directories[10])
    envelope = msg.shares[11]
    stranger = {**msg.shares, 99: envelope}
    refused(rnd.server, dataclasses.replace(msg, shares=stranger), "wrong peers")
    missing = {k: v for k, v in msg.shares.items() if k != 11}
    refused(rnd.server, dataclasses.replace(msg, shares=missing), "wrong peers")
    to_self = {**missing, 10: envelope}
    refused(rnd.server, dataclasses.replace(msg, shares=to_self), "wrong peers")
    short = {**msg.shares, 11: envelope[:-1]}
    refused(rnd.server, dataclasses.replace(msg, shares=short), "malformed share")
    rnd.server.receive_shares(msg)  # the honest message still goes through


def test_replays_are_refused():
    rnd = Round(setup())
    keys = rnd.clients[10].advertise_keys()
    rnd.server.receive_keys(keys)
    refused(rnd.server, keys, "client 10 already sent its keys")
    for c in (11, 12, 13):
        rnd.server.receive_keys(rnd.clients[c].advertise_keys())
    directories = rnd.server.close_keys()
    refused(rnd.server, rnd.clients[14].advertise_keys(), "arrived in stage shares")
    msg = rnd.clients[10].share_keys(directories[10])
    refused(rnd.server, dataclasses.replace(msg, round_id=0), "for round 0")
    rnd.server.receive_shares(msg)
    refused(rnd.server, msg, "already sent its shares")
    with pytest.raises(SecAggError, match="out of order"):
        rnd.clients[10].share_keys(directories[10])


def test_malformed_masked_input_and_unmask_responses_are_refused():
    rnd = Round(setup(), {13: "masked"})
    values = updates(rnd.setup)
    request = rnd.to_unmask(values)
    good = rnd.masked[0]
    refused(rnd.server, good, "arrived in stage unmask")
    response = rnd.clients[10].unmask(request)
    not_asked = {**response.seed_shares, 13: response.key_shares[13]}
    refused(rnd.server, dataclasses.replace(response, seed_shares=not_asked), "other devices")
    bad_share = {**response.key_shares, 13: b"\xff" * 66}
    refused(rnd.server, dataclasses.replace(response, key_shares=bad_share), "malformed share")
    refused(rnd.server, dataclasses.replace(response, sender=13), "not a participant")
    rnd.server.receive_unmask(response)
    refused(rnd.server, response, "already sent its unmask response")


def test_a_masked_vector_of_the_wrong_length_is_refused():
    rnd = Round(setup())
    delivered = rnd.to_masked()
    msg = rnd.clients[10].masked_input(delivered[10], updates(rnd.setup)[10])
    refused(rnd.server, dataclasses.replace(msg, vector=msg.vector[:-4]), "malformed")
    refused(rnd.server, dataclasses.replace(msg, vector=msg.vector + b"\0"), "malformed")
    rnd.server.receive_masked(msg)


def test_a_device_rejects_a_share_sealed_for_another_peer_or_round_or_altered():
    rnd = Round(setup())
    delivered = rnd.to_masked()
    inbox = delivered[10]
    values = updates(rnd.setup)
    forwarded = dict(inbox.shares)
    forwarded[11] = delivered[12].shares[11]  # 11's envelope for 12, handed to 10 as 11's
    altered = dict(inbox.shares)
    altered[11] = altered[11][:-1] + bytes([altered[11][-1] ^ 1])
    for shares in (forwarded, altered):
        with pytest.raises(SecAggError, match="share from client 11 fails authentication"):
            rnd.clients[10].masked_input(dataclasses.replace(inbox, shares=shares), values[10])
    with pytest.raises(SecAggError, match="round 2 in round 1"):
        rnd.clients[10].masked_input(dataclasses.replace(inbox, round_id=2), values[10])
    rnd.clients[10].masked_input(inbox, values[10])  # the honest inbox still opens


def test_an_envelope_is_bound_to_round_sender_and_receiver():
    key = bytes(range(32))
    blob = crypto.seal(key, 3, 10, 11, b"share")
    assert crypto.open_sealed(key, 3, 10, 11, blob) == b"share"
    for other in ((4, 10, 11), (3, 12, 11), (3, 10, 12), (3, 11, 10)):
        with pytest.raises(SecAggError, match="fails authentication"):
            crypto.open_sealed(key, *other, blob)


def test_the_neighbour_graph_is_regular_symmetric_and_public():
    from pflkit.sdk.secagg.graph import neighbourhoods

    s = setup(n=30, t=5, k=6)
    graph = neighbourhoods(s)
    assert graph == neighbourhoods(setup(n=30, t=5, k=6))
    assert all(len(v) == 6 and c not in v for c, v in graph.items())
    assert all(c in graph[v] for c, vs in graph.items() for v in vs)
    other = neighbourhoods(dataclasses.replace(s, graph_seed=b"another"))
    assert other != graph
    full = neighbourhoods(setup(n=5, t=3))
    assert all(len(v) == 4 for v in full.values())
    assert np.isclose(sum(len(v) for v in graph.values()) / 30, 6)
