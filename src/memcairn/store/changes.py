"""A reader of the ``keyword_changes`` log for code outside the store (the worker's live stream).

Triggers add one entry per insert, update or delete of ``memory_items`` (``schema.py``), from any process;
a NULL ``item_id`` says the FTS index was rebuilt (no item changed). ``ChangeLog`` reads it on a dedicated
read-only connection to the store's file, so a poll never queues behind, or holds up, a writer:

- ``data_version()``: ``PRAGMA data_version``, which changes when any *other* connection commits (any
  process, and the store's own connections too). Reading it touches no table: the idle check.
- ``read_since(after, max_rows)``: in one read transaction (one snapshot), the last entry, the distinct item
  ids of the entries past ``after`` (at most ``max_rows`` entries are read; more than that is reported as
  ``overflow`` without reading them), the ``(updated_at_epoch, content_hash)`` of those that still exist, and
  the highest item id.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from memcairn.store.db import BUSY_TIMEOUT_MS

_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit


@dataclass(frozen=True)
class ChangeBatch:
    last_seq: int                  # the newest entry of the log (0 when empty)
    max_item_id: int               # the highest memory_items id in the same snapshot
    overflow: bool = False         # more than ``max_rows`` entries, the log pruned past ``after`` or reset
    item_ids: list[int] = field(default_factory=list)  # distinct, in the order first changed
    states: dict[int, tuple[int, str]] = field(default_factory=dict)  # id -> (updated_at_epoch, content_hash)


class ChangeLog:
    """Read-only tail of ``keyword_changes`` for the store file at ``path``."""

    def __init__(self, path: Path | str) -> None:
        self._conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                     check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._conn.execute("PRAGMA query_only = ON")
            self._conn.execute("SELECT 1 FROM keyword_changes LIMIT 1").fetchall()
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def position(self) -> tuple[int, int]:
        """(the newest log entry, the highest item id), read in one snapshot."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            return self._last_seq(conn), self._max_item_id(conn)
        finally:
            conn.execute("COMMIT")

    def read_since(self, after: int, max_rows: int) -> ChangeBatch:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            last = self._last_seq(conn)
            top_id = self._max_item_id(conn)
            if last == after:
                return ChangeBatch(last, top_id)
            oldest = conn.execute("SELECT MIN(seq) FROM keyword_changes").fetchone()[0]
            if last < after or last - after > max_rows or (oldest is not None and oldest > after + 1):
                return ChangeBatch(last, top_id, overflow=True)
            ids = list(dict.fromkeys(
                r[0] for r in conn.execute(
                    "SELECT item_id FROM keyword_changes WHERE seq > ? AND seq <= ? AND item_id IS NOT NULL "
                    "ORDER BY seq", (after, last))
            ))
            states: dict[int, tuple[int, str]] = {}
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for r in conn.execute(
                        f"SELECT id, updated_at_epoch, content_hash FROM memory_items WHERE id IN ({marks})", chunk):
                    states[r[0]] = (r[1], r[2])
            return ChangeBatch(last, top_id, item_ids=ids, states=states)
        finally:
            conn.execute("COMMIT")

    @staticmethod
    def _last_seq(conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT seq FROM keyword_changes ORDER BY seq DESC LIMIT 1").fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def _max_item_id(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM memory_items").fetchone()[0])
