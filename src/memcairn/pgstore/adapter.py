"""The team store seen as one tenant's store: the storage protocols ``Items``, ``KeywordSearch``,
``ProjectsAndSessions``, the search service's ``SearchStore`` (``TimeWindow``, ``KeywordEvidence``) and the
SessionStart context's ``ContextStore`` (``store/protocols.py``) over ``TeamStore``, bound to one tenant and
optionally pinned to one project (a key's pin), so code written against the protocols runs on either backend.

A ``TenantStore`` runs each call in a transaction of its own, or, given ``cur``, every read in that open
transaction (a server request's: the key check and the reads on one pooled connection). A bound store only reads
(a write raises ``RuntimeError``: a process's copies of the projects, ``pgstore/project_copies.py``, must never
read a transaction's own uncommitted rows) and lives for its request: it keeps what it resolved (project names)
and what its search read of the candidates (``pgstore/candidates.py``), so the times and keyword evidence the
search service asks for one after another are read in one statement.

Rows are hydrated with the project's name and the session looked up per row by primary key (as
``items.RECORD_COLUMNS``), not joined: a join lets the planner hash every session of a tenant to hydrate a page.

Where the two stores differ, the difference is kept and stated rather than papered over:

- the team store keeps a memory's title and text (secrets and ``<private>`` parts removed before they are hashed
  and stored), its anchors (``pgstore/item_fields.py``), its kind, type, project, session and time; the other
  fields of ``MemoryItem`` read back empty, its ``uuid`` is empty and ``updated_at_epoch`` is its creation time;
  its ``platform_source`` is its session's;
- a filter may name projects, kinds, types, a time range and a session; concepts, files and platform filters are
  refused (``ValidationError``), and the keyword leg takes projects only, ranked by relevance; so are the
  context's totals and window of one platform;
- the context's stored characters of a memory are its title's and text's (``pgstore/totals.py``), and its
  window of newest memories, asked of every project, is the earliest of each project's;
- keyword evidence (``query_terms``) counts a word's rows in every project of the tenant (the local store: in
  the whole store), but for the candidates of a bound store's search: in the projects it searches (as the
  server's search always has);
- projects are not merged on the server (``merged_into_project`` is always None); a session is made under the
  project named (the server keys a session by project, platform and agent session id) and its start time is the
  server's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from memcairn.core.errors import ValidationError
from memcairn.core.models import DEFAULT_TYPES, AddResult, ItemFilter, MemoryItem, NewItem
from memcairn.pgstore import item_fields
from memcairn.pgstore.audit import Actor
from memcairn.pgstore.candidates import CandidateReads
from memcairn.pgstore.db import tenant_transaction
from memcairn.pgstore.items import RECORD_COLUMNS, TeamStore, prepare
from memcairn.pgstore.keyword import in_projects
from memcairn.pgstore.totals import window_start
from memcairn.store.records import ProjectInfo, QueryTerms, only_item

# the API's columns of a memory and its session's platform, looked up by primary key; last, its number in the
# tenant (the API's id: ``pgstore/item_numbers.py``), kept by the store rather than in the record
_SELECT = (f"SELECT {RECORD_COLUMNS},"
           " (SELECT s.platform FROM sessions s WHERE s.id = i.session_id AND s.tenant_id = i.tenant_id), i.number"
           " FROM items i")
_UNSUPPORTED = ("concepts", "files", "platform_source")
_BEYOND_PROJECTS = ("kinds", "types", "concepts", "files", "date_start", "date_end", "platform_source", "session")


def _item(row: Sequence[Any], *, numbered: bool = False) -> MemoryItem:
    """A row of ``_SELECT`` as a record; ``numbered``: its id is its number in the tenant (the API's)."""
    item_id, project, kind, kind_type, title, text, epoch, digest, session = row[:9]
    kept, (platform, number) = item_fields.read(row[9:-2]), row[-2:]
    return MemoryItem(
        id=int(number if numbered else item_id), uuid="", project=project, merged_into_project=None, session=session,
        kind=kind,
        type=kind_type or DEFAULT_TYPES[kind], title=title or None, subtitle=None, text=text or None,
        narrative=None, facts=[], concepts=[], files_read=[], files_modified=[], metadata={}, request=None,
        investigated=None, learned=None, completed=None, next_steps=None, notes=None, prompt_number=None,
        platform_source=platform, content_hash=digest, created_at_epoch=int(epoch), updated_at_epoch=int(epoch),
        **kept,
    )


def _projects_only(flt: ItemFilter | None) -> bool:
    return flt is None or not any(getattr(flt, name) for name in _BEYOND_PROJECTS)


class TenantStore:
    """``team``'s memories of ``tenant_id`` (within project ``pin`` when given), through the storage protocols;
    in the open transaction ``cur`` (acting for ``tenant_id``) when given. ``numbered``: the records it reads carry
    their number in the tenant as their id (the API's ids: a reader that only shows them, as the context does)."""

    def __init__(self, team: TeamStore, tenant_id: int, *, pin: int | None = None, actor: Actor | None = None,
                 cur: psycopg.Cursor | None = None, numbered: bool = False) -> None:
        self.team = team
        self.tenant_id = tenant_id
        self.pin = pin
        self.actor = actor
        self.cur = cur
        self._reads = CandidateReads() if cur is not None else None
        self._resolved: dict[tuple[str, ...] | None, list[int]] = {}  # project names -> ids, kept while bound
        self.numbers: dict[int, int] = {}  # row id -> number in the tenant of every memory this store read
        self.numbered = numbered

    @contextmanager
    def _cursor(self) -> Iterator[psycopg.Cursor]:
        """The bound transaction, or a transaction of its own for this call."""
        if self.cur is not None:
            yield self.cur
            return
        with self.team.pool.connection() as conn, tenant_transaction(conn, self.tenant_id) as cur:
            yield cur

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Cursor]:
        """A transaction of its own for a write; a bound store does not write."""
        if self.cur is not None:
            raise RuntimeError("a TenantStore bound to a request's transaction only reads; write through an unbound "
                               "one")
        with self.team.pool.connection() as conn, tenant_transaction(conn, self.tenant_id) as cur:
            yield cur

    def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._cursor() as cur:
            return cur.execute(sql, params).fetchall()

    # -- items: writes ------------------------------------------------------------------------------------
    def add_item(self, item: NewItem, *, revive: bool = False) -> AddResult:
        return self.add_items([item], revive=revive)[0]

    def add_items(self, items: Sequence[NewItem], *, revive: bool = False) -> list[AddResult]:
        ready = [prepare(item) for item in items]  # every item checked before anything is written
        with self._writing() as cur:
            saved = [self.team.insert(cur, self.tenant_id, r, pin=self.pin, revive=revive, actor=self.actor)
                     for r in ready]
        if any(s.created for s in saved):
            self.team.written.set()  # wakes the embedding task, as TeamStore.add does
        return [AddResult(s.id, s.created, s.forgotten) for s in saved]

    def delete_items(self, ids: Iterable[int]) -> list[int]:
        """Forget each (the server's delete: gone, and its content refused when sent again)."""
        wanted = list(dict.fromkeys(map(int, ids)))
        with self._writing() as cur:
            return [i for i in wanted if self.team.forget_in(cur, self.tenant_id, i, pin=self.pin, actor=self.actor)]

    # -- items: reads -------------------------------------------------------------------------------------
    def get_item(self, item_id: int) -> MemoryItem:
        return only_item(self.get_items([item_id]), item_id)

    def get_items(self, ids: Sequence[int]) -> list[MemoryItem]:
        wanted = list(dict.fromkeys(map(int, ids)))
        if not wanted:
            return []
        rows = self._rows(f"{_SELECT} WHERE i.tenant_id = %s AND (%s::bigint IS NULL OR i.project_id = %s)"
                          " AND i.id = ANY(%s)", (self.tenant_id, self.pin, self.pin, wanted))
        by_id = {item.id: item for item in self._items(rows)}
        return [by_id[i] for i in wanted if i in by_id]

    def _items(self, rows: Sequence[Sequence[Any]]) -> list[MemoryItem]:
        """The records of ``_SELECT``'s rows; their numbers kept in ``numbers``."""
        self.numbers.update((int(row[0]), int(row[-1])) for row in rows)
        return [_item(row, numbered=self.numbered) for row in rows]

    def list_items(self, flt: ItemFilter | None = None, *, order: str = "newest", limit: int = 50,
                   offset: int = 0) -> list[MemoryItem]:
        clauses, params = self._where(flt)
        if clauses is None:
            return []
        direction = "ASC" if order == "oldest" else "DESC"
        sql = (f"{_SELECT} WHERE {' AND '.join(clauses)}"
               f" ORDER BY i.created_at_epoch {direction}, i.id {direction} LIMIT %s OFFSET %s")
        return self._items(self._rows(sql, (*params, int(limit), int(offset))))

    # -- time window --------------------------------------------------------------------------------------
    def filter_ids(self, ids: Sequence[int], flt: ItemFilter | None) -> set[int]:
        return set(self.created_epochs(ids, flt))

    def created_epochs(self, ids: Sequence[int], flt: ItemFilter | None = None) -> dict[int, int]:
        """``created_at_epoch`` of each of ``ids`` that exists and passes the filter. A bound store that knows
        the query being searched reads the keyword evidence of every candidate with it (``query_terms``)."""
        wanted = list(dict.fromkeys(map(int, ids)))
        if not wanted:
            return {}
        reads = self._reads
        if reads is None or not _projects_only(flt):
            return self._created(wanted, flt)
        scope = None if flt is None or flt.projects is None else frozenset(self.project_ids(flt.projects))
        if scope is not None and not scope:
            return {}
        known = reads.known(wanted, scope)
        if known is not None:
            return known
        if reads.query is None or not reads.scope or (scope is not None and scope != reads.scope):
            return self._created(wanted, flt)
        asked = reads.to_read(wanted)
        with self._cursor() as cur:
            created, terms = self.team.keyword.candidates(cur, self.tenant_id, list(reads.scope), reads.query, asked)
        reads.record(asked, created, terms)
        out = {i: created[i] for i in wanted if i in created}
        outside = [i for i in wanted if i not in created]
        if scope is None and outside:  # not in the searched projects: maybe in another one
            out.update(self._created(outside, None))
        return out

    def _created(self, ids: list[int], flt: ItemFilter | None) -> dict[int, int]:
        clauses, params = self._where(flt)
        if clauses is None:
            return {}
        rows = self._rows(f"SELECT i.id, i.created_at_epoch FROM items i WHERE {' AND '.join(clauses)}"
                          " AND i.id = ANY(%s)", (*params, ids))
        return {int(i): int(epoch) for i, epoch in rows}

    def neighbours(self, epoch: int, *, before: int, after: int, flt: ItemFilter | None = None,
                   anchor_id: int | None = None) -> tuple[list[MemoryItem], list[MemoryItem]]:
        """Items just before and at-or-after a point in time, oldest first in both (the anchor first of the
        later ones; ties in time by id)."""
        clauses, params = self._where(flt)
        if clauses is None:
            return [], []
        where = " AND ".join(clauses)
        key = anchor_id if anchor_id is not None else -1
        earlier = self._rows(f"{_SELECT} WHERE {where} AND (i.created_at_epoch, i.id) < (%s, %s)"
                             " ORDER BY i.created_at_epoch DESC, i.id DESC LIMIT %s",
                             (*params, int(epoch), key, int(before))) if before > 0 else []
        later = self._rows(f"{_SELECT} WHERE {where} AND (i.created_at_epoch, i.id) >= (%s, %s)"
                           " ORDER BY i.created_at_epoch, i.id LIMIT %s",
                           (*params, int(epoch), key, int(after))) if after > 0 else []
        return self._items(list(reversed(earlier))), self._items(later)

    # -- keyword leg and evidence -------------------------------------------------------------------------
    def keyword_ids(self, query: str, flt: ItemFilter | None = None, *, limit: int = 20, offset: int = 0,
                    order: str = "relevance") -> list[tuple[int, float]]:
        """The team store's keyword leg (``KeywordLeg.rank``): (id, score) best first."""
        if order != "relevance":
            raise ValidationError("the team store's keyword leg ranks by relevance only")
        if not _projects_only(flt):
            raise ValidationError("the team store's keyword leg filters by project only")
        project_ids = self.project_ids(None if flt is None else flt.projects)
        if not project_ids:
            return []
        with self._cursor() as cur:
            hits = self.team.keyword.rank(cur, self.tenant_id, project_ids, query, int(limit) + int(offset))
        if self._reads is not None:
            self._reads.note(query, project_ids, [i for i, _ in hits])
        return hits[int(offset):]

    def query_terms(self, query: str, ids: Sequence[int]) -> QueryTerms | None:
        """The query's words, how many rows hold each and which of ``ids`` do: counted in every project of the
        tenant (within the pin), or, for the candidates a bound store's search found, in the projects it searches."""
        wanted = list(map(int, ids))
        if self._reads is not None and (kept := self._reads.terms(query, wanted)) is not None:
            return kept  # the candidates of the search in progress: counted in the projects it searches
        project_ids = self.project_ids(None)
        with self._cursor() as cur:
            return self.team.keyword.query_terms(cur, self.tenant_id, project_ids, query, wanted)

    # -- semantic leg -------------------------------------------------------------------------------------
    def nearest(self, query: str, projects: Sequence[str] | None, limit: int) -> list[tuple[int, float]]:
        """(id, cosine similarity of its best chunk) of the items nearest ``query``, best first
        (``TeamStore.semantic_leg``: ``nearest`` with the query's cached embedding); nothing without a model."""
        if self.team.embedder is None or not query.strip():
            return []
        project_ids = self.project_ids(projects)
        if not project_ids:
            return []
        with self._cursor() as cur:
            hits = self.team.semantic_leg(cur, self.tenant_id, project_ids, query, int(limit))
        if self._reads is not None:
            self._reads.note(query, project_ids, [i for i, _ in hits])
        return hits

    # -- the SessionStart context -------------------------------------------------------------------------
    def chain_totals(self, project_ids: Sequence[int] | None, platform: str | None = None) -> tuple[int, int]:
        """(memories, stored characters) of the projects (every project when None), within the pin."""
        ids = self._context_projects(project_ids, platform)
        with self._cursor() as cur:
            return self.team.totals.totals(cur, self.tenant_id, ids)

    def window_start(self, project_ids: Sequence[int] | None, window: int, platform: str | None = None) -> int | None:
        """The creation time from which the newest ``window`` memories of each project lie (None: one holds fewer)."""
        ids = self._context_projects(project_ids, platform)
        if not ids:
            return None
        with self._cursor() as cur:
            return window_start(cur, self.tenant_id, ids, window)

    def _context_projects(self, project_ids: Sequence[int] | None, platform: str | None) -> list[int]:
        if platform:
            raise ValidationError("the team store does not keep platform_source to filter by")
        if project_ids is None:
            return self.project_ids(None)
        return [int(p) for p in project_ids if self.pin is None or int(p) == self.pin]

    # -- projects and sessions ----------------------------------------------------------------------------
    def projects(self) -> list[ProjectInfo]:
        with self._cursor() as cur:
            found = self.team.projects_in(cur, self.tenant_id, pin=self.pin)
        return [ProjectInfo(p["name"], None, p["items"], p["last_item_at_epoch"]) for p in found]

    def project_names(self) -> list[str]:
        rows = self._rows("SELECT name FROM projects WHERE tenant_id = %s AND (%s::bigint IS NULL OR id = %s)"
                          " ORDER BY name", (self.tenant_id, self.pin, self.pin))
        return [str(r[0]) for r in rows]

    def resolve_projects(self, names: Sequence[str]) -> list[tuple[int, str]]:
        rows = self._rows("SELECT id, name FROM projects WHERE tenant_id = %s AND name = ANY(%s)"
                          " AND (%s::bigint IS NULL OR id = %s) ORDER BY id",
                          (self.tenant_id, list(names), self.pin, self.pin))
        return [(int(pid), name) for pid, name in rows]

    def resolve_project_ids(self, names: Sequence[str]) -> list[int]:
        """The named projects' ids in id order, through the team store's cache of names (``project_ids``)."""
        return sorted(self.project_ids(list(names))) if names else []

    def ensure_session(self, agent_session_id: str, project: str, platform_source: str = "unknown",
                       started_at_epoch: int | None = None) -> int:
        with self._writing() as cur:
            return self.team.start_session_in(cur, self.tenant_id, project, agent_session_id, platform_source,
                                              pin=self.pin, actor=self.actor)

    def end_session(self, agent_session_id: str, platform_source: str = "unknown", status: str = "completed",
                    ended_at_epoch: int | None = None) -> bool:
        with self._writing() as cur:
            return self.team.end_session_in(cur, self.tenant_id, agent_session_id, platform_source, status,
                                            pin=self.pin, actor=self.actor) > 0

    # -- helpers ------------------------------------------------------------------------------------------
    def project_ids(self, names: Sequence[str] | None) -> list[int]:
        """The ids of the named projects (every project when None) within the pin; a bound store keeps them (a
        project keeps its id) and names are looked up through the team store's short-lived cache."""
        key = None if names is None else tuple(names)
        if key in self._resolved:
            return self._resolved[key]
        if key == ():
            return []
        with self._cursor() as cur:
            ids = self.team.project_ids_in(cur, self.tenant_id, list(key or ()), pin=self.pin)
        if self.cur is not None:
            self._resolved[key] = ids
        return ids

    def _where(self, flt: ItemFilter | None) -> tuple[list[str] | None, list[Any]]:
        """SQL clauses and parameters for the filter within the tenant and pin; None: nothing can match."""
        clauses = ["i.tenant_id = %s"]
        params: list[Any] = [self.tenant_id]
        if flt is not None:
            refused = [name for name in _UNSUPPORTED if getattr(flt, name)]
            if refused:
                raise ValidationError(f"the team store does not keep {', '.join(refused)} to filter by")
        if flt is not None and flt.projects is not None:
            ids = self.project_ids(flt.projects)  # within the pin
            if not ids:
                return None, []
            project_sql, project_param = in_projects(ids)  # one project: its index is read in order
            clauses.append(f"i.{project_sql}(%s)")
            params.append(project_param)
        elif self.pin is not None:
            clauses.append("i.project_id = %s")
            params.append(self.pin)
        if flt is None:
            return clauses, params
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
            clauses.append("i.session_id IN (SELECT s.id FROM sessions s WHERE s.tenant_id = %s"
                           " AND s.agent_session_id = %s)")
            params += [self.tenant_id, flt.session]
        return clauses, params
