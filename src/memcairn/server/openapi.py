"""The OpenAPI document of ``memcairn server``'s /v1 API (served at ``/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

import memcairn

ERROR = {"$ref": "#/components/schemas/Error"}
_STR = {"type": "string"}
_INT = {"type": "integer"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "Bad input (the detail says what to fix)", 401: "No key, or an unknown, revoked or expired key",
            403: "The key lacks the scope, or is pinned to another project", 404: "Not found (or not this tenant's)",
            413: "Body over 1 MiB", 503: "The database cannot be reached"}
    return {str(c): _json(ERROR, text[c]) for c in codes}


def _q(name: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


_ID = {"name": "item_id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}
_KEY_ID = {"name": "key_id", "in": "path", "required": True, "schema": _STR}
_PROJECT = _q("project", _STR, "a project name of the key's tenant (repeatable)")
_AUTH = [{"bearer": []}]
_READ = _errors(401, 403, 503)


_HEALTHY = ("Ready; embedding: the items of all tenants still waiting for their vector (pending, "
            "oldest_pending_seconds); ingest: the events queued and not yet stored (pending, oldest_pending_seconds) "
            "and those that could not be stored (failed)")


_ANCHORS = {"type": "object", "description": "What the memory rests on as captured (files with their content ids, "
            "identifiers, commit, branch); kept as given: the server has no working directory and says nothing of "
            "how true a memory still is (a connected worker checks it against the files on its machine)"}


def openapi_document() -> dict[str, Any]:
    item = {"type": "object", "required": ["id", "project", "title", "text"],
            "properties": {"id": _INT, "project": _STR, "kind": _STR, "type": {"type": ["string", "null"]},
                           "title": _STR, "text": _STR, "created_at_epoch": _INT,
                           "session": {"type": ["string", "null"]}, "anchors": _ANCHORS,
                           "correction": {"type": "object", "description": "Whether it still holds: state "
                                          "superseded (by), wrong or reverted (why), who and when; undone: the "
                                          "corrections taken back"}}}
    hit = {"allOf": [item, {"type": "object", "properties": {"score": {"type": "number"},
                                                             "legs": {"type": "array", "items": _STR}}}]}
    optional = {"type": ["string", "null"]}
    new = {"type": "object", "properties": {"project": _STR, "title": optional, "text": optional,
                                            "kind": {"enum": ["manual", "observation", "summary", "prompt", None]},
                                            "type": optional, "session": optional, "platform": optional,
                                            "anchors": {**_ANCHORS, "type": ["object", "null"]}},
           "example": {"project": "api", "title": "Use WAL", "text": "SQLite runs in WAL mode"}}
    queued = {"type": "object", "required": ["queued", "replayed"],
              "properties": {"queued": {"type": "array", "items": {"type": ["integer", "null"]},
                                        "description": "each event's place in the batch (null: a tool call never "
                                                       "observed)"},
                             "replayed": {"type": "boolean"}}}
    event = {"type": "object", "properties": {**new["properties"], "created_at_epoch": {"type": ["integer", "null"]}}}
    paths: dict[str, Any] = {
        "/v1/health": {"get": {"operationId": "health", "security": [],
                               "responses": {"200": _json({"type": "object"}, _HEALTHY),
                                             "503": _json({"type": "object"}, "The database is unreachable")}}},
        "/v1/ready": {"get": {"operationId": "ready", "security": [],
                              "summary": "Readiness: the database answers and its migrations are current",
                              "responses": {"200": _json({"type": "object", "properties": {
                                  "status": {"const": "ready"}, "schema_version": {"type": ["integer", "null"]},
                                  "note": _STR}}, "Ready for traffic (note: what could not be checked)"),
                                  "503": _json({"type": "object", "required": ["status", "reason"], "properties": {
                                      "status": {"const": "not_ready"}, "reason": _STR}},
                                      "Not ready: the reason says what to do")}}},
        "/metrics": {"get": {"operationId": "metrics", "security": [],
                             "summary": "Prometheus metrics (counts only): to loopback peers, or with the token in "
                                        "MEMCAIRN_SERVER_METRICS_TOKEN",
                             "responses": {"200": {"description": "Prometheus text format",
                                                   "content": {"text/plain": {"schema": _STR}}},
                                           "403": _json(ERROR, "Not a loopback peer and no metrics token"),
                                           "404": _json(ERROR, "Metrics are off (MEMCAIRN_SERVER_METRICS=off)")}}},
        "/v1/openapi.json": {"get": {"operationId": "openapi", "security": [],
                                     "responses": {"200": _json({"type": "object"}, "This document")}}},
        "/v1/memories": {"post": {
            "operationId": "saveMemory", "summary": "Save a memory (memories:write); the same content in the same "
            "project is stored once", "requestBody": {"required": True, "content": {"application/json": {
                "schema": new}}},
            "responses": {"201": _json({"type": "object", "properties": {"id": _INT, "created": {"type": "boolean"}}},
                                       "Stored"),
                          "200": _json({"type": "object"}, "Already stored: the existing id"),
                          **_errors(400, 401, 403, 413, 503)}}},
        "/v1/events": {"post": {
            "operationId": "postEvents", "summary": "A batch of captured memories, validated, scrubbed and queued "
            "together (memories:write); the server's consumers store them shortly after (GET /v1/health: ingest)",
            "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                            "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["events"],
                "properties": {"events": {"type": "array", "minItems": 1, "maxItems": 100, "items": {
                    "type": "object", "properties": {
                        **new["properties"], "created_at_epoch": {"type": ["integer", "null"]},
                        "event": {"enum": ["user_prompt", "tool_use"], "description": "a raw hook event (the "
                                  "server compresses it); without it the object is a memory"},
                        "prompt": _STR, "tool_name": _STR, "tool_input": {}, "tool_response": {},
                        "tool_use_id": _STR, "is_error": {"type": "boolean"}, "cwd": _STR}}}}}}}},
            "responses": {"202": _json(queued, "Queued (or, for a retry with its Idempotency-Key, queued by the "
                                              "first request: Idempotent-Replayed: true); one id per event"),
                          "409": _json(ERROR, "The Idempotency-Key was used for another batch"),
                          **_errors(400, 401, 403, 413, 503)}}},
        "/v1/events/forget": {"post": {
            "operationId": "forgetEvents", "summary": "Forget memories by content, each given as the event that "
            "captured it (memories:write): marked forgotten in its project, so a queued copy is refused, and the "
            "stored item deleted (what a connected worker sends for a memory it deleted, forgot or replaced); "
            "replacements (as long as events, an event or null each) stores an edited memory's new version in the "
            "same transaction",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["events"],
                "properties": {"events": {"type": "array", "minItems": 1, "maxItems": 100, "items": event},
                               "replacements": {"type": "array", "maxItems": 100,
                                                "items": {"anyOf": [event, {"type": "null"}]}}}}}}},
            "responses": {"200": _json({"type": "object", "required": ["results"], "properties": {"results": {
                "type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": ["integer", "null"]}, "forgotten": {"type": "boolean"},
                    "replaced_by": {"type": ["integer", "null"]}}}}}},
                "One result per event: the deleted memory's id (null when none was stored), the replacement's id"),
                          **_errors(400, 401, 403, 413, 503)}}},
        "/v1/memories/{item_id}": {
            "get": {"operationId": "getMemory", "parameters": [_ID],
                    "responses": {"200": _json(item, "The memory"), **_errors(401, 403, 404, 503)}},
            "delete": {"operationId": "forgetMemory", "summary": "Delete and mark forgotten (memories:write)",
                       "parameters": [_ID],
                       "responses": {"200": _json({"type": "object"}, "Forgotten"), **_errors(401, 403, 404, 503)}}},
        "/v1/memories/{item_id}/correction": {"post": {
            "operationId": "correctMemory", "summary": "Say a memory no longer holds, or take that back "
            "(memories:write): kept and marked (superseded by another of its project, or wrong and why), it leaves "
            "the context; its correction, with those taken back before, is its audit trail",
            "parameters": [_ID],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "why": {"type": ["string", "null"], "maxLength": 1000}, "undo": {"type": "boolean"},
                    "by": {"type": ["integer", "null"], "minimum": 1, "description": "the memory superseding it"}},
                "example": {"why": "the port moved to 8080"}}}}},
            "responses": {"200": _json(item, "The memory as it is now (correction: what holds)"),
                          **_errors(400, 401, 403, 404, 413, 503)}}},
        "/v1/search": {"get": {
            "operationId": "search", "summary": "Hybrid search (keyword + semantic, fused)",
            "parameters": [_q("query", _STR, "what to look for", True), _PROJECT,
                           _q("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "at most this many"),
                           _q("mode", {"enum": ["auto", "keyword", "semantic"]}, "which legs run")],
            "responses": {"200": _json({"type": "object", "properties": {
                "strategy": {"enum": ["hybrid", "keyword", "semantic"]},
                "results": {"type": "array", "items": hit}}}, "Hits, best first (strategy: the legs that ran)"),
                **_errors(400, 401, 403, 503)}}},
        "/v1/timeline": {"get": {
            "operationId": "timeline", "summary": "Memories around an anchor in its project, oldest first",
            "parameters": [_q("anchor", {"type": "integer", "minimum": 1}, "a memory id", True),
                           _q("before", {"type": "integer", "minimum": 0, "maximum": 50}, "older items"),
                           _q("after", {"type": "integer", "minimum": 0, "maximum": 50}, "newer items")],
            "responses": {"200": _json({"type": "object", "properties": {"items": {"type": "array",
                                                                                    "items": item}}},
                                       "The anchor's neighbourhood"), **_errors(400, 401, 403, 404, 503)}}},
        "/v1/sessions/start": {"post": {
            "operationId": "startSession", "summary": "Start (or find) an agent's session under a project",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["session"],
                "properties": {"project": _STR, "session": _STR, "platform": {"type": ["string", "null"]}}}}}},
            "responses": {"201": _json({"type": "object"}, "The session"), **_errors(400, 401, 403, 413, 503)}}},
        "/v1/sessions/end": {"post": {
            "operationId": "endSession", "summary": "Mark an agent's session ended",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["session"],
                "properties": {"session": _STR, "platform": {"type": ["string", "null"]},
                               "status": {"enum": ["completed", "failed", "abandoned", None]}}}}}},
            "responses": {"200": _json({"type": "object"}, "Ended"), **_errors(400, 401, 403, 404, 413, 503)}}},
        "/v1/stream": {"get": {
            "operationId": "stream", "summary": "Server-sent events of stored and forgotten memories",
            "parameters": [_PROJECT, _q("after", {"type": "integer", "minimum": 0},
                                        "replay changes after this one (the tenant's change number, an event's "
                                        "id; else from now)")],
            "responses": {"200": {"description": "An endless text/event-stream",
                                  "content": {"text/event-stream": {"schema": _STR}}},
                          **_errors(400, 401, 403, 503)}}},
        "/v1/projects": {"get": {"operationId": "projects",
                                 "responses": {"200": _json({"type": "object"}, "The tenant's projects"), **_READ}}},
        "/v1/context": {"get": {
            "operationId": "context", "parameters": [{**_PROJECT, "required": True},
                                                     _q("max_tokens", {"type": "integer", "minimum": 100,
                                                                       "maximum": 20000}, "token budget"),
                                                     _q("anchors", {"enum": ["true", "false"]},
                                                        "true: anchored lists the anchors of the memories the "
                                                        "context was built from, for a caller to check"),
                                                     _q("states", _STR, "JSON: API id -> {state: changed or "
                                                        "stale, reasons}, the freshness the caller found; the "
                                                        "context is rendered with it")],
            "responses": {"200": _json({"type": "object"}, "The projects' SessionStart context, fenced"),
                          **_errors(400, 401, 403, 503)}}},
        "/v1/keys": {
            "get": {"operationId": "listKeys", "summary": "The tenant's keys (admin)",
                    "responses": {"200": _json({"type": "object"}, "Keys, never their secrets"), **_READ}},
            "post": {"operationId": "createKey", "summary": "A new key of the tenant, shown once (admin)",
                     "requestBody": {"required": False, "content": {"application/json": {"schema": {
                         "type": "object", "properties": {
                             "scopes": {"type": "array", "items": {"enum": ["memories:read", "memories:write",
                                                                              "admin"]}},
                             "project": {"type": ["string", "null"]}, "expires": {"type": ["string", "null"]},
                             "label": {"type": ["string", "null"]}}}}}},
                     "responses": {"201": _json({"type": "object", "properties": {"id": _STR, "key": _STR}},
                                                "Created"), **_errors(400, 401, 403, 413, 503)}}},
        "/v1/keys/{key_id}": {"delete": {
            "operationId": "revokeKey", "summary": "Revoke a key of the tenant (admin)",
            "parameters": [_KEY_ID],
            "responses": {"200": _json({"type": "object"}, "Revoked"), **_errors(401, 403, 404, 503)}}},
        "/v1/keys/{key_id}/rotate": {"post": {
            "operationId": "rotateKey", "summary": "Replace a key of the tenant by a new one (admin)",
            "description": "grace (90m, 24h, 7d; at most 30d): the old key keeps working until then, then expires; "
                           "without it (or 0) the old key is revoked at once",
            "parameters": [_KEY_ID],
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "properties": {"grace": {"type": "string", "example": "24h"}}}}}},
            "responses": {"200": _json({"type": "object", "properties": {
                "id": _STR, "key": _STR, "replaces": _STR, "replaced_works_until": optional}}, "The new key"),
                          **_errors(400, 401, 403, 404, 503)}}},
        "/v1/audit": {"get": {
            "operationId": "auditLog", "summary": "The tenant's audit log, newest first (admin, not pinned)",
            "description": "Writes, key changes and reads (who read which project by which route, and how many "
                           "results; never the query or the content). Page on with before=next_before.",
            "parameters": [_q("key", _STR, "only this key id's entries"),
                           _q("project", _STR, "only the reads of this project"),
                           _q("action", _STR, "only this action (read: every read; read.search, memories.create ...)"),
                           _q("since", _STR, "from this time (ISO 8601 date or date/time; UTC unless zoned)"),
                           _q("until", _STR, "before this time (ISO 8601 date or date/time; UTC unless zoned)"),
                           _q("before", {"type": "integer", "minimum": 1}, "entries older than this id"),
                           _q("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "entries (default 100)")],
            "responses": {"200": _json({"type": "object", "required": ["entries", "next_before"], "properties": {
                "entries": {"type": "array", "items": {"type": "object", "properties": {
                    "id": _INT, "at": _STR, "key_id": optional, "actor": _STR, "action": _STR, "route": _STR,
                    "projects": {"type": ["array", "null"], "items": _STR},
                    "results": {"type": ["integer", "null"]}, "target": optional, "request_id": optional}}},
                "next_before": {"type": ["integer", "null"]}}}, "A page of entries"),
                **_errors(400, 401, 403, 503)}}},
    }
    for path, operations in paths.items():
        for operation in operations.values():
            operation.setdefault("security", _AUTH)
            operation.setdefault("summary", path)
    return {
        "openapi": "3.1.0",
        "info": {"title": "memcairn team server", "version": memcairn.__version__},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "a key from `memcairn server keys create`"}},
            "schemas": {"Error": {"type": "object", "required": ["error", "detail"],
                                  "properties": {"error": _STR, "detail": _STR}}},
        },
    }
