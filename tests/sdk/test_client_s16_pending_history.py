"""A pending round is tied to the global state it was trained on, not only to its round number.

A server restored from a backup can reach the pending round's number again on another global
state (the device was offline while it redid the rounds before). Before, the device uploaded its
update, trained on a global that history never had, into that round. Now it drops it with a
warning, trains the round on the server's global, and uploads that. The server is a real one on
loopback (hostile_harness.py): the upload of the first history is answered 409 (paused), which
keeps it pending, as the real server does (tests/server/test_client_s16_server_history.py
restores a real server from its backup).
"""

from __future__ import annotations

import hashlib
import logging
from urllib.parse import urlsplit

import pytest
import torch
from hostile_harness import answer, device, json_answer, serving
from upload_harness import SHAPE, algorithm, wire

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.pending_round import PendingRound
from pflkit.sdk.tensorio import state_to_bytes

OLD, NEW = "a" * 64, "b" * 64


def test_a_pending_update_is_dropped_when_its_round_restarts_from_another_global(
        tmp_path, caplog):
    config = wire("fedavg")
    start = algorithm("fedavg").aggregation.init_global(config["seed"])
    blobs = [state_to_bytes({k: v + shift for k, v in start.items()}) for shift in (0.0, 0.5)]
    first, second = (hashlib.sha256(b).hexdigest() for b in blobs)

    def task(digest: str) -> dict:
        return {"status": "train", "run_id": 1, "round": 1, "retry_after": 0.0,
                "global_hash": digest, "config": config}

    data = LabeledTensors(torch.rand(8, *SHAPE), torch.arange(8))
    with serving() as server:
        client = device(tmp_path, server, data=data)
        server.add(json_answer(200, task(first)), answer(200, blobs[0]),
                   json_answer(409, {"detail": "run 1 is paused"}))
        assert client.step().status == "wait"
        stale = PendingRound.load(tmp_path / "pending.safetensors")
        assert stale is not None and stale.global_hash == first

        server.add(json_answer(200, task(second)), answer(200, blobs[1]),
                   json_answer(200, {"accepted": True}))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pflkit.sdk.pending_round"):
            assert client.step().status == "trained"
        client.close()
    assert caplog.messages == [
        "round 1: the server's run 1 started round 1 again, from another global state (restored "
        "from a backup, or recreated?): the update trained for it is dropped, the device keeps "
        "its state"]
    paths = [(s.method, urlsplit(s.path).path) for s in server.served]
    assert paths[-1] == ("PUT", "/v1/runs/1/rounds/1/update")
    assert server.served[-1].body != stale.upload  # trained again, on the second global
    assert not (tmp_path / "pending.safetensors").exists()


PENDING = PendingRound(3, 5, 40, {}, b"update", ClientState(), OLD, "c" * 64)


@pytest.mark.parametrize(("task", "why"), [
    ({"status": "train", "run_id": 3, "round": 5, "global_hash": OLD}, None),  # upload it
    ({"status": "wait", "run_id": 3, "round": 5, "global_hash": OLD}, None),
    ({"status": "train", "run_id": 3, "round": 6, "global_hash": NEW}, None),  # is_over's
    ({"status": "train", "run_id": 4, "round": 0, "global_hash": NEW}, None),  # is_over's
    ({"status": "wait", "run_id": 3, "round": None}, None),
    ({"status": "train", "run_id": 3, "round": 5, "global_hash": NEW},
     "run 3 started round 5 again, from another global state"),
    ({"status": "paused", "run_id": 3, "round": 2, "global_hash": NEW}, "run 3 is back at round 2"),
    ({"status": "train", "run_id": 3, "round": 5, "global_hash": OLD, "config": {"lr": 0.1}},
     "run 3 runs under another config"),  # recreated with the same model and seed
    ({"status": "train", "run_id": 3, "round": 6, "config": {"lr": 0.1}},
     "run 3 runs under another config"),  # not committed into the new run either
])
def test_which_tasks_supersede_a_pending_round(task, why):
    assert PENDING.superseded(task) == why


def test_a_pending_file_of_an_older_release_loads_and_is_not_judged_by_its_global():
    older = PendingRound(3, 5, 40, {}, b"update", ClientState())  # no global, no config
    back = PendingRound.from_bytes(older.to_bytes())
    assert (back.global_hash, back.config) == (None, None)
    assert back.superseded({"status": "train", "run_id": 3, "round": 5,
                            "global_hash": NEW}) is None
    assert back.superseded({"status": "train", "run_id": 3, "round": 4}) == \
        "run 3 is back at round 4"


def test_a_round_that_diverged_is_trained_when_it_restarts_from_another_global(tmp_path):
    config = wire("fedavg")
    start = algorithm("fedavg").aggregation.init_global(config["seed"])
    blobs = [state_to_bytes({k: v * scale for k, v in start.items()}) for scale in (1e30, 1.0)]
    huge, usual = (hashlib.sha256(b).hexdigest() for b in blobs)
    tasks = [{"status": "train", "run_id": 1, "round": 1, "retry_after": 0.0,
              "global_hash": digest, "config": config} for digest in (huge, usual)]
    with serving() as server:
        client = device(tmp_path, server, data=LabeledTensors(torch.rand(8, *SHAPE),
                                                              torch.arange(8)))
        server.add(json_answer(200, tasks[0]), answer(200, blobs[0]))
        assert client.step().status == "diverged"  # finite weights, an infinite fit
        server.add(json_answer(200, tasks[1]), answer(200, blobs[1]),
                   json_answer(200, {"accepted": True}))
        assert client.step().status == "trained"  # the restored round, on its own global
        client.close()
    assert (server.served[-1].method, urlsplit(server.served[-1].path).path) == (
        "PUT", "/v1/runs/1/rounds/1/update")


def test_a_pending_file_of_an_older_release_is_committed_and_the_next_round_trains(tmp_path):
    config = wire("fedavg")
    blob = state_to_bytes(algorithm("fedavg").aggregation.init_global(config["seed"]))
    digest = hashlib.sha256(blob).hexdigest()
    tmp_path.mkdir(exist_ok=True)
    older = PendingRound(1, 0, 8, {}, b"update", ClientState())  # no global, no config
    (tmp_path / "pending.safetensors").write_bytes(older.to_bytes())
    with serving() as server:
        client = device(tmp_path, server, data=LabeledTensors(torch.rand(8, *SHAPE),
                                                              torch.arange(8)))
        server.add(json_answer(200, {"status": "train", "run_id": 1, "round": 1,
                                     "retry_after": 0.0, "global_hash": digest,
                                     "config": config}), answer(200, blob),
                   json_answer(200, {"accepted": True}))
        assert client.step().status == "trained"  # round 0 committed, round 1 trained on it
        client.close()
    assert urlsplit(server.served[-1].path).path == "/v1/runs/1/rounds/1/update"
