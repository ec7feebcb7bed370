"""Secure aggregation on pfl-server's service: rounds that close from the masked sum, dropouts,
a round below the threshold, and bad messages refused with the round's state unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from secagg_devices import SECAGG, Devices, past_step_deadline, protocol_state, secagg_service

from pflkit.sdk.secagg import wire
from pflkit.sdk.secagg.wire import FLOATING
from pflkit.sdk.secagg_device import private_change
from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.errors import ServiceError


@pytest.fixture
def service(tmp_path):
    return secagg_service(tmp_path)


def expected_global(service, devices: Devices, who) -> dict[str, torch.Tensor]:
    """The global state plus the plain mean of ``who``'s changes (computed here, in float64)."""
    start = service.store.global_states.get(devices.task["global_hash"])
    mean = np.mean([devices.changes[c] for c in who], axis=0)
    with service.store.transaction() as s:
        schema = service.store.terms(s, service.store.current_run(s)).schema
    out, offset = dict(start), 0
    for name, (shape, dtype) in sorted(schema.items()):
        if dtype in FLOATING:
            size = int(np.prod(shape))
            out[name] = start[name].double() + torch.from_numpy(
                mean[offset:offset + size]).reshape(shape)
            offset += size
    return out


def closed_global(service, index: int) -> dict[str, torch.Tensor]:
    history = service.runs.status(None)["history"]
    return service.store.global_states.get(history[index]["global_hash"])


def assert_uniform(vector: bytes) -> None:
    """The top 4 bits of every uint32 spread evenly over 16 buckets (6 standard deviations)."""
    top = np.frombuffer(vector, dtype="<u4") >> 28
    counts = np.bincount(top, minlength=16)
    expect = top.size / 16
    assert np.abs(counts - expect).max() < 6 * np.sqrt(expect), counts


def test_a_device_gone_after_masking_is_recovered_and_no_update_is_stored(service):
    devices = Devices(service)
    everyone = list(devices.clients)
    devices.keys(everyone)
    devices.shares(everyone)
    devices.masked(everyone)
    devices.unmask(everyone[1:4])  # device 0 stops after masking; t = 3 answers suffice
    service.rounds.tick()
    status = service.runs.status(None)
    assert status["rounds_done"] == 1
    assert status["history"][0]["metrics"]["participants"] == 5
    want, got = expected_global(service, devices, everyone), closed_global(service, 0)
    for name, tensor in got.items():  # the mean's bound, plus float32's rounding of the result
        torch.testing.assert_close(tensor.double(), want[name], rtol=0,
                                   atol=devices.bound(5) + 1e-6 * want[name].abs().max())
    masked, _ = protocol_state(service)
    blobs = {m[3]["blob"] for m in masked if m[2] == "masked"}
    assert len(blobs) == 5
    stored = {p.name for p in service.settings.blobs.rglob("*") if p.is_file()}
    globals_ = {devices.task["global_hash"], status["history"][0]["global_hash"]}
    assert stored == blobs | globals_  # nothing else: no unmasked update, no plain sum
    for digest in blobs:
        assert_uniform(service.store.blobs.get(digest))


def test_a_device_gone_before_masking_is_unmasked_from_the_others_shares(service):
    devices = Devices(service)
    everyone = list(devices.clients)
    devices.keys(everyone)
    devices.shares(everyone)
    devices.masked(everyone[1:])  # device 0 never masks: its pairwise masks are removed
    past_step_deadline(service)
    with pytest.raises(ServiceError, match="masked step of round 0 is over") as late:
        devices.masked([0])
    assert late.value.status == 410
    devices.unmask(everyone[1:4])  # t = 3 answers close the round
    service.rounds.tick()
    assert service.runs.status(None)["history"][0]["metrics"]["participants"] == 4
    want, got = expected_global(service, devices, everyone[1:]), closed_global(service, 0)
    for name, tensor in got.items():
        torch.testing.assert_close(tensor.double(), want[name], rtol=0,
                                   atol=devices.bound(4) + 1e-6 * want[name].abs().max())


