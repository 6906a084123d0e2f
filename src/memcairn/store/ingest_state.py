"""Store methods for hook events the worker accepted but has not processed yet (table ``ingest_events``).

An event is committed before the worker answers 202, so an accepted event survives a crash or a restart.
Mixed into ``Store`` so the store stays the only owner of connections and SQL.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from memcairn.store.db import atomic

INGEST_STATUSES: tuple[str, ...] = ("pending", "done", "failed")


@dataclass(frozen=True)
class IngestEvent:
    id: int
    session_id: str
    platform_source: str
    event_type: str
    tool_use_id: str | None
    payload: dict[str, Any]
    status: str
    attempts: int
    created_at_epoch: int
    updated_at_epoch: int


def _row_to_event(row: sqlite3.Row) -> IngestEvent:
    try:
        payload = json.loads(row["payload"])
    except (TypeError, ValueError):
        payload = {"_raw": row["payload"]}
    return IngestEvent(
        id=row["id"], session_id=row["session_id"], platform_source=row["platform_source"],
        event_type=row["event_type"], tool_use_id=row["tool_use_id"],
        payload=payload if isinstance(payload, dict) else {"_raw": payload}, status=row["status"],
        attempts=row["attempts"], created_at_epoch=row["created_at_epoch"], updated_at_epoch=row["updated_at_epoch"],
    )


class IngestStateMixin:
    _conn: sqlite3.Connection

    def enqueue_ingest_event(self, session_id: str, platform_source: str, event_type: str,
                             payload: dict[str, Any], tool_use_id: str | None = None) -> tuple[int, bool]:
        """Record an event as pending; return (id, created). A repeat of a tool event (same session, event
        type and ``tool_use_id``) returns the id recorded first and ``created`` False."""
        now = int(time.time() * 1000)
        body = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)
        with atomic(self._conn) as conn:
            row = conn.execute(
                "INSERT INTO ingest_events(session_id, platform_source, event_type, tool_use_id, payload, "
                "created_at_epoch, updated_at_epoch) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING "
                "RETURNING id",
                (session_id, platform_source, event_type, tool_use_id, body, now, now),
            ).fetchone()
            if row is not None:
                return row[0], True
            existing = conn.execute(
                "SELECT id FROM ingest_events WHERE session_id = ? AND event_type = ? AND tool_use_id = ?",
                (session_id, event_type, tool_use_id),
            ).fetchone()
        return existing[0], False

    def pending_ingest_events(self, limit: int = 100) -> list[IngestEvent]:
        rows = self._conn.execute(
            "SELECT * FROM ingest_events WHERE status = 'pending' ORDER BY id LIMIT ?", (int(limit),)
        ).fetchall()
        return [_row_to_event(r) for r in rows]

    def mark_ingest_event(self, event_id: int, status: str) -> None:
        """Set an event's status (``done`` or ``failed``, or back to ``pending``) and count the attempt."""
        if status not in INGEST_STATUSES:
            raise ValueError(f"unknown ingest status {status!r}; use one of {', '.join(INGEST_STATUSES)}")
        with atomic(self._conn) as conn:
            conn.execute(
                "UPDATE ingest_events SET status = ?, attempts = attempts + 1, updated_at_epoch = ? WHERE id = ?",
                (status, int(time.time() * 1000), int(event_id)),
            )

    def ingest_counts(self) -> dict[str, int]:
        counts = {s: 0 for s in INGEST_STATUSES}
        counts.update({r[0]: r[1] for r in self._conn.execute(
            "SELECT status, COUNT(*) FROM ingest_events GROUP BY status"
        )})
        return counts
