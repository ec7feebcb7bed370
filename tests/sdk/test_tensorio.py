"""safetensors at rest: malformed headers are one clear error; stored checksums catch bit flips."""

from __future__ import annotations

import json

import pytest
import torch

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.state_store import client_state_from_bytes, client_state_to_bytes
from pflkit.sdk.tensorio import (  # noqa
    CHECKSUM_KEY,
    CorruptStateError,
    load_state,
    read_metadata,
    save_state,
    state_from_bytes,
    state_to_bytes,
)

STATE = {"body.weight": torch.arange(12.0).reshape(3, 4), "head.bias": torch.ones(3)}


def with_header(header: object) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text


@pytest.mark.parametrize("header", [[], [1, 2], "text", 3, {"__metadata__": [1]},
                                    {"__metadata__": {"rounds_done": 3}}])
def test_a_header_that_is_not_an_object_of_strings_is_a_clear_error(header):
    data = with_header(header)
    with pytest.raises(CorruptStateError, match="header|__metadata__"):
        read_metadata(data)
    with pytest.raises(CorruptStateError, match="^upload: "):
        state_from_bytes(data, "upload")


def test_saved_files_carry_a_checksum_that_round_trips(tmp_path):
    save_state(tmp_path / "g.safetensors", STATE, {"rounds_done": "2"})
    data = (tmp_path / "g.safetensors").read_bytes()
    meta = read_metadata(data)
    assert meta["rounds_done"] == "2" and len(meta[CHECKSUM_KEY]) == 64
    loaded = load_state(tmp_path / "g.safetensors")
    assert all(torch.equal(loaded[k], v) for k, v in STATE.items())
    # the tensor data is the same bytes as without the checksum
    plain = state_to_bytes(STATE, {"rounds_done": "2"})
    assert data.endswith(plain[8 + int.from_bytes(plain[:8], "little"):])


@pytest.mark.parametrize("offset", [-1, -20, -48])
def test_a_flipped_bit_in_the_tensor_data_is_detected(tmp_path, offset):
    path = tmp_path / "g.safetensors"
    save_state(path, STATE)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match=f"^{path}: .*corrupted"):
        load_state(path)


def test_client_state_files_are_checked_too():
    data = bytearray(client_state_to_bytes(ClientState(dict(STATE), {"lambda": 0.3})))
    assert client_state_from_bytes(bytes(data)).meta == {"lambda": 0.3}
    data[-5] ^= 0x80
    with pytest.raises(CorruptStateError, match="corrupted"):
        client_state_from_bytes(bytes(data), "clients/1.r0.safetensors")


def test_payloads_without_a_checksum_still_load():
    data = state_to_bytes(STATE)
    assert CHECKSUM_KEY not in read_metadata(data)
    assert torch.equal(state_from_bytes(data)["head.bias"], STATE["head.bias"])
