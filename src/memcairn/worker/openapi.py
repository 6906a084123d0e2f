"""The worker's OpenAPI document, built from one small table of operations (served at ``/openapi.json``).

The table describes what the routes in ``app.py`` accept and answer, error responses included, so tools
(schemathesis in the tests, client generators) can exercise the API from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import memcairn
from memcairn.core.fields import FIELD, FIELDS, SAVED_FIELDS
from memcairn.core.models import MAX_ITEM_ID
from memcairn.wire.config import Settings, is_loopback_host
from memcairn.wire.protocol import CONTEXT_HEADER, CONTEXT_PATH
from memcairn.worker.security import cookie_name

MAX_BATCH_IDS = 500

ERROR = {"$ref": "#/components/schemas/Error"}
ITEM = {"$ref": "#/components/schemas/MemoryItem"}
_STR = {"type": "string"}
_NULLABLE_STR = {"type": ["string", "null"]}
_STR_LIST = {"type": "array", "items": {"type": "string"}}
_OBJ = {"type": "object"}

ERROR_TEXT = {
    400: "The request is malformed (the detail says what to fix)",
    401: "A bearer token or the viewer cookie is required (non-loopback bind only)",
    403: "Host or Origin refused, or a write sent by another site (Sec-Fetch-Site)",
    404: "No such item (or not of this kind), or no such route",
    413: "The request body is larger than the limit",
    414: "The request line (the query string) is longer than the limit",
    415: "A write must send its body as JSON (Content-Type: application/json)",
    500: "Unexpected error (no trace is sent; see the worker log), or a damaged database (store_damaged)",
    503: "Not ready yet (starting), or shutting down",
    507: "The disk is full: nothing was stored (free some space and send it again)",
}


@dataclass(frozen=True)
class Param:
    name: str
    schema: dict[str, Any]
    description: str = ""
    required: bool = False
    location: str = "query"

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "in": self.location, "required": self.required or
                               self.location == "path", "schema": self.schema}
        if self.description:
            out["description"] = self.description
        if self.schema.get("type") == "array":
            out["style"], out["explode"] = "form", True
        return out


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    ok: dict[str, Any]  # the success response: {"status": int, "schema": ..., "media": ..., "headers"?: ...}
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    errors: tuple[int, ...] = (400, 500, 503)
    tags: tuple[str, ...] = field(default=())


def _json(schema: dict[str, Any], status: int = 200, description: str = "OK") -> dict[str, Any]:
    return {"status": status, "media": "application/json", "schema": schema, "description": description}


def _text(media: str = "text/plain", description: str = "OK") -> dict[str, Any]:
    return {"status": 200, "media": media, "schema": _STR, "description": description}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` also allowing null (a field left out)."""
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return {**schema, "type": [*dict.fromkeys([*kinds, "null"])]}


