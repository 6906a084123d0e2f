"""Store methods for moving memories between databases: reading everything out in id order, and writing
projects, sessions and items back with the identity they had (uuid, content hash, timestamps, provenance),
and the marks of content the user deleted (``forgotten_items``), so a restored store keeps it deleted.

Mixed into ``Store`` so the store stays the only owner of connections and SQL. Items go through
``Store._insert`` so the dedupe and session rules are the same as for any other write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from memcairn.core.errors import ValidationError
from memcairn.core.fields import NAMES
from memcairn.core.models import AddResult, NewItem
from memcairn.store.db import atomic

# Columns an export never carries as such: surrogate keys, replaced by names.
_SESSION_KEYS = ("id", "project_id")
_ITEM_KEYS = ("id", "project_id", "session_id")
# Item columns that ``Store._insert`` writes; any other column of memory_items is copied after the insert.
_ITEM_INSERTED = ("uuid", "kind", "type", *NAMES, "content_hash", "created_at_epoch", "updated_at_epoch")
_SESSION_REQUIRED = ("agent_session_id", "platform_source", "started_at_epoch")


@dataclass(frozen=True)
class TransferProject:
    name: str
    merged_into_project: str | None
    created_at_epoch: int


@dataclass(frozen=True)
class TransferSession:
    """A session to create; ``columns`` holds every sessions column but the keys (agent id, times, status...)."""

    project: str
    columns: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return str(self.columns["platform_source"]), str(self.columns["agent_session_id"])


@dataclass(frozen=True)
class TransferItem:
    """An item with the identity it had where it came from. ``item.source`` must be None: provenance
    rows travel in ``sources`` as (source_type, source_table, source_id, created_at_epoch)."""

    item: NewItem
    uuid: str
    content_hash: str
    updated_at_epoch: int
    sources: tuple[tuple[str, str, str, int], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TransferForgotten:
    """A mark of content the user deleted from ``project`` (a ``forgotten_items`` row, the project by name)."""

    project: str
    content_hash: str
    kind: str
    forgotten_at_epoch: int


@dataclass(frozen=True)
class Outcome:
    """What happened to one record: created, existing (already there), duplicate (same content as another
    stored item, which got its provenance), forgotten (content the user deleted; not written), skipped (a
    mark of content the receiving project holds now: the item is kept, the mark not recorded) or rejected
    (``detail`` says why; nothing of it was written)."""

    status: str
    detail: str | None = None


TransferRecord = TransferProject | TransferSession | TransferItem | TransferForgotten


class TransferStateMixin:
    _conn: sqlite3.Connection
    _project_ids: dict[str, int]
    _project_id: Callable[[sqlite3.Connection, str], int]
    _insert: Callable[..., AddResult]
    _notify: Callable[[str, list[int]], None]

    # -- export -----------------------------------------------------------------------------------
    @contextmanager
    def export_snapshot(self) -> Iterator[None]:
        """Hold one read transaction so every page of an export sees the same state, even while a worker
        writes (WAL readers never block it)."""
        conn = self._conn
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")

    def export_projects(self) -> Iterator[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT name, merged_into_project, created_at_epoch FROM projects ORDER BY id"
        ).fetchall()
        for row in rows:
            yield dict(row)

    def export_sessions(self, page_size: int = 1000) -> Iterator[dict[str, Any]]:
        """Sessions in id order: every column but the keys, and ``project`` by name."""
        last = 0
        while True:
            rows = self._conn.execute(
                "SELECT s.*, p.name AS project FROM sessions s JOIN projects p ON p.id = s.project_id "
                "WHERE s.id > ? ORDER BY s.id LIMIT ?",
                (last, page_size),
            ).fetchall()
            if not rows:
                return
            for row in rows:
                yield {k: row[k] for k in row.keys() if k not in _SESSION_KEYS}
            last = rows[-1]["id"]

    def export_items(self, page_size: int = 500) -> Iterator[dict[str, Any]]:
        """Items in id order with raw column values, ``project`` by name, ``session`` as (platform_source,
        agent_session_id) or None, and ``sources``: their memory_sources rows in id order."""
        last = 0
        while True:
            rows = self._conn.execute(
                "SELECT m.*, p.name AS project, s.platform_source AS session_platform, "
                "s.agent_session_id AS session_agent FROM memory_items m "
                "JOIN projects p ON p.id = m.project_id LEFT JOIN sessions s ON s.id = m.session_id "
                "WHERE m.id > ? ORDER BY m.id LIMIT ?",
                (last, page_size),
            ).fetchall()
            if not rows:
                return
            ids = [r["id"] for r in rows]
            sources: dict[int, list[dict[str, Any]]] = {}
            for src in self._conn.execute(
                "SELECT memory_item_id, source_type, source_table, source_id, created_at_epoch FROM memory_sources "
                f"WHERE memory_item_id IN ({', '.join('?' for _ in ids)}) ORDER BY id",
                ids,
            ):
                sources.setdefault(src[0], []).append(
                    {"source_type": src[1], "source_table": src[2], "source_id": src[3], "created_at_epoch": src[4]}
                )
            for row in rows:
                record = {k: row[k] for k in row.keys()
                          if k not in (*_ITEM_KEYS, "session_platform", "session_agent")}
                agent = row["session_agent"]
                record["session"] = (row["session_platform"], agent) if agent is not None else None
                record["sources"] = sources.get(row["id"], [])
                yield record
            last = ids[-1]

    def export_forgotten(self, page_size: int = 1000) -> Iterator[dict[str, Any]]:
        """Deletion marks in key order (project id, content hash), ``project`` by name."""
        last: tuple[int, str] = (0, "")
        while True:
            rows = self._conn.execute(
                "SELECT f.project_id, p.name, f.content_hash, f.kind, f.forgotten_at_epoch FROM forgotten_items f "
                "JOIN projects p ON p.id = f.project_id WHERE (f.project_id, f.content_hash) > (?, ?) "
                "ORDER BY f.project_id, f.content_hash LIMIT ?",
                (*last, page_size),
            ).fetchall()
            if not rows:
                return
            for row in rows:
                yield {"project": row[1], "content_hash": row[2], "kind": row[3], "forgotten_at_epoch": row[4]}
            last = (rows[-1][0], rows[-1][2])

    # -- import -----------------------------------------------------------------------------------
    def session_projects(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The project each existing session (platform_source, agent_session_id) belongs to."""
        found: dict[tuple[str, str], str] = {}
        for platform, agent in dict.fromkeys(keys):
            row = self._conn.execute(
                "SELECT p.name FROM sessions s JOIN projects p ON p.id = s.project_id "
                "WHERE s.platform_source = ? AND s.agent_session_id = ?",
                (platform, agent),
            ).fetchone()
            if row is not None:
                found[(platform, agent)] = row[0]
        return found

    def import_records(self, records: Sequence[TransferRecord]) -> list[Outcome]:
        """Write a batch in one transaction, in order; a record the database refuses is rolled back alone
        (a savepoint each) and reported as rejected. Existing uuids, sessions and projects are left as they
        are, so importing the same records again writes nothing."""
        outcomes: list[Outcome] = []
        created_ids: list[int] = []
        try:
            with atomic(self._conn) as conn:
                session_columns = _columns(conn, "sessions") - set(_SESSION_KEYS)
                item_extras = _columns(conn, "memory_items") - {*_ITEM_KEYS, *_ITEM_INSERTED}
                for record in records:
                    conn.execute("SAVEPOINT transfer_record")
                    try:
                        if isinstance(record, TransferProject):
                            outcome = self._import_project(conn, record)
                        elif isinstance(record, TransferSession):
                            outcome = self._import_session(conn, record, session_columns)
                        elif isinstance(record, TransferForgotten):
                            outcome = self._import_forgotten(conn, record)
                        else:
                            outcome, new_id = self._import_item(conn, record, item_extras)
                            if new_id is not None:
                                created_ids.append(new_id)
                    except (sqlite3.IntegrityError, ValidationError) as exc:
                        conn.execute("ROLLBACK TO transfer_record")
                        self._project_ids.clear()
                        outcome = Outcome("rejected", str(exc))
                    conn.execute("RELEASE transfer_record")
                    outcomes.append(outcome)
        except BaseException:
            self._project_ids.clear()
            raise
        self._notify("added", created_ids)
        return outcomes

    def _import_project(self, conn: sqlite3.Connection, record: TransferProject) -> Outcome:
        self._projects_seen = None  # may add a project or a merge
        row = conn.execute("SELECT id, merged_into_project FROM projects WHERE name = ?", (record.name,)).fetchone()
        if row is not None:
            if row[1] is None and record.merged_into_project and record.merged_into_project != record.name:
                conn.execute("UPDATE projects SET merged_into_project = ? WHERE id = ?",
                             (record.merged_into_project, row[0]))
            return Outcome("existing")
        conn.execute(
            "INSERT INTO projects(name, merged_into_project, created_at_epoch) VALUES (?, ?, ?)",
            (record.name, record.merged_into_project, record.created_at_epoch),
        )
        return Outcome("created")

    def _import_session(self, conn: sqlite3.Connection, record: TransferSession, columns: set[str]) -> Outcome:
        missing = [c for c in _SESSION_REQUIRED if record.columns.get(c) is None]
        if missing:
            raise ValidationError(f"session lacks {', '.join(missing)}")
        platform, agent = record.key
        row = conn.execute(
            "SELECT id, status, ended_at_epoch FROM sessions WHERE platform_source = ? AND agent_session_id = ?",
            (platform, agent),
        ).fetchone()
        if row is not None:
            status, ended = record.columns.get("status"), record.columns.get("ended_at_epoch")
            if row[1] == "active" and row[2] is None and status in ("completed", "failed") and ended is not None:
                conn.execute("UPDATE sessions SET status = ?, ended_at_epoch = ? WHERE id = ?", (status, ended, row[0]))
            return Outcome("existing")
        values = {k: v for k, v in record.columns.items() if k in columns}
        values["project_id"] = self._project_id(conn, record.project)
        conn.execute(
            f"INSERT INTO sessions({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})",
            tuple(values.values()),
        )
        return Outcome("created")

    def _import_forgotten(self, conn: sqlite3.Connection, record: TransferForgotten) -> Outcome:
        """Record a deletion mark, unless the project holds that content now: the receiving store's own state
        wins (an item it kept or saved again after the export stays). An existing mark keeps its time."""
        project_id = self._project_id(conn, record.project)
        if conn.execute("SELECT 1 FROM memory_items WHERE project_id = ? AND content_hash = ?",
                        (project_id, record.content_hash)).fetchone():
            return Outcome("skipped")
        row = conn.execute(
            "INSERT INTO forgotten_items(project_id, content_hash, kind, forgotten_at_epoch) VALUES (?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING RETURNING 1",
            (project_id, record.content_hash, record.kind, record.forgotten_at_epoch),
        ).fetchone()
        return Outcome("created") if row is not None else Outcome("existing")

    def _import_item(self, conn: sqlite3.Connection, record: TransferItem,
                     extra_columns: set[str]) -> tuple[Outcome, int | None]:
        if record.item.source is not None:
            raise ValidationError("a transferred item carries its provenance in sources, not item.source")
        row = conn.execute("SELECT id FROM memory_items WHERE uuid = ?", (record.uuid,)).fetchone()
        new_id: int | None = None
        if row is not None:
            item_id, outcome = row[0], Outcome("existing")
        else:
            result = self._insert(conn, record.item, item_uuid=record.uuid, digest=record.content_hash,
                                  updated_at_epoch=record.updated_at_epoch)
            if result.forgotten:  # the user deleted this content: it stays deleted, with no provenance either
                return Outcome("forgotten"), None
            item_id = result.id
            outcome = Outcome("created") if result.created else Outcome("duplicate")
            if result.created:
                new_id = item_id
                extra = {k: v for k, v in record.extra.items() if k in extra_columns}
                if extra:
                    conn.execute(f"UPDATE memory_items SET {', '.join(f'{k} = ?' for k in extra)} WHERE id = ?",
                                 (*extra.values(), item_id))
        for source_type, source_table, source_id, created in record.sources:
            conn.execute(
                "INSERT INTO memory_sources(memory_item_id, source_type, source_table, source_id, created_at_epoch) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (item_id, source_type, source_table, source_id, created),
            )
        return outcome, new_id


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
