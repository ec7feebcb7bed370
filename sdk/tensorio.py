"""Named tensors at rest and on the wire: safetensors only, never pickle.

A *state* is ``dict[str, Tensor]``. Files are written atomically (temp file, fsync, rename)
so a crash leaves either the old file or the new one, never a torn one. Loading validates
the bytes and raises :class:`CorruptStateError` with the path instead of a library trace; a
file is read in about its size of memory (each tensor straight from the file), its names in
the header's order (the same in every process).

Files at rest (checkpoints, client states) carry the sha256 of their tensor data in the
metadata (:data:`CHECKSUM_KEY`), checked on every load: a flipped bit on disk is an error
naming the file, not a model that silently computes something else. Payloads without the key
(older files, uploads) are read as they are.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import stat
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch
from safetensors.torch import save as st_save

from pflkit.sdk.atomic import atomic_write_bytes  # re-exported: the one durable write
from pflkit.sdk.protocol import CHECKSUM_KEY  # re-exported: the server checks uploads with it

State = dict[str, torch.Tensor]


class CorruptStateError(ValueError):
    """A safetensors payload could not be parsed (truncated, corrupt, or not safetensors)."""


def state_to_bytes(state: State, metadata: dict[str, str] | None = None, *,
                   checksum: bool = False) -> bytes:
    """Serialize a state to safetensors bytes (contiguous CPU copies), byte-reproducibly.

    ``checksum``: also store the sha256 of the tensor data (:data:`CHECKSUM_KEY`).
    """
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    data = st_save(tensors, metadata=metadata)
    if checksum:
        # The data section does not depend on the metadata, so the second pass only changes
        # the header.
        data = st_save(tensors, metadata={**(metadata or {}), CHECKSUM_KEY: _data_digest(data)})
    return _sorted_metadata(data)


def _sorted_metadata(data: bytes) -> bytes:
    """Rewrite the header with ``__metadata__`` keys sorted.

    safetensors writes the metadata from a Rust HashMap, whose order changes from process to
    process: the same state and metadata gave different bytes (and content hashes) per run.
    The tensor entries and the data are kept as written (ordered by offset).
    """
    layout = _layout(io.BytesIO(data), len(data))
    if len(layout.metadata) < 2:
        return data
    header: dict[str, Any] = {"__metadata__": dict(sorted(layout.metadata.items()))}
    header.update((t.name, {"dtype": t.dtype, "shape": list(t.shape),
                            "data_offsets": [t.start, t.end]}) for t in layout.tensors)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the data starts 8-byte aligned, as safetensors pads
    return len(text).to_bytes(8, "little") + text + data[layout.data_start:]


def _data_digest(data: bytes) -> str:
    start = _layout(io.BytesIO(data), len(data)).data_start
    return hashlib.sha256(memoryview(data)[start:]).hexdigest()


def state_from_bytes(data: bytes, source: str = "payload") -> State:
    """Parse safetensors bytes; raise :class:`CorruptStateError` naming ``source`` if invalid.

    A stored checksum must match the tensor data.
    """
    return _read_state(io.BytesIO(data), len(data), source)[0]


def read_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` header of safetensors bytes (empty if none)."""
    return _layout(io.BytesIO(data), len(data)).metadata


def read_file_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, reading its header only."""
    with _open_state_file(Path(path)) as (stream, size):
        try:
            return _layout(stream, size).metadata
        except CorruptStateError as err:
            raise CorruptStateError(f"{path}: {err}") from None


def save_state(path: Path, state: State, metadata: dict[str, str] | None = None) -> None:
    """Atomically write a state as a safetensors file (with its checksum)."""
    atomic_write_bytes(Path(path), state_to_bytes(state, metadata, checksum=True))


def load_state(path: Path) -> State:
    """Read a safetensors file written by :func:`save_state`."""
    return read_state_file(path)[0]


def read_state_file(path: Path, sha256: str | None = None) -> tuple[State, dict[str, str]]:
    """A safetensors file's tensors and metadata, in about the file's size of memory.

    ``sha256``: the whole file's expected hash, checked on the bytes the tensors were read from.
    """
    with _open_state_file(Path(path)) as (stream, size):
        hashed = _HashingReader(stream)
        state = _read_state(hashed if sha256 else stream, size, str(path))
    if sha256 and hashed.sha256.hexdigest() != sha256:
        raise CorruptStateError(f"{path}: does not hash to {sha256}")
    return state


def undefined_as_null(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float as None.

    A run's metrics use NaN for a number that is undefined (a client with no test rows has no
    own-test accuracy); JSON has no NaN, and strict parsers (browsers, jq, Go, Java) refuse the
    ``NaN`` Python's json writes, so run files say ``null`` instead.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: undefined_as_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [undefined_as_null(v) for v in obj]
    return obj


def json_text(obj: Any, **options: Any) -> str:
    """Strict JSON of ``obj`` (undefined numbers as null): what every run file holds."""
    return json.dumps(undefined_as_null(obj), allow_nan=False, **options)


def save_json(path: Path, obj: Any) -> None:
    """Atomically write strict JSON (sorted keys, indented) next to tensors."""
    atomic_write_bytes(Path(path), (json_text(obj, indent=2, sort_keys=True) + "\n").encode())



# Reading with the checks of the safetensors library (a bounded UTF-8 JSON header, known
# dtypes, sizes that match dtype x shape, ranges that tile the data) and unique names, from a
# stream: each tensor straight into its own memory, the file never held whole beside them.
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own bound
_LIMIT = 2**64  # the format's integers (offsets, dimensions) are 64-bit
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16, "F8_E4M3": torch.float8_e4m3fn,
          "F8_E4M3FNUZ": torch.float8_e4m3fnuz, "F8_E5M2": torch.float8_e5m2,
          "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "C64": torch.complex64, "I64": torch.int64,
          "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U64": torch.uint64,
          "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8, "BOOL": torch.bool}


class _Tensor(NamedTuple):
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # offsets in the data section
    end: int


class _Layout(NamedTuple):
    tensors: list[_Tensor]  # in the header's order
    metadata: dict[str, str]
    data_start: int


class _Readable(Protocol):
    def readinto(self, buffer: memoryview, /) -> int | None: ...


@contextmanager
def _open_state_file(path: Path) -> Iterator[tuple[io.FileIO, int]]:
    """An unbuffered reader of a regular file and its size (a folder or FIFO is refused)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block
    if not stat.S_ISREG((info := os.fstat(fd)).st_mode):
        os.close(fd)
        raise CorruptStateError(f"{path}: not a regular file (a folder, FIFO or device)")
    with open(fd, "rb", buffering=0) as stream:
        yield stream, info.st_size


