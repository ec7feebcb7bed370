"""Hostile state files: every one is a one-line CorruptStateError naming it, never a trace.

Before: a header naming a tensor twice loaded silently (the last entry won); the metadata of a
checkpoint (``read_metadata``, what resume and pfl-export read) raised RecursionError on deep
nesting and a bare ValueError on a 5000-digit number, and took a lone surrogate escape or a
UTF-16 header the tensor reader refuses; a dimension of 2**63 raised torch's TypeError; a
client state whose metadata nested too deep raised RecursionError (pfl-client: a traceback);
and a loaded state's names came in the Rust HashMap's order, different in every process.
"""

from __future__ import annotations

import json
import os
import random

import pytest
import torch
from safetensors.torch import load as reference_load

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.state_store import META_KEY, DeviceStateStore
from pflkit.sdk.tensorio import (
    CorruptStateError,
    load_state,
    read_file_metadata,
    read_metadata,
    save_state,
    state_from_bytes,
    state_to_bytes,
)


def with_header(text: bytes, data: bytes = b"") -> bytes:
    return len(text).to_bytes(8, "little") + text + data


F32 = b'{"dtype":"F32","shape":[1],"data_offsets":'
HOSTILE = {
    "a name twice": with_header(b'{"a":' + F32 + b'[0,4]},"a":' + F32 + b'[0,4]}}', bytes(4)),
    "nested too deep": with_header(b'{"x":' + b"[" * 10**5 + b"]" * 10**5 + b"}"),
    "a 5000-digit number": with_header(b'{"a":{"dtype":"F32","shape":[' + b"9" * 5000
                                       + b'],"data_offsets":[0,4]}}', bytes(4)),
    "a lone surrogate": with_header(b'{"__metadata__":{"k":"\\ud800"}}'),
    "UTF-16": with_header('{"__metadata__":{"k":"v"}}'.encode("utf-16-le")),
    "not UTF-8": with_header(b'{"__metadata__":{"k":"\xff"}}'),
    "a dimension of 2**63": with_header(json.dumps({"a": {"dtype": "F32", "shape": [2**63, 0],
                                                          "data_offsets": [0, 0]}}).encode()),
    "a big-endian dtype": with_header(b'{"a":{"dtype":">F32","shape":[1],"data_offsets":[0,4]}}',
                                      bytes(4)),
    "overlapping ranges": with_header(b'{"a":' + F32 + b'[0,4]},"b":' + F32 + b'[2,6]}}',
                                      bytes(6)),
    "a header length of 2**63": (2**63).to_bytes(8, "little") + b"{}",
    "trailing bytes": state_to_bytes({"a": torch.ones(2)}) + b"\0",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_file_is_one_clear_error_on_every_read(tmp_path, case):
    path = tmp_path / "global.safetensors"
    path.write_bytes(HOSTILE[case])
    with pytest.raises(CorruptStateError, match=f"^{path}: "):
        load_state(path)
    with pytest.raises(CorruptStateError, match=f"^{path}: "):
        read_file_metadata(path)
    with pytest.raises(CorruptStateError, match="^upload: "):
        state_from_bytes(HOSTILE[case], "upload")
    with pytest.raises(CorruptStateError):
        read_metadata(HOSTILE[case])


@pytest.mark.parametrize("meta", ["[" * 10**5 + "]" * 10**5, "9" * 5000, "[1]"])
def test_a_client_state_with_hostile_metadata_is_one_clear_error(tmp_path, meta):
    (tmp_path / DeviceStateStore.FILE).write_bytes(
        state_to_bytes({"w": torch.ones(2)}, {META_KEY: meta}, checksum=True))
    with pytest.raises(CorruptStateError, match=f"^{tmp_path / DeviceStateStore.FILE}: "
                                                "metadata is (not JSON|a JSON list)"):
        DeviceStateStore(tmp_path).load()


def test_every_truncation_and_header_flip_is_a_corrupt_state_or_loads(tmp_path):
    data = state_to_bytes({"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(2)},
                          {"rounds_done": "3"}, checksum=True)
    path = tmp_path / "g.safetensors"
    for end in range(len(data)):
        path.write_bytes(data[:end])
        with pytest.raises(CorruptStateError):
            load_state(path)
    header_end = 8 + int.from_bytes(data[:8], "little")
    rng = random.Random(17)
    for _ in range(300):
        flipped = bytearray(data)
        flipped[rng.randrange(header_end)] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(flipped))
        try:
            load_state(path)
        except CorruptStateError:
            pass


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_folder_or_fifo_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / DeviceStateStore.FILE
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    with pytest.raises(CorruptStateError, match=f"^{path}: not a regular file"):
        load_state(path)
    with pytest.raises(CorruptStateError, match=f"^{path}: not a regular file"):
        DeviceStateStore(tmp_path).load()  # not a fresh start that fails only when saving


def test_a_symlink_to_a_state_loads_and_a_dangling_one_is_no_state(tmp_path):
    save_state(tmp_path / "real.safetensors", {"w": torch.ones(3)})
    (tmp_path / "link.safetensors").symlink_to(tmp_path / "real.safetensors")
    assert torch.equal(load_state(tmp_path / "link.safetensors")["w"], torch.ones(3))
    (tmp_path / DeviceStateStore.FILE).symlink_to(tmp_path / "gone.safetensors")
    assert DeviceStateStore(tmp_path).load() is None
    with pytest.raises(FileNotFoundError):
        load_state(tmp_path / DeviceStateStore.FILE)


def test_names_come_in_the_files_order_in_every_process():
    names = [f"layer{i:02d}.weight" for i in range(16)]
    data = state_to_bytes({name: torch.ones(1) for name in reversed(names)})
    assert list(state_from_bytes(data)) == names  # the header's (sorted) order


DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.complex64, torch.int64, torch.int32, torch.int16, torch.int8,
          torch.uint64, torch.uint32, torch.uint16, torch.uint8, torch.bool]


def test_every_dtype_and_empty_shape_reads_as_the_safetensors_library_reads_it(tmp_path):
    gen = torch.Generator().manual_seed(17)
    state = {f"t{i}": (torch.randn(3, 5, generator=gen) * 50).to(dtype)
             for i, dtype in enumerate(DTYPES)}
    state |= {"empty": torch.ones(0, 4), "scalar": torch.tensor(2.5), "none": torch.ones(3, 0)}
    save_state(tmp_path / "g.safetensors", state)
    loaded, reference = load_state(tmp_path / "g.safetensors"), reference_load(
        (tmp_path / "g.safetensors").read_bytes())
    assert loaded.keys() == reference.keys() == state.keys()
    for name, tensor in reference.items():
        assert loaded[name].dtype == tensor.dtype and loaded[name].shape == tensor.shape
        assert torch.equal(loaded[name].view(-1).view(torch.uint8),
                           tensor.view(-1).view(torch.uint8))


def test_loaded_tensors_are_independent_and_can_be_saved_again(tmp_path):
    save_state(tmp_path / "g.safetensors", {"a": torch.zeros(4), "b": torch.zeros(4)})
    loaded = load_state(tmp_path / "g.safetensors")
    loaded["a"].add_(1)  # in place, as an optimizer step does
    assert torch.equal(loaded["b"], torch.zeros(4))
    DeviceStateStore(tmp_path).save(ClientState(loaded, {}))
    assert torch.equal(DeviceStateStore(tmp_path).load().tensors["a"], torch.ones(4))
