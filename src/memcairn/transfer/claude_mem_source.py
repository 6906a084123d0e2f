"""Reading a claude-mem database: opened read-only, its rows under any release's column names, its key."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from memcairn.core.errors import ValidationError

DEFAULT_PATH = Path("~/.claude-mem/claude-mem.db")
TABLES = ("sdk_sessions", "observations", "session_summaries", "user_prompts")
BATCH_SIZE = 500
# Column names before claude-mem's migration 17 renamed them.
_LEGACY_NAMES = {"content_session_id": "claude_session_id", "memory_session_id": "sdk_session_id"}
# What identifies a database: the first of these rows it holds (its oldest), columns later writes do not change.
_KEY_ROWS = (("sdk_sessions", ("content_session_id", "started_at_epoch", "started_at")),
             ("observations", ("memory_session_id", "created_at_epoch", "created_at")),
             ("session_summaries", ("memory_session_id", "created_at_epoch", "created_at")),
             ("user_prompts", ("content_session_id", "created_at_epoch", "created_at")))


def open_source(path: Path | str | None = None) -> sqlite3.Connection:
    """Open a claude-mem database read-only and check that it looks like one.

    Raises:
        ValidationError: the file is missing, is not a SQLite database, or has none of claude-mem's tables.
    """
    target = Path(path or DEFAULT_PATH).expanduser()
    if not target.exists():
        raise ValidationError(f"no claude-mem database at {target}; pass its path (default {DEFAULT_PATH})")
    if not target.is_file():
        raise ValidationError(f"{target} is not a file; pass the path of claude-mem.db")
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        # text claude-mem wrote that is not valid UTF-8 (half of a cut emoji) is read with replacement characters
        # rather than stopping the import at that row
        conn.text_factory = _decode_text
        conn.execute("PRAGMA query_only = ON")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        raise ValidationError(f"{target} is not a readable SQLite database ({exc}); nothing was imported") from None
    if not names & set(TABLES[1:]):
        conn.close()
        raise ValidationError(f"{target} does not look like a claude-mem database: it has none of the tables "
                              f"{', '.join(TABLES[1:])}; nothing was imported")
    return conn


@contextmanager
def _reading(table: str) -> Iterator[None]:
    """An SQLite error while reading the source is about the claude-mem file, not the store: say so (the CLI
    would otherwise describe it as a damaged memcairn.db)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise ValidationError(
            f"cannot read {table} of the claude-mem database ({exc}); the rows read before were imported and "
            "the memcairn store is fine. Repair a copy of the claude-mem file (sqlite3's .recover) and import "
            "that: rows already imported are not added twice"
        ) from None


def database_key(conn: sqlite3.Connection, tables: set[str] | None = None) -> str:
    """12 hex digits naming this claude-mem database, from its oldest row (its first session's id and start), so
    the same database gives the same key on every run while another one, reusing the same row ids, does not."""
    if tables is None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, columns in _KEY_ROWS:
        if table not in tables:
            continue
        have = _have(conn, table)
        exprs = ", ".join(_expr(have, c) for c in ("id", *columns))
        with _reading(table):
            row = conn.execute(f"SELECT {exprs} FROM {table} ORDER BY {_expr(have, 'id')} LIMIT 1").fetchone()
        if row is not None:
            return hashlib.sha256(json.dumps([table, *row], default=str).encode()).hexdigest()[:12]
    return "empty"


def _expr(have: set[str], name: str) -> str:
    """SQL for a column: itself, its pre-rename name, or NULL when this claude-mem never had it."""
    if name in have:
        return name
    if name == "id":
        return "rowid"
    legacy = _LEGACY_NAMES.get(name)
    return legacy if legacy in have else "NULL"


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _have(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _select(conn: sqlite3.Connection, table: str, wanted: Sequence[str]) -> Iterator[sqlite3.Row]:
    """Rows in id order with the wanted columns; a column an older claude-mem lacks reads as NULL."""
    have = _have(conn, table)
    cols = ", ".join(f"{_expr(have, c)} AS {c}" for c in ("id", *wanted))
    with _reading(table):
        cursor = conn.execute(f"SELECT {cols} FROM {table} ORDER BY id")
        while rows := cursor.fetchmany(BATCH_SIZE):
            yield from rows