def test_a_round_below_the_threshold_fails_and_the_next_round_starts(service):
    devices = Devices(service)
    everyone = list(devices.clients)
    devices.keys(everyone)
    devices.shares(everyone)
    devices.masked(everyone)
    devices.unmask(everyone[:2])  # 2 answers, threshold 3
    past_step_deadline(service)
    status = service.runs.status(None)
    assert status["rounds_done"] == 1
    error = status["history"][0]["metrics"]["secagg_error"]
    assert "2 devices answered the unmask request, threshold 3" in error
    start = service.store.global_states.get(devices.task["global_hash"])
    for name, tensor in closed_global(service, 0).items():  # the global state is unchanged
        assert torch.equal(tensor, start[name])
    assert service.tasks.task(0)["status"] == "train" and service.tasks.task(0)["round"] == 1
    later = Devices(service)  # a key advertised in round 0 is refused in round 1
    messages, _ = protocol_state(service)
    old = next(m[3] for m in messages if m[1] == 0 and m[2] == "keys")
    with pytest.raises(ServiceError, match="reuses a public key") as refused:
        later.send(0, "keys", old)
    assert refused.value.status == 422


def refuse(devices: Devices, status: int, match: str, client: int, step: str, body) -> None:
    before = protocol_state(devices.service)
    with pytest.raises(ServiceError, match=match) as refused:
        devices.send(client, step, body)
    assert refused.value.status == status
    assert protocol_state(devices.service) == before


def test_bad_messages_are_refused_with_the_round_unchanged(service):
    devices = Devices(service)
    first = devices.clients[0].advertise_keys()
    key = wire.keys_to_wire(first)
    refuse(devices, 422, "malformed public key", 1, "keys", {**key, "mask_key": "AAAA"})
    refuse(devices, 422, "not base64", 1, "keys", {**key, "mask_key": "not base64!"})
    devices.send(0, "keys", key)
    assert devices.send(0, "keys", key) is True  # the same message again: a repeat, accepted
    refuse(devices, 422, "reuses a public key", 1, "keys", key)  # another device's keys
    fresh = wire.keys_to_wire(devices.clients[1].advertise_keys())
    refuse(devices, 409, "already sent a different keys", 0, "keys", fresh)  # a replay
    refuse(devices, 409, "has not begun", 1, "shares", {"shares": {}})
    devices.keys(list(devices.clients)[2:])
    devices.send(1, "keys", fresh)  # everyone advertised: the keys step closes
    directory = wire.directory_from_wire(devices.setup.round_id, devices.answer(0, "keys"))
    shares = wire.shares_to_wire(devices.clients[0].share_keys(directory))["shares"]
    wrong = {**shares, "99": shares["1"]}
    del wrong["1"]
    refuse(devices, 422, "wrong peers", 0, "shares", {"shares": wrong})
    refuse(devices, 422, "malformed share", 0, "shares", {"shares": {**shares, "1": "AAAA"}})
    refuse(devices, 422, "client id", 0, "shares", {"shares": {**shares, "x": "AAAA"}})
    devices.send(0, "shares", {"shares": shares})
    devices.shares(list(devices.clients)[1:])
    refuse(devices, 422, "masked input is malformed", 0, "masked", b"\0" * 8)
    devices.masked(list(devices.clients))
    request = wire.request_from_wire(devices.setup.round_id, devices.answer(0, "unmask"))
    answer = wire.unmask_to_wire(devices.clients[0].unmask(request))
    refuse(devices, 422, "other devices than asked", 0, "unmask",
           {**answer, "key_shares": answer["seed_shares"]})


def test_under_dp_devices_clip_and_their_noise_shares_sum_to_z_c(tmp_path):
    c, z = 0.5, 1.0
    service = secagg_service(tmp_path, extra=f"dp_clip_norm = {c}\ndp_noise_multiplier = {z}\n")
    devices = Devices(service)
    assert devices.task["secagg"]["dp_clip_norm"] == c
    clipped = {k: v * min(1.0, c / np.linalg.norm(v)) for k, v in devices.changes.items()}
    devices.changes = {k: private_change(devices.task["secagg"], devices.setup, v)
                       for k, v in devices.changes.items()}
    everyone = list(devices.clients)
    devices.keys(everyone)
    devices.shares(everyone)
    devices.masked(everyone)
    devices.unmask(everyone[:3])
    service.rounds.tick()
    metrics = service.runs.status(None)["history"][0]["metrics"]
    assert metrics["participants"] == 5 and metrics["dp_noise_multiplier"] == z
    start = service.store.global_states.get(devices.task["global_hash"])
    residual = _flat(closed_global(service, 0), start) - np.sum(list(clipped.values()), axis=0) / 5
    # five shares of N(0, (zC)^2 / t) summed, over the sampled m = 5: std z*C*sqrt(5/3)/5
    assert np.std(residual) == pytest.approx(z * c * np.sqrt(5 / 3) / 5, rel=0.05)


def _flat(new, start) -> np.ndarray:
    return np.concatenate([(new[k].double() - start[k].double()).reshape(-1).numpy()
                           for k in sorted(new) if new[k].is_floating_point()])


def test_a_secagg_run_of_one_client_per_round_is_refused(tmp_path):
    from pflkit.server.errors import Invalid

    with pytest.raises(Invalid, match="secagg needs at least 2 clients per round"):
        secagg_service(tmp_path, extra="", n=1)


def test_a_secagg_run_on_a_server_without_cryptography_is_refused(tmp_path, monkeypatch):
    import importlib.util

    from server_harness import run_toml

    from pflkit.server.errors import Invalid
    from pflkit.server.runs import RunRules, prepare_run
    from pflkit.server.settings import ServerSettings

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cryptography" else find(name, *a))
    rules = RunRules.of(ServerSettings(admin_token="x" * 20, data_dir=tmp_path))
    with pytest.raises(Invalid, match="needs the 'cryptography' package"):
        prepare_run(run_toml(per_round=2) + SECAGG, tmp_path / "blobs", rules)


def test_a_plain_upload_in_a_secagg_round_is_refused_and_nothing_is_stored(service):
    devices = Devices(service)
    client = next(iter(devices.clients))
    start = service.store.global_states.get(devices.task["global_hash"])
    stored = {p for p in service.settings.blobs.rglob("*") if p.is_file()}
    with pytest.raises(ServiceError) as refused:
        service.uploads.accept(client, devices.task["run_id"], devices.task["round"], 10,
                               state_to_bytes(start))
    assert refused.value.status == 409 and "secagg steps" in str(refused.value)
    assert {p for p in service.settings.blobs.rglob("*") if p.is_file()} == stored


def test_a_secagg_plus_round_on_a_sparse_graph_recovers_a_device_gone_after_masking(tmp_path):
    service = secagg_service(tmp_path, extra="secagg_neighbours = 2\n")  # K = 3 holders, t = 2
    devices = Devices(service)
    assert (devices.setup.neighbours, devices.setup.threshold) == (2, 2)
    everyone = list(devices.clients)
    devices.keys(everyone)
    devices.shares(everyone)
    devices.masked(everyone)
    devices.unmask(everyone[1:])  # device 0 stops after masking
    service.rounds.tick()
    status = service.runs.status(None)
    assert status["rounds_done"] == 1
    assert status["history"][0]["metrics"]["participants"] == 5
    want, got = expected_global(service, devices, everyone), closed_global(service, 0)
    for name, tensor in got.items():
        torch.testing.assert_close(tensor.double(), want[name], rtol=0,
                                   atol=devices.bound(5) + 1e-6 * want[name].abs().max())
