"""The audit log: every write and every administrative action, with the key that did it (or ``cli``), the
action, its target and the request id, in the same transaction as the change it records."""

from __future__ import annotations

from dataclasses import dataclass

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
