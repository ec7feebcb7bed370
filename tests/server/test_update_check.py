"""The upload check accepts nothing the round closer refuses, and its errors stay short.

The upload check (``update_check.read_layout``) parses safetensors with Python's ``json``;
the closer parses the stored bytes again (``tensorio.state_from_bytes``: the Rust parser and
the checksum). An update accepted at upload and refused at close made the closer reopen its
round every tick, for good: each header here is refused by the upload check, or read by both.
"""

from __future__ import annotations

import json

import pytest
import torch

from pflkit.sdk.tensorio import CorruptStateError, state_from_bytes, state_to_bytes
from pflkit.server.update_check import MalformedUpdate, read_layout, schema_problem

ENTRY = '"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'


def raw(header: str | bytes, data: bytes = b"\0" * 4) -> bytes:
    text = header.encode() if isinstance(header, str) else header
    return len(text).to_bytes(8, "little") + text + data


def with_metadata(value: str) -> bytes:
    return raw('{"__metadata__":' + value + "," + ENTRY + "}")


GOOD = state_to_bytes({"w": torch.ones(2)}, {"metrics": "{}"})
HEADERS = {  # the cases that passed the upload check and then failed every close
    "checksum that does not match": state_to_bytes({"w": torch.ones(2)},
                                                   {"pflkit.sha256": "0" * 64}),
    "metadata a list": with_metadata("[]"),
    "metadata 0": with_metadata("0"),
    "metadata null": with_metadata("null"),
    "metadata false": with_metadata("false"),
    "metadata value a number": with_metadata('{"k":1}'),
    "lone surrogate in metadata": with_metadata('{"k":"\\ud800"}'),
    "lone surrogate in a name": raw('{"\\udc00":{"dtype":"F32","shape":[1],'
                                    '"data_offsets":[0,4]}}'),
    "UTF-8 byte order mark": raw(b"\xef\xbb\xbf{" + ENTRY.encode() + b"}"),
    "UTF-16": raw(("{" + ENTRY + "}").encode("utf-16-le")),
    "shape overflowing 64 bits before its 0": raw(
        '{"z":{"dtype":"F32","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]},'
        + ENTRY + "}"),
    "dimension of 2^64": raw('{"z":{"dtype":"F32","shape":[18446744073709551616,0],'
                             '"data_offsets":[0,0]},' + ENTRY + "}"),
    "5000-digit offset": raw('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,'
                             + "9" * 5000 + "]}}"),
    "metadata twice": raw('{"__metadata__":{},"__metadata__":{},' + ENTRY + "}"),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_what_the_closer_refuses_the_upload_check_refuses(case):
    data = HEADERS[case]
    with pytest.raises(CorruptStateError):
        state_from_bytes(data)
    with pytest.raises(MalformedUpdate) as refused:
        read_layout(data)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 200


@pytest.mark.parametrize("data", [
    GOOD, state_to_bytes({"w": torch.ones(2)}, {"metrics": "{}"}, checksum=True),
    with_metadata('{"k":"\\ud83d\\ude00"}'),  # a surrogate pair is one character, fine
    raw("{" + ENTRY + "}\n  "),  # trailing whitespace (safetensors pads with spaces)
], ids=["plain", "matching checksum", "surrogate pair", "trailing whitespace"])
def test_what_the_upload_check_accepts_the_closer_reads(data):
    layout = read_layout(data)
    assert set(layout.tensors) == set(state_from_bytes(data))


def test_sender_chosen_names_are_cut_in_messages():
    """A 422 for an extra tensor named 'x' * 200000 answered with a 200 KB body."""
    name = "x" * 200_000
    problem = schema_problem({"w": ((2,), "F32")}, {"w": ((2,), "F32"), name: ((1,), "F32")})
    assert problem is not None and len(problem) < 100 and problem.endswith("...'")
    twice = raw("{" + json.dumps(name) + ':{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                + json.dumps(name) + ':{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}')
    with pytest.raises(MalformedUpdate, match="twice") as refused:
        read_layout(twice)
    assert len(str(refused.value)) < 100
    long_shape = raw('{"w":{"dtype":"F32","shape":[' + ",".join(["1"] * 50_000) + "],"
                     '"data_offsets":[0,8]}}', b"\0" * 8)
    with pytest.raises(MalformedUpdate, match="bytes for F32") as refused:
        read_layout(long_shape)
    assert len(str(refused.value)) < 200