def _obj(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    return out


ID_PARAM = Param("id", {"type": "integer", "minimum": 1, "maximum": MAX_ITEM_ID}, "Item id", location="path")
PROJECT_PARAMS = (
    Param("project", {"type": "array", "items": _STR},
          "Only this project, its whole name (a comma is part of it); repeat the parameter for several"),
    Param("projects", _STR, "Only these projects, names separated by commas"),
)
FORMAT = Param("format", {"type": "string", "enum": ["", "index", "json"]},
               "index (default): Markdown text plus the summary; json: one record per result")
FLAG = {"type": "string", "enum": ["", "true", "false", "1", "0", "yes", "no", "on", "off"]}
TZ = Param("tz", _STR, "Zone for dates without one and for the times printed: an IANA name (Europe/Paris), UTC or "
                       "an offset (+09:00); default: the worker's local time")

SEARCH_PARAMS = (
    Param("query", _STR, "Text to search for; empty = newest items matching the filters"),
    *PROJECT_PARAMS,
    Param("kind", _STR, "observation(s), summary/summaries, prompt(s), manual or all (comma-separated allowed)"),
    Param("type", _STR, "Only these types, comma-separated (e.g. bugfix,decision)"),
    Param("obs_type", _STR, "Same as type"),
    Param("concepts", _STR, "Only items tagged with one of these concepts (comma-separated)"),
    Param("files", _STR, "Only items that read or modified a path containing one of these (comma-separated)"),
    Param("dateStart", _STR, "From: ISO date or datetime, epoch seconds/ms, or relative (7d, 24h)"),
    Param("dateEnd", _STR, "Up to (a plain date includes the whole day)"),
    Param("platformSource", _STR, "Only items from this platform, e.g. claude-code"),
    Param("limit", {"type": "integer"}, "Results per page; clamped to 1..100 (default 20)"),
    Param("offset", {"type": "integer"}, "Results to skip; clamped to 0..1000"),
    Param("orderBy", {"type": "string", "enum": ["", "relevance", "newest", "oldest"]}, "Empty = the default"),
    Param("mode", {"type": "string", "enum": ["", "auto", "keyword", "semantic"]},
          "Which legs answer a query: auto (default: hybrid when the vector mirror is up, else keyword with a "
          "fallback_reason), keyword (the keyword leg alone), semantic (the semantic leg alone; keyword with a "
          "fallback_reason when the mirror is down)"),
    Param("min_score", {"type": "number", "minimum": 0},
          "Relevance floor: 0.75 (default) hides hits nothing relates the query to; hits between it and 1 "
          "(the calibrated floor) are weak matches; 0 shows every candidate; the answer counts the hidden ones "
          "(minScore is read the same)"),
    FORMAT,
    TZ,
)

_SEARCH_OK = _obj(("format", "strategy", "notes", "counts"), format=_STR, text=_STR, strategy=_STR,
                  fallback_reason=_NULLABLE_STR, notes=_STR_LIST, counts=_OBJ, results={"type": "array"},
                  hidden={"type": "integer"})
_TIMELINE_OK = _obj(("format", "anchor_id", "notes"), format=_STR, text=_STR,
                    anchor_id={"type": ["integer", "null"]}, notes=_STR_LIST, results={"type": "array"})
_HEALTH = _obj(("status", "pid", "port", "version", "ready"), status={"type": "string", "enum": ["ok", "degraded"]},
               pid={"type": "integer"}, port={"type": "integer"}, version=_STR, ready={"type": "boolean"},
               state=_STR, problems={"type": "array", "items": _STR}, store={"type": ["object", "null"]},
               queue={"type": ["object", "null"]})
_DELETED = _obj(("id", "deleted"), id={"type": "integer"}, deleted={"type": "boolean"}, kind=_STR)
# "accepted" carries the queued event's id ("duplicate": a retry of an event already queued); "skipped" says
# why nothing was stored (excluded_project, skipped_tool).
_ACCEPTED = _obj(("status",), status={"type": "string", "enum": ["accepted", "skipped"]},
                 event_id={"type": "integer"}, duplicate={"type": "boolean"}, reason=_STR)

_SESSION_FIELDS: dict[str, Any] = {
    "session_id": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"},
    "project": {"type": ["string", "null"], "minLength": 1, "maxLength": 200, "pattern": r"\S"},
    "cwd": {"type": ["string", "null"], "minLength": 1, "maxLength": 4096, "pattern": r"\S"},
    "platform_source": {"type": ["string", "null"], "maxLength": 100},
}
# How /api/context/inject got its text (absent on the empty answer for an excluded project).
CONTEXT_HEADERS = {CONTEXT_HEADER: {
    "description": "memo: served from the memo of rendered contexts (the store has not changed since, same "
                   "parameters, settings and minute); rendered: rendered for this request; resumed: a resumed "
                   "session whose earlier context still holds (one line instead of the context)",
    "schema": {"type": "string", "enum": ["memo", "rendered", "resumed"]}}}
_PROJECT_OR_CWD = [{"required": ["project"]}, {"required": ["cwd"]}]


def _session_body(extra: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": {**_SESSION_FIELDS, **extra},
            "required": ["session_id", *required], "anyOf": _PROJECT_OR_CWD}


CONTEXT_PARAMS: tuple[Param, ...] = (
    Param("projects", _STR, "Project names, comma-separated (default: every project)"),
    Param("project", _STR, "One project, its whole name (a comma is part of it); may repeat"),
    Param("platformSource", _STR, "Only items from this platform (and notes recorded by no agent)"),
    Param("tz", _STR, "Zone of the day headers and times: an IANA name (Europe/Paris), UTC or an "
                      "offset (+09:00); default: the worker's local time"),
    Param("maxTokens", {"type": "integer", "minimum": 1},
          "Lower the token budget for this answer (an agent's own size limit); never raises it"),
    Param("colors", FLAG, "ANSI colours, for the person's terminal (never for the model)"),
    Param("full", FLAG, "Lift the item limits and the token budget"),
    Param("fresh", FLAG, "Diagnostic: render even when the memo holds this context (the new text is "
                         "kept); the text is the same either way"),
    Param("source", _STR, "The SessionStart source (startup, resume, clear, compact). With resume, "
                          "session and agent: one line instead of the context when nothing was stored "
                          "since the session's earlier start (its transcript replays that context)"),
    Param("session", _STR, "The agent's session id (with source=resume)"),
    Param("agent", _STR, "The agent the session belongs to: claude-code, codex, gemini (with "
                         "source=resume)"),
    Param("started", {"type": "integer"}, "When the asking hook started, epoch ms (with source=resume): only a "
                                          "start before it is the session's earlier one"),
)


OPERATIONS: tuple[Operation, ...] = (
    Operation("get", "/api/health", "Liveness: answers as soon as the process serves HTTP", _json(_HEALTH),
              errors=(500,)),
    Operation("get", "/api/readiness", "200 once the store and the mirror are open, 503 before",
              _json(_obj(("status",), status=_STR)), errors=(500, 503)),
    Operation("get", "/api/stats", "Store counts, mirror state and lag, ingest queue, the agents whose hooks sent "
              "events this week",
              _json(_obj(("items", "by_kind", "mirror", "ingest", "hooks_heard"), items={"type": "integer"},
                         by_kind=_OBJ, mirror=_OBJ, ingest=_OBJ, hooks_heard={"type": "array", "items": _STR})),
              errors=(500, 503)),
    Operation("get", "/api/projects", "Projects with item counts",
              _json(_obj(("projects",), projects={"type": "array", "items": _obj(
                  ("name", "items"), name=_STR, merged_into_project=_NULLABLE_STR, items={"type": "integer"},
                  last_epoch={"type": ["integer", "null"]})})), errors=(500, 503)),
    Operation("get", "/api/search", "Search memories (hybrid keyword + semantic; filters only without a query)",
              _json(_SEARCH_OK), params=SEARCH_PARAMS),
    Operation("get", "/api/timeline", "Items around an anchor (id, S<id>, date) or the best match of a query",
              _json(_TIMELINE_OK), params=(
                  Param("anchor", _STR, "123, #123, S123 (a summary), an ISO date/datetime or 24h / 7d"),
                  Param("query", _STR, "Anchor on the best match for this text instead"),
                  Param("before", {"type": "integer"}, "Items before the anchor, clamped to 0..50 (depth_before "
                        "is read the same)"),
                  Param("after", {"type": "integer"}, "Items after the anchor, clamped to 0..50 (depth_after is "
                        "read the same)"),
                  *PROJECT_PARAMS, FORMAT, TZ),
              errors=(400, 404, 500, 503)),
    Operation("get", "/api/stale", "Memories the code no longer supports (a file they rest on deleted or moved, a "
              "name they state gone from it), newest first, with the command that forgets them",
              _json(_obj(("memories", "count", "forget"), memories={"type": "array", "items": {"type": "object"}},
                         count={"type": "integer"}, forget=_NULLABLE_STR)),
              params=(*PROJECT_PARAMS, Param("state", {"type": "array", "items": {
                  "type": "string", "enum": ["stale", "changed"]}}, "stale (default) or changed; repeat for both")),
              errors=(400, 500, 503)),
    Operation("post", "/api/observations/batch", "Full records for ids, in the order asked, plus the missing ids; "
              "format agent drops what an agent cannot use (uuid, hash, epochs, empty fields) and adds an ISO time",
              _json(_obj(("items", "missing"), items={"type": "array", "items": {"type": "object"}},
                         missing={"type": "array", "items": {"type": "integer"}})),
              body={"type": "object", "required": ["ids"], "properties": {
                  "ids": {"type": "array", "minItems": 1, "maxItems": MAX_BATCH_IDS,
                          "items": {"type": "integer", "minimum": 1, "maximum": MAX_ITEM_ID}},
                  "format": {"type": "string", "enum": ["raw", "agent"], "default": "raw"},
                  "tz": {"type": "string", "description": "Zone of the agent format's times (IANA name, UTC or "
                                                          "an offset); default: the worker's local time"}}},
              errors=(400, 413, 500, 503)),
    *(
        Operation("get", f"/api/{kind}/{{id}}", f"One {kind} (404 for another kind)", _json(ITEM),
                  params=(ID_PARAM,), errors=(404, 500, 503))
        for kind in ("observation", "summary", "prompt", "memory")
    ),
    Operation("get", "/api/memory/team/{id}", "Remote mode: one team server's memory (team#N), asked of the server; "
              "400 when not connected, 502 when it fails", _json({"type": "object"}), params=(ID_PARAM,),
              errors=(400, 404, 500, 503)),
    *(Operation(method, CONTEXT_PATH, summary, {**_text(), "headers": CONTEXT_HEADERS},
                params=CONTEXT_PARAMS, body={"type": "object"} if method == "post" else None,
                errors=(400, 413, 500, 503) if method == "post" else (400, 500, 503))
      for method, summary in (
          ("get", "The SessionStart context for these projects, as text; read-only: capture notices are shown "
                  "and stay unshown"),
          ("post", "The SessionStart context given to an agent: capture notices in it are marked shown (the "
                   "SessionStart hook; the body is {} and the parameters are the query's)"))),
    Operation("post", "/api/memory/save", "Save a manual memory", _json(_obj(
        ("id", "created"), id={"type": "integer"}, created={"type": "boolean"})),
        body={"type": "object", "required": ["text"], "properties": {
            **{name: _nullable(FIELD[name].json_schema()) for name in SAVED_FIELDS},
            "text": {"type": "string", "minLength": 1, "pattern": r"\S"},
            "project": {"type": ["string", "null"], "minLength": 1, "maxLength": 200, "pattern": r"\S"},
            "type": {"type": ["string", "null"], "pattern": "^[a-z][a-z0-9_-]{0,39}$"}}},
        errors=(400, 413, 500, 503, 507)),
    Operation("post", "/api/memory/{id}/correct", "Say a memory no longer holds: superseded by another (by) or "
              "wrong (why); undo takes that back. The memory stays, marked", _json(ITEM), params=(ID_PARAM,),
              body={"type": "object", "properties": {
                  "why": {"type": ["string", "null"], "maxLength": 1000},
                  "by": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_ITEM_ID},
                  "undo": {"type": "boolean"}}},
              errors=(400, 404, 413, 500, 503, 507)),
    Operation("post", "/api/memory/team/{id}/correct", "Remote mode: say a team server's memory (team#N) no "
              "longer holds, or take that back; the server marks and keeps it (by: the team id superseding it)",
              _json({"type": "object"}), params=(ID_PARAM,),
              body={"type": "object", "properties": {
                  "why": {"type": ["string", "null"], "maxLength": 1000},
                  "by": {"type": ["integer", "string", "null"]},
                  "undo": {"type": "boolean"}}},
              errors=(400, 404, 413, 500, 503)),
    *(
        Operation("delete", f"/api/{kind}/{{id}}", f"Delete one {kind} from the store and the mirror",
                  _json(_DELETED), params=(ID_PARAM,), errors=(404, 500, 503, 507))
        for kind in ("memory", "observation", "summary", "prompt")
    ),
    Operation("post", "/api/sessions/init", "A session started (hook event, queued durably)",
              _json(_ACCEPTED, 202, "Accepted and stored"), body=_session_body({
                  "prompt": _NULLABLE_STR, "prompt_number": {"type": ["integer", "null"], "minimum": 0,
                                                                  "maximum": 1_000_000},
                  "context_delivered": {"type": ["boolean", "null"],
                                        "description": "whether the SessionStart context reached the agent"}}),
              errors=(400, 413, 500, 503, 507)),
    Operation("post", "/api/sessions/observations", "A tool call happened (hook event, queued durably)",
              _json(_ACCEPTED, 202, "Accepted and stored"), body=_session_body({
                  "tool_name": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"},
                  "tool_use_id": {"type": ["string", "null"], "maxLength": 200},
                  "tool_input": {}, "tool_response": {},
                  "narration": {"type": ["string", "null"],
                                "description": "the agent's text right before the call; read from "
                                               "transcript_path when absent"}}, ("tool_name",)),
              errors=(400, 413, 500, 503, 507)),
    Operation("post", "/api/sessions/summarize", "A session (or turn) ended: summarise it (queued durably)",
              _json(_ACCEPTED, 202, "Accepted and stored"), body=_session_body({
                  "last_assistant_message": _NULLABLE_STR}),
              errors=(400, 413, 500, 503, 507)),
    Operation("get", "/stream", "Server-sent events: item_added, item_updated, item_deleted, status",
              _text("text/event-stream"), errors=(500,)),
)


