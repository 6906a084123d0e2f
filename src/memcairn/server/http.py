"""The plumbing of the /v1 API: a handler runs in a thread behind the key check for its scope, and every error
becomes a JSON answer (``{"error": code, "detail": what to do}``): bad input is a 4xx, never a 500. Each answer
carries ``X-Request-Id`` (the caller's when it sent a sane one), which the audit log records with every write.
``AccessLog`` writes one JSON line per request on ``memcairn.server.access`` (request id, tenant id, route template,
status, milliseconds) and counts it in the server's metrics.
Also the readers of bodies, ids and query parameters, each refusing what PostgreSQL could not store (NUL).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memcairn.core.errors import ConfigError, MemcairnError, NotFoundError, ValidationError, WouldWait
from memcairn.core.models import MAX_ITEM_ID
from memcairn.pgstore import keys
from memcairn.pgstore.audit import Actor
from memcairn.pgstore.db import Pool, reading
from memcairn.pgstore.items import TeamStore
from memcairn.pgstore.waits import no_waiting
from memcairn.search.telemetry import Telemetry
from memcairn.server.metrics import Metrics
from memcairn.wire.fastjson import NonFiniteNumber, loads

log = logging.getLogger("memcairn.server")
MAX_BODY_BYTES = 1 << 20
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# a request's own id: this process's random prefix and its count (a uuid4 a request cost a system call)
_PROCESS = secrets.token_hex(8)
_REQUESTS = itertools.count(1)


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


@dataclass
class ServerState:
    pool: Pool
    team: TeamStore
    secret: bytes
    queued: threading.Event = field(default_factory=threading.Event)  # set after events are queued (wakes consumers)
    # the searches of this process (counts and latencies, no query text; not logged one by one)
    telemetry: Telemetry = field(default_factory=lambda: Telemetry(log_each=False))
    # reads of this process answered on its event loop, and those run again on a request thread (``route``)
    reads: Counter[str] = field(default_factory=Counter)
    metrics: Metrics = field(init=False)  # this process's Prometheus registry (``GET /metrics``)

    def __post_init__(self) -> None:
        self.metrics = Metrics(self.pool)


def _error(status: int, code: str, detail: str, request_id: str) -> JSONResponse:
    headers = {"X-Request-Id": request_id}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="memcairn"'
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


Handler = Callable[[Request, "Call"], Any]


@dataclass(frozen=True)
class Call:
    """What a handler knows about the caller: the key (None on open routes) and the request id."""

    key: keys.KeyInfo | None
    request_id: str
    cur: psycopg.Cursor | None = None  # the request's transaction, acting for the key's tenant (``reads`` routes)

    @property
    def actor(self) -> Actor:
        return Actor(self.key.id if self.key else None, self.request_id)


def route(scope: str | None, handler: Handler, *, reads: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` (run in a thread: psycopg is blocking) behind the key check for ``scope`` (None: open) and
    the translation of errors into JSON answers. With ``reads`` the key is checked in a transaction the handler
    goes on with (``call.cur``, acting for the key's tenant): a read costs one connection and one snapshot, and
    a handler routed so must read through ``call.cur`` alone (a second connection from the pool could wait on
    the one it holds). A read runs first on the event loop itself, where none of its steps may wait
    (``pgstore/waits.py``); one that would wait is run again, from the start, on a thread. A read whose
    connection PostgreSQL ended under it runs once more on another (``db.reading``): on the loop that is the run
    on a thread, on a thread a second run there. Other routes are never run again (a write may have committed)."""

    async def endpoint(request: Request) -> Response:
        request_id = request_id_of(request.headers.get("x-request-id", ""))
        request.state.request_id = request_id  # for the access log
        state: ServerState = request.app.state.server
        try:
            request.state.body = await _body(request) if request.method in ("POST", "PUT", "PATCH") else None

            def checked() -> Any:  # the key check and the handler in one trip to a thread
                if scope is None:
                    return handler(request, Call(None, request_id))
                if not reads:
                    return handler(request, Call(_known(request, _authorize(state, request, scope)), request_id))
                return reading(state.pool, in_transaction)

            def in_transaction(conn: psycopg.Connection) -> Any:
                with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
                    key = _known(request, _authorize_in(cur, state, request, scope))
                    return handler(request, Call(key, request_id, cur))

            if reads:
                try:
                    with no_waiting():
                        result = checked()
                    state.reads["on_loop"] += 1
                except WouldWait:
                    state.reads["in_threads"] += 1
                    result = await run_in_threadpool(checked)
            else:
                result = await run_in_threadpool(checked)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.detail, request_id)
        except keys.Unauthorized as exc:
            return _error(401, "unauthorized", str(exc), request_id)
        except ValidationError as exc:
            return _error(400, "invalid", str(exc), request_id)
        except NotFoundError as exc:
            return _error(404, "not_found", str(exc), request_id)
        except (ConfigError, psycopg.OperationalError) as exc:
            log.warning("database unavailable: %s", exc)
            return _error(503, "database_unavailable", "the database cannot be reached; try again shortly",
                          request_id)
        except (MemcairnError, psycopg.Error):
            log.exception("request %s failed", request_id)
            return _error(500, "internal", f"unexpected error (request {request_id}; see the server log)",
                          request_id)
        if isinstance(result, Response):
            result.headers["X-Request-Id"] = request_id
            return result
        status, payload = result if isinstance(result, tuple) else (200, result)
        return JSONResponse(payload, status_code=status, headers={"X-Request-Id": request_id})

    return endpoint


