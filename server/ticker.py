"""The round keeper's loop, and how HTTP workers wake it when an upload may complete a round.

``pfl-server serve`` runs :class:`Ticker` in a thread of its main process, next to uvicorn's
worker supervision: HTTP workers then never build models or import PyTorch. The ticker calls
:meth:`RoundKeeper.tick` every ``tick_seconds`` (deadlines, the first round) and at once when
a worker signals that accepted uploads reached a round's quorum: a datagram on a unix socket
in a private temporary folder, whose path the workers find in ``$PFL_SERVER_WAKE_SOCKET``.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pflkit.server.rounds import RoundKeeper


log = logging.getLogger(__name__)

WAKE_ENV = "PFL_SERVER_WAKE_SOCKET"
REMIND_SECONDS = 60.0  # a failure that repeats every tick is logged again this often, in a line


def wake(path: str | None) -> None:
    """Tell the ticker listening at ``path`` to tick now (never blocks, never raises)."""
    if not path:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            sock.sendto(b"!", path)
        except OSError:  # ticker gone or its queue full: it ticks on its own soon anyway
            pass


class Ticker(threading.Thread):
    """Ticks the round keeper on a timer and on wake-ups, until stopped."""

    def __init__(self, keeper: RoundKeeper, tick_seconds: float) -> None:
        super().__init__(name="round-ticker", daemon=True)
        self.keeper = keeper
        self.tick_seconds = tick_seconds
        self._folder = Path(tempfile.mkdtemp(prefix="pfl-server-"))  # 0700
        self.socket_path = str(self._folder / "wake.sock")
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(self.socket_path)
        self._stopped = threading.Event()

    def run(self) -> None:
        """Tick, wait for a wake-up or the timer, drain the wake-ups, repeat."""
        failures = _Failures()
        while not self._stopped.is_set():
            try:
                self.keeper.tick()
            except Exception as err:
                failures.failed(err)
            else:
                failures.passed()
            ready, _, _ = select.select([self._socket], [], [], self.tick_seconds)
            if ready:
                self._drain()

    def _drain(self) -> None:
        self._socket.setblocking(False)
        try:
            while True:
                self._socket.recv(64)
        except BlockingIOError:
            pass
        finally:
            self._socket.setblocking(True)

    def stop(self) -> None:
        """Stop after the current tick; remove the socket."""
        self._stopped.set()
        wake(self.socket_path)
        self.join(30)
        self._socket.close()
        Path(self.socket_path).unlink(missing_ok=True)
        os.rmdir(self._folder)


class _Failures:
    """Logs a tick's failure: with its traceback when new, then one line a minute until it passes.

    A close that fails for a lasting reason (the disk full, the database away) fails every
    tick: a traceback each time was about 30 lines a second, filling the disk further.
    """

    def __init__(self) -> None:
        self.text: str | None = None  # the failure going on, as "Type: message"
        self.count = 0
        self.reminded = 0.0  # time.monotonic() of its last log line

    def failed(self, err: Exception) -> None:
        notes = getattr(err, "__notes__", [])  # which round (RoundKeeper.close_round)
        text = " ".join(" ".join([f"{type(err).__name__}: {err}", *notes]).split())
        now = time.monotonic()
        if text != self.text:
            self.text, self.count, self.reminded = text, 0, now
            log.exception("round ticker failed; retrying every tick, this error is logged "
                          "again once a minute while it lasts")
        elif now - self.reminded >= REMIND_SECONDS:
            log.error("round ticker still failing (%d more times): %s", self.count, text)
            self.count, self.reminded = 0, now
        self.count += 1

    def passed(self) -> None:
        if self.text is not None:
            log.warning("round ticker works again after: %s", self.text)
        self.text = None
