"""Connections, PRAGMAs and transactions.

Every connection runs in autocommit mode (``isolation_level=None``) and writes inside an explicit
``BEGIN IMMEDIATE`` (``atomic``): the write lock is taken up front, so two writers queue on
``busy_timeout`` instead of failing half-way with "database is locked" on lock upgrade.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from memcairn.core.errors import DiskFullError, StoreError

BUSY_TIMEOUT_MS = 30_000


class StoreConnection(sqlite3.Connection):
    """A connection that knows its file and whom to tell about damage.

    ``refuse_writes`` (set by the store) returns why writes must not run, or None; ``atomic`` asks it before
    taking the write lock. ``on_error`` hears every SQLite error a transaction ended with, so the store can
    tell a damaged page or index from an ordinary failure.
    """

    label: str = "the database"
    refuse_writes: Callable[[], str | None] | None = None
    on_error: Callable[[sqlite3.Error], None] | None = None


# Primary result codes that say the file (or the disk under it) may be damaged: checked at once, not on a timer.
DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_IOERR})


def error_kind(exc: BaseException) -> str | None:
    """``corrupt`` (a damaged page or index, a file that is no database, an I/O error), ``full`` or
    ``missing_fts`` for the SQLite errors that name a state of the file, else None."""
    if not isinstance(exc, sqlite3.Error):
        return None
    code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
    text = str(exc)
    if code in DAMAGE_CODES or "malformed" in text or "disk I/O error" in text or "not a database" in text:
        return "corrupt"
    if code == sqlite3.SQLITE_FULL or "disk is full" in text:
        return "full"
    if "no such table" in text and "memory_items_fts" in text:
        return "missing_fts"
    return None


def connect(path: Path | str) -> sqlite3.Connection:
    """Open the database with WAL, a busy timeout and foreign keys on.

    Raises:
        StoreError: the file cannot be created, opened or is not a SQLite database.
    """
    target = str(path)
    if target != ":memory:":
        parent = Path(target).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the data directory {parent}: {exc.strerror}; "
                             "set MEMCAIRN_HOME to a writable directory") from None
    try:
        conn = sqlite3.connect(target, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                               check_same_thread=False, factory=StoreConnection)
        conn.label = target
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if target != ":memory:":
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{target}: could not switch to WAL journal mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -16000")
    except sqlite3.DatabaseError as exc:
        raise StoreError(describe_open_error(target, exc)) from None
    return conn


def describe_open_error(path: str, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return (f"{path} is not a readable memcairn database ({text}); `memcairn doctor` says more; move it "
                "aside and restore it (`memcairn import jsonl` of a `memcairn export`, a memcairn.db.bak-* copy), "
                "or run again to start fresh")
    if "readonly" in text or "unable to open" in text or "permission" in text.lower():
        return f"cannot write {path} ({text}); check its permissions or set MEMCAIRN_HOME elsewhere"
    if "locked" in text:
        return (f"{path} stayed locked by another process for {BUSY_TIMEOUT_MS // 1000} s ({text}); wait for "
                "a running import or export to finish, or stop a stuck memcairn process, and try again")
    if "disk is full" in text:
        return f"{path}: the disk is full ({text}); free some space and try again"
    return f"{path}: {text}"


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Run the block in one ``BEGIN IMMEDIATE`` transaction; roll back on any exception.

    Raises:
        StoreDamagedError: the store refuses writes (its file failed SQLite's check).
        DiskFullError: the disk filled up; nothing of the block was stored.
    """
    if conn.in_transaction:  # nested use joins the outer transaction
        yield conn
        return
    refuse = getattr(conn, "refuse_writes", None)
    reason = refuse() if refuse is not None else None
    if reason is not None:
        from memcairn.core.errors import StoreDamagedError

        raise StoreDamagedError(reason)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:  # SQLite may have rolled back already (a full disk does)
                conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        _transaction_failed(conn, exc)
        raise


def _transaction_failed(conn: sqlite3.Connection, exc: sqlite3.Error) -> None:
    """Tell the connection's owner about the error; a full disk becomes ``DiskFullError`` (the CLI's words)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
    hook = getattr(conn, "on_error", None)
    if hook is not None:
        try:
            hook(exc)
        except Exception:  # telling must not hide the error itself
            pass
    if error_kind(exc) == "full":
        raise DiskFullError(describe_open_error(getattr(conn, "label", "the database"), exc)) from exc


def split_sql(script: str) -> list[str]:
    """Split a script into statements (trigger bodies included) without executing it.

    ``executescript`` would commit the surrounding transaction first; migrations must not.
    """
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


def run_script(conn: sqlite3.Connection, script: str) -> None:
    for statement in split_sql(script):
        conn.execute(statement)