def request_id_of(given: str) -> str:
    """The caller's ``X-Request-Id`` when it is sane, else one of this process's own."""
    return given if _REQUEST_ID.match(given) else f"{_PROCESS}{next(_REQUESTS):08x}"


def _known(request: Request, key: keys.KeyInfo) -> keys.KeyInfo:
    request.state.tenant_id = key.tenant_id  # for the access log
    return key


def access_logger() -> logging.Logger:
    """``memcairn.server.access``: its lines are JSON alone (no prefix), on stderr with the server's log."""
    logger = logging.getLogger("memcairn.server.access")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


class AccessLog:
    """ASGI middleware: one JSON line per request once its status and headers are sent, with the route's template
    (``/v1/memories/{item_id}``, never the raw path, which may carry names), and the request counted in
    ``ServerState.metrics``. ``ms`` is the time until the answer's head: a stream's whole length is not counted."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state
        self.log = access_logger()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        logged = False

        def done(status: int) -> None:
            nonlocal logged
            if logged:
                return
            logged = True
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            known = scope.get("state", {})
            headers = dict(scope.get("headers") or [])
            request_id = known.get("request_id") or request_id_of(headers.get(b"x-request-id", b"").decode("latin-1"))
            method = scope.get("method", "GET")
            self.state.metrics.observe(route, method, status, seconds)
            self.log.info(json.dumps({"request_id": request_id, "tenant_id": known.get("tenant_id"), "method": method,
                                      "route": route, "status": status, "ms": round(seconds * 1000, 1)}))

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                done(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except BaseException:
            done(500)
            raise


def by_method(endpoints: dict[str, Callable[[Request], Awaitable[Response]]]) -> Callable[[Request],
                                                                                        Awaitable[Response]]:
    """One route for several methods, so a 405 on the path lists all of them in ``Allow``."""

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await endpoints[method](request)

    return endpoint


async def _body(request: Request) -> dict[str, Any]:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, "too_large", f"the body is over {MAX_BODY_BYTES:,} bytes; send a smaller memory")
    try:  # NaN, Infinity, 1e999 refused by name: jsonb cannot hold them (the insert failed with a 500)
        body = loads(raw, nonfinite="refuse") if raw.strip() else {}  # no body: no fields (POST .../rotate)
    except NonFiniteNumber as exc:
        raise ApiError(400, "invalid_json", str(exc)) from None
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested deeper than Python reads
        raise ApiError(400, "invalid_json", "the body is not JSON: send a JSON object such as "
                       '{"project": "api", "title": "...", "text": "..."}') from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    return body


def _authorize(state: ServerState, request: Request, scope: str) -> keys.KeyInfo:
    with state.pool.connection() as conn:
        return _scoped(keys.authenticate(conn, state.secret, _presented(request)), scope)


def _authorize_in(cur: psycopg.Cursor, state: ServerState, request: Request, scope: str) -> keys.KeyInfo:
    return _scoped(keys.authenticate_in(cur, state.secret, _presented(request)), scope)


def _presented(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if header and scheme.lower() != "bearer":
        raise keys.Unauthorized("send the key as Authorization: Bearer <key>")
    return value.strip() or None


def _scoped(key: keys.KeyInfo, scope: str) -> keys.KeyInfo:
    if not key.allows(scope):
        raise ApiError(403, "forbidden", f"this key lacks the {scope} scope (it has {', '.join(key.scopes)}); "
                       f"create one with --scope {scope}")
    return key


# -- helpers for handlers -----------------------------------------------------------------------------------
def text_field(body: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise ApiError(400, "invalid", f"{name} is required")
        return None
    if not isinstance(value, str):
        raise ApiError(400, "invalid", f"{name} must be a string, not {type(value).__name__}")
    if name not in ("title", "text"):  # those two are cleaned by the store's validation (NUL becomes U+FFFD)
        plain(name, value)
    return value


def plain(name: str, value: str) -> str:
    """``value`` unless it holds a NUL character, which PostgreSQL text cannot store (400, not a 500)."""
    if "\x00" in value:
        raise ApiError(400, "invalid", f"{name} contains a NUL character; remove it")
    return value


def holds_nul(value: Any) -> bool:
    """Whether a NUL character is anywhere in a JSON value (PostgreSQL's jsonb cannot store ``\\u0000``)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_nul(v) for v in value)
    return False


def item_id_param(request: Request) -> int:
    raw = request.path_params["item_id"]
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ITEM_ID:
        raise ApiError(404, "not_found", f"no memory {raw!r} (ids are positive whole numbers)")
    return int(raw)


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.strip().isdigit() or not low <= int(raw) <= high:
        raise ApiError(400, "invalid", f"{name} must be a whole number from {low} to {high}")
    return int(raw)


def projects_param(request: Request) -> list[str]:
    names = request.query_params.getlist("project")
    names += [n for raw in request.query_params.getlist("projects") for n in raw.split(",")]
    return [plain("project", n.strip()) for n in names if n.strip()]
