"""Typed dependencies: auth is a parameter (``CurrentClient``, ``AdminDep``), not repeated code."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from pflkit.server.errors import BadRequest, Unauthorized
from pflkit.server.service import FederationService
from pflkit.server.settings import ServerSettings
from pflkit.server.throttle import FailedAuthThrottle

T = TypeVar("T")

_bearer = HTTPBearer(auto_error=False, description="client secret or admin token")


def get_service(request: Request) -> FederationService:
    """Return the process-wide service the app was built with."""
    return request.app.state.service  # type: ignore[no-any-return]


def get_settings(request: Request) -> ServerSettings:
    """Return the server settings."""
    return request.app.state.service.settings  # type: ignore[no-any-return]


def get_session(service: Annotated[FederationService, Depends(get_service)]) -> Iterator[Session]:
    """Yield a session for plain reads (writes go through the service's transactions)."""
    with service.store.sessions() as session:
        yield session


ServiceDep = Annotated[FederationService, Depends(get_service)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _token(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str:
    """The bearer token: of the one ``Authorization`` header, written ``Bearer <token>``.

    Two headers are refused (400), not one picked: a proxy that checks or logs the first one
    would let the server act on another.
    """
    sent = request.headers.getlist("authorization")
    if len(sent) > 1:
        raise BadRequest(f"the request has {len(sent)} Authorization headers; send one")
    if credentials is None or not credentials.credentials:
        raise Unauthorized("the Authorization header must read 'Bearer <token>'" if sent
                           else "missing bearer token")
    return credentials.credentials


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def not_throttled(request: Request) -> None:
    """Refuse (429) an address over its failed-authentication limit (see ``throttle.py``)."""
    throttle: FailedAuthThrottle = request.app.state.auth_throttle
    throttle.check(_address(request))


def throttled(request: Request, check: Callable[[], T]) -> T:
    """Run a credentials check, counting its failure against the caller's address.

    An address over the failure limit gets 429 before the check runs.
    """
    not_throttled(request)
    try:
        return check()
    except Unauthorized:
        throttle: FailedAuthThrottle = request.app.state.auth_throttle
        throttle.failed(_address(request))
        raise


def current_client(request: Request, service: ServiceDep, credentials: Bearer) -> int:
    """Return the id of the enrolled, unrevoked client whose secret is the bearer token."""
    return throttled(request, lambda: service.enrollment.authenticate(_token(request, credentials)))


def require_admin(request: Request, settings: SettingsDep, credentials: Bearer) -> None:
    """Refuse unless the bearer token is the admin token (constant-time comparison)."""
    def check() -> None:
        token = _token(request, credentials).encode()
        if not hmac.compare_digest(token, settings.admin_token.get_secret_value().encode()):
            raise Unauthorized("not the admin token")

    throttled(request, check)


def enrollment_token(request: Request, service: ServiceDep, credentials: Bearer) -> None:
    """Refuse unless the bearer token is an enrollment token that could enroll now (unspent)."""
    throttled(request, lambda: service.enrollment.check_token(_token(request, credentials)))


CurrentClient = Annotated[int, Depends(current_client)]
AdminDep = Annotated[None, Depends(require_admin)]
EnrollmentTokenDep = Annotated[None, Depends(enrollment_token)]
