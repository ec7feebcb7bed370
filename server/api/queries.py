"""Algorithm queries: what an algorithm computes for its clients on the newest global state.

``ServerAggregation.queries`` names them; e.g. FedRoD's zero-shot head for a new client.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from fastapi.concurrency import run_in_threadpool

from pflkit.server.api.bodies import read_json
from pflkit.server.api.deps import CurrentClient, ServiceDep
from pflkit.server.api.globals import BINARY_RESPONSES, SAFETENSORS
from pflkit.server.api.params import IdPath

router = APIRouter(tags=["queries"])
_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object"}}}}}


@router.post("/runs/{run_id}/queries/{name}", response_class=Response,
             responses={"200": BINARY_RESPONSES["200"]}, openapi_extra=_BODY)
async def query(run_id: IdPath,
                name: Annotated[str, Path(pattern="^[a-z0-9_]{1,64}$")],
                request: Request, _: CurrentClient, service: ServiceDep) -> Response:
    """Answer a query of the run's algorithm (JSON body in, safetensors out).

    404: the run's algorithm offers no such query; 422: the algorithm refused the body.
    FedRoD (``head``): ``{"class_distribution": [counts or proportions]}`` -> the head.
    """
    body = await read_json(request)  # after the credentials (CurrentClient) passed
    data = await run_in_threadpool(service.tasks.query, run_id, name, body)
    return Response(data, media_type=SAFETENSORS)
