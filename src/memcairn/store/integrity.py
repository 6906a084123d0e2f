"""The store's own health: SQLite's check of the file, the keyword index's checks and repairs, and the state
a damaged file leaves the store in.

Mixed into ``Store``. Two kinds of damage differ in what can be done about them:

- **The keyword index** (the FTS5 table, its triggers) is derived from ``memory_items``: a dropped table, a
  dropped trigger, a damaged block or content that drifted from the rows (an UPDATE made with the triggers
  off) is repaired by rebuilding it from the rows. Opening the store recreates a missing table; counts that
  differ rebuild it on open; a write that finds the table gone recreates it and runs again
  (``restores_keyword_table``); the rest is found by FTS5's ``integrity-check`` (``repair_keyword_index``, what
  ``memcairn doctor --fix`` and the worker's upkeep run), or by a search: a damaged block may read as an empty
  posting list instead of an error, so a keyword search that fills no page checks the rows' text for its words
  against the index that answered (``keyword_probe``). The worker's in-memory copy of the postings
  (``keyword_index``) follows the rows, not the index: one read while the index was sound keeps answering
  right over a damaged index; a rebuild logs a NULL change, so the copy is read again from the repaired index
  (and a copy whose build failed on the damage is started again by ``rebuild_fts``).
- **The file** failing SQLite's ``quick_check`` cannot be repaired in place. The store then refuses writes
  (``StoreDamagedError``, raised by ``db.atomic`` before it takes the write lock), so nothing more is put
  into a file that has to be restored; reads go on as far as the pages allow. ``quick_check`` reads every
  page, so it runs at open only for files up to ``CHECK_AT_OPEN_BYTES`` (milliseconds); larger files are
  checked by the worker in the background, and any store is checked again after SQLite reported a damaged
  page or an I/O error (the damage listeners hear of it): the next write checks the file first, or waits for
  the check that runs, so no write is acknowledged into a file known to be suspect.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from memcairn.store import fts, schema
from memcairn.store.db import atomic, error_kind, run_script

log = logging.getLogger("memcairn.store")

# Files up to this size are checked page by page when opened (about 15 ms warm at this size).
CHECK_AT_OPEN_BYTES = 8 * 1024 * 1024

DamageListener = Callable[[str, str], None]
P = ParamSpec("P")
R = TypeVar("R")

# The keyword probe (``keyword_probe``): rows of the newest PROBE_ROWS whose text holds a query word, at most
# PROBE_SAMPLE of them, are tokenised as FTS5 would and looked up in the index that answered.
PROBE_ROWS = 500
PROBE_SAMPLE = 8
PROBE_WORDS = 8


def restores_keyword_table(write: Callable[P, R]) -> Callable[P, R]:
    """A write that fires the keyword index's triggers: when the index's table was dropped under a running
    process, recreate and rebuild it as opening the store does, then run the write once more (it was rolled
    back whole), instead of failing the write until someone runs ``memcairn doctor --fix``."""

    @functools.wraps(write)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return write(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            store: Any = args[0]
            # SQLite does not always name the table that is missing: a statement compiled against a schema another
            # connection changed can report any table it touches. The keyword table's absence is checked instead.
            if error_kind(exc) != "missing_fts" and not ("no such table" in str(exc) and store.fts_table_missing()):
                raise
            store.restore_fts_table()  # False when another thread (the upkeep) restored it first
            if store.fts_table_missing():
                raise
            log.warning("a write found the keyword index table missing; recreated it and wrote again")
            return write(*args, **kwargs)

    return run


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
        self._suspect: str | None = None  # SQLite reported damage and no check ran since: the next write checks
        self._reports = 0  # damage reports so far: a check clears ``_suspect`` only if none came while it ran
        self._check_lock = threading.RLock()  # one check at a time; a write waits for one that runs
        self.keyword_disagreement: str | None = None  # what the keyword probe found, until a rebuild

    # -- damage state -------------------------------------------------------------------------------
    def add_damage_listener(self, listener: DamageListener) -> None:
        """Call ``listener(kind, detail)`` when SQLite reports damage: ``corrupt`` (a page or the keyword
        index) or ``missing_fts`` (the keyword index's table is gone); or ``full``, a write the disk had no
        room for."""
        self._damage_listeners.append(listener)

    def note_error(self, exc: BaseException) -> str | None:
        """Tell the listeners when ``exc`` is SQLite reporting damage or a full disk; return its kind (None:
        neither). Reported damage makes the next write check the file first (``_refuse_writes``)."""
        kind = error_kind(exc)
        if kind == "corrupt":
            self._reports += 1
            self._suspect = str(exc)
        if kind is not None:
            self._tell(kind, str(exc))
        return kind

    def _tell(self, kind: str, detail: str) -> None:
        for listener in list(self._damage_listeners):
            try:
                listener(kind, detail)
            except Exception:  # a listener must never turn one error into another
                log.exception("damage listener failed")

    def _refuse_writes(self) -> str | None:
        if self.damage is None and self._suspect is not None:
            # SQLite reported damage (a page, an I/O error) since the last check: check before this write
            # (or wait for the check that runs) rather than after the next timer, so nothing is acknowledged
            # into a file that fails the check.
            with self._check_lock:
                if self._suspect is not None and self.damage is None:
                    self.check_file()
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
        with self._check_lock:
            reports = self._reports
            try:
                result = self.quick_check()
            except sqlite3.DatabaseError as exc:
                result = str(exc)
            self._record_check(result)
            if self._reports == reports:  # damage reported while the check ran is checked again
                self._suspect = None
        return result

    def _record_check(self, result: str) -> None:
        self.checked_at = time.time()
        if result == "ok":
            if self.damage is not None:
                log.warning("%s passes SQLite's check again; writes are accepted", self.path)
            self.damage = None
        else:
            if self.damage is None:
                log.error("%s fails SQLite's check (%s): writes are refused", self.path, result)
            self.damage = result

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
        self.keyword_disagreement = None
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
        found = self.keyword_disagreement
        if items != indexed:
            self.rebuild_fts()
            done.append(f"rebuilt the keyword index ({indexed} indexed vs {items} stored)")
        elif found is not None:  # rebuilt whatever FTS5's own check says: the copy may be what was wrong
            self.rebuild_fts()
            done.append(f"rebuilt the keyword index ({found})")
        elif content and not self.fts_integrity_ok():
            self.rebuild_fts()
            done.append("rebuilt the keyword index (it disagreed with the stored rows)")
        return done

    # -- the keyword probe ----------------------------------------------------------------------------
    def keyword_probe(self, tokens: Sequence[str], copy: Any = None) -> str | None:
        """Check the index that answered a keyword search against the rows' text; what disagrees, or None.

        A damaged FTS5 block may read as an empty posting list rather than an error, so a search would find
        nothing and say nothing. This reads the newest ``PROBE_ROWS`` rows' text for the query's words (a
        substring scan that stops at ``PROBE_SAMPLE`` rows), tokenises those rows as FTS5 does, and asks the
        index that answered (``copy``: the in-memory copy's state and its terms, else FTS5 itself) which of
        them hold each word. A verdict of ok is kept per connection until another connection commits
        (``PRAGMA data_version``): damage comes with a write. ``KeywordIndexDamagedError`` is the caller's.

        Raises:
            sqlite3.DatabaseError: the index could not be read (the caller reports that as damage).
        """
        words = [t for t in tokens if len(t) > 1][:PROBE_WORDS]
        if not words:
            return None
        conn = self._conn
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        verified = getattr(self._local, "probed", None)
        key = (frozenset(words), copy is not None)
        if verified is not None and verified[0] == version and key in verified[1]:
            return None
        found = self._probe(conn, words, copy)
        if found is None:
            if verified is None or verified[0] != version or len(verified[1]) > 1000:
                verified = (version, set())
                self._local.probed = verified
            verified[1].add(key)
        return found

    def note_keyword_disagreement(self, found: str) -> None:
        """Remember what the probe found (the next repair rebuilds the index whatever FTS5's own check says)
        and tell the damage listeners (``keyword_damaged``)."""
        if self.keyword_disagreement is None:
            log.error("the keyword index disagrees with the stored rows: %s", found)
        self.keyword_disagreement = found
        self._tell("keyword_damaged", found)

    def _probe(self, conn: sqlite3.Connection, words: list[str], copy: Any) -> str | None:
        began = not conn.in_transaction
        if began:  # the rows' text and the index from one snapshot: a write meanwhile is no disagreement
            conn.execute("BEGIN")
        try:
            ids = self._probe_sample(conn, words)
            if copy is not None and ids:
                ids = _known_to_copy(conn, copy[0], ids)
            if not ids:
                return None
            expected = _tokenised_holding(conn, words, ids)
            if copy is not None:
                state, terms = copy
                actual = {w: set(ids) & {int(d) for d in state.postings(terms[w])[0]} if w in terms
                          else set(expected[w]) for w in words}
            else:
                actual = fts.rows_holding(conn, words, ids)
        finally:
            if began:
                conn.execute("COMMIT")
        for word in words:
            missing = expected[word] - actual[word]
            if missing:
                where = "the in-memory copy of the keyword index" if copy is not None else "the keyword index"
                return (f"memory {min(missing)} holds {word!r} but {where} does not list it "
                        f"({len(missing)} of {len(expected[word])} such rows checked)")
        return None

    @staticmethod
    def _probe_sample(conn: sqlite3.Connection, words: list[str]) -> list[int]:
        """The newest rows (of the last ``PROBE_ROWS``) whose text holds one of the words, at most ``PROBE_SAMPLE``."""
        top = conn.execute("SELECT MAX(id) FROM memory_items").fetchone()[0] or 0
        # a LIKE per column: ten times cheaper than one over the columns joined (no string built per row)
        likes = " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for _ in words for c in schema.FTS_COLUMNS)
        patterns = [f"%{_like_escape(w)}%" for w in words for _ in schema.FTS_COLUMNS]
        rows = conn.execute(f"SELECT id FROM memory_items WHERE id > ? AND ({likes}) ORDER BY id DESC LIMIT ?",
                            (top - PROBE_ROWS, *patterns, PROBE_SAMPLE)).fetchall()
        return [int(r[0]) for r in rows]

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


def _like_escape(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _tokenised_holding(conn: sqlite3.Connection, words: Sequence[str], ids: Sequence[int]) -> dict[str, set[int]]:
    """Which of the rows ``ids`` hold each word as FTS5 would match it: the rows tokenised again in a temp
    FTS5 table with the index's columns and tokenizer."""
    columns = ("fts_scope", *schema.FTS_COLUMNS)
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.keyword_probe USING fts5({', '.join(columns)}, "
                 "tokenize='porter unicode61')")
    marks = ", ".join("?" for _ in ids)
    try:
        conn.execute(f"INSERT INTO temp.keyword_probe(rowid, {', '.join(columns)}) "
                     f"SELECT id, {', '.join(columns)} FROM memory_items_fts_source WHERE id IN ({marks})", list(ids))
        return {w: {r[0] for r in conn.execute("SELECT rowid FROM temp.keyword_probe WHERE keyword_probe MATCH ?",
                                               ('"' + w.replace('"', '""') + '"',))} for w in words}
    finally:
        conn.execute("DELETE FROM temp.keyword_probe")


def _known_to_copy(conn: sqlite3.Connection, state: Any, ids: list[int]) -> list[int]:
    """Those of ``ids`` the copy's ``state`` holds as they are now: none written since its last applied change
    (``keyword_changes``), none past its arrays; nothing when the log no longer reaches back to it."""
    oldest = conn.execute("SELECT MIN(seq) FROM keyword_changes").fetchone()[0]
    if oldest is not None and oldest > state.seq + 1:
        return []
    changed = {r[0] for r in conn.execute("SELECT item_id FROM keyword_changes WHERE seq > ?", (state.seq,))}
    if None in changed:  # a rebuild since: the copy is read again
        return []
    return [i for i in ids if i not in changed and i < len(state.lengths)]
