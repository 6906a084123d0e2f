"""A server process's copies of the projects it searches: each one's keyword postings and chunk vectors, so a
search ranks both legs in memory instead of asking PostgreSQL to rank them. PostgreSQL stays the truth.

Why: at 1,000 memories a project a fused search's database time was the keyword ranking statement (match,
``ts_rank`` of every match, BM25 over the best 200) and the exact vector scan (a distance for each of the
project's chunk rows, ~2 us a row with the row read and grouped): about 6.5 of its 8 ms. The same numbers in
memory answer in a fraction of that, without a statement.

What a copy holds: the rows' lexemes and weighted occurrences, read from the ``fts`` column PostgreSQL maintains
(exactly what the SQL ranking reads), their lengths and times; and, once the project is searched by meaning, its
chunk vectors (``item_vectors``) as one float32 matrix, normalised so a product is the cosine pgvector computes.

How it stays current: every write of an item, its vectors or its forgetting writes a change row in its
transaction, and the change names that transaction (``changes.xid``, migration 7). A copy remembers the oldest
transaction still running when it last read (``pg_snapshot_xmin``, its ``horizon``): every change it has not
applied belongs to that transaction or a later one, so one indexed read of the changes at or above the horizon
finds them all, although sequence numbers are not handed out in commit order (a change numbered 100 may commit
after 101). A change read twice is applied once (``applied``; applying is idempotent besides). A stored memory's
postings and an embedded one's vectors are read by id; a forgotten one is masked. A backlog over
``MAX_APPLIED`` changes reads the project again whole. Each search brings its projects' copies up to date in its
own transaction before it ranks, so it sees every write committed before it started. Only a transaction that has
written nothing may do so (it would read its own uncommitted rows): the server's read routes never write.

Memory: per posting a row number and a weighted count (8 bytes); per vector 1,536 bytes. At most ``MAX_ROWS``
rows and ``MAX_VECTORS`` vectors are kept, the projects searched longest ago dropped first; a search over more
ranks in SQL as before. At 100k synthetic memories in 100 projects, all searched, a server process's resident
memory was ~540 MB (~175 MB without the copies).
"""

from __future__ import annotations

import threading
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import psycopg

from memcairn.core.errors import WouldWait
from memcairn.pgstore.waits import before_waiting, may_wait

MAX_ROWS = 500_000
MAX_VECTORS = 150_000  # chunk vectors kept (230 MB of float32)
MAX_APPLIED = 5_000  # changes behind a copy past which the project is read again whole
# What a read that must not wait (``pgstore/waits.py``) may do itself: apply this many changes, read a project of
# this many memories or vectors whole (~2 ms at 100 memories, ~18 ms at 1,000; their vectors ~4 and ~40 ms);
# beyond, a thread does it. Reading on the loop is no slower than on a thread (the same interpreter lock), and a
# read sent to a thread waits behind the reads the loop answers: the first 800 keyword searches of 100 projects
# of 1,000 memories had a p95 of 565-592 ms reading them on the loop, 709-875 ms on threads (threads only, as
# before reads ran on the loop: 638-676 ms)
QUICK_CATCH_UP = 200
QUICK_LOAD_ROWS = 2_000
QUICK_LOAD_VECTORS = 2_000
TITLE_WEIGHT = 4  # a lexeme's occurrence in the title counts four times (its weight-A positions), as in SQL

# A row's lexemes and each one's weighted occurrences (its positions, the title's counted TITLE_WEIGHT times).
_POSTINGS = ("SELECT i.id, i.doc_tokens, i.created_at_epoch, x.lexemes, x.freqs, i.project_id FROM items i"
             " LEFT JOIN LATERAL (SELECT array_agg(u.lexeme) AS lexemes, array_agg(cardinality(u.weights)"
             f" + {TITLE_WEIGHT - 1} * cardinality(array_positions(u.weights, 'A'))) AS freqs FROM unnest(i.fts) AS u)"
             " AS x ON true WHERE i.tenant_id = %s")
