"""Pruning a secure-aggregation run: the masked inputs of an open round stay until it closes.

The server has no update of a SecAgg device, only its masked input (a blob its message names);
the close needs every survivor's (server/secagg_rounds.py), so a prune between the masked and
the unmask steps must keep them, and delete them once the round closed.
"""

from __future__ import annotations

import os
import time

import torch
from secagg_devices import Devices, secagg_service

from pflkit.sdk.tensorio import state_from_bytes
from pflkit.server.retention import GRACE


def age(service) -> None:
    """Make every blob two hours old, as if written then."""
    old = time.time() - 2 * GRACE
    for path in service.store.blobs.root.glob("??/*"):
        os.utime(path, (old, old))


def test_masked_inputs_stay_while_their_round_is_open_and_go_once_it_closed(tmp_path):
    service = secagg_service(tmp_path)
    devices = Devices(service)
    everyone = list(devices.clients)
    devices.keys(everyone)
    devices.shares(everyone)
    devices.masked(everyone)
    stored = dict(service.store.blobs.sizes())
    age(service)
    kept = service.retention.prune(keep_globals=1)
    assert (kept.files, kept.recent) == (0, 0) and dict(service.store.blobs.sizes()) == stored

    devices.unmask(everyone[:3])  # the threshold: the step is complete
    service.rounds.tick()
    status = service.runs.status(None)
    assert status["rounds_done"] == 1
    closed = service.store.global_states.get(status["global_hash"])
    age(service)
    report = service.retention.prune(keep_globals=1)
    masked = len(everyone)  # one masked input per device; the start state goes too
    assert (report.updates, report.global_states, report.files) == (masked, 1, masked + 1)
    assert set(dict(service.store.blobs.sizes())) == {status["global_hash"]}
    on_disk = state_from_bytes(service.store.blobs.get(status["global_hash"]))
    assert all(torch.equal(closed[k], v) for k, v in on_disk.items())
