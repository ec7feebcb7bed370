"""FedRoD zero-shot heads: a personalized head for a class distribution, no training needed."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from pflkit.server.api.deps import CurrentClient, ServiceDep
from pflkit.server.api.globals import BINARY_RESPONSES, SAFETENSORS
from pflkit.server.api.schemas import HeadIn

router = APIRouter(prefix="/heads", tags=["heads"])


@router.post("/fedrod", response_class=Response, responses={"200": BINARY_RESPONSES["200"]})
async def fedrod_head(body: HeadIn, _: CurrentClient, service: ServiceDep) -> Response:
    """Phi = H(a; nu) of the run's newest global state (safetensors, head parameter names)."""
    data = await run_in_threadpool(service.zero_shot_head, body.run_id, body.class_distribution)
    return Response(data, media_type=SAFETENSORS)
