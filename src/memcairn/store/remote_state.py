"""Store methods the team server forwarder needs: its watermark per server, the items above it, the deletions
and edits still to send (``schema.REMOTE_DELETIONS``, ``schema.REMOTE_EDITS``).

Mixed into ``Store`` so the store stays the only owner of connections and SQL.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from memcairn.core.clock import now_ms
from memcairn.core.fields import FIELD
from memcairn.store.db import atomic


class RemoteStateMixin:
    _conn: sqlite3.Connection

    def remote_watermark(self, server: str) -> int:
        row = self._conn.execute("SELECT watermark FROM remote_sync_state WHERE server = ?", (server,)).fetchone()
        return int(row[0]) if row else 0

    def acknowledge_forwarded(self, server: str, last_id: int, sent: dict[int, dict[str, Any]]) -> int:
        """In one transaction: move the watermark up to ``last_id`` and keep the event sent for each item of
        ``sent`` (``{item id: event}``), marked to be compared once with the item as it is now (an edit while
        the batch was on its way); for an item deleted meanwhile, queue its deletion at once. Returns the
        watermark."""
        now = now_ms()
        with atomic(self._conn) as conn:
            row = conn.execute(
                "INSERT INTO remote_sync_state(server, watermark, updated_at_epoch) VALUES (?, ?, ?) "
                "ON CONFLICT(server) DO UPDATE SET watermark = max(watermark, excluded.watermark), "
                "updated_at_epoch = excluded.updated_at_epoch RETURNING watermark", (server, int(last_id), now)
            ).fetchone()
            for item_id, event in sent.items():
                if conn.execute("SELECT 1 FROM memory_items WHERE id = ?", (item_id,)).fetchone():
                    conn.execute("INSERT OR REPLACE INTO remote_sent(server, item_id, event) VALUES (?, ?, ?)",
                                 (server, item_id, json.dumps(event)))
                    # edited while on its way (the trigger saw no sent row yet)? the forwarder compares once
                    conn.execute("INSERT OR IGNORE INTO remote_edited(server, item_id) VALUES (?, ?)",
                                 (server, item_id))
                else:
                    conn.execute("INSERT INTO remote_deletions(server, item_id, event, queued_at_epoch) "
                                 "VALUES (?, ?, ?, ?)", (server, item_id, json.dumps(event), now))
        return int(row[0])

    def deletions_to_forward(self, server: str, limit: int) -> list[tuple[int, int, dict[str, Any]]]:
        """The oldest deletions still to send to ``server``: (seq, item id, the event the server acknowledged)."""
        return [(int(seq), int(item_id), json.loads(event)) for seq, item_id, event in self._conn.execute(
            "SELECT seq, item_id, event FROM remote_deletions WHERE server = ? ORDER BY seq LIMIT ?",
            (server, limit))]

    def deletions_forwarded(self, server: str, seqs: list[int]) -> None:
        with atomic(self._conn) as conn:
            conn.executemany("DELETE FROM remote_deletions WHERE server = ? AND seq = ?",
                             [(server, int(seq)) for seq in seqs])

    def edits_to_forward(self, server: str, limit: int) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
        """Sent memories edited since: (item id, the event the server acknowledged, the item as
        ``items_to_forward`` gives it now, None when it is gone)."""
        marked = self._conn.execute(
            "SELECT e.item_id, s.event FROM remote_edited e LEFT JOIN remote_sent s ON s.server = e.server AND"
            " s.item_id = e.item_id WHERE e.server = ? ORDER BY e.item_id LIMIT ?", (server, limit)).fetchall()
        current = {r["id"]: r for r in self._forward_rows([int(i) for i, _ in marked])}
        return [(int(i), json.loads(event) if event else {}, current.get(int(i))) for i, event in marked]

    def edit_forwarded(self, server: str, item_id: int, event: dict[str, Any] | None) -> None:
        """Drop the edit mark; with ``event``, the server now holds that version."""
        with atomic(self._conn) as conn:
            conn.execute("DELETE FROM remote_edited WHERE server = ? AND item_id = ?", (server, item_id))
            if event is not None:
                conn.execute("UPDATE remote_sent SET event = ? WHERE server = ? AND item_id = ?",
                             (json.dumps(event), server, item_id))

    def count_deletions_to_forward(self, server: str) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM remote_deletions WHERE server = ?",
                                      (server,)).fetchone()[0])

    def items_to_forward(self, after_id: int, limit: int) -> list[dict[str, Any]]:
        """Items above ``after_id`` in id order, with what a team server keeps of them."""
        return self._forward_rows(None, after_id, limit)

    def _forward_rows(self, ids: list[int] | None, after_id: int = 0, limit: int = 0) -> list[dict[str, Any]]:
        """``items_to_forward``'s records, of these ids (any order) or of the ids above ``after_id``."""
        where = (f"m.id IN ({','.join('?' * len(ids))})", ids) if ids is not None else (
            "m.id > ? ORDER BY m.id LIMIT ?", [after_id, limit])
        if ids is not None and not ids:
            return []
        rows = self._conn.execute(
            "SELECT m.id, m.uuid, p.name, s.agent_session_id, m.kind, m.type, m.title, m.text, m.narrative, "
            "m.facts, m.learned, m.completed, m.next_steps, m.platform_source, m.content_hash, m.created_at_epoch, "
            "m.anchors "
            "FROM memory_items m JOIN projects p ON p.id = m.project_id "
            f"LEFT JOIN sessions s ON s.id = m.session_id WHERE {where[0]}", where[1])
        keys = ("id", "uuid", "project", "session", "kind", "type", "title", "text", "narrative", "facts", "learned",
                "completed", "next_steps", "platform_source", "content_hash", "created_at_epoch", "anchors")
        return [forward_record(dict(zip(keys, r, strict=True))) for r in rows]

    def count_to_forward(self, after_id: int) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM memory_items WHERE id > ?", (after_id,)).fetchone()[0])


def forward_record(row: dict[str, Any]) -> dict[str, Any]:
    """What a team server keeps of an item (its columns by name): its text fields joined in one text."""
    parts: list[str] = []
    for value in (row["text"], row["narrative"], *_facts(row["facts"]), row["learned"], row["completed"],
                  row["next_steps"]):
        if value and value.strip() and value not in parts:
            parts.append(value)
    return {"id": row["id"], "uuid": row["uuid"], "project": row["project"], "session": row["session"],
            "kind": row["kind"], "type": row["type"], "title": row["title"],
            "text": "\n".join(parts) or row["title"] or "", "platform": row["platform_source"],
            "content_hash": row["content_hash"], "created_at_epoch": row["created_at_epoch"],
            "anchors": FIELD["anchors"].from_column(row["anchors"])}


def _facts(raw: str | None) -> list[str]:
    try:
        values = json.loads(raw or "[]")
    except ValueError:
        return []
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []
