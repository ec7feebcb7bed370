"""Secure aggregation end to end: a real pfl-server, pfl-client and FederatedClient processes,
and one device (driven here) that stops after sending its masked input in round 0.

The round still closes, from the others' shares of its self-mask seed; in round 1 that device
takes part in full through the SDK's own ``take_part``. Bad messages over HTTP get their 4xx.
"""

from __future__ import annotations

import multiprocessing
from functools import partial

import httpx
import numpy as np
import torch
from secagg_devices import SECAGG
from server_harness import Server, client_data_dirs, run_toml, spawn_client
from test_secagg_service import assert_uniform
from waiting import GUARD, wait_until

from pflkit.sdk.client import FederatedClient, RetryPolicy, load_client_data
from pflkit.sdk.device_files import DeviceFiles
from pflkit.sdk.secagg import wire
from pflkit.sdk.secagg.client import SecAggClient
from pflkit.sdk.secagg_device import take_part
from pflkit.sdk.seeding import numpy_rng
from pflkit.sdk.transport import ServerConnection, ServerRefused


def _client(url: str, state_dir: str, data_dir: str, token: str) -> None:
    torch.set_num_threads(1)
    client = FederatedClient(url, state_dir, load_client_data(data_dir), token=token,
                             retry=RetryPolicy(cap=1.0, max_elapsed=GUARD))
    client.run()


def _train_task(http: httpx.Client, index: int) -> dict:
    return wait_until(lambda: (t := http.get("/v1/task").json())["status"] == "train"
                      and t["round"] == index and t, f"round {index}'s task")


def _stop_after_masking(http: httpx.Client, task: dict) -> None:
    """Round 0 for the last device: bad messages first (refused), then three steps, then gone."""
    setup = wire.setup_from_wire(task["secagg"])
    device = SecAggClient(setup.roster[-1], setup)
    base = f"/v1/runs/{task['run_id']}/rounds/{task['round']}/secagg"
    keys = wire.keys_to_wire(device.advertise_keys())
    assert httpx.post(f"{http.base_url}{base}/keys", json=keys).status_code == 401
    bad = http.post(f"{base}/keys", json={**keys, "mask_key": "AAAA"})
    assert bad.status_code == 422 and "malformed public key" in bad.json()["detail"]
    assert http.post(f"{base}/keys", json=keys).json() == {"duplicate": False}
    assert http.post(f"{base}/keys", json=keys).json() == {"duplicate": True}
    directory = wire.directory_from_wire(setup.round_id, wait_until(
        lambda: (r := http.get(f"{base}/keys")).status_code == 200 and r.json(), "keys"))
    http.post(f"{base}/shares", json=wire.shares_to_wire(device.share_keys(directory)))
    shares = wire.shares_in_from_wire(setup.round_id, wait_until(
        lambda: (r := http.get(f"{base}/shares")).status_code == 200 and r.json(), "shares"))
    vector = device.masked_input(shares, np.full(setup.dimension, 0.001))
    assert http.put(f"{base}/masked", content=vector.vector + b"\0").status_code == 413
    assert http.put(f"{base}/masked", content=vector.vector).status_code == 200


def test_a_secagg_run_with_a_device_gone_mid_protocol(tmp_path):
    config = run_toml("fedavg", rounds=2, num_clients=5, per_round=5, resize=8) + SECAGG
    server = Server(tmp_path / "server", config, ["--min-enrolled", "5"])
    server.root.mkdir()
    server.start()
    procs: list = []
    try:
        dirs = client_data_dirs(tmp_path / "clients", config)
        tokens = {cid: server.token(cid) for cid in dirs}
        last = max(dirs)
        procs += [spawn_client(server, dirs[c], tokens[c]) for c in (0, 1)]
        fork = multiprocessing.get_context("fork")
        procs += [fork.Process(target=_client, args=(server.url, str(dirs[c] / "state"),
                                                     str(dirs[c]), tokens[c])) for c in (2, 3)]
        for p in procs[2:]:
            p.start()
        secret = httpx.post(f"{server.url}/v1/clients/enroll",
                            json={"token": tokens[last]}).json()["secret"]
        with httpx.Client(base_url=server.url, timeout=GUARD,
                          headers={"Authorization": f"Bearer {secret}"}) as http:
            _stop_after_masking(http, _train_task(http, 0))
            task = _train_task(http, 1)  # round 0 closed without this device's unmask answer
            connection = ServerConnection(server.url, RetryPolicy(cap=1.0, max_elapsed=GUARD),
                                          GUARD, numpy_rng(0, "test"))
            try:
                take_part(partial(connection.request, secret=secret), last, task,
                          np.zeros(wire.setup_from_wire(task["secagg"]).dimension),
                          DeviceFiles(tmp_path))
            except ServerRefused as late:  # t others answered the unmask request first
                assert late.status == 410, late
        status = server.wait_for(lambda s: s["status"] == "finished")
        assert [p.wait(GUARD) for p in procs[:2]] == [0, 0]  # pfl-client
        for p in procs[2:]:
            p.join(GUARD)
        assert [p.exitcode for p in procs[2:]] == [0, 0]  # FederatedClient
        assert [h["metrics"]["participants"] for h in status["history"]] == [5, 5]
        masked = [p for p in (server.data_dir / "blobs").rglob("*") if p.is_file()
                  and p.stat().st_size == 4 * wire.setup_from_wire(task["secagg"]).dimension]
        assert len(masked) == 10  # five masked inputs a round, each uniform-looking
        for path in masked:
            assert_uniform(path.read_bytes())
    finally:
        for p in procs:  # cleanup after a failure: the devices would wait for the server
            p.kill()
        server.stop()
