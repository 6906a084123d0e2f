"""The team store seen as one tenant's store: the storage protocols ``Items``, ``KeywordSearch`` and
``ProjectsAndSessions`` (``store/protocols.py``) over ``TeamStore``, bound to one tenant and optionally pinned to
one project (a key's pin), so code written against the protocols runs on either backend.

Where the two stores differ, the difference is kept and stated rather than papered over:

- the team store keeps a memory's title and text (secrets and ``<private>`` parts removed before they are hashed
  and stored), its kind, type, project, session and time; the other fields of ``MemoryItem`` read back empty, its
  ``uuid`` is empty and ``updated_at_epoch`` is its creation time; its ``platform_source`` is its session's;
- a filter may name projects, kinds, types, a time range and a session; concepts, files and platform filters are
  refused (``ValidationError``), and the keyword leg takes projects only, ranked by relevance;
- projects are not merged on the server (``merged_into_project`` is always None); a session is made under the
  project named (the server keys a session by project, platform and agent session id) and its start time is the
  server's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memcairn.errors import ValidationError
from memcairn.models import DEFAULT_TYPES, AddResult, ItemFilter, MemoryItem, NewItem
from memcairn.pgstore.audit import Actor
from memcairn.pgstore.db import tenant_transaction
from memcairn.pgstore.items import TeamStore, prepare
from memcairn.store.records import ProjectInfo, only_item

_SELECT = ("SELECT i.id, p.name, i.kind, i.type, i.title, i.text, i.created_at_epoch, i.content_hash,"
           " s.agent_session_id, s.platform FROM items i"
           " JOIN projects p ON p.id = i.project_id AND p.tenant_id = i.tenant_id"
           " LEFT JOIN sessions s ON s.id = i.session_id AND s.tenant_id = i.tenant_id")
_UNSUPPORTED = ("concepts", "files", "platform_source")


def _item(row: Sequence[Any]) -> MemoryItem:
    item_id, project, kind, kind_type, title, text, epoch, digest, session, platform = row
    return MemoryItem(
        id=int(item_id), uuid="", project=project, merged_into_project=None, session=session, kind=kind,
        type=kind_type or DEFAULT_TYPES[kind], title=title or None, subtitle=None, text=text or None,
        narrative=None, facts=[], concepts=[], files_read=[], files_modified=[], metadata={}, request=None,
        investigated=None, learned=None, completed=None, next_steps=None, notes=None, prompt_number=None,
        platform_source=platform, content_hash=digest, created_at_epoch=int(epoch), updated_at_epoch=int(epoch),
    )


class TenantStore:
    """``team``'s memories of ``tenant_id`` (within project ``pin`` when given), through the storage protocols."""

    def __init__(self, team: TeamStore, tenant_id: int, *, pin: int | None = None, actor: Actor | None = None) -> None:
        self.team = team
        self.tenant_id = tenant_id
        self.pin = pin
        self.actor = actor

    # -- items: writes ------------------------------------------------------------------------------------
    def add_item(self, item: NewItem, *, revive: bool = False) -> AddResult:
        return self.add_items([item], revive=revive)[0]

    def add_items(self, items: Sequence[NewItem], *, revive: bool = False) -> list[AddResult]:
        ready = [prepare(item) for item in items]  # every item checked before anything is written
        with self.team.pool.connection() as conn, tenant_transaction(conn, self.tenant_id) as cur:
            saved = [self.team.insert(cur, self.tenant_id, r, pin=self.pin, revive=revive, actor=self.actor)
                     for r in ready]
        if any(s.created for s in saved):
            self.team.written.set()  # wakes the embedding task, as TeamStore.add does
        return [AddResult(s.id, s.created, s.forgotten) for s in saved]

    def delete_items(self, ids: Iterable[int]) -> list[int]:
        """Forget each (the server's delete: gone, and its content refused when sent again)."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        return [i for i in wanted if self.team.forget(self.tenant_id, i, pin=self.pin, actor=self.actor)]

    # -- items: reads -------------------------------------------------------------------------------------
    def get_item(self, item_id: int) -> MemoryItem:
        return only_item(self.get_items([item_id]), item_id)

    def get_items(self, ids: Sequence[int]) -> list[MemoryItem]:
        wanted = [int(i) for i in ids]
        if not wanted:
            return []
        rows = self._rows(f"{_SELECT} WHERE i.tenant_id = %s AND i.id = ANY(%s) AND (%s::bigint IS NULL OR"
                          " i.project_id = %s)", (self.tenant_id, wanted, self.pin, self.pin))
        by_id = {item.id: item for item in map(_item, rows)}
        return [by_id[i] for i in dict.fromkeys(wanted) if i in by_id]

    def list_items(self, flt: ItemFilter | None = None, *, order: str = "newest", limit: int = 50,
                   offset: int = 0) -> list[MemoryItem]:
        clauses, params = self._where(flt)
        if clauses is None:
            return []
        direction = "ASC" if order == "oldest" else "DESC"
        sql = (f"{_SELECT} WHERE {' AND '.join(clauses)}"
               f" ORDER BY i.created_at_epoch {direction}, i.id {direction} LIMIT %s OFFSET %s")
        return [_item(row) for row in self._rows(sql, (*params, int(limit), int(offset)))]

    # -- keyword leg --------------------------------------------------------------------------------------
    def keyword_ids(self, query: str, flt: ItemFilter | None = None, *, limit: int = 20, offset: int = 0,
                    order: str = "relevance") -> list[tuple[int, float]]:
        """The team store's keyword leg (``TeamStore.keyword_leg``): (id, score) best first."""
        if order != "relevance":
            raise ValidationError("the team store's keyword leg ranks by relevance only")
        if flt is not None and any(getattr(flt, name) for name in ("kinds", "types", "concepts", "files",
                                                                   "date_start", "date_end", "platform_source",
                                                                   "session")):
            raise ValidationError("the team store's keyword leg filters by project only")
        names = None if flt is None or flt.projects is None else list(flt.projects)
        project_ids = self._project_ids(names)
        if not project_ids:
            return []
        with self.team.pool.connection() as conn, tenant_transaction(conn, self.tenant_id) as cur:
            hits = self.team.keyword_leg(cur, self.tenant_id, project_ids, query, int(limit) + int(offset))
        return hits[int(offset):]

    # -- projects and sessions ----------------------------------------------------------------------------
    def projects(self) -> list[ProjectInfo]:
        return [ProjectInfo(p["name"], None, p["items"], p["last_item_at_epoch"])
                for p in self.team.projects(self.tenant_id, pin=self.pin)]

    def project_names(self) -> list[str]:
        return sorted(p.name for p in self.projects())

    def resolve_projects(self, names: Sequence[str]) -> list[tuple[int, str]]:
        rows = self._rows("SELECT id, name FROM projects WHERE tenant_id = %s AND name = ANY(%s)"
                          " AND (%s::bigint IS NULL OR id = %s) ORDER BY id",
                          (self.tenant_id, list(names), self.pin, self.pin))
        return [(int(pid), name) for pid, name in rows]

    def resolve_project_ids(self, names: Sequence[str]) -> list[int]:
        return [pid for pid, _ in self.resolve_projects(names)]

    def ensure_session(self, agent_session_id: str, project: str, platform_source: str = "unknown",
                       started_at_epoch: int | None = None) -> int:
        return self.team.start_session(self.tenant_id, project, agent_session_id, platform_source, pin=self.pin,
                                       actor=self.actor)

    def end_session(self, agent_session_id: str, platform_source: str = "unknown", status: str = "completed",
                    ended_at_epoch: int | None = None) -> bool:
        return self.team.end_session(self.tenant_id, agent_session_id, platform_source, status, pin=self.pin,
                                     actor=self.actor) > 0

    # -- helpers ------------------------------------------------------------------------------------------
    def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self.team.pool.connection() as conn, tenant_transaction(conn, self.tenant_id) as cur:
            return cur.execute(sql, params).fetchall()

    def _project_ids(self, names: Sequence[str] | None) -> list[int]:
        if names is None:
            rows = self._rows("SELECT id FROM projects WHERE tenant_id = %s AND (%s::bigint IS NULL OR id = %s)",
                              (self.tenant_id, self.pin, self.pin))
            return [int(r[0]) for r in rows]
        return self.resolve_project_ids(names) if names else []

    def _where(self, flt: ItemFilter | None) -> tuple[list[str] | None, list[Any]]:
        """SQL clauses and parameters for the filter within the tenant and pin; None: nothing can match."""
        clauses = ["i.tenant_id = %s", "(%s::bigint IS NULL OR i.project_id = %s)"]
        params: list[Any] = [self.tenant_id, self.pin, self.pin]
        if flt is None:
            return clauses, params
        refused = [name for name in _UNSUPPORTED if getattr(flt, name)]
        if refused:
            raise ValidationError(f"the team store does not keep {', '.join(refused)} to filter by")
        if flt.projects is not None:
            ids = self._project_ids(list(flt.projects))
            if not ids:
                return None, []
            clauses.append("i.project_id = ANY(%s)")
            params.append(ids)
        for column, values in (("i.kind", flt.kinds), ("i.type", flt.types)):
            if values:
                clauses.append(f"{column} = ANY(%s)")
                params.append(list(values))
        if flt.date_start is not None:
            clauses.append("i.created_at_epoch >= %s")
            params.append(int(flt.date_start))
        if flt.date_end is not None:
            clauses.append("i.created_at_epoch <= %s")
            params.append(int(flt.date_end))
        if flt.session:
            clauses.append("s.agent_session_id = %s")
            params.append(flt.session)
        return clauses, params
