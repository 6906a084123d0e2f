"""Store reads the SessionStart context needs beyond items: a project chain's totals and its recent window.

Mixed into ``Store`` so the store stays the only owner of connections and SQL (these queries were the context
renderer's own before the storage protocols). The totals are kept current by counting new ids only: deletes
are noticed by the chain's count over every platform, which the project index answers alone, so a
platform-scoped count costs no more per request than an unscoped one. The store has no aggregate of stored
characters, so this is where they are summed.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memcairn.core.models import ARRAY_FIELDS, TEXT_FIELDS


def _char_expression() -> str:
    """SQL for ``MemoryItem.searchable_chars`` of a row. An array's characters are read off its JSON text
    (each string adds two quotes and a ", " separator: 4 characters), which is exact unless an element holds
    characters JSON escapes, and twice as fast as walking the elements with json_each."""
    text = " + ".join(f"COALESCE(length({f}), 0)" for f in TEXT_FIELDS)
    arrays = " + ".join(
        f"(CASE WHEN {f} = '[]' THEN 0 WHEN json_valid({f}) THEN length({f}) - 4 * json_array_length({f}) "
        f"ELSE COALESCE(length({f}), 0) END)"
        for f in ARRAY_FIELDS
    )
    return f"{text} + {arrays}"


_CHARS = _char_expression()
PLATFORM_CLAUSE = "(platform_source = ? OR platform_source IS NULL)"


@dataclass
class _Count:
    max_id: int
    items: int  # of the chain, on the platform (and of no platform) when one is given
    chars: int
    chain_items: int  # of the chain, every platform: what tells a delete apart from nothing new


def _chain_where(project_ids: Sequence[int] | None, *, index: bool = True) -> tuple[str, list[Any]]:
    if project_ids is None:
        return "1", []
    column = "project_id" if index else "+project_id"  # "+": let SQLite walk ids instead of the project index
    return f"{column} IN ({', '.join('?' for _ in project_ids)})", list(project_ids)


def _platform_where(platform: str | None) -> tuple[str, list[Any]]:
    return (PLATFORM_CLAUSE, [platform]) if platform else ("1", [])


class ChainTotalsMixin:
    _conn: sqlite3.Connection

    def _init_totals(self) -> None:
        self._totals_lock = threading.Lock()
        self._totals: dict[tuple[tuple[int, ...] | None, str | None], _Count] = {}

    def chain_totals(self, project_ids: Sequence[int] | None, platform: str | None = None) -> tuple[int, int]:
        """(items, stored characters) of these projects (every project when None), of ``platform`` and of no
        platform when one is given."""
        if project_ids is not None and not project_ids:
            return 0, 0
        conn = self._conn
        where, params = _chain_where(project_ids)
        scoped, scoped_params = _platform_where(platform)
        counted = (f"SELECT COUNT(*), COALESCE(SUM({scoped}), 0), COALESCE(SUM(CASE WHEN {scoped} THEN {_CHARS} "
                   "ELSE 0 END), 0), COALESCE(MAX(id), 0) FROM memory_items WHERE ")
        key = (tuple(sorted(project_ids)) if project_ids is not None else None, platform or None)
        with self._totals_lock:
            known = self._totals.get(key)
        if known is not None:
            by_id, _ = _chain_where(project_ids, index=False)
            n_all, n, chars, top = conn.execute(f"{counted}{by_id} AND id > ?",
                                                (*scoped_params, *scoped_params, *params, known.max_id)).fetchone()
            top = max(known.max_id, top)
            present = conn.execute(f"SELECT COUNT(*) FROM memory_items WHERE {where}", params).fetchone()[0]
            if present != known.chain_items + n_all:  # rows added since the delta, or deleted: count up to ``top``
                present = conn.execute(f"SELECT COUNT(*) FROM memory_items WHERE {where} AND id <= ?",
                                       (*params, top)).fetchone()[0]
            if present == known.chain_items + n_all:
                fresh = _Count(top, known.items + n, known.chars + chars, present)
                with self._totals_lock:
                    self._totals[key] = fresh
                return fresh.items, fresh.chars
        n_all, n, chars, top = conn.execute(f"{counted}{where}", (*scoped_params, *scoped_params, *params)).fetchone()
        with self._totals_lock:
            self._totals[key] = _Count(top, n, chars, n_all)
        return n, chars

    def window_start(self, project_ids: Sequence[int] | None, window: int, platform: str | None = None) -> int | None:
        """Epoch at or after which the newest ``window`` items of each of these projects (of ``platform`` and of
        no platform when given) lie, the earliest over the projects; None when a project holds fewer."""
        conn = self._conn
        starts = []
        for pid in project_ids if project_ids is not None else (None,):
            where = "project_id = ?" if pid is not None else "1"
            params: list[Any] = [pid] if pid is not None else []
            if platform:
                where, params = f"{where} AND {PLATFORM_CLAUSE}", [*params, platform]
            row = conn.execute(f"SELECT created_at_epoch FROM memory_items WHERE {where} "
                               "ORDER BY created_at_epoch DESC LIMIT 1 OFFSET ?", (*params, window - 1)).fetchone()
            if row is None:  # this project is small: its items all count
                return None
            starts.append(row[0])
        return min(starts)
