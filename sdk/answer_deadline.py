"""Every socket operation of a request stops at the request's deadline, headers included.

httpx's timeout bounds each read alone: a server that sends its answer, or only its status
line and headers, one byte per read holds a device for as long as it likes (h11 reads up to 16
KiB of headers). A :class:`Deadline` is the monotonic time by which the request in progress
on this thread must be done; :func:`bound_by` gives every connection of an ``httpx.Client``
(direct, or through a proxy from the environment) a network layer that cuts each connect,
read and write to the time left, and raises httpx's timeout once none is left.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpcore
import httpx


class Deadline(threading.local):
    """The monotonic time the current request on this thread must be done by (None: none)."""

    end: float | None = None

    def start(self, seconds: float | None) -> None:
        """The request starting now must be done within ``seconds`` (None: no deadline)."""
        self.end = None if seconds is None else time.monotonic() + seconds

    def passed(self) -> bool:
        """Whether the request in progress is past its deadline (the error says which)."""
        return self.end is not None and time.monotonic() >= self.end

    def left(self, timeout: float | None, late: type[httpcore.TimeoutException]
             ) -> float | None:
        """``timeout`` cut to the time left; ``late`` once there is none."""
        if self.end is None:
            return timeout
        left = self.end - time.monotonic()
        if left <= 0:
            raise late("past the answer's deadline")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._deadline.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._deadline.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(
            ssl_context, server_hostname, self._deadline.left(timeout, httpcore.ConnectTimeout)),
            self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend, deadline: Deadline) -> None:
        self._backend, self._deadline = backend, deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None, socket_options: Any = None
                    ) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_tcp(
            host, port, self._deadline.left(timeout, httpcore.ConnectTimeout), local_address,
            socket_options), self._deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_unix_socket(
            path, self._deadline.left(timeout, httpcore.ConnectTimeout), socket_options),
            self._deadline)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bound_by(client: httpx.Client, deadline: Deadline) -> None:
    """Make every connection ``client`` opens keep ``deadline``.

    httpx offers no setting for httpcore's network backend, so this sets the attribute its
    connection pools create connections with (httpx 0.28, httpcore 1.0; the device's deadline
    tests fail if that changes).
    """
    for transport in (client._transport, *client._mounts.values()):
        if isinstance(transport, httpx.HTTPTransport):
            pool = transport._pool
            pool._network_backend = _Backend(pool._network_backend, deadline)
