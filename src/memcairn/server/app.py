"""The /v1 HTTP API of ``memcairn server`` (Starlette, like the worker): its handlers and routes.

Every route but ``/v1/health`` and ``/v1/openapi.json`` needs ``Authorization: Bearer <key>``: no key, an
unknown, revoked or expired key is 401; a key without the route's scope is 403; a memory of another tenant, or
outside the key's project pin, does not exist for it (404, or absent from lists); a read naming another project
than the key's pin is 403. ``http.py`` holds the
plumbing (key check, JSON errors, request ids, input readers).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from memcairn.capture.single_event import HookEvent
from memcairn.context.build import Rendered, render_shown
from memcairn.context.clock import clock
from memcairn.context.gather import gather
from memcairn.core import tokens
from memcairn.core.clock import now_ms as current_ms
from memcairn.core.errors import ConfigError, NotFoundError, ValidationError
from memcairn.core.lru import Lru
from memcairn.core.models import MAX_ITEM_ID, MemoryItem, NewItem
from memcairn.pgstore import audit, backlog, corrections, item_fields, item_numbers, keys
from memcairn.pgstore.adapter import TenantStore
from memcairn.pgstore.db import holding_key, tenant_transaction
from memcairn.pgstore.items import MAX_LIMIT, Prepared, prepare
from memcairn.pgstore.schema import LATEST
from memcairn.pgstore.waits import before_waiting
from memcairn.search.request import SearchRequest
from memcairn.search.service import MAX_SEMANTIC_QUERY_CHARS
from memcairn.search.team import TenantSearch
from memcairn.server import queue as ingest
from memcairn.server.http import (
    AccessLog,
    ApiError,
    Call,
    ServerState,
    by_method,
    holds_nul,
    int_param,
    item_id_param,
    plain,
    projects_param,
    route,
    text_field,
)
from memcairn.server.openapi import openapi_document
from memcairn.server.queue import IdempotencyConflict
from memcairn.server.readiness import metrics_page, ready
from memcairn.server.told_freshness import ToldFreshness, parse_states
from memcairn.wire.config import Settings

__all__ = ["ServerState", "make_app"]
MAX_QUERY_CHARS = 2_000
DEFAULT_CONTEXT_TOKENS = 2_000
CONTEXT_SETTINGS = Settings(home=Path("."))  # a worker's defaults shape the team's context; nothing is read from home
_RENDERED: Lru[tuple[object, ...], Rendered] = Lru(1_000)  # contexts rendered by this process (a few KB each)
POLL_SECONDS = 1.0
HEARTBEAT_SECONDS = 15.0
KEY_CHECK_SECONDS = 1.0  # an idle stream of a revoked key ends within this (and one poll)


def _check_pin(state: ServerState, call: Call, names: list[str]) -> None:
    """403 when a key pinned to one project names another in a read (in the request's transaction when it has one)."""
    key = call.key
    if key is None or key.project_id is None:
        return
    for name in dict.fromkeys(names):
        ids = (state.team.project_ids_in(call.cur, key.tenant_id, [name]) if call.cur is not None
               else state.team.project_ids(key.tenant_id, [name]))
        if ids != [key.project_id]:
            raise ApiError(403, "forbidden", f"this key is pinned to one project; it may not read {name!r} "
                           "(leave project out, or name the key's own project)")


def _scope_projects(state: ServerState, call: Call, names: list[str]) -> list[int]:
    """The project ids a read may see: the named ones of the key's tenant (all when none named), within its pin."""
    assert call.key is not None
    return state.team.project_ids(call.key.tenant_id, names, pin=call.key.project_id)


# -- handlers -----------------------------------------------------------------------------------------------
def health(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    try:
        with state.pool.connection() as conn:
            lag = backlog.lag(conn)
            queue = ingest.lag(conn)
    except (ConfigError, psycopg.Error):
        return 503, {"status": "unavailable", "database": "unreachable"}
    # embedding: the items of all tenants still waiting for their vector; ingest: the events of all tenants
    # accepted and not yet stored, and those that could not be (counts and ages, no content)
    return {"status": "ok", "database": "ok", "schema_version": LATEST, "embedding": lag.as_dict(),
            "ingest": queue.as_dict()}


def openapi(request: Request, call: Call) -> Any:
    return openapi_document()


def save_memory(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    body = request.state.body
    project = text_field(body, "project")
    if not project:
        if call.key.project_id is None:
            raise ApiError(400, "invalid", "project is required (the name of the repository or team project)")
        project = _pinned_name(state, call)
    kind = text_field(body, "kind") or "manual"
    item = NewItem(project=project, kind=kind, type=text_field(body, "type"), title=text_field(body, "title"),
                   text=text_field(body, "text"), session=text_field(body, "session"),
                   platform_source=text_field(body, "platform"), **_kept_fields(body))
    try:
        saved = state.team.add(call.key.tenant_id, item, pin=call.key.project_id, actor=call.actor)
    except NotFoundError:
        raise ApiError(403, "forbidden", f"this key is pinned to one project; it may not write to {project!r}")\
            from None
    return (201 if saved.created else 200), {"id": saved.number, "created": saved.created}


MAX_EVENTS = 100
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


def post_events(request: Request, call: Call) -> Any:
    """A batch of captured memories (``{"events": [{project, session, platform, kind, type, title, text,
    created_at_epoch}, ...]}``) or raw hook events (``{project, session, platform, event: "tool_use",
    tool_name, tool_input, tool_response, ...}``, ``event: "user_prompt"`` with ``prompt``), validated, scrubbed
    and queued in one transaction (all or none): 202 with each event's place in the batch (null for a tool call
    that is never observed); the server's consumers store them, compressing hook events with the offline extractor
    (forgotten content is refused there, as a capture is).
    With an ``Idempotency-Key`` header a retry gets the first answer back (``Idempotent-Replayed: true``)."""
    state: ServerState = request.app.state.server
    assert call.key is not None
    events = request.state.body.get("events")
    if not isinstance(events, list) or not 1 <= len(events) <= MAX_EVENTS:
        raise ApiError(400, "invalid", f"events must be a list of 1 to {MAX_EVENTS} objects")
    key = request.headers.get("idempotency-key")
    if key is not None and not _IDEMPOTENCY_KEY.match(key):
        raise ApiError(400, "invalid", "Idempotency-Key must be 1 to 200 visible ASCII characters (a UUID is good)")
    items = []
    for n, event in enumerate(events):
        if not isinstance(event, dict):
            raise ApiError(400, "invalid", f"events[{n}] must be an object")
        try:
            items.append(_event_item(state, call, event))
        except ApiError as exc:
            raise ApiError(exc.status, exc.code, f"events[{n}]: {exc.detail}") from None
        epoch = event.get("created_at_epoch")
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool)):
            raise ApiError(400, "invalid", f"events[{n}]: created_at_epoch must be milliseconds since 1970")
    try:
        queued = ingest.enqueue(state.pool, call.key.tenant_id, items, pin=call.key.project_id, actor=call.actor,
                                idempotency_key=key)
    except NotFoundError:
        raise ApiError(403, "forbidden", "this key is pinned to one project; every event must be for it") from None
    except IdempotencyConflict as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except ValidationError as exc:
        raise ApiError(400, "invalid", f"an event is not valid: {exc}") from None
    except RecursionError:  # a tool's input nested deeper than the scrubbing walks
        raise ApiError(400, "invalid", "an event is nested too deeply; flatten its tool input or output") from None
    if not queued.replayed:
        state.queued.set()
    # each event's place in the batch (1, 2, ...), null for a tool call never observed: the queue rows' ids come
    # from one sequence over every tenant, so they are not shown
    places = [None if queue_id is None else n + 1 for n, queue_id in enumerate(queued.ids)]
    return JSONResponse({"queued": places, "replayed": queued.replayed}, status_code=202,
                        headers={"Idempotent-Replayed": "true"} if queued.replayed else {})


def forget_events(request: Request, call: Call) -> Any:
    """Forget memories by their content, each given as the event that captured it (``{"events": [...]}``, as
    ``POST /v1/events`` takes them): what a connected worker sends when it deleted, forgot or replaced a memory
    it had forwarded. Each content is marked forgotten in its project, so a copy still queued is refused, and the
    stored item holding it is deleted. ``replacements`` (as long as ``events``; an event or null each) stores the
    new version of a memory edited where it was captured in the same transaction. ``results`` gives each deleted
    id (null: none was stored) and the replacement's id."""
    state: ServerState = request.app.state.server
    assert call.key is not None
    body = request.state.body
    events, replacements = body.get("events"), body.get("replacements")
    if not isinstance(events, list) or not 1 <= len(events) <= MAX_EVENTS:
        raise ApiError(400, "invalid", f"events must be a list of 1 to {MAX_EVENTS} objects")
    if replacements is None:
        replacements = [None] * len(events)
    if not isinstance(replacements, list) or len(replacements) != len(events):
        raise ApiError(400, "invalid", "replacements must be a list as long as events (an event or null each)")
    ready: list[tuple[Prepared, Prepared | None]] = []
    for n, (event, new) in enumerate(zip(events, replacements, strict=True)):
        ready.append((_content(state, call, event, f"events[{n}]"),
                      _content(state, call, new, f"replacements[{n}]") if new is not None else None))
    results = []
    for old, new in ready:
        try:
            forgotten, replaced_by = state.team.forget_content(call.key.tenant_id, old, pin=call.key.project_id,
                                                               actor=call.actor, replacement=new)
        except NotFoundError:
            raise ApiError(403, "forbidden", "this key is pinned to one project; every event must be for it") from None
        results.append({"id": forgotten, "forgotten": True, "replaced_by": replaced_by})
    return {"results": results}


def _content(state: ServerState, call: Call, event: Any, where: str) -> Prepared:
    """A memory given as an event, validated, scrubbed and hashed as the ingest queue does it."""
    if not isinstance(event, dict):
        raise ApiError(400, "invalid", f"{where} must be an object")
    try:
        item = _event_item(state, call, event)
    except ApiError as exc:
        raise ApiError(exc.status, exc.code, f"{where}: {exc.detail}") from None
    if not isinstance(item, NewItem):
        raise ApiError(400, "invalid", f"{where}: a raw hook event has no stored content; send the memory as it "
                                       "was sent (project, kind, title, text, ...)")
    try:
        return prepare(item)
    except ValidationError as exc:
        raise ApiError(400, "invalid", f"{where} is not valid: {exc}") from None


def _event_item(state: ServerState, call: Call, event: dict[str, Any]) -> NewItem | HookEvent:
    """A memory (``title``, ``text``, ...), or a raw hook event when the object names its ``event``
    (``user_prompt`` with ``prompt``; ``tool_use`` with ``tool_name``, ``tool_input``, ``tool_response``)."""
    project = text_field(event, "project") or (_pinned_name(state, call) if call.key and call.key.project_id
                                                else None)
    if not project:
        raise ApiError(400, "invalid", "project is required")
    kind = text_field(event, "event")
    if kind is not None:
        session = text_field(event, "session")
        if not session or not session.strip():
            raise ApiError(400, "invalid", "a hook event needs its session")
        if holds_nul(event):
            raise ApiError(400, "invalid", "a hook event contains a NUL character; remove it")
        epoch = event.get("created_at_epoch")
        return HookEvent(kind, project, session, text_field(event, "platform") or "unknown", event,
                         epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None)
    return NewItem(project=project, kind=text_field(event, "kind") or "observation", type=text_field(event, "type"),
                   title=text_field(event, "title"), text=text_field(event, "text"),
                   session=text_field(event, "session"), platform_source=text_field(event, "platform"),
                   created_at_epoch=event.get("created_at_epoch"), **_kept_fields(event))


def _kept_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The memory's objects the server keeps with it (``pgstore/item_fields.py``: its anchors), as given."""
    out = {}
    for name in item_fields.WRITTEN_NAMES:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ApiError(400, "invalid", f"{name} must be an object")
        if holds_nul(value):
            raise ApiError(400, "invalid", f"{name} contains a NUL character; remove it")
        out[name] = value
    return out


def _pinned_name(state: ServerState, call: Call) -> str:
    assert call.key is not None
    names = [p["name"] for p in state.team.projects(call.key.tenant_id, pin=call.key.project_id)]
    if not names:
        raise ApiError(400, "invalid", "project is required")
    return str(names[0])


def get_memory(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    found = item_numbers.get(state.team, call.key.tenant_id, item_id_param(request), pin=call.key.project_id)
    _audit_read(state, call, "memory", "/v1/memories/{item_id}", [found["project"]], 1, str(found["id"]))
    return found


def _audit_read(state: ServerState, call: Call, action: str, route_path: str, projects: list[str] | None,
                results: int | None, target: str | None = None) -> None:
    """The read audit row (``pgstore/audit.py``): in the read's transaction when it has one, else a short one."""
    assert call.key is not None
    if call.cur is not None:
        audit.audit_read(call.cur, call.key.tenant_id, call.actor, action, route_path, projects, results, target)
        return
    with state.pool.connection() as conn, tenant_transaction(conn, call.key.tenant_id) as cur:
        audit.audit_read(cur, call.key.tenant_id, call.actor, action, route_path, projects, results, target)


def correct_memory(request: Request, call: Call) -> Any:
    """Say a memory no longer holds (``{"why": ...}`` wrong, ``{"by": 12}`` superseded by #12, or both) or take
    that back (``{"undo": true}``): it is kept, marked, and leaves the digest (``pgstore/corrections.py``)."""
    state: ServerState = request.app.state.server
    assert call.key is not None
    body = request.state.body
    undo, by = body.get("undo", False), body.get("by")
    if not isinstance(undo, bool):
        raise ApiError(400, "invalid", "undo must be true or false")
    if by is not None and (not isinstance(by, int) or isinstance(by, bool) or not 0 < by <= MAX_ITEM_ID):
        raise ApiError(400, "invalid", "by must be the id of the memory that supersedes this one, e.g. {\"by\": 15}")
    why = text_field(body, "why")
    if undo and (why or by is not None):
        raise ApiError(400, "invalid", "undo takes back the correction in effect: give it alone, without why or by")
    item = corrections.correct(state.team, call.key.tenant_id, item_id_param(request), why=why, by=by, undo=undo,
                               pin=call.key.project_id, actor=call.actor)
    return _record(item, {item.id: item.id})


def forget_memory(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    item_id = item_id_param(request)
    if not item_numbers.forget(state.team, call.key.tenant_id, item_id, pin=call.key.project_id, actor=call.actor):
        raise ApiError(404, "not_found", f"no memory #{item_id}")
    return {"id": item_id, "forgotten": True}


def search(request: Request, call: Call) -> Any:
    """The search service (``pgstore.search.TenantSearch``) in the request's transaction: ``mode`` auto runs both
    legs, keyword or semantic that leg alone."""
    state: ServerState = request.app.state.server
    query = plain("query", request.query_params.get("query", request.query_params.get("q", "")))
    if not query.strip():
        raise ApiError(400, "invalid", "query is required: /v1/search?query=words&project=name")
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(400, "invalid", f"query is over {MAX_QUERY_CHARS:,} characters")
    limit = int_param(request, "limit", 20, 1, MAX_LIMIT)
    mode = plain("mode", request.query_params.get("mode", "auto"))
    names = projects_param(request)
    _check_pin(state, call, names)
    if mode != "keyword" and state.team.embedder is not None and not state.team.knows_query(
            call.key.tenant_id, query[:MAX_SEMANTIC_QUERY_CHARS]):
        before_waiting("embedding the query")  # now, rather than after the keyword leg's work
    store = _tenant_store(state, call)
    found = TenantSearch(store, telemetry=state.telemetry).search(
        SearchRequest(query=query, projects=tuple(names) or None, limit=limit, mode=mode))
    numbers = _numbers(call, store, [hit.item for hit in found.hits])
    hits = [hit for hit in found.hits if hit.item.id in numbers]  # one forgotten since it was read is left out
    _audit_read(state, call, "search", "/v1/search", names or [hit.item.project for hit in hits], len(hits))
    return {"query": query, "mode": mode, "strategy": found.strategy,
            "results": [{**_record(hit.item, numbers), "score": round(hit.score, 6), "legs": sorted(hit.legs)}
                        for hit in hits]}


def _numbers(call: Call, store: TenantStore, items: list[MemoryItem]) -> dict[int, int]:
    """The API's ids (``pgstore/item_numbers.py``) of the memories a read route shows: read with their rows, else
    in its transaction."""
    assert call.key is not None and call.cur is not None
    missing = [item.id for item in items if item.id not in store.numbers]
    return {**store.numbers, **item_numbers.numbers_of(call.cur, call.key.tenant_id, missing)}


def _tenant_store(state: ServerState, call: Call) -> TenantStore:
    """The key's tenant (within its pin) in the request's transaction (a ``reads`` route's)."""
    assert call.key is not None and call.cur is not None
    return TenantStore(state.team, call.key.tenant_id, pin=call.key.project_id, cur=call.cur)


def _record(item: MemoryItem, numbers: dict[int, int]) -> dict[str, Any]:
    """A memory as the API answers it: its id is its number within the tenant (``numbers``: row id -> number)."""
    return {"id": numbers[item.id], "project": item.project, "kind": item.kind, "type": item.type,
            "title": item.title or "", "text": item.text or "", "created_at_epoch": item.created_at_epoch,
            "content_hash": item.content_hash, "session": item.session,
            **{name: getattr(item, name) for name in item_fields.NAMES}}


def start_session(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    body = request.state.body
    project = text_field(body, "project") or (_pinned_name(state, call) if call.key.project_id else None)
    session = text_field(body, "session", required=True)
    if not project:
        raise ApiError(400, "invalid", "project is required")
    assert session is not None
    try:
        state.team.start_session(call.key.tenant_id, project, session, text_field(body, "platform") or "unknown",
                                 pin=call.key.project_id, actor=call.actor)
    except NotFoundError:
        raise ApiError(403, "forbidden", f"this key is pinned to one project; it may not write to {project!r}")\
            from None
    # no row id (one sequence over every tenant): the session is named by the agent's own id
    return 201, {"session": session, "project": project}


def end_session(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    body = request.state.body
    session = text_field(body, "session", required=True)
    assert session is not None
    status = text_field(body, "status") or "completed"
    if status not in ("completed", "failed", "abandoned"):
        raise ApiError(400, "invalid", "status must be completed, failed or abandoned")
    ended = state.team.end_session(call.key.tenant_id, session, text_field(body, "platform") or "unknown", status,
                                   pin=call.key.project_id, actor=call.actor)
    if not ended:
        raise ApiError(404, "not_found", f"no session {session!r} (start it with POST /v1/sessions/start)")
    return {"session": session, "status": status}


def timeline(request: Request, call: Call) -> Any:
    """The search service's timeline around the anchor, within the anchor's project."""
    state: ServerState = request.app.state.server
    raw = request.query_params.get("anchor", "")
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ITEM_ID:
        raise ApiError(400, "invalid", "anchor must be a memory id: /v1/timeline?anchor=12&before=3&after=3")
    before = int_param(request, "before", 3, 0, 50)
    after = int_param(request, "after", 3, 0, 50)
    store = _tenant_store(state, call)
    assert call.key is not None and call.cur is not None
    anchor_id = item_numbers.id_of(call.cur, call.key.tenant_id, int(raw), call.key.project_id)
    if anchor_id is None:
        raise ApiError(404, "not_found", f"no memory #{raw}")
    anchor = store.get_item(anchor_id)
    around = TenantSearch(store, telemetry=state.telemetry).timeline(anchor.id, depth_before=before,
                                                                     depth_after=after, projects=[anchor.project])
    numbers = _numbers(call, store, [*around.items, anchor])
    _audit_read(state, call, "timeline", "/v1/timeline", [anchor.project], len(around.items), str(int(raw)))
    return {"anchor": int(raw), "items": [{**_record(i, numbers), "anchor": i.id == anchor.id}
                                          for i in around.items if i.id in numbers]}


def stream(request: Request, call: Call) -> Any:
    """Server-sent events of the tenant's stored and forgotten memories (``event: memory``, ``id``: the change's
    sequence number), polled from the change sequence every ``POLL_SECONDS``; from ``after`` (or the
    ``Last-Event-ID`` a reconnecting client sends), else from now. A comment line keeps an idle stream open."""
    state: ServerState = request.app.state.server
    assert call.key is not None
    key = call.key
    raw = request.query_params.get("after") or request.headers.get("last-event-id") or ""
    if raw and not raw.isdigit():
        raise ApiError(400, "invalid", "after (or Last-Event-ID) must be a change's sequence number")
    names = projects_param(request)
    _check_pin(state, call, names)
    project_ids = _scope_projects(state, call, names) if names or key.project_id else None
    after = int(raw) if raw else state.team.latest_change(key.tenant_id)
    _audit_read(state, call, "stream", "/v1/stream", names or None, None)

    def poll(last: int) -> tuple[list[dict[str, Any]], str | None]:
        """The changes after ``last`` and, read after them, whether the key may still have them: a batch is
        delivered only when the key was valid after it was read (so nothing committed after a revocation goes
        out); an idle poll uses the key's state as read within ``KEY_CHECK_SECONDS``."""
        try:
            with holding_key(key.tenant_id, key.digest):  # a poll runs outside the request's context
                batch = state.team.changes(key.tenant_id, last, project_ids)
        except keys.Unauthorized:  # the key no longer enters its tenant: why, as read now
            return [], keys.KEY_STATES.refusal(state.pool, key, max_age=0.0) or "the API key is no longer valid"
        return batch, keys.KEY_STATES.refusal(state.pool, key, max_age=0.0 if batch else KEY_CHECK_SECONDS)

    async def events() -> AsyncIterator[str]:
        last, idle = after, 0.0
        yield ": memcairn change feed\n\n"
        while not await request.is_disconnected():
            batch, refused = await run_in_threadpool(poll, last)
            if refused is not None:  # revoked or expired while the stream was open: it ends here
                yield f"event: error\ndata: {json.dumps({'error': 'unauthorized', 'detail': refused})}\n\n"
                return
            for change in batch:
                last = change["seq"]
                yield f"id: {last}\nevent: memory\ndata: {json.dumps(change)}\n\n"
            if batch:
                idle = 0.0
                continue
            await asyncio.sleep(POLL_SECONDS)
            idle += POLL_SECONDS
            if idle >= HEARTBEAT_SECONDS:
                idle = 0.0
                yield ": keep-alive\n\n"

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def list_projects(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    found = state.team.projects(call.key.tenant_id, pin=call.key.project_id)
    _audit_read(state, call, "projects", "/v1/projects", None, len(found))
    return {"projects": found}


def context(request: Request, call: Call) -> Any:
    """The projects' SessionStart context within ``max_tokens``: the local one (``memcairn.context.build``, its default
    settings, times in UTC) over the tenant's memories; ``items`` is the memories it shows. ``anchors=true`` adds
    the anchors of the memories it was built from (``anchored``) and ``states`` renders it with the freshness a
    caller found for them (``server/told_freshness.py``): the server itself never says."""
    state: ServerState = request.app.state.server
    assert call.key is not None
    names = projects_param(request)
    if not names:
        raise ApiError(400, "invalid", "project is required: /v1/context?project=name")
    _check_pin(state, call, names)
    budget = int_param(request, "max_tokens", DEFAULT_CONTEXT_TOKENS, 100, 20_000)
    settings = replace(CONTEXT_SETTINGS, context_token_budget=budget)
    assert call.key is not None and call.cur is not None
    # the memories read carry their API ids (the digest shows them: ``#12``)
    store = TenantStore(state.team, call.key.tenant_id, pin=call.key.project_id, cur=call.cur, numbered=True)
    told = ToldFreshness(parse_states(request.query_params.get("states")))
    data = gather(store, settings, names, freshness=told)
    now_ms = current_ms()
    # the text is a function of the memories read (a stored memory never changes: an edit stores another), the
    # totals, the budget and the clock: rendering, the costliest step, is done once for them
    key = (tuple(names), budget, clock(now_ms, UTC), data.totals,
           tuple((i.id, i.content_hash) for i in (*data.observations, *data.summaries)),
           tuple(sorted(data.freshness.items())))
    made = _RENDERED.get(key) or _RENDERED.put(key, render_shown(data, settings, now_ms=now_ms, tz=UTC))
    _audit_read(state, call, "context", "/v1/context", names, made.shown)
    anchored = {"anchored": told.anchored()} if request.query_params.get("anchors") in ("1", "true") else {}
    return {"projects": names, "items": made.shown, "tokens": tokens.estimate_tokens(made.text),
            "context": made.text, **anchored}


def audit_log(request: Request, call: Call) -> Any:
    """The tenant's audit log, newest first (admin, not pinned: it covers every project): ``key``, ``project``
    (its reads), ``action`` (``read`` for every read), ``since``/``until`` (ISO date/time), ``before`` (an
    entry id: the next page), ``limit``."""
    state: ServerState = request.app.state.server
    assert call.key is not None
    if call.key.project_id is not None:
        raise ApiError(403, "forbidden", "the audit log covers every project of the tenant; use an admin key that "
                       "is not pinned to a project")
    params = request.query_params
    key_id = params.get("key") or None
    if key_id is not None and not re.fullmatch(r"[0-9a-f]{12}", key_id):
        raise ApiError(400, "invalid", "key must be a key id (12 hex digits, as `keys list` shows it)")
    query = audit.AuditQuery(
        key_id=key_id, project=plain("project", params.get("project") or "") or None,
        action=plain("action", params.get("action") or "") or None, since=_when(params.get("since"), "since"),
        until=_when(params.get("until"), "until"), before=int_param(request, "before", 0, 1, 2**63 - 1) or None,
        limit=int_param(request, "limit", 100, 1, audit.MAX_PAGE))
    with state.pool.connection() as conn, tenant_transaction(conn, call.key.tenant_id) as cur:
        entries = audit.audit_page(cur, call.key.tenant_id, query)
    more = len(entries) == query.limit
    return {"entries": entries, "next_before": entries[-1]["id"] if more and entries else None}


def _when(raw: str | None, name: str) -> datetime | None:
    if not raw:
        return None
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ApiError(400, "invalid", f"{name} must be an ISO date or date/time, such as 2026-12-01 or "
                       "2026-12-01T09:30:00+00:00") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def list_keys(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    with state.pool.connection() as conn:
        return {"keys": keys.list_keys(conn, tenant_id=call.key.tenant_id)}


def create_key(request: Request, call: Call) -> Any:
    """A new key of the caller's tenant (admin); a key pinned to a project may only make keys pinned there."""
    state: ServerState = request.app.state.server
    assert call.key is not None
    body = request.state.body
    scopes = body.get("scopes", list(keys.DEFAULT_SCOPES))
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise ApiError(400, "invalid", 'scopes must be a list such as ["memories:read"]')
    project = text_field(body, "project")
    if call.key.project_id is not None:
        pinned = _pinned_name(state, call)
        if project not in (None, pinned):
            raise ApiError(403, "forbidden", f"this key is pinned to {pinned!r}; it may only make keys pinned there")
        project = pinned
    with state.pool.connection() as conn:
        made = keys.create_tenant_key(conn, state.secret, call.key.tenant_id, scopes=scopes, project=project,
                                      expires_at=keys.parse_expiry(text_field(body, "expires")),
                                      label=text_field(body, "label"), actor=call.actor)
    return 201, made


def rotate_key(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    grace = request.state.body.get("grace")
    if grace is not None and not isinstance(grace, str):
        raise ApiError(400, "invalid", 'grace must be a duration such as "24h" (or "0")')
    with state.pool.connection() as conn:
        return keys.rotate_key(conn, state.secret, request.path_params["key_id"], tenant_id=call.key.tenant_id,
                               actor=call.actor, grace=keys.parse_grace(grace))


def revoke_key(request: Request, call: Call) -> Any:
    state: ServerState = request.app.state.server
    assert call.key is not None
    key_id = request.path_params["key_id"]
    with state.pool.connection() as conn:
        keys.revoke_key(conn, key_id, tenant_id=call.key.tenant_id, actor=call.actor)
    return {"id": key_id, "revoked": True}


def make_app(state: ServerState, *, lifespan: Any = None) -> Starlette:
    routes = [
        Route("/v1/health", route(None, health), methods=["GET"]),
        Route("/v1/ready", route(None, ready), methods=["GET"]),
        Route("/metrics", route(None, metrics_page), methods=["GET"]),
        Route("/v1/openapi.json", route(None, openapi), methods=["GET"]),
        Route("/v1/memories", route("memories:write", save_memory), methods=["POST"]),
        Route("/v1/events", route("memories:write", post_events), methods=["POST"]),
        Route("/v1/events/forget", route("memories:write", forget_events), methods=["POST"]),
        Route("/v1/memories/{item_id}", by_method({"GET": route("memories:read", get_memory),
                                                   "DELETE": route("memories:write", forget_memory)}),
              methods=["GET", "DELETE"]),
        Route("/v1/memories/{item_id}/correction", route("memories:write", correct_memory), methods=["POST"]),
        Route("/v1/search", route("memories:read", search, reads=True), methods=["GET"]),
        Route("/v1/timeline", route("memories:read", timeline, reads=True), methods=["GET"]),
        Route("/v1/stream", route("memories:read", stream), methods=["GET"]),
        Route("/v1/sessions/start", route("memories:write", start_session), methods=["POST"]),
        Route("/v1/sessions/end", route("memories:write", end_session), methods=["POST"]),
        Route("/v1/projects", route("memories:read", list_projects), methods=["GET"]),
        Route("/v1/context", route("memories:read", context, reads=True), methods=["GET"]),
        Route("/v1/keys", by_method({"GET": route("admin", list_keys), "POST": route("admin", create_key)}),
              methods=["GET", "POST"]),
        Route("/v1/keys/{key_id}", route("admin", revoke_key), methods=["DELETE"]),
        Route("/v1/keys/{key_id}/rotate", route("admin", rotate_key), methods=["POST"]),
        Route("/v1/audit", route("admin", audit_log), methods=["GET"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "error")
        detail = {404: "no such route; see /v1/openapi.json", 405: "method not allowed on this route"}.get(
            status, "request failed")
        headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}  # 405 keeps its Allow
        return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)

    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found}, lifespan=lifespan,
                    middleware=[Middleware(AccessLog, state=state)])
    app.state.server = state
    return app
