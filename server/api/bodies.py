"""Request bodies: bounded, read only once the caller's credentials passed, JSON read strictly.

FastAPI reads a route's body parameter before it resolves any dependency, so every JSON body,
of any size, used to be buffered and parsed before its credentials were checked: 256 MiB
without credentials cost a worker ~767 MiB before the 401. A JSON body is read here instead,
in a dependency that runs after the route's credentials check (``json_body(Model, after=...)``)
and stops at ``max_json_bytes`` (413). One rule for every JSON endpoint: a body that is not
JSON (RFC 8259: ``NaN``, a lone surrogate, nesting deeper than 200, a number of more than 4300
digits are not; nor is an object naming a key twice, which proxies and parsers read apart)
gets 400; JSON that does not fit the schema gets 422. Schemas are strict: no
coercion (``"8"``, ``true`` and ``8.0`` are not the integer 8), no unknown fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from pflkit.sdk.protocol import strict_json
from pflkit.server.api.schemas import JsonIn
from pflkit.server.errors import BadRequest, RequestTimeout, TooLarge

M = TypeVar("M", bound=JsonIn)


async def read_body(request: Request, limit: int, setting: str) -> bytes:
    """Read the body, refusing it (413, naming ``setting``) once it exceeds ``limit`` bytes.

    A body that stops arriving for ``body_timeout`` seconds gets 408 and its connection is
    closed: a stalled one would otherwise hold its connection and its bytes so far for ever.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"body of {declared} bytes exceeds the {limit}-byte limit "
                       f"(setting {setting})")
    pause = request.app.state.service.settings.body_timeout
    chunks: list[bytes] = []
    size, stream = 0, request.stream()
    while True:
        try:
            async with asyncio.timeout(pause):
                chunk = await anext(stream, None)
        except TimeoutError:
            raise RequestTimeout(f"no byte of the body came for {pause:g} s (setting "
                                 "body_timeout)", retry_after=1) from None
        if chunk is None:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"body exceeds the {limit}-byte limit (setting {setting})")
        chunks.append(chunk)


async def read_json(request: Request) -> Any:
    """The request's JSON body (at most ``max_json_bytes``), as plain Python values."""
    limit = request.app.state.service.settings.max_json_bytes
    raw = await read_body(request, limit, "max_json_bytes")
    try:
        data = from_json(raw, allow_inf_nan=False)
        strict_json(raw)  # a key named twice: which one counts would be the parser's choice
    except ValueError as err:  # the parser's message names the place, never the value
        raise BadRequest(f"the body is not JSON: {err}") from err
    return data


def json_body(model: type[M], after: Callable[..., object]) -> Any:
    """``Depends()`` giving the JSON body as ``model``, read only once ``after`` passed.

    ``after`` is the route's credentials check (a dependency), so a caller without them is
    refused before any of its body is read. Pass the model to ``json_schema`` too.
    """
    async def read(request: Request, _: object = Depends(after)) -> M:
        data = await read_json(request)
        try:
            return model.model_validate(data)
        except ValidationError as err:  # 422, as FastAPI's own body validation answers
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])}
                 for e in err.errors(include_url=False, include_input=False)]
            ) from err

    return Depends(read)


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The ``openapi_extra`` that documents a ``json_body(model)`` route's request body."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": model.model_json_schema()}}}}
