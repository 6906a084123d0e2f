"""The store's own health: SQLite's check of the file, the keyword index's checks and repairs, and the state
a damaged file leaves the store in.

Mixed into ``Store``. Two kinds of damage differ in what can be done about them:

- **The keyword index** (the FTS5 table, its triggers) is derived from ``memory_items``: a dropped table, a
  dropped trigger, a damaged block or content that drifted from the rows (an UPDATE made with the triggers
  off) is repaired by rebuilding it from the rows. Opening the store recreates a missing table; counts that
  differ rebuild it on open; the rest is found by FTS5's ``integrity-check`` (``repair_keyword_index``, what
  ``memcairn doctor --fix`` and the worker's upkeep run). The worker's in-memory copy of the postings
  (``keyword_index``) follows the rows, not the index: one read while the index was sound keeps answering
  right over a damaged index; a rebuild logs a NULL change, so the copy is read again from the repaired index
  (and a copy whose build failed on the damage is started again by ``rebuild_fts``).
- **The file** failing SQLite's ``quick_check`` cannot be repaired in place. The store then refuses writes
  (``StoreDamagedError``, raised by ``db.atomic`` before it takes the write lock), so nothing more is put
  into a file that has to be restored; reads go on as far as the pages allow. ``quick_check`` reads every
  page, so it runs at open only for files up to ``CHECK_AT_OPEN_BYTES`` (milliseconds); larger files are
  checked by the worker in the background, and any store is checked again after SQLite reported a damaged
  page (``on_damage`` listeners hear of it).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memcairn.store import schema
from memcairn.store.db import atomic, error_kind, run_script

log = logging.getLogger("memcairn.store")

# Files up to this size are checked page by page when opened (about 15 ms warm at this size).
CHECK_AT_OPEN_BYTES = 8 * 1024 * 1024

DamageListener = Callable[[str, str], None]


def damaged_file_advice(path: object) -> str:
    """What a person does about a file that fails SQLite's check."""
    return (f"run `memcairn doctor` to see the damage, then move {path} aside and restore it: "
            "`memcairn import jsonl FILE` of a `memcairn export`, a memcairn.db.bak-* copy, or the rows "
            f"`sqlite3 '{path}' .recover | sqlite3 recovered.db` salvages")


