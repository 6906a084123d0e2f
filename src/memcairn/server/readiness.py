"""The operations routes of ``memcairn server``: ``/v1/ready`` (may a load balancer send it traffic) and
``/metrics`` (Prometheus). ``/v1/health`` stays the liveness check with the queues' figures."""

from __future__ import annotations

from typing import Any

import psycopg
from starlette.requests import Request
from starlette.responses import Response

from memcairn.core.errors import ConfigError
from memcairn.pgstore.migrations import applied_versions
from memcairn.pgstore.schema import LATEST, MIGRATIONS
from memcairn.server.http import ApiError, Call, ServerState
from memcairn.server.metrics import CONTENT_TYPE, SWITCH_ENV, TOKEN_ENV


def ready(request: Request, call: Call) -> Any:
    """200 when the database answers and holds every migration this code knows (and none newer); else 503 with
    the reason."""
    state: ServerState = request.app.state.server
    try:
        with state.pool.connection() as conn:
            try:
                versions = applied_versions(conn)
            except psycopg.errors.InsufficientPrivilege:
                # a schema from before the application role could read the migrations' record: reachable, and
                # the migrations ran when the server started as the owner; said so rather than refused
                conn.execute("SELECT 1")
                return {"status": "ready", "schema_version": None,
                        "note": "migrations unchecked: this role may not read schema_migrations (GRANT SELECT ON "
                                "schema_migrations to it, or run this version's migrations)"}
    except (ConfigError, psycopg.Error) as exc:
        return 503, {"status": "not_ready", "reason": f"the database cannot be reached: "
                     f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}"}
    missing = sorted({version for version, _, _ in MIGRATIONS} - set(versions))
    newest = max(versions, default=0)
    if newest > LATEST:
        return 503, {"status": "not_ready", "schema_version": newest,
                     "reason": f"the database's schema is version {newest}, newer than this server knows "
                               f"({LATEST}): upgrade memcairn"}
    if missing:
        return 503, {"status": "not_ready", "schema_version": newest,
                     "reason": f"migrations {', '.join(map(str, missing))} are not applied: run the migrations "
                               "(memcairn server migrate, or start the server as the database's owner)"}
    return {"status": "ready", "schema_version": LATEST}


def metrics_page(request: Request, call: Call) -> Any:
    """The Prometheus text of this process, to a loopback peer or one with the metrics token (``metrics.py``)."""
    state: ServerState = request.app.state.server
    if not state.metrics.enabled:
        raise ApiError(404, "not_found", f"metrics are off on this server ({SWITCH_ENV}=off)")
    if not state.metrics.allows(request.client.host if request.client else None, request.headers):
        raise ApiError(403, "forbidden", "metrics are served to loopback peers only; from elsewhere send "
                       f"Authorization: Bearer <the token in the server's {TOKEN_ENV}>")
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
