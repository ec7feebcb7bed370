"""Content-addressed blob store: ``ROOT/ab/abcdef...`` named by the SHA-256 of the bytes.

A blob is written atomically (temp file, fsync, rename, fsync dir) *before* the database row
naming it is committed, so a committed row always points at a complete file; a crash in
between leaves only an unreferenced blob. Identical bytes are stored once. A writer killed
mid-write leaves its temp file (``ab/.<hash>.<random>``, ~0.8 MB for an update), which
``remove_partial_writes`` deletes when a server starts.

Blobs are deleted only by ``pfl-admin prune`` (``retention.py``), and only one untouched since
a cutoff: storing bytes that are already there touches their file (its mtime), under a shared
``flock`` of the file that the deletion takes exclusively. So a blob that a row is about to
name (an upload of bytes some pruned round also had) is either kept or written anew.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pflkit.sdk.atomic import atomic_write_bytes, remove_if_abandoned

_HASH = re.compile(r"^[0-9a-f]{64}$")


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed and make it 0700: only the server user reads it.

    Blobs are clients' updates and the run's models; the database holds secrets' hashes.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():  # mkdir would say "File exists"
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(path))
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def is_hash(text: str) -> bool:
    """Whether ``text`` looks like a blob name (so it can never escape the store)."""
    return bool(_HASH.match(text))


class BlobStore:
    """Immutable blobs on a (possibly shared) file system."""

    def __init__(self, root: Path) -> None:
        self.root = private_dir(root)  # blob files themselves are written 0600 (mkstemp)

    def path(self, digest: str) -> Path:
        """Where a blob lives (``digest`` must be a SHA-256 hex string)."""
        if not is_hash(digest):
            raise ValueError(f"not a blob hash: {digest!r}")
        return self.root / digest[:2] / digest

    def put(self, data: bytes, digest: str | None = None) -> str:
        """Store ``data`` durably; return its hash (stored already: its file is touched).

        ``digest``: the caller's ``sha256(data)``, when it already has it (saves a pass).
        """
        digest = digest or sha256(data)
        path = self.path(digest)
        with _locked(path, fcntl.LOCK_SH) as fd:  # held until the new file is in place
            if fd is not None and _whole(fd, len(data)):
                os.utime(fd)  # stored again now: retention keeps it (see the module doc)
                return digest
            path.parent.mkdir(mode=0o700, exist_ok=True)
            atomic_write_bytes(path, data, locked=True)
        return digest

    def remove_unless_touched(self, digest: str, cutoff: float) -> int | None:
        """Delete a blob not written or stored again since ``cutoff`` (Unix seconds).

        Returns the bytes freed; None when it is absent or newer (then it stays).
        """
        with _locked(self.path(digest), fcntl.LOCK_EX) as fd:
            if fd is None:
                return None
            stat = os.fstat(fd)
            if not stat.st_nlink or stat.st_mtime >= cutoff:
                return None
            self.path(digest).unlink()
            return stat.st_size

    def sizes(self) -> Iterator[tuple[str, int]]:
        """Every stored blob's hash and size (temp files of writers not included)."""
        for folder in self.root.iterdir():
            if len(folder.name) != 2 or not folder.is_dir():
                continue
            for entry in os.scandir(folder):
                if is_hash(entry.name):
                    try:
                        yield entry.name, entry.stat().st_size
                    except FileNotFoundError:  # deleted meanwhile
                        continue

    def remove_partial_writes(self) -> int:
        """Delete the temp files of writers that died; make every folder 0700. Returns how many.

        Safe while other processes write (workers, replicas on a shared store): a live
        writer's temp file is locked until renamed, and only unlocked ones are deleted.
        """
        removed = 0
        for folder in self.root.iterdir():
            if len(folder.name) != 2 or not folder.is_dir():
                continue
            folder.chmod(0o700)
            for entry in os.scandir(folder):
                if entry.name.startswith(".") and is_hash(entry.name[1:65]) \
                        and remove_if_abandoned(Path(entry.path)):
                    removed += 1
        return removed

    def get(self, digest: str) -> bytes:
        """Read a blob (FileNotFoundError if absent)."""
        return self.path(digest).read_bytes()

    def exists(self, digest: str) -> bool:
        """Whether a blob is stored."""
        return is_hash(digest) and self.path(digest).is_file()


@contextmanager
def _locked(path: Path, operation: int) -> Iterator[int | None]:
    """The blob file at ``path`` open and ``flock``-ed for the block (None: there is none).

    Opened for writing where it may be: NFS emulates ``flock`` with write locks.
    """
    try:
        try:
            fd = os.open(path, os.O_RDWR)
        except PermissionError:  # a read-only copy (restored from a backup)
            fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):  # no blob (a file where its folder goes)
        yield None
        return
    try:
        fcntl.flock(fd, operation)
        yield fd
    finally:
        os.close(fd)


def _whole(fd: int, size: int) -> bool:
    """Whether the open blob still has its name and ``size`` bytes (else it is written anew)."""
    stat = os.fstat(fd)
    return stat.st_nlink > 0 and stat.st_size == size
