"""Global states: safetensors by content hash, immutable, so clients and proxies can cache."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Response
from fastapi.concurrency import run_in_threadpool

from pflkit.server.api.deps import CurrentClient, ServiceDep

router = APIRouter(prefix="/globals", tags=["globals"])
SAFETENSORS = "application/octet-stream"
_BINARY_SCHEMA = {"schema": {"type": "string", "format": "binary"}}
BINARY_RESPONSES = {
    "200": {"content": {SAFETENSORS: _BINARY_SCHEMA}, "description": "safetensors bytes"},
    "304": {"description": "the client's cached copy (If-None-Match) is current"},
}


@router.get("/{digest}", response_class=Response, responses=BINARY_RESPONSES)  # type: ignore[arg-type]
async def download_global(
    digest: Annotated[str, Path(pattern="^[0-9a-f]{64}$")], _: CurrentClient, service: ServiceDep,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """Download the global state with this SHA-256 (ETag = the hash)."""
    etag = f'"{digest}"'
    headers = {"ETag": etag, "Cache-Control": "private, max-age=31536000, immutable"}
    if if_none_match is not None and etag in [t.strip() for t in if_none_match.split(",")]:
        await run_in_threadpool(service.tasks.check_global, digest)
        return Response(status_code=304, headers=headers)
    data = await run_in_threadpool(service.tasks.global_blob, digest)
    return Response(data, media_type=SAFETENSORS, headers=headers)
