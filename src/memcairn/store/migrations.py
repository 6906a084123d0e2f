"""Forward-only migrations, each in its own transaction together with its record.

A migration registered with ``rewrites_rows=True`` (it updates or deletes existing rows) is preceded by a
copy of the database file, ``memcairn.db.bak-<version>``, whenever the database holds any memory: a
migration bug must never be able to destroy a user's history unrecoverably. The copy is taken under the
migration's write lock (so it is exactly the state the migration starts from, also when two processes race
to migrate) and never replaces an existing file (an older copy gets ``.bak-<version>.1``, ``.2``, ...).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memcairn.core.clock import now_ms
from memcairn.core.errors import SchemaTooNewError, StoreError
from memcairn.core.fields import FIELD
from memcairn.store import schema
from memcairn.store.db import atomic, run_script

MIGRATIONS_TABLE = "_memcairn_migrations"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[sqlite3.Connection], None]
    rewrites_rows: bool = False


MIGRATIONS: list[Migration] = []


def migration(version: int, *, rewrites_rows: bool = False) -> Callable:
    def register(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
        if any(m.version == version for m in MIGRATIONS):
            raise RuntimeError(f"migration version {version} registered twice")
        MIGRATIONS.append(Migration(version, fn.__name__, fn, rewrites_rows))
        MIGRATIONS.sort(key=lambda m: m.version)
        return fn

    return register


@migration(1)
def m001_create_memory_items(conn: sqlite3.Connection) -> None:
    run_script(conn, schema.CORE_TABLES)
    run_script(conn, schema.FTS_TABLE_V1)
    run_script(conn, schema.FTS_TRIGGERS_V1)
    run_script(conn, schema.INTEGRITY_TRIGGERS)


@migration(2, rewrites_rows=True)
def m002_unique_content_hash(conn: sqlite3.Connection) -> None:
    run_script(conn, schema.DEDUPE_AND_UNIQUE)


@migration(3)
def m003_mirror_bookkeeping(conn: sqlite3.Connection) -> None:
    run_script(conn, schema.MIRROR_TABLES)
    run_script(conn, schema.MIRROR_TRIGGERS)


@migration(4)
def m004_ingest_events(conn: sqlite3.Connection) -> None:
    run_script(conn, schema.INGEST_TABLES)


@migration(5)
def m005_capture_bookkeeping(conn: sqlite3.Connection) -> None:
    run_script(conn, schema.CAPTURE_TABLES)


@migration(6)
def m006_fts_project_scope(conn: sqlite3.Connection) -> None:
    """The keyword index gains the ``fts_scope`` column (``schema.py``): recreated and rebuilt from the rows
    (the index is derived data; no row of the store changes)."""
    run_script(conn, schema.DROP_FTS)
    run_script(conn, schema.FTS_SOURCE_VIEW)
    run_script(conn, schema.FTS_TABLE)
    run_script(conn, schema.FTS_TRIGGERS)
    conn.execute("INSERT INTO memory_items_fts(memory_items_fts) VALUES ('rebuild')")


@migration(7)
def m007_kind_time_index(conn: sqlite3.Connection) -> None:
    """An index for the newest rows of one kind in a project (``schema.KIND_TIME_INDEX``)."""
    run_script(conn, schema.KIND_TIME_INDEX)


@migration(8)
def m008_forgotten_items(conn: sqlite3.Connection) -> None:
    """Deleted content stays deleted (``schema.FORGOTTEN_TABLE``); no existing row changes."""
    run_script(conn, schema.FORGOTTEN_TABLE)


@migration(9)
def m009_keyword_changes(conn: sqlite3.Connection) -> None:
    """A log of written item ids for the in-memory keyword index (``schema.KEYWORD_CHANGES``); no existing
    row changes."""
    run_script(conn, schema.KEYWORD_CHANGES)


@migration(10)
def m010_updated_time_index(conn: sqlite3.Connection) -> None:
    """An index on the time an item was last written (``schema.UPDATED_TIME_INDEX``)."""
    run_script(conn, schema.UPDATED_TIME_INDEX)


@migration(11)
def m011_forgotten_hash_index(conn: sqlite3.Connection) -> None:
    """An index on the content of deletion marks (``schema.FORGOTTEN_HASH_INDEX``)."""
    run_script(conn, schema.FORGOTTEN_HASH_INDEX)


@migration(12)
def m012_ingest_event_key(conn: sqlite3.Connection) -> None:
    """The hook's own key of an event (``schema.INGEST_EVENT_KEY``); no existing row changes."""
    run_script(conn, schema.INGEST_EVENT_KEY)


@migration(13)
def m013_remote_sync_state(conn: sqlite3.Connection) -> None:
    """The team server forwarder's watermark (``schema.REMOTE_SYNC_STATE``); no existing row changes."""
    run_script(conn, schema.REMOTE_SYNC_STATE)


@migration(14)
def m014_remote_items(conn: sqlite3.Connection) -> None:
    """The team server ids of forwarded items and the deletions still to send (``schema.REMOTE_DELETIONS``); no
    existing row changes (items forwarded before have no server id here: their deletions are not sent)."""
    run_script(conn, schema.REMOTE_DELETIONS)


