"""FederatedClient pieces that need no server: data format, retries, give-up."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from waiting import GUARD, wait_until

from pflkit.sdk import transport
from pflkit.sdk.client import (
    FederatedClient,
    RetryPolicy,
    ServerRefused,
    ServerUnavailable,
    load_client_data,
    save_client_data,
)
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.seeding import numpy_rng
from pflkit.sdk.tensorio import CorruptStateError, save_state


def test_client_data_round_trips_and_bad_files_are_named(tmp_path):
    data = LabeledTensors(torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3]))
    save_client_data(tmp_path / "data.safetensors", data)
    loaded = load_client_data(tmp_path)
    assert torch.equal(loaded.x, data.x) and torch.equal(loaded.y, data.y)
    save_state(tmp_path / "data.safetensors", {"x": data.x, "y": data.y.float()})
    with pytest.raises(CorruptStateError, match="int64"):
        load_client_data(tmp_path)
    with pytest.raises(FileNotFoundError, match="data.safetensors"):
        load_client_data(tmp_path / "nowhere")


def test_unreachable_server_is_retried_with_backoff_then_given_up(tmp_path, monkeypatch):
    slept: list[float] = []  # the clock counts these only: slow connects of a busy machine not
    monkeypatch.setattr(transport, "time", SimpleNamespace(monotonic=lambda: sum(slept),
                                                            sleep=slept.append))
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = LabeledTensors(torch.rand(2, 1, 8, 8), torch.tensor([0, 1]))
    with pytest.raises(ServerUnavailable, match=r"gave up after \d+ attempts") as caught:
        FederatedClient(f"http://127.0.0.1:{port}", tmp_path, data, token="pfe_x",
                        retry=RetryPolicy(base=0.05, cap=0.2, max_elapsed=1.0))  # fake clock
    assert f"gave up after {len(slept) + 1} attempts" in str(caught.value)
    assert len(slept) >= 3 and sum(slept) <= 1.0 and max(slept) <= 0.2 * 1.5
    assert not (tmp_path / "credentials.json").exists()


class ScriptedServer:
    """uvicorn on loopback answering POST /v1/clients/enroll from a script of replies.

    The task preview a device reads before enrolling always says "no run yet".
    """

    def __init__(self, replies: list[tuple[int, dict[str, str]]]) -> None:
        import threading

        import uvicorn

        self.replies = list(replies)
        self.seen: list[float] = []
        self.paths: list[str] = []  # every request, the task preview's too
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error",
                                interface="asgi3")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, "the scripted server started", poll=0.01)

    async def app(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        self.paths.append(scope["path"])
        if scope["path"] == "/v1/task/preview":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"run_id": null, "config": null}'})
            return
        self.seen.append(time.monotonic())
        status, headers = self.replies.pop(0) if self.replies else (201, {})
        body = json.dumps({"client_id": 7, "secret": "pfc_s"} if status < 300 else
                          {"detail": f"scripted {status}"}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            *[(k.encode(), v.encode()) for k, v in headers.items()]]})
        await send({"type": "http.response.body", "body": body})

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)  # cleanup: a daemon thread


@pytest.mark.parametrize("status", [409, 429, 503])
def test_retry_after_is_honoured_and_marks_a_409_retryable(tmp_path, status):
    server = ScriptedServer([(status, {"Retry-After": "0.6"})])
    try:
        data = LabeledTensors(torch.rand(2, 1, 8, 8), torch.tensor([0, 1]))
        client = FederatedClient(f"http://127.0.0.1:{server.port}", tmp_path, data,
                                 token="pfe_x", retry=RetryPolicy(base=0.01, cap=0.02))
        assert client.client_id == 7
        assert len(server.seen) == 2
        assert server.seen[1] - server.seen[0] >= 0.6  # waited what the server asked
    finally:
        server.stop()


def test_a_409_without_retry_after_is_a_refusal(tmp_path):
    server = ScriptedServer([(409, {})])
    try:
        data = LabeledTensors(torch.rand(2, 1, 8, 8), torch.tensor([0, 1]))
        with pytest.raises(ServerRefused, match="409"):
            FederatedClient(f"http://127.0.0.1:{server.port}", tmp_path, data, token="pfe_x")
        assert len(server.seen) == 1
    finally:
        server.stop()


def test_float64_or_nan_rows_are_refused_before_any_request(tmp_path):
    """One rule with pfl-sim's datasets: x float32, y int64, nothing converted. The device
    used to accept float64 rows, enroll, and fail in its first round (mat1 and mat2 ...)."""
    server = ScriptedServer([])
    try:
        rows = LabeledTensors(torch.rand(2, 1, 8, 8, dtype=torch.float64), torch.tensor([0, 1]))
        with pytest.raises(ValueError, match=r"^data: need x float32 .* got x torch.float64"):
            FederatedClient(f"http://127.0.0.1:{server.port}", tmp_path, rows, token="pfe_x")
        nan = LabeledTensors(torch.rand(5, 1, 8, 8), torch.arange(5))
        nan.x[3, 0, 2, 2] = float("nan")  # every fit on it would diverge
        with pytest.raises(ValueError, match=r"^data: x has NaN or Inf in 1 row\(s\), the first "
                                             "at row 3$"):
            FederatedClient(f"http://127.0.0.1:{server.port}", tmp_path, nan, token="pfe_x")
        assert server.seen == [] and not (tmp_path / "credentials.json").exists()
    finally:
        server.stop()


TOKEN = "pfe_Zq3secret0123456789"


def test_a_token_with_a_stray_carriage_return_is_refused_unsent_and_unshown(tmp_path, caplog):
    """It was retried as a network fault, the full token in every log line and the error."""
    server = ScriptedServer([])
    try:
        data = LabeledTensors(torch.rand(2, 1, 8, 8), torch.tensor([0, 1]))
        for bad in (TOKEN + "\r", TOKEN + "\n", " " + TOKEN, TOKEN + "é", ""):
            with caplog.at_level("INFO"), pytest.raises(ValueError, match="control character"
                                                        ) as caught:
                FederatedClient(f"http://127.0.0.1:{server.port}", tmp_path, data, token=bad,
                                # retried only when broken: the fixed client sends nothing
                                retry=RetryPolicy(base=0.01, cap=0.02,
                                                  max_elapsed=5.0))  # retried
            assert TOKEN not in str(caught.value) and "\n" not in str(caught.value)
        assert server.paths == [] and TOKEN not in caplog.text
    finally:
        server.stop()


def test_a_request_httpx_cannot_send_is_not_retried_nor_quoted(tmp_path, caplog):
    """httpx's LocalProtocolError quotes the illegal header: the Authorization, say."""
    server = ScriptedServer([])
    # retried only when broken: the fixed client never sends it
    policy = RetryPolicy(base=0.01, cap=0.02, max_elapsed=5.0)  # retried
    connection = transport.ServerConnection(f"http://127.0.0.1:{server.port}", policy, GUARD,
                                            numpy_rng(0, "test"))
    try:
        with caplog.at_level("INFO"), pytest.raises(ValueError, match="cannot be sent") as caught:
            connection.request("GET", "/v1/task/preview", headers={"X-Token": TOKEN + "\r"})
        assert TOKEN not in str(caught.value) and TOKEN not in caplog.text
        assert "retrying" not in caplog.text and server.paths == []
    finally:
        connection.close()
        server.stop()


