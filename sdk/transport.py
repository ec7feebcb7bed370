"""HTTP to pfl-server with the retry rules every device needs.

Network errors, 429 and 5xx are retried with capped exponential backoff and jitter; when the
server sends ``Retry-After`` (it also marks a retryable 409 that way) the client waits exactly
that. Any other 4xx raises :class:`ServerRefused` with the server's message on one line, and a
server that does not answer usefully within the budget raises :class:`ServerUnavailable`.

A request that cannot be sent as it is (httpx's ``LocalProtocolError``: an illegal header) is
no network fault: it raises ``ValueError`` at once, without the error's text, which quotes the
headers and so the secret. A secret is checked before any request for what a header can
carry, so a token pasted with a stray carriage return is named as such, not sent.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from pflkit.sdk.protocol import RETRY_AFTER, one_line_detail, sendable

log = logging.getLogger(__name__)

_RETRYABLE = {429, 500, 502, 503, 504}


class ServerRefused(RuntimeError):
    """The server answered with a 4xx status; ``detail`` is its message."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"server refused ({status}): {detail}")
        self.status = status
        self.detail = detail


class ServerUnavailable(RuntimeError):
    """The server did not answer usefully within the retry budget."""


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with jitter: delay_k = min(cap, base 2^k) * U(0.5, 1.5)."""

    base: float = 0.2  # seconds before the first retry
    cap: float = 10.0  # longest single wait
    max_elapsed: float = 600.0  # give up (ServerUnavailable) after this many seconds


class ServerConnection:
    """One connection pool to a server; :meth:`request` retries by :class:`RetryPolicy`.

    The jitter comes from a seeded generator, so a device's waits are reproducible. ``http``
    is the underlying ``httpx.Client``, e.g. for an app's event hooks (logging, metrics).
    """

    def __init__(self, server: str, retry: RetryPolicy, timeout: float,
                 jitter: np.random.Generator) -> None:
        self.retry = retry
        self.http = httpx.Client(base_url=server, timeout=timeout)
        self._jitter = jitter

    def request(self, method: str, path: str, *, secret: str | None = None,
                **kwargs: Any) -> httpx.Response:
        """Send until answered below 400; ``secret`` is sent as Bearer credentials."""
        headers = dict(kwargs.pop("headers", {}))
        if secret is not None:
            check_secret(secret)
            headers["Authorization"] = f"Bearer {secret}"
        started, attempt = time.monotonic(), 0
        while True:
            wait = None
            try:
                response = self.http.request(method, path, headers=headers, **kwargs)
                problem = f"HTTP {response.status_code}"
                if response.status_code < 400:
                    return response
                wait = retry_after(response)
                if response.status_code not in _RETRYABLE and wait is None:
                    raise ServerRefused(response.status_code, _detail(response))
            except httpx.LocalProtocolError:  # its text can hold the Authorization header
                raise ValueError(f"{method} {path}: the request cannot be sent (an illegal "
                                 "header value)") from None
            except httpx.TransportError as err:
                problem = f"{type(err).__name__}: {err}"
            backoff = min(self.retry.cap, self.retry.base * 2**attempt) * \
                (0.5 + float(self._jitter.random()))
            delay = backoff if wait is None else wait  # the server knows when to come back
            if time.monotonic() - started + delay > self.retry.max_elapsed:
                raise ServerUnavailable(f"{method} {path}: gave up after {attempt + 1} "
                                        f"attempts ({problem})")
            log.info("%s %s failed (%s); retrying in %.2fs", method, path, problem, delay)
            time.sleep(delay)
            attempt += 1

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()


def check_secret(secret: str) -> None:
    """Raise ValueError unless a token or secret is printable ASCII without spaces.

    The message never shows the secret: it goes to logs and terminals.
    """
    if not sendable(secret):
        raise ValueError("the token or secret holds a space, a control character (a stray "
                         "newline or carriage return?) or a non-ASCII character; it was not "
                         "sent")


def retry_after(response: httpx.Response) -> float | None:
    """The server's ``Retry-After`` in seconds (None: absent or an HTTP date, not honoured)."""
    value = response.headers.get(RETRY_AFTER, "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _detail(response: httpx.Response) -> str:
    try:
        return one_line_detail(response.json())
    except ValueError:
        return " ".join(response.text.split())
