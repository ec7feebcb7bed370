"""Refusals of the service: each names the HTTP status the API answers with.

Transport-free: the service raises them, one exception handler in ``app.py`` turns them into
``{"detail": message}`` responses (with ``Retry-After`` when ``retry_after`` is set).
"""

from __future__ import annotations


class ServiceError(Exception):
    """A refused request; ``status`` is the HTTP status the API answers with."""

    status = 400
    closes_connection = False  # the connection is closed after the answer

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after  # set: the same request may succeed after this wait


class BadRequest(ServiceError):
    """Malformed input (corrupt safetensors, bad metadata)."""


class Unauthorized(ServiceError):
    """Missing or unknown credentials."""

    status = 401


class Forbidden(ServiceError):
    """Known credentials that may not do this (revoked, not sampled)."""

    status = 403


class NotFound(ServiceError):
    """No such run, round, client or blob."""

    status = 404


class RequestTimeout(ServiceError):
    """A request body stopped arriving: its connection is closed after the answer."""

    status = 408
    closes_connection = True


class Conflict(ServiceError):
    """The request contradicts the current state (paused run, different second upload)."""

    status = 409


class Gone(ServiceError):
    """Too late: the round (or run) has closed."""

    status = 410


class TooLarge(ServiceError):
    """The body exceeds the upload limit."""

    status = 413


class TooManyRequests(ServiceError):
    """Refused to slow down a client (failed authentications from its address)."""

    status = 429


class Invalid(ServiceError):
    """Well-formed but does not fit the round (names, shapes, dtypes, NaN/Inf)."""

    status = 422