def _responses(op: Operation, secured: bool) -> dict[str, Any]:
    ok = op.ok
    out: dict[str, Any] = {str(ok["status"]): {"description": ok["description"],
                                               "content": {ok["media"]: {"schema": ok["schema"]}}}}
    if ok.get("headers"):
        out[str(ok["status"])]["headers"] = ok["headers"]
    codes = set(op.errors) | {403, 414}
    if op.method == "post":
        codes.add(415)
    if any(p.location == "path" for p in op.params):
        codes.add(404)
    if secured:
        codes.add(401)
    for code in sorted(codes):
        out[str(code)] = {"description": ERROR_TEXT[code], "content": {"application/json": {"schema": ERROR}}}
    return out


def build_openapi(settings: Settings, operations: tuple[Operation, ...] = OPERATIONS) -> dict[str, Any]:
    """The OpenAPI 3.1 document for a worker with these settings (bearer auth only off loopback)."""
    secured = bool(settings.token) and not is_loopback_host(settings.host)
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        spec: dict[str, Any] = {"summary": op.summary, "operationId": f"{op.method}_{op.path}",
                                "responses": _responses(op, secured)}
        if op.params:
            spec["parameters"] = [p.spec() for p in op.params]
        if op.body is not None:
            spec["requestBody"] = {"required": True, "content": {"application/json": {"schema": op.body}}}
        paths.setdefault(op.path, {})[op.method] = spec
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "memcairn worker", "version": memcairn.__version__,
                 "description": "Persistent memory for coding agents: one local worker per user."},
        "paths": paths,
        "components": {"schemas": {
            "Error": _obj(("error", "detail"), error=_STR, detail=_STR),
            "MemoryItem": {"type": "object", "required": ["id", "kind", "type", "project", "created_at_epoch"],
                           "properties": {"id": {"type": "integer"}, "kind": _STR, "type": _STR, "project": _STR,
                                          **{f.name: f.json_schema() for f in FIELDS},
                                          "created_at_epoch": {"type": "integer"}}},
        }},
    }
    if secured:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "viewer_cookie": {"type": "apiKey", "in": "cookie", "name": cookie_name(settings.port),
                              "description": "set by GET /?token=<MEMCAIRN_TOKEN> for the viewer in a browser"},
        }
        doc["security"] = [{"bearer": []}, {"viewer_cookie": []}]  # either one
    return doc
