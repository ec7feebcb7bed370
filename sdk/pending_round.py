"""A trained round the server has not answered yet: the exact upload bytes and the state it made.

Both live in one atomic file (``pending.safetensors`` in the device's state folder), so an app
killed at any point after training re-sends the same bytes instead of training twice; the
client state becomes the device's state only when :meth:`PendingRound.is_over` says the server
is done with the upload. It is tied to what it was trained on (the round's global state and the
run's config): a server restored from a backup, whose run is back at that round or before it
with another history, never gets it (:meth:`PendingRound.superseded`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pflkit.sdk import protocol
from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.algorithms.state_layout import add_prefix, strip_prefix
from pflkit.sdk.state_store import config_digest
from pflkit.sdk.tensorio import (
    CorruptStateError,
    read_metadata,
    state_from_bytes,
    state_to_bytes,
)

log = logging.getLogger(__name__)

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
    global_hash: str | None = None  # the global state it was trained on (None: older files)
    config: str | None = None  # the run config's digest (state_store.config_digest)

    def to_bytes(self) -> bytes:
        """The pending file's content: upload and client state as tensors, the rest as JSON."""
        tensors = {_UPLOAD: torch.frombuffer(bytearray(self.upload), dtype=torch.uint8),
                   **add_prefix(self.client_state.tensors, _STATE_PREFIX)}
        meta = {"run_id": self.run_id, "round": self.round, "num_samples": self.num_samples,
                "metrics": self.metrics, "client_meta": self.client_state.meta,
                "global_hash": self.global_hash, "config": self.config}
        return state_to_bytes(tensors, {_META: json.dumps(meta)}, checksum=True)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "pending round") -> PendingRound:
        """Inverse of :meth:`to_bytes`; anything else is a CorruptStateError naming ``source``."""
        tensors = state_from_bytes(data, source)  # checks the checksum, when the file has one
        try:
            meta = json.loads(read_metadata(data)[_META])
            return cls(meta["run_id"], meta["round"], meta["num_samples"], meta["metrics"],
                       tensors.pop(_UPLOAD).numpy().tobytes(),
                       ClientState(strip_prefix(tensors, _STATE_PREFIX), meta["client_meta"]),
                       meta.get("global_hash"), meta.get("config"))
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

    def weight(self, task: dict[str, Any]) -> int:
        """The upload's ``num_samples``: its rows, capped at the task's ``max_num_samples``.

        Capped when sent, not when trained: a round trained before the server's limit was
        lowered (or under an older server) is still accepted, not refused at every re-send.
        """
        weight = protocol.upload_weight(self.num_samples, task)
        if weight < self.num_samples:
            log.info("round %s: trained on %d rows, which weigh as the server's "
                     "max_num_samples (%d)", self.round, self.num_samples, weight)
        return weight

    def superseded(self, task: dict[str, Any]) -> str | None:
        """Why this round belongs to a history the server no longer has (None: it does not).

        The run's round numbers only grow, so a task of the same run at an earlier round, or
        at this round on another global state, comes from a server restored from a backup:
        uploaded there, this update would be averaged into a round it was not trained for. A
        task of the same run under another config comes from a run recreated under its id.
        """
        current = task.get("round")
        if task.get("run_id") != self.run_id:
            return None
        if self.config is not None and task.get("config") and \
                config_digest(task["config"]) != self.config:  # a run recreated under its id
            return f"run {self.run_id} runs under another config"
        if current is None or current > self.round:
            return None
        if current < self.round:
            return f"run {self.run_id} is back at round {current}"
        if None not in (self.global_hash, task.get("global_hash")) and \
                task["global_hash"] != self.global_hash:
            return f"run {self.run_id} started round {current} again, from another global state"
        return None


def still_due(path: Path, task: dict[str, Any], commit: Callable[[PendingRound], None]
              ) -> PendingRound | None:
    """The pending round at ``path`` that ``task`` still waits for (None: there is none now).

    One the server is done with is handed to ``commit``; one of a history it no longer has is
    deleted with a warning (the device's committed state stays as it was).
    """
    pending = PendingRound.load(path)
    if pending is not None and (stale := pending.superseded(task)) is not None:
        log.warning("round %s: the server's %s (restored from a backup, or recreated?): the "
                    "update trained for it is dropped, the device keeps its state",
                    pending.round, stale)
        path.unlink()
        return None
    if pending is not None and pending.is_over(task):
        commit(pending)
        return None
    return pending
