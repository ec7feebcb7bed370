"""Secure aggregation: a sampled device's four steps in a SecAgg round (``secagg_rounds.py``).

POST ``keys`` (two X25519 public keys), GET ``keys`` (its neighbours' keys, once everyone
advertised), POST ``shares`` (an envelope per neighbour), GET ``shares`` (those sealed for it),
PUT ``masked`` (the masked quantized update, 4 bytes a coordinate), GET ``unmask`` (who
survived, who dropped), POST ``unmask`` (its shares of their secrets). A GET whose step has not
closed answers 409 with ``Retry-After``. Refusals change nothing: 403 not sampled, 409 a
different message already sent / the step not begun, 410 the step or round is over (or failed:
the detail says why), 413 too large, 422 a message the protocol refuses (wrong peer, reused
key, malformed share). Sending the same message again answers ``{"duplicate": true}``.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from pflkit.server.api.bodies import read_body, read_json
from pflkit.server.api.deps import CurrentClient, ServiceDep
from pflkit.server.api.params import IdPath
from pflkit.server.errors import Invalid

router = APIRouter(prefix="/runs/{run_id}/rounds/{round_index}/secagg", tags=["secagg"])
Step = Literal["keys", "shares", "unmask"]
_JSON = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object"}}}}}
_BINARY = {"requestBody": {"required": True, "content": {"application/octet-stream": {
    "schema": {"type": "string", "format": "binary"}}}}}


@router.post("/{step}", openapi_extra=_JSON)
async def send(run_id: IdPath, round_index: IdPath, step: Step, request: Request,
               client_id: CurrentClient, service: ServiceDep) -> dict[str, bool]:
    """Send this device's message of ``step`` (JSON; bytes as base64, peers by client id)."""
    body = await read_json(request)  # after the credentials (CurrentClient) passed
    if not isinstance(body, dict):
        raise Invalid(f"the {step} message must be a JSON object")
    duplicate = await run_in_threadpool(service.secagg.receive, client_id, run_id, round_index,
                                        step, body)
    return {"duplicate": duplicate}


@router.put("/masked", openapi_extra=_BINARY)
async def send_masked(run_id: IdPath, round_index: IdPath, request: Request,
                      client_id: CurrentClient, service: ServiceDep) -> dict[str, bool]:
    """Send the masked input: the round's dimension as little-endian uint32, nothing more."""
    limit = await run_in_threadpool(service.secagg.vector_limit, client_id, run_id,
                                    round_index)
    body = await read_body(request, limit, "the round's dimension x 4")
    duplicate = await run_in_threadpool(service.secagg.receive, client_id, run_id, round_index,
                                        "masked", body)
    return {"duplicate": duplicate}


@router.get("/{step}")
def fetch(run_id: IdPath, round_index: IdPath, step: Step, client_id: CurrentClient,
          service: ServiceDep) -> dict[str, Any]:
    """What the server sends this device once ``step`` closed (409 + Retry-After before)."""
    return service.secagg.answer(client_id, run_id, round_index, step)