class _HashingReader:
    """A stream that hashes every byte read from it."""

    def __init__(self, stream: _Readable) -> None:
        self.stream = stream
        self.sha256 = hashlib.sha256()

    def readinto(self, buffer: memoryview) -> int:
        got = self.stream.readinto(buffer) or 0
        self.sha256.update(buffer[:got])
        return got


def _read_exact(stream: _Readable, buffer: memoryview) -> None:
    done = 0
    while done < len(buffer):
        got = stream.readinto(buffer[done:])
        if not got:
            raise CorruptStateError("the file ends before its tensor data does (truncated)")
        done += got


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused if a name repeats (the last one would silently win)."""
    names = Counter(name for name, _ in pairs)
    if len(names) < len(pairs):
        twice = next(name for name, count in names.items() if count > 1)
        raise CorruptStateError(f"safetensors header names {twice[:64]!r} twice")
    return dict(pairs)


def _layout(stream: _Readable, size: int) -> _Layout:
    """Parse and check the header of a safetensors stream of ``size`` bytes."""
    if size < 8:
        raise CorruptStateError("payload shorter than a safetensors header")
    head = bytearray(8)
    _read_exact(stream, memoryview(head))
    length = int.from_bytes(head, "little")
    if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
        raise CorruptStateError("safetensors header length is out of range")
    text = bytearray(length)
    _read_exact(stream, memoryview(text))
    try:  # strictly UTF-8, as the library reads it (json alone also sniffs UTF-16)
        header = json.loads(text.decode(), object_pairs_hook=_unique_names)
        json.dumps(header, ensure_ascii=False).encode()  # a lone surrogate escape: not UTF-8
    except CorruptStateError:
        raise
    except (ValueError, RecursionError) as err:  # ValueError: UTF-8, JSON, 4300+ digits
        raise CorruptStateError(f"safetensors header is not JSON ({str(err)[:80]})") from None
    if not isinstance(header, dict):
        raise CorruptStateError(f"safetensors header is a JSON {type(header).__name__}, not "
                                f"an object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CorruptStateError("safetensors __metadata__ is not an object of strings")
    tensors = [_entry(name, entry) for name, entry in header.items()]
    cursor = 0
    for tensor in sorted(tensors, key=lambda t: (t.start, t.end)):
        if tensor.start != cursor:
            raise CorruptStateError("safetensors tensor data ranges overlap or leave gaps")
        cursor = tensor.end
    if cursor != size - 8 - length:
        raise CorruptStateError(f"the tensor data ends at byte {8 + length + cursor}, the "
                                f"file at {size}")
    return _Layout(tensors, meta, 8 + length)


def _entry(name: str, entry: Any) -> _Tensor:
    """One tensor's header entry, checked: a known dtype, and its bytes fit dtype x shape."""
    try:
        dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPES or not isinstance(shape, list) or not all(
                type(v) is int and 0 <= v < _LIMIT for v in [*shape, start, end]):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise CorruptStateError(f"tensor {name[:64]!r} has a malformed header entry") from None
    if math.prod(max(dim, 1) for dim in shape) >= _LIMIT // 2:  # torch's sizes are signed
        raise CorruptStateError(f"tensor {name[:64]!r}: shape {str(shape)[:64]} is too large")
    if end - start != math.prod(shape) * DTYPES[dtype].itemsize:
        raise CorruptStateError(f"tensor {name[:64]!r}: {end - start} bytes for {dtype} "
                                f"{str(shape)[:64]}")
    return _Tensor(name, dtype, tuple(shape), start, end)


def _read_state(stream: _Readable, size: int, source: str) -> tuple[State, dict[str, str]]:
    """Tensors (in the header's order) and metadata, each tensor read into its own memory."""
    try:
        layout = _layout(stream, size)
        digest, tensors = hashlib.sha256(), {}
        for info in sorted(layout.tensors, key=lambda t: t.start):  # the stream's order
            tensor = torch.empty(info.shape, dtype=DTYPES[info.dtype])
            raw = tensor.reshape(-1).view(torch.uint8).numpy().data
            _read_exact(stream, raw)
            digest.update(raw)
            tensors[info.name] = tensor
        if layout.metadata.get(CHECKSUM_KEY, digest.hexdigest()) != digest.hexdigest():
            raise CorruptStateError("its tensor data does not match the sha256 stored in its "
                                    "header (the file is corrupted)")
    except CorruptStateError as err:
        raise CorruptStateError(f"{source}: {err}") from None
    return {t.name: tensors[t.name] for t in layout.tensors}, layout.metadata
