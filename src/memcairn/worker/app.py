"""The worker's HTTP API (Starlette): one process owns the store, the mirror and the model; every door
(hooks, MCP, viewer, CLI) talks to it over loopback.

This module puts it together: the routes table (``worker/routes/``), the guards (``worker/security.py``), the
error handlers and the lifespan, which starts ``WorkerState`` (``worker/state.py``) on a thread and drains it
on the way out.

- **Errors** are JSON ``{"error", "detail"}`` (``worker/routes/answers.py``); 404 for an unknown route, 413 for
  a large body.
- **Blocking work** (SQLite, embedding) runs in the thread pool; the event loop only routes.
- **Shutdown** drains: on the signal, event streams end and requests arriving afterwards get 503
  ``shutting_down`` (nothing is written by them); store calls in flight finish; then the mirror thread
  stops and the runtime closes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memcairn.mirror.runtime import Runtime
from memcairn.wire.config import Settings, check_bind, load_settings
from memcairn.wire.protocol import CONTEXT_PATH, INIT_PATH, MAX_BODY_BYTES, OBSERVATIONS_PATH, SUMMARIZE_PATH
from memcairn.worker.events import HEARTBEAT_SECONDS, Broadcaster
from memcairn.worker.openapi import build_openapi
from memcairn.worker.routes import context, corrections, health, ingest, items, reads, stale, viewer
from memcairn.worker.routes.answers import error
from memcairn.worker.security import BodyLimitMiddleware, GuardMiddleware
from memcairn.worker.state import RuntimeSource, WorkerState

log = logging.getLogger("memcairn.worker")


def _routes(static: Path) -> list[Route | Mount]:
    return [
        Route("/api/health", health.health),
        Route("/api/readiness", health.readiness),
        Route("/api/stats", health.stats),
        Route("/api/projects", reads.projects),
        Route("/api/search", reads.search),
        Route("/api/timeline", reads.timeline),
        Route(stale.PATH, stale.stale),
        Route("/api/observations/batch", items.observations_batch, methods=["POST"]),
        Route(CONTEXT_PATH, context.context_inject, methods=["GET", "POST"]),
        Route("/api/memory/save", items.save_memory, methods=["POST"]),
        Route(INIT_PATH, ingest.ingest_route(INIT_PATH), methods=["POST"]),
        Route(OBSERVATIONS_PATH, ingest.ingest_route(OBSERVATIONS_PATH), methods=["POST"]),
        Route(SUMMARIZE_PATH, ingest.ingest_route(SUMMARIZE_PATH), methods=["POST"]),
        *(Route(f"/api/{kind}/{{id:int}}", items.item_route, methods=["GET", "DELETE"]) for kind in items.KIND_ROUTES),
        Route("/api/memory/team/{id:int}", items.team_item, methods=["GET"]),
        Route(corrections.PATH, corrections.correct_item, methods=["POST"]),
        Route(corrections.TEAM_PATH, corrections.correct_team_item, methods=["POST"]),
        Route("/stream", viewer.stream),
        Route("/openapi.json", viewer.openapi),
        Route("/", viewer.index),
        Mount("/static", StaticFiles(directory=static) if static.is_dir() else viewer.static_missing),
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    detail = exc.detail if exc.status_code != 404 else f"no route {request.url.path}; see /openapi.json"
    return error(exc.status_code, code, str(detail), dict(exc.headers or {}))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error(500, "internal_error", "unexpected error; the details are in the worker log")


def make_app(runtime: RuntimeSource = None, settings: Settings | None = None, *,
             startup_gate: threading.Event | None = None, heartbeat_seconds: float = HEARTBEAT_SECONDS,
             max_body_bytes: int = MAX_BODY_BYTES, stream_queue_size: int = 256,
             static_dir: Path | None = None) -> Starlette:
    """The worker's ASGI app.

    ``runtime`` is an open ``Runtime`` (left open at shutdown: the caller owns it), or a callable
    ``factory(settings) -> Runtime`` (default ``open_runtime``; the app closes what it opened). Startup
    runs on a thread once the lifespan starts; with ``startup_gate`` it first waits for that event to be
    set (tests hold it to observe the not-ready answers).

    Raises:
        ConfigError: the settings bind to a non-loopback host without a token.
    """
    cfg = settings or (runtime.settings if isinstance(runtime, Runtime) else load_settings())
    check_bind(cfg)
    broadcaster = Broadcaster(stream_queue_size)
    state = WorkerState(cfg, runtime, startup_gate=startup_gate, broadcaster=broadcaster)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        broadcaster.bind(asyncio.get_running_loop())
        state.start()
        try:
            yield
        finally:
            state.begin_drain()
            broadcaster.close()
            await run_in_threadpool(state.shutdown)

    static = static_dir or viewer.STATIC_DIR
    routes = _routes(static)
    posts = frozenset(r.path for r in routes if isinstance(r, Route) and "POST" in (r.methods or ()))
    app = Starlette(
        routes=routes,
        middleware=[Middleware(GuardMiddleware, settings=cfg, json_paths=posts),
                    Middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)],
        exception_handlers={HTTPException: _http_error, Exception: _unexpected},
        lifespan=lifespan,
    )
    app.state.worker = state
    app.state.heartbeat_seconds = heartbeat_seconds
    app.state.static_dir = static
    app.state.openapi = build_openapi(cfg)
    return app
