"""Durable file writes: a crash leaves the old file or the new one, never a torn one.

Kept apart from ``tensorio`` (which needs PyTorch) so processes that only move bytes, such as
the server's HTTP workers, can write blobs without importing it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes, *, locked: bool = False) -> None:
    """Write ``data`` to ``path`` durably: temp file in the same folder, fsync, rename.

    ``locked`` (POSIX): hold an exclusive ``flock`` on the temp file until it is renamed, so
    that ``remove_if_abandoned`` can tell a live writer's temp file from a dead one's.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temp_file(path, locked)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if locked:  # renamed before the close ends the lock
                os.replace(tmp, path)
        if not locked:  # renamed once closed: Windows renames no open file
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _temp_file(path: Path, locked: bool) -> tuple[int, str]:
    """A new temp file next to ``path`` (``.<name>.<random>``), locked if asked."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        if not locked:
            return fd, tmp
        import fcntl  # POSIX only, and only the server's blob store asks for the lock

        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            return fd, tmp
        os.close(fd)  # removed by a sweep between its creation and the lock: take another


def remove_if_abandoned(tmp: Path) -> bool:
    """Delete a temp file of ``atomic_write_bytes(locked=True)`` whose writer died.

    Its writer holds the lock until the rename, and the kernel drops a dead process's locks:
    a temp file whose lock can be taken has no writer left. Returns whether it was deleted.
    """
    import fcntl

    try:
        fd = os.open(tmp, os.O_RDWR)  # NFS emulates flock with write locks: open for writing
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        Path(tmp).unlink()
    except (BlockingIOError, FileNotFoundError):  # a live writer, or renamed meanwhile
        return False
    finally:
        os.close(fd)
    return True
