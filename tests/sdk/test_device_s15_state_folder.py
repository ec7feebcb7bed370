"""pfl-client whose state folder cannot be written: one line, and nothing lost or sent twice.

Before: an OSError from the state folder (not a folder, full, read-only) left pfl-client as a
traceback. The disk here fills for real: the client runs with a file-size limit (RLIMIT_FSIZE,
SIGXFSZ ignored, so a write past it fails with EFBIG as on a full disk) against a scripted
server on loopback (hostile_harness.py); run again without the limit, the device trains and
uploads the round exactly once.
"""

from __future__ import annotations

import hashlib
import json
import resource
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import torch
from hostile_harness import SECRET, Answer, Served, answer, json_answer, serving
from upload_harness import SHAPE, wire
from waiting import GUARD

from pflkit.sdk.client import save_client_data
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.task_config import TaskConfig
from pflkit.sdk.tensorio import state_to_bytes

BIN = Path(sys.executable).parent
FULL_AT = 16 * 2**10  # bytes: credentials.json fits, the global state does not


def pfl_client(server: str, data: Path, state: Path, limit: int | None = None
               ) -> subprocess.CompletedProcess[str]:
    """Run pfl-client to the end of the run; ``limit``: the largest file it may write."""
    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([str(BIN / "pfl-client"), "--server", server, "--data", str(data),
                           "--state", str(state),
                           "--give-up-after", "0"],  # retried never: a stopped server ends it
                          capture_output=True, text=True, timeout=GUARD,
                          preexec_fn=None if limit is None else full_disk)


def test_a_state_folder_that_is_not_a_folder_is_one_line(tmp_path):
    save_client_data(tmp_path / "data.safetensors",
                     LabeledTensors(torch.rand(2, *SHAPE), torch.arange(2)))
    (tmp_path / "file").write_bytes(b"")
    done = pfl_client("http://127.0.0.1:9", tmp_path, tmp_path / "file" / "state")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"pfl-client: {tmp_path / 'file' / 'state'}: "
                                        "Not a directory"]


class OneRound:
    """pfl-server for one device and one round of FedAvg: then the run is stopped."""

    def __init__(self) -> None:
        self.config = wire("fedavg")
        algorithm = TaskConfig.from_wire(self.config, ImportPolicy()).build()
        self.blob = state_to_bytes(algorithm.aggregation.init_global(self.config["seed"]))
        self.digest = hashlib.sha256(self.blob).hexdigest()
        self.uploads: list[bytes] = []

    def __call__(self, request: Served) -> Answer:
        path = urlsplit(request.path).path
        if path == "/v1/task":
            status = "stopped" if self.uploads else "train"
            return json_answer(200, {"status": status, "run_id": 1, "round": 0,
                                     "retry_after": 0.0, "global_hash": self.digest,
                                     "config": self.config})
        if path == f"/v1/globals/{self.digest}":
            return answer(200, self.blob)
        if request.method == "PUT" and path == "/v1/runs/1/rounds/0/update":
            self.uploads.append(request.body)
            return json_answer(200, {"accepted": True})
        return json_answer(404, {"detail": f"no route {request.method} {path}"})


def test_a_full_disk_mid_round_is_one_line_and_the_round_is_uploaded_once_later(tmp_path):
    save_client_data(tmp_path / "data.safetensors",
                     LabeledTensors(torch.rand(8, *SHAPE), torch.arange(8)))
    state = tmp_path / "state"
    state.mkdir()
    server = OneRound()
    assert len(server.blob) > FULL_AT
    with serving(server) as http:
        (state / "credentials.json").write_text(json.dumps(
            {"server": http.url, "client_id": 3, "secret": SECRET}))
        full = pfl_client(http.url, tmp_path, state, limit=FULL_AT)
        assert full.returncode == 1, full.stderr
        assert full.stderr.splitlines()[-1].endswith(": File too large")
        assert "Traceback" not in full.stderr
        assert server.uploads == []
        assert sorted(p.name for p in state.iterdir()) == ["credentials.json"]  # no temp left

        again = pfl_client(http.url, tmp_path, state)
        assert again.returncode == 0, again.stderr
        assert len(server.uploads) == 1
        assert not (state / "pending.safetensors").exists()
