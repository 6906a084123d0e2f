"""The audit log: every write and every administrative action, with the key that did it (or ``cli``), the
action, its target and the request id, in the same transaction as the change it records; and every read (who
read which project, by which route, how many results; never the query or the content), read back page by page
through ``GET /v1/audit``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg


@dataclass(frozen=True)
class Actor:
    """Who acts: an API key (None for the command line) within one request."""

    key_id: str | None = None
    request_id: str | None = None


def audit_actor(actor: Actor) -> str:
    """The ``actor`` column: ``key:<id>``, or ``cli``."""
    return f"key:{actor.key_id}" if actor.key_id else "cli"


def audit(cur: psycopg.Cursor, tenant_id: int, action: str, actor: Actor | None, target: str | None = None) -> None:
    actor = actor or Actor()
    cur.execute("INSERT INTO audit_log (tenant_id, key_id, actor, action, target, request_id)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (tenant_id, actor.key_id, audit_actor(actor), action, target, actor.request_id))


READ_PREFIX = "read."
MAX_PAGE = 500


def audit_read(cur: psycopg.Cursor, tenant_id: int, actor: Actor, action: str, route: str,
               projects: Sequence[str] | None, results: int | None, target: str | None = None) -> None:
    """Record a read: who (key, request), which route, which projects (those named, else those the answer came
    from; none: all the key may read) and how many results. Never the query or the content. The row's
    ``target`` holds ``{"route", "projects", "results"}`` as JSON (``item`` too for one memory).

    It is written in the read's own transaction, which then commits without waiting for the WAL to reach the disk
    (``synchronous_commit`` off for it alone): a read must not pay a disk flush, and a crash loses at most the last
    fraction of a second of read records, never a write's."""
    detail: dict[str, Any] = {"route": route, "projects": sorted(set(projects)) if projects else None,
                              "results": results}
    if target is not None:
        detail["item"] = target
    cur.execute("SELECT set_config('synchronous_commit', 'off', true)")
    audit(cur, tenant_id, READ_PREFIX + action, actor, json.dumps(detail, ensure_ascii=False))


@dataclass(frozen=True)
class AuditQuery:
    """A page of the audit log, newest first: only this key, this project's reads, this action (``read`` for all
    reads, ``keys.rotate`` ...), from ``since`` to ``until``, ids below ``before`` (an entry's id is its number
    in the tenant, migration 13)."""

    key_id: str | None = None
    project: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before: int | None = None
    limit: int = 100


def audit_page(cur: psycopg.Cursor, tenant_id: int, query: AuditQuery) -> list[dict[str, Any]]:
    """The tenant's audit rows matching ``query``, newest first (a tenant transaction's cursor)."""
    action_exact = None if query.action in (None, "read") else query.action
    rows = cur.execute(
        "SELECT number, at, key_id, actor, action, target, request_id FROM audit_log WHERE tenant_id = %(t)s"
        " AND (%(key)s::text IS NULL OR key_id = %(key)s)"
        " AND (%(exact)s::text IS NULL OR action = %(exact)s)"
        " AND (NOT %(reads)s OR action LIKE 'read.%%')"
        " AND (%(project)s::text IS NULL OR CASE WHEN action LIKE 'read.%%'"  # CASE: only reads' targets are JSON
        "      THEN (target::jsonb -> 'projects') ? %(project)s ELSE false END)"
        " AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)"
        " AND (%(until)s::timestamptz IS NULL OR at < %(until)s)"
        " AND (%(before)s::bigint IS NULL OR number < %(before)s)"
        " ORDER BY number DESC LIMIT %(limit)s",
        {"t": tenant_id, "key": query.key_id, "exact": action_exact, "reads": query.action == "read",
         "project": query.project, "since": query.since, "until": query.until, "before": query.before,
         "limit": min(max(1, query.limit), MAX_PAGE)}).fetchall()
    out = []
    for row_id, at, key_id, actor, action, target, request_id in rows:
        entry: dict[str, Any] = {"id": row_id, "at": at.isoformat(), "key_id": key_id, "actor": actor,
                                 "action": action, "request_id": request_id}
        if action.startswith(READ_PREFIX) and target:
            entry.update(json.loads(target))
        else:
            entry["target"] = target
        out.append(entry)
    return out
