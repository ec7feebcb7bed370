"""The FastAPI application: routers under ``/v1``, the service, and the round ticker.

``create_app()`` with no argument reads :class:`ServerSettings` from the environment (and the
config file it names): that is how ``uvicorn --factory`` workers started by ``pfl-server``
build their app. Each worker runs a ticker that opens the first round, closes rounds at
quorum or deadline (an upload wakes it early) and opens the next; workers coordinate through
the database (see ``service.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import math
import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pflkit.sdk.protocol import RETRY_AFTER
from pflkit.server.api import clients, globals, heads, health, runs, tasks, tokens, updates
from pflkit.server.blobs import BlobStore, private_dir
from pflkit.server.db import init_db, make_engine
from pflkit.server.errors import ServiceError
from pflkit.server.http_protocol import BoundedHeadProtocol
from pflkit.server.service import FederationService
from pflkit.server.settings import ServerSettings
from pflkit.server.throttle import FailedAuthThrottle

log = logging.getLogger(__name__)
API_VERSION = "v1"


def return_large_buffers_to_the_os() -> bool:
    """Make glibc serve and free every buffer of 128 KiB or more with mmap/munmap.

    Upload bodies and global states are ~1 MB each. By default glibc raises its mmap
    threshold after the first such buffer is freed, so later ones come from per-thread heaps
    that stay resident (the worker's RSS kept the high-water mark of the busiest round, ~100 MB
    above idle with 200 concurrent uploads; measured in bench-server). A fixed threshold
    returns each body's pages when the request ends. Returns False off glibc (no change).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_mmap_threshold = -3  # mallopt's M_MMAP_THRESHOLD; setting it disables the dynamic rule
    return bool(libc.mallopt(m_mmap_threshold, 128 * 1024))


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


def build_service(settings: ServerSettings) -> FederationService:
    """Database, blob store and service for these settings (tables created if missing)."""
    private_dir(settings.data_dir)
    sessions = init_db(make_engine(settings.db_url))
    return FederationService(settings, sessions, BlobStore(settings.blobs))


async def _ticker(service: FederationService, wake: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1, thread_name_prefix="rounds") as executor:
        while True:
            try:
                await loop.run_in_executor(executor, service.tick)
            except Exception:
                log.exception("round ticker failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), service.settings.tick_seconds)
            wake.clear()


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """Build the ASGI app (settings default to environment + config file)."""
    settings = settings or ServerSettings.load()
    return_large_buffers_to_the_os()
    BoundedHeadProtocol.max_head_bytes = settings.max_header_bytes
    service = build_service(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        service.on_accept = lambda: loop.call_soon_threadsafe(wake.set)
        task = asyncio.create_task(_ticker(service, wake))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app = FastAPI(title="pflkit aggregation server", version=API_VERSION, lifespan=lifespan,
                  description="Personalized federated learning: enroll, poll, download the "
                              "global state, upload updates. Tensors travel as safetensors.")
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
        return JSONResponse({"detail": err.message}, status_code=err.status, headers=headers)

    for module in (health, runs, tokens, clients, tasks, globals, updates, heads):
        app.include_router(module.router, prefix=f"/{API_VERSION}")
    return app
