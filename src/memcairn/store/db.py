"""Connections, PRAGMAs and transactions.

Every connection runs in autocommit mode (``isolation_level=None``) and writes inside an explicit
``BEGIN IMMEDIATE`` (``atomic``): the write lock is taken up front, so two writers queue on
``busy_timeout`` instead of failing half-way with "database is locked" on lock upgrade.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memcairn.errors import StoreError

BUSY_TIMEOUT_MS = 30_000


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
                               check_same_thread=False)
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
        return (f"{path} is not a readable memcairn database ({text}); move it aside and run again to "
                "start fresh, or restore a memcairn.db.bak-* copy")
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
    """Run the block in one ``BEGIN IMMEDIATE`` transaction; roll back on any exception."""
    if conn.in_transaction:  # nested use joins the outer transaction
        yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


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