class IntegrityMixin:
    _conn: sqlite3.Connection
    path: Path | None
    _local: threading.local
    _keyword_index: Any

    def _init_integrity(self) -> None:
        self.damage: str | None = None  # SQLite's finding while the file fails its check, else None
        self.checked_at: float | None = None  # time.time() of the last whole-file check
        self.repaired_at_open: list[str] = []
        self._damage_listeners: list[DamageListener] = []

    # -- damage state -------------------------------------------------------------------------------
    def add_damage_listener(self, listener: DamageListener) -> None:
        """Call ``listener(kind, detail)`` when SQLite reports damage: ``corrupt`` (a page or the keyword
        index) or ``missing_fts`` (the keyword index's table is gone); or ``full``, a write the disk had no
        room for."""
        self._damage_listeners.append(listener)

    def note_error(self, exc: BaseException) -> str | None:
        """Tell the listeners when ``exc`` is SQLite reporting damage or a full disk; return its kind (None:
        neither)."""
        kind = error_kind(exc)
        if kind is not None:
            for listener in list(self._damage_listeners):
                try:
                    listener(kind, str(exc))
                except Exception:  # a listener must never turn one error into another
                    log.exception("damage listener failed")
        return kind

    def _refuse_writes(self) -> str | None:
        if self.damage is None:
            return None
        return (f"{self.path or 'the database'} fails SQLite's check ({self.damage}), so memcairn refuses to "
                f"write to it (the damage would spread); {damaged_file_advice(self.path)}")

    def _watch(self, conn: sqlite3.Connection) -> None:
        """Hook a new connection up to the write refusal and the damage listeners (``db.StoreConnection``)."""
        if hasattr(conn, "refuse_writes"):
            conn.refuse_writes = self._refuse_writes  # type: ignore[attr-defined]
            conn.on_error = self.note_error  # type: ignore[attr-defined]

    def check_file(self) -> str:
        """Run SQLite's ``quick_check``; a failure (or a file too damaged to check) makes the store refuse
        writes until a check passes again. Returns ``ok`` or the finding."""
        try:
            result = self.quick_check()
        except sqlite3.DatabaseError as exc:
            result = str(exc)
        self.checked_at = time.time()
        if result == "ok":
            if self.damage is not None:
                log.warning("%s passes SQLite's check again; writes are accepted", self.path)
            self.damage = None
        else:
            if self.damage is None:
                log.error("%s fails SQLite's check (%s): writes are refused", self.path, result)
            self.damage = result
        return result

    def _check_small_file(self) -> None:
        if self.path is None or self.checked_at is not None:
            return
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if size <= CHECK_AT_OPEN_BYTES:
            self.check_file()

    # -- the keyword index --------------------------------------------------------------------------
    def _fts_rows(self) -> int:
        """Rows in the keyword index, cached for a few seconds (it only steers query planning)."""
        cached = getattr(self._local, "fts_rows", None)
        now = time.monotonic()
        if cached is None or now - cached[1] > 5.0:
            count = self._conn.execute("SELECT COUNT(*) FROM memory_items_fts_docsize").fetchone()[0]
            cached = (count, now)
            self._local.fts_rows = cached
        return cached[0]

    def fts_counts(self) -> tuple[int, int]:
        conn = self._conn
        items = conn.execute("SELECT COUNT(*) FROM memory_items").fetchone()[0]
        indexed = conn.execute("SELECT COUNT(*) FROM memory_items_fts_docsize").fetchone()[0]
        return items, indexed

    def fts_drift_check(self) -> bool:
        """Cheap check on open: if the index holds a different number of rows, rebuild it. True if rebuilt."""
        items, indexed = self.fts_counts()
        if items == indexed:
            return False
        self.rebuild_fts()
        return True

    def fts_integrity_ok(self) -> bool:
        """FTS5's own check of the index against the table: catches equal counts with wrong content and
        damaged index blocks.

        Raises:
            sqlite3.Error: the check could not run (the database is locked, read-only, ...): that says nothing
                about the index.
        """
        try:
            self._conn.execute("INSERT INTO memory_items_fts(memory_items_fts, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF != sqlite3.SQLITE_CORRUPT:  # index disagrees
                raise
            return False
        return True

    def rebuild_fts(self) -> None:
        with atomic(self._conn) as conn:
            conn.execute("INSERT INTO memory_items_fts(memory_items_fts) VALUES ('rebuild')")
            conn.execute("INSERT INTO keyword_changes(item_id) VALUES (NULL)")  # every row (schema.py)
        self._local.fts_rows = None
        if self._keyword_index is not None:  # a copy that failed to build from a damaged index tries again
            self._rebuild_keyword_index()  # type: ignore[attr-defined]

    def fts_table_missing(self) -> bool:
        return self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'memory_items_fts'").fetchone() is None

    def restore_fts_table(self) -> bool:
        """Recreate a dropped keyword index (table, source view, triggers) and fill it from the rows; True
        when it was missing."""
        if not self.fts_table_missing():
            return False
        with atomic(self._conn) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_items_fts'").fetchone() is not None:
                return False  # another process restored it meanwhile
            run_script(conn, schema.FTS_SOURCE_VIEW)
            run_script(conn, schema.FTS_TABLE)
            run_script(conn, schema.FTS_TRIGGERS)
        log.warning("the keyword index table was missing; recreated it and rebuilt it from the rows")
        self.rebuild_fts()
        return True

    def missing_triggers(self) -> list[str]:
        """Triggers the schema needs that are not in the file (dropped by hand or by an old tool)."""
        present = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        return sorted(set(schema.TRIGGER_NAMES + schema.KEYWORD_TRIGGER_NAMES + schema.REMOTE_TRIGGER_NAMES)
                      - present)

    def repair_triggers(self) -> None:
        with atomic(self._conn) as conn:
            run_script(conn, schema.FTS_TRIGGERS)
            run_script(conn, schema.INTEGRITY_TRIGGERS)
            run_script(conn, schema.MIRROR_TRIGGERS)
            run_script(conn, schema.KEYWORD_CHANGES)
            run_script(conn, schema.REMOTE_DELETIONS)
            run_script(conn, schema.REMOTE_EDITS)

    def repair_keyword_index(self, *, content: bool = True) -> list[str]:
        """What ``memcairn doctor --fix`` does for the keyword index: recreate a missing table or triggers,
        rebuild on a count that differs or, with ``content``, on FTS5's integrity-check failing (a damaged
        block, content that drifted; it holds the write lock while it reads the whole index). Returns what was
        done, empty when all was well."""
        done = []
        if self.restore_fts_table():
            done.append("recreated the missing keyword index table and rebuilt it")
        missing = self.missing_triggers()
        if missing:
            self.repair_triggers()
            done.append(f"recreated triggers {', '.join(missing)}")
        items, indexed = self.fts_counts()
        if items != indexed:
            self.rebuild_fts()
            done.append(f"rebuilt the keyword index ({indexed} indexed vs {items} stored)")
        elif content and not self.fts_integrity_ok():
            self.rebuild_fts()
            done.append("rebuilt the keyword index (it disagreed with the stored rows)")
        return done

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it: on a small disk the WAL holds most of the
        space (it is checkpointed by itself only past 1,000 pages). True when the WAL was emptied."""
        row = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return row is not None and row[0] == 0

    def quick_check(self) -> str:
        """``ok``, or SQLite's first findings about a damaged file, on one line.

        Raises:
            sqlite3.DatabaseError: the file is too damaged for the check itself to run.
        """
        rows = [r[0] for r in self._conn.execute("PRAGMA quick_check(5)")]
        return "; ".join(line for row in rows for line in str(row).splitlines() if not line.startswith("***"))
