"""The team store: memories of one tenant at a time, on PostgreSQL.

Every method takes the tenant it acts for and runs in ``tenant_transaction``, so row-level security and the
explicit ``tenant_id`` filters agree on what is visible. A project pin (a key's ``project_id``) narrows reads
and writes further. An item commits with its backlog row; its vectors, one per chunk of its text, follow
(``pgstore/backlog.py``).

The two legs of a search are read here (a search itself is the search service's: ``search/team.py`` runs
``SearchService`` over a ``TenantStore``, which fuses the legs, applies the relevance floor, orders and hydrates):

- keyword (``pgstore/keyword.py``, ``TeamStore.keyword``): the local store's plan of the query's words as a tsquery
  over the weighted ``fts`` column (title A, text B), the newest matches ranked with ``ts_rank(fts, q, 1)``, the
  best of them re-scored with BM25 from the projects' statistics;
- semantic (``nearest``): pgvector cosine distance over the items' chunk vectors, each item at its best chunk,
  through the HNSW index with ``hnsw.iterative_scan = relaxed_order``, so a small project inside a large tenant
  still gets its neighbours, or an exact scan when the projects hold fewer than ``EXACT_BELOW`` vectors.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import psycopg

from memcairn.core.clock import now_ms
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.lru import Lru
from memcairn.core.models import NewItem
from memcairn.pgstore import item_fields
from memcairn.pgstore.audit import Actor, audit, audit_actor
from memcairn.pgstore.backlog import vector_literal
from memcairn.pgstore.db import Pool, read_as, tenant_transaction
from memcairn.pgstore.keyword import KeywordLeg, TtlCache
from memcairn.pgstore.project_copies import ProjectCopies
from memcairn.pgstore.totals import ChainTotals
from memcairn.pgstore.waits import before_waiting
from memcairn.store.item_writes import content_hash
from memcairn.store.validation import validate_item
from memcairn.vectors.base import Embedder
from memcairn.wire.privacy.private_tags import strip_private
from memcairn.wire.privacy.redaction import redact_secrets
from memcairn.wire.privacy.scrubbing import scrub

EXACT_BELOW = 2_000  # projects holding fewer vectors than this are scanned exactly (the reference: 11-27 ms at 1k)
CHUNKS_PER_ITEM = 4  # chunks read from the HNSW graph per item wanted (as the local mirror asks its index)
MAX_LIMIT = 100
QUERY_CACHE = 2_048  # query vectors kept per server process (384 floats each)
PLAN_TTL = 10.0  # seconds a projects' exact-or-index choice is kept (either plan answers; one is faster)
PROJECT_TTL = 60.0  # seconds a project name's id is kept



@dataclass(frozen=True)
class Prepared:
    """An item validated, cleaned of secrets and hashed: what may be written anywhere in the database."""

    item: NewItem
    digest: str
    epoch: int


def prepare(item: NewItem) -> Prepared:
    item = validate_item(item)
    item = replace(item, title=_clean(item.title), text=_clean(item.text),
                   **{name: scrub(getattr(item, name)) for name in item_fields.WRITTEN_NAMES})
    return Prepared(item, content_hash(item), item.created_at_epoch or now_ms())


@dataclass(frozen=True)
class Saved:
    id: int
    created: bool
    forgotten: bool = False
    number: int = 0  # the memory's number within its tenant: its id in the API


def nearest_sql(*, exact: bool) -> str:
    """The semantic leg's query over the projects' chunk vectors (named parameters ``q`` vector, ``t`` tenant,
    ``p`` projects, ``n`` rows). Exact: every chunk's distance, each item at its best chunk (a grouping the
    HNSW index cannot answer, so the planner reads the projects' rows through their btree: cheaper than the
    graph for a small project). Else the HNSW graph is walked in distance order, the filters applied as it goes
    (with ``hnsw.iterative_scan`` it keeps walking until enough rows pass them); ``n`` is then chunks, and the
    caller keeps each item's first."""
    if exact:
        return ("SELECT item_id, max(1 - (embedding <=> %(q)s::vector)) AS similarity FROM item_vectors"
                " WHERE tenant_id = %(t)s AND project_id = ANY(%(p)s) GROUP BY item_id"
                " ORDER BY similarity DESC, item_id DESC LIMIT %(n)s")
    return ("SELECT item_id, 1 - (embedding <=> %(q)s::vector) AS similarity FROM item_vectors"
            " WHERE tenant_id = %(t)s AND project_id = ANY(%(p)s) ORDER BY embedding <=> %(q)s::vector LIMIT %(n)s")


# A memory as the API shows it (``TeamStore._record``): its columns, its project's name and its session's id, each
# looked up by primary key (a join lets the planner hash every session of a tenant to hydrate a page)
RECORD_COLUMNS = ("i.id, (SELECT p.name FROM projects p WHERE p.id = i.project_id AND p.tenant_id = i.tenant_id),"
                  " i.kind, i.type, i.title, i.text, i.created_at_epoch, i.content_hash,"
                  " (SELECT s.agent_session_id FROM sessions s"
                  " WHERE s.id = i.session_id AND s.tenant_id = i.tenant_id), " + item_fields.SELECTED)


class TeamStore:
    """Tenant-scoped reads and writes over a pool of ``memcairn_app`` connections."""

    def __init__(self, pool: Pool, embedder: Embedder | None = None, *, exact_below: int = EXACT_BELOW,
                 query_cache: int = QUERY_CACHE, fusion: str = "minmax", copies: bool = True) -> None:
        if fusion not in ("minmax", "rrf"):
            raise ValueError(f"unknown fusion {fusion!r}; use minmax or rrf")
        self.pool = pool
        self.fusion = fusion
        self.embedder = embedder  # for queries; documents are embedded by the backlog's task
        self.exact_below = exact_below
        self.written = threading.Event()  # set after a commit that stored a new item (wakes the embedding task)
        self._query_vectors: Lru[tuple[int, str], tuple[list[float], str]] = Lru(query_cache)
        # both legs rank from the projects' postings and vectors kept in this process (``pgstore/project_copies.py``)
        self.copies = ProjectCopies() if copies else None
        self.keyword = KeywordLeg(copies=self.copies)
        self.totals = ChainTotals()  # the projects' memories and characters, for the SessionStart context
        self._exact = TtlCache(PLAN_TTL)  # (tenant, projects) -> whether their vectors are scanned exactly
        self._project_of = TtlCache(PROJECT_TTL)  # (tenant, project name) -> its id

    # -- projects -----------------------------------------------------------------------------------------
    @staticmethod
    def _project_id(cur: psycopg.Cursor, tenant_id: int, name: str, *, create: bool) -> int | None:
        row = cur.execute("SELECT id FROM projects WHERE tenant_id = %s AND name = %s", (tenant_id, name)).fetchone()
        if row or not create:
            return row[0] if row else None
        cur.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, %s) ON CONFLICT (tenant_id, name) DO NOTHING",
                    (tenant_id, name))
        row = cur.execute("SELECT id FROM projects WHERE tenant_id = %s AND name = %s", (tenant_id, name)).fetchone()
        assert row is not None
        return int(row[0])

    def projects(self, tenant_id: int, *, pin: int | None = None) -> list[dict[str, Any]]:
        return read_as(self.pool, tenant_id, lambda cur: self.projects_in(cur, tenant_id, pin=pin))

    @staticmethod
    def projects_in(cur: psycopg.Cursor, tenant_id: int, *, pin: int | None = None) -> list[dict[str, Any]]:
        """The tenant's projects (within ``pin``) by name, each with its items and newest item's time."""
        rows = cur.execute(
            "SELECT p.id, p.name, count(i.id), max(i.created_at_epoch) FROM projects p"
            " LEFT JOIN items i ON i.project_id = p.id AND i.tenant_id = p.tenant_id"
            " WHERE p.tenant_id = %s AND (%s::bigint IS NULL OR p.id = %s)"
            " GROUP BY p.id, p.name ORDER BY p.name", (tenant_id, pin, pin)).fetchall()
        return [{"name": name, "items": count, "last_item_at_epoch": last} for _, name, count, last in rows]

    def project_ids(self, tenant_id: int, names: Sequence[str], *, pin: int | None = None) -> list[int]:
        return read_as(self.pool, tenant_id, lambda cur: self.project_ids_in(cur, tenant_id, names, pin=pin))

    def project_ids_in(self, cur: psycopg.Cursor, tenant_id: int, names: Sequence[str], *,
                       pin: int | None = None) -> list[int]:
        """The ids of the tenant's projects named (all when none is), within ``pin``, in the open transaction.
        A named project's id is kept ``PROJECT_TTL`` seconds (a project keeps its id; one not made yet is asked
        for again every time)."""
        known = [self._project_of.get((tenant_id, name)) for name in dict.fromkeys(names)]
        if names and None not in known:
            ids = [int(i) for i in known]  # type: ignore[call-overload]
        elif names:
            rows = cur.execute("SELECT id, name FROM projects WHERE tenant_id = %s AND name = ANY(%s)",
                               (tenant_id, list(names))).fetchall()
            for project_id, name in rows:
                self._project_of.put((tenant_id, name), int(project_id))
            ids = [int(r[0]) for r in rows]
        else:
            ids = [int(r[0]) for r in cur.execute("SELECT id FROM projects WHERE tenant_id = %s", (tenant_id,))]
        return [i for i in ids if i == pin] if pin is not None else ids

    # -- writes -------------------------------------------------------------------------------------------
    def add(self, tenant_id: int, item: NewItem, *, pin: int | None = None, revive: bool = True,
            actor: Actor | None = None) -> Saved:
        """Store ``item`` for the tenant (dedupe by project and content hash). A forgotten content is refused
        unless ``revive`` (an explicit save brings it back, as ``memcairn add`` does locally)."""
        ready = prepare(item)
        with self.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
            saved = self.insert(cur, tenant_id, ready, pin=pin, revive=revive, actor=actor)
        if saved.created:
            self.written.set()
        return saved

    def insert(self, cur: psycopg.Cursor, tenant_id: int, ready: Prepared, *,
               pin: int | None, revive: bool, actor: Actor | None) -> Saved:
        """Store one prepared item inside the caller's open transaction for ``tenant_id`` (``add``, and the
        ingest queue's consumer, which stores a claimed batch in one transaction)."""
        item, digest = ready.item, ready.digest
        project_id = self._project_id(cur, tenant_id, item.project, create=pin is None)
        if project_id is None or (pin is not None and project_id != pin):
            raise NotFoundError(f"this key may only write to its own project, not {item.project!r}")
        if revive:
            cur.execute("DELETE FROM forgotten WHERE tenant_id = %s AND project_id = %s AND content_hash = %s",
                        (tenant_id, project_id, digest))
        elif cur.execute("SELECT 1 FROM forgotten WHERE tenant_id = %s AND project_id = %s AND content_hash = %s",
                         (tenant_id, project_id, digest)).fetchone():
            return Saved(0, False, forgotten=True)
        session_id = None
        if item.session:
            session_id = self._session_id(cur, tenant_id, project_id, item.session, item.platform_source or "unknown")
        who = actor or Actor()
        # the item, its backlog row, its audit row and its change in one statement (one round trip, not four)
        row = cur.execute(
            "WITH new AS (INSERT INTO items (tenant_id, project_id, session_id, kind, type, title, text,"
            f"  content_hash, created_by, created_at_epoch, {item_fields.COLUMNS}) VALUES (%(t)s, %(p)s, %(s)s,"
            "  %(kind)s, %(type)s, %(title)s, %(text)s, %(hash)s, %(key)s, %(epoch)s, "
            + ", ".join(f"%({n})s" for n in item_fields.WRITTEN_NAMES) + ")"
            "  ON CONFLICT (tenant_id, project_id, content_hash) DO NOTHING RETURNING id, number),"
            " queued AS (INSERT INTO embedding_backlog (item_id, tenant_id) SELECT id, %(t)s FROM new),"
            " audited AS (INSERT INTO audit_log (tenant_id, key_id, actor, action, target, request_id)"
            "  SELECT %(t)s, %(key)s, %(actor)s, 'memories.create', number::text, %(request)s FROM new),"
            " changed AS (INSERT INTO changes (tenant_id, project_id, item_id, item_number, op)"
            "  SELECT %(t)s, %(p)s, id, number, 'stored' FROM new)"
            " SELECT id, number FROM new",
            {"t": tenant_id, "p": project_id, "s": session_id, "kind": item.kind, "type": item.type,
             "title": item.title or "", "text": item.text or "", "hash": digest, "key": who.key_id,
             "epoch": ready.epoch, "actor": audit_actor(who), "request": who.request_id,
             **item_fields.values(item)}).fetchone()
        if row:
            return Saved(int(row[0]), True, number=int(row[1]))
        found = cur.execute("SELECT id, number FROM items WHERE tenant_id = %s AND project_id = %s"
                            " AND content_hash = %s", (tenant_id, project_id, digest)).fetchone()
        assert found is not None
        return Saved(int(found[0]), False, number=int(found[1]))

    def insert_many(self, cur: psycopg.Cursor, tenant_id: int,
                    batch: Sequence[tuple[Prepared, int | None, Actor]]) -> list[Saved]:
        """Store a batch of captured items (each with the pin and the actor that sent it) inside the caller's
        open transaction for ``tenant_id``, as ``insert`` with ``revive=False`` stores each, in a fixed handful of
        statements whatever the batch's size: the ingest queue's consumer, which would otherwise give up the
        interpreter's lock to the request threads at every one of several round trips per item. One result per
        entry, in order; a repeated content is created once (its first entry)."""
        if not batch:
            return []
        creatable = sorted({r.item.project for r, pin, _ in batch if pin is None})
        if creatable:
            cur.execute("INSERT INTO projects (tenant_id, name) SELECT %s, unnest(%s::text[])"
                        " ON CONFLICT (tenant_id, name) DO NOTHING", (tenant_id, creatable))
        names = sorted({r.item.project for r, _, _ in batch})
        project = dict(cur.execute("SELECT name, id FROM projects WHERE tenant_id = %s AND name = ANY(%s)",
                                   (tenant_id, names)).fetchall())
        for ready, pin, _ in batch:
            if project.get(ready.item.project) is None or (pin is not None and project[ready.item.project] != pin):
                raise NotFoundError(f"this key may only write to its own project, not {ready.item.project!r}")
        wanted = sorted({(project[r.item.project], r.item.platform_source or "unknown", r.item.session)
                         for r, _, _ in batch if r.item.session})
        session: dict[tuple[int, str, str], int] = {}
        if wanted:
            columns = [list(c) for c in zip(*wanted, strict=True)]
            cur.execute("INSERT INTO sessions (tenant_id, project_id, platform, agent_session_id)"
                        " SELECT %s, * FROM unnest(%s::bigint[], %s::text[], %s::text[])"
                        " ON CONFLICT (tenant_id, project_id, platform, agent_session_id) DO NOTHING",
                        (tenant_id, *columns))
            session = {(p, pl, a): i for i, p, pl, a in cur.execute(
                "SELECT id, project_id, platform, agent_session_id FROM sessions WHERE tenant_id = %s AND"
                " (project_id, platform, agent_session_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[],"
                " %s::text[]))", (tenant_id, *columns))}
        rows = []
        for ready, _, actor in batch:
            item, p = ready.item, project[ready.item.project]
            s = session[(p, item.platform_source or "unknown", item.session)] if item.session else None
            rows.append((p, s, item.kind, item.type, item.title or "", item.text or "", ready.digest, actor.key_id,
                         ready.epoch, audit_actor(actor), actor.request_id, *item_fields.values(item).values()))
        columns = [list(c) for c in zip(*rows, strict=True)]
        made = {(p, h): int(i) for i, p, h in cur.execute(_INSERT_MANY, (*columns, tenant_id)).fetchall()}
        keys = [(r[0], r[6]) for r in rows]
        missing = sorted(set(keys) - set(made))
        existing: dict[tuple[int, str], int] = {}
        if missing:
            existing = {(p, h): int(i) for i, p, h in cur.execute(
                "SELECT id, project_id, content_hash FROM items WHERE tenant_id = %s AND (project_id, content_hash)"
                " IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))",
                (tenant_id, [p for p, _ in missing], [h for _, h in missing])).fetchall()}
        saved: list[Saved] = []
        for key in keys:
            if key in made:  # the first entry of a content created it; a repeat finds it
                existing[key] = made.pop(key)
                saved.append(Saved(existing[key], True))
            elif key in existing:
                saved.append(Saved(existing[key], False))
            else:
                saved.append(Saved(0, False, forgotten=True))
        return saved

    @staticmethod
    def _session_id(cur: psycopg.Cursor, tenant_id: int, project_id: int, agent_session: str, platform: str) -> int:
        cur.execute("INSERT INTO sessions (tenant_id, project_id, agent_session_id, platform) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (tenant_id, project_id, platform, agent_session_id) DO NOTHING",
                    (tenant_id, project_id, agent_session, platform))
        row = cur.execute("SELECT id FROM sessions WHERE tenant_id = %s AND project_id = %s AND platform = %s"
                          " AND agent_session_id = %s", (tenant_id, project_id, platform, agent_session)).fetchone()
        assert row is not None
        return int(row[0])

    def start_session(self, tenant_id: int, project: str, agent_session: str, platform: str, *,
                      pin: int | None = None, actor: Actor | None = None) -> int:
        """The session's id (made when new) under the project; a pinned key only under its project."""
        with self.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
            return self.start_session_in(cur, tenant_id, project, agent_session, platform, pin=pin, actor=actor)

    def start_session_in(self, cur: psycopg.Cursor, tenant_id: int, project: str, agent_session: str, platform: str,
                         *, pin: int | None = None, actor: Actor | None = None) -> int:
        """``start_session`` in the caller's open transaction for ``tenant_id``."""
        for name, value in (("project", project), ("session", agent_session), ("platform", platform)):
            if not value.strip() or len(value) > 200:
                raise ValidationError(f"{name} must be 1 to 200 characters")
        project_id = self._project_id(cur, tenant_id, project, create=pin is None)
        if project_id is None or (pin is not None and project_id != pin):
            raise NotFoundError(f"this key may only write to its own project, not {project!r}")
        session_id = self._session_id(cur, tenant_id, project_id, agent_session, platform)
        audit(cur, tenant_id, "sessions.start", actor, str(session_id))
        return session_id

    def end_session(self, tenant_id: int, agent_session: str, platform: str, status: str = "completed", *,
                    pin: int | None = None, actor: Actor | None = None) -> int:
        """Mark the agent's session ended (in every project of the tenant, within the pin); how many were."""
        with self.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
            return self.end_session_in(cur, tenant_id, agent_session, platform, status, pin=pin, actor=actor)

    @staticmethod
    def end_session_in(cur: psycopg.Cursor, tenant_id: int, agent_session: str, platform: str,
                       status: str = "completed", *, pin: int | None = None, actor: Actor | None = None) -> int:
        """``end_session`` in the caller's open transaction for ``tenant_id``."""
        ended = cur.execute(
            "UPDATE sessions SET status = %s, ended_at = now() WHERE tenant_id = %s AND agent_session_id = %s"
            " AND platform = %s AND (%s::bigint IS NULL OR project_id = %s) RETURNING id",
            (status, tenant_id, agent_session, platform, pin, pin)).fetchall()
        for (session_id,) in ended:
            audit(cur, tenant_id, "sessions.end", actor, str(session_id))
        return len(ended)

    def forget(self, tenant_id: int, item_id: int, *, pin: int | None = None, actor: Actor | None = None) -> bool:
        """Delete the item and mark its content forgotten in its project; False when not visible."""
        with self.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
            return self.forget_in(cur, tenant_id, item_id, pin=pin, actor=actor)

    @staticmethod
    def forget_in(cur: psycopg.Cursor, tenant_id: int, item_id: int, *, pin: int | None = None,
                  actor: Actor | None = None) -> bool:
        """``forget`` in the caller's open transaction for ``tenant_id``."""
        row = cur.execute("DELETE FROM items WHERE tenant_id = %s AND id = %s AND (%s::bigint IS NULL OR"
                          " project_id = %s) RETURNING project_id, content_hash, number",
                          (tenant_id, item_id, pin, pin)).fetchone()
        if not row:
            return False
        cur.execute("INSERT INTO forgotten (tenant_id, project_id, content_hash) VALUES (%s, %s, %s)"
                    " ON CONFLICT DO NOTHING", (tenant_id, row[0], row[1]))
        audit(cur, tenant_id, "memories.forget", actor, str(row[2]))
        _changed(cur, tenant_id, row[0], item_id, "forgotten", row[2])
        return True

    def forget_content(self, tenant_id: int, ready: Prepared, *, pin: int | None = None, actor: Actor | None = None,
                       replacement: Prepared | None = None) -> tuple[int | None, int | None]:
        """Forget a memory by its content, as a captured event describes it: the content is marked forgotten in
        its project (so a copy still waiting in the ingest queue is refused when it is stored) and the item
        holding it, if stored, is deleted. With ``replacement`` (a memory edited where it was captured), that
        version is stored in the same transaction, even when its content was forgotten (as an explicit save).
        Returns (the deleted item's number or None, the replacement's number or None): the API's ids.

        Raises:
            NotFoundError: a pinned key names another project."""
        with self.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
            project_id = self._project_id(cur, tenant_id, ready.item.project, create=pin is None)
            if project_id is None or (pin is not None and project_id != pin):
                raise NotFoundError(f"this key may only forget in its own project, not {ready.item.project!r}")
            cur.execute("INSERT INTO forgotten (tenant_id, project_id, content_hash) VALUES (%s, %s, %s)"
                        " ON CONFLICT DO NOTHING", (tenant_id, project_id, ready.digest))
            # Copies still queued go unstored. Their jobs are locked first, as a consumer locks them: one that is
            # storing a copy right now holds its job, so this waits for its commit and the item it stored is then
            # visible to the delete below (its insert may have checked the marks before this one existed).
            queued = [r[0] for r in cur.execute(
                "SELECT j.queue_id FROM ingest_jobs j JOIN ingest_queue q ON q.id = j.queue_id"
                " AND q.tenant_id = j.tenant_id WHERE q.tenant_id = %s AND q.payload->>'hash' = %s"
                " AND q.payload->'memory'->>'project' = %s FOR UPDATE OF j",
                (tenant_id, ready.digest, ready.item.project)).fetchall()]
            if queued:
                cur.execute("DELETE FROM ingest_queue WHERE tenant_id = %s AND id = ANY(%s)", (tenant_id, queued))
            row = cur.execute("DELETE FROM items WHERE tenant_id = %s AND project_id = %s AND content_hash = %s"
                              " RETURNING id, number", (tenant_id, project_id, ready.digest)).fetchone()
            number = int(row[1]) if row else None
            audit(cur, tenant_id, "memories.forget", actor, str(number) if row else f"content {ready.digest}")
            if row is not None:
                _changed(cur, tenant_id, project_id, int(row[0]), "forgotten", number)
            saved = None if replacement is None else self.insert(cur, tenant_id, replacement, pin=pin, revive=True,
                                                                  actor=actor)
        if saved is not None and saved.created:
            self.written.set()
        return number, None if saved is None else saved.number

    def latest_change(self, tenant_id: int) -> int:
        with self.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
            row = cur.execute("SELECT coalesce(max(number), 0) FROM changes WHERE tenant_id = %s",
                              (tenant_id,)).fetchone()
        return int(row[0]) if row else 0

    def changes(self, tenant_id: int, after: int, project_ids: Sequence[int] | None, limit: int = 100
                ) -> list[dict[str, Any]]:
        """Memories stored and forgotten after change ``after`` (the tenant's own numbering, migration 12), oldest
        first, in the projects (all when None)."""
        with self.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
            rows = cur.execute(
                "SELECT c.number, c.op, c.item_number, p.name, (extract(epoch FROM c.at) * 1000)::bigint FROM changes c"
                " JOIN projects p ON p.id = c.project_id AND p.tenant_id = c.tenant_id"
                " WHERE c.tenant_id = %s AND c.number > %s AND c.op <> 'embedded'"
                " AND (%s::bigint[] IS NULL OR c.project_id = ANY(%s))"
                " ORDER BY c.number LIMIT %s",
                (tenant_id, after, None if project_ids is None else list(project_ids),
                 None if project_ids is None else list(project_ids), limit)).fetchall()
        return [{"seq": seq, "op": op, "id": item_id, "project": project, "at_epoch": at}
                for seq, op, item_id, project, at in rows]

    # -- reads --------------------------------------------------------------------------------------------
    @staticmethod
    def _record(row: Sequence[Any]) -> dict[str, Any]:
        keys = ("id", "project", "kind", "type", "title", "text", "created_at_epoch", "content_hash", "session")
        return {**dict(zip(keys, row[:len(keys)], strict=True)), **item_fields.read(row[len(keys):])}

    def get(self, tenant_id: int, item_id: int, *, pin: int | None = None) -> dict[str, Any]:
        found = self.get_many(tenant_id, [item_id], pin=pin)
        if not found:
            raise NotFoundError(f"no memory #{item_id}")
        return found[0]

    def get_many(self, tenant_id: int, ids: Sequence[int], *, pin: int | None = None) -> list[dict[str, Any]]:
        return read_as(self.pool, tenant_id, lambda cur: self.get_many_in(cur, tenant_id, ids, pin=pin))

    def get_many_in(self, cur: psycopg.Cursor, tenant_id: int, ids: Sequence[int], *,
                    pin: int | None = None) -> list[dict[str, Any]]:
        rows = cur.execute(f"SELECT {RECORD_COLUMNS} FROM items i WHERE i.tenant_id = %s AND i.id = ANY(%s)"
                           " AND (%s::bigint IS NULL OR i.project_id = %s)",
                           (tenant_id, list(ids), pin, pin)).fetchall()
        by_id = {row[0]: self._record(row) for row in rows}
        return [by_id[i] for i in ids if i in by_id]

    def semantic_leg(self, cur: psycopg.Cursor, tenant_id: int, project_ids: list[int], query: str,
                     limit: int) -> list[tuple[int, float]]:
        """``nearest`` for the query's text: its cached embedding, as the copies or SQL take it (nothing without
        a model)."""
        if self.embedder is None or not query.strip():
            return []
        vector, literal = self._query(tenant_id, query)
        return self.nearest(cur, tenant_id, project_ids, vector if self.copies is not None else literal, limit)

    def query_vector(self, tenant_id: int, query: str) -> list[float]:
        """The query's embedding, from a small LRU when this tenant asked the same query lately (an agent
        repeats its searches; the model is the costliest step of a search). Keyed by tenant too, so how fast a
        search answers never tells one tenant what another searched for."""
        return self._query(tenant_id, query)[0]

    def knows_query(self, tenant_id: int, query: str) -> bool:
        """Whether the query's embedding is kept (searching by it needs no model)."""
        return self._query_vectors.get((tenant_id, query)) is not None

    def _query(self, tenant_id: int, query: str) -> tuple[list[float], str]:
        """The query's embedding and its pgvector literal (kept with it: writing 384 numbers is a search's
        costliest step after the model)."""
        assert self.embedder is not None
        key = (tenant_id, query)
        if (kept := self._query_vectors.get(key)) is not None:
            return kept
        before_waiting("embedding the query")
        vector = list(self.embedder.embed_query(query))
        return self._query_vectors.put(key, (vector, vector_literal(vector)))

    def nearest(self, cur: psycopg.Cursor, tenant_id: int, project_ids: list[int],
                vector: Sequence[float] | str, limit: int) -> list[tuple[int, float]]:
        """(id, cosine similarity of its best chunk) of the nearest items, best first: from the projects' vectors
        in this process's copies (``vector`` a sequence of numbers), else in SQL: an exact scan when the projects
        hold fewer than ``exact_below`` vectors, else the HNSW index with iterative scan (asked for
        ``CHUNKS_PER_ITEM`` chunks an item, each item kept at its best)."""
        if self.copies is not None and not isinstance(vector, str):
            copies = self.copies.current(cur, tenant_id, project_ids, vectors=True)
            if copies is not None:
                query = np.asarray(vector, np.float32)
                query /= float(np.linalg.norm(query)) or 1.0
                hits = [hit for c in copies for hit in c.vectors.nearest(query, limit)]  # type: ignore[union-attr]
                return sorted(hits, key=lambda hit: (-hit[1], -hit[0]))[:limit]
        before_waiting("ranking vectors in SQL")
        literal = vector if isinstance(vector, str) else vector_literal(vector)  # str: a literal already
        scope = (tenant_id, tuple(sorted(project_ids)))
        known = self._exact.get(scope)
        if known is None:  # the plan of these projects is chosen again every ``PLAN_TTL`` seconds
            known = self.vector_count(cur, tenant_id, project_ids) < self.exact_below
            self._exact.put(scope, known)
        exact = bool(known)
        if not exact:
            cur.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        rows = cur.execute(nearest_sql(exact=exact), {"q": literal, "t": tenant_id, "p": project_ids,
                                                      "n": limit if exact else limit * CHUNKS_PER_ITEM}).fetchall()
        best: dict[int, float] = {}
        for item_id, similarity in rows:
            best[int(item_id)] = max(best.get(int(item_id), -2.0), float(similarity))
        hits = sorted(best.items(), key=lambda hit: (-hit[1], -hit[0]))[:limit]  # relaxed order: re-sort
        return hits

    def vector_count(self, cur: psycopg.Cursor, tenant_id: int, project_ids: list[int]) -> int:
        """The projects' chunk vectors, counted up to ``exact_below`` only (a bounded index scan)."""
        row = cur.execute("SELECT count(*) FROM (SELECT 1 FROM item_vectors WHERE tenant_id = %s"
                          " AND project_id = ANY(%s) LIMIT %s) AS bounded",
                          (tenant_id, project_ids, self.exact_below)).fetchone()
        return int(row[0]) if row else 0

# A batch's items with their backlog, audit and change rows in one statement (``insert_many``): forgotten
# content is passed over; the audit row names the first entry of each content (its key and request).
_INSERT_MANY = f"""
WITH v AS (
  SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                       %s::text[], %s::bigint[], %s::text[], %s::text[]{", %s::jsonb[]" * len(item_fields.WRITTEN)})
    WITH ORDINALITY AS v(p, s, kind, type, title, text, hash, key, epoch, actor, request, {item_fields.COLUMNS}, n)),
t AS (SELECT %s::bigint AS id),
new AS (
  INSERT INTO items (tenant_id, project_id, session_id, kind, type, title, text, content_hash, created_by,
                     created_at_epoch, {item_fields.COLUMNS})
  SELECT t.id, v.p, v.s, v.kind, v.type, v.title, v.text, v.hash, v.key, v.epoch,
         {", ".join(f"v.{n}" for n in item_fields.WRITTEN_NAMES)} FROM v, t
  WHERE NOT EXISTS (SELECT 1 FROM forgotten f WHERE f.tenant_id = t.id AND f.project_id = v.p
                    AND f.content_hash = v.hash)
  ORDER BY v.n
  ON CONFLICT (tenant_id, project_id, content_hash) DO NOTHING RETURNING id, project_id, content_hash, number),
first AS (SELECT DISTINCT ON (p, hash) * FROM v ORDER BY p, hash, n),
queued AS (INSERT INTO embedding_backlog (item_id, tenant_id) SELECT new.id, t.id FROM new, t),
audited AS (INSERT INTO audit_log (tenant_id, key_id, actor, action, target, request_id)
  SELECT t.id, first.key, first.actor, 'memories.create', new.number::text, first.request
  FROM new JOIN first ON first.p = new.project_id AND first.hash = new.content_hash, t),
changed AS (INSERT INTO changes (tenant_id, project_id, item_id, item_number, op)
  SELECT t.id, new.project_id, new.id, new.number, 'stored' FROM new, t ORDER BY new.id)
SELECT id, project_id, content_hash FROM new
"""


def _changed(cur: psycopg.Cursor, tenant_id: int, project_id: int, item_id: int, op: str,
             number: int | None = None) -> None:
    cur.execute("INSERT INTO changes (tenant_id, project_id, item_id, item_number, op) VALUES (%s, %s, %s, %s, %s)",
                (tenant_id, project_id, item_id, number, op))


def _clean(value: str | None) -> str | None:
    """Secrets and ``<private>`` parts never reach the team's database."""
    return None if value is None else redact_secrets(strip_private(value))