_VECTORS = "SELECT item_id, embedding::real[], project_id FROM item_vectors WHERE tenant_id = %s"
_XMIN = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"


class Vectors:
    """A project's chunk vectors, normalised, with the item of each row. Changed under its project's lock
    (``replace``, ``drop``, ``settle``); ``nearest`` reads without it, from arrays replaced whole."""

    def __init__(self) -> None:
        # (item of each row, the rows, which rows are live): one tuple, so a reader sees one version of all three
        self._arrays = (np.zeros(0, np.int64), np.zeros((0, 0), np.float32), np.zeros(0, bool))
        self._pending: list[tuple[int, list[float]]] = []
        self._rows_of: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._arrays[0]) + len(self._pending)

    def append(self, item_id: int, chunk: list[float]) -> None:
        self._pending.append((item_id, chunk))

    def replace(self, item_id: int, chunks: list[list[float]]) -> None:
        """The item's vectors are ``chunks`` from now on (its vectors are written whole)."""
        self.drop(item_id)
        self._pending += [(item_id, c) for c in chunks]

    def drop(self, item_id: int) -> None:
        if self._pending:
            self._pending = [p for p in self._pending if p[0] != item_id]
        alive = self._arrays[2]
        for row in self._rows_of.pop(item_id, ()):
            alive[row] = False

    def settle(self) -> None:
        """Append the vectors added since the last call to the arrays."""
        if not self._pending:
            return
        items, matrix, alive = self._arrays
        added = np.asarray([v for _, v in self._pending], np.float32)
        norms = np.linalg.norm(added, axis=1, keepdims=True)
        added /= np.where(norms > 0, norms, 1.0)
        start = len(items)
        for n, (item_id, _) in enumerate(self._pending):
            self._rows_of.setdefault(item_id, []).append(start + n)
        self._arrays = (np.concatenate([items, np.asarray([i for i, _ in self._pending], np.int64)]),
                        added if not start else np.concatenate([matrix, added]),
                        np.concatenate([alive, np.ones(len(added), bool)]))
        self._pending = []

    def nearest(self, query: np.ndarray, limit: int) -> list[tuple[int, float]]:
        """(item id, cosine similarity of its best chunk), best first (ties: the newer id)."""
        items, matrix, alive = self._arrays
        if not len(items) or limit <= 0:
            return []
        similarity = matrix @ query
        similarity[~alive] = -2.0
        take = min(len(similarity), limit * 4)  # an item may hold several of the best rows
        while True:
            rows = np.argpartition(-similarity, take - 1)[:take] if take < len(similarity) else np.arange(take)
            rows = rows[alive[rows]]
            rows = rows[np.argsort(-similarity[rows], kind="stable")]
            found, first = np.unique(items[rows], return_index=True)  # each item at its best chunk
            if len(found) >= limit or take >= len(similarity):
                best = similarity[rows[first]]
                order = np.lexsort((-found, -best))[:limit]  # best first, then the newer id
                return [(int(found[i]), float(best[i])) for i in order]
            take = min(len(similarity), take * 4)


