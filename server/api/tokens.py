"""Enrollment tokens (admin): one-time secrets a device trades for its credentials."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response

from pflkit.server.api.bodies import json_body, json_schema
from pflkit.server.api.deps import AdminDep, ServiceDep, require_admin
from pflkit.server.api.params import IdPath
from pflkit.server.api.schemas import TokenCreateIn, TokenPublic

router = APIRouter(prefix="/enrollment-tokens", tags=["enrollment"])


@router.post("", status_code=201, openapi_extra=json_schema(TokenCreateIn))
def issue_token(body: Annotated[TokenCreateIn, json_body(TokenCreateIn, after=require_admin)],
                service: ServiceDep) -> TokenPublic:
    """Issue a token (optionally reserving a client id); only its hash is stored."""
    token_id, token = service.enrollment.issue_token(body.client_id, body.ttl_seconds)
    return TokenPublic(id=token_id, token=token, client_id=body.client_id)


@router.delete("/{token_id}", status_code=204)
def revoke_token(token_id: IdPath, service: ServiceDep,
                 _: AdminDep) -> Response:
    """Revoke an unused token."""
    service.enrollment.revoke_token(token_id)
    return Response(status_code=204)
