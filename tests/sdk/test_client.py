"""FederatedClient pieces that need no server: data format, retries, give-up."""

from __future__ import annotations

import socket

import pytest
import torch

from pflkit.sdk.client import (
    FederatedClient,
    RetryPolicy,
    ServerUnavailable,
    load_client_data,
    save_client_data,
)
from pflkit.sdk.data.tensors import LabeledTensors
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


def test_unreachable_server_is_retried_with_backoff_then_given_up(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = LabeledTensors(torch.rand(2, 1, 8, 8), torch.tensor([0, 1]))
    with pytest.raises(ServerUnavailable, match="gave up after [2-9]"):
        FederatedClient(f"http://127.0.0.1:{port}", tmp_path, data, token="pfe_x",
                        retry=RetryPolicy(base=0.05, cap=0.2, max_elapsed=1.0))
    assert not (tmp_path / "credentials.json").exists()