def test_pfl_client_with_a_token_ending_in_a_carriage_return_prints_one_line(tmp_path):
    save_client_data(tmp_path / "data.safetensors",
                     LabeledTensors(torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])))
    exe = Path(sys.executable).parent / "pfl-client"
    done = subprocess.run([str(exe), "--server", "http://127.0.0.1:9", "--data", str(tmp_path),
                           "--token", TOKEN + "\r", "--log-level", "info"],
                          capture_output=True, text=True, timeout=GUARD, check=False)
    assert done.returncode != 0 and TOKEN not in done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
    assert "control character" in done.stderr


DAMAGED_CREDENTIALS = {
    "not JSON": ('{"server": "http://127.0.0.1:9", "client_id": ', "not valid JSON"),
    "a list": ("[1, 2]", "a JSON object was expected, found list"),
    "1e400 and NaN": ('{"server": "http://127.0.0.1:9", "client_id": 1e400, "secret": NaN}',
                      "not the credentials enrollment writes"),
    "id out of range": ('{"server": "http://127.0.0.1:9", "client_id": 2147483648, '
                        '"secret": "pfc_x"}', "not the credentials enrollment writes"),
}


@pytest.mark.parametrize("case", list(DAMAGED_CREDENTIALS))
def test_damaged_credentials_are_named_in_one_line(tmp_path, case):
    text, message = DAMAGED_CREDENTIALS[case]
    (tmp_path / "credentials.json").write_text(text)
    with pytest.raises(ValueError, match=f"^{tmp_path / 'credentials.json'}: ") as caught:
        FederatedClient("http://127.0.0.1:9", tmp_path,
                        LabeledTensors(torch.rand(2, 1, 8, 8), torch.tensor([0, 1])))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_pfl_client_with_damaged_credentials_prints_one_line(tmp_path):
    """The real command (it printed an AttributeError traceback for a JSON list)."""
    save_client_data(tmp_path / "data.safetensors",
                     LabeledTensors(torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])))
    (tmp_path / ".pflkit").mkdir()
    (tmp_path / ".pflkit" / "credentials.json").write_text("[1, 2]")
    exe = Path(sys.executable).parent / "pfl-client"
    done = subprocess.run([str(exe), "--server", "http://127.0.0.1:9", "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=GUARD, check=False)
    assert done.returncode != 0
    assert done.stderr.strip() == (f"pfl-client: {tmp_path / '.pflkit' / 'credentials.json'}: "
                                   f"a JSON object was expected, found list"), done.stderr[-2000:]
