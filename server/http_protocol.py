"""uvicorn's HTTP protocol with a bound on the request head (request line and headers).

httptools accumulates a header of any length before the app sees it: one 64 MiB
``Authorization`` header cost the worker +128 MiB of RSS. This protocol answers
``431 Request Header Fields Too Large`` instead of calling the app once a request's head
exceeds ``max_head_bytes``: counted over the parsed URL and headers (many headers in one read)
and over the reads of a head that is still incomplete (one endless header), so at most one read
(<= 256 KiB) beyond the limit is ever buffered. Body bytes are not counted: the upload route
bounds those itself. After the refusal it reads and drops what the client still sends for a
moment before closing (a lingering close): closing with unread input would reset the
connection, and the client might never read the 431.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

LINGER_SECONDS = 2.0  # how long a refused connection's further input is read and dropped
LINGER_BYTES = 8 * 2**20  # ... at most
_REFUSAL = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n")


class BoundedHeadProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that refuses request heads over ``max_head_bytes``."""

    max_head_bytes = 16 * 1024  # each worker's create_app sets it from ServerSettings

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start counting the first request's head."""
        super().connection_made(transport)
        self._in_head, self._read_bytes, self._parsed_bytes = True, 0, 0
        self._dropped: int | None = None  # bytes dropped since the refusal

    def on_message_begin(self) -> None:
        """A new request: its head is counted from here."""
        super().on_message_begin()
        self._in_head, self._read_bytes, self._parsed_bytes = True, 0, 0

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

    def _refuse(self) -> None:
        detail = b'{"detail": "request line and headers exceed %d bytes"}' % self.max_head_bytes
        self.transport.write(_REFUSAL % len(detail) + detail)
        self._dropped = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
