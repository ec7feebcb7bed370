"""Client state at rest: one safetensors file holding the tensors and the JSON metadata.

One file per version means one atomic rename per save, so an app killed mid-save (or the
simulator killed mid-round) keeps its previous state. :class:`DeviceStateStore` is what an app
uses (one client, one folder); :class:`RunClientStore` keeps every client of a simulation run,
one file per (client, round) so that ``--resume`` only sees committed rounds.

A device's state belongs to one run: its id and :func:`config_digest` of the config the server
sent (kept in the device's ``cache.json``). A run recreated or changed under the same id (a new
database, another model) has another config: its state is refused, never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.tensorio import (
    CorruptStateError,
    State,
    atomic_write_bytes,
    read_metadata,
    read_state_file,
    state_from_bytes,
    state_to_bytes,
)

META_KEY = "pflkit.client_meta"


def client_state_to_bytes(state: ClientState) -> bytes:
    """Tensors and metadata in one safetensors payload (with its checksum: it is a file)."""
    return state_to_bytes(state.tensors, {META_KEY: state.meta_json()}, checksum=True)


def client_state_from_bytes(data: bytes, source: str = "client state") -> ClientState:
    """Inverse of :func:`client_state_to_bytes`; corrupt input raises CorruptStateError."""
    return _client_state(state_from_bytes(data, source), read_metadata(data), source)


def load_client_state(path: Path) -> ClientState:
    """A client state file, read in about its size of memory (not twice: bytes, tensors)."""
    tensors, metadata = read_state_file(path)
    return _client_state(tensors, metadata, str(path))


def _client_state(tensors: State, metadata: dict[str, str], source: str) -> ClientState:
    try:
        meta = json.loads(metadata.get(META_KEY, "{}"))
    except (ValueError, RecursionError) as err:  # also nesting too deep, 4300+ digits
        raise CorruptStateError(f"{source}: metadata is not JSON ({str(err)[:80]})") from None
    if not isinstance(meta, dict):  # NaN, a list or a string: methods read it by key
        raise CorruptStateError(f"{source}: metadata is a JSON {type(meta).__name__}, "
                                "not an object")
    return ClientState(tensors, meta)


def config_digest(config: dict[str, Any]) -> str:
    """What identifies a run's config as the server sent it (the same every round of a run)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


class DeviceStateStore:
    """The on-device state folder of one client (survives app restarts)."""

    FILE = "client_state.safetensors"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def load(self) -> ClientState | None:
        """The saved state, or None before the first save (a folder there is refused)."""
        path = self.root / self.FILE
        if not path.exists():
            return None
        return load_client_state(path)

    def save(self, state: ClientState) -> None:
        """Atomically replace the saved state."""
        atomic_write_bytes(self.root / self.FILE, client_state_to_bytes(state))

    def refused(self, run_id: int) -> str:
        """The line that refuses the saved state for run ``run_id`` under another config."""
        return (f"{self.root / self.FILE}: this device's state of run {run_id} was trained "
                f"under another config of that run (run {run_id} was recreated or changed on "
                "the server); the file is kept as it is: move it away to take part in the "
                "run from a fresh state")


_VERSION = re.compile(r"^(\d+)\.r(\d+)\.safetensors$")


class RunClientStore:
    """Every client's state in a simulation run: ``clients/<id>.r<round>.safetensors``.

    A version written for round r counts only once the run has committed round r (its global
    checkpoint exists); :meth:`load` takes the newest version at or before that round.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)  # created by the first save: reading a run writes nothing

    def _versions(self, client_id: int) -> list[int]:
        return sorted(int(m[2]) for p in self.root.glob(f"{client_id}.r*.safetensors")
                      if (m := _VERSION.match(p.name)))

    def path(self, client_id: int, round_index: int) -> Path:
        """File of one version."""
        return self.root / f"{client_id}.r{round_index}.safetensors"

    def load(self, client_id: int, committed_round: int) -> ClientState | None:
        """Newest state written at or before ``committed_round`` (None if never saved)."""
        rounds = [r for r in self._versions(client_id) if r <= committed_round]
        if not rounds:
            return None
        return load_client_state(self.path(client_id, rounds[-1]))

    def save(self, client_id: int, round_index: int, state: ClientState) -> None:
        """Write the version of ``client_id`` produced in ``round_index``."""
        atomic_write_bytes(self.path(client_id, round_index), client_state_to_bytes(state))

    def prune(self, committed_round: int, clients: Iterable[int] | None = None) -> None:
        """Drop versions superseded by a committed one and versions of uncommitted rounds.

        ``clients`` limits the work to the clients saved in the round just committed; None
        scans the whole folder (on resume).
        """
        if clients is None:
            clients = {int(m[1]) for p in self.root.glob("*.safetensors")
                       if (m := _VERSION.match(p.name))}
        for cid in clients:
            rounds = self._versions(cid)
            kept = [r for r in rounds if r <= committed_round]
            for r in rounds:
                if r > committed_round or (kept and r < kept[-1]):
                    self.path(cid, r).unlink(missing_ok=True)
