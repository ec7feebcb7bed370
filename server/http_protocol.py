"""uvicorn's HTTP protocol with bounds on the request head (request line and headers): size, time.

httptools accumulates a header of any length before the app sees it: one 64 MiB
``Authorization`` header cost the worker +128 MiB of RSS. This protocol answers
``431 Request Header Fields Too Large`` instead of calling the app once a request's head
exceeds ``max_head_bytes``: counted over the parsed URL and headers (many headers in one read)
and over the reads of a head that is still incomplete (one endless header), so at most one read
(<= 256 KiB) beyond the limit is ever buffered. Body bytes are not counted: the upload route
bounds those itself. After the refusal it reads and drops what the client still sends for a
moment before closing (a lingering close): closing with unread input would reset the
connection, and the client might never read the 431.

uvicorn times out only idle connections between requests (keep-alive): a connection that sends
nothing, or a head that never completes, stayed open for ever (3 half-open sockets were still
open after 217 s), each holding a file descriptor and the parser's buffer. Here every head must
be complete within ``header_timeout`` seconds of the connection's opening (for the first
request) or of its first byte (for the next ones on a kept-alive connection); otherwise the
connection is closed, with ``408 Request Timeout`` first if some of the head had come.
A request httptools cannot parse (a ``Content-Length`` of ``+2``, an unknown method) gets
uvicorn's 400 as JSON ``{"detail": ...}``, like every other error, not uvicorn's plain text.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

LINGER_SECONDS = 2.0  # how long a refused connection's further input is read and dropped
LINGER_BYTES = 8 * 2**20  # ... at most
_REFUSAL = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n")
_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n")
_UNPARSABLE = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\nconnection: close\r\n\r\n")


class BoundedHeadProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that refuses request heads over ``max_head_bytes`` or ``head_timeout``."""

    max_head_bytes = 16 * 1024  # each worker's create_app sets both from ServerSettings
    head_timeout = 30.0  # seconds

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start counting the first request's head."""
        super().connection_made(transport)
        self._in_head, self._read_bytes, self._parsed_bytes = True, 0, 0
        self._dropped: int | None = None  # bytes dropped since the refusal
        self._head_timer: asyncio.TimerHandle | None = None
        self._time_the_head()

    def on_message_begin(self) -> None:
        """A new request: its head is counted from here."""
        super().on_message_begin()
        self._in_head, self._read_bytes, self._parsed_bytes = True, 0, 0
        if self._head_timer is None:  # the first request's runs from the connection's opening
            self._time_the_head()

    def on_url(self, url: bytes) -> None:
        """Count the request target."""
        self._parsed_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count one header."""
        self._parsed_bytes += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """Hand the request to the app, unless its head was too long."""
        self._in_head = False
        self._stop_head_timer()
        if self._parsed_bytes > self.max_head_bytes:
            self._refuse()
        elif self._dropped is None:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        """Drop the body of a refused request."""
        if self._dropped is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        """Nothing to complete for a refused request."""
        if self._dropped is None:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        """Parse (or drop, once refused); refuse an incomplete head that is already too long."""
        if self._dropped is not None:
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                self.transport.close()
            return
        super().data_received(data)
        if self._in_head and self._dropped is None and not self.transport.is_closing():
            self._read_bytes += len(data)
            if self._read_bytes > self.max_head_bytes:
                self._refuse()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the head's timer with the connection."""
        self._stop_head_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Answer a request that is not HTTP (uvicorn's text) as the API answers: JSON."""
        detail = json.dumps({"detail": f"{msg.rstrip('.')}: a malformed request line, header "
                                       "or chunked body"}).encode()
        self.transport.write(_UNPARSABLE % len(detail) + detail)
        self.transport.close()

    def _time_the_head(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._dropped is not None or not self._in_head:
            return
        if self._read_bytes or self._parsed_bytes:  # a head began: say why it ends
            detail = b'{"detail": "request line and headers not complete within %g s"}' \
                % self.head_timeout
            self.transport.write(_TIMEOUT % len(detail) + detail)
        self.transport.close()

    def _refuse(self) -> None:
        self._stop_head_timer()
        detail = b'{"detail": "request line and headers exceed %d bytes"}' % self.max_head_bytes
        self.transport.write(_REFUSAL % len(detail) + detail)
        self._dropped = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
