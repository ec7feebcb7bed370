"""A device whose server's history changed under it: restored from a backup, or its run recreated.

Before: a pending update trained for round 1 was kept across a restore to round 0 and sent to
round 1 of the new history (trained on a global state that history never had); and a run
recreated under the same id with another model made the device's stored state fail to load
with torch's multi-line ``load_state_dict`` error. Real pfl-server and pfl-client processes on
loopback, FedPer (its personal head is the device's state), a backup as docs/deployment.md
says (SQLite's backup API while serving, then the blob folder).
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
from pathlib import Path

import httpx
import torch
from server_harness import BIN, run_toml
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy, save_client_data
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.pending_round import PendingRound

ONE_DEVICE = ("--min-enrolled", "1")  # the only device is sampled every round


def fedper(rounds: int, model: str = "twonn") -> str:
    return run_toml("fedper", rounds=rounds, num_clients=3, per_round=1, model=model,
                    kind="dirichlet")


def rows() -> LabeledTensors:
    generator = torch.Generator().manual_seed(0)
    return LabeledTensors(torch.rand(20, 1, 28, 28, generator=generator), torch.arange(20) % 10)


def phone(server, state: Path) -> FederatedClient:
    return FederatedClient(server.url, state, rows(), token=server.token(),
                           retry=RetryPolicy(cap=0.5, max_elapsed=GUARD))


def back_up(server, into: Path) -> None:
    """docs/deployment.md's backup of a serving SQLite server: the database, then the blobs."""
    into.mkdir()
    with sqlite3.connect(server.data_dir / "server.db") as live, \
            sqlite3.connect(into / "server.db") as copy:
        live.backup(copy)
    shutil.copytree(server.data_dir / "blobs", into / "blobs")


def restore(server, backup: Path) -> None:
    server.stop()
    shutil.rmtree(server.data_dir)
    shutil.copytree(backup, server.data_dir)
    server.start()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_pending_update_of_a_history_the_restored_server_lost_is_dropped_not_uploaded(
        make_server, tmp_path):
    server = make_server(fedper(rounds=3), *ONE_DEVICE)
    device = phone(server, tmp_path / "device")
    run_id = server.wait_for(lambda s: s["current_round"] is not None)["id"]
    back_up(server, tmp_path / "backup")  # round 0 open, nothing uploaded yet
    assert device.step().status == "trained"  # round 0, committed
    server.wait_for(lambda s: s["current_round"] is not None and s["current_round"]["index"] == 1)
    admin = server.admin()

    def pause_before_the_upload(request: httpx.Request) -> None:
        if request.method == "PUT":
            admin.post(f"/v1/runs/{run_id}/pause").raise_for_status()

    device.connection.http.event_hooks["request"].append(pause_before_the_upload)
    assert device.step().status == "wait"  # round 1 trained, its upload met the pause (409)
    device.connection.http.event_hooks["request"].clear()
    admin.close()
    pending_file = device.state_dir / "pending.safetensors"
    stale = PendingRound.load(pending_file)
    assert stale is not None and stale.round == 1
    kept = (device.state_dir / "client_state.safetensors").read_bytes()

    restore(server, tmp_path / "backup")  # back at round 0, on the initial global state
    again = device.step()
    assert (again.status, again.round) == ("trained", 0)  # round 0 of the restored history
    assert not pending_file.exists()
    assert (device.state_dir / "client_state.safetensors").read_bytes() != kept  # trained on
    server.wait_for(lambda s: s["current_round"] is not None and s["current_round"]["index"] == 1)
    then = device.step()
    assert (then.status, then.round) == ("trained", 1)
    status = server.wait_for(lambda s: s["rounds_done"] == 2)
    assert [h["metrics"]["participants"] for h in status["history"]] == [1, 1]
    blobs = server.data_dir / "blobs"
    assert not (blobs / sha(stale.upload)[:2] / sha(stale.upload)).exists()  # never sent
    device.close()


def pfl_client(server, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "pfl-client"), "--server", server.url, "--data", str(data),
                           "--threads", "1", "--give-up-after", str(GUARD), "--max-backoff", "1",
                           "--log-level", "warning", *args],
                          capture_output=True, text=True, timeout=GUARD)


def test_a_run_recreated_with_another_model_refuses_the_stored_state_in_one_line_and_keeps_it(
        make_server, tmp_path):
    save_client_data(tmp_path / "data.safetensors", rows())
    state = tmp_path / ".pflkit"
    first = make_server(fedper(rounds=2), *ONE_DEVICE)  # round 0 opens once it enrolls
    done = pfl_client(first, tmp_path, "--token", first.token(), "--rounds", "1")
    assert done.returncode == 0, done.stderr
    first.stop()
    kept = (state / "client_state.safetensors").read_bytes()

    # a new database, run 1 again, now a TwoCNN: the device enrolls again in the same folder
    second = make_server(fedper(rounds=1, model="twocnn"), *ONE_DEVICE)
    (state / "credentials.json").unlink()
    refused = pfl_client(second, tmp_path, "--token", second.token())
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"pfl-client: {state / 'client_state.safetensors'}: this device's state of run 1 was "
        "trained under another config of that run (run 1 was recreated or changed on the "
        "server); the file is kept as it is: move it away to take part in the run from a "
        "fresh state"]
    assert (state / "client_state.safetensors").read_bytes() == kept
    assert not (state / "pending.safetensors").exists()

    (state / "client_state.safetensors").rename(tmp_path / "kept.safetensors")  # as it says
    joined = pfl_client(second, tmp_path)
    assert joined.returncode == 0, joined.stderr
    assert joined.stdout.endswith("trained 1 round(s)\n")
    assert (tmp_path / "kept.safetensors").read_bytes() == kept
