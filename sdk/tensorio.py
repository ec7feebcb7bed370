"""Named tensors at rest and on the wire: safetensors only, never pickle.

A *state* is ``dict[str, Tensor]``. Files are written atomically (temp file, fsync, rename)
so a crash leaves either the old file or the new one, never a torn one. Loading validates
the bytes and raises :class:`CorruptStateError` with the path instead of a library trace.

Files at rest (checkpoints, client states) carry the sha256 of their tensor data in the
metadata (:data:`CHECKSUM_KEY`), checked on every load: a flipped bit on disk is an error
naming the file, not a model that silently computes something else. Payloads without the key
(older files, uploads) are read as they are.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
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
    header, start = _header(data)
    if len(header.get("__metadata__") or {}) < 2:
        return data
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the data starts 8-byte aligned, as safetensors pads
    return len(text).to_bytes(8, "little") + text + data[start:]


def _header(data: bytes) -> tuple[dict[str, Any], int]:
    """(the parsed JSON header, where the tensor data starts)."""
    if len(data) < 8:
        raise CorruptStateError("payload shorter than a safetensors header")
    size = int.from_bytes(data[:8], "little")
    if size <= 0 or 8 + size > len(data):
        raise CorruptStateError("safetensors header length is out of range")
    try:
        header = json.loads(data[8 : 8 + size])
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptStateError(f"safetensors header is not JSON ({err})") from err
    if not isinstance(header, dict):
        raise CorruptStateError(f"safetensors header is a JSON {type(header).__name__}, not "
                                f"an object")
    return header, 8 + size


def _data_digest(data: bytes) -> str:
    return hashlib.sha256(memoryview(data)[_header(data)[1]:]).hexdigest()


def state_from_bytes(data: bytes, source: str = "payload") -> State:
    """Parse safetensors bytes; raise :class:`CorruptStateError` naming ``source`` if invalid.

    A stored checksum must match the tensor data.
    """
    try:
        expected = read_metadata(data).get(CHECKSUM_KEY)
        if expected is not None and expected != _data_digest(data):
            raise CorruptStateError("its tensor data does not match the sha256 stored in its "
                                    "header (the file is corrupted)")
        return dict(st_load(data))
    except CorruptStateError as err:
        raise CorruptStateError(f"{source}: {err}") from err
    except (SafetensorError, ValueError, RuntimeError, OverflowError) as err:
        raise CorruptStateError(f"{source}: not a valid safetensors file ({err})") from err


def read_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` header of safetensors bytes (empty if none)."""
    meta = _header(data)[0].get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CorruptStateError("safetensors __metadata__ is not an object of strings")
    return dict(meta)


def save_state(path: Path, state: State, metadata: dict[str, str] | None = None) -> None:
    """Atomically write a state as a safetensors file (with its checksum)."""
    atomic_write_bytes(Path(path), state_to_bytes(state, metadata, checksum=True))


def load_state(path: Path) -> State:
    """Read a safetensors file written by :func:`save_state`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no state file at {path}")
    return state_from_bytes(path.read_bytes(), source=str(path))


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