@migration(15)
def m015_remote_edits(conn: sqlite3.Connection) -> None:
    """Marks of sent memories edited since (``schema.REMOTE_EDITS``); no existing row changes."""
    run_script(conn, schema.REMOTE_EDITS)


def _ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_epoch INTEGER NOT NULL)"
    )


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    _ensure_table(conn)
    return {row[0] for row in conn.execute(f"SELECT version FROM {MIGRATIONS_TABLE}")}


def latest_version(migrations: list[Migration] | None = None) -> int:
    return max(m.version for m in (migrations or MIGRATIONS))


def _has_rows(conn: sqlite3.Connection) -> bool:
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_items'").fetchone()
    return bool(exists) and conn.execute("SELECT EXISTS (SELECT 1 FROM memory_items)").fetchone()[0] == 1


def _free_backup_path(db_path: Path, version: int) -> Path:
    """``<db>.bak-<version>``, or the first ``<db>.bak-<version>.<n>`` that is free: a copy is never overwritten."""
    base = db_path.with_name(f"{db_path.name}.bak-{version}")
    target, n = base, 0
    while any(Path(f"{target}{suffix}").exists() for suffix in ("", "-journal", "-wal", "-shm")):
        n += 1
        target = base.with_name(f"{base.name}.{n}")
    return target


def backup_database(db_path: Path, version: int) -> Path:
    """Copy the committed database into a new file next to it and return its path.

    Called while the migrating connection holds the write lock and has changed nothing yet: a second
    connection reads exactly the state the migration starts from (a connection cannot back itself up from
    inside its own write transaction).

    Raises:
        StoreError: the copy could not be written (full disk, unwritable directory); nothing was migrated.
    """
    target = _free_backup_path(db_path, version)
    try:
        source = sqlite3.connect(str(db_path))
        try:
            dest = sqlite3.connect(str(target))
            try:
                source.backup(dest)
            finally:
                dest.close()
        finally:
            source.close()
    except sqlite3.Error as exc:
        for suffix in ("", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        raise StoreError(
            f"could not write the backup copy {target} that migration {version} needs ({exc}); the database "
            f"was not changed: free some disk space or make {target.parent} writable, and run again"
        ) from None
    return target


def migrate(conn: sqlite3.Connection, db_path: Path | None, migrations: list[Migration] | None = None) -> list[int]:
    """Apply every pending migration in order; return the versions applied.

    Raises:
        SchemaTooNewError: the database records a version this memcairn does not know.
        StoreError: a migration failed (it was rolled back; earlier ones stay applied), or its backup copy
            could not be written.
        sqlite3.DatabaseError: the file cannot be written (read-only) or read (not a database, damaged).
    """
    plan = migrations if migrations is not None else MIGRATIONS
    with atomic(conn):
        done = applied_versions(conn)
        # A read-only file would open fine and fail at the first write; make it fail here, at once.
        conn.execute(f"UPDATE {MIGRATIONS_TABLE} SET version = version WHERE 0")
    known = {m.version for m in plan}
    newer = sorted(v for v in done if v not in known and v > max(known))
    if newer:
        raise SchemaTooNewError(
            f"{db_path or 'the database'} was written by a newer memcairn (schema version {newer[-1]}, "
            f"this one knows up to {max(known)}); upgrade memcairn instead of downgrading the database"
        )
    applied: list[int] = []
    for m in plan:
        if m.version in done:
            continue
        try:
            with atomic(conn):
                if m.version in applied_versions(conn):  # another process won the race
                    continue
                if m.rewrites_rows and db_path is not None and _has_rows(conn):
                    backup_database(db_path, m.version)
                m.apply(conn)
                conn.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE}(version, name, applied_at_epoch) VALUES (?, ?, ?)",
                    (m.version, m.name, now_ms()),
                )
        except sqlite3.Error as exc:
            raise StoreError(f"migration {m.version} ({m.name}) failed and was rolled back: {exc}") from None
        applied.append(m.version)
    return applied


@migration(16)
def m016_evidence(conn: sqlite3.Connection) -> None:
    """The evidence behind the memories (``schema.EVIDENCE_TABLES``): a new table; no existing row changes."""
    run_script(conn, schema.EVIDENCE_TABLES)


@migration(17)
def m017_anchors(conn: sqlite3.Connection) -> None:
    """What a memory rests on (``core/fields.py``'s ``anchors``): a column whose default fills existing rows."""
    conn.execute(f"ALTER TABLE memory_items ADD COLUMN {FIELD['anchors'].column_ddl()}")


@migration(18)
def m018_correction(conn: sqlite3.Connection) -> None:
    """Whether a memory still holds (``core/fields.py``'s ``correction``): a column whose default fills existing
    rows."""
    conn.execute(f"ALTER TABLE memory_items ADD COLUMN {FIELD['correction'].column_ddl()}")


@migration(19)
def m019_project_root(conn: sqlite3.Connection) -> None:
    """Where a project's working directory is on this machine (``memcairn projects root``): a nullable column; no
    existing row changes."""
    conn.execute("ALTER TABLE projects ADD COLUMN root TEXT")
