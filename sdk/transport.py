"""HTTP to pfl-server with the retry rules every device needs.

Network errors, 429 and 5xx are retried with capped exponential backoff and jitter; when the
server sends ``Retry-After`` (it also marks a retryable 409 that way) the client waits exactly
that. Any other 4xx raises :class:`ServerRefused` with the server's message on one line, and a
server that does not answer usefully within the budget raises :class:`ServerUnavailable`.

A request that cannot be sent as it is (httpx's ``LocalProtocolError``: an illegal header) is
no network fault: it raises ``ValueError`` at once, without the error's text (it quotes the
headers, so the secret). A secret is checked before any request for what a header can carry.

Every answer is read with a bound, as it streams in: a JSON answer up to ``MAX_JSON_ANSWER``
bytes, a download up to the caller's ``max_bytes``; a server that sends more (or announces more
in ``Content-Length``) gets :class:`AnswerTooLarge`, and the rest is never read. An error
answer's message is read up to ``MAX_ERROR_ANSWER`` bytes and shown as one printable line.
Answers are asked for unencoded (``Accept-Encoding: identity``; pfl-server compresses nothing):
a server that encodes one anyway (a gzip bomb grows ~1000x in one read) gets a ValueError, its
body unread. Every answer must arrive whole, headers and body, within its deadline
(:meth:`ServerConnection.deadline`; every socket operation is cut to it by
:mod:`~pflkit.sdk.answer_deadline`): httpx's timeout bounds each read only, so a server that
trickles its answer is cut off then, as a network failure (retried).
A server URL must be http(s) naming a host, without user:password@ (else refused at once); a
redirect is not followed; a JSON object naming a key twice is refused (protocol.strict_json).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np

from pflkit.sdk.answer_deadline import Deadline, bound_by
from pflkit.sdk.protocol import (
    MAX_RETRY_AFTER_CHARS,
    MAX_WAIT,
    RETRY_AFTER,
    one_line_detail,
    sendable,
    server_url_problem,
    strict_json,
)

log = logging.getLogger(__name__)

_DELAY_SECONDS = re.compile(r"\+?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)  # 10, .5, 1e2
MAX_ELAPSED = 604800.0  # a week: RetryPolicy.max_elapsed's upper end
_RETRYABLE = {429, 500, 502, 503, 504}
MAX_JSON_ANSWER = 16 * 2**20  # a task, a secure-aggregation step's answer: well under 2 MiB
MAX_ERROR_ANSWER = 64 * 2**10  # the body of a refusal: only its message is shown
MAX_DOWNLOAD = 2**30  # a global state: FederatedClient(max_download_bytes=...) changes it
MIN_ANSWER_RATE = 64 * 2**10  # bytes/s (512 kbit/s, slow 3G): what a default deadline allows


class AnswerTooLarge(ValueError):
    """The server's answer is over the bound the device reads (a broken or hostile server)."""


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

    def __post_init__(self) -> None:
        """Refuse a wait a loop cannot keep (NaN never gives up, a negative one cannot sleep)."""
        for name, zero, high in (("base", False, MAX_WAIT), ("cap", False, MAX_WAIT),
                                 ("max_elapsed", True, MAX_ELAPSED)):
            _check_seconds(f"RetryPolicy.{name}", getattr(self, name), high, zero_ok=zero)


