from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memcairn.core.errors import StoreError
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.store.db import connect
from memcairn.store.migrations import MIGRATIONS, Migration, migrate

EXPECTED_TABLES = {"projects", "sessions", "memory_items", "memory_sources", "memory_items_fts",
                   "_memcairn_migrations"}
EXPECTED_TRIGGERS = {"memory_items_ai", "memory_items_ad", "memory_items_au",
                     "memory_items_session_project_insert", "memory_items_session_project_update",
                     "sessions_project_update"}
EXPECTED_INDEXES = {"ix_sessions_project", "ix_memory_items_project_time", "ix_memory_items_time",
                    "ix_memory_items_session", "ux_memory_items_project_hash", "ux_memory_sources_source",
                    "ix_memory_sources_item", "ix_memory_items_project_kind_time", "ix_memory_items_updated",
                    "ix_forgotten_items_hash"}


def database_before(path: Path, version: int) -> sqlite3.Connection:
    """A store file with the migrations before ``version`` applied (an older memcairn's file), left open."""
    conn = connect(path)
    migrate(conn, path, [m for m in MIGRATIONS if m.version < version])
    return conn


def _names(conn: sqlite3.Connection, kind: str) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%'",
                                       (kind,))}


def test_blank_database_gets_exactly_the_expected_schema(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        conn = store._conn
        tables = {t for t in _names(conn, "table") if not t.startswith("memory_items_fts_")}
        assert tables >= EXPECTED_TABLES
        assert tables - EXPECTED_TABLES <= {"vector_sync_state", "mirror_outbox", "ingest_events",
                                            "search_telemetry", "llm_usage", "capture_notices",
                                            "forgotten_items", "keyword_changes", "remote_sync_state",
                                            "remote_sent", "remote_deletions",
                                            "remote_edited", "evidence", "evidence_fts", "evidence_fts_idx",
                                            "evidence_fts_config", "evidence_fts_data", "evidence_fts_docsize"}
        assert _names(conn, "trigger") >= EXPECTED_TRIGGERS
        assert _names(conn, "index") >= EXPECTED_INDEXES
        fts_sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_items_fts'").fetchone()[0]
        assert "porter unicode61" in fts_sql and "UNINDEXED" in fts_sql
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
        versions = [r[0] for r in conn.execute("SELECT version FROM _memcairn_migrations ORDER BY version")]
        assert versions == [m.version for m in MIGRATIONS]


def test_rerunning_migrations_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    Store(path).close()
    conn = connect(path)
    before = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    assert migrate(conn, path) == []
    assert conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before
    conn.close()


def test_a_failing_migration_rolls_back_and_leaves_the_data_intact(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Store(path) as store:
        from memcairn.core.models import NewItem

        store.add_item(NewItem(project="p", kind="manual", title="keep me"))

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM memory_items")
        conn.execute("CREATE TABLE half_done (x)")
        conn.execute("THIS IS NOT SQL")

    plan = [*MIGRATIONS, Migration(900, "m900_broken", broken, rewrites_rows=True)]
    conn = connect(path)
    with pytest.raises(StoreError, match="m900_broken"):
        migrate(conn, path, plan)
    assert conn.execute("SELECT title FROM memory_items").fetchall()[0][0] == "keep me"
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'half_done'").fetchone() is None
    assert conn.execute("SELECT 1 FROM _memcairn_migrations WHERE version = 900").fetchone() is None
    conn.close()
    # the row-rewriting migration was preceded by a backup copy
    backup = path.with_name("m.db.bak-900")
    assert backup.exists()
    assert sqlite3.connect(backup).execute("SELECT COUNT(*) FROM memory_items").fetchone()[0] == 1


def test_the_uniqueness_migration_removes_old_duplicates_keeping_the_oldest(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = connect(path)
    migrate(conn, path, [m for m in MIGRATIONS if m.version == 1])
    conn.execute("INSERT INTO projects(id, name, created_at_epoch) VALUES (1, 'p', 0)")
    for i, h in enumerate(["aaa", "bbb", "aaa", "aaa", "bbb"]):
        conn.execute(
            "INSERT INTO memory_items(uuid, project_id, kind, type, title, content_hash, created_at_epoch, "
            "updated_at_epoch) VALUES (?, 1, 'manual', 'note', ?, ?, ?, 0)", (f"u{i}", f"t{i}", h, i))
    migrate(conn, path)
    rows = conn.execute("SELECT id, content_hash FROM memory_items ORDER BY id").fetchall()
    assert [tuple(r) for r in rows] == [(1, "aaa"), (2, "bbb")]
    assert path.with_name("old.db.bak-2").exists()
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO memory_items(uuid, project_id, kind, type, content_hash, created_at_epoch, "
                     "updated_at_epoch) VALUES ('dup', 1, 'manual', 'note', 'aaa', 9, 0)")
    conn.close()


def test_the_scope_migration_rebuilds_the_keyword_index_and_keeps_every_row(tmp_path: Path) -> None:
    from memcairn.core.models import ItemFilter, NewItem

    path = tmp_path / "old.db"
    conn = database_before(path, 6)
    for pid, name in ((1, "alpha"), (2, "beta"), (17, "gamma")):
        conn.execute("INSERT INTO projects(id, name, created_at_epoch) VALUES (?, ?, 0)", (pid, name))
    for i, pid in enumerate([1, 1, 2, 17, 17]):
        conn.execute(
            "INSERT INTO memory_items(uuid, project_id, kind, type, title, narrative, content_hash, created_at_epoch, "
            "updated_at_epoch) VALUES (?, ?, 'manual', 'note', ?, 'the parser timeout', ?, ?, 0)",
            (f"u{i}", pid, f"title {i}", f"h{i}", i))
    conn.close()
    with Store(path) as store:
        assert store.fts_counts() == (5, 5) and store.fts_integrity_ok()
        sql = store._conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_items_fts'").fetchone()[0]
        assert "fts_scope" in sql
        hits = store.keyword_ids("parser timeout", ItemFilter(projects=["gamma"]))
        assert sorted(i for i, _ in hits) == [4, 5]
        assert len(store.keyword_ids("parser timeout")) == 5
        store.add_item(NewItem(project="beta", kind="manual", title="parser timeout again"))  # the new triggers
        assert sorted(i for i, _ in store.keyword_ids("parser", ItemFilter(projects=["beta"]))) == [3, 6]
        assert store.fts_integrity_ok()


def test_the_keyword_log_migration_keeps_every_row_and_logs_from_then_on(tmp_path: Path) -> None:
    from memcairn.core.models import NewItem

    path = tmp_path / "v8.db"
    conn = database_before(path, 9)
    conn.execute("INSERT INTO projects(id, name, created_at_epoch) VALUES (1, 'alpha', 0)")
    for i in range(3):
        conn.execute(
            "INSERT INTO memory_items(uuid, project_id, kind, type, title, content_hash, created_at_epoch, "
            "updated_at_epoch) VALUES (?, 1, 'manual', 'note', ?, ?, ?, 0)", (f"u{i}", f"parser {i}", f"h{i}", i))
    conn.close()
    with Store(path) as store:
        assert store.fts_counts() == (3, 3) and store.missing_triggers() == []
        assert store._conn.execute("SELECT COUNT(*) FROM keyword_changes").fetchone()[0] == 0
        index = store.start_keyword_index()
        assert index is not None and index.wait(30)
        new = store.add_item(NewItem(project="alpha", kind="manual", title="parser again")).id
        store.delete_items([1])
        assert [r[0] for r in store._conn.execute("SELECT item_id FROM keyword_changes ORDER BY seq")] == [new, 1]
        assert sorted(i for i, _ in store.keyword_ids("parser")) == [2, 3, new]


def _v1_database_with_duplicates(path: Path) -> None:
    """A database as the first memcairn left it: schema version 1, three rows of which two share a hash."""
    conn = connect(path)
    migrate(conn, path, [m for m in MIGRATIONS if m.version == 1])
    conn.execute("INSERT INTO projects(id, name, created_at_epoch) VALUES (1, 'p', 0)")
    for i, h in enumerate(["aaa", "aaa", "bbb"]):
        conn.execute(
            "INSERT INTO memory_items(uuid, project_id, kind, type, title, content_hash, created_at_epoch, "
            "updated_at_epoch) VALUES (?, 1, 'manual', 'note', ?, ?, ?, 0)", (f"u{i}", f"t{i}", h, i))
    conn.close()


def _items_in(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM memory_items").fetchone()[0]
    finally:
        conn.close()


def test_an_existing_file_at_the_backup_name_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "my memories ü" / "memcairn.db"
    path.parent.mkdir()
    _v1_database_with_duplicates(path)
    older = path.with_name("memcairn.db.bak-2")
    older.write_bytes(b"an older copy the user keeps" * 100)  # not even SQLite: must stay untouched
    taken = path.with_name("memcairn.db.bak-2.1")
    sqlite3.connect(taken).close()  # an empty database from an earlier attempt: also kept
    with Store(path) as store:
        assert store.count_items() == 2
    assert older.read_bytes() == b"an older copy the user keeps" * 100
    assert _items_in(path.with_name("memcairn.db.bak-2.2")) == 3  # the rows as they were before the dedupe


def test_a_migrator_that_lost_the_race_keeps_the_winners_backup(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes open an old database at once: both read version 1, one migrates. The other must not
    take its own "backup" of the already migrated file over the winner's copy of the original rows."""
    from memcairn.store import migrations

    path = tmp_path / "memcairn.db"
    _v1_database_with_duplicates(path)
    Store(path).close()  # the winner: migrated, its backup holds the three original rows
    assert _items_in(path.with_name("memcairn.db.bak-2")) == 3

    real = migrations.applied_versions
    calls = []

    def stale_first_read(conn: sqlite3.Connection) -> set[int]:
        calls.append(1)
        return {1} if len(calls) == 1 else real(conn)  # what the loser read before the winner committed

    monkeypatch.setattr(migrations, "applied_versions", stale_first_read)
    conn = connect(path)
    assert migrate(conn, path) == []
    conn.close()
    assert _items_in(path.with_name("memcairn.db.bak-2")) == 3
    assert not path.with_name("memcairn.db.bak-2.1").exists()


def test_a_backup_that_cannot_be_written_stops_the_migration_and_names_the_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.store import migrations

    path = tmp_path / "memcairn.db"
    _v1_database_with_duplicates(path)
    unwritable = tmp_path / "gone" / "memcairn.db.bak-2"  # its directory does not exist: SQLite cannot create it
    monkeypatch.setattr(migrations, "_free_backup_path", lambda db_path, version: unwritable)
    with pytest.raises(StoreError, match="backup copy .*gone.*migration 2"):
        Store(path)
    conn = connect(path)
    assert [r[0] for r in conn.execute("SELECT version FROM _memcairn_migrations")] == [1]
    assert conn.execute("SELECT COUNT(*) FROM memory_items").fetchone()[0] == 3
    conn.close()
    monkeypatch.undo()
    with Store(path) as store:  # once the copy can be written, the migration completes
        assert store.count_items() == 2


def test_a_migration_killed_half_way_leaves_the_previous_version_and_completes_on_the_next_open(
        tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    path = tmp_path / "memcairn.db"
    conn = database_before(path, 6)
    conn.execute("INSERT INTO projects(id, name, created_at_epoch) VALUES (1, 'p', 0)")
    conn.executemany(
        "INSERT INTO memory_items(uuid, project_id, kind, type, title, content_hash, created_at_epoch, "
        "updated_at_epoch) VALUES (?, 1, 'manual', 'note', 'zebra', ?, 0, 0)", [(f"u{i}", f"h{i}") for i in range(50)])
    conn.close()
    script = (
        "import os, sys\n"
        "from memcairn.store import migrations, Store\n"
        "real = migrations.m006_fts_project_scope\n"
        "def dying(conn):\n"
        "    real(conn)\n"
        "    os.kill(os.getpid(), 9)  # the migration ran, its transaction did not commit\n"
        "at = [m.version for m in migrations.MIGRATIONS].index(6)\n"
        "migrations.MIGRATIONS[at] = migrations.Migration(6, 'm006_fts_project_scope', dying)\n"
        "Store(sys.argv[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, timeout=60,
                          env={**os.environ})
    assert done.returncode == -9, done.stderr
    conn = connect(path)
    assert [r[0] for r in conn.execute("SELECT version FROM _memcairn_migrations")] == [1, 2, 3, 4, 5]
    fts_sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_items_fts'").fetchone()[0]
    assert "fts_scope" not in fts_sql
    conn.close()
    with Store(path) as store:
        assert store.count_items() == 50 and len(store.keyword_ids("zebra", limit=100)) == 50
        assert store.fts_integrity_ok()


def test_the_newest_summaries_of_a_project_without_any_are_a_seek(tmp_path: Path) -> None:
    """Listing one kind of a project's newest rows uses the (project, kind, time) index, so a project of
    thousands of observations and no summary answers at once instead of walking every row; a database of
    version 6 gains the index on open."""
    from memcairn.core.models import ItemFilter

    path = tmp_path / "memcairn.db"
    conn = database_before(path, 7)
    conn.close()
    with Store(path) as store:
        assert "ix_memory_items_project_kind_time" in _names(store._conn, "index")
        for i in range(300):
            store.add_item(NewItem(project="p", kind="observation", title=f"t{i}", narrative=f"n{i}"))
        reads: list[int] = []
        store._conn.set_progress_handler(lambda: reads.append(1), 100)  # one call per 100 VM steps
        try:
            assert store.list_items(ItemFilter(projects=["p"], kinds=["summary"]), limit=10) == []
        finally:
            store._conn.set_progress_handler(None, 0)
        assert len(reads) < 5, len(reads)  # walking the 300 rows takes thousands of steps


def test_an_insert_asks_the_deletion_marks_by_content_with_a_seek(tmp_path: Path) -> None:
    """Content deleted nowhere (almost every insert) is answered by the content index of the marks."""
    from memcairn.core.models import NewItem

    with Store(tmp_path / "m.db") as store:
        ran: list[str] = []
        store._conn.set_trace_callback(ran.append)
        try:
            store.add_item(NewItem(project="alpha", kind="manual", text="new content"))
        finally:
            store._conn.set_trace_callback(None)
        query = next(sql for sql in ran if "FROM forgotten_items" in sql)
        plan = " ".join(r[3] for r in store._conn.execute(f"EXPLAIN QUERY PLAN {query}"))
        assert "ix_forgotten_items_hash" in plan and "RECURSIVE" not in " ".join(ran)