@dataclass
class ProjectCopy:
    """One project's rows, the postings of each lexeme they hold and, once read, its vectors."""

    project_id: int
    horizon: int  # changes of transactions older than this one are in the copy
    ids: array = field(default_factory=lambda: array("q"))
    lengths: array = field(default_factory=lambda: array("l"))
    epochs: array = field(default_factory=lambda: array("q"))
    alive: bytearray = field(default_factory=bytearray)
    row_of: dict[int, int] = field(default_factory=dict)
    postings: dict[str, tuple[array, array]] = field(default_factory=dict)
    applied: dict[int, int] = field(default_factory=dict)  # seq -> xid of changes at or above the horizon
    vectors: Vectors | None = None
    rows: int = 0  # live rows
    words: int = 0  # their total length
    dead: int = 0

    def add(self, item_id: int, length: int, epoch: int, lexemes: Sequence[str], freqs: Sequence[int]) -> None:
        if item_id in self.row_of:  # read twice (by the load and a change): once is enough
            return
        row = len(self.ids)
        self.row_of[item_id] = row
        self.ids.append(item_id)
        self.lengths.append(length)
        self.epochs.append(epoch)
        self.alive.append(1)
        self.rows += 1
        self.words += length
        for lexeme, freq in zip(lexemes, freqs, strict=True):
            held = self.postings.get(lexeme)
            if held is None:
                held = self.postings[lexeme] = (array("l"), array("f"))
            held[0].append(row)
            held[1].append(freq)

    def drop(self, item_id: int) -> None:
        if self.vectors is not None:
            self.vectors.drop(item_id)
        row = self.row_of.get(item_id)
        if row is None or not self.alive[row]:
            return
        self.alive[row] = 0
        self.rows -= 1
        self.words -= self.lengths[row]
        self.dead += 1

    def holding(self, lexeme: str) -> int:
        """Live rows holding the lexeme."""
        held = self.postings.get(lexeme)
        if held is None:
            return 0
        if not self.dead:
            return len(held[0])
        alive = self.alive
        return sum(alive[r] for r in held[0])

    def matches(self, lexeme: str) -> Iterator[tuple[int, float]]:
        """(row, weighted occurrences) of the live rows holding the lexeme."""
        held = self.postings.get(lexeme)
        if held is None:
            return iter(())
        if not self.dead:
            return zip(held[0], held[1], strict=True)
        alive = self.alive
        return ((r, f) for r, f in zip(held[0], held[1], strict=True) if alive[r])

    def occurrences(self, lexemes: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(each row's item id, its length, and per lexeme each row's weighted occurrences, 0 where the row does not
        hold it or is forgotten) as of now, for ranking in numpy. The arrays are copies: a copy's rows go on being
        appended while it is read."""
        n = len(self.ids)
        alive = np.frombuffer(bytes(self.alive[:n]), np.uint8).astype(bool)
        out: dict[str, np.ndarray] = {}
        for lexeme in lexemes:
            dense = np.zeros(n)
            held = self.postings.get(lexeme)
            if held is not None:
                rows, freqs = np.array(held[0], np.int64), np.array(held[1], np.float64)
                inside = rows < n  # appended after ``n`` was read
                dense[rows[inside]] = freqs[inside]
                dense[~alive] = 0.0
            out[lexeme] = dense
        return np.array(self.ids[:n], np.int64), np.array(self.lengths[:n], np.float64), out

    def epoch_of(self, item_id: int) -> int | None:
        row = self.row_of.get(item_id)
        return self.epochs[row] if row is not None and self.alive[row] else None

    @property
    def size(self) -> tuple[int, int]:
        return len(self.ids), len(self.vectors) if self.vectors is not None else 0


class ProjectCopies:
    """The copies of one process, per project, current to the snapshot of the last search that used them.

    A project's copy is read and brought up to date under that project's lock (searches of other projects go on
    meanwhile); the map of copies and the limits under one short lock. A search ranks from a copy without a lock:
    rows are appended, never moved, and vectors are swapped in whole."""

    def __init__(self, max_rows: int = MAX_ROWS, max_vectors: int = MAX_VECTORS,
                 max_applied: int = MAX_APPLIED) -> None:
        self.max_rows, self.max_vectors, self.max_applied = max_rows, max_vectors, max_applied
        self._lock = threading.Lock()
        self._copies: OrderedDict[int, ProjectCopy] = OrderedDict()  # least recently searched first
        self._project_locks: dict[int, threading.Lock] = {}
        # a request's cursor and the projects it brought up to date: a second use in the same request (the
        # semantic leg after the keyword leg, the candidates' evidence after both) does not read the changes again
        self._polled: weakref.WeakKeyDictionary[psycopg.Cursor, frozenset[int]] = weakref.WeakKeyDictionary()

    def current(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], *,
                vectors: bool = False) -> list[ProjectCopy] | None:
        """The projects' copies, brought up to date in ``cur``'s transaction (read whole the first time, their
        vectors too when ``vectors``); None when they would hold more than the limits allow (rank in SQL)."""
        wanted = sorted({int(p) for p in project_ids})
        with self._lock:
            polled = set(wanted) <= self._polled.get(cur, frozenset())
            locks = [self._project_locks.setdefault(p, threading.Lock()) for p in wanted]
        held_locks: list[threading.Lock] = []
        try:
            for lock in locks:  # in project order: two searches never wait for each other's locks
                if not lock.acquire(blocking=may_wait()):
                    raise WouldWait("another request is bringing a project's copy up to date")
                held_locks.append(lock)
            if not polled:
                held = self._installed(wanted)
                if held:
                    self._catch_up(cur, tenant_id, held)
                for project_id in set(wanted) - {c.project_id for c in held}:
                    self._load(cur, tenant_id, project_id)
            for copy in self._installed(wanted):
                if vectors and copy.vectors is None:
                    self._load_vectors(cur, tenant_id, copy)
                if copy.vectors is not None:
                    copy.vectors.settle()
            with self._lock:
                copies = [self._copies.get(p) for p in wanted]
                if any(c is None or (vectors and c.vectors is None) for c in copies):
                    return None  # over a limit (or one dropped to make room for another)
                for project_id in wanted:
                    self._copies.move_to_end(project_id)
                self._polled[cur] = frozenset(wanted) | self._polled.get(cur, frozenset())
                return copies  # type: ignore[return-value]
        finally:
            for lock in held_locks:
                lock.release()

    def stats(self) -> dict[str, int]:
        with self._lock:
            rows, vectors = self._held()
            return {"projects": len(self._copies), "rows": rows, "vectors": vectors}

    def _installed(self, wanted: Sequence[int]) -> list[ProjectCopy]:
        with self._lock:
            return [self._copies[p] for p in wanted if p in self._copies]

    def _held(self) -> tuple[int, int]:
        sizes = [c.size for c in self._copies.values()]
        return sum(r for r, _ in sizes), sum(v for _, v in sizes)

    def _install(self, copy: ProjectCopy, rows: int, vectors: int) -> bool:
        """Make room for ``rows`` and ``vectors`` more (dropping the copies searched longest ago) and keep
        ``copy``; False when they exceed the limits alone."""
        if rows > self.max_rows or vectors > self.max_vectors:
            return False
        with self._lock:
            held_rows, held_vectors = self._held()
            while self._copies and (held_rows + rows > self.max_rows or held_vectors + vectors > self.max_vectors):
                dropped_rows, dropped_vectors = self._copies.popitem(last=False)[1].size
                held_rows, held_vectors = held_rows - dropped_rows, held_vectors - dropped_vectors
            self._copies[copy.project_id] = copy
            return True

    # -- under the project's lock -----------------------------------------------------------------------------
    def _load(self, cur: psycopg.Cursor, tenant_id: int, project_id: int) -> None:
        # the horizon is read before the rows: an older horizon only re-reads changes the copy already holds
        horizon = int(cur.execute(f"SELECT {_XMIN}").fetchone()[0])  # type: ignore[index]
        quick = "" if may_wait() else f" LIMIT {QUICK_LOAD_ROWS + 1}"
        rows = cur.execute(_POSTINGS + " AND i.project_id = %s" + quick, (tenant_id, project_id)).fetchall()
        if len(rows) > QUICK_LOAD_ROWS:
            before_waiting(f"reading a project of over {QUICK_LOAD_ROWS} memories into this process's copies")
        copy = ProjectCopy(project_id, horizon)
        for item_id, length, epoch, lexemes, freqs, _ in rows:
            copy.add(int(item_id), int(length or 0), int(epoch), lexemes or (), freqs or ())
        self._install(copy, len(rows), 0)

    def _load_vectors(self, cur: psycopg.Cursor, tenant_id: int, copy: ProjectCopy) -> None:
        # A vector written after the copy's horizon and before this read is read again by the next catch-up
        # (replacing an item's vectors is idempotent). One written after the horizon that the catch-ups before
        # this read passed over (the copy held no vectors then) is in this read: the horizon is not older than it.
        quick = "" if may_wait() else f" LIMIT {QUICK_LOAD_VECTORS + 1}"
        rows = cur.execute(_VECTORS + " AND project_id = %s ORDER BY item_id, chunk" + quick,
                           (tenant_id, copy.project_id), binary=True).fetchall()
        if len(rows) > QUICK_LOAD_VECTORS:
            before_waiting(f"reading over {QUICK_LOAD_VECTORS} vectors of a project into this process's copies")
        vectors = Vectors()
        for item_id, embedding, _ in rows:
            vectors.append(int(item_id), embedding)
        if self._install(copy, 0, len(rows)):  # kept (again, as the most recent) with room for its vectors
            copy.vectors = vectors

    def _catch_up(self, cur: psycopg.Cursor, tenant_id: int, copies: list[ProjectCopy]) -> None:
        by_id = {c.project_id: c for c in copies}
        rows = cur.execute(
            f"SELECT {_XMIN}, c.seq, c.project_id, c.item_id, c.op, c.xid::text::bigint FROM (SELECT 1) AS one"
            " LEFT JOIN changes c ON c.tenant_id = %s AND c.project_id = ANY(%s) AND c.xid >= %s::text::xid8"
            " ORDER BY c.seq", (tenant_id, list(by_id), str(min(c.horizon for c in copies)))).fetchall()
        horizon = int(rows[0][0])
        news = [r for r in rows if r[1] is not None and r[5] >= by_id[r[2]].horizon and r[1] not in by_id[r[2]].applied]
        if len(news) > QUICK_CATCH_UP:  # reading their rows takes long enough to count as a wait
            before_waiting(f"catching up with {len(news):,} changes")
        if len(news) > self.max_applied:  # a large backlog (an import): read the projects again
            before_waiting("reading projects whole again after a large import")
            for copy in copies:
                self._load(cur, tenant_id, copy.project_id)
            return
        stored = [int(r[3]) for r in news if r[4] == "stored" and int(r[3]) not in by_id[r[2]].row_of]
        if stored:
            for item_id, length, epoch, lexemes, freqs, project_id in cur.execute(
                    _POSTINGS + " AND i.id = ANY(%s)", (tenant_id, stored)).fetchall():
                copy = by_id.get(int(project_id))
                if copy is not None:
                    copy.add(int(item_id), int(length or 0), int(epoch), lexemes or (), freqs or ())
        embedded = [int(r[3]) for r in news if r[4] == "embedded" and by_id[r[2]].vectors is not None]
        chunks: dict[int, list[list[float]]] = {i: [] for i in embedded}
        if embedded:
            for item_id, embedding, _ in cur.execute(_VECTORS + " AND item_id = ANY(%s) ORDER BY item_id, chunk",
                                                     (tenant_id, embedded), binary=True).fetchall():
                chunks[int(item_id)].append(embedding)
        for _, seq, project_id, item_id, op, xid in news:
            copy = by_id[project_id]
            if op == "forgotten":
                copy.drop(int(item_id))
            elif op == "embedded" and copy.vectors is not None:
                copy.vectors.replace(int(item_id), chunks[int(item_id)])
            copy.applied[int(seq)] = int(xid)
        for copy in copies:
            copy.horizon = max(copy.horizon, horizon)
            copy.applied = {s: x for s, x in copy.applied.items() if x >= copy.horizon}
