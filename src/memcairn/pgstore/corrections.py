"""Corrections on the team server: a tenant's memory said to no longer hold (superseded by another, wrong, a
reverted fix) or taken back, by the rules of ``store/supersede.py``, over the team store in one transaction.

Ids are the API's numbers (``pgstore/item_numbers.py``): ``by`` names a memory of the same tenant and project by
its number, as ``superseded by #12`` then shows it. The memory is kept (readable by id, its correction and the
ones taken back before as its audit trail); it leaves the server's digest (``context/gather.py`` leaves corrected
memories out) and a connected worker ranks it with the stale ones. Each correction is an audit row
(``memories.correct``, the memory's number).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from memcairn.core.errors import NotFoundError
from memcairn.core.models import MemoryItem
from memcairn.pgstore.adapter import TenantStore
from memcairn.pgstore.audit import Actor, audit
from memcairn.pgstore.db import tenant_transaction
from memcairn.pgstore.items import TeamStore
from memcairn.store import supersede


class _Numbered:
    """``supersede.CorrectionStore`` over the request's transaction: memories by their number in the tenant."""

    def __init__(self, team: TeamStore, tenant_id: int, cur: psycopg.Cursor, pin: int | None,
                 actor: Actor | None) -> None:
        self.cur, self.tenant_id, self.pin, self.actor = cur, tenant_id, pin, actor
        self.reader = TenantStore(team, tenant_id, pin=pin, cur=cur)

    def get_item(self, item_id: int) -> MemoryItem:
        row = self.cur.execute("SELECT id FROM items WHERE tenant_id = %s AND number = %s AND (%s::bigint IS NULL"
                               " OR project_id = %s) FOR UPDATE", (self.tenant_id, item_id, self.pin, self.pin)
                               ).fetchone()
        found = self.reader.get_items([int(row[0])]) if row is not None else []
        if not found:
            raise NotFoundError(f"no memory #{item_id}")
        return replace(found[0], id=item_id)  # known by its number, as the API shows it

    def update_item(self, item_id: int, **changes: Any) -> MemoryItem:
        self.cur.execute("UPDATE items SET correction = %s WHERE tenant_id = %s AND number = %s",
                         (Jsonb(changes["correction"]), self.tenant_id, item_id))
        audit(self.cur, self.tenant_id, "memories.correct", self.actor, str(item_id))
        return self.get_item(item_id)


def correct(team: TeamStore, tenant_id: int, number: int, *, why: str | None = None, by: int | None = None,
            undo: bool = False, pin: int | None = None, actor: Actor | None = None) -> MemoryItem:
    """Mark memory ``number`` superseded by ``by`` or wrong because of ``why`` (``undo``: take that back); the
    memory as it is then, its id its number.

    Raises:
        NotFoundError: the tenant (within the pin) has no memory ``number`` or ``by``.
        ValidationError: as ``supersede.correct`` and ``supersede.undo`` say."""
    with team.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
        rows = _Numbered(team, tenant_id, cur, pin, actor)
        return supersede.undo(rows, number) if undo else supersede.correct(rows, number, why=why, by=by)
