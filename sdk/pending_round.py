"""A trained round the server has not answered yet: the exact upload bytes and the state it made.

Both live in one atomic file (``pending.safetensors`` in the device's state folder), so an app
killed at any point after training re-sends the same bytes instead of training twice; the
client state becomes the device's state only when :meth:`PendingRound.is_over` says the server
is done with the upload.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.algorithms.state_layout import add_prefix, strip_prefix
from pflkit.sdk.tensorio import (
    CorruptStateError,
    read_metadata,
    state_from_bytes,
    state_to_bytes,
)

FILE = "pending.safetensors"
_META = "pflkit.pending"
_UPLOAD = "upload"
_STATE_PREFIX = "state/"


@dataclass(frozen=True)
class PendingRound:
    """One round's result as the device keeps it until the server answers the upload."""

    run_id: int
    round: int
    num_samples: int
    metrics: dict[str, float]
    upload: bytes  # the update as sent: a retry re-sends exactly these bytes
    client_state: ClientState

    def to_bytes(self) -> bytes:
        """The pending file's content: upload and client state as tensors, the rest as JSON."""
        tensors = {_UPLOAD: torch.frombuffer(bytearray(self.upload), dtype=torch.uint8),
                   **add_prefix(self.client_state.tensors, _STATE_PREFIX)}
        meta = {"run_id": self.run_id, "round": self.round, "num_samples": self.num_samples,
                "metrics": self.metrics, "client_meta": self.client_state.meta}
        return state_to_bytes(tensors, {_META: json.dumps(meta)}, checksum=True)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "pending round") -> PendingRound:
        """Inverse of :meth:`to_bytes`; anything else is a CorruptStateError naming ``source``."""
        tensors = state_from_bytes(data, source)  # checks the checksum, when the file has one
        try:
            meta = json.loads(read_metadata(data)[_META])
            return cls(meta["run_id"], meta["round"], meta["num_samples"], meta["metrics"],
                       tensors.pop(_UPLOAD).numpy().tobytes(),
                       ClientState(strip_prefix(tensors, _STATE_PREFIX), meta["client_meta"]))
        except (ValueError, KeyError, TypeError, RecursionError) as err:
            raise CorruptStateError(f"{source}: not a pending round ({type(err).__name__}); "
                                    "move it away to go on without that round") from None

    @classmethod
    def load(cls, path: Path) -> PendingRound | None:
        """The pending round kept at ``path`` (None: there is none)."""
        return cls.from_bytes(path.read_bytes(), str(path)) if path.is_file() else None

    def is_over(self, task: dict[str, Any]) -> bool:
        """Whether the task shows that the server is done with this round's upload.

        Only then is the trained state committed; until then (a pause, a wait while the round
        closes or reopens) the pending bytes are kept and re-sent, so a round is never trained
        twice.
        """
        if task["status"] in ("finished", "stopped") or task.get("run_id") != self.run_id:
            return True
        current = task.get("round")
        return current is not None and (current > self.round or (
            current == self.round and task["status"] == "uploaded"))
