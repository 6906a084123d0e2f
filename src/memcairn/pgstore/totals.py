"""What the SessionStart context (``memcairn.context.build``) reads of a tenant's projects besides items: their totals
(memories and stored characters) and where their newest window of memories starts.

The totals are counted once per projects and process, then kept current by counting new ids only, as the local
store does (``store.totals``): the projects' count up to the last id counted (the ``items_recent`` index answers
it alone) tells a delete, or a row committed late under a lower id, apart from nothing new, and either is counted
again. A memory's stored characters are its title's and text's, all the team store keeps of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from memcairn.core.lru import Lru

KEEP = 10_000  # (tenant, projects) totals kept per process
_CHARS = "coalesce(sum(length(title) + length(text)), 0)"


@dataclass(frozen=True)
class _Count:
    max_id: int
    items: int
    chars: int


class ChainTotals:
    """The totals of projects as last counted, per tenant (one per ``TeamStore``; thread-safe)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._counts: Lru[tuple[int, tuple[int, ...]], _Count] = Lru(keep)

    def totals(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int]) -> tuple[int, int]:
        """(memories, stored characters) of the projects."""
        if not project_ids:
            return 0, 0
        key = (tenant_id, tuple(sorted(set(project_ids))))
        scope = "tenant_id = %s AND project_id = ANY(%s)"
        params = (tenant_id, list(key[1]))
        known = self._counts.get(key)
        if known is not None:  # both counts in one statement: one round trip (each keeps its own plan)
            row = cur.execute(f"SELECT (SELECT count(*) FROM items WHERE {scope} AND id <= %s), count(*), {_CHARS},"
                              f" coalesce(max(id), 0) FROM items WHERE {scope} AND id > %s",
                              (*params, known.max_id, *params, known.max_id)).fetchone()
            assert row is not None
            if int(row[0]) == known.items:
                fresh = _Count(max(known.max_id, int(row[3])), known.items + int(row[1]), known.chars + int(row[2]))
                self._counts.put(key, fresh)
                return fresh.items, fresh.chars
        row = cur.execute(f"SELECT count(*), {_CHARS}, coalesce(max(id), 0) FROM items WHERE {scope}",
                          params).fetchone()
        assert row is not None
        fresh = _Count(int(row[2]), int(row[0]), int(row[1]))
        self._counts.put(key, fresh)
        return fresh.items, fresh.chars


def window_start(cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], window: int) -> int | None:
    """The creation time at or after which the newest ``window`` memories of each project lie, the earliest over
    the projects; None when a project holds fewer (as ``Store.window_start``)."""
    starts = []
    for project_id in project_ids:
        row = cur.execute("SELECT created_at_epoch FROM items WHERE tenant_id = %s AND project_id = %s"
                          " ORDER BY created_at_epoch DESC, id DESC LIMIT 1 OFFSET %s",
                          (tenant_id, project_id, max(0, window - 1))).fetchone()
        if row is None:
            return None
        starts.append(int(row[0]))
    return min(starts) if starts else None
