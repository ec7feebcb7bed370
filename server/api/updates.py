"""Update upload: a safetensors body for (run, round), acknowledged only once durable."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from pflkit.server.api.bodies import read_body
from pflkit.server.api.deps import CurrentClient, ServiceDep
from pflkit.server.api.params import IdPath, plain_integer
from pflkit.server.api.schemas import ReceiptPublic
from pflkit.server.settings import MAX_NUM_SAMPLES

router = APIRouter(tags=["updates"])
_BODY = {"requestBody": {"required": True, "content": {"application/octet-stream": {
    "schema": {"type": "string", "format": "binary"}}}}}


@router.put("/runs/{run_id}/rounds/{round_index}/update", openapi_extra=_BODY)
async def upload_update(
    run_id: IdPath, round_index: IdPath,
    num_samples: Annotated[int, Query(ge=0, le=MAX_NUM_SAMPLES, description="aggregation weight"),
                           plain_integer(0, MAX_NUM_SAMPLES)],
    request: Request, response: Response, client_id: CurrentClient, service: ServiceDep,
) -> ReceiptPublic:
    """Upload an update (safetensors; optional metadata ``metrics``: JSON name -> number).

    Refusals change nothing: 400 corrupt body, 403 not sampled, 409 round not open / a
    different update already sent / run paused, 410 round closed (late), 413 too large,
    422 names/shapes/dtypes differ from the round's schema or values are not finite.
    Sending the same bytes again returns the same receipt with ``duplicate: true``.
    The ``Server-Timing`` header says how long the server spent checking the upload may come
    (``admit``), receiving (``body``) and validating and storing (``accept``) the update, in
    milliseconds.
    """
    started = time.perf_counter()
    admission = await run_in_threadpool(service.uploads.admit, client_id, run_id, round_index,
                                        num_samples)
    admitted = time.perf_counter()
    body = await read_body(request, service.settings.max_upload_bytes, "max_upload_bytes")
    received = time.perf_counter()
    receipt = await run_in_threadpool(service.uploads.store_update, admission, body)
    accepted = time.perf_counter()
    response.headers["Server-Timing"] = (f"admit;dur={1000 * (admitted - started):.1f}, "
                                         f"body;dur={1000 * (received - admitted):.1f}, "
                                         f"accept;dur={1000 * (accepted - received):.1f}")
    return ReceiptPublic(run_id=receipt.run_id, round=receipt.round, sha256=receipt.sha256,
                         duplicate=receipt.duplicate)
