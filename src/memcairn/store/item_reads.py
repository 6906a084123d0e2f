"""Reads of memories: rows by id, the SQL of a filter, lists and counts, neighbours in time, what changed since.
Mixed into ``Store`` so the store stays the only owner of connections and SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from memcairn.core import serde
from memcairn.core.fields import FIELDS
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store.records import only_item

_SELECT_ITEMS = """
SELECT m.*, p.name AS project, p.merged_into_project AS merged_into_project,
       s.agent_session_id AS session
FROM memory_items m
JOIN projects p ON p.id = m.project_id
LEFT JOIN sessions s ON s.id = m.session_id
"""


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class ItemReadsMixin:
    _conn: sqlite3.Connection
    resolve_project_ids: Callable[[Sequence[str]], list[int]]

    @staticmethod
    def _row_to_item(row: sqlite3.Row) -> MemoryItem:
        return MemoryItem(
            id=row["id"], uuid=row["uuid"], project=row["project"],
            merged_into_project=row["merged_into_project"], session=row["session"], kind=row["kind"],
            type=row["type"], **{f.name: f.from_column(row[f.name]) for f in FIELDS},
            content_hash=row["content_hash"], created_at_epoch=row["created_at_epoch"],
            updated_at_epoch=row["updated_at_epoch"],
        )

    def get_item(self, item_id: int) -> MemoryItem:
        return only_item(self.get_items([item_id]), item_id)

    def get_items(self, ids: Sequence[int]) -> list[MemoryItem]:
        """Items for these ids in the order asked; unknown ids are left out (compare to report them)."""
        wanted = [int(i) for i in ids]
        if not wanted:
            return []
        by_id: dict[int, MemoryItem] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            rows = self._conn.execute(
                f"{_SELECT_ITEMS} WHERE m.id IN ({', '.join('?' for _ in chunk)})", chunk
            ).fetchall()
            by_id.update((r["id"], self._row_to_item(r)) for r in rows)
        return [by_id[i] for i in dict.fromkeys(wanted) if i in by_id]

    def _where(self, flt: ItemFilter | None) -> tuple[list[str], list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if flt is None:
            return clauses, params
        if flt.projects is not None:
            ids = self.resolve_project_ids(list(flt.projects))
            if not ids:
                clauses.append("0")
            else:
                clauses.append(f"m.project_id IN ({', '.join('?' for _ in ids)})")
                params += ids
        for column, values in (("m.kind", flt.kinds), ("m.type", flt.types)):
            if values:
                clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
                params += list(values)
        if flt.concepts:
            marks = ", ".join("?" for _ in flt.concepts)
            clauses.append(
                "CASE WHEN json_valid(m.concepts) THEN EXISTS (SELECT 1 FROM json_each(m.concepts) "
                f"WHERE json_each.value IN ({marks})) ELSE 0 END"
            )
            params += list(flt.concepts)
        if flt.files:
            parts = []
            for f in flt.files:
                # The columns hold JSON arrays, where a backslash or a double quote is escaped
                # (C:\src is stored as C:\\src): match the path as it is written there.
                pattern = f"%{_like_escape(serde.dump_array([f])[2:-2])}%"
                parts.append("(m.files_read LIKE ? ESCAPE '\\' OR m.files_modified LIKE ? ESCAPE '\\')")
                params += [pattern, pattern]
            clauses.append("(" + " OR ".join(parts) + ")")
        if flt.date_start is not None:
            clauses.append("m.created_at_epoch >= ?")
            params.append(flt.date_start)
        if flt.date_end is not None:
            clauses.append("m.created_at_epoch <= ?")
            params.append(flt.date_end)
        if flt.platform_source:
            clauses.append("(m.platform_source = ? OR m.platform_source IS NULL)" if flt.platform_source_or_none
                           else "m.platform_source = ?")
            params.append(flt.platform_source)
        if flt.session:
            clauses.append("s.agent_session_id = ?")
            params.append(flt.session)
        return clauses, params

    def list_items(self, flt: ItemFilter | None = None, *, order: str = "newest", limit: int = 50,
                   offset: int = 0) -> list[MemoryItem]:
        clauses, params = self._where(flt)
        direction = "ASC" if order == "oldest" else "DESC"
        sql = _SELECT_ITEMS + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
        sql += f" ORDER BY m.created_at_epoch {direction}, m.id {direction} LIMIT ? OFFSET ?"
        rows = self._conn.execute(sql, (*params, int(limit), int(offset))).fetchall()
        return [self._row_to_item(r) for r in rows]

    def count_items(self, flt: ItemFilter | None = None) -> int:
        clauses, params = self._where(flt)
        sql = ("SELECT COUNT(*) FROM memory_items m JOIN projects p ON p.id = m.project_id "
               "LEFT JOIN sessions s ON s.id = m.session_id")
        sql += f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._conn.execute(sql, params).fetchone()[0]

    def filter_ids(self, ids: Sequence[int], flt: ItemFilter | None) -> set[int]:
        """The subset of ``ids`` that pass the filter."""
        return set(self.created_epochs(ids, flt))

    def created_epochs(self, ids: Sequence[int], flt: ItemFilter | None = None) -> dict[int, int]:
        """``created_at_epoch`` of each of ``ids`` that exists and passes the filter: what a search needs to
        fuse and order its candidates before it reads the whole rows of the page it shows."""
        if not ids:
            return {}
        clauses, params = self._where(flt)
        joins = ("JOIN projects p ON p.id = m.project_id LEFT JOIN sessions s ON s.id = m.session_id "
                 if clauses else "")
        out: dict[int, int] = {}
        for start in range(0, len(ids), 500):
            chunk = [int(i) for i in ids[start:start + 500]]
            where = [f"m.id IN ({', '.join('?' for _ in chunk)})", *clauses]
            # NOT INDEXED: look the ids up by rowid. Left to itself the planner reads the project's index for
            # a project filter, every row of the project (4.5 ms instead of 0.1 at 5,000 rows a project).
            sql = (f"SELECT m.id, m.created_at_epoch FROM memory_items m NOT INDEXED {joins}"
                   f"WHERE {' AND '.join(where)}")
            out.update(self._conn.execute(sql, (*chunk, *params)).fetchall())
        return out

    def neighbours(self, epoch: int, *, before: int, after: int, flt: ItemFilter | None = None,
                   anchor_id: int | None = None) -> tuple[list[MemoryItem], list[MemoryItem]]:
        """Items just before and at-or-after a point in time (oldest first in both lists).

        With ``anchor_id`` the anchor item is the first of ``after``; ties in time break by id.
        """
        clauses, params = self._where(flt)
        key = anchor_id if anchor_id is not None else -1
        where = " AND ".join(clauses) if clauses else "1"
        earlier = self._conn.execute(
            f"{_SELECT_ITEMS} WHERE {where} AND (m.created_at_epoch < ? OR (m.created_at_epoch = ? AND m.id < ?)) "
            "ORDER BY m.created_at_epoch DESC, m.id DESC LIMIT ?",
            (*params, epoch, epoch, key, int(before)),
        ).fetchall()
        later = self._conn.execute(
            f"{_SELECT_ITEMS} WHERE {where} AND (m.created_at_epoch > ? OR (m.created_at_epoch = ? AND m.id >= ?)) "
            "ORDER BY m.created_at_epoch ASC, m.id ASC LIMIT ?",
            (*params, epoch, epoch, key, int(after)),
        ).fetchall()
        return [self._row_to_item(r) for r in reversed(earlier)], [self._row_to_item(r) for r in later]

    def stored_since(self, projects: Sequence[str] | None, epoch_ms: int, *,
                     besides_session: tuple[str, str] | None = None) -> bool:
        """Whether any item of these projects (every project when None) was stored, edited or deleted after
        ``epoch_ms``, leaving out the items ``besides_session`` (platform, agent session id) stored: what a
        session captured itself is in its own conversation already. (A delete is anyone's.)

        Stored, not only created: an item's ``created_at_epoch`` is when its event happened (a transcript
        replay's line, a claude-mem row, a capture that waited in the queue), which can be long before it
        reached the store; ``updated_at_epoch`` is set by this machine's clock when it is written or edited.
        (A JSONL import keeps the update time of its file: such an item counts by its own times only.) Both
        times are indexed and the project is only checked on the rows they find (``+``), so this reads the
        rows written since, not the projects' rows (0.01 instead of 20 ms at 100k items)."""
        since = int(epoch_ms)
        where = ["(m.created_at_epoch > ? OR m.updated_at_epoch > ?)"]
        params: list[Any] = [since, since]
        forgotten = "SELECT 1 FROM forgotten_items f WHERE f.forgotten_at_epoch > ?"
        forgotten_params: list[Any] = [since]
        if projects:
            ids = self.resolve_project_ids(list(projects))
            if not ids:
                return False
            marks = ", ".join("?" for _ in ids)
            where.append(f"+m.project_id IN ({marks})")
            params += ids
            forgotten += f" AND f.project_id IN ({marks})"
            forgotten_params += ids
        if besides_session is not None:
            where.append("(m.session_id IS NULL OR m.session_id != COALESCE((SELECT s.id FROM sessions s WHERE "
                         "s.platform_source = ? AND s.agent_session_id = ?), -1))")
            params += list(besides_session)
        row = self._conn.execute(f"SELECT 1 FROM memory_items m WHERE {' AND '.join(where)} LIMIT 1",
                                 params).fetchone()
        if row is None:
            row = self._conn.execute(f"{forgotten} LIMIT 1", forgotten_params).fetchone()
        return row is not None