class ServerConnection:
    """One connection pool to a server; :meth:`request` retries by :class:`RetryPolicy`.

    The jitter comes from a seeded generator, so a device's waits are reproducible. ``http``
    is the underlying ``httpx.Client``, e.g. for an app's event hooks (logging, metrics).
    """

    def __init__(self, server: str, retry: RetryPolicy, timeout: float,
                 jitter: np.random.Generator, max_download: int = MAX_DOWNLOAD,
                 answer_deadline: float | None = None) -> None:
        if (problem := server_url_problem(server)) is not None:
            raise ValueError(problem)
        for name, value, high in (("timeout", timeout, MAX_WAIT),
                                  ("answer_deadline", answer_deadline, MAX_ELAPSED)):
            if name == "timeout" or value is not None:
                _check_seconds(name, value, high)
        if type(max_download) is not int or not MAX_ERROR_ANSWER <= max_download <= 2**40:
            raise ValueError(f"max_download_bytes must be an integer in [{MAX_ERROR_ANSWER}, "
                             f"2**40], got {max_download!r}")
        self.max_download = max_download  # the largest global state this device downloads
        self.retry = retry
        self.timeout, self.answer_deadline = float(timeout), answer_deadline
        self.http = httpx.Client(base_url=server, timeout=timeout,
                                 headers={"Accept-Encoding": "identity"})
        self._deadline = Deadline()
        bound_by(self.http, self._deadline)
        self._jitter = jitter

    def deadline(self, sent: int, max_bytes: int) -> float:
        """Seconds an answer may take to arrive whole, from its request's start.

        ``answer_deadline`` if set, else ``timeout`` plus the request's ``sent`` bytes and the
        answer's bound at ``MIN_ANSWER_RATE`` (376 s for a JSON answer at the default timeout).
        """
        if self.answer_deadline is not None:
            return float(self.answer_deadline)
        return self.timeout + (sent + max_bytes) / MIN_ANSWER_RATE

    def request(self, method: str, path: str, *, secret: str | None = None,
                private: str | None = None, max_bytes: int = MAX_JSON_ANSWER,
                **kwargs: Any) -> httpx.Response:
        """Send until answered with 2xx; ``secret`` is sent as Bearer credentials.

        The answer's body is read up to ``max_bytes`` (:class:`AnswerTooLarge` beyond). A
        refusal's message shows neither ``secret`` nor ``private`` (e.g. a token in the body).
        """
        headers = dict(kwargs.pop("headers", {}))
        if secret is not None:
            check_secret(secret)
            headers["Authorization"] = f"Bearer {secret}"
        started, attempt = time.monotonic(), 0
        while True:
            wait = None
            try:
                response = self._send(method, path, headers, max_bytes, kwargs)
                problem = f"HTTP {response.status_code}"
                if 200 <= response.status_code < 300:
                    return response
                wait = retry_after(response)
                if response.status_code not in _RETRYABLE and wait is None:
                    # a server may quote the request: not its secrets
                    raise ServerRefused(response.status_code, _detail(response, secret, private))
            except httpx.LocalProtocolError:  # its text can hold the Authorization header
                raise ValueError(f"{method} {path}: the request cannot be sent (an illegal "
                                 "header value)") from None
            except httpx.TransportError as err:
                problem = one_line_detail(f"{type(err).__name__}: {err}")  # the server's bytes
            backoff = min(self.retry.cap, self.retry.base * 2**attempt) * \
                (0.5 + float(self._jitter.random()))
            delay = backoff if wait is None else wait  # the server knows when to come back
            if time.monotonic() - started + delay > self.retry.max_elapsed:
                raise ServerUnavailable(f"{method} {path}: gave up after {attempt + 1} "
                                        f"attempts ({problem})")
            log.info("%s %s failed (%s); retrying in %.2fs", method, path, problem, delay)
            time.sleep(delay)
            attempt += 1

    def _send(self, method: str, path: str, headers: dict[str, str], max_bytes: int,
              kwargs: dict[str, Any]) -> httpx.Response:
        """One request; its answer read as it streams in, never past its bound or deadline.

        Each connect, read and write waits at most httpx's timeout and never past the
        deadline: a server that trickles its headers or its body is cut off at the deadline.
        """
        request = self.http.build_request(method, path, headers=headers, **kwargs)
        deadline = self.deadline(int(request.headers.get("Content-Length", "0")), max_bytes)
        self._deadline.start(deadline)
        try:
            streamed = self.http.send(request, stream=True)
            try:
                body, limit = self._read(streamed, method, path, max_bytes)
            finally:
                streamed.close()
        except httpx.TimeoutException:
            if self._deadline.passed():
                raise httpx.ReadTimeout(f"the answer did not arrive whole within {deadline:g} "
                                        "s (its deadline)", request=request) from None
            raise
        finally:
            self._deadline.start(None)
        # the body is decoded already: its encoding and length headers no longer describe it
        kept = [(k, v) for k, v in streamed.headers.multi_items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(streamed.status_code, headers=kept, content=bytes(body[:limit]),
                              request=request)

    @staticmethod
    def _read(streamed: httpx.Response, method: str, path: str, max_bytes: int
              ) -> tuple[bytes | bytearray, int]:
        """The answer's body up to its bound, and that bound."""
        ok = 200 <= streamed.status_code < 300
        limit = max_bytes if ok else MAX_ERROR_ANSWER  # a refusal: its message's start
        if streamed.headers.get("Content-Encoding", "").strip().lower() not in ("", "identity"):
            if ok:  # only a broken or hostile server sends what was not asked for
                raise ValueError(f"{method} {path}: the server's answer has a Content-Encoding "
                                 "the device did not ask for (it asks for identity); it was "
                                 "not read")
            return b"(an encoded message: not read)", limit
        declared = streamed.headers.get("Content-Length", "")
        if ok and declared.isdigit() and int(declared) > limit:
            raise AnswerTooLarge(f"{method} {path}: the server's answer is over {limit} "
                                 f"bytes (its Content-Length); it was not read")
        body = bytearray()
        for chunk in streamed.iter_bytes():
            body += chunk
            if len(body) > limit and ok:
                raise AnswerTooLarge(f"{method} {path}: the server's answer is over "
                                     f"{limit} bytes; the rest was not read")
            if len(body) > limit:
                break
        return body, limit

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
    """The server's ``Retry-After`` in seconds, in [0, ``MAX_WAIT``]; None: backoff instead.

    Not honoured (as on Android): absent, an HTTP date, a number out of that range, over 64
    characters, or in a form Python reads but the wire does not (``1_0``, ``-0``, ``nan``).
    """
    value = response.headers.get(RETRY_AFTER, "").strip()
    if len(value) > MAX_RETRY_AFTER_CHARS or not _DELAY_SECONDS.fullmatch(value):
        return None
    seconds = float(value)
    return seconds if seconds <= MAX_WAIT else None


def json_answer(response: httpx.Response, what: str,
                problem: Callable[[dict[str, Any]], str | None] | None = None
                ) -> dict[str, Any]:
    """The answer's JSON object, checked by ``problem`` (why it cannot be used, or None).

    Anything else is a one-line ValueError that names ``what`` and echoes none of the answer.
    """
    try:
        body = strict_json(response.content)
    except (ValueError, RecursionError) as err:  # strict_json's own message quotes nothing
        why = f" ({err})" if err.__class__ is ValueError else ""
        raise ValueError(f"{what}: the server's answer is not JSON{why}") from None
    if not isinstance(body, dict):
        raise ValueError(f"{what}: the server's answer is a JSON {type(body).__name__}, not an "
                         "object")
    if problem is not None and (why := problem(body)) is not None:
        raise ValueError(f"{what}: the server's answer cannot be used: {why}")
    return body


def shown_url(url: str) -> str:
    """``url`` without a user name or password, as printed: "user:password@" never shows."""
    split = urlsplit(url)
    return urlunsplit(split._replace(netloc=split.netloc.rpartition("@")[2]))


def _check_seconds(name: str, value: object, high: float, zero_ok: bool = False) -> None:
    """A wait in (0, high] seconds ([0, high] with ``zero_ok``): NaN, negative, bool refused."""
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not (0 <= value if zero_ok else 0 < value) or not value <= high:
        raise ValueError(f"{name} must be in {'[' if zero_ok else '('}0, {high:g}] seconds, "
                         f"got {value!r}")


def _detail(response: httpx.Response, *hidden: str | None) -> str:
    """The refusal's message; each of ``hidden`` masked before the message is cut to length."""
    if response.is_redirect:  # its body is a web server's page: the Location is the message
        return one_line_detail(f"redirect to {response.headers['Location']} not followed: give "
                               "the client the server's final URL", hidden)
    content = response.content
    for secret in filter(None, hidden):
        content = content.replace(secret.encode(), b"<secret>")
    try:
        return one_line_detail(json.loads(content), hidden)
    except (ValueError, RecursionError):
        return one_line_detail(content.decode("utf-8", "replace"), hidden)
