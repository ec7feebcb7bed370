"""A hostile pfl-server on loopback: real sockets, each answer scripted byte by byte.

Why not ``httpx.MockTransport``: it skips what a device really runs (socket reads, HTTP
framing, gzip decoding, httpx's header limits), and no server library sends these answers.
Each connection gets one answer (``Connection: close``) from the script, in order, else from the
server's handler (a small protocol, e.g. upload_harness.py's pfl-server); the server records
every request and how many bytes of each answer it managed to write. An answer that stalls
waits on ``release``, which only closing the server sets.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import torch
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors

SECRET = "pfc_Zq3secret0123456789"
CHUNK = 2**20
ENDLESS = 2**27  # 128 MiB: over every bound and the kernel's socket buffers (~36 MiB) together
NO_RETRY = RetryPolicy(base=0.01, cap=0.02, max_elapsed=0.0)  # retried never: one attempt


@dataclass
class Served:
    """One request as the server read it, and what became of its answer."""

    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    written: int = 0  # bytes of the answer the device's socket accepted
    done: threading.Event = field(default_factory=threading.Event)  # written or hung up on


class Wire:
    """The connection an answer writes to: counts what got through, knows ``release``."""

    def __init__(self, conn: socket.socket, served: Served, release: threading.Event) -> None:
        self.conn, self.served, self.release = conn, served, release

    def write(self, data: bytes) -> None:
        """Send all of ``data`` (OSError once the device hung up)."""
        view = memoryview(data)
        while view:
            sent = self.conn.send(view)
            self.served.written += sent
            view = view[sent:]


Answer = Callable[[Wire], None]
Handler = Callable[[Served], Answer]  # answers a request the script has no answer for


def head(status: int, headers: Iterable[tuple[str, str]] = ()) -> bytes:
    """A status line and headers as sent, lying or not."""
    lines = [f"HTTP/1.1 {status} X", "Connection: close", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def raw(data: bytes) -> Answer:
    """Exactly these bytes, then the connection closes."""
    return lambda wire: wire.write(data)


def answer(status: int, body: bytes = b"", headers: Iterable[tuple[str, str]] = ()) -> Answer:
    """A well-framed answer (its true Content-Length)."""
    return raw(head(status, [("Content-Length", str(len(body))), *headers]) + body)


def json_answer(status: int, value: object) -> Answer:
    """A JSON answer."""
    return answer(status, json.dumps(value).encode(), [("Content-Type", "application/json")])


def chunked(status: int, piece: bytes, count: int) -> Answer:
    """A chunked body: ``piece`` ``count`` times (or until the device hangs up).

    The piece is framed once, here: sending it allocates nothing the device is charged for.
    """
    framed = b"%x\r\n%s\r\n" % (len(piece), piece)

    def send(wire: Wire) -> None:
        wire.write(head(status, [("Transfer-Encoding", "chunked")]))
        for _ in range(count):
            wire.write(framed)
        wire.write(b"0\r\n\r\n")
    return send


def endless(status: int, total: int) -> Answer:
    """``total`` bytes of x, far over any bound: a device that stops reading hangs up first."""
    return chunked(status, b"x" * CHUNK, total // CHUNK)


def stalled(first: bytes) -> Answer:
    """``first``, then nothing more until the server closes (an Event nobody else sets)."""
    def send(wire: Wire) -> None:
        wire.write(first)
        wire.release.wait(GUARD)
    return send


def trickled(data: bytes, pause: float = 0.01) -> Answer:
    """``data`` one byte at a time, ``pause`` seconds apart, until the device hangs up.

    The pause paces the attacker, not the test: each byte comes well within any read timeout.
    """
    def send(wire: Wire) -> None:
        for i in range(len(data)):
            wire.write(data[i:i + 1])
            if wire.release.wait(pause):
                return
    return send


def gzip_bomb(size: int) -> bytes:
    """``size`` zero bytes, gzip-compressed (~1000x smaller), made without holding them."""
    squeeze, zeros = zlib.compressobj(9, zlib.DEFLATED, 31), bytes(CHUNK)
    return b"".join([*(squeeze.compress(zeros) for _ in range(size // CHUNK)), squeeze.flush()])


@dataclass
class Peak:
    """The most memory Python held at once in a :func:`traced` block (bytes)."""

    bytes: int = 0


@contextmanager
def traced() -> Iterator[Peak]:
    """Measure the peak of what the block allocates (tracemalloc: every thread's)."""
    peak = Peak()
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def unscripted(served: Served) -> Answer:
    """The default handler: every request past the script is a 599."""
    return json_answer(599, {"detail": "script exhausted"})


class HostileServer:
    """Answers each connection's request with the next scripted answer, else ``handler``'s."""

    def __init__(self, handler: Handler = unscripted) -> None:
        self.handler = handler
        self.errors: list[Exception] = []  # the handler's: raised by :func:`serving`
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.script: queue.SimpleQueue[Answer] = queue.SimpleQueue()
        self.served: list[Served] = []
        self.release = threading.Event()
        self._conns: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def add(self, *answers: Answer) -> None:
        """Queue answers for the next connections, in order."""
        for scripted in answers:
            self.script.put(scripted)

    def finished(self, index: int = -1) -> Served:
        """The ``index``th request, once its answer is over (written whole, or hung up on)."""
        served = self.served[index]
        assert served.done.wait(GUARD), "the answer never ended"
        return served

    def close(self) -> None:
        """Release stalled answers, cut every connection, wait for every thread."""
        self.release.set()
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self._conns:  # a writer blocked on a device that stopped reading
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed already
                pass
        for thread in self._threads:
            thread.join(GUARD)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            served = read_request(conn.makefile("rb"))  # type: ignore[arg-type]
            if served is None:
                return
            self.served.append(served)
            try:
                scripted = self.handler(served) if self.script.empty() else self.script.get()
            except Exception as err:  # a bug in the test's server: the device sees a 500
                self.errors.append(err)
                scripted = json_answer(500, {"detail": f"handler: {err!r}"})
            try:
                scripted(Wire(conn, served, self.release))
            except OSError:  # the device hung up: what a bounded reader does
                pass
            finally:
                served.done.set()


@contextmanager
def serving(handler: Handler = unscripted) -> Iterator[HostileServer]:
    """A server for the block, closed after it; then a handler's error is raised, not lost."""
    server = HostileServer(handler)
    try:
        yield server
    finally:
        server.close()
        if server.errors:
            raise server.errors[0]


def read_request(stream: BinaryIO) -> Served | None:
    """One request: its line, headers and Content-Length body (None: the device left)."""
    line = stream.readline().decode("latin-1").split()
    if len(line) < 2:
        return None
    headers = {}
    while (text := stream.readline().decode("latin-1").strip()):
        name, _, value = text.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers.get("content-length", 0)))
    return Served(line[0], line[1], headers, body)


def device(tmp_path: Path, server: HostileServer, enrolled: bool = True, client_id: int = 3,
           secret: str = SECRET, data: LabeledTensors | None = None,
           **options: object) -> FederatedClient:
    """A FederatedClient (enrolled unless told) of ``server``, one attempt per request."""
    if enrolled:
        tmp_path.mkdir(parents=True, exist_ok=True)
        (tmp_path / "credentials.json").write_text(json.dumps(
            {"server": server.url, "client_id": client_id, "secret": secret}))
    data = LabeledTensors(torch.rand(4, 1, 8, 8), torch.arange(4)) if data is None else data
    return FederatedClient(server.url, tmp_path, data, retry=options.pop("retry", NO_RETRY),
                           **options)  # type: ignore[arg-type]
