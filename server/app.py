"""The FastAPI application of an HTTP worker: routers under ``/v1`` over the service.

``create_app()`` with no argument reads :class:`ServerSettings` from the environment (and the
config file it names): that is how the uvicorn workers started by ``pfl-server`` build their
app. Workers keep no rounds: the process that started them does (``ticker.py``), and an
accepted upload wakes it, so a worker serves enrollment, tasks, downloads and uploads without
importing PyTorch.
"""

from __future__ import annotations

import ctypes
import logging
import math
import multiprocessing
import os
import signal
import sys
import time
from functools import partial

from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pflkit.sdk.heap import return_large_buffers_to_the_os
from pflkit.sdk.protocol import RETRY_AFTER
from pflkit.server.api import (
    clients,
    globals,
    health,
    queries,
    runs,
    secagg,
    tasks,
    tokens,
    updates,
)
from pflkit.server.api.params import one_value_per_query_name
from pflkit.server.db import driver_message
from pflkit.server.errors import ServiceError
from pflkit.server.http_protocol import BoundedHeadProtocol
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings
from pflkit.server.throttle import FailedAuthThrottle
from pflkit.server.ticker import WAKE_ENV, wake

log = logging.getLogger(__name__)
API_VERSION = "v1"
STORAGE_RETRY_AFTER = 10  # seconds a client waits after a 503: a disk filled, a database away


def storage_problem(err: OSError | OperationalError) -> str:
    """A failure of the server's storage, in one line without paths or SQL (for the client).

    ``No space left on device``, or the database driver's error class: the operator's log
    has the full message.
    """
    if isinstance(err, OSError):
        return f"the server cannot read or write its files ({err.strerror or type(err).__name__})"
    return f"the server's database is unavailable ({type(err.orig).__name__})"


class ServerTiming:
    """Add ``Server-Timing: app;dur=<ms>`` to every HTTP response.

    The time runs from the request reaching the app (headers parsed) to the response starting,
    authentication and thread-pool queueing included. Clients and load tests compare it with
    what they measured to see where time goes.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request through; stamp the response's start."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                value = f"app;dur={1000 * (time.perf_counter() - started):.1f}".encode()
                headers = list(message.get("headers", []))
                for i, (name, old) in enumerate(headers):
                    if name.lower() == b"server-timing":
                        headers[i] = (name, old + b", " + value)
                        break
                else:
                    headers.append((b"server-timing", value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed_send)


def die_with_the_parent() -> bool:
    """In a uvicorn worker process (Linux): get SIGTERM when the supervising process dies.

    The supervisor also keeps the rounds (``ticker.py``); workers left behind by a killed
    supervisor would go on accepting uploads that no round ever closes, and hold the port a
    restarted server needs. Returns False where this does not apply.
    """
    if multiprocessing.parent_process() is None or not sys.platform.startswith("linux"):
        return False
    pr_set_pdeathsig = 1
    if ctypes.CDLL("libc.so.6").prctl(pr_set_pdeathsig, signal.SIGTERM) != 0:
        return False
    if os.getppid() == 1:  # the parent died before the request: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """Build the ASGI app (settings default to environment + config file)."""
    settings = settings or ServerSettings.load()
    return_large_buffers_to_the_os()
    BoundedHeadProtocol.max_head_bytes = settings.max_header_bytes
    BoundedHeadProtocol.head_timeout = settings.header_timeout
    die_with_the_parent()
    service = build_service(settings, partial(wake, os.environ.get(WAKE_ENV)))

    # the description is public where served: off unless the operator asks (api_docs)
    docs = {} if settings.api_docs else {"openapi_url": None, "docs_url": None,
                                         "redoc_url": None}
    app = FastAPI(title="pflkit aggregation server", version=API_VERSION,
                  description="Personalized federated learning: enroll, poll, download the "
                              "global state, upload updates. Tensors travel as safetensors.",
                  dependencies=[Depends(one_value_per_query_name)],
                  # a path with a slash too many is not found: no redirect to the Host header's
                  # name (the client's word), which a proxy or cache may pass on to others
                  redirect_slashes=False, **docs)
    app.state.service = service
    app.state.auth_throttle = FailedAuthThrottle(settings.auth_failure_limit,
                                                 settings.auth_failure_window)
    app.add_middleware(ServerTiming)

    @app.exception_handler(ServiceError)
    async def _refused(request: Request, err: ServiceError) -> JSONResponse:
        headers = {}
        if err.retry_after is not None:  # whole seconds, as HTTP defines the header
            headers[RETRY_AFTER] = str(math.ceil(err.retry_after))
        if err.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        if err.closes_connection:  # uvicorn closes it once the answer is written
            headers["Connection"] = "close"
        return JSONResponse({"detail": err.message}, status_code=err.status, headers=headers)

    @app.exception_handler(OSError)
    @app.exception_handler(OperationalError)
    async def _storage_failed(request: Request, err: OSError | OperationalError) -> JSONResponse:
        # a full disk or an unreachable database is the server's, and passes: 503 with
        # Retry-After (devices retry, nothing was acknowledged), and one log line per request
        # instead of a traceback
        log.error("%s %s: %s: %s", request.method, request.url.path, type(err).__name__,
                  driver_message(err) if isinstance(err, OperationalError) else err)
        return JSONResponse({"detail": f"{storage_problem(err)}; retry later"}, status_code=503,
                            headers={RETRY_AFTER: str(STORAGE_RETRY_AFTER)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes each bad value, and a NaN or 1e400 one cannot be
        # written as JSON (a 500): say where and what is wrong, without the value
        errors = [{k: v for k, v in e.items() if k != "input"} for e in err.errors()]
        return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)

    for module in (health, runs, tokens, clients, tasks, globals, updates, queries, secagg):
        app.include_router(module.router, prefix=f"/{API_VERSION}")
    return app
