"""The API's ids of memories: each memory's number within its tenant (``items.number``, migration 12), never the
row's id, which one sequence hands out over every tenant (two ids of one tenant would tell it how many memories the
others stored between them). Inside the server everything still works on row ids; the routes turn numbers into ids
on the way in and ids into numbers on the way out, in the request's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from memcairn.core.errors import NotFoundError
from memcairn.pgstore.audit import Actor
from memcairn.pgstore.db import read_as, tenant_transaction
from memcairn.pgstore.items import TeamStore


def numbers_of(cur: psycopg.Cursor, tenant_id: int, ids: Sequence[int]) -> dict[int, int]:
    """Row id -> number of the tenant's memories among ``ids`` (a memory deleted meanwhile is left out)."""
    if not ids:
        return {}
    rows = cur.execute("SELECT id, number FROM items WHERE tenant_id = %s AND id = ANY(%s)",
                       (tenant_id, list(ids))).fetchall()
    return {int(item_id): int(number) for item_id, number in rows}


def id_of(cur: psycopg.Cursor, tenant_id: int, number: int, pin: int | None = None) -> int | None:
    """The row id of the tenant's memory ``number`` (within the pin's project), or None."""
    row = cur.execute("SELECT id FROM items WHERE tenant_id = %s AND number = %s"
                      " AND (%s::bigint IS NULL OR project_id = %s)", (tenant_id, number, pin, pin)).fetchone()
    return int(row[0]) if row else None


def get(team: TeamStore, tenant_id: int, number: int, *, pin: int | None = None) -> dict[str, Any]:
    """Memory ``number`` of the tenant as the API shows it (its number as its id)."""
    def read(cur: psycopg.Cursor) -> list[dict[str, Any]]:
        item_id = id_of(cur, tenant_id, number, pin)
        return [] if item_id is None else team.get_many_in(cur, tenant_id, [item_id], pin=pin)

    found = read_as(team.pool, tenant_id, read)
    if not found:
        raise NotFoundError(f"no memory #{number}")
    return {**found[0], "id": number}


def forget(team: TeamStore, tenant_id: int, number: int, *, pin: int | None = None,
           actor: Actor | None = None) -> bool:
    """``TeamStore.forget`` of memory ``number``; False when the tenant (within the pin) has none."""
    with team.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
        item_id = id_of(cur, tenant_id, number, pin)
        return item_id is not None and team.forget_in(cur, tenant_id, item_id, pin=pin, actor=actor)
