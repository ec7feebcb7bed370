"""Check an uploaded update against the round's schema without PyTorch.

HTTP workers validate every upload but never compute with it, so they read the safetensors
layout themselves (an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the data) and test floating-point data for NaN/Inf with
numpy on the raw bytes: a worker then needs no PyTorch (~0.5 GB resident per process). The
checks are those of the ``safetensors`` library (ranges that tile the data exactly, sizes that
match dtype x shape, no duplicate names) plus the schema; the round closer parses the stored
bytes with ``safetensors`` again (``tensorio.state_from_bytes``), so whatever it would refuse is
refused here: the header strictly as UTF-8 JSON (Python's ``json`` also sniffs UTF-16 and takes
lone surrogates, numbers past 64 bits and a metadata of any type, the Rust parser does not) and
the checksum (``protocol.CHECKSUM_KEY``) when there is one. An update accepted here and
refused at close time would make the closer retry its round forever.

A schema maps each tensor name to ``(shape, dtype)`` with safetensors dtype names ("F32");
:func:`schema_problem` compares one with a description of an update, and the Coordinator
uses it for in-memory tensors too, so both paths refuse the same updates with the same words.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from pflkit.sdk.protocol import CHECKSUM_KEY

MAX_HEADER_BYTES = 16 * 2**20  # far above any model's header; bounds the JSON parse

# torch dtype name -> safetensors dtype name
SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "float8_e5m2": "F8_E5M2", "float8_e4m3fn": "F8_E4M3", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16",
    "uint8": "U8", "bool": "BOOL",
}
ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E5M2": 1, "F8_E4M3": 1, "I64": 8,
              "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
# floating dtypes: the unsigned view and the exponent mask that marks Inf/NaN when all set
# (float8 e4m3 has no Inf; its NaN is the all-ones exponent and mantissa, mask 0x7F)
_NON_FINITE = {"F64": ("<u8", 0x7FF0000000000000), "F32": ("<u4", 0x7F800000),
               "F16": ("<u2", 0x7C00), "BF16": ("<u2", 0x7F80), "F8_E5M2": ("u1", 0x7C),
               "F8_E4M3": ("u1", 0x7F)}

_BLOCK = 8192  # values per non-finite test: temporaries of at most 64 KiB
_LIMIT = 2**64  # the Rust parser's integers (offsets, dimensions, sizes) are 64-bit
SHOWN_NAME = 64  # characters of a sender-chosen name an error message repeats

Schema = Mapping[str, tuple[Sequence[int], str]]


class MalformedUpdate(ValueError):
    """The bytes are not a well-formed safetensors file."""


@dataclass(frozen=True)
class TensorSpan:
    """One tensor of a safetensors file: dtype, shape and where its bytes are."""

    dtype: str
    shape: tuple[int, ...]
    start: int  # offset in the whole file
    end: int


@dataclass(frozen=True)
class SafetensorsLayout:
    """The header of a safetensors file: its tensors and its string metadata."""

    tensors: dict[str, TensorSpan]
    metadata: dict[str, str]


def shown(name: str) -> str:
    """A sender-chosen name as an error repeats it: at most ``SHOWN_NAME`` characters."""
    return name if len(name) <= SHOWN_NAME else f"{name[:SHOWN_NAME]}..."


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused if a name repeats or a string is not UTF-8 (a lone surrogate)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise MalformedUpdate(f"header names '{shown(key)}' twice")
        for text in (key, value) if isinstance(value, str) else (key,):
            try:
                text.encode()
            except UnicodeEncodeError as err:
                raise MalformedUpdate("safetensors header has a lone surrogate escape "
                                      "(not UTF-8)") from err
        out[key] = value
    return out


def read_layout(data: bytes) -> SafetensorsLayout:
    """Parse and check the layout of safetensors bytes (MalformedUpdate if it is not one)."""
    if len(data) < 8:
        raise MalformedUpdate("shorter than a safetensors header")
    size = int.from_bytes(data[:8], "little")
    if size < 2 or size > MAX_HEADER_BYTES or 8 + size > len(data):
        raise MalformedUpdate("safetensors header length is out of range")
    try:  # ValueError: also a number of more than 4300 digits
        header = json.loads(data[8:8 + size].decode(), object_pairs_hook=_unique_keys)
    except MalformedUpdate:
        raise  # from _unique_keys, with its reason
    except (ValueError, RecursionError) as err:
        raise MalformedUpdate(f"safetensors header is not JSON ({type(err).__name__})") from err
    if not isinstance(header, dict):
        raise MalformedUpdate("safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise MalformedUpdate("safetensors __metadata__ must be an object of strings")
    base, tensors = 8 + size, {}
    if CHECKSUM_KEY in metadata and \
            metadata[CHECKSUM_KEY] != hashlib.sha256(memoryview(data)[base:]).hexdigest():
        raise MalformedUpdate(f"tensor data does not match the sha256 in metadata "
                              f"'{CHECKSUM_KEY}'")
    for name, entry in header.items():
        tensors[name] = _span(name, entry, base)
    cursor = base
    for span in sorted(tensors.values(), key=lambda t: (t.start, t.end)):
        if span.start != cursor:
            raise MalformedUpdate("tensor data ranges overlap or leave gaps")
        cursor = span.end
    if cursor != len(data):
        raise MalformedUpdate(f"tensor data ends at byte {cursor}, the file at {len(data)}")
    return SafetensorsLayout(tensors, metadata)


def _span(name: str, entry: Any, base: int) -> TensorSpan:
    try:
        dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in ITEM_BYTES or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise ValueError
        if not all(type(v) is int and 0 <= v < _LIMIT for v in [*shape, start, end]):
            raise ValueError
    except (KeyError, TypeError, ValueError) as err:
        raise MalformedUpdate(f"tensor '{shown(name)}' has a malformed header entry") from err
    count = 1
    for dim in shape:  # as the Rust parser multiplies: overflow at any step, even before a 0
        count *= dim
        if count >= _LIMIT:
            raise MalformedUpdate(f"tensor '{shown(name)}': shape {shown(str(shape))} "
                                  "overflows 64 bits")
    if end - start != count * ITEM_BYTES[dtype]:
        raise MalformedUpdate(f"tensor '{shown(name)}': {end - start} bytes for {dtype} "
                              f"{shown(str(shape))}")
    return TensorSpan(dtype, tuple(shape), base + start, base + end)


def schema_bytes(schema: Schema) -> int:
    """The tensor bytes of an update that follows ``schema`` (its header comes on top)."""
    return sum(prod(shape) * ITEM_BYTES[dtype] for shape, dtype in schema.values())


def schema_problem(schema: Schema, tensors: Mapping[str, tuple[Sequence[int], str]]) -> str | None:
    """How an update's ``name -> (shape, dtype)`` differs from the schema (None: it does not).

    Exactly the schema's names: a partial update would be averaged as if the missing tensors
    were unchanged.
    """
    missing = sorted(set(schema) - set(tensors))
    if missing:
        names = ", ".join(f"'{shown(name)}'" for name in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        return f"update lacks tensor(s) {names}{more}"
    for name, (shape, dtype) in tensors.items():
        if name not in schema:
            return f"unexpected tensor '{shown(name)}'"
        want_shape, want_dtype = schema[name]
        if tuple(shape) != tuple(want_shape) or dtype != want_dtype:
            return (f"tensor '{shown(name)}' is {shown(str(tuple(shape)))} {dtype}, expected "
                    f"{tuple(want_shape)} {want_dtype}")
    return None


def first_non_finite(data: bytes, layout: SafetensorsLayout) -> str | None:
    """The name of the first floating-point tensor holding NaN or Inf (None: all finite).

    Tested in blocks of ``_BLOCK`` values: the temporaries stay small enough for the
    allocator to reuse them instead of mapping fresh pages for each (see
    ``pflkit.sdk.heap.return_large_buffers_to_the_os``).
    """
    view = memoryview(data)
    for name, span in layout.tensors.items():
        if span.dtype in _NON_FINITE and span.end > span.start:
            unsigned, mask = _NON_FINITE[span.dtype]
            bits = np.frombuffer(view[span.start:span.end], dtype=unsigned)
            exponent = bits.dtype.type(mask)
            for start in range(0, bits.size, _BLOCK):
                if bool(((bits[start:start + _BLOCK] & exponent) == exponent).any()):
                    return name
    return None
