"""Store methods the team server forwarder needs: its watermark per server and the items above it.

Mixed into ``Store`` so the store stays the only owner of connections and SQL.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from memcairn.store.db import atomic


class RemoteStateMixin:
    _conn: sqlite3.Connection

    def remote_watermark(self, server: str) -> int:
        row = self._conn.execute("SELECT watermark FROM remote_sync_state WHERE server = ?", (server,)).fetchone()
        return int(row[0]) if row else 0

    def advance_remote_watermark(self, server: str, value: int) -> int:
        """Move the server's watermark up to ``value`` (never down); return the stored value."""
        with atomic(self._conn) as conn:
            row = conn.execute(
                "INSERT INTO remote_sync_state(server, watermark, updated_at_epoch) VALUES (?, ?, ?) "
                "ON CONFLICT(server) DO UPDATE SET watermark = max(watermark, excluded.watermark), "
                "updated_at_epoch = excluded.updated_at_epoch RETURNING watermark",
                (server, int(value), int(time.time() * 1000))).fetchone()
        return int(row[0])

    def items_to_forward(self, after_id: int, limit: int) -> list[dict[str, Any]]:
        """Items above ``after_id`` in id order, with what a team server keeps of them."""
        rows = self._conn.execute(
            "SELECT m.id, m.uuid, p.name, s.agent_session_id, m.kind, m.type, m.title, m.text, m.narrative, "
            "m.facts, m.learned, m.completed, m.next_steps, m.platform_source, m.content_hash, m.created_at_epoch "
            "FROM memory_items m JOIN projects p ON p.id = m.project_id "
            "LEFT JOIN sessions s ON s.id = m.session_id WHERE m.id > ? ORDER BY m.id LIMIT ?",
            (after_id, limit))
        out = []
        for r in rows:
            parts: list[str] = []
            for value in (r[7], r[8], *_facts(r[9]), r[10], r[11], r[12]):
                if value and value.strip() and value not in parts:
                    parts.append(value)
            out.append({"id": r[0], "uuid": r[1], "project": r[2], "session": r[3], "kind": r[4], "type": r[5],
                        "title": r[6], "text": "\n".join(parts) or r[6] or "", "platform": r[13],
                        "content_hash": r[14], "created_at_epoch": r[15]})
        return out

    def count_to_forward(self, after_id: int) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM memory_items WHERE id > ?", (after_id,)).fetchone()[0])


def _facts(raw: str | None) -> list[str]:
    try:
        values = json.loads(raw or "[]")
    except ValueError:
        return []
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []
