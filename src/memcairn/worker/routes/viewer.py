"""The viewer: its page, its static files, its event stream (``/stream``) and the API description."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from memcairn.worker.routes.answers import JSON, error
from memcairn.worker.routes.params import state_of

STATIC_DIR = Path(__file__).parent.parent / "static"
PLACEHOLDER = "<!doctype html><title>memcairn</title><p>memcairn worker is running; the viewer is not installed.</p>\n"


async def stream(request: Request) -> Response:
    state = state_of(request)
    first = ("status", state.status_event())
    return StreamingResponse(
        state.broadcaster.stream(first, heartbeat=request.app.state.heartbeat_seconds),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def openapi(request: Request) -> Response:
    return JSON(request.app.state.openapi)


async def index(request: Request) -> Response:
    page = request.app.state.static_dir / "index.html"
    if page.is_file():
        return FileResponse(page, media_type="text/html")
    return HTMLResponse(PLACEHOLDER)


async def static_missing(scope: Scope, receive: Receive, send: Send) -> None:
    await error(404, "not_found", "the viewer's static files are not installed")(scope, receive, send)
