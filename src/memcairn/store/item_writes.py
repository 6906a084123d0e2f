"""Writes of memories: insert with dedupe by content hash, the marks of deleted content, edits and deletes.
Mixed into ``Store`` so the store stays the only owner of connections and SQL."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from memcairn.core.clock import now_ms
from memcairn.core.errors import ValidationError
from memcairn.core.fields import EDITABLE_FIELDS, FIELD, FIELDS, NAMES
from memcairn.core.models import SUMMARY_SECTIONS, AddResult, MemoryItem, NewItem
from memcairn.store.db import atomic
from memcairn.store.integrity import restores_keyword_table
from memcairn.store.validation import validate_item

_INSERT_COLUMNS = (
    "uuid", "project_id", "session_id", "kind", "type", *NAMES, "content_hash", "created_at_epoch",
    "updated_at_epoch",
)
_INSERT_SQL = (
    f"INSERT INTO memory_items ({', '.join(_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _INSERT_COLUMNS)}) "
    "ON CONFLICT(project_id, content_hash) DO NOTHING RETURNING id"
)


def content_hash(item: NewItem) -> str:
    """First 16 hex chars of sha256 over the fields that identify a memory, joined with NUL.

    The session key, title and narrative identify an observation (text too when it has no narrative);
    prompts, summaries and manual items add the text fields that make them what they are. NUL cannot
    occur in the fields' joins ambiguously: ``"ab" + "c"`` and ``"a" + "bc"`` hash differently.
    """
    session_key = f"{item.platform_source or ''}:{item.session}" if item.session else ""
    parts = [session_key, item.title or "", item.narrative or ""]
    if item.kind == "observation":
        if not item.narrative:
            parts.append(item.text or "")
    elif item.kind == "summary":
        parts += ["summary", *(getattr(item, s) or "" for s in SUMMARY_SECTIONS), str(item.prompt_number or "")]
    elif item.kind == "prompt":
        parts += ["prompt", item.text or "", str(item.prompt_number or "")]
    else:
        parts += ["manual", item.text or ""]
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]


class ItemWritesMixin:
    _conn: sqlite3.Connection
    _project_ids: dict[str, int]
    _project_id: Callable[[sqlite3.Connection, str], int]
    _session_id: Callable[[sqlite3.Connection, int, str, str, int], int]
    _notify: Callable[[str, list[int]], None]
    get_item: Callable[[int], MemoryItem]

    def add_item(self, item: NewItem, *, revive: bool = False) -> AddResult:
        return self.add_items([item], revive=revive)[0]

    @restores_keyword_table
    def add_items(self, items: Sequence[NewItem], *, revive: bool = False) -> list[AddResult]:
        """Insert a batch in one transaction; duplicates return the existing row's id.

        Content the user deleted before is not stored again (``AddResult.forgotten``) unless ``revive``: an
        explicit save by a person or an agent, which stores it and lifts the mark.

        Raises:
            ValidationError: an item is malformed (nothing of the batch is written), or its session
                belongs to another project.
        """
        checked = [validate_item(item) for item in items]
        results: list[AddResult] = []
        try:
            with atomic(self._conn) as conn:
                for item in checked:
                    results.append(self._insert(conn, item, revive=revive))
        except sqlite3.IntegrityError as exc:
            self._project_ids.clear()
            raise ValidationError(f"rejected by the store: {exc}") from None
        except BaseException:
            self._project_ids.clear()  # ids cached inside a rolled-back transaction may not exist
            raise
        self._notify("added", [r.id for r in results if r.created])
        return results

    def _insert(self, conn: sqlite3.Connection, item: NewItem, *, item_uuid: str | None = None,
                digest: str | None = None, updated_at_epoch: int | None = None, revive: bool = False) -> AddResult:
        """Insert one item; an import passes the uuid, hash and update time it recorded elsewhere. Content
        the user deleted is refused (``AddResult.forgotten``) unless ``revive`` (see `add_items`)."""
        if item.source is not None:
            row = conn.execute(
                "SELECT memory_item_id FROM memory_sources WHERE source_type = ? AND source_table = ? "
                "AND source_id = ?",
                item.source,
            ).fetchone()
            if row is not None:
                return AddResult(row[0], False)
        created = item.created_at_epoch if item.created_at_epoch is not None else now_ms()
        project_id = self._project_id(conn, item.project)
        digest = digest or content_hash(item)
        if revive:
            conn.execute("DELETE FROM forgotten_items WHERE project_id = ? AND content_hash = ?", (project_id, digest))
        elif self._is_forgotten(conn, project_id, digest):
            return AddResult(0, False, forgotten=True)
        # Looked up before the INSERT: an INSERT refused by the unique index still advances the AUTOINCREMENT
        # sequence, so every duplicate would use up an id (#5 refused, the next memory #6).
        existing = conn.execute("SELECT id FROM memory_items WHERE project_id = ? AND content_hash = ?",
                                (project_id, digest)).fetchone()
        if existing is not None:
            result = AddResult(existing[0], False)
            self._record_source(conn, item, result.id)
            return result
        session_id = None
        if item.session:
            session_id = self._session_id(conn, project_id, item.session, item.platform_source or "unknown",
                                          created)
        values = (
            item_uuid or str(uuid.uuid4()), project_id, session_id, item.kind, item.type,
            *(f.to_column(getattr(item, f.name)) for f in FIELDS), digest, created,
            updated_at_epoch if updated_at_epoch is not None else now_ms(),
        )
        row = conn.execute(_INSERT_SQL, values).fetchone()
        result = AddResult(row[0], True) if row is not None else AddResult(
            conn.execute(
                "SELECT id FROM memory_items WHERE project_id = ? AND content_hash = ?", (project_id, digest)
            ).fetchone()[0],
            False,
        )
        self._record_source(conn, item, result.id)
        return result

    @staticmethod
    def _record_source(conn: sqlite3.Connection, item: NewItem, item_id: int) -> None:
        if item.source is not None:
            conn.execute(
                "INSERT INTO memory_sources(memory_item_id, source_type, source_table, source_id, "
                "created_at_epoch) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (item_id, *item.source, now_ms()),
            )

    @staticmethod
    def _is_forgotten(conn: sqlite3.Connection, project_id: int, digest: str) -> bool:
        """Whether the user deleted this content from the project or from a project merged into it (the chain
        of ``merged_into_project`` pointing at it, transitively), unless the project holds it now (an explicit
        save or an edit here lifts only this project's mark).

        Read at insert time rather than copied at merge time: a merge also arrives through an import (a
        project record's ``merged_into_project``) or was made by an earlier release, and content deleted under
        the old name after the merge is marked under that name; a copy made in ``merge_project`` would miss
        all three. Content deleted nowhere (almost every insert) is answered by one seek on the marks' content
        index; only content deleted somewhere follows the chain, a recursive query over ``projects``, a small
        table (a scan per step: the ``+`` keeps SQLite from building an automatic index on every call).
        """
        if conn.execute("SELECT 1 FROM forgotten_items WHERE content_hash = ? LIMIT 1", (digest,)).fetchone() is None:
            return False
        return conn.execute(
            "WITH RECURSIVE chain(id, name) AS (SELECT id, name FROM projects WHERE id = :pid UNION "
            "SELECT p.id, p.name FROM projects p JOIN chain c ON +p.merged_into_project = c.name) "
            "SELECT 1 FROM chain JOIN forgotten_items f ON f.project_id = chain.id AND f.content_hash = :digest "
            "WHERE NOT EXISTS (SELECT 1 FROM memory_items WHERE project_id = :pid AND content_hash = :digest) "
            "LIMIT 1",
            {"pid": project_id, "digest": digest},
        ).fetchone() is not None

    @restores_keyword_table
    def update_item(self, item_id: int, **changes: Any) -> MemoryItem:
        """Edit fields of an item (its content hash follows); FTS follows by trigger.

        Raises:
            NotFoundError: no item has this id.
            ValidationError: a field is malformed, or the edit makes it identical to another item.
        """
        current = self.get_item(item_id)
        allowed = {"type", *EDITABLE_FIELDS}
        unknown = set(changes) - allowed
        if unknown:
            raise ValidationError(f"cannot edit {', '.join(sorted(unknown))}; editable: {', '.join(sorted(allowed))}")
        merged = NewItem(
            project=current.project, kind=current.kind, session=current.session,
            platform_source=current.platform_source, created_at_epoch=current.created_at_epoch,
            **{k: changes.get(k, getattr(current, k)) for k in allowed},
        )
        item = validate_item(merged)
        sets = {k: FIELD[k].to_column(getattr(item, k)) if k in FIELD else getattr(item, k) for k in allowed}
        sets["content_hash"] = content_hash(item)
        sets["updated_at_epoch"] = now_ms()
        try:
            with atomic(self._conn) as conn:
                conn.execute(
                    f"UPDATE memory_items SET {', '.join(f'{k} = ?' for k in sets)} WHERE id = ?",
                    (*sets.values(), item_id),
                )
                # An edit is explicit: content deleted before may be written again this way.
                conn.execute("DELETE FROM forgotten_items WHERE content_hash = ? AND project_id = "
                             "(SELECT project_id FROM memory_items WHERE id = ?)", (sets["content_hash"], item_id))
        except sqlite3.IntegrityError:
            raise ValidationError(f"the edit would make #{item_id} identical to another memory") from None
        self._notify("updated", [item_id])
        return self.get_item(item_id)

    def delete_items(self, ids: Iterable[int]) -> list[int]:
        """Delete items (FTS follows by trigger); return the ids that existed. Their content stays deleted: a
        replay or re-import of it is refused (see `add_items`)."""
        return self._delete_items(list(dict.fromkeys(int(i) for i in ids)))

    @restores_keyword_table
    def _delete_items(self, wanted: list[int]) -> list[int]:
        deleted: list[int] = []
        with atomic(self._conn) as conn:
            for item_id in wanted:
                conn.execute("DELETE FROM evidence WHERE item_id = ?", (item_id,))  # what the memory stood on
                row = conn.execute("DELETE FROM memory_items WHERE id = ? RETURNING project_id, content_hash, kind",
                                   (item_id,)).fetchone()
                if row is not None:
                    conn.execute(
                        "INSERT INTO forgotten_items(project_id, content_hash, kind, forgotten_at_epoch) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET forgotten_at_epoch = "
                        "excluded.forgotten_at_epoch",
                        (*row, now_ms()),
                    )
                    deleted.append(item_id)
        self._notify("deleted", deleted)
        return deleted
