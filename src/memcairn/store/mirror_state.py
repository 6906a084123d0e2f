"""Store methods the semantic mirror needs: watermarks, the outbox, and items in id order.

Mixed into ``Store`` so the store stays the only owner of connections and SQL.
"""

from __future__ import annotations

import sqlite3

from memcairn.core.clock import now_ms
from memcairn.store.db import atomic
from memcairn.store.records import OutboxEntry


class MirrorStateMixin:
    _conn: sqlite3.Connection

    def watermarks(self, index_key: str) -> dict[tuple[str, str], int]:
        rows = self._conn.execute(
            "SELECT project, kind, watermark FROM vector_sync_state WHERE index_key = ?", (index_key,)
        )
        return {(r[0], r[1]): r[2] for r in rows}

    def advance_watermark(self, index_key: str, project: str, kind: str, value: int) -> int:
        """Move the watermark up to ``value`` (never down); return the stored value."""
        with atomic(self._conn) as conn:
            row = conn.execute(
                "INSERT INTO vector_sync_state(index_key, project, kind, watermark, updated_at_epoch) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(index_key, project, kind) DO UPDATE SET "
                "watermark = max(watermark, excluded.watermark), updated_at_epoch = excluded.updated_at_epoch "
                "RETURNING watermark",
                (index_key, project, kind, int(value), now_ms()),
            ).fetchone()
        return row[0]

    def set_watermark(self, index_key: str, project: str, kind: str, value: int) -> None:
        """Set the watermark outright: bootstrap from the index, or lower it when the index lost documents."""
        with atomic(self._conn) as conn:
            conn.execute(
                "INSERT INTO vector_sync_state(index_key, project, kind, watermark, updated_at_epoch) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(index_key, project, kind) DO UPDATE SET "
                "watermark = excluded.watermark, updated_at_epoch = excluded.updated_at_epoch",
                (index_key, project, kind, int(value), now_ms()),
            )

    def clear_watermarks(self, index_key: str | None = None) -> None:
        with atomic(self._conn) as conn:
            if index_key is None:
                conn.execute("DELETE FROM vector_sync_state")
            else:
                conn.execute("DELETE FROM vector_sync_state WHERE index_key = ?", (index_key,))

    def mirror_extent(self) -> dict[tuple[str, str], int]:
        """Highest item id per (project, kind): what a complete mirror would hold."""
        rows = self._conn.execute(
            "SELECT p.name, m.kind, MAX(m.id) FROM memory_items m JOIN projects p ON p.id = m.project_id "
            "GROUP BY p.name, m.kind"
        )
        return {(r[0], r[1]): r[2] for r in rows}

    def count_after(self, project: str, kind: str, after_id: int) -> int:
        return self._conn.execute(
            "SELECT COUNT(*) FROM memory_items m JOIN projects p ON p.id = m.project_id "
            "WHERE p.name = ? AND m.kind = ? AND m.id > ?",
            (project, kind, after_id),
        ).fetchone()[0]

    def ids_after(self, project: str, kind: str, after_id: int, limit: int) -> list[int]:
        rows = self._conn.execute(
            "SELECT m.id FROM memory_items m JOIN projects p ON p.id = m.project_id "
            "WHERE p.name = ? AND m.kind = ? AND m.id > ? ORDER BY m.id LIMIT ?",
            (project, kind, after_id, limit),
        )
        return [r[0] for r in rows]

    def outbox(self, limit: int = 500) -> list[OutboxEntry]:
        rows = self._conn.execute(
            "SELECT id, item_id, project, op FROM mirror_outbox ORDER BY id LIMIT ?", (limit,)
        )
        return [OutboxEntry(*r) for r in rows]

    def outbox_size(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM mirror_outbox").fetchone()[0]

    def ack_outbox(self, entry_ids: list[int]) -> None:
        if not entry_ids:
            return
        with atomic(self._conn) as conn:
            conn.executemany("DELETE FROM mirror_outbox WHERE id = ?", [(i,) for i in entry_ids])

    def clear_outbox(self) -> None:
        with atomic(self._conn) as conn:
            conn.execute("DELETE FROM mirror_outbox")
