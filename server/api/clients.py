"""Clients: enrollment (public, with a token), listing and revocation (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response

from pflkit.server.api.bodies import json_body, json_schema
from pflkit.server.api.deps import AdminDep, CurrentClient, ServiceDep, not_throttled, throttled
from pflkit.server.api.params import IdPath
from pflkit.server.api.schemas import ClientPublic, CredentialsPublic, EnrollIn

router = APIRouter(prefix="/clients", tags=["clients"])


@router.post("/enroll", status_code=201, openapi_extra=json_schema(EnrollIn))
def enroll(body: Annotated[EnrollIn, json_body(EnrollIn, after=not_throttled)], request: Request,
           service: ServiceDep) -> CredentialsPublic:
    """Trade a one-time enrollment token for a client id and secret (shown once).

    The token is in the body, so the body is read before it can be checked: a throttled
    address is refused first, and the body is bounded like every JSON body.
    """
    client_id, secret = throttled(request, lambda: service.enrollment.enroll(body.token))
    return CredentialsPublic(client_id=client_id, secret=secret)


@router.get("/me")
def whoami(client_id: CurrentClient) -> dict[str, int]:
    """Return the authenticated client's id (a cheap credentials check for apps)."""
    return {"client_id": client_id}


@router.get("")
def list_clients(service: ServiceDep, _: AdminDep) -> list[ClientPublic]:
    """Every enrolled client."""
    return [ClientPublic(**row) for row in service.enrollment.list_clients()]


@router.post("/{client_id}/revoke", status_code=204)
def revoke_client(client_id: IdPath, service: ServiceDep,
                  _: AdminDep) -> Response:
    """Revoke a client: its secret stops working and it is no longer sampled."""
    service.enrollment.revoke_client(client_id)
    return Response(status_code=204)
